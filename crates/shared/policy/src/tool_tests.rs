use pretty_assertions::assert_eq;
use serde_json::json;

use crate::error::PolicyError;
use crate::tool::DEFAULT_SANDBOX_ALLOW;
use crate::tool::GATEWAY_TOOLS;
use crate::tool::LayerSource;
use crate::tool::NATIVE_TOOLS;
use crate::tool::ToolDecision;
use crate::tool::ToolDenyReason;
use crate::tool::ToolLayer;
use crate::tool::ToolPolicyConfig;
use crate::tool::ToolProfile;
use crate::tool::ToolScopeConfig;
use crate::tool::allowed_tools;
use crate::tool::build_layers;
use crate::tool::callable_tools;
use crate::tool::evaluate_tool;
use crate::tool::expand_tool_entries;
use crate::tool::group_members;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

fn layer(source: LayerSource, allow: Option<&[&str]>, deny: &[&str]) -> ToolLayer {
    ToolLayer {
        source,
        allow: allow.map(strings),
        deny: strings(deny),
    }
}

fn allow_only(source: LayerSource, allow: &[&str]) -> ToolLayer {
    layer(source, Some(allow), &[])
}

fn deny_only(source: LayerSource, deny: &[&str]) -> ToolLayer {
    layer(source, None, deny)
}

fn denied_by(layer: LayerSource) -> ToolDecision {
    ToolDecision::Deny {
        layer,
        reason: ToolDenyReason::DenyListed,
    }
}

fn not_allowlisted(layer: LayerSource) -> ToolDecision {
    ToolDecision::Deny {
        layer,
        reason: ToolDenyReason::NotAllowlisted,
    }
}

fn all_tools() -> Vec<&'static str> {
    NATIVE_TOOLS
        .iter()
        .chain(GATEWAY_TOOLS.iter())
        .copied()
        .collect()
}

fn scope(json: serde_json::Value) -> ToolScopeConfig {
    serde_json::from_value(json).expect("scope")
}

