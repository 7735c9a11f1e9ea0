//! The file-transfer path policy: which node paths a file command may read or write.
//!
//! The policy is deny by default. An operator opts a node in with an entry in
//! [`FileTransferPolicy::nodes`], keyed by node id, display name or `*`. [`evaluate`] resolves a
//! request in this order, and the order is part of the contract:
//!
//! 1. A raw path with a `..` segment (`\` and `/` count the same) is denied with
//!    [`DenyCode::PolicyDenied`], not askable, before any glob is consulted.
//! 2. No policy, or no entry for the node id, the display name or `*`, gives
//!    [`DenyCode::NoPolicy`], not askable.
//! 3. A `denyPaths` match denies, not askable. It wins even over `ask: always`. A `denyPaths`
//!    pattern that does not compile denies too (fail closed). A deny pattern that ends in `/**`
//!    also denies the directory it names, so `**/.ssh/**` denies `~/.ssh` and `~/.ssh/`
//!    themselves and a `dir.list` of a denied directory cannot reveal its names.
//! 4. `ask: always` asks, whether or not an allow pattern matches.
//! 5. An allow pattern for the requested [`AccessKind`] allows.
//! 6. Otherwise the request is denied; it is askable only under `ask: on-miss`.
//!
//! # Patterns
//!
//! Patterns are globs compiled with [`globset`]: `*` and `?` never match `/`, `**` matches any
//! number of directories, `{a,b}` is an alternation, `[abc]` is a class, and a leading dot needs
//! no special pattern (`*` matches `.env`). A leading `~` or `~/` expands to the caller's home
//! directory, inserted literally. Backslashes become `/` in both patterns and paths, so a
//! backslash never escapes anything; write `[*]` to match a literal `*`. Blank patterns are
//! ignored.
//!
//! An allow pattern `X/**` matches what is below `X`, never `X` itself; list `X` too to allow the
//! directory. A deny pattern `X/**` matches `X` as well: a deny of everything below a directory
//! must not leave the directory's own listing open.
//!
//! Before matching, the requested path is normalized lexically: backslashes become `/`, empty
//! and `.` segments are dropped, and a trailing `/` is removed. Since `..` was refused in step 1,
//! the normalized path names the same file as the raw one, so `/ws/./secret` cannot slip past a
//! `denyPaths` entry of `/ws/secret`.
//!
//! # Configuration shape
//!
//! The types read and write the upstream JSON (or TOML) shape with camelCase keys: `nodes`,
//! `policyVersion`, `workspaces`, and per node `ask` (`"off"`, `"on-miss"`, `"always"`),
//! `allowReadPaths`, `allowWritePaths`, `denyPaths`, `maxBytes` and `followSymlinks`. Unknown
//! keys are ignored; an unknown `ask` value is a deserialization error rather than a silent
//! fallback. Absent optional fields are omitted when serializing.
//!
//! # Deliberate differences from the original policy
//!
//! The rules above follow the original file-transfer policy, whose own test vectors run as a
//! table in this crate's tests. Where we differ, we do so on purpose:
//!
//! - Staged inputs are writable under `media/inbound/gatehouse-staged-*/**`, where the original
//!   stages under `openclaw-staged-*`: the staging directory is named after the product that
//!   creates it.
//! - An invalid `ask` value (`"sometimes"`) makes the whole policy fail to load, where the
//!   original treats it as `off` for that entry: a clear startup error beats a silent `off` that
//!   the operator did not choose.
//! - [`persist_allow_always`] always writes under the node id, starting from a copy of the entry
//!   that applied. The original writes into the first existing entry (node id, then display
//!   name), else creates an empty entry keyed by the display name. Display names are not unique,
//!   so a grant under one would reach every node of that name, and a fresh empty entry would drop
//!   the `denyPaths` of the wildcard entry it replaces for that node.
//! - Persisted paths are stored as literals (glob metacharacters escaped), where the original
//!   stores the raw path: approving a path that contains `*` must grant that one name, not every
//!   name the glob matches.

