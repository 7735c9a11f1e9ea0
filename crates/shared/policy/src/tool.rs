//! The tool policy: which tools a run may offer to the model and call.
//!
//! A run's policy is a list of [`ToolLayer`]s, each an optional allowlist plus a deny list,
//! built from configuration by [`build_layers`]. A tool is allowed only if every layer allows
//! it, so each layer can only narrow, and a deny always wins over any allow. Within a layer:
//!
//! - a deny entry that matches the tool denies it;
//! - otherwise, if the layer has an allowlist, the tool must match one of its entries;
//! - an allowlist that names `write` also admits `apply_patch`, but a deny of `write` does not
//!   deny `apply_patch`.
//!
//! Entries are case-insensitive, may use `*` as a wildcard for any run of characters, and may
//! name a group (`group:fs`) that stands for its members. `bash` is an alias of `exec` and
//! `apply-patch` of `apply_patch`.
//!
//! Layers are evaluated in [`LayerSource`] order, which is the specification's evaluation
//! order; [`evaluate_tool`] reports the first layer that refuses a tool.
//!
//! # Groups
//!
//! The specification's groups are mapped onto Gatehouse's tools. Native tools run in the
//! Harness: `read`, `write`, `edit`, `apply_patch`, `ls`, `grep`, `exec`, `process`. Gateway
//! tools run in the Gateway: `session_status`, `memory_search`, `memory_get`.
//!
//! | group | members |
//! |---|---|
//! | `group:fs` | `read`, `write`, `edit`, `apply_patch`, `ls`, `grep` |
//! | `group:runtime` | `exec`, `process` |
//! | `group:sessions` | `session_status` |
//! | `group:memory` | `memory_search`, `memory_get` |
//! | `group:openclaw` | `session_status`, `memory_search`, `memory_get` |
//! | `group:web`, `group:ui`, `group:automation`, `group:messaging` | none yet |
//! | `group:nodes`, `group:agents`, `group:media`, `group:plugins` | none yet |
//!
//! `ls` and `grep` are read-only file tools, so they join `group:fs`. `group:openclaw` holds the
//! built-ins that are neither fs nor runtime primitives. A group without members is still a
//! group: an allowlist made only of empty groups admits nothing.
//!
//! # Profiles
//!
//! | profile | allowlist |
//! |---|---|
//! | `minimal` | `session_status` |
//! | `coding` | `group:fs`, `group:runtime`, `group:web`, `group:sessions`, `group:memory` |
//! | `messaging` | `group:messaging`, `session_status` |
//! | `full` | no filtering |
//!
//! The specification's profiles also name tools Gatehouse does not have (`cron`, `gateway`,
//! media and agent tools); they are left out. No profile filters nothing, like `full`.

use std::fmt;

use serde::Deserialize;

use crate::error::PolicyError;
use crate::error::Result;

/// The native tools, run by the worker in the Harness.
pub const NATIVE_TOOLS: [&str; 8] = [
    "read",
    "write",
    "edit",
    "apply_patch",
    "ls",
    "grep",
    "exec",
    "process",
];

/// The Gateway tools, run by the Gateway on the model's behalf.
pub const GATEWAY_TOOLS: [&str; 3] = ["session_status", "memory_search", "memory_get"];

/// The sandbox allowlist used when the sandbox scope sets no `allow`.
///
/// It is the specification's default sandbox allowlist restricted to Gatehouse's tools, plus
/// `grep`, the read-only search that sits next to `ls`. Memory tools are not in it.
pub const DEFAULT_SANDBOX_ALLOW: [&str; 9] = [
    "exec",
    "process",
    "read",
    "ls",
    "grep",
    "write",
    "edit",
    "apply_patch",
    "session_status",
];

/// Every group name and its members; see the [module documentation](self).
const TOOL_GROUPS: [(&str, &[&str]); 13] = [
    (
        "group:fs",
        &["read", "write", "edit", "apply_patch", "ls", "grep"],
    ),
    ("group:runtime", &["exec", "process"]),
    ("group:sessions", &["session_status"]),
    ("group:memory", &["memory_search", "memory_get"]),
    (
        "group:openclaw",
        &["session_status", "memory_search", "memory_get"],
    ),
    ("group:web", &[]),
    ("group:ui", &[]),
    ("group:automation", &[]),
    ("group:messaging", &[]),
    ("group:nodes", &[]),
    ("group:agents", &[]),
    ("group:media", &[]),
    // Every plugin tool; Gatehouse has none yet.
    ("group:plugins", &[]),
];

