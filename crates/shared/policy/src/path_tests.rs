use std::collections::BTreeMap;

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::error::PolicyError;
use crate::path::AccessKind;
use crate::path::ApplyOutcome;
use crate::path::AskMode;
use crate::path::Decision;
use crate::path::DenyCode;
use crate::path::DenyReason;
use crate::path::FileTransferPolicy;
use crate::path::NodePolicy;
use crate::path::NodeRef;
use crate::path::PatternList;
use crate::path::WorkspaceBinding;
use crate::path::apply_default_policy;
use crate::path::compile_glob;
use crate::path::default_node_policy;
use crate::path::evaluate;
use crate::path::persist_allow_always;
use crate::path::validate;

const HOME: &str = "/home/node";
const ROOT: &str = "/home/node/workspace";

fn entry(ask: AskMode, read: &[&str], write: &[&str], deny: &[&str]) -> NodePolicy {
    NodePolicy {
        ask,
        allow_read_paths: strings(read),
        allow_write_paths: strings(write),
        deny_paths: strings(deny),
        max_bytes: None,
        follow_symlinks: false,
    }
}

fn reads(ask: AskMode, read: &[&str]) -> NodePolicy {
    entry(ask, read, &[], &[])
}

fn policy(entries: &[(&str, NodePolicy)]) -> FileTransferPolicy {
    FileTransferPolicy {
        nodes: entries
            .iter()
            .map(|(key, node_policy)| ((*key).to_owned(), node_policy.clone()))
            .collect(),
        policy_version: None,
        workspaces: BTreeMap::new(),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

fn allowed() -> Decision {
    Decision::Allow {
        max_bytes: None,
        follow_symlinks: false,
    }
}

fn asked() -> Decision {
    Decision::Ask {
        max_bytes: None,
        follow_symlinks: false,
    }
}

fn denied(reason: DenyReason) -> Decision {
    Decision::Deny {
        code: DenyCode::PolicyDenied,
        askable: false,
        reason,
    }
}

fn askable(reason: DenyReason) -> Decision {
    Decision::Deny {
        code: DenyCode::PolicyDenied,
        askable: true,
        reason,
    }
}

fn no_policy(reason: DenyReason) -> Decision {
    Decision::Deny {
        code: DenyCode::NoPolicy,
        askable: false,
        reason,
    }
}

struct Case {
    name: &'static str,
    policy: Option<FileTransferPolicy>,
    node_id: &'static str,
    display_name: Option<&'static str>,
    path: &'static str,
    kind: AccessKind,
    expected: Decision,
}

fn case(
    name: &'static str,
    policy: Option<FileTransferPolicy>,
    path: &'static str,
    kind: AccessKind,
    expected: Decision,
) -> Case {
    Case {
        name,
        policy,
        node_id: "n1",
        display_name: None,
        path,
        kind,
        expected,
    }
}

fn named(mut case: Case, display_name: &'static str) -> Case {
    case.display_name = Some(display_name);
    case
}

#[test]
fn evaluate_follows_each_rule_and_their_order() {
    use AccessKind::Read;
    use AccessKind::Write;
    let workspace = || {
        Some(policy(&[(
            "n1",
            entry(AskMode::Off, &["/ws/**"], &["/ws/out/**"], &["**/.ssh/**"]),
        )]))
    };
    let with = |node_policy: NodePolicy| Some(policy(&[("n1", node_policy)]));
    let with_limits = |max_bytes: Option<u64>, follow_symlinks: bool, ask: AskMode| {
        let mut node_policy = reads(ask, &["/ws/**"]);
        node_policy.max_bytes = max_bytes;
        node_policy.follow_symlinks = follow_symlinks;
        Some(policy(&[("n1", node_policy)]))
    };

    let cases = vec![
        // Rule 1: `..` segments, before anything else.
        case(
            "dotdot: relative",
            workspace(),
            "../ws/a",
            Read,
            denied(DenyReason::ParentSegment),
        ),
        case(
            "dotdot: beats an allow glob that matches the raw path",
            workspace(),
            "/ws/../etc/passwd",
            Read,
            denied(DenyReason::ParentSegment),
        ),
        case(
            "dotdot: backslash separators count",
            with(reads(AskMode::Off, &["C:/ws/**"])),
            "C:\\ws\\..\\Windows\\system.ini",
            Read,
            denied(DenyReason::ParentSegment),
        ),
        case(
            "dotdot: mixed separators count",
            workspace(),
            "/ws\\..\\etc/passwd",
            Read,
            denied(DenyReason::ParentSegment),
        ),
        case(
            "dotdot: beats NO_POLICY",
            None,
            "/ws/../x",
            Read,
            denied(DenyReason::ParentSegment),
        ),
        case(
            "dotdot: beats ask always",
            with(reads(AskMode::Always, &["/ws/**"])),
            "/ws/../etc/passwd",
            Read,
            denied(DenyReason::ParentSegment),
        ),
        case(
            "dotdot: is not askable under on-miss",
            with(reads(AskMode::OnMiss, &["/ws/**"])),
            "/ws/..",
            Read,
            denied(DenyReason::ParentSegment),
        ),
        case(
            "dotdot: '...' is a name",
            workspace(),
            "/ws/.../x",
            Read,
            allowed(),
        ),
        case(
            "dotdot: '..name' is a name",
            workspace(),
            "/ws/..hidden",
            Read,
            allowed(),
        ),
        // Rule 2: NO_POLICY.
        case(
            "no policy: no config",
            None,
            "/ws/a",
            Read,
            no_policy(DenyReason::NoConfig),
        ),
        case(
            "no policy: no entries",
            Some(FileTransferPolicy::default()),
            "/ws/a",
            Read,
            no_policy(DenyReason::NoEntry),
        ),
        case(
            "no policy: only another node's entry",
            Some(policy(&[("n2", reads(AskMode::Always, &["/ws/**"]))])),
            "/ws/a",
            Read,
            no_policy(DenyReason::NoEntry),
        ),
        named(
            case(
                "no policy: only another display name's entry",
                Some(policy(&[("laptop", reads(AskMode::Off, &["/ws/**"]))])),
                "/ws/a",
                Read,
                no_policy(DenyReason::NoEntry),
            ),
            "desktop",
        ),
        // Rule 3: denyPaths.
        case(
            "deny: beats a matching allow",
            workspace(),
            "/ws/.ssh/id_ed25519",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "deny: applies to writes too",
            workspace(),
            "/ws/out/.ssh/config",
            Write,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "deny: beats ask always",
            with(entry(AskMode::Always, &["/ws/**"], &[], &["/ws/secret/**"])),
            "/ws/secret/key",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "deny: is not askable under on-miss",
            with(entry(AskMode::OnMiss, &[], &[], &["/ws/secret/**"])),
            "/ws/secret/key",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        // Rule 4: ask always.
        case(
            "ask always: asks even when an allow matches",
            with(reads(AskMode::Always, &["/ws/**"])),
            "/ws/a",
            Read,
            asked(),
        ),
        case(
            "ask always: asks when nothing matches",
            with(reads(AskMode::Always, &["/ws/**"])),
            "/etc/passwd",
            Write,
            asked(),
        ),
        // Rule 5: allow for the requested kind.
        case("allow: read", workspace(), "/ws/notes.md", Read, allowed()),
        case(
            "allow: write",
            workspace(),
            "/ws/out/report.pdf",
            Write,
            allowed(),
        ),
        case(
            "allow: a read allow does not grant write",
            workspace(),
            "/ws/notes.md",
            Write,
            denied(DenyReason::NoAllowMatch),
        ),
        case(
            "allow: a write allow does not grant read",
            with(entry(AskMode::Off, &[], &["/ws/**"], &[])),
            "/ws/notes.md",
            Read,
            denied(DenyReason::NoAllowPatterns),
        ),
        // Rule 6: misses.
        case(
            "miss: on-miss is askable",
            with(reads(AskMode::OnMiss, &["/ws/**"])),
            "/etc/passwd",
            Read,
            askable(DenyReason::NoAllowMatch),
        ),
        case(
            "miss: off is not askable",
            with(reads(AskMode::Off, &["/ws/**"])),
            "/etc/passwd",
            Read,
            denied(DenyReason::NoAllowMatch),
        ),
        case(
            "miss: on-miss without patterns is askable",
            with(NodePolicy {
                ask: AskMode::OnMiss,
                ..NodePolicy::default()
            }),
            "/ws/a",
            Read,
            askable(DenyReason::NoAllowPatterns),
        ),
        case(
            "miss: blank patterns count as none",
            with(reads(AskMode::Off, &["", "   "])),
            "/ws/a",
            Read,
            denied(DenyReason::NoAllowPatterns),
        ),
        // Entry lookup: node id, then display name, then `*`.
        named(
            case(
                "lookup: node id beats a more permissive display name",
                Some(policy(&[
                    ("n1", reads(AskMode::Off, &[])),
                    ("laptop", reads(AskMode::Off, &["/ws/**"])),
                ])),
                "/ws/a",
                Read,
                denied(DenyReason::NoAllowPatterns),
            ),
            "laptop",
        ),
        named(
            case(
                "lookup: node id beats a more restrictive display name",
                Some(policy(&[
                    ("n1", reads(AskMode::Off, &["/ws/**"])),
                    ("laptop", entry(AskMode::Off, &[], &[], &["**"])),
                ])),
                "/ws/a",
                Read,
                allowed(),
            ),
            "laptop",
        ),
        named(
            case(
                "lookup: display name beats a more permissive wildcard",
                Some(policy(&[
                    ("laptop", reads(AskMode::Off, &[])),
                    ("*", reads(AskMode::Off, &["/ws/**"])),
                ])),
                "/ws/a",
                Read,
                denied(DenyReason::NoAllowPatterns),
            ),
            "laptop",
        ),
        named(
            case(
                "lookup: display name beats a more restrictive wildcard",
                Some(policy(&[
                    ("laptop", reads(AskMode::Off, &["/ws/**"])),
                    ("*", entry(AskMode::Off, &[], &[], &["**"])),
                ])),
                "/ws/a",
                Read,
                allowed(),
            ),
            "laptop",
        ),
        case(
            "lookup: wildcard without own entry",
            Some(policy(&[("*", reads(AskMode::OnMiss, &["/ws/**"]))])),
            "/etc/passwd",
            Read,
            askable(DenyReason::NoAllowMatch),
        ),
        named(
            case(
                "lookup: an empty display name is skipped",
                Some(policy(&[
                    ("", reads(AskMode::Off, &["/ws/**"])),
                    ("*", reads(AskMode::Off, &[])),
                ])),
                "/ws/a",
                Read,
                denied(DenyReason::NoAllowPatterns),
            ),
            "",
        ),
        // Glob semantics.
        case(
            "glob: * does not cross /",
            with(reads(AskMode::Off, &["/ws/*"])),
            "/ws/a/b",
            Read,
            denied(DenyReason::NoAllowMatch),
        ),
        case(
            "glob: * matches one segment",
            with(reads(AskMode::Off, &["/ws/*"])),
            "/ws/a",
            Read,
            allowed(),
        ),
        case(
            "glob: * matches dotfiles",
            with(reads(AskMode::Off, &["/ws/*"])),
            "/ws/.env",
            Read,
            allowed(),
        ),
        case(
            "glob: ** crosses /",
            with(reads(AskMode::Off, &["/ws/**"])),
            "/ws/a/.git/b",
            Read,
            allowed(),
        ),
        case(
            "glob: X/** does not match X",
            with(reads(AskMode::Off, &["/ws/**"])),
            "/ws",
            Read,
            denied(DenyReason::NoAllowMatch),
        ),
        case(
            "glob: leading **/ matches at any depth",
            with(entry(AskMode::Off, &["/**"], &[], &["**/.aws/**"])),
            "/home/u/.aws/credentials",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "glob: alternation matches a branch",
            with(reads(AskMode::Off, &["/ws/{a,b}/**"])),
            "/ws/b/x",
            Read,
            allowed(),
        ),
        case(
            "glob: alternation matches nothing else",
            with(reads(AskMode::Off, &["/ws/{a,b}/**"])),
            "/ws/c/x",
            Read,
            denied(DenyReason::NoAllowMatch),
        ),
        case(
            "glob: ~/ expands to home",
            with(reads(AskMode::Off, &["~/docs/**"])),
            "/home/node/docs/a.md",
            Read,
            allowed(),
        ),
        case(
            "glob: ~ alone is home",
            with(reads(AskMode::Off, &["~"])),
            "/home/node",
            Read,
            allowed(),
        ),
        case(
            "glob: ~ elsewhere is literal",
            with(reads(AskMode::Off, &["/ws/~/**"])),
            "/ws/~/a",
            Read,
            allowed(),
        ),
        case(
            "glob: backslashes in patterns are separators",
            with(reads(AskMode::Off, &["C:\\ws\\**"])),
            "C:/ws/a",
            Read,
            allowed(),
        ),
        case(
            "glob: backslashes in paths are separators",
            with(reads(AskMode::Off, &["/ws/*/b"])),
            "\\ws\\a\\b",
            Read,
            allowed(),
        ),
        case(
            "glob: matching is case sensitive",
            with(reads(AskMode::Off, &["/ws/**"])),
            "/WS/a",
            Read,
            denied(DenyReason::NoAllowMatch),
        ),
        // Lexical normalization of the requested path.
        case(
            "normalize: a dot segment cannot dodge a deny",
            with(entry(AskMode::Off, &["/ws/**"], &[], &["/ws/secret/**"])),
            "/ws/./secret/key",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "normalize: a double slash cannot dodge a deny",
            with(entry(AskMode::Off, &["/ws/**"], &[], &["/ws/secret/**"])),
            "/ws//secret/key",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "normalize: a trailing slash is dropped",
            with(reads(AskMode::Off, &["/ws"])),
            "/ws/",
            Read,
            allowed(),
        ),
        // Invalid patterns.
        case(
            "invalid: a bad allow glob matches nothing",
            with(reads(AskMode::Off, &["/ws/[", "/ok/**"])),
            "/ws/[",
            Read,
            denied(DenyReason::NoAllowMatch),
        ),
        case(
            "invalid: a bad allow glob leaves the others working",
            with(reads(AskMode::Off, &["/ws/[", "/ok/**"])),
            "/ok/a",
            Read,
            allowed(),
        ),
        case(
            "invalid: a bad deny glob denies everything",
            with(entry(AskMode::Off, &["/ws/**"], &[], &["/ws/{a"])),
            "/ws/b",
            Read,
            denied(DenyReason::InvalidDenyPattern),
        ),
        case(
            "invalid: a bad deny glob beats ask always",
            with(entry(AskMode::Always, &["/ws/**"], &[], &["/ws/[x"])),
            "/ws/b",
            Read,
            denied(DenyReason::InvalidDenyPattern),
        ),
        case(
            "invalid: a matching valid deny is reported first",
            with(entry(AskMode::Off, &["/ws/**"], &[], &["/ws/[x", "/ws/b"])),
            "/ws/b",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        // Limits travel with allow and ask.
        case(
            "limits: allow carries maxBytes and followSymlinks",
            with_limits(Some(1024), true, AskMode::Off),
            "/ws/a",
            Read,
            Decision::Allow {
                max_bytes: Some(1024),
                follow_symlinks: true,
            },
        ),
        case(
            "limits: maxBytes 0 is raised to 1",
            with_limits(Some(0), false, AskMode::Off),
            "/ws/a",
            Read,
            Decision::Allow {
                max_bytes: Some(1),
                follow_symlinks: false,
            },
        ),
        case(
            "limits: ask carries them too",
            with_limits(Some(7), true, AskMode::Always),
            "/ws/a",
            Write,
            Decision::Ask {
                max_bytes: Some(7),
                follow_symlinks: true,
            },
        ),
    ];

    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for case in &cases {
        let node = NodeRef {
            id: case.node_id,
            display_name: case.display_name,
        };
        expected.push((case.name, case.expected));
        actual.push((
            case.name,
            evaluate(case.policy.as_ref(), &node, case.path, case.kind, HOME),
        ));
    }
    assert_eq!(expected, actual);
}

#[test]
fn deny_code_wire_strings_are_stable() {
    assert_eq!(
        vec!["POLICY_DENIED", "NO_POLICY"],
        vec![DenyCode::PolicyDenied.as_str(), DenyCode::NoPolicy.as_str()]
    );
}

fn glob_error(pattern: &str) -> globset::Error {
    compile_glob(pattern).expect_err("pattern must be invalid")
}

#[test]
fn validate_reports_every_invalid_pattern_and_zero_limit() {
    let mut broken = entry(AskMode::Off, &["/ok/**", "/bad/["], &["~/x/{a"], &["{x"]);
    broken.max_bytes = Some(0);
    let policy = policy(&[
        ("a", broken),
        ("b", reads(AskMode::Off, &["  ", "/fine/**"])),
    ]);

    let expected = Err(vec![
        PolicyError::InvalidGlob {
            node_key: "a".to_owned(),
            list: PatternList::AllowRead,
            pattern: "/bad/[".to_owned(),
            source: glob_error("/bad/["),
        },
        PolicyError::InvalidGlob {
            node_key: "a".to_owned(),
            list: PatternList::AllowWrite,
            pattern: "~/x/{a".to_owned(),
            source: glob_error("/x/{a"),
        },
        PolicyError::InvalidGlob {
            node_key: "a".to_owned(),
            list: PatternList::Deny,
            pattern: "{x".to_owned(),
            source: glob_error("{x"),
        },
        PolicyError::ZeroMaxBytes {
            node_key: "a".to_owned(),
        },
    ]);
    assert_eq!(expected, validate(&policy));
}

#[test]
fn validate_accepts_the_default_policy_and_an_empty_one() {
    let mut default = FileTransferPolicy::default();
    apply_default_policy(&mut default, "n1", "main", ROOT, HOME).expect("apply");
    assert_eq!(
        (Ok(()), Ok(())),
        (validate(&default), validate(&FileTransferPolicy::default()))
    );
}

#[test]
fn invalid_glob_error_message_names_the_entry_and_list() {
    let error = PolicyError::InvalidGlob {
        node_key: "n1".to_owned(),
        list: PatternList::Deny,
        pattern: "{x".to_owned(),
        source: glob_error("{x"),
    };
    assert_eq!(
        "invalid glob in nodes[\"n1\"].denyPaths: error parsing glob '{x': unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)",
        error.to_string()
    );
}

#[test]
fn serde_reads_the_upstream_shape() {
    let json = json!({
        "nodes": {
            "n1": {
                "ask": "on-miss",
                "allowReadPaths": ["~/Screenshots/**"],
                "allowWritePaths": ["~/Downloads/**"],
                "denyPaths": ["**/.ssh/**"],
                "maxBytes": 16777216,
                "followSymlinks": true,
                "futureKey": {"ignored": true}
            },
            "*": {"ask": "always"},
            "laptop": {}
        },
        "policyVersion": 2,
        "workspaces": {"main": {"nodeId": "n1", "remoteRoot": "/srv/ws"}},
        "enabled": true
    });
    let parsed: FileTransferPolicy = serde_json::from_value(json).expect("parse");

    let expected = FileTransferPolicy {
        nodes: BTreeMap::from([
            (
                "n1".to_owned(),
                NodePolicy {
                    ask: AskMode::OnMiss,
                    allow_read_paths: strings(&["~/Screenshots/**"]),
                    allow_write_paths: strings(&["~/Downloads/**"]),
                    deny_paths: strings(&["**/.ssh/**"]),
                    max_bytes: Some(16_777_216),
                    follow_symlinks: true,
                },
            ),
            (
                "*".to_owned(),
                NodePolicy {
                    ask: AskMode::Always,
                    ..NodePolicy::default()
                },
            ),
            ("laptop".to_owned(), NodePolicy::default()),
        ]),
        policy_version: Some(2),
        workspaces: BTreeMap::from([(
            "main".to_owned(),
            WorkspaceBinding {
                node_id: "n1".to_owned(),
                remote_root: "/srv/ws".to_owned(),
            },
        )]),
    };
    assert_eq!(expected, parsed);
}

#[test]
fn serde_writes_the_upstream_shape_and_round_trips() {
    let mut policy = FileTransferPolicy::default();
    policy
        .nodes
        .insert("n1".to_owned(), reads(AskMode::OnMiss, &["/ws/**"]));
    policy.policy_version = Some(2);

    let written = serde_json::to_value(&policy).expect("serialize");
    let expected = json!({
        "nodes": {
            "n1": {
                "ask": "on-miss",
                "allowReadPaths": ["/ws/**"],
                "allowWritePaths": [],
                "denyPaths": [],
                "followSymlinks": false
            }
        },
        "policyVersion": 2,
        "workspaces": {}
    });
    assert_eq!(expected, written);

    let reread: FileTransferPolicy = serde_json::from_value(written).expect("parse");
    assert_eq!(policy, reread);
}

#[test]
fn serde_rejects_an_unknown_ask_mode() {
    let parsed = serde_json::from_value::<NodePolicy>(json!({"ask": "sometimes"}));
    assert_eq!(
        "unknown variant `sometimes`, expected one of `off`, `on-miss`, `always`",
        parsed.expect_err("must fail").to_string()
    );
}

fn expected_default_policy() -> NodePolicy {
    NodePolicy {
        ask: AskMode::Off,
        allow_read_paths: strings(&[
            "/home/node/workspace",
            "/home/node/workspace/**",
            "/home/node/.openclaw",
            "/home/node/.openclaw/skills",
            "/home/node/.openclaw/skills/**",
            "/home/node/.openclaw/plugin-skills",
            "/home/node/.openclaw/plugin-skills/**",
            "/home/node/.openclaw/agents/*/agent/workshop-skills",
            "/home/node/.openclaw/agents/*/agent/workshop-skills/**",
            "/home/node/.openclaw/worktree-sources/empty/*/workspace",
            "/home/node/.openclaw/worktree-sources/empty/*/workspace/**",
            "/home/node/.agents/skills",
            "/home/node/.agents/skills/**",
            "/home/node/openclaw-runtime-assets/bundled-skills",
            "/home/node/openclaw-runtime-assets/bundled-skills/**",
            "/home/node/openclaw-runtime-assets/custodian-skills",
            "/home/node/openclaw-runtime-assets/custodian-skills/**",
            "/home/node/openclaw-runtime-assets/plugin-skills",
            "/home/node/openclaw-runtime-assets/plugin-skills/**",
            "/app/extensions/*/skills",
            "/app/extensions/*/skills/**",
        ]),
        allow_write_paths: strings(&[
            "/home/node/workspace/AGENTS.md",
            "/home/node/workspace/SOUL.md",
            "/home/node/workspace/IDENTITY.md",
            "/home/node/workspace/USER.md",
            "/home/node/workspace/MEMORY.md",
            "/home/node/workspace/memory.md",
            "/home/node/workspace/DREAMS.md",
            "/home/node/workspace/dreams.md",
            "/home/node/workspace/memory",
            "/home/node/workspace/memory/**",
            "/home/node/workspace/skills",
            "/home/node/workspace/skills/**",
            "/home/node/workspace/.clawhub/lock.json",
            "/home/node/workspace/.clawdhub/lock.json",
            "/home/node/workspace/.openclaw/skill-installs/**",
            "/home/node/workspace/media/inbound/gatehouse-staged-*/**",
        ]),
        deny_paths: Vec::new(),
        max_bytes: None,
        follow_symlinks: false,
    }
}

#[test]
fn default_node_policy_renders_the_exact_lists() {
    assert_eq!(expected_default_policy(), default_node_policy(ROOT, HOME));
}

#[test]
fn default_node_policy_uses_the_given_root_and_home() {
    let rendered = default_node_policy("/sandbox/enterprise/", "/home/sandbox/");
    assert_eq!(
        (
            strings(&[
                "/sandbox/enterprise",
                "/sandbox/enterprise/**",
                "/home/sandbox/.openclaw",
                "/home/sandbox/.openclaw/skills",
            ]),
            strings(&[
                "/sandbox/enterprise/AGENTS.md",
                "/sandbox/enterprise/media/inbound/gatehouse-staged-*/**",
            ]),
        ),
        (
            rendered.allow_read_paths[..4].to_vec(),
            vec![
                rendered.allow_write_paths[0].clone(),
                rendered.allow_write_paths[15].clone(),
            ],
        )
    );
}

#[test]
fn default_node_policy_escapes_glob_characters_in_the_root() {
    let rendered = default_node_policy("/srv/ws[1]", HOME);
    let policy = policy(&[("n1", rendered.clone())]);
    let node = NodeRef {
        id: "n1",
        display_name: None,
    };
    assert_eq!(
        (
            "/srv/ws[[]1[]]/**".to_owned(),
            allowed(),
            denied(DenyReason::NoAllowMatch),
        ),
        (
            rendered.allow_read_paths[1].clone(),
            evaluate(Some(&policy), &node, "/srv/ws[1]/a", AccessKind::Read, HOME),
            evaluate(Some(&policy), &node, "/srv/ws1/a", AccessKind::Read, HOME),
        )
    );
}

#[test]
fn default_policy_decides_workspace_requests() {
    use AccessKind::Read;
    use AccessKind::Write;
    let mut policy = FileTransferPolicy::default();
    apply_default_policy(&mut policy, "n1", "main", ROOT, HOME).expect("apply");
    let node = NodeRef {
        id: "n1",
        display_name: None,
    };
    let no_match = denied(DenyReason::NoAllowMatch);
    let rows = [
        ("/home/node/workspace", Read, allowed()),
        ("/home/node/workspace/src/main.rs", Read, allowed()),
        ("/home/node/workspace/.env", Read, allowed()),
        ("/home/node/.openclaw", Read, allowed()),
        ("/home/node/.openclaw/openclaw.json", Read, no_match),
        ("/home/node/.openclaw/skills/pdf/SKILL.md", Read, allowed()),
        (
            "/home/node/.openclaw/agents/main/agent/workshop-skills/x/SKILL.md",
            Read,
            allowed(),
        ),
        (
            "/home/node/.openclaw/agents/main/agent/auth.json",
            Read,
            no_match,
        ),
        (
            "/home/node/openclaw-runtime-assets/custodian-skills/a",
            Read,
            allowed(),
        ),
        (
            "/app/extensions/voice/skills/talk/SKILL.md",
            Read,
            allowed(),
        ),
        ("/app/extensions/voice/index.js", Read, no_match),
        ("/home/node/.ssh/id_ed25519", Read, no_match),
        ("/home/node/workspace/AGENTS.md", Write, allowed()),
        ("/home/node/workspace/BOOTSTRAP.md", Write, no_match),
        ("/home/node/workspace/src/main.rs", Write, no_match),
        (
            "/home/node/workspace/memory/2025-01-01.md",
            Write,
            allowed(),
        ),
        ("/home/node/workspace/skills/pdf/SKILL.md", Write, allowed()),
        ("/home/node/workspace/.clawhub/lock.json", Write, allowed()),
        (
            "/home/node/workspace/.openclaw/skill-installs/a/b",
            Write,
            allowed(),
        ),
        (
            "/home/node/workspace/media/inbound/gatehouse-staged-abc/input-a.png",
            Write,
            allowed(),
        ),
        (
            "/home/node/workspace/media/inbound/gatehouse-staged-abc",
            Write,
            no_match,
        ),
        (
            "/home/node/workspace/media/inbound/openclaw-staged-abc/input-a.png",
            Write,
            no_match,
        ),
        ("/home/node/.openclaw/skills/pdf/SKILL.md", Write, no_match),
    ];

    let expected: Vec<_> = rows
        .iter()
        .map(|(path, kind, decision)| (*path, *kind, *decision))
        .collect();
    let actual: Vec<_> = rows
        .iter()
        .map(|(path, kind, _)| {
            (
                *path,
                *kind,
                evaluate(Some(&policy), &node, path, *kind, HOME),
            )
        })
        .collect();
    assert_eq!(expected, actual);
}

fn main_binding(node_id: &str) -> BTreeMap<String, WorkspaceBinding> {
    BTreeMap::from([(
        "main".to_owned(),
        WorkspaceBinding {
            node_id: node_id.to_owned(),
            remote_root: ROOT.to_owned(),
        },
    )])
}

#[test]
fn apply_default_policy_writes_only_into_an_unconfigured_policy() {
    let operator_entry = entry(AskMode::Always, &["/data/**"], &[], &["**/.ssh/**"]);
    let stale_binding = BTreeMap::from([(
        "main".to_owned(),
        WorkspaceBinding {
            node_id: "old".to_owned(),
            remote_root: "/old".to_owned(),
        },
    )]);

    struct ApplyCase {
        name: &'static str,
        before: FileTransferPolicy,
        outcome: ApplyOutcome,
        after: FileTransferPolicy,
    }
    let cases = vec![
        ApplyCase {
            name: "empty policy gets the default entry",
            before: FileTransferPolicy::default(),
            outcome: ApplyOutcome::Applied,
            after: FileTransferPolicy {
                nodes: BTreeMap::from([("n1".to_owned(), expected_default_policy())]),
                policy_version: Some(2),
                workspaces: main_binding("n1"),
            },
        },
        ApplyCase {
            name: "another node's entry does not block the default",
            before: policy(&[("n2", operator_entry.clone())]),
            outcome: ApplyOutcome::Applied,
            after: FileTransferPolicy {
                nodes: BTreeMap::from([
                    ("n1".to_owned(), expected_default_policy()),
                    ("n2".to_owned(), operator_entry.clone()),
                ]),
                policy_version: Some(2),
                workspaces: main_binding("n1"),
            },
        },
        ApplyCase {
            name: "an existing node entry is left untouched",
            before: policy(&[("n1", operator_entry.clone())]),
            outcome: ApplyOutcome::LeftAlone,
            after: FileTransferPolicy {
                nodes: BTreeMap::from([("n1".to_owned(), operator_entry.clone())]),
                policy_version: Some(2),
                workspaces: main_binding("n1"),
            },
        },
        ApplyCase {
            name: "an existing wildcard entry is left untouched and no node entry is added",
            before: policy(&[("*", operator_entry.clone())]),
            outcome: ApplyOutcome::LeftAlone,
            after: FileTransferPolicy {
                nodes: BTreeMap::from([("*".to_owned(), operator_entry)]),
                policy_version: Some(2),
                workspaces: main_binding("n1"),
            },
        },
        ApplyCase {
            name: "an existing policy version is kept and the binding is replaced",
            before: FileTransferPolicy {
                nodes: BTreeMap::new(),
                policy_version: Some(1),
                workspaces: stale_binding,
            },
            outcome: ApplyOutcome::Applied,
            after: FileTransferPolicy {
                nodes: BTreeMap::from([("n1".to_owned(), expected_default_policy())]),
                policy_version: Some(1),
                workspaces: main_binding("n1"),
            },
        },
    ];

    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for case in cases {
        let mut policy = case.before;
        let outcome = apply_default_policy(&mut policy, "n1", "main", ROOT, HOME);
        expected.push((case.name, Ok(case.outcome), case.after));
        actual.push((case.name, outcome, policy));
    }
    assert_eq!(expected, actual);
}

#[test]
fn apply_default_policy_refuses_unsafe_node_ids() {
    let before = policy(&[("n2", reads(AskMode::Off, &["/ws/**"]))]);
    let keys = ["", "*", "__proto__", "prototype", "constructor"];
    let expected: Vec<_> = keys
        .iter()
        .map(|key| {
            (
                Err(PolicyError::UnsafeNodeKey {
                    key: (*key).to_owned(),
                }),
                before.clone(),
            )
        })
        .collect();
    let actual: Vec<_> = keys
        .iter()
        .map(|key| {
            let mut policy = before.clone();
            let outcome = apply_default_policy(&mut policy, key, "main", ROOT, HOME);
            (outcome, policy)
        })
        .collect();
    assert_eq!(expected, actual);
}

#[test]
fn persist_allow_always_writes_only_the_node_entry() {
    use AccessKind::Read;
    use AccessKind::Write;
    let wildcard = entry(AskMode::OnMiss, &["/shared/**"], &[], &["**/.ssh/**"]);
    let by_name = entry(AskMode::Off, &["/named/**"], &[], &[]);
    let own = entry(AskMode::Off, &["/ws/**"], &[], &[]);
    let with_read = |mut node_policy: NodePolicy, path: &str| {
        node_policy.allow_read_paths.push(path.to_owned());
        node_policy
    };
    let with_write = |mut node_policy: NodePolicy, path: &str| {
        node_policy.allow_write_paths.push(path.to_owned());
        node_policy
    };

    struct PersistCase {
        name: &'static str,
        before: FileTransferPolicy,
        display_name: Option<&'static str>,
        path: &'static str,
        kind: AccessKind,
        after: FileTransferPolicy,
    }
    let cases = vec![
        PersistCase {
            name: "no entry at all: a default entry is created under the node id",
            before: FileTransferPolicy::default(),
            display_name: None,
            path: "/ws/a.txt",
            kind: Read,
            after: policy(&[("n1", reads(AskMode::Off, &["/ws/a.txt"]))]),
        },
        PersistCase {
            name: "wildcard only: the node entry copies it and the wildcard is untouched",
            before: policy(&[("*", wildcard.clone())]),
            display_name: None,
            path: "/ws/a.txt",
            kind: Write,
            after: policy(&[
                ("*", wildcard.clone()),
                ("n1", with_write(wildcard.clone(), "/ws/a.txt")),
            ]),
        },
        PersistCase {
            name: "display name entry: copied under the node id, itself untouched",
            before: policy(&[("laptop", by_name.clone()), ("*", wildcard.clone())]),
            display_name: Some("laptop"),
            path: "/ws/a.txt",
            kind: Read,
            after: policy(&[
                ("laptop", by_name.clone()),
                ("*", wildcard.clone()),
                ("n1", with_read(by_name.clone(), "/ws/a.txt")),
            ]),
        },
        PersistCase {
            name: "own entry: appended, display name and wildcard untouched",
            before: policy(&[
                ("n1", own.clone()),
                ("laptop", by_name.clone()),
                ("*", wildcard.clone()),
            ]),
            display_name: Some("laptop"),
            path: "/etc/hosts",
            kind: Read,
            after: policy(&[
                ("n1", with_read(own.clone(), "/etc/hosts")),
                ("laptop", by_name),
                ("*", wildcard),
            ]),
        },
        PersistCase {
            name: "already present: not added twice",
            before: policy(&[("n1", with_read(own.clone(), "/etc/hosts"))]),
            display_name: None,
            path: "/etc/hosts",
            kind: Read,
            after: policy(&[("n1", with_read(own.clone(), "/etc/hosts"))]),
        },
        PersistCase {
            name: "equivalent spelling: normalized, so not added twice",
            before: policy(&[("n1", with_read(own.clone(), "/etc/hosts"))]),
            display_name: None,
            path: "/etc//./hosts/",
            kind: Read,
            after: policy(&[("n1", with_read(own.clone(), "/etc/hosts"))]),
        },
        PersistCase {
            name: "glob characters: stored escaped",
            before: policy(&[("n1", own.clone())]),
            display_name: None,
            path: "/data/*.{csv,tsv}",
            kind: Read,
            after: policy(&[("n1", with_read(own.clone(), "/data/[*].[{]csv,tsv[}]"))]),
        },
        PersistCase {
            name: "backslashes: stored as slashes",
            before: policy(&[("n1", own.clone())]),
            display_name: None,
            path: "C:\\data\\a.txt",
            kind: Read,
            after: policy(&[("n1", with_read(own, "C:/data/a.txt"))]),
        },
    ];

    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for case in cases {
        let mut policy = case.before;
        let node = NodeRef {
            id: "n1",
            display_name: case.display_name,
        };
        let result = persist_allow_always(&mut policy, &node, case.path, case.kind);
        expected.push((case.name, Ok(()), case.after));
        actual.push((case.name, result, policy));
    }
    assert_eq!(expected, actual);
}

#[test]
fn persist_allow_always_refuses_unsafe_keys_and_paths() {
    let before = policy(&[("*", reads(AskMode::OnMiss, &["/ws/**"]))]);
    let rows = [
        ("__proto__", "/ws/a", unsafe_key("__proto__")),
        ("prototype", "/ws/a", unsafe_key("prototype")),
        ("constructor", "/ws/a", unsafe_key("constructor")),
        ("*", "/ws/a", unsafe_key("*")),
        ("", "/ws/a", unsafe_key("")),
        (
            "n1",
            "/ws/../etc/passwd",
            PolicyError::ParentSegment {
                path: "/ws/../etc/passwd".to_owned(),
            },
        ),
        (
            "n1",
            "C:\\ws\\..\\x",
            PolicyError::ParentSegment {
                path: "C:\\ws\\..\\x".to_owned(),
            },
        ),
        ("n1", "  ", PolicyError::EmptyPath),
    ];

    let expected: Vec<_> = rows
        .iter()
        .map(|(id, path, error)| (*id, *path, Err(error.clone()), before.clone()))
        .collect();
    let actual: Vec<_> = rows
        .iter()
        .map(|(id, path, _)| {
            let mut policy = before.clone();
            let node = NodeRef {
                id,
                display_name: Some("laptop"),
            };
            let result = persist_allow_always(&mut policy, &node, path, AccessKind::Read);
            (*id, *path, result, policy)
        })
        .collect();
    assert_eq!(expected, actual);
}

fn unsafe_key(key: &str) -> PolicyError {
    PolicyError::UnsafeNodeKey {
        key: key.to_owned(),
    }
}

#[test]
fn persisted_approval_allows_exactly_that_path_on_that_node() {
    let mut policy = policy(&[("*", reads(AskMode::OnMiss, &[]))]);
    let node = NodeRef {
        id: "n1",
        display_name: None,
    };
    let other = NodeRef {
        id: "n2",
        display_name: None,
    };
    persist_allow_always(&mut policy, &node, "/data/*", AccessKind::Read).expect("persist");

    let actual = [
        evaluate(Some(&policy), &node, "/data/*", AccessKind::Read, HOME),
        evaluate(Some(&policy), &node, "/data/secret", AccessKind::Read, HOME),
        evaluate(Some(&policy), &node, "/data/*", AccessKind::Write, HOME),
        evaluate(Some(&policy), &other, "/data/*", AccessKind::Read, HOME),
    ];
    let expected = [
        allowed(),
        askable(DenyReason::NoAllowMatch),
        askable(DenyReason::NoAllowPatterns),
        askable(DenyReason::NoAllowPatterns),
    ];
    assert_eq!(expected, actual);
}

/// Issue 20: a deny pattern `X/**` denies the directory `X` itself, with and without a trailing
/// separator, so that reading, writing or listing it is refused and cannot be approved.
#[test]
fn issue_20_a_denied_directory_is_denied_itself() {
    let node = NodeRef {
        id: "n1",
        display_name: None,
    };
    // The issue's configuration, then the same with writes allowed and with on-miss asking: the
    // deny pattern decides before any allow pattern or ask mode, so none of them reopens it.
    let configs = [
        entry(AskMode::Off, &["/**"], &[], &["**/.ssh/**"]),
        entry(AskMode::Off, &["/**"], &["/**"], &["**/.ssh/**"]),
        entry(AskMode::OnMiss, &["/**"], &["/**"], &["**/.ssh/**"]),
    ];
    let paths = [
        "/home/node/.ssh",
        "/home/node/.ssh/",
        "/home/node/.ssh//",
        "/home/node/./.ssh",
        "/home/node/.ssh/id_rsa",
    ];
    // `dir.list` is checked as a read, on the node and on the Gateway.
    let kinds = [AccessKind::Read, AccessKind::Write];
    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for (config_idx, node_policy) in configs.iter().enumerate() {
        let policy = policy(&[("n1", node_policy.clone())]);
        for path in paths {
            for kind in kinds {
                let decision = evaluate(Some(&policy), &node, path, kind, HOME);
                let refused = match decision {
                    Decision::Deny {
                        code: DenyCode::PolicyDenied,
                        askable: false,
                        reason,
                    } => Some(reason),
                    Decision::Allow { .. } | Decision::Ask { .. } | Decision::Deny { .. } => None,
                };
                expected.push((config_idx, path, kind, Some(DenyReason::DenyPattern)));
                actual.push((config_idx, path, kind, refused));
            }
        }
    }
    assert_eq!(expected, actual);
}

#[test]
fn a_deny_pattern_covers_its_directory_for_every_shape_ending_in_globstar() {
    use AccessKind::Read;
    let deny_only = |pattern: &'static str| {
        Some(policy(&[(
            "n1",
            entry(AskMode::Off, &["/**", "C:/**"], &[], &[pattern]),
        )]))
    };
    let cases = vec![
        case(
            "absolute pattern: the directory",
            deny_only("/home/node/.ssh/**"),
            "/home/node/.ssh",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "tilde pattern: the directory with a trailing slash",
            deny_only("~/.ssh/**"),
            "/home/node/.ssh/",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "backslash pattern: the directory",
            deny_only("~\\.ssh\\**"),
            "/home/node/.ssh",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "alternation: each named directory",
            deny_only("**/.{ssh,aws}/**"),
            "/home/node/.aws",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "wildcard segment: each matching directory",
            deny_only("/srv/*/secrets/**"),
            "/srv/app/secrets",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "windows path: the directory",
            deny_only("C:/Users/*/.ssh/**"),
            "C:\\Users\\me\\.ssh\\",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "root: '/**' denies '/' itself",
            deny_only("/**"),
            "/",
            Read,
            denied(DenyReason::DenyPattern),
        ),
        case(
            "a name that only starts like the directory is not covered",
            deny_only("**/.ssh/**"),
            "/home/node/.sshrc",
            Read,
            allowed(),
        ),
        case(
            "a name that extends the directory's name is not covered",
            deny_only("**/.ssh/**"),
            "/home/node/.ssh.bak",
            Read,
            allowed(),
        ),
        case(
            "the parent of the denied directory is not covered",
            deny_only("/home/node/.ssh/**"),
            "/home/node",
            Read,
            allowed(),
        ),
        case(
            "a pattern not ending in '/**' keeps its meaning",
            deny_only("/home/node/.ssh/*.pem"),
            "/home/node/.ssh",
            Read,
            allowed(),
        ),
        case(
            "allow patterns keep their meaning: 'X/**' does not allow X",
            Some(policy(&[("n1", reads(AskMode::Off, &["/ws/**"]))])),
            "/ws",
            Read,
            denied(DenyReason::NoAllowMatch),
        ),
    ];

    let expected: Vec<_> = cases
        .iter()
        .map(|case| (case.name, case.expected))
        .collect();
    let actual: Vec<_> = cases
        .iter()
        .map(|case| {
            let node = NodeRef {
                id: case.node_id,
                display_name: case.display_name,
            };
            let decision = evaluate(case.policy.as_ref(), &node, case.path, case.kind, HOME);
            (case.name, decision)
        })
        .collect();
    assert_eq!(expected, actual);
}