use gatehouse_protocol::error::ErrorCode;
use std::collections::BTreeMap;
use std::fmt;

use globset::GlobBuilder;
use globset::GlobSetBuilder;
use serde::Deserialize;
use serde::Serialize;

use crate::error::PolicyError;
use crate::error::Result;

/// The `nodes` key whose entry applies to every node without an entry of its own.
pub const WILDCARD_NODE_KEY: &str = "*";

/// `nodes` keys that this module never writes, because they corrupt a JavaScript object used
/// as a map (the upstream reader of the same configuration).
pub const RESERVED_NODE_KEYS: [&str; 3] = ["__proto__", "prototype", "constructor"];

/// The `policyVersion` that [`apply_default_policy`] sets when none is set.
pub const DEFAULT_POLICY_VERSION: u32 = 2;

/// The file-transfer policy: per-node entries plus the workspace bindings.
///
/// This is the `plugins.entries["file-transfer"].config` object of the upstream configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileTransferPolicy {
    /// Node entries keyed by node id, node display name, or [`WILDCARD_NODE_KEY`].
    #[serde(default)]
    pub nodes: BTreeMap<String, NodePolicy>,
    /// The policy schema version; [`apply_default_policy`] sets it when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u32>,
    /// Workspace bindings keyed by agent id.
    #[serde(default)]
    pub workspaces: BTreeMap<String, WorkspaceBinding>,
}

/// The policy entry of one node (or of every node, under `*`).
///
/// Any value is valid; [`validate`] reports patterns that do not compile and a zero `maxBytes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodePolicy {
    /// When to ask the operator; see [`AskMode`].
    pub ask: AskMode,
    /// Globs of paths that may be read without asking.
    pub allow_read_paths: Vec<String>,
    /// Globs of paths that may be written without asking.
    pub allow_write_paths: Vec<String>,
    /// Globs of paths that are always denied, whatever the other fields say.
    pub deny_paths: Vec<String>,
    /// The byte limit of one transfer; `None` leaves the command's own limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// Whether the node may follow symlinks; `false` makes it refuse any path whose canonical
    /// form differs from the requested one.
    pub follow_symlinks: bool,
}

/// When the operator is asked about a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AskMode {
    /// Never ask: allow on an allow match, deny otherwise. The default.
    #[default]
    Off,
    /// Allow on an allow match; otherwise deny, and mark the denial askable.
    OnMiss,
    /// Ask on every request that `denyPaths` does not deny.
    Always,
}

/// Which node a workspace is bound to, and where the workspace lives on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceBinding {
    /// The id of the node that serves the workspace.
    pub node_id: String,
    /// The absolute workspace root on that node.
    pub remote_root: String,
}

/// The node a request targets, as the policy looks it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeRef<'a> {
    /// The node id; looked up first.
    pub id: &'a str,
    /// The node's display name, if it has one; looked up second. Display names are not unique,
    /// so an entry keyed by one may apply to several nodes.
    pub display_name: Option<&'a str>,
}

/// What a request wants to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// Read the file or list the directory; checked against `allowReadPaths`.
    Read,
    /// Create or replace the file; checked against `allowWritePaths`.
    Write,
}

/// One of the pattern lists of a [`NodePolicy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatternList {
    /// `allowReadPaths`.
    AllowRead,
    /// `allowWritePaths`.
    AllowWrite,
    /// `denyPaths`.
    Deny,
}

/// The outcome of [`evaluate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The request may proceed without asking.
    Allow {
        /// The transfer byte limit from the entry (at least 1), or `None` for the command's own.
        max_bytes: Option<u64>,
        /// Whether the node may follow symlinks for this request.
        follow_symlinks: bool,
    },
    /// The operator must approve the request (`ask: always`). The limits apply if approved.
    Ask {
        /// The transfer byte limit from the entry (at least 1), or `None` for the command's own.
        max_bytes: Option<u64>,
        /// Whether the node may follow symlinks for this request.
        follow_symlinks: bool,
    },
    /// The request is refused.
    Deny {
        /// The stable wire code of the refusal.
        code: DenyCode,
        /// Whether the operator may be asked to approve it anyway (`ask: on-miss` only).
        askable: bool,
        /// Which rule refused it.
        reason: DenyReason,
    },
}