#[test]
fn evaluate_tool_follows_each_rule_and_their_order() {
    use LayerSource::Agent;
    use LayerSource::Global;
    use LayerSource::Profile;
    use LayerSource::Run;
    let allow = ToolDecision::Allow;

    let rows: Vec<(&str, Vec<ToolLayer>, &str, ToolDecision)> = vec![
        ("no layers allow everything", vec![], "exec", allow),
        (
            "allowlist admits a listed tool",
            vec![allow_only(Profile, &["session_status"])],
            "session_status",
            allow,
        ),
        (
            "allowlist refuses an unlisted tool",
            vec![allow_only(Profile, &["session_status"])],
            "read",
            not_allowlisted(Profile),
        ),
        (
            "deny list alone refuses only what it names",
            vec![deny_only(Global, &["exec"])],
            "read",
            allow,
        ),
        (
            "order: deny beats allow in the same layer",
            vec![layer(Global, Some(&["exec"]), &["exec"])],
            "exec",
            denied_by(Global),
        ),
        (
            "order: a later deny beats an earlier allow",
            vec![allow_only(Global, &["*"]), deny_only(Agent, &["exec"])],
            "exec",
            denied_by(Agent),
        ),
        (
            "order: a later allow cannot widen an earlier allowlist",
            vec![
                allow_only(Profile, &["session_status"]),
                allow_only(Agent, &["read"]),
            ],
            "read",
            not_allowlisted(Profile),
        ),
        (
            "order: the first refusing layer in evaluation order is reported",
            vec![deny_only(Agent, &["exec"]), deny_only(Global, &["exec"])],
            "exec",
            denied_by(Global),
        ),
        (
            "order: layers with the same source keep their slice order",
            vec![allow_only(Agent, &["read"]), deny_only(Agent, &["exec"])],
            "exec",
            not_allowlisted(Agent),
        ),
        (
            "groups: expand in deny lists",
            vec![deny_only(Global, &["group:runtime"])],
            "process",
            denied_by(Global),
        ),
        (
            "groups: expand in allowlists",
            vec![allow_only(Global, &["group:memory"])],
            "memory_get",
            allow,
        ),
        (
            "groups: an allowlist of empty groups admits nothing",
            vec![allow_only(Global, &["group:web", "group:ui"])],
            "read",
            not_allowlisted(Global),
        ),
        (
            "groups: an unknown group is a literal that matches nothing",
            vec![allow_only(Global, &["group:nope"])],
            "read",
            not_allowlisted(Global),
        ),
        (
            "groups: names are case-insensitive",
            vec![deny_only(Global, &["GROUP:FS"])],
            "ls",
            denied_by(Global),
        ),
        (
            "aliases: bash in a list stands for exec",
            vec![deny_only(Global, &["bash"])],
            "exec",
            denied_by(Global),
        ),
        (
            "aliases: bash as the tool name is exec",
            vec![allow_only(Global, &["exec"])],
            "Bash",
            allow,
        ),
        (
            "aliases: apply-patch stands for apply_patch",
            vec![deny_only(Global, &["apply-patch"])],
            "apply_patch",
            denied_by(Global),
        ),
        (
            "case: entries are case-insensitive",
            vec![deny_only(Global, &["EXEC"])],
            "exec",
            denied_by(Global),
        ),
        (
            "case: tool names are case-insensitive",
            vec![deny_only(Global, &["exec"])],
            "Exec",
            denied_by(Global),
        ),
        (
            "globs: a prefix glob denies",
            vec![deny_only(Global, &["memory_*"])],
            "memory_search",
            denied_by(Global),
        ),
        (
            "globs: a prefix glob leaves others alone",
            vec![deny_only(Global, &["memory_*"])],
            "read",
            allow,
        ),
        (
            "globs: an inner glob",
            vec![allow_only(Global, &["m*y_g*t"])],
            "memory_get",
            allow,
        ),
        (
            "globs: * admits everything",
            vec![allow_only(Global, &["*"])],
            "grep",
            allow,
        ),
        (
            "globs: * in deny refuses everything",
            vec![allow_only(Global, &["read"]), deny_only(Agent, &["*"])],
            "read",
            denied_by(Agent),
        ),
        (
            "apply_patch: allowing write admits it",
            vec![allow_only(Global, &["write"])],
            "apply_patch",
            allow,
        ),
        (
            "apply_patch: denying write does not deny it",
            vec![deny_only(Global, &["write"])],
            "apply_patch",
            allow,
        ),
        (
            "apply_patch: denying it beats allowing write",
            vec![layer(Global, Some(&["write"]), &["apply_patch"])],
            "apply_patch",
            denied_by(Global),
        ),
        (
            "apply_patch: allowing write does not admit edit",
            vec![allow_only(Global, &["write"])],
            "edit",
            not_allowlisted(Global),
        ),
        (
            "blank entries are ignored",
            vec![deny_only(Global, &["", "  "])],
            "read",
            allow,
        ),
        (
            "an empty allowlist admits nothing",
            vec![allow_only(Run, &[])],
            "session_status",
            not_allowlisted(Run),
        ),
    ];

    let expected: Vec<_> = rows
        .iter()
        .map(|(name, _, _, decision)| (*name, *decision))
        .collect();
    let actual: Vec<_> = rows
        .iter()
        .map(|(name, layers, tool, _)| (*name, evaluate_tool(layers, tool)))
        .collect();
    assert_eq!(expected, actual);
}

