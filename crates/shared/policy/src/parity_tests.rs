//! The original file-transfer policy's own test vectors, as a table.
//!
//! We wrote each row from the facts of one case in the original's tests: the configuration, the
//! request and the outcome they assert (`extensions/file-transfer/src/shared/policy.test.ts` and
//! the `node-invoke-policy*.test.ts` files of the public `openclaw/openclaw` repository). No code
//! or prose was copied: the names, the layout and the home directory (`/home/me`) are ours.
//!
//! A row marked [`Parity::DiffersOnPurpose`] records the original's outcome for a behaviour we
//! changed on purpose (see "Deliberate differences" in the `path` module docs). The table checks
//! that such a row really differs, and the named test asserts our behaviour instead.
//!
//! Not transcribed, because no policy decision is asserted or our API has no counterpart:
//! - the original prefers the live runtime configuration over a stale configuration passed by
//!   its caller; our callers pass the one policy they hold, so the choice is theirs;
//! - `literalGrants` (the newer grant model: a `dir.list` grant re-approved after its canonical
//!   path changed, and the two real `dir.fetch` grant cases); we have no such model;
//! - request parameter checks (`maxBytes` shapes, `file.create` metadata), transport failures,
//!   `preflightOnly` forwarding, audit records and archive entry list handling.

use pretty_assertions::assert_eq;
use pretty_assertions::assert_ne;
use serde_json::Value;
use serde_json::json;

use crate::error::PolicyError;
use crate::path::AccessKind;
use crate::path::Decision;
use crate::path::DenyCode;
use crate::path::FileTransferPolicy;
use crate::path::NodeRef;
use crate::path::evaluate;
use crate::path::persist_allow_always;
use crate::path::resolve_entry;

/// The home directory that `~` expands to in every row.
const HOME: &str = "/home/me";

/// What a request does, as the original's commands name it.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `file.fetch`, `file.stat`, `dir.list` or `dir.fetch`.
    Read,
    /// `file.write` or `file.create`.
    Write,
}

/// The outcome of one request, in the terms both policies share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Allowed without asking, with these limits.
    Allow {
        max_bytes: Option<u64>,
        follow_symlinks: bool,
    },
    /// The operator is asked every time (`ask: always`), with these limits if approved.
    Ask {
        max_bytes: Option<u64>,
        follow_symlinks: bool,
    },
    /// `POLICY_DENIED`, askable (`ask: on-miss`), with these limits if approved.
    Askable {
        max_bytes: Option<u64>,
        follow_symlinks: bool,
    },
    /// Denied with this code, not askable.
    Denied(DenyCode),
}

