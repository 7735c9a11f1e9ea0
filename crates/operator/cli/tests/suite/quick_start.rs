//! The README's quick start, command by command, against a fresh data directory: the test reads
//! the commands from the README and fails when they are not the ones it runs, so the quick start
//! cannot drift from what works. The build step (`cargo run --release`) is replaced by the binary
//! under test; everything else runs exactly as written.

use std::path::Path;
use std::process::Stdio;

use pretty_assertions::assert_eq;

use crate::suite::support::dirs;
use crate::suite::support::gatehouse;
use crate::suite::up::Up;

/// The quick start's commands, in order, as the README must show them.
const QUICK_START: [&str; 5] = [
    "cargo run --release -p gatehouse-cli -- up",
    "gatehouse chat \"/say hello\"",
    "gatehouse doctor",
    "OPENAI_API_KEY=sk-... gatehouse up --model openai-responses:https://api.openai.com/v1:gpt-5.5",
    "scripts/test",
];

fn repository_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(3)
        .unwrap()
}

/// Returns the lines of the `sh` code blocks in the README's "Quick start" section.
fn readme_quick_start() -> Vec<String> {
    let readme = std::fs::read_to_string(repository_root().join("README.md")).unwrap();
    let section = readme
        .split("\n## Quick start\n")
        .nth(1)
        .expect("the README has a Quick start section");
    let section = section.split("\n## ").next().unwrap();
    let mut commands = Vec::new();
    let mut in_block = false;
    for line in section.lines().map(str::trim) {
        match (in_block, line) {
            (false, "```sh") => in_block = true,
            (true, "```") => in_block = false,
            (true, command) if !command.is_empty() => commands.push(command.to_owned()),
            _ => {}
        }
    }
    commands
}

#[test]
fn the_readme_quick_start_is_what_this_test_runs() {
    assert_eq!(readme_quick_start(), QUICK_START.map(String::from).to_vec());
    // The README's two top commands are the first and the last step.
    let readme = std::fs::read_to_string(repository_root().join("README.md")).unwrap();
    let top = readme.split("\n## ").next().unwrap();
    assert!(top.contains(&format!("```sh\n{}\n```", QUICK_START[0])));
    assert!(top.contains(&format!("```sh\n{}\n```", QUICK_START[4])));
    // Step 4 is CI's own entry point.
    let ci = std::fs::read_to_string(repository_root().join(".ci/run")).unwrap();
    assert!(ci.contains("exec scripts/test"), "{ci}");
}

#[test]
fn the_quick_start_works_on_a_fresh_data_directory() {
    let dirs = dirs();
    // A fresh home for the default data directory ($XDG_DATA_HOME/gatehouse): the commands
    // themselves name no directory, exactly as in the README.
    let data_home = dirs.base.join("xdg-data");
    std::fs::create_dir_all(&data_home).unwrap();
    let gateway_state = data_home.join("gatehouse").join("gateway");
    let logs = dirs.base.join("logs");

    // 1. `gatehouse up` (after the build). The port comes from GATEHOUSE_LISTEN so that tests can
    // run side by side; the command line is the README's.
    let mut command = gatehouse();
    command
        .arg("up")
        .env("XDG_DATA_HOME", &data_home)
        .env("GATEHOUSE_LISTEN", "127.0.0.1:0");
    let up = Up::spawn(command, None, &gateway_state, &logs);
    assert!(
        up.lines[0].starts_with("gatehouse up: listening on http://127.0.0.1:"),
        "{:?}",
        up.lines
    );
    let model_line = up
        .lines
        .iter()
        .find(|line| line.starts_with("model: "))
        .unwrap();
    assert!(
        model_line.starts_with("model: mock")
            && model_line.contains("--model openai-responses:URL:MODEL"),
        "{model_line}"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(up.wait_ready());

    // 2. `gatehouse chat "/say hello"`: the URL comes from GATEHOUSE_URL for the same reason;
    // the token is found in the default data directory.
    let chat = gatehouse()
        .args(["chat", "/say hello"])
        .env("XDG_DATA_HOME", &data_home)
        .env("GATEHOUSE_URL", &up.url)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        chat.status.success(),
        "{}",
        String::from_utf8_lossy(&chat.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&chat.stdout).trim(), "hello");

    // `gatehouse doctor`: nothing fails on this machine.
    let doctor = gatehouse()
        .arg("doctor")
        .env("XDG_DATA_HOME", &data_home)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.status.success(), "{report}");
    assert!(
        report.contains(&format!(
            "pass data.dir: {} exists and is writable",
            data_home.join("gatehouse").display()
        )),
        "{report}"
    );
    drop(up);

    // 3. A real model: the key from the environment, the spec on the command line.
    let mut command = gatehouse();
    command
        .args([
            "up",
            "--model",
            "openai-responses:https://api.openai.com/v1:gpt-5.5",
        ])
        .env("OPENAI_API_KEY", "sk-...")
        .env("XDG_DATA_HOME", &data_home)
        .env("GATEHOUSE_LISTEN", "127.0.0.1:0");
    let up = Up::spawn(command, None, &gateway_state, &logs);
    assert!(
        up.lines.contains(&String::from(
            "model: openai-responses:https://api.openai.com/v1:gpt-5.5 (key from $OPENAI_API_KEY)"
        )),
        "{:?}",
        up.lines
    );
    // The key is never printed.
    assert!(!up.process.stderr().contains("sk-..."));
    drop(up);

    // 4. `scripts/test` is this suite's own entry point; it is executable.
    let script = std::fs::metadata(repository_root().join("scripts/test")).unwrap();
    assert_ne!(
        std::os::unix::fs::PermissionsExt::mode(&script.permissions()) & 0o111,
        0
    );
}