#[test]
fn groups_map_onto_gatehouse_tools() {
    let groups = [
        "group:fs",
        "group:runtime",
        "group:sessions",
        "group:memory",
        "group:openclaw",
        "group:web",
        "group:ui",
        "group:automation",
        "group:messaging",
        "group:nodes",
        "group:agents",
        "group:media",
        "group:plugins",
        "Group:FS",
        "group:nope",
        "read",
    ];
    let expected: Vec<(&str, Option<&[&str]>)> = vec![
        (
            "group:fs",
            Some(&["read", "write", "edit", "apply_patch", "ls", "grep"]),
        ),
        ("group:runtime", Some(&["exec", "process"])),
        ("group:sessions", Some(&["session_status"])),
        ("group:memory", Some(&["memory_search", "memory_get"])),
        (
            "group:openclaw",
            Some(&["session_status", "memory_search", "memory_get"]),
        ),
        ("group:web", Some(&[])),
        ("group:ui", Some(&[])),
        ("group:automation", Some(&[])),
        ("group:messaging", Some(&[])),
        ("group:nodes", Some(&[])),
        ("group:agents", Some(&[])),
        ("group:media", Some(&[])),
        ("group:plugins", Some(&[])),
        (
            "Group:FS",
            Some(&["read", "write", "edit", "apply_patch", "ls", "grep"]),
        ),
        ("group:nope", None),
        ("read", None),
    ];
    let actual: Vec<_> = groups
        .iter()
        .map(|group| (*group, group_members(group)))
        .collect();
    assert_eq!(expected, actual);
}

#[test]
fn every_gatehouse_tool_is_in_exactly_one_primitive_group() {
    let primitive_groups = [
        "group:fs",
        "group:runtime",
        "group:sessions",
        "group:memory",
    ];
    let expected: Vec<_> = all_tools().into_iter().map(|tool| (tool, 1)).collect();
    let actual: Vec<_> = all_tools()
        .into_iter()
        .map(|tool| {
            let n_groups = primitive_groups
                .iter()
                .filter(|group| group_members(group).unwrap_or_default().contains(&tool))
                .count();
            (tool, n_groups)
        })
        .collect();
    assert_eq!(expected, actual);
}

#[test]
fn expand_tool_entries_normalizes_expands_and_dedupes() {
    let entries = strings(&[
        "group:fs",
        "READ",
        "bash",
        " ",
        "group:nope",
        "mcp__*",
        "exec",
        "Apply-Patch",
    ]);
    assert_eq!(
        strings(&[
            "read",
            "write",
            "edit",
            "apply_patch",
            "ls",
            "grep",
            "exec",
            "group:nope",
            "mcp__*",
        ]),
        expand_tool_entries(&entries)
    );
}

#[test]
fn profiles_select_the_mapped_tools() {
    let profiles = [
        ToolProfile::Minimal,
        ToolProfile::Coding,
        ToolProfile::Messaging,
        ToolProfile::Full,
    ];
    let tools = all_tools();
    let actual: Vec<_> = profiles
        .iter()
        .map(|profile| {
            let global = ToolScopeConfig {
                profile: Some(*profile),
                ..ToolScopeConfig::default()
            };
            let config = ToolPolicyConfig {
                global: Some(&global),
                ..ToolPolicyConfig::default()
            };
            let layers = build_layers(&config).expect("layers");
            (profile.as_str(), allowed_tools(&layers, &tools))
        })
        .collect();
    let expected = vec![
        ("minimal", vec!["session_status"]),
        ("coding", all_tools()),
        ("messaging", vec!["session_status"]),
        ("full", all_tools()),
    ];
    assert_eq!(expected, actual);
}

#[test]
fn allowed_tools_keeps_order_and_spelling() {
    let layers = vec![
        allow_only(
            LayerSource::Profile,
            &["group:fs", "group:runtime", "group:memory"],
        ),
        deny_only(LayerSource::Agent, &["group:runtime", "write"]),
    ];
    let tools = [
        "Read",
        "exec",
        "write",
        "apply_patch",
        "memory_get",
        "session_status",
    ];
    assert_eq!(
        vec!["Read", "apply_patch", "memory_get"],
        allowed_tools(&layers, &tools)
    );
}