/// Whether a row's original outcome is also ours.
#[derive(Debug, Clone, Copy)]
enum Parity {
    /// Both policies give the row's outcome.
    Agrees,
    /// We differ on purpose; the named test asserts our behaviour.
    DiffersOnPurpose(&'static str),
}

/// The node a request comes from.
#[derive(Debug, Clone, Copy)]
struct Node {
    id: &'static str,
    display_name: Option<&'static str>,
}

/// One decision case of the original's tests.
struct DecisionRow {
    /// The behaviour the row checks.
    name: &'static str,
    /// The `file-transfer` plugin config (`{"nodes": …}`), or `None` when there is none.
    config: Option<Value>,
    node: Node,
    kind: Kind,
    path: &'static str,
    /// The original's outcome.
    original: Outcome,
    parity: Parity,
}

/// One allow-always persistence case of the original's tests.
struct PersistRow {
    /// The behaviour the row checks.
    name: &'static str,
    /// The `nodes` object before the approval.
    before: Value,
    node: Node,
    kind: Kind,
    path: &'static str,
    /// The `nodes` object the original writes, or `None` when it refuses.
    original: Option<Value>,
    parity: Parity,
}

const N1: Node = Node {
    id: "n1",
    display_name: None,
};

/// The node of the original's `node.invoke` policy tests.
const NODE_ONE: Node = Node {
    id: "node-1",
    display_name: Some("Node One"),
};

const fn allow(max_bytes: Option<u64>, follow_symlinks: bool) -> Outcome {
    Outcome::Allow {
        max_bytes,
        follow_symlinks,
    }
}

const ALLOWED: Outcome = allow(None, false);
const DENIED: Outcome = Outcome::Denied(DenyCode::PolicyDenied);
const NO_POLICY: Outcome = Outcome::Denied(DenyCode::NoPolicy);

fn nodes(nodes: Value) -> Option<Value> {
    Some(json!({ "nodes": nodes }))
}

/// The entry of the original's `node.invoke` tests when a test does not set its own.
fn invoke_default() -> Option<Value> {
    nodes(json!({
        "node-1": {
            "allowReadPaths": ["/tmp/**"],
            "allowWritePaths": ["/tmp/**"],
            "maxBytes": 512,
        },
    }))
}

/// The entry of the original's `file.create` tests, with its byte limit.
fn create_entry(max_bytes: u64) -> Option<Value> {
    nodes(json!({
        "node-1": {
            "ask": "off",
            "allowReadPaths": ["/workspace/**"],
            "allowWritePaths": ["/workspace/**"],
            "maxBytes": max_bytes,
            "followSymlinks": true,
        },
    }))
}

/// The entry of the original's directory-fetch deny cases.
fn home_with_ssh_denied() -> Option<Value> {
    nodes(json!({
        "node-1": {
            "allowReadPaths": ["/home/me", "/home/me/**"],
            "denyPaths": ["**/.ssh/**"],
        },
    }))
}

/// The configuration of the issue: everything readable except `.ssh` directories.
fn all_but_ssh() -> Option<Value> {
    nodes(json!({"n1": {"allowReadPaths": ["/**"], "denyPaths": ["**/.ssh/**"]}}))
}

fn decision_rows() -> Vec<DecisionRow> {
    use Kind::Read;
    use Kind::Write;
    let row = |name, config, kind, path, original| DecisionRow {
        name,
        config,
        node: N1,
        kind,
        path,
        original,
        parity: Parity::Agrees,
    };
    let invoke = |name, config, kind, path, original| DecisionRow {
        node: NODE_ONE,
        ..row(name, config, kind, path, original)
    };
    let tmp_reads = || nodes(json!({"n1": {"allowReadPaths": ["/tmp/**"]}}));
    let downloads_deny = |deny: Value| {
        nodes(json!({"n1": {"allowReadPaths": ["~/Downloads/**"], "denyPaths": deny}}))
    };
    vec![
        // policy.test.ts: deny by default.
        row("no config gives NO_POLICY", None, Read, "/tmp/x", NO_POLICY),
        row(
            "a config without node entries gives NO_POLICY",
            nodes(json!({})),
            Read,
            "/tmp/x",
            NO_POLICY,
        ),
        row(
            "only another node's entry and no wildcard gives NO_POLICY",
            nodes(json!({"other-node": {"allowReadPaths": ["/tmp/**"]}})),
            Read,
            "/tmp/x",
            NO_POLICY,
        ),
        // policy.test.ts: `..` before any glob.
        row(
            "a '..' segment is denied even where the allow glob matches the raw path",
            nodes(json!({"n1": {"allowReadPaths": ["/allowed/**"]}})),
            Read,
            "/allowed/../etc/passwd",
            DENIED,
        ),
        row(
            "a path ending in '/..' is denied",
            tmp_reads(),
            Read,
            "/tmp/foo/..",
            DENIED,
        ),
        row(
            "a bare '..' is denied even under '/**'",
            nodes(json!({"n1": {"allowReadPaths": ["/**"]}})),
            Read,
            "..",
            DENIED,
        ),
        // policy.test.ts: denyPaths always wins.
        row(
            "a deny match beats an allow match",
            nodes(json!({"n1": {"allowReadPaths": ["/tmp/**"], "denyPaths": ["**/.ssh/**"]}})),
            Read,
            "/tmp/.ssh/id_rsa",
            DENIED,
        ),
        row(
            "'/**/' in a deny pattern also matches no directory at all",
            downloads_deny(json!(["~/Downloads/**/*.pem"])),
            Read,
            "/home/me/Downloads/key.pem",
            DENIED,
        ),
        row(
            "a deny pattern written with '~\\' and backslashes expands and matches",
            downloads_deny(json!(["~\\Downloads\\**\\*.pem"])),
            Read,
            "/home/me/Downloads/key.pem",
            DENIED,
        ),
        row(
            "a brace alternation in a deny pattern matches a file extension",
            downloads_deny(json!(["~/Downloads/**/*.{pem,key}", "**/.{ssh,aws}/**"])),
            Read,
            "/home/me/Downloads/api.key",
            DENIED,
        ),
        row(
            "a brace alternation in a deny pattern matches a directory name",
            downloads_deny(json!(["~/Downloads/**/*.{pem,key}", "**/.{ssh,aws}/**"])),
            Read,
            "/home/me/Downloads/.aws/credentials",
            DENIED,
        ),
        row(
            "a deny pattern 'X/**' denies the directory X itself",
            all_but_ssh(),
            Read,
            "/home/me/.ssh",
            DENIED,
        ),
        row(
            "a deny pattern 'X/**' denies 'X/' with a trailing separator",
            all_but_ssh(),
            Read,
            "/home/me/.ssh/",
            DENIED,
        ),
        row(
            "a deny pattern 'X/**' denies the directory X on a Windows path",
            all_but_ssh(),
            Read,
            "C:\\Users\\me\\.ssh",
            DENIED,
        ),
        row(
            "a sibling sharing only the denied directory's name prefix is allowed",
            all_but_ssh(),
            Read,
            "/home/me/.sshrc",
            ALLOWED,
        ),
        row(
            "a deny match beats ask always and is not askable",
            nodes(json!({"n1": {"ask": "always", "denyPaths": ["**/secrets/**"]}})),
            Read,
            "/var/secrets/api.key",
            DENIED,
        ),
        // policy.test.ts: allow matching.
        row(
            "an allow match with ask unset allows, with no limit and no symlinks",
            tmp_reads(),
            Read,
            "/tmp/foo/bar.png",
            ALLOWED,
        ),
        row(
            "an allow carries the entry's maxBytes",
            nodes(json!({"n1": {"allowReadPaths": ["/tmp/**"], "maxBytes": 1024}})),
            Read,
            "/tmp/x",
            allow(Some(1024), false),
        ),
        row(
            "a write is allowed by allowWritePaths",
            nodes(json!({"n1": {"allowReadPaths": ["/tmp/**"], "allowWritePaths": ["/srv/**"]}})),
            Write,
            "/srv/out.txt",
            ALLOWED,
        ),
        row(
            "a write is not allowed by allowReadPaths",
            nodes(json!({"n1": {"allowReadPaths": ["/tmp/**"], "allowWritePaths": ["/srv/**"]}})),
            Write,
            "/tmp/out.txt",
            DENIED,
        ),
        row(
            "followSymlinks is false when the entry does not set it",
            tmp_reads(),
            Read,
            "/tmp/x",
            ALLOWED,
        ),
        DecisionRow {
            node: Node {
                id: "n2",
                display_name: None,
            },
            ..row(
                "followSymlinks true in the entry is carried by the decision",
                nodes(json!({"n2": {"allowReadPaths": ["/tmp/**"], "followSymlinks": true}})),
                Read,
                "/tmp/x",
                allow(None, true),
            )
        },
        row(
            "'~/' in an allow pattern expands to the home directory",
            nodes(json!({"n1": {"allowReadPaths": ["~/Screenshots/**"]}})),
            Read,
            "/home/me/Screenshots/shot.png",
            ALLOWED,
        ),
        row(
            "'~\\' with backslashes in an allow pattern expands before matching",
            nodes(json!({"n1": {"allowReadPaths": ["~\\Downloads\\**"]}})),
            Read,
            "/home/me/Downloads/shot.png",
            ALLOWED,
        ),
        row(
            "a Windows node path with backslashes matches a forward-slash pattern",
            nodes(json!({"n1": {"allowReadPaths": ["C:/Users/me/**"]}})),
            Read,
            "C:\\Users\\me\\file.txt",
            ALLOWED,
        ),
        // policy.test.ts: ask modes.
        row(
            "on-miss makes a miss askable",
            nodes(json!({"n1": {"ask": "on-miss", "allowReadPaths": ["/var/log/**"]}})),
            Read,
            "/tmp/x",
            Outcome::Askable {
                max_bytes: None,
                follow_symlinks: false,
            },
        ),
        row(
            "an approved on-miss miss keeps the entry's maxBytes and followSymlinks",
            nodes(json!({"n1": {
                "ask": "on-miss",
                "allowReadPaths": ["/var/log/**"],
                "maxBytes": 4096,
                "followSymlinks": true,
            }})),
            Read,
            "/tmp/x",
            Outcome::Askable {
                max_bytes: Some(4096),
                follow_symlinks: true,
            },
        ),
        row(
            "on-miss still allows a match without asking",
            nodes(json!({"n1": {"ask": "on-miss", "allowReadPaths": ["/tmp/**"]}})),
            Read,
            "/tmp/x",
            ALLOWED,
        ),
        row(
            "always asks even when an allow pattern matches",
            nodes(json!({"n1": {"ask": "always", "allowReadPaths": ["/tmp/**"]}})),
            Read,
            "/tmp/x",
            Outcome::Ask {
                max_bytes: None,
                follow_symlinks: false,
            },
        ),
        row(
            "off makes a miss a plain denial",
            nodes(json!({"n1": {"ask": "off", "allowReadPaths": ["/var/log/**"]}})),
            Read,
            "/tmp/x",
            DENIED,
        ),
        DecisionRow {
            parity: Parity::DiffersOnPurpose("an_invalid_ask_value_refuses_the_policy_at_load"),
            ..row(
                "an invalid ask value acts as off",
                nodes(json!({"n1": {"ask": "sometimes", "allowReadPaths": ["/var/log/**"]}})),
                Read,
                "/tmp/x",
                DENIED,
            )
        },
        // policy.test.ts: entry lookup.
        DecisionRow {
            node: Node {
                id: "node-abc-123",
                display_name: Some("Lobster MacBook"),
            },
            ..row(
                "the display name's entry applies when the node id has none",
                nodes(json!({"Lobster MacBook": {"allowReadPaths": ["/tmp/**"]}})),
                Read,
                "/tmp/x",
                ALLOWED,
            )
        },
        DecisionRow {
            node: Node {
                id: "n1",
                display_name: Some("anything"),
            },
            ..row(
                "the wildcard entry applies when neither id nor display name has one",
                nodes(json!({"*": {"allowReadPaths": ["/tmp/**"]}})),
                Read,
                "/tmp/x",
                ALLOWED,
            )
        },
        // node-invoke-policy.test.ts: the policy decision before each node call.
        invoke(
            "the entry's limits replace the caller's, and symlinks stay off",
            invoke_default(),
            Read,
            "/tmp/file.txt",
            allow(Some(512), false),
        ),
        invoke(
            "an entry without maxBytes leaves the command's own limit",
            nodes(json!({"node-1": {"allowReadPaths": ["/tmp/**"]}})),
            Read,
            "/tmp/file.txt",
            ALLOWED,
        ),
        invoke(
            "a plugin config without nodes denies with NO_POLICY before the node is called",
            Some(json!({})),
            Read,
            "/tmp/file.txt",
            NO_POLICY,
        ),
        invoke(
            "an on-miss miss is askable and an approval keeps the entry's limit",
            nodes(json!({"node-1": {
                "ask": "on-miss",
                "allowReadPaths": ["/allowed/**"],
                "maxBytes": 256,
            }})),
            Read,
            "/tmp/new.txt",
            Outcome::Askable {
                max_bytes: Some(256),
                follow_symlinks: false,
            },
        ),
        invoke(
            "a fetch whose canonical target leaves the allow list is denied",
            invoke_default(),
            Read,
            "/etc/passwd",
            DENIED,
        ),
        invoke(
            "a write whose requested path is allowed passes the first check",
            nodes(json!({"node-1": {"allowWritePaths": ["/tmp/**"], "followSymlinks": true}})),
            Write,
            "/tmp/link/out.txt",
            allow(None, true),
        ),
        invoke(
            "a write whose canonical target leaves the allow list is denied",
            nodes(json!({"node-1": {"allowWritePaths": ["/tmp/**"], "followSymlinks": true}})),
            Write,
            "/etc/out.txt",
            DENIED,
        ),
        invoke(
            "a write whose canonical target is in a second allow pattern is allowed",
            nodes(json!({"node-1": {
                "allowWritePaths": ["/tmp/**", "/private/tmp/**"],
                "followSymlinks": true,
            }})),
            Write,
            "/private/tmp/out.txt",
            allow(None, true),
        ),
        invoke(
            "a directory fetch of a root listed exactly is allowed",
            home_with_ssh_denied(),
            Read,
            "/home/me",
            ALLOWED,
        ),
        invoke(
            "a directory fetch entry under a denied directory is denied",
            home_with_ssh_denied(),
            Read,
            "/home/me/.ssh/id_rsa",
            DENIED,
        ),
        invoke(
            "a directory fetch entry outside any deny pattern is allowed",
            home_with_ssh_denied(),
            Read,
            "/home/me/ok.txt",
            ALLOWED,
        ),
        invoke(
            "a directory fetch under '/tmp/**' carries the entry's limit",
            invoke_default(),
            Read,
            "/tmp/project",
            allow(Some(512), false),
        ),
        // node-invoke-policy.create.test.ts.
        invoke(
            "a create inside allowWritePaths is allowed with the entry's limits",
            create_entry(50 * 1024 * 1024),
            Write,
            "/workspace/input",
            allow(Some(50 * 1024 * 1024), true),
        ),
        invoke(
            "a create carries a smaller configured limit for the caller to enforce",
            create_entry(16 * 1024 * 1024),
            Write,
            "/workspace/input",
            allow(Some(16 * 1024 * 1024), true),
        ),
        invoke(
            "a create whose canonical target leaves the allow list is denied",
            create_entry(50 * 1024 * 1024),
            Write,
            "/outside/input",
            DENIED,
        ),
        // node-invoke-policy.real-dir-fetch.test.ts: names with a newline. The original grants
        // the source directory with a literal grant; allow patterns stand in for it here.
        invoke(
            "a deny pattern naming a file with a newline denies that file",
            nodes(json!({"node-1": {
                "ask": "on-miss",
                "followSymlinks": true,
                "allowReadPaths": ["/src", "/src/**"],
                "denyPaths": ["/src/line\n.txt"],
            }})),
            Read,
            "/src/line\n.txt",
            DENIED,
        ),
        invoke(
            "a deny pattern for 'line/n.txt' does not deny the name 'line\\n.txt'",
            nodes(json!({"node-1": {
                "ask": "on-miss",
                "followSymlinks": true,
                "allowReadPaths": ["/src", "/src/**"],
                "denyPaths": ["/src/line/n.txt"],
            }})),
            Read,
            "/src/line\n.txt",
            allow(None, true),
        ),
    ]
}

fn persist_rows() -> Vec<PersistRow> {
    use Kind::Read;
    use Kind::Write;
    let lobster = Node {
        id: "n1",
        display_name: Some("Lobster"),
    };
    vec![
        PersistRow {
            name: "allow-always appends to the node's existing entry",
            before: json!({"n1": {"allowReadPaths": ["/tmp/**"]}}),
            node: N1,
            kind: Read,
            path: "/srv/added.png",
            original: Some(json!({"n1": {"allowReadPaths": ["/tmp/**", "/srv/added.png"]}})),
            parity: Parity::Agrees,
        },
        PersistRow {
            name: "allow-always without any entry creates one keyed by the display name",
            before: json!({}),
            node: lobster,
            kind: Write,
            path: "/srv/out.txt",
            original: Some(json!({"Lobster": {"allowWritePaths": ["/srv/out.txt"]}})),
            parity: Parity::DiffersOnPurpose(
                "allow_always_without_an_entry_writes_under_the_node_id",
            ),
        },
        PersistRow {
            name: "allow-always never writes under the wildcard that applied",
            before: json!({"*": {"allowReadPaths": ["/var/log/**"]}}),
            node: lobster,
            kind: Read,
            path: "/srv/added.png",
            original: Some(json!({
                "*": {"allowReadPaths": ["/var/log/**"]},
                "Lobster": {"allowReadPaths": ["/srv/added.png"]},
            })),
            parity: Parity::DiffersOnPurpose(
                "allow_always_under_the_wildcard_copies_it_into_the_node_entry",
            ),
        },
        PersistRow {
            name: "allow-always refuses an unsafe display name as a new key",
            before: json!({}),
            node: Node {
                id: "n1",
                display_name: Some("__proto__"),
            },
            kind: Read,
            path: "/etc/passwd",
            original: None,
            parity: Parity::DiffersOnPurpose(
                "allow_always_never_keys_by_display_name_so_an_unsafe_one_is_harmless",
            ),
        },
        PersistRow {
            name: "allow-always refuses an unsafe node id as a new key",
            before: json!({}),
            node: Node {
                id: "constructor",
                display_name: None,
            },
            kind: Read,
            path: "/etc/passwd",
            original: None,
            parity: Parity::Agrees,
        },
        PersistRow {
            name: "allow-always does not add a path that is already there",
            before: json!({"n1": {"allowReadPaths": ["/tmp/x"]}}),
            node: N1,
            kind: Read,
            path: "/tmp/x",
            original: Some(json!({"n1": {"allowReadPaths": ["/tmp/x"]}})),
            parity: Parity::Agrees,
        },
    ]
}

impl Kind {
    fn access(self) -> AccessKind {
        match self {
            Kind::Read => AccessKind::Read,
            Kind::Write => AccessKind::Write,
        }
    }
}

impl Node {
    fn as_ref(self) -> NodeRef<'static> {
        NodeRef {
            id: self.id,
            display_name: self.display_name,
        }
    }
}