/// The wire code of a [`Decision::Deny`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DenyCode {
    /// The node has an entry, and it (or the `..` rule) refuses the path.
    PolicyDenied,
    /// The node has no entry at all: the operator has not opted it in.
    NoPolicy,
}

/// Which rule produced a [`Decision::Deny`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DenyReason {
    /// The raw path has a `..` segment.
    ParentSegment,
    /// There is no file-transfer policy at all.
    NoConfig,
    /// The policy has no entry for the node id, the display name or `*`.
    NoEntry,
    /// A `denyPaths` pattern matches the path.
    DenyPattern,
    /// A `denyPaths` pattern does not compile, so the entry denies everything.
    InvalidDenyPattern,
    /// The entry has no allow pattern for the requested kind.
    NoAllowPatterns,
    /// No allow pattern for the requested kind matches the path.
    NoAllowMatch,
}

/// The entry that applies to a node, found by [`resolve_entry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedEntry<'p> {
    /// The `nodes` key that matched: the node id, the display name or `*`.
    pub key: &'p str,
    /// The entry under that key.
    pub policy: &'p NodePolicy,
}

/// Whether [`apply_default_policy`] wrote the default entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApplyOutcome {
    /// The default entry was written under the node id.
    Applied,
    /// An entry for the node id or `*` already existed and was left untouched.
    LeftAlone,
}

impl NodePolicy {
    /// Returns the allow patterns for `kind`.
    pub fn allow_paths(&self, kind: AccessKind) -> &[String] {
        match kind {
            AccessKind::Read => &self.allow_read_paths,
            AccessKind::Write => &self.allow_write_paths,
        }
    }

    /// Returns the byte limit that decisions carry: `maxBytes` raised to at least 1.
    pub fn effective_max_bytes(&self) -> Option<u64> {
        self.max_bytes.map(|max_bytes| max_bytes.max(1))
    }
}

impl PatternList {
    /// Returns the configuration key of the list, e.g. `allowReadPaths`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AllowRead => "allowReadPaths",
            Self::AllowWrite => "allowWritePaths",
            Self::Deny => "denyPaths",
        }
    }
}

impl fmt::Display for PatternList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl DenyCode {
    /// Returns the stable wire code: `POLICY_DENIED` or `NO_POLICY`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PolicyDenied => ErrorCode::PolicyDenied.as_str(),
            Self::NoPolicy => ErrorCode::NoPolicy.as_str(),
        }
    }
}