/// Tools that can do what another tool does: denying the first denies the others too in
/// [`with_equivalents`] (`process` starts commands as `exec` does; `edit` and `apply_patch`
/// write files as `write` does).
const EQUIVALENT_TOOLS: [(&str, &[&str]); 2] =
    [("exec", &["process"]), ("write", &["edit", "apply_patch"])];

/// Returns `entries` (a deny list) with every tool that can do what a listed one does
/// ([`EQUIVALENT_TOOLS`]) added after it, so a deny cannot be walked around by a sibling tool.
pub fn with_equivalents(entries: &[String]) -> Vec<String> {
    let mut all: Vec<String> = Vec::with_capacity(entries.len());
    for entry in entries {
        let normalized = normalize_tool_name(entry);
        all.push(entry.clone());
        if let Some((_, siblings)) = EQUIVALENT_TOOLS
            .iter()
            .find(|(tool, _)| *tool == normalized)
        {
            all.extend(siblings.iter().map(|sibling| (*sibling).to_owned()));
        }
    }
    all
}

/// Whether `entry` names a tool the policy knows (a native or Gateway tool, an alias, a
/// known `group:`), or is a `*` glob: a deny entry that names nothing would deny nothing.
pub fn known_tool_entry(entry: &str) -> bool {
    let normalized = normalize_tool_name(entry);
    if normalized.contains('*') {
        return normalized.len() <= 64;
    }
    NATIVE_TOOLS.contains(&normalized.as_str())
        || GATEWAY_TOOLS.contains(&normalized.as_str())
        || group_members(&normalized).is_some()
}

/// Alternative spellings and the tool names they stand for.
const TOOL_NAME_ALIASES: [(&str, &str); 2] = [("bash", "exec"), ("apply-patch", "apply_patch")];

/// A named starting allowlist (`tools.profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolProfile {
    /// Only `session_status`.
    Minimal,
    /// File, runtime, session and memory tools.
    Coding,
    /// Messaging and `session_status`.
    Messaging,
    /// No filtering.
    Full,
}

/// Where a layer comes from, in evaluation order.
///
/// The derived order is the order in which [`evaluate_tool`] checks layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LayerSource {
    /// 1. `tools.profile`, or the agent's `tools.profile` which replaces it, plus `alsoAllow`.
    Profile,
    /// 2. `tools.byProvider[provider or provider/model].profile`, plus its `alsoAllow`.
    ProviderProfile,
    /// 3. `tools.allow` / `tools.deny`.
    Global,
    /// 4. `tools.byProvider[...].allow` / `deny`.
    GlobalProvider,
    /// 5. `agents.entries.<id>.tools.allow` / `deny`.
    Agent,
    /// 6. The agent's `tools.byProvider[...].allow` / `deny`.
    AgentProvider,
    /// 7. `tools.sandbox.tools`, or the agent's, which replaces it; only for sandboxed runs.
    Sandbox,
    /// 8. `tools.subagents.tools`; only for subagent runs.
    Subagents,
    /// The `tools.toolsBySender` entry that matches the sender.
    Sender,
    /// The group or channel policy of the conversation.
    Group,
    /// The per-run `toolsAllow` cap.
    Run,
}

/// One allow/deny layer of the tool policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolLayer {
    /// Where the layer comes from; used for ordering and reporting.
    pub source: LayerSource,
    /// `None` admits every tool; `Some` admits only matching tools, and `Some(vec![])` admits
    /// none. Entries may be tool names, aliases, groups or `*` globs.
    pub allow: Option<Vec<String>>,
    /// Entries that deny matching tools; same syntax as `allow`.
    pub deny: Vec<String>,
}

impl ToolLayer {
    /// A layer from `source` that denies `deny` and allows everything else.
    pub fn denying(source: LayerSource, deny: Vec<String>) -> Self {
        Self {
            source,
            allow: None,
            deny,
        }
    }
}

/// The outcome of [`evaluate_tool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolDecision {
    /// Every layer allows the tool.
    Allow,
    /// A layer refuses the tool.
    Deny {
        /// The first layer, in evaluation order, that refuses it.
        layer: LayerSource,
        /// Why that layer refuses it.
        reason: ToolDenyReason,
    },
}

/// Why a layer refuses a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolDenyReason {
    /// A deny entry matches the tool.
    DenyListed,
    /// The layer has an allowlist, and no entry matches the tool.
    NotAllowlisted,
}