/// Loads a plugin config the way the Gateway does: a refusal is a startup error.
fn load(config: &Value) -> Result<FileTransferPolicy, String> {
    serde_json::from_value(config.clone()).map_err(|err| format!("refused at load: {err}"))
}

fn load_nodes(nodes: &Value) -> FileTransferPolicy {
    load(&json!({ "nodes": nodes })).expect("a valid nodes object")
}

/// Returns our outcome for `row`, or the load error when we refuse its configuration.
fn our_outcome(row: &DecisionRow) -> Result<Outcome, String> {
    let policy = row.config.as_ref().map(load).transpose()?;
    let node = row.node.as_ref();
    let decision = evaluate(policy.as_ref(), &node, row.path, row.kind.access(), HOME);
    let outcome = match decision {
        Decision::Allow {
            max_bytes,
            follow_symlinks,
        } => Outcome::Allow {
            max_bytes,
            follow_symlinks,
        },
        Decision::Ask {
            max_bytes,
            follow_symlinks,
        } => Outcome::Ask {
            max_bytes,
            follow_symlinks,
        },
        Decision::Deny {
            code: DenyCode::PolicyDenied,
            askable: true,
            ..
        } => {
            // An approval applies the limits of the entry that decided.
            let policy = policy.as_ref().expect("an askable denial has a policy");
            let entry = resolve_entry(policy, &node).expect("an askable denial has an entry");
            Outcome::Askable {
                max_bytes: entry.policy.effective_max_bytes(),
                follow_symlinks: entry.policy.follow_symlinks,
            }
        }
        Decision::Deny { code, .. } => Outcome::Denied(code),
    };
    Ok(outcome)
}