impl fmt::Display for DenyCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl DenyReason {
    /// Returns a short lowercase description, fit for an error message or an audit record.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ParentSegment => "path contains a '..' segment",
            Self::NoConfig => "no file-transfer policy is configured",
            Self::NoEntry => "no file-transfer policy entry for this node or '*'",
            Self::DenyPattern => "path matches a denyPaths pattern",
            Self::InvalidDenyPattern => "a denyPaths pattern is invalid, so the entry denies all",
            Self::NoAllowPatterns => "no allow patterns are configured for this access",
            Self::NoAllowMatch => "path matches no allow pattern for this access",
        }
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Decides whether `node` may access `path` for `kind`.
///
/// `policy` is `None` when no file-transfer policy is configured. `home` is the home directory
/// that `~` in patterns expands to. The resolution order is described in the
/// [module documentation](self). This function never fails: invalid patterns are handled as
/// described there, and reported by [`validate`].
pub fn evaluate(
    policy: Option<&FileTransferPolicy>,
    node: &NodeRef<'_>,
    path: &str,
    kind: AccessKind,
    home: &str,
) -> Decision {
    if contains_parent_segment(path) {
        return deny(DenyCode::PolicyDenied, DenyReason::ParentSegment);
    }
    let Some(policy) = policy else {
        return deny(DenyCode::NoPolicy, DenyReason::NoConfig);
    };
    let Some(resolved) = resolve_entry(policy, node) else {
        return deny(DenyCode::NoPolicy, DenyReason::NoEntry);
    };
    let entry = resolved.policy;
    let target = normalize_path(path);

    let deny_scan = scan_patterns(&entry.deny_paths, PatternRole::Deny, home, &target);
    if deny_scan.matched {
        return deny(DenyCode::PolicyDenied, DenyReason::DenyPattern);
    }
    if deny_scan.saw_invalid {
        return deny(DenyCode::PolicyDenied, DenyReason::InvalidDenyPattern);
    }

    let max_bytes = entry.effective_max_bytes();
    let follow_symlinks = entry.follow_symlinks;
    if entry.ask == AskMode::Always {
        return Decision::Ask {
            max_bytes,
            follow_symlinks,
        };
    }

    let allow_paths = entry.allow_paths(kind);
    if scan_patterns(allow_paths, PatternRole::Allow, home, &target).matched {
        return Decision::Allow {
            max_bytes,
            follow_symlinks,
        };
    }
    let has_allow_patterns = allow_paths.iter().any(|pattern| !pattern.trim().is_empty());
    let reason = if has_allow_patterns {
        DenyReason::NoAllowMatch
    } else {
        DenyReason::NoAllowPatterns
    };
    let askable = match entry.ask {
        AskMode::OnMiss => true,
        AskMode::Off | AskMode::Always => false,
    };
    Decision::Deny {
        code: DenyCode::PolicyDenied,
        askable,
        reason,
    }
}

/// Returns the entry that applies to `node`: the one keyed by its id, else by its display
/// name, else by `*`; `None` when there is none.
///
/// Empty ids and display names are skipped. The entry found here is also the one whose limits
/// apply when the operator approves an askable denial.
pub fn resolve_entry<'p>(
    policy: &'p FileTransferPolicy,
    node: &NodeRef<'_>,
) -> Option<ResolvedEntry<'p>> {
    let candidates = [Some(node.id), node.display_name, Some(WILDCARD_NODE_KEY)];
    candidates
        .into_iter()
        .flatten()
        .filter(|key| !key.is_empty())
        .find_map(|key| policy.nodes.get_key_value(key))
        .map(|(key, policy)| ResolvedEntry {
            key: key.as_str(),
            policy,
        })
}

/// Returns whether the raw `path` has a `..` segment, treating `\` and `/` alike.
///
/// Only a whole segment counts: `...` and `..name` are ordinary names.
pub fn contains_parent_segment(path: &str) -> bool {
    path.split(['/', '\\']).any(|segment| segment == "..")
}

