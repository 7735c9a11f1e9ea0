//! `--help`, `--version` and exit codes.

use std::process::Command;

fn gatehouse() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gatehouse"))
}

#[test]
fn version_prints_the_package_version_and_exits_zero() {
    let output = gatehouse().arg("--version").output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        stdout.trim(),
        format!("gatehouse {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn help_lists_the_subcommands() {
    let output = gatehouse().arg("--help").output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    for subcommand in ["bench", "deploy", "scratch"] {
        assert!(
            stdout.contains(subcommand),
            "--help lacks {subcommand}: {stdout}"
        );
    }
}

#[test]
fn an_unknown_subcommand_is_a_usage_error_with_exit_code_2() {
    let output = gatehouse().arg("no-such-command").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
}