/// Returns the `nodes` object after our allow-always, or `None` when we refuse.
fn our_persist(row: &PersistRow) -> Option<FileTransferPolicy> {
    let mut policy = load_nodes(&row.before);
    let node = row.node.as_ref();
    persist_allow_always(&mut policy, &node, row.path, row.kind.access())
        .ok()
        .map(|()| policy)
}

#[test]
fn the_original_decision_vectors_hold_apart_from_documented_differences() {
    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for row in decision_rows() {
        let ours = our_outcome(&row);
        match row.parity {
            Parity::Agrees => {
                expected.push((row.name, Ok(row.original)));
                actual.push((row.name, ours));
            }
            Parity::DiffersOnPurpose(test) => assert_ne!(
                Ok(row.original),
                ours,
                "{}: marked as a documented difference ({test}) but agrees now",
                row.name
            ),
        }
    }
    assert_eq!(expected, actual);
}

#[test]
fn the_original_persistence_vectors_hold_apart_from_documented_differences() {
    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for row in persist_rows() {
        let original = row.original.as_ref().map(load_nodes);
        let ours = our_persist(&row);
        match row.parity {
            Parity::Agrees => {
                expected.push((row.name, original));
                actual.push((row.name, ours));
            }
            Parity::DiffersOnPurpose(test) => assert_ne!(
                original, ours,
                "{}: marked as a documented difference ({test}) but agrees now",
                row.name
            ),
        }
    }
    assert_eq!(expected, actual);
}