#[test]
fn callable_tools_stops_a_run_that_an_allowlist_empties() {
    let tools = all_tools();
    let minimal_without_status = vec![
        allow_only(LayerSource::Profile, &["session_status"]),
        deny_only(LayerSource::Agent, &["session_status"]),
    ];
    let deny_everything = vec![deny_only(LayerSource::Global, &["*"])];
    let empty_run_cap = vec![allow_only(LayerSource::Run, &[])];
    let minimal = vec![allow_only(LayerSource::Profile, &["session_status"])];

    assert_eq!(
        vec![
            Err(PolicyError::NoCallableTools),
            Ok(vec![]),
            Err(PolicyError::NoCallableTools),
            Ok(vec!["session_status"]),
        ],
        vec![
            callable_tools(&minimal_without_status, &tools),
            callable_tools(&deny_everything, &tools),
            callable_tools(&empty_run_cap, &tools),
            callable_tools(&minimal, &tools),
        ]
    );
}

#[test]
fn build_layers_resolves_profiles() {
    let coding = ToolProfile::Coding.allowlist().expect("coding filters");
    let coding_plus = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut allow: Vec<&str> = coding.to_vec();
        allow.extend_from_slice(extra);
        allow
    };

    let rows: Vec<(
        &str,
        ToolScopeConfig,
        Option<ToolScopeConfig>,
        Vec<ToolLayer>,
    )> = vec![
        (
            "nothing configured",
            ToolScopeConfig::default(),
            None,
            vec![],
        ),
        (
            "global profile",
            scope(json!({"profile": "coding"})),
            None,
            vec![allow_only(LayerSource::Profile, coding)],
        ),
        (
            "alsoAllow adds to the profile",
            scope(json!({"profile": "coding", "alsoAllow": ["mcp__docs__*"]})),
            None,
            vec![allow_only(
                LayerSource::Profile,
                &coding_plus(&["mcp__docs__*"]),
            )],
        ),
        (
            "the agent profile replaces the global one",
            scope(json!({"profile": "minimal"})),
            Some(scope(json!({"profile": "coding"}))),
            vec![allow_only(LayerSource::Profile, coding)],
        ),
        (
            "the agent alsoAllow replaces the global one",
            scope(json!({"profile": "coding", "alsoAllow": ["a"]})),
            Some(scope(json!({"alsoAllow": ["b"]}))),
            vec![allow_only(LayerSource::Profile, &coding_plus(&["b"]))],
        ),
        (
            "full gives no profile layer, even with alsoAllow",
            scope(json!({"profile": "full", "alsoAllow": ["a"]})),
            None,
            vec![],
        ),
        (
            "alsoAllow without a profile adds nothing",
            scope(json!({"alsoAllow": ["a"]})),
            None,
            vec![],
        ),
        (
            "profile and allow/deny make two layers",
            scope(json!({"profile": "minimal", "allow": ["read"], "deny": ["exec"]})),
            None,
            vec![
                allow_only(LayerSource::Profile, &["session_status"]),
                layer(LayerSource::Global, Some(&["read"]), &["exec"]),
            ],
        ),
        (
            "an allow of blanks is no allowlist",
            scope(json!({"allow": [" "], "deny": ["exec"]})),
            None,
            vec![deny_only(LayerSource::Global, &["exec"])],
        ),
        (
            "an empty allow without deny is no layer",
            scope(json!({"allow": []})),
            None,
            vec![],
        ),
    ];

    let expected: Vec<_> = rows
        .iter()
        .map(|(name, _, _, layers)| (*name, Ok(layers.clone())))
        .collect();
    let actual: Vec<_> = rows
        .iter()
        .map(|(name, global, agent, _)| {
            let config = ToolPolicyConfig {
                global: Some(global),
                agent: agent.as_ref(),
                ..ToolPolicyConfig::default()
            };
            (*name, build_layers(&config))
        })
        .collect();
    assert_eq!(expected, actual);
}