/// The allow and deny keys of one tool-policy scope, as configured.
///
/// This reads the `tools` object, an agent's `tools`, a `byProvider` entry, a sandbox `tools`
/// object, a sender entry or a group policy; keys it does not know are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ToolScopeConfig {
    /// The profile; only read from the global, agent and provider scopes.
    pub profile: Option<ToolProfile>,
    /// The allowlist; an absent or empty list admits every tool.
    pub allow: Option<Vec<String>>,
    /// Entries added to the profile (or to the default sandbox allowlist); a configuration
    /// error in a scope that also sets `allow`.
    pub also_allow: Option<Vec<String>>,
    /// Entries that deny matching tools.
    pub deny: Vec<String>,
}

/// The scopes that apply to one run, each already selected by the caller.
///
/// Provider scopes are the `byProvider` entries matching the run's `provider/model` or, failing
/// that, its provider. The sender scope is the best `toolsBySender` match (the agent's match
/// overrides the global one). `None` means the scope is not configured.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolPolicyConfig<'a> {
    /// The global `tools` scope.
    pub global: Option<&'a ToolScopeConfig>,
    /// The global `tools.byProvider` entry for the run's model.
    pub global_provider: Option<&'a ToolScopeConfig>,
    /// The agent's `tools` scope.
    pub agent: Option<&'a ToolScopeConfig>,
    /// The agent's `tools.byProvider` entry for the run's model.
    pub agent_provider: Option<&'a ToolScopeConfig>,
    /// Whether the run is sandboxed; the sandbox layer applies only then.
    pub sandboxed: bool,
    /// The global `tools.sandbox.tools` scope.
    pub sandbox: Option<&'a ToolScopeConfig>,
    /// The agent's `tools.sandbox.tools` scope; replaces the global one when set.
    pub agent_sandbox: Option<&'a ToolScopeConfig>,
    /// The `tools.subagents.tools` scope, for subagent runs only.
    pub subagents: Option<&'a ToolScopeConfig>,
    /// The matching `tools.toolsBySender` scope.
    pub sender: Option<&'a ToolScopeConfig>,
    /// The group or channel policy scope.
    pub group: Option<&'a ToolScopeConfig>,
    /// The per-run `toolsAllow` cap; an empty cap admits no tool.
    pub run_allow: Option<&'a [String]>,
}

impl ToolProfile {
    /// Returns the profile's allowlist, or `None` for [`ToolProfile::Full`], which does not
    /// filter.
    pub fn allowlist(self) -> Option<&'static [&'static str]> {
        match self {
            Self::Minimal => Some(&["session_status"]),
            Self::Coding => Some(&[
                "group:fs",
                "group:runtime",
                "group:web",
                "group:sessions",
                "group:memory",
            ]),
            Self::Messaging => Some(&["group:messaging", "session_status"]),
            Self::Full => None,
        }
    }

    /// Returns the configuration spelling, e.g. `coding`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Minimal => "minimal",
            Self::Coding => "coding",
            Self::Messaging => "messaging",
            Self::Full => "full",
        }
    }
}

impl LayerSource {
    /// Returns a stable identifier for audit records, e.g. `agent_provider`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Profile => "profile",
            Self::ProviderProfile => "provider_profile",
            Self::Global => "global",
            Self::GlobalProvider => "global_provider",
            Self::Agent => "agent",
            Self::AgentProvider => "agent_provider",
            Self::Sandbox => "sandbox",
            Self::Subagents => "subagents",
            Self::Sender => "sender",
            Self::Group => "group",
            Self::Run => "run",
        }
    }
}

impl fmt::Display for LayerSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ToolDenyReason {
    /// Returns a short lowercase description, fit for an audit record.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DenyListed => "tool is denied",
            Self::NotAllowlisted => "tool is not in the allowlist",
        }
    }
}

impl fmt::Display for ToolDenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Returns the policy name of a tool: trimmed, lowercased, with aliases resolved.
pub fn normalize_tool_name(name: &str) -> String {
    let lowered = name.trim().to_lowercase();
    TOOL_NAME_ALIASES
        .iter()
        .find(|(alias, _)| *alias == lowered)
        .map_or(lowered, |(_, canonical)| (*canonical).to_owned())
}

/// Returns the members of `group` (any case), or `None` if it is not a known group.
pub fn group_members(group: &str) -> Option<&'static [&'static str]> {
    let group = normalize_tool_name(group);
    TOOL_GROUPS
        .iter()
        .find(|(name, _)| *name == group)
        .map(|(_, members)| *members)
}

/// Returns `entries` normalized, with groups replaced by their members, blanks dropped and
/// duplicates removed, in first-seen order. Unknown `group:` names stay as they are and match
/// no tool.
pub fn expand_tool_entries(entries: &[String]) -> Vec<String> {
    let mut expanded: Vec<String> = Vec::new();
    for entry in entries {
        let normalized = normalize_tool_name(entry);
        if normalized.is_empty() {
            continue;
        }
        match group_members(&normalized) {
            Some(members) => {
                for member in members {
                    if !expanded.iter().any(|seen| seen == member) {
                        expanded.push((*member).to_owned());
                    }
                }
            }
            None => {
                if !expanded.contains(&normalized) {
                    expanded.push(normalized);
                }
            }
        }
    }
    expanded
}