#[test]
fn every_difference_row_names_a_test_in_this_file() {
    let source = include_str!("parity_tests.rs");
    let decision_tests = decision_rows().into_iter().map(|row| row.parity);
    let persist_tests = persist_rows().into_iter().map(|row| row.parity);
    let missing: Vec<&str> = decision_tests
        .chain(persist_tests)
        .filter_map(|parity| match parity {
            Parity::Agrees => None,
            Parity::DiffersOnPurpose(test) => Some(test),
        })
        .filter(|test| !source.contains(&format!("fn {test}()")))
        .collect();
    assert_eq!(Vec::<&str>::new(), missing);
}

// Our side of each documented difference.

/// The original reads `"sometimes"` as `off`; we refuse the policy, so the Gateway does not
/// start with an `ask` mode the operator did not choose.
#[test]
fn an_invalid_ask_value_refuses_the_policy_at_load() {
    let config = json!({"nodes": {"n1": {"ask": "sometimes", "allowReadPaths": ["/var/log/**"]}}});
    assert_eq!(
        Err(String::from(
            "refused at load: unknown variant `sometimes`, expected one of `off`, `on-miss`, `always`"
        )),
        load(&config)
    );
}

/// With no entry at all, the grant goes under the node id, never under a display name that other
/// nodes may share.
#[test]
fn allow_always_without_an_entry_writes_under_the_node_id() {
    let mut policy = load_nodes(&json!({}));
    let node = NodeRef {
        id: "n1",
        display_name: Some("Lobster"),
    };
    persist_allow_always(&mut policy, &node, "/srv/out.txt", AccessKind::Write).unwrap();
    assert_eq!(
        load_nodes(&json!({"n1": {"allowWritePaths": ["/srv/out.txt"]}})),
        policy
    );
}