#[test]
fn build_layers_emits_every_scope_in_evaluation_order() {
    let global = scope(json!({"profile": "coding", "deny": ["process"]}));
    let global_provider = scope(json!({"profile": "messaging", "allow": ["read"]}));
    let agent = scope(json!({"deny": ["grep"]}));
    let agent_provider = scope(json!({"alsoAllow": ["edit"], "deny": ["ls"]}));
    let sandbox = scope(json!({"allow": ["read"]}));
    let agent_sandbox = scope(json!({"alsoAllow": ["memory_get"], "deny": ["exec"]}));
    let subagents = scope(json!({"deny": ["memory_search"]}));
    let sender = scope(json!({"allow": ["group:fs", "group:memory"]}));
    let group = scope(json!({"deny": ["write"]}));
    let run_allow = strings(&["read", "memory_get"]);
    let config = ToolPolicyConfig {
        global: Some(&global),
        global_provider: Some(&global_provider),
        agent: Some(&agent),
        agent_provider: Some(&agent_provider),
        sandboxed: true,
        sandbox: Some(&sandbox),
        agent_sandbox: Some(&agent_sandbox),
        subagents: Some(&subagents),
        sender: Some(&sender),
        group: Some(&group),
        run_allow: Some(&run_allow),
    };

    let mut sandbox_allow: Vec<&str> = DEFAULT_SANDBOX_ALLOW.to_vec();
    sandbox_allow.push("memory_get");
    let expected = vec![
        allow_only(
            LayerSource::Profile,
            ToolProfile::Coding.allowlist().expect("coding"),
        ),
        allow_only(
            LayerSource::ProviderProfile,
            &["group:messaging", "session_status", "edit"],
        ),
        deny_only(LayerSource::Global, &["process"]),
        allow_only(LayerSource::GlobalProvider, &["read"]),
        deny_only(LayerSource::Agent, &["grep"]),
        deny_only(LayerSource::AgentProvider, &["ls"]),
        layer(LayerSource::Sandbox, Some(&sandbox_allow), &["exec"]),
        deny_only(LayerSource::Subagents, &["memory_search"]),
        allow_only(LayerSource::Sender, &["group:fs", "group:memory"]),
        deny_only(LayerSource::Group, &["write"]),
        allow_only(LayerSource::Run, &["read", "memory_get"]),
    ];
    let layers = build_layers(&config).expect("layers");
    assert_eq!(expected, layers);

    // The provider profile admits neither `read` nor `memory_get`, so the run is refused.
    assert_eq!(
        Err(PolicyError::NoCallableTools),
        callable_tools(&layers, &all_tools())
    );
}

#[test]
fn build_layers_applies_the_sandbox_only_to_sandboxed_runs() {
    let global = scope(json!({"profile": "coding"}));
    let sandbox = scope(json!({"alsoAllow": ["memory_search"]}));
    let tools = all_tools();
    let run = |sandboxed: bool| {
        let config = ToolPolicyConfig {
            global: Some(&global),
            sandboxed,
            sandbox: Some(&sandbox),
            ..ToolPolicyConfig::default()
        };
        allowed_tools(&build_layers(&config).expect("layers"), &tools)
    };
    let unconfigured_sandbox = ToolPolicyConfig {
        sandboxed: true,
        ..ToolPolicyConfig::default()
    };

    assert_eq!(
        (
            all_tools(),
            vec![
                "read",
                "write",
                "edit",
                "apply_patch",
                "ls",
                "grep",
                "exec",
                "process",
                "session_status",
                "memory_search",
            ],
            vec![
                "read",
                "write",
                "edit",
                "apply_patch",
                "ls",
                "grep",
                "exec",
                "process",
                "session_status",
            ],
        ),
        (
            run(false),
            run(true),
            allowed_tools(
                &build_layers(&unconfigured_sandbox).expect("layers"),
                &tools
            ),
        )
    );
}