/// Checks every pattern and limit of `policy` without evaluating a request.
///
/// # Errors
///
/// Returns every problem found, in `nodes` key order: [`PolicyError::InvalidGlob`] for each
/// pattern that does not compile and [`PolicyError::ZeroMaxBytes`] for `maxBytes: 0`.
pub fn validate(policy: &FileTransferPolicy) -> std::result::Result<(), Vec<PolicyError>> {
    let mut errors = Vec::new();
    for (node_key, entry) in &policy.nodes {
        let lists = [
            (PatternList::AllowRead, &entry.allow_read_paths),
            (PatternList::AllowWrite, &entry.allow_write_paths),
            (PatternList::Deny, &entry.deny_paths),
        ];
        for (list, patterns) in lists {
            for pattern in patterns {
                // The home directory is inserted escaped, so it never changes whether a
                // pattern compiles; any value will do here.
                let Some(expanded) = expand_pattern(pattern, "/") else {
                    continue;
                };
                if let Err(source) = compile_glob(&expanded) {
                    errors.push(PolicyError::InvalidGlob {
                        node_key: node_key.clone(),
                        list,
                        pattern: pattern.clone(),
                        source,
                    });
                }
            }
        }
        if entry.max_bytes == Some(0) {
            errors.push(PolicyError::ZeroMaxBytes {
                node_key: node_key.clone(),
            });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Records an operator's "allow always" for `path` in the node's own entry.
///
/// The entry is the one keyed by `node.id`; the `*` entry and display-name entries are never
/// written. When the node has no entry of its own yet, one is created as a copy of the entry
/// that currently applies to it (display name, else `*`, else the default), so that the node
/// keeps its `ask` mode, `denyPaths` and limits and gains only the approved path.
///
/// The path is stored as a literal pattern: it is normalized like a requested path and its
/// glob metacharacters are escaped, so approving `/ws/*` grants that one name, not the whole
/// directory. A path already present is not added twice.
///
/// # Errors
///
/// - [`PolicyError::UnsafeNodeKey`] when `node.id` is empty, `*`, or one of
///   [`RESERVED_NODE_KEYS`].
/// - [`PolicyError::EmptyPath`] when `path` is blank.
/// - [`PolicyError::ParentSegment`] when `path` has a `..` segment.
///
/// On error the policy is unchanged.
pub fn persist_allow_always(
    policy: &mut FileTransferPolicy,
    node: &NodeRef<'_>,
    path: &str,
    kind: AccessKind,
) -> Result<()> {
    check_node_key(node.id)?;
    if path.trim().is_empty() {
        return Err(PolicyError::EmptyPath);
    }
    if contains_parent_segment(path) {
        return Err(PolicyError::ParentSegment {
            path: path.to_owned(),
        });
    }
    let pattern = globset::escape(&normalize_path(path));

    let seed = if policy.nodes.contains_key(node.id) {
        NodePolicy::default()
    } else {
        resolve_entry(policy, node)
            .map(|resolved| resolved.policy.clone())
            .unwrap_or_default()
    };
    let entry = policy.nodes.entry(node.id.to_owned()).or_insert(seed);
    let list = match kind {
        AccessKind::Read => &mut entry.allow_read_paths,
        AccessKind::Write => &mut entry.allow_write_paths,
    };
    if !list.contains(&pattern) {
        list.push(pattern);
    }
    Ok(())
}

/// Returns the default entry for a workspace node whose workspace is at `remote_root` and whose
/// home directory is `home`.
///
/// Both arguments should be absolute and normalized; a trailing `/` is ignored, and glob
/// metacharacters in them are escaped. The entry has `ask: off`, `followSymlinks: false`, no
/// `denyPaths` and no `maxBytes`.
///
/// Reads, each as `X` and `X/**`: the workspace root; the managed skill roots
/// `<home>/.openclaw/skills`, `<home>/.openclaw/plugin-skills`,
/// `<home>/.openclaw/agents/*/agent/workshop-skills`,
/// `<home>/.openclaw/worktree-sources/empty/*/workspace`, `<home>/.agents/skills`,
/// `<home>/openclaw-runtime-assets/{bundled-skills,custodian-skills,plugin-skills}` (one root
/// each) and `/app/extensions/*/skills`. `<home>/.openclaw` itself is readable as an exact path
/// only, after the root and before the skill roots.
///
/// Writes, under the workspace root: the owner documents `AGENTS.md`, `SOUL.md`, `IDENTITY.md`
/// and `USER.md`; the memory files `MEMORY.md`, `memory.md`, `DREAMS.md`, `dreams.md`, `memory`
/// and `memory/**`; the skill state `skills`, `skills/**`, `.clawhub/lock.json`,
/// `.clawdhub/lock.json` and `.openclaw/skill-installs/**`; and staged inputs
/// `media/inbound/gatehouse-staged-*/**` (upstream stages under `openclaw-staged-*`).
pub fn default_node_policy(remote_root: &str, home: &str) -> NodePolicy {
    let root = globset::escape(trim_trailing_slashes(remote_root));
    let home = globset::escape(trim_trailing_slashes(home));

    let mut allow_read_paths = vec![
        root.clone(),
        format!("{root}/**"),
        format!("{home}/.openclaw"),
    ];
    let skill_roots = [
        format!("{home}/.openclaw/skills"),
        format!("{home}/.openclaw/plugin-skills"),
        format!("{home}/.openclaw/agents/*/agent/workshop-skills"),
        format!("{home}/.openclaw/worktree-sources/empty/*/workspace"),
        format!("{home}/.agents/skills"),
        format!("{home}/openclaw-runtime-assets/bundled-skills"),
        format!("{home}/openclaw-runtime-assets/custodian-skills"),
        format!("{home}/openclaw-runtime-assets/plugin-skills"),
        "/app/extensions/*/skills".to_owned(),
    ];
    for skill_root in skill_roots {
        let recursive = format!("{skill_root}/**");
        allow_read_paths.push(skill_root);
        allow_read_paths.push(recursive);
    }

    let writable = [
        // Owner documents.
        "AGENTS.md",
        "SOUL.md",
        "IDENTITY.md",
        "USER.md",
        // Memory.
        "MEMORY.md",
        "memory.md",
        "DREAMS.md",
        "dreams.md",
        "memory",
        "memory/**",
        // Skill state.
        "skills",
        "skills/**",
        ".clawhub/lock.json",
        ".clawdhub/lock.json",
        ".openclaw/skill-installs/**",
        // Staged inputs.
        "media/inbound/gatehouse-staged-*/**",
    ];
    let allow_write_paths = writable
        .iter()
        .map(|relative| format!("{root}/{relative}"))
        .collect();

    NodePolicy {
        ask: AskMode::Off,
        allow_read_paths,
        allow_write_paths,
        deny_paths: Vec::new(),
        max_bytes: None,
        follow_symlinks: false,
    }
}

/// Applies the default workspace-node policy for `node_id`, unless the operator already
/// configured that node or `*`.
///
/// The default entry from [`default_node_policy`] is written under `node_id` only if neither
/// `nodes[node_id]` nor `nodes["*"]` exists; an existing entry is never modified. In both cases,
/// as upstream does, `policyVersion` is set to [`DEFAULT_POLICY_VERSION`] if unset, and
/// `workspaces[agent_id]` is set (or replaced) with `{node_id, remote_root}`: the binding
/// records where the agent's workspace is, which holds whoever authored the node's entry.
///
/// # Errors
///
/// Returns [`PolicyError::UnsafeNodeKey`] when `node_id` is empty, `*` or one of
/// [`RESERVED_NODE_KEYS`]; writing the default under `*` would open every node. On error the
/// policy is unchanged.
pub fn apply_default_policy(
    policy: &mut FileTransferPolicy,
    node_id: &str,
    agent_id: &str,
    remote_root: &str,
    home: &str,
) -> Result<ApplyOutcome> {
    check_node_key(node_id)?;
    let configured =
        policy.nodes.contains_key(node_id) || policy.nodes.contains_key(WILDCARD_NODE_KEY);
    let outcome = if configured {
        ApplyOutcome::LeftAlone
    } else {
        policy
            .nodes
            .insert(node_id.to_owned(), default_node_policy(remote_root, home));
        ApplyOutcome::Applied
    };
    policy.policy_version.get_or_insert(DEFAULT_POLICY_VERSION);
    policy.workspaces.insert(
        agent_id.to_owned(),
        WorkspaceBinding {
            node_id: node_id.to_owned(),
            remote_root: remote_root.to_owned(),
        },
    );
    Ok(outcome)
}

/// Which list a pattern scan serves; a deny list also covers the directories it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PatternRole {
    /// `allowReadPaths` or `allowWritePaths`: `X/**` matches only what is below `X`.
    Allow,
    /// `denyPaths`: `X/**` matches `X` too.
    Deny,
}

/// What matching a pattern list against one path found.
struct PatternScan {
    /// Some valid pattern matches the path.
    matched: bool,
    /// Some pattern does not compile.
    saw_invalid: bool,
}

fn deny(code: DenyCode, reason: DenyReason) -> Decision {
    Decision::Deny {
        code,
        askable: false,
        reason,
    }
}

fn check_node_key(key: &str) -> Result<()> {
    if key.is_empty() || key == WILDCARD_NODE_KEY || RESERVED_NODE_KEYS.contains(&key) {
        return Err(PolicyError::UnsafeNodeKey {
            key: key.to_owned(),
        });
    }
    Ok(())
}

/// Matches the normalized `target` against `patterns`, skipping blank and invalid patterns.
///
/// For [`PatternRole::Deny`], each pattern that ends in `/**` also matches the directory it
/// names (see [`directory_of_recursive`]).
fn scan_patterns(patterns: &[String], role: PatternRole, home: &str, target: &str) -> PatternScan {
    let mut builder = GlobSetBuilder::new();
    let mut saw_invalid = false;
    for pattern in patterns {
        let Some(expanded) = expand_pattern(pattern, home) else {
            continue;
        };
        let directory = match role {
            PatternRole::Deny => directory_of_recursive(&expanded),
            PatternRole::Allow => None,
        };
        for glob_text in std::iter::once(expanded).chain(directory) {
            match compile_glob(&glob_text) {
                Ok(glob) => {
                    builder.add(glob);
                }
                Err(_) => saw_invalid = true,
            }
        }
    }
    match builder.build() {
        Ok(set) => PatternScan {
            matched: set.is_match(target),
            saw_invalid,
        },
        // The set failed as a whole (for example, a size limit): nothing can be trusted to
        // match, and a deny list must fail closed.
        Err(_) => PatternScan {
            matched: false,
            saw_invalid: true,
        },
    }
}

/// Returns the pattern of the directory that an expanded pattern `X/**` covers: `X`, or `/`
/// for `/**`; `None` for any other shape.
///
/// The requested path is normalized without a trailing `/` before matching, so `X` covers both
/// spellings of the directory. `**/**` gives `**`, which already matched everything.
fn directory_of_recursive(expanded: &str) -> Option<String> {
    let directory = expanded.strip_suffix("/**")?.trim_end_matches('/');
    if directory.is_empty() {
        return Some("/".to_owned());
    }
    Some(directory.to_owned())
}

/// Trims `pattern`, turns backslashes into `/` and expands a leading `~`; `None` if blank.
fn expand_pattern(pattern: &str, home: &str) -> Option<String> {
    let trimmed = pattern.trim();
    if trimmed.is_empty() {
        return None;
    }
    let unified = trimmed.replace('\\', "/");
    let home = trim_trailing_slashes(home);
    if unified == "~" {
        let home_dir = if home.is_empty() { "/" } else { home };
        return Some(globset::escape(home_dir));
    }
    match unified.strip_prefix("~/") {
        Some(rest) => Some(format!("{}/{rest}", globset::escape(home))),
        None => Some(unified),
    }
}

fn compile_glob(pattern: &str) -> std::result::Result<globset::Glob, globset::Error> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(false)
        .build()
}

/// Normalizes a requested path for matching: `\` to `/`, no empty or `.` segments, no trailing
/// `/`. Must only be called on paths without `..` segments.
fn normalize_path(path: &str) -> String {
    let unified = path.replace('\\', "/");
    let absolute = unified.starts_with('/');
    let segments: Vec<&str> = unified
        .split('/')
        .filter(|segment| !segment.is_empty() && *segment != ".")
        .collect();
    let joined = segments.join("/");
    if absolute {
        format!("/{joined}")
    } else {
        joined
    }
}

/// Returns `path` without trailing slashes, keeping a lone `/` as the empty string so that
/// joining with `/` gives absolute paths.
fn trim_trailing_slashes(path: &str) -> &str {
    path.trim_end_matches('/')
}

#[cfg(test)]
#[path = "path_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "parity_tests.rs"]
mod parity_tests;