/// When the wildcard entry applied, the node's new entry starts as a copy of it, so the node
/// keeps the wildcard's `ask`, `denyPaths` and limits; the wildcard itself is untouched.
#[test]
fn allow_always_under_the_wildcard_copies_it_into_the_node_entry() {
    let wildcard = json!({
        "ask": "on-miss",
        "allowReadPaths": ["/var/log/**"],
        "denyPaths": ["**/.ssh/**"],
        "maxBytes": 4096,
    });
    let mut policy = load_nodes(&json!({ "*": wildcard }));
    let node = NodeRef {
        id: "n1",
        display_name: Some("Lobster"),
    };
    persist_allow_always(&mut policy, &node, "/srv/added.png", AccessKind::Read).unwrap();
    assert_eq!(
        load_nodes(&json!({
            "*": wildcard,
            "n1": {
                "ask": "on-miss",
                "allowReadPaths": ["/var/log/**", "/srv/added.png"],
                "denyPaths": ["**/.ssh/**"],
                "maxBytes": 4096,
            },
        })),
        policy
    );
    let denied = evaluate(
        Some(&policy),
        &node,
        "/srv/.ssh/id_rsa",
        AccessKind::Read,
        HOME,
    );
    assert!(matches!(
        denied,
        Decision::Deny {
            code: DenyCode::PolicyDenied,
            askable: false,
            ..
        }
    ));
}