#[test]
fn build_layers_refuses_allow_with_also_allow_in_one_scope() {
    let both = scope(json!({"allow": ["read"], "alsoAllow": ["exec"]}));
    let fine = scope(json!({"allow": ["read"]}));
    let agent_error = ToolPolicyConfig {
        global: Some(&fine),
        agent: Some(&both),
        ..ToolPolicyConfig::default()
    };
    let sandbox_error = ToolPolicyConfig {
        global: Some(&fine),
        agent_sandbox: Some(&both),
        ..ToolPolicyConfig::default()
    };
    let global_first = ToolPolicyConfig {
        global: Some(&both),
        agent: Some(&both),
        ..ToolPolicyConfig::default()
    };
    assert_eq!(
        vec![
            Err(PolicyError::AllowWithAlsoAllow {
                scope: LayerSource::Agent
            }),
            Err(PolicyError::AllowWithAlsoAllow {
                scope: LayerSource::Sandbox
            }),
            Err(PolicyError::AllowWithAlsoAllow {
                scope: LayerSource::Global
            }),
        ],
        vec![
            build_layers(&agent_error),
            build_layers(&sandbox_error),
            build_layers(&global_first),
        ]
    );
}

#[test]
fn configured_layers_decide_single_tools_with_the_refusing_layer() {
    let global = scope(json!({"profile": "coding"}));
    let agent = scope(json!({"deny": ["group:runtime"]}));
    let config = ToolPolicyConfig {
        global: Some(&global),
        agent: Some(&agent),
        sandboxed: true,
        ..ToolPolicyConfig::default()
    };
    let layers = build_layers(&config).expect("layers");
    let tools = ["read", "bash", "memory_search", "session_status"];
    let actual: Vec<_> = tools
        .iter()
        .map(|tool| (*tool, evaluate_tool(&layers, tool)))
        .collect();
    assert_eq!(
        vec![
            ("read", ToolDecision::Allow),
            ("bash", denied_by(LayerSource::Agent)),
            ("memory_search", not_allowlisted(LayerSource::Sandbox)),
            ("session_status", ToolDecision::Allow),
        ],
        actual
    );
}

#[test]
fn tool_scope_config_reads_the_upstream_shape() {
    let parsed = scope(json!({
        "profile": "messaging",
        "alsoAllow": ["mcp__*"],
        "deny": ["exec"],
        "byProvider": {"openai": {"profile": "minimal"}},
        "exec": {"mode": "ask"}
    }));
    let expected = ToolScopeConfig {
        profile: Some(ToolProfile::Messaging),
        allow: None,
        also_allow: Some(strings(&["mcp__*"])),
        deny: strings(&["exec"]),
    };
    let unknown_profile = serde_json::from_value::<ToolScopeConfig>(json!({"profile": "admin"}));
    assert_eq!(
        (
            expected,
            "unknown variant `admin`, expected one of `minimal`, `coding`, `messaging`, `full`"
                .to_owned()
        ),
        (parsed, unknown_profile.expect_err("must fail").to_string())
    );
}

#[test]
fn layer_sources_are_ordered_like_the_specification() {
    let mut sources = vec![
        LayerSource::Run,
        LayerSource::Group,
        LayerSource::Sender,
        LayerSource::Subagents,
        LayerSource::Sandbox,
        LayerSource::AgentProvider,
        LayerSource::Agent,
        LayerSource::GlobalProvider,
        LayerSource::Global,
        LayerSource::ProviderProfile,
        LayerSource::Profile,
    ];
    sources.sort();
    let names: Vec<_> = sources.iter().map(|source| source.as_str()).collect();
    assert_eq!(
        vec![
            "profile",
            "provider_profile",
            "global",
            "global_provider",
            "agent",
            "agent_provider",
            "sandbox",
            "subagents",
            "sender",
            "group",
            "run",
        ],
        names
    );
}

#[test]
fn a_denied_tool_takes_the_tools_that_do_the_same_with_it() {
    let denied =
        crate::tool::with_equivalents(&["Exec".to_owned(), "read".to_owned(), "write".to_owned()]);
    assert_eq!(
        denied,
        ["Exec", "process", "read", "write", "edit", "apply_patch"].map(String::from)
    );
    assert!(crate::tool::known_tool_entry("group:runtime"));
    assert!(crate::tool::known_tool_entry("Bash"));
    assert!(crate::tool::known_tool_entry("memory_*"));
    assert!(!crate::tool::known_tool_entry("exce"));
    assert!(!crate::tool::known_tool_entry("group:nope"));
}