/// Builds the layers of one run from its configured scopes, in [`LayerSource`] order.
///
/// - Profile: the agent's profile replaces the global one, and the agent's `alsoAllow` the
///   global one; the layer's allowlist is the profile's plus `alsoAllow`. `full` or no profile
///   gives no layer. The provider profile works the same way with the provider scopes.
/// - Global, provider, agent, subagent, sender and group scopes each give a layer with their
///   `allow` (if non-empty after dropping blank entries) and `deny`; a scope with neither gives
///   no layer. `alsoAllow` outside the profile stage adds nothing, since the scope has no
///   allowlist to add to.
/// - Sandbox, for sandboxed runs only: the agent's scope replaces the global one; the allowlist
///   is its `allow`, or [`DEFAULT_SANDBOX_ALLOW`] when it sets none, plus its `alsoAllow`.
/// - Run: the `toolsAllow` cap, as an allowlist even when empty.
///
/// # Errors
///
/// Returns [`PolicyError::AllowWithAlsoAllow`] for the first scope, in evaluation order, that
/// sets both `allow` and `alsoAllow`.
pub fn build_layers(config: &ToolPolicyConfig<'_>) -> Result<Vec<ToolLayer>> {
    let scopes = [
        (LayerSource::Global, config.global),
        (LayerSource::GlobalProvider, config.global_provider),
        (LayerSource::Agent, config.agent),
        (LayerSource::AgentProvider, config.agent_provider),
        (LayerSource::Sandbox, config.sandbox),
        (LayerSource::Sandbox, config.agent_sandbox),
        (LayerSource::Subagents, config.subagents),
        (LayerSource::Sender, config.sender),
        (LayerSource::Group, config.group),
    ];
    for (source, scope) in scopes {
        if let Some(scope) = scope
            && scope.allow.is_some()
            && scope.also_allow.is_some()
        {
            return Err(PolicyError::AllowWithAlsoAllow { scope: source });
        }
    }

    let mut layers = Vec::new();
    let profile = config
        .agent
        .and_then(|scope| scope.profile)
        .or(config.global.and_then(|scope| scope.profile));
    let also_allow = also_allow_of(config.agent).or(also_allow_of(config.global));
    layers.extend(profile_layer(LayerSource::Profile, profile, also_allow));

    let provider_profile = config
        .agent_provider
        .and_then(|scope| scope.profile)
        .or(config.global_provider.and_then(|scope| scope.profile));
    let provider_also_allow =
        also_allow_of(config.agent_provider).or(also_allow_of(config.global_provider));
    layers.extend(profile_layer(
        LayerSource::ProviderProfile,
        provider_profile,
        provider_also_allow,
    ));

    layers.extend(scope_layer(LayerSource::Global, config.global));
    layers.extend(scope_layer(
        LayerSource::GlobalProvider,
        config.global_provider,
    ));
    layers.extend(scope_layer(LayerSource::Agent, config.agent));
    layers.extend(scope_layer(
        LayerSource::AgentProvider,
        config.agent_provider,
    ));

    if config.sandboxed {
        let sandbox = config.agent_sandbox.or(config.sandbox);
        let mut allow: Vec<String> =
            match sandbox.and_then(|scope| non_blank(scope.allow.as_deref())) {
                Some(allow) => allow,
                None => DEFAULT_SANDBOX_ALLOW
                    .iter()
                    .map(|name| (*name).to_owned())
                    .collect(),
            };
        allow.extend(also_allow_of(sandbox).unwrap_or_default().iter().cloned());
        layers.push(ToolLayer {
            source: LayerSource::Sandbox,
            allow: Some(allow),
            deny: sandbox.map(|scope| scope.deny.clone()).unwrap_or_default(),
        });
    }

    layers.extend(scope_layer(LayerSource::Subagents, config.subagents));
    layers.extend(scope_layer(LayerSource::Sender, config.sender));
    layers.extend(scope_layer(LayerSource::Group, config.group));
    if let Some(run_allow) = config.run_allow {
        layers.push(ToolLayer {
            source: LayerSource::Run,
            allow: Some(run_allow.to_vec()),
            deny: Vec::new(),
        });
    }
    Ok(layers)
}

