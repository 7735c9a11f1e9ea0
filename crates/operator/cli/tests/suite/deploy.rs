//! `gatehouse deploy render`: output, determinism, `--out`, and exit code 2 for bad files.

use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::process::Output;

use gatehouse_deploy::manifest::Object;
use pretty_assertions::assert_eq;

fn gatehouse() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gatehouse"))
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../deploy/examples")
        .join(format!("{name}.yaml"))
}

/// Every installation file in `deploy/examples`, by name.
const EXAMPLES: [&str; 6] = [
    "embedded",
    "dedicated-native",
    "dedicated-codex",
    "dedicated-postgres-s3",
    "dedicated-nodes",
    "dedicated-replicas",
];

fn render(config: &Path) -> Output {
    gatehouse()
        .args(["deploy", "render", "--config"])
        .arg(config)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

#[test]
fn render_prints_valid_manifests_for_every_topology() {
    for (name, n_deployments) in [
        ("embedded", 1),
        ("dedicated-native", 2),
        ("dedicated-codex", 2),
    ] {
        let output = render(&example(name));
        assert_eq!(output.status.code(), Some(0), "{name}: {}", stderr(&output));
        let objects = gatehouse_deploy::manifest::parse_manifests(&stdout(&output)).unwrap();
        let deployments = objects
            .iter()
            .filter(|object| matches!(object, Object::Deployment(_)))
            .count();
        assert_eq!(deployments, n_deployments, "{name}");
    }
}

#[test]
fn render_is_byte_identical_across_runs() {
    for name in EXAMPLES {
        let first = render(&example(name));
        let second = render(&example(name));
        assert!(first.status.success());
        assert_eq!(first.stdout, second.stdout, "{name}");
    }
}

#[test]
fn render_out_writes_one_file_per_object_and_refuses_stray_yaml() {
    let out = tempfile::tempdir().unwrap();
    let run = || {
        gatehouse()
            .args(["deploy", "render", "--config"])
            .arg(example("dedicated-codex"))
            .arg("--out")
            .arg(out.path())
            .output()
            .unwrap()
    };
    let output = run();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let mut names: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 10);
    assert_eq!(names[0], "00-serviceaccount-main-gateway.yaml");
    assert_eq!(names[9], "09-deployment-main-harness.yaml");
    let mut joined = String::new();
    for name in &names {
        joined.push_str(&std::fs::read_to_string(out.path().join(name)).unwrap());
    }
    let streamed = render(&example("dedicated-codex"));
    assert_eq!(joined.trim_end(), stdout(&streamed).trim_end());

    // Rendering again into the same directory overwrites the same files.
    assert_eq!(run().status.code(), Some(0));
    std::fs::write(out.path().join("99-secret-stale.yaml"), "kind: Secret\n").unwrap();
    let output = run();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("99-secret-stale.yaml"),
        "{}",
        stderr(&output)
    );
}

/// Writes a variant of an example with one replacement and renders it.
fn render_variant(name: &str, from: &str, to: &str) -> Output {
    let text = std::fs::read_to_string(example(name)).unwrap();
    assert!(text.contains(from), "{name} lacks {from:?}");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("installation.yaml");
    std::fs::write(&config, text.replacen(from, to, 1)).unwrap();
    render(&config)
}

