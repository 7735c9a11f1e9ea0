//! `--config FILE` of `gatehouse gateway` and `gatehouse node`: read, overridden by flags, and
//! strict about unknown keys.

use std::io::BufRead;
use std::io::BufReader;
use std::process::Stdio;

use crate::suite::support::Process;
use crate::suite::support::gatehouse;

#[test]
fn a_gateway_config_file_supplies_the_settings() {
    let temp = tempfile::tempdir().unwrap();
    let state = temp.path().join("state");
    let config = temp.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "state = {:?}\nlisten = \"127.0.0.1:0\"\nmax-concurrent-turns = 4\n",
            state.display().to_string()
        ),
    )
    .unwrap();
    let log = temp.path().join("gateway.log");
    let mut child = gatehouse()
        .args(["gateway", "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let process = Process::from_child(child, log);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert!(
        line.starts_with("gatehouse gateway listening on http://127.0.0.1:"),
        "{line}: {}",
        process.stderr()
    );
    assert!(state.join("operator-token").is_file());
}

#[test]
fn unknown_keys_and_bad_values_in_a_config_file_exit_2_naming_them() {
    let temp = tempfile::tempdir().unwrap();
    let gateway_config = temp.path().join("gateway.toml");
    std::fs::write(
        &gateway_config,
        "state = \"/nonexistent-parent/state\"\nlistn = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let output = gatehouse()
        .args(["gateway", "--config"])
        .arg(&gateway_config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("listn"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let node_config = temp.path().join("node.toml");
    std::fs::write(
        &node_config,
        format!(
            "root = {:?}\nruntime = \"native\"\ncapacity = 2000\n",
            temp.path().join("harness").display().to_string()
        ),
    )
    .unwrap();
    let output = gatehouse()
        .args(["node", "--config"])
        .arg(&node_config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("capacity"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A flag wins over the file.
    let output = gatehouse()
        .args(["node", "--capacity", "3", "--model", "nonsense", "--config"])
        .arg(&node_config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--model"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let missing = gatehouse()
        .args(["gateway", "--config"])
        .arg(temp.path().join("missing.toml"))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
}