/// A display name is never a key we write, so `__proto__` as a display name cannot reach the
/// map; the unsafe names are still refused as node ids.
#[test]
fn allow_always_never_keys_by_display_name_so_an_unsafe_one_is_harmless() {
    let mut policy = load_nodes(&json!({}));
    let node = NodeRef {
        id: "n1",
        display_name: Some("__proto__"),
    };
    persist_allow_always(&mut policy, &node, "/etc/hosts", AccessKind::Read).unwrap();
    assert_eq!(
        load_nodes(&json!({"n1": {"allowReadPaths": ["/etc/hosts"]}})),
        policy
    );

    let refused: Vec<_> = ["__proto__", "prototype", "constructor"]
        .into_iter()
        .map(|id| {
            let mut policy = load_nodes(&json!({}));
            let node = NodeRef {
                id,
                display_name: None,
            };
            persist_allow_always(&mut policy, &node, "/etc/hosts", AccessKind::Read)
        })
        .collect();
    let expected: Vec<_> = ["__proto__", "prototype", "constructor"]
        .into_iter()
        .map(|key| {
            Err(PolicyError::UnsafeNodeKey {
                key: key.to_owned(),
            })
        })
        .collect();
    assert_eq!(expected, refused);
}

/// The original stores the approved path as given, so approving `/data/*` would grant every name
/// in `/data`; we store a literal, which grants that one name.
#[test]
fn allow_always_stores_a_literal_not_a_glob() {
    let mut policy = load_nodes(&json!({"n1": {"ask": "on-miss"}}));
    let node = N1.as_ref();
    persist_allow_always(&mut policy, &node, "/data/*", AccessKind::Read).unwrap();
    assert_eq!(
        load_nodes(&json!({"n1": {"ask": "on-miss", "allowReadPaths": ["/data/[*]"]}})),
        policy
    );
    let decide = |path| evaluate(Some(&policy), &node, path, AccessKind::Read, HOME);
    assert_eq!(
        (
            Decision::Allow {
                max_bytes: None,
                follow_symlinks: false
            },
            true
        ),
        (
            decide("/data/*"),
            matches!(decide("/data/secret"), Decision::Deny { askable: true, .. })
        )
    );
}

/// Staged inputs are written under `gatehouse-staged-*`, the name our Gateway stages under; the
/// original's `openclaw-staged-*` is not writable by default.
#[test]
fn staged_inputs_are_writable_under_the_gatehouse_prefix() {
    let mut policy = FileTransferPolicy::default();
    crate::path::apply_default_policy(&mut policy, "n1", "main", "/home/me/workspace", HOME)
        .unwrap();
    let node = N1.as_ref();
    let decide = |path| evaluate(Some(&policy), &node, path, AccessKind::Write, HOME);
    let ours = decide("/home/me/workspace/media/inbound/gatehouse-staged-1/a.png");
    let theirs = decide("/home/me/workspace/media/inbound/openclaw-staged-1/a.png");
    assert_eq!(
        (true, false),
        (
            matches!(ours, Decision::Allow { .. }),
            matches!(theirs, Decision::Allow { .. })
        )
    );
}