#[test]
fn bad_installation_files_exit_2_naming_the_key_path() {
    let cases = [
        (
            "dedicated-native",
            "      claimUid: 3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b11\n",
            "      claimUid: 3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b11\n      readOnly: true\n",
            "runtime.scratchVolumes[0].readOnly: unknown key",
        ),
        (
            "dedicated-codex",
            "  name: gpt-5\n",
            "  name: {id: gpt-5}\n",
            "model.name: invalid type: map, expected a string",
        ),
        (
            "dedicated-codex",
            "  harnessStorageClassName: standard-rwo\n",
            "",
            "runtime.harnessStorageClassName: missing required key",
        ),
        (
            "embedded",
            "  gatewayStorageClassName: fast-rwo\n",
            "  nodeSelector: {pool: a}\n",
            "runtime.gatewayStorageClassName: missing required key",
        ),
        (
            "dedicated-native",
            "      agentId: main\n",
            "      agentId: other\n",
            "runtime.scratchVolumes[0].agentId: scratch binding is for \"other\" but this installation renders \"main\" [SCRATCH_BINDING_MISMATCH]",
        ),
        (
            "dedicated-native",
            "      namespace: gatehouse-acme\n",
            "      namespace: default\n",
            "runtime.scratchVolumes[0].namespace: scratch binding is for \"default\"",
        ),
    ];
    for (name, from, to, expected) in cases {
        let output = render_variant(name, from, to);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{expected}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(expected),
            "{expected}: {}",
            stderr(&output)
        );
        assert!(output.stdout.is_empty(), "{expected}: printed manifests");
    }
}

#[test]
fn a_missing_installation_file_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let output = render(&dir.path().join("missing.yaml"));
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("cannot read installation file"));
}