/// Decides whether `tool` is allowed by every layer.
///
/// Layers are checked in [`LayerSource`] order whatever their order in the slice (layers with
/// the same source keep their slice order), and the first refusal is reported. No layers allow
/// every tool.
pub fn evaluate_tool(layers: &[ToolLayer], tool: &str) -> ToolDecision {
    let name = normalize_tool_name(tool);
    let mut ordered: Vec<&ToolLayer> = layers.iter().collect();
    ordered.sort_by_key(|layer| layer.source);
    for layer in ordered {
        if let Some(reason) = layer_refusal(layer, &name) {
            return ToolDecision::Deny {
                layer: layer.source,
                reason,
            };
        }
    }
    ToolDecision::Allow
}

/// Returns the tools of `tools` that every layer allows, in their given order and spelling.
pub fn allowed_tools<'t>(layers: &[ToolLayer], tools: &[&'t str]) -> Vec<&'t str> {
    tools
        .iter()
        .copied()
        .filter(|tool| evaluate_tool(layers, tool) == ToolDecision::Allow)
        .collect()
}

/// Returns the tools a run may offer, like [`allowed_tools`], and refuses a run that an
/// allowlist leaves without tools.
///
/// # Errors
///
/// Returns [`PolicyError::NoCallableTools`] when no tool is allowed and at least one layer has
/// an allowlist; the run must stop before the model is called. Deny lists alone that remove
/// every tool are not an error: the run proceeds without tools.
pub fn callable_tools<'t>(layers: &[ToolLayer], tools: &[&'t str]) -> Result<Vec<&'t str>> {
    let allowed = allowed_tools(layers, tools);
    if allowed.is_empty() && layers.iter().any(|layer| layer.allow.is_some()) {
        return Err(PolicyError::NoCallableTools);
    }
    Ok(allowed)
}

/// Returns why `layer` refuses the normalized tool `name`, if it does.
fn layer_refusal(layer: &ToolLayer, name: &str) -> Option<ToolDenyReason> {
    let deny = expand_tool_entries(&layer.deny);
    if matches_any(name, &deny) {
        return Some(ToolDenyReason::DenyListed);
    }
    let allow = expand_tool_entries(layer.allow.as_deref()?);
    let admitted =
        matches_any(name, &allow) || (name == "apply_patch" && matches_any("write", &allow));
    if admitted {
        None
    } else {
        Some(ToolDenyReason::NotAllowlisted)
    }
}

fn matches_any(name: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|pattern| wildcard_match(pattern, name))
}

/// Matches `name` against `pattern`, where `*` stands for any run of characters.
fn wildcard_match(pattern: &str, name: &str) -> bool {
    let Some((head, tail)) = pattern.split_once('*') else {
        return pattern == name;
    };
    let Some(rest) = name.strip_prefix(head) else {
        return false;
    };
    let (middle, last) = tail.rsplit_once('*').unwrap_or(("", tail));
    let Some(mut rest) = rest.strip_suffix(last) else {
        return false;
    };
    for piece in middle.split('*').filter(|piece| !piece.is_empty()) {
        let Some(idx) = rest.find(piece) else {
            return false;
        };
        rest = &rest[idx + piece.len()..];
    }
    true
}

fn also_allow_of(scope: Option<&ToolScopeConfig>) -> Option<&[String]> {
    scope.and_then(|scope| scope.also_allow.as_deref())
}

/// Returns the entries of `list` that are not blank, or `None` if there are none.
fn non_blank(list: Option<&[String]>) -> Option<Vec<String>> {
    let entries: Vec<String> = list?
        .iter()
        .filter(|entry| !entry.trim().is_empty())
        .cloned()
        .collect();
    if entries.is_empty() {
        None
    } else {
        Some(entries)
    }
}

fn profile_layer(
    source: LayerSource,
    profile: Option<ToolProfile>,
    also_allow: Option<&[String]>,
) -> Option<ToolLayer> {
    let allowlist = profile?.allowlist()?;
    let mut allow: Vec<String> = allowlist.iter().map(|entry| (*entry).to_owned()).collect();
    allow.extend(also_allow.unwrap_or_default().iter().cloned());
    Some(ToolLayer {
        source,
        allow: Some(allow),
        deny: Vec::new(),
    })
}

fn scope_layer(source: LayerSource, scope: Option<&ToolScopeConfig>) -> Option<ToolLayer> {
    let scope = scope?;
    let allow = non_blank(scope.allow.as_deref());
    if allow.is_none() && scope.deny.is_empty() {
        return None;
    }
    Some(ToolLayer {
        source,
        allow,
        deny: scope.deny.clone(),
    })
}

#[cfg(test)]
#[path = "tool_tests.rs"]
mod tests;