#[test]
fn render_with_postgres_and_s3_drops_the_gateway_claim_and_refuses_inline_passwords() {
    let output = render(&example("dedicated-postgres-s3"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let objects = gatehouse_deploy::manifest::parse_manifests(&stdout(&output)).unwrap();
    let claims: Vec<String> = objects
        .iter()
        .filter_map(|object| match object {
            Object::PersistentVolumeClaim(claim) => claim.metadata.name.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert!(claims[0].starts_with("harness-state-"), "{claims:?}");
    let yaml = stdout(&output);
    assert!(yaml.contains("value: s3://gatehouse-media/main"), "{yaml}");
    assert!(yaml.contains("name: PGPASSWORD"), "{yaml}");

    let output = render_variant(
        "dedicated-postgres-s3",
        "postgres://gatehouse@db.internal:5432/",
        "postgres://gatehouse:hunter2@db.internal:5432/",
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("gateway.store.url"),
        "{}",
        stderr(&output)
    );
    assert!(!stderr(&output).contains("hunter2"), "{}", stderr(&output));
    assert!(output.stdout.is_empty());
}

#[test]
fn render_with_gateway_replicas_runs_them_side_by_side_and_refuses_them_on_a_claim() {
    let output = render(&example("dedicated-replicas"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let objects = gatehouse_deploy::manifest::parse_manifests(&stdout(&output)).unwrap();
    let gateway = objects
        .iter()
        .find_map(|object| match object {
            Object::Deployment(deployment)
                if deployment.metadata.name.as_deref() == Some("main-gateway") =>
            {
                deployment.spec.clone()
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(gateway.replicas, Some(3));
    let budgets: Vec<Option<String>> = objects
        .iter()
        .filter_map(|object| match object {
            Object::PodDisruptionBudget(budget) => Some(budget.metadata.name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        budgets,
        vec![
            Some(String::from("main-gateway")),
            Some(String::from("main-harness"))
        ]
    );
    assert!(
        !objects
            .iter()
            .any(|object| matches!(object, Object::PersistentVolumeClaim(_))),
        "the replicas share no claim"
    );

    let output = render_variant(
        "dedicated-nodes",
        "gateway:\n  operatorTokenSecret:\n",
        "gateway:\n  replicas: 2\n  operatorTokenSecret:\n",
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "gateway.replicas: several Gateway replicas share state only through PostgreSQL and S3"
        ),
        "{}",
        stderr(&output)
    );
    assert!(output.stdout.is_empty());
}

/// Renders every example into a directory of its own under `base`, one file per object, and
/// returns the directories.
fn render_examples_into(base: &Path) -> Vec<PathBuf> {
    // Replicas in front of the one Codex node host, which no example shows.
    // Its installation file stays out of `base`, which holds only manifests.
    let configs = tempfile::tempdir().unwrap();
    let codex_replicas = configs.path().join("dedicated-replicas-codex.yaml");
    let text = std::fs::read_to_string(example("dedicated-replicas")).unwrap();
    let second_node = "    - setupCodeSecret:\n        name: main-node-1\n        key: setupCode\n";
    assert!(text.contains("topology: dedicated-native") && text.contains(second_node));
    std::fs::write(
        &codex_replicas,
        text.replacen("topology: dedicated-native", "topology: dedicated-codex", 1)
            .replacen(second_node, "", 1),
    )
    .unwrap();
    EXAMPLES
        .into_iter()
        .map(|name| (name, example(name)))
        .chain([("dedicated-replicas-codex", codex_replicas)])
        .map(|(name, config)| {
            let out = base.join(name);
            let output = gatehouse()
                .args(["deploy", "render", "--config"])
                .arg(config)
                .arg("--out")
                .arg(&out)
                .output()
                .unwrap();
            assert_eq!(output.status.code(), Some(0), "{name}: {}", stderr(&output));
            out
        })
        .collect()
}

/// The Kubernetes version the manifests are checked against: the one the renderer's
/// `k8s-openapi` types are built for (its `v1_33` feature).
const KUBERNETES_VERSION: &str = "1.33.0";

#[test]
fn rendered_manifests_pass_kubernetes_validate_strict() {
    let validate = crate::suite::support::installed(
        "GATEHOUSE_KUBERNETES_VALIDATE",
        "kubernetes-validate==1.37.0",
    );
    let base = tempfile::tempdir().unwrap();
    for dir in render_examples_into(base.path()) {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        assert!(files.len() >= 5, "{}", dir.display());
        let output = Command::new(&validate)
            .args(["--strict", "--kubernetes-version", KUBERNETES_VERSION])
            .args(&files)
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}: {}{}",
            dir.display(),
            stdout(&output),
            stderr(&output)
        );
        // Every file was judged valid, none skipped as unknown.
        let said = stdout(&output);
        assert_eq!(
            said.lines()
                .filter(|line| line.contains(" passed for resource "))
                .count(),
            files.len(),
            "{said}"
        );
    }
}

#[test]
fn rendered_manifests_pass_checkov_with_only_the_documented_exceptions() {
    let checkov = crate::suite::support::installed("GATEHOUSE_CHECKOV", "checkov==3.3.30");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../deploy/checkov.yaml");
    // Not tempfile's default `.tmp` name: checkov skips hidden directories.
    let base = tempfile::Builder::new()
        .prefix("manifests-")
        .tempdir()
        .unwrap();
    render_examples_into(base.path());
    let output = Command::new(&checkov)
        .arg("--config-file")
        .arg(&config)
        .arg("--directory")
        .arg(base.path())
        .args(["--output", "json", "--skip-download", "--compact"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "checkov printed no JSON report: {}{}",
            stdout(&output),
            stderr(&output)
        )
    });
    let failed: Vec<String> = report["results"]["failed_checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|check| {
            format!(
                "{} {} {}",
                check["check_id"], check["resource"], check["file_path"]
            )
        })
        .collect();
    assert_eq!(failed, Vec::<String>::new(), "checkov failed checks");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let summary = &report["summary"];
    // The checks really ran over every object: thousands of them over the seven renders.
    assert!(summary["passed"].as_u64().unwrap() > 500, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    // Each exception the configuration lists is documented with its reason, and is still
    // needed: run alone, its check fails somewhere.
    let listed = std::fs::read_to_string(&config).unwrap();
    let skipped: Vec<String> = listed
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .filter(|id| id.starts_with("CKV"))
        .map(str::to_owned)
        .collect();
    assert!(!skipped.is_empty(), "{listed}");
    let operations = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../docs/operations.md"),
    )
    .unwrap();
    for check in &skipped {
        assert!(
            operations.contains(&format!("`{check}`")),
            "{check} is not documented"
        );
        let alone = Command::new(&checkov)
            .args(["--framework", "kubernetes", "--check", check])
            .arg("--directory")
            .arg(base.path())
            .args([
                "--output",
                "json",
                "--skip-download",
                "--compact",
                "--quiet",
            ])
            .output()
            .unwrap();
        assert_ne!(
            alone.status.code(),
            Some(0),
            "{check} passes without its exception, so drop it from deploy/checkov.yaml"
        );
    }
}
