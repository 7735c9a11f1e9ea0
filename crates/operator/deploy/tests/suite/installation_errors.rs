//! Bad installation files fail with an error that names the offending key path.

use gatehouse_deploy::error::DeployError;
use gatehouse_deploy::installation::Installation;
use pretty_assertions::assert_eq;

use crate::suite::support;

/// Returns (code, path, message) of the error for `text`.
fn failure(text: &str) -> (&'static str, Option<String>, String) {
    let err = Installation::from_yaml(text).unwrap_err();
    assert!(err.is_config_error(), "{err}");
    (
        err.code().as_str(),
        err.path().map(str::to_owned),
        err.to_string(),
    )
}

struct Case {
    name: &'static str,
    base: &'static str,
    from: &'static str,
    to: &'static str,
    code: &'static str,
    path: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "unknown top-level key",
        base: support::EMBEDDED,
        from: "topology: embedded\n",
        to: "topology: embedded\nreplicas: 2\n",
        code: "INSTALLATION_UNKNOWN_KEY",
        path: "replicas",
    },
    Case {
        name: "unknown key in a scratch binding",
        base: support::DEDICATED_NATIVE,
        from: "      claimUid: 3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b11\n",
        to: "      claimUid: 3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b11\n      claimUuid: x\n",
        code: "INSTALLATION_UNKNOWN_KEY",
        path: "runtime.scratchVolumes[0].claimUuid",
    },
    Case {
        name: "unknown key in a secret reference",
        base: support::DEDICATED_CODEX,
        from: "    key: setupCode\n",
        to: "    key: setupCode\n    optional: true\n",
        code: "INSTALLATION_UNKNOWN_KEY",
        path: "harness.setupCodeSecret.optional",
    },
    Case {
        name: "wrong type of a scalar",
        base: support::DEDICATED_CODEX,
        from: "  name: gpt-5\n",
        to: "  name: [gpt-5]\n",
        code: "INSTALLATION_SCHEMA_VIOLATION",
        path: "model.name",
    },
    Case {
        name: "wrong type of a list",
        base: support::DEDICATED_CODEX,
        from: "  egressCidrs:\n    - 0.0.0.0/0\nmemory:",
        to: "  egressCidrs: 0.0.0.0/0\nmemory:",
        code: "INSTALLATION_SCHEMA_VIOLATION",
        path: "model.egressCidrs",
    },
    Case {
        name: "wrong type inside a scratch binding",
        base: support::DEDICATED_NATIVE,
        from: "      claimName: main-scratch\n",
        to: "      claimName: {name: main-scratch}\n",
        code: "INSTALLATION_SCHEMA_VIOLATION",
        path: "runtime.scratchVolumes[0].claimName",
    },
    Case {
        name: "unknown topology",
        base: support::EMBEDDED,
        from: "topology: embedded\n",
        to: "topology: dedicated\n",
        code: "INSTALLATION_SCHEMA_VIOLATION",
        path: "topology",
    },
    Case {
        name: "missing gateway storage class",
        base: support::EMBEDDED,
        from: "  gatewayStorageClassName: fast-rwo\n",
        to: "  nodeSelector: {pool: a}\n",
        code: "INSTALLATION_SCHEMA_VIOLATION",
        path: "runtime.gatewayStorageClassName",
    },
    Case {
        name: "missing harness storage class",
        base: support::DEDICATED_CODEX,
        from: "  harnessStorageClassName: standard-rwo\n",
        to: "",
        code: "INSTALLATION_SCHEMA_VIOLATION",
        path: "runtime.harnessStorageClassName",
    },
    Case {
        name: "empty storage class",
        base: support::DEDICATED_CODEX,
        from: "  harnessStorageClassName: standard-rwo\n",
        to: "  harnessStorageClassName: \"\"\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "runtime.harnessStorageClassName",
    },
    Case {
        name: "embedded refuses a harness storage class",
        base: support::EMBEDDED,
        from: "  gatewayStorageClassName: fast-rwo\n",
        to: "  gatewayStorageClassName: fast-rwo\n  harnessStorageClassName: x\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "runtime.harnessStorageClassName",
    },
    Case {
        name: "embedded refuses scratch volumes",
        base: support::EMBEDDED,
        from: "  gatewayStorageClassName: fast-rwo\n",
        to: "  gatewayStorageClassName: fast-rwo\n  scratchVolumes:\n    - {namespaceId: acme, agentId: main, namespace: gatehouse-acme, claimName: s, claimUid: 3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b11}\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "runtime.scratchVolumes",
    },
    Case {
        name: "dedicated needs the setup code secret",
        base: support::DEDICATED_CODEX,
        from: "harness:\n  setupCodeSecret:\n    name: main-setup-code\n    key: setupCode\n",
        to: "",
        code: "INSTALLATION_SCHEMA_VIOLATION",
        path: "harness",
    },
    Case {
        name: "scratch binding for another agent",
        base: support::DEDICATED_NATIVE,
        from: "      agentId: main\n",
        to: "      agentId: other\n",
        code: "SCRATCH_BINDING_MISMATCH",
        path: "runtime.scratchVolumes[0].agentId",
    },
    Case {
        name: "scratch binding in another namespace",
        base: support::DEDICATED_NATIVE,
        from: "      namespace: gatehouse-acme\n",
        to: "      namespace: gatehouse-other\n",
        code: "SCRATCH_BINDING_MISMATCH",
        path: "runtime.scratchVolumes[0].namespace",
    },
    Case {
        name: "scratch binding for another namespace id",
        base: support::DEDICATED_NATIVE,
        from: "    - namespaceId: acme\n",
        to: "    - namespaceId: globex\n",
        code: "SCRATCH_BINDING_MISMATCH",
        path: "runtime.scratchVolumes[0].namespaceId",
    },
    Case {
        name: "scratch claim uid that is not a uid",
        base: support::DEDICATED_NATIVE,
        from: "      claimUid: 3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b11\n",
        to: "      claimUid: main-scratch\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "runtime.scratchVolumes[0].claimUid",
    },
    Case {
        name: "a second scratch binding",
        base: support::DEDICATED_NATIVE,
        from: "      claimUid: 3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b11\n",
        to: "      claimUid: 3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b11\n    - {namespaceId: acme, agentId: main, namespace: gatehouse-acme, claimName: s2, claimUid: 3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b12}\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "runtime.scratchVolumes[1]",
    },
    Case {
        name: "invalid cidr",
        base: support::DEDICATED_CODEX,
        from: "  egressCidrs:\n    - 0.0.0.0/0\nmemory:",
        to: "  egressCidrs:\n    - 0.0.0.0/0\n    - api.openai.com\nmemory:",
        code: "INSTALLATION_INVALID_VALUE",
        path: "model.egressCidrs[1]",
    },
    Case {
        name: "embedder settings for the local embedder",
        base: support::DEDICATED_NATIVE,
        from: "  embedder: local\n",
        to: "  embedder: local\n  model: text-embedding-3-small\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "memory.model",
    },
    Case {
        name: "agent id that is not a dns label",
        base: support::EMBEDDED,
        from: "agentId: main\n",
        to: "agentId: Main_Agent\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "agentId",
    },
    Case {
        name: "reserved channel env",
        base: support::DEDICATED_NATIVE,
        from: "    - env: SLACK_BOT_TOKEN\n",
        to: "    - env: GATEHOUSE_MODEL_API_KEY\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "gateway.channelSecrets[0].env",
    },
    Case {
        name: "the model key variable as a channel env",
        base: support::DEDICATED_NATIVE,
        from: "    - env: SLACK_BOT_TOKEN\n",
        to: "    - env: OPENAI_API_KEY\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "gateway.channelSecrets[0].env",
    },
    Case {
        name: "unknown model api",
        base: support::DEDICATED_NATIVE,
        from: "  api: openai-chat\n",
        to: "  api: anthropic\n",
        code: "INSTALLATION_SCHEMA_VIOLATION",
        path: "model.api",
    },
    Case {
        name: "model name with a colon",
        base: support::DEDICATED_CODEX,
        from: "  name: gpt-5\n",
        to: "  name: gpt-5:latest\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "model.name",
    },
    Case {
        name: "one setup code and a node list",
        base: support::DEDICATED_NODES,
        from: "harness:\n  nodes:\n",
        to: "harness:\n  setupCodeSecret: {name: main-setup-code, key: setupCode}\n  nodes:\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "harness.nodes",
    },
    Case {
        name: "neither a setup code nor a node list",
        base: support::DEDICATED_NATIVE,
        from: "harness:\n  setupCodeSecret:\n    name: main-setup-code\n    key: setupCode\n",
        to: "harness: {}\n",
        code: "INSTALLATION_SCHEMA_VIOLATION",
        path: "harness.setupCodeSecret",
    },
    Case {
        name: "two nodes on one setup code",
        base: support::DEDICATED_NODES,
        from: "        name: main-node-2\n",
        to: "        name: main-node-0\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "harness.nodes[2].setupCodeSecret",
    },
    Case {
        name: "unknown key in a node",
        base: support::DEDICATED_NODES,
        from: "    - setupCodeSecret:\n        name: main-node-1\n",
        to: "    - capacity: 4\n      setupCodeSecret:\n        name: main-node-1\n",
        code: "INSTALLATION_UNKNOWN_KEY",
        path: "harness.nodes[1].capacity",
    },
    Case {
        name: "a node without its setup code",
        base: support::DEDICATED_NODES,
        from: "    - setupCodeSecret:\n        name: main-node-1\n        key: setupCode\n",
        to: "    - {}\n",
        code: "INSTALLATION_SCHEMA_VIOLATION",
        path: "harness.nodes[1].setupCodeSecret",
    },
    Case {
        name: "one scratch claim for several nodes",
        base: support::DEDICATED_NODES,
        from: "  workerCapacity: 16\n",
        to: "  workerCapacity: 16\n  scratchVolumes:\n    - namespaceId: acme\n      agentId: main\n      namespace: gatehouse-acme\n      claimName: main-scratch\n      claimUid: 3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b11\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "runtime.scratchVolumes",
    },
    Case {
        name: "no gateway replica",
        base: support::DEDICATED_REPLICAS,
        from: "  replicas: 3\n",
        to: "  replicas: 0\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "gateway.replicas",
    },
    Case {
        name: "more gateway replicas than allowed",
        base: support::DEDICATED_REPLICAS,
        from: "  replicas: 3\n",
        to: "  replicas: 17\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "gateway.replicas",
    },
    Case {
        name: "a negative number of gateway replicas",
        base: support::DEDICATED_REPLICAS,
        from: "  replicas: 3\n",
        to: "  replicas: -1\n",
        code: "INSTALLATION_SCHEMA_VIOLATION",
        path: "gateway.replicas",
    },
    Case {
        name: "several gateway replicas on the gateway claim",
        base: support::DEDICATED_NODES,
        from: "gateway:\n  operatorTokenSecret:\n",
        to: "gateway:\n  replicas: 2\n  operatorTokenSecret:\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "gateway.replicas",
    },
    Case {
        name: "several embedded gateway replicas",
        base: support::EMBEDDED,
        from: "gateway:\n  operatorTokenSecret:\n",
        to: "gateway:\n  replicas: 2\n  operatorTokenSecret:\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "gateway.replicas",
    },
    Case {
        name: "a zero lease",
        base: support::DEDICATED_REPLICAS,
        from: "  leaseSeconds: 10\n",
        to: "  leaseSeconds: 0\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "gateway.leaseSeconds",
    },
    Case {
        name: "a lease longer than the gateway takes",
        base: support::DEDICATED_REPLICAS,
        from: "  leaseSeconds: 10\n",
        to: "  leaseSeconds: 301\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "gateway.leaseSeconds",
    },
    Case {
        name: "a lease for the embedded pod",
        base: support::EMBEDDED,
        from: "gateway:\n  operatorTokenSecret:\n",
        to: "gateway:\n  leaseSeconds: 10\n  operatorTokenSecret:\n",
        code: "INSTALLATION_INVALID_VALUE",
        path: "gateway.leaseSeconds",
    },
];

#[test]
fn bad_installation_files_name_the_offending_key() {
    for case in CASES {
        let text = support::replace(case.base, case.from, case.to);
        let (code, path, message) = failure(&text);
        assert_eq!(
            (code, path.as_deref()),
            (case.code, Some(case.path)),
            "{}: {message}",
            case.name
        );
        assert!(
            message.starts_with(&format!("{}: ", case.path)),
            "{}: {message}",
            case.name
        );
    }
}

#[test]
fn a_missing_key_message_says_it_is_required() {
    let text = support::replace(
        support::EMBEDDED,
        "  gatewayStorageClassName: fast-rwo\n",
        "  nodeSelector: {}\n",
    );
    assert_eq!(
        Installation::from_yaml(&text).unwrap_err().to_string(),
        "runtime.gatewayStorageClassName: missing required key"
    );
}

#[test]
fn a_wrong_type_message_says_what_was_expected() {
    let text = support::replace(support::DEDICATED_CODEX, "  name: gpt-5\n", "  name: 5\n");
    let message = Installation::from_yaml(&text).unwrap_err().to_string();
    assert_eq!(
        message,
        "model.name: invalid type: integer `5`, expected a string"
    );
}

#[test]
fn a_scratch_mismatch_names_both_values() {
    let text = support::replace(
        support::DEDICATED_NATIVE,
        "      agentId: main\n",
        "      agentId: other\n",
    );
    assert_eq!(
        Installation::from_yaml(&text).unwrap_err().to_string(),
        "runtime.scratchVolumes[0].agentId: scratch binding is for \"other\" but this installation renders \"main\""
    );
}

#[test]
fn text_that_is_not_one_yaml_mapping_is_refused() {
    let cases = [
        ("agentId: [unclosed", "INSTALLATION_YAML_INVALID"),
        ("- a\n- b\n", "INSTALLATION_SCHEMA_VIOLATION"),
        ("a: 1\n---\nb: 2\n", "INSTALLATION_YAML_INVALID"),
        ("", "INSTALLATION_YAML_INVALID"),
    ];
    for (text, code) in cases {
        let err = Installation::from_yaml(text).unwrap_err();
        assert_eq!(err.code(), code, "{text:?}: {err}");
    }
}

#[test]
fn a_node_list_holds_one_to_sixty_four_nodes() {
    for count in [1, 2, gatehouse_deploy::installation::MAX_HARNESS_NODES] {
        Installation::from_yaml(&support::with_nodes(count))
            .unwrap_or_else(|err| panic!("{count}: {err}"));
    }
    for (count, found) in [(0, "found 0"), (65, "found 65")] {
        let (code, path, message) = failure(&support::with_nodes(count));
        assert_eq!(
            (code, path.as_deref()),
            ("INSTALLATION_INVALID_VALUE", Some("harness.nodes")),
            "{message}"
        );
        assert!(
            message.contains("1 to 64 nodes") && message.contains(found),
            "{message}"
        );
    }
}

#[test]
fn the_codex_runtime_takes_one_node_only() {
    // The node-list example as a Codex agent (which takes no worker capacity).
    let codex_with = |count| {
        let native = support::with_nodes(count);
        let codex = support::replace(
            &native,
            "topology: dedicated-native\n",
            "topology: dedicated-codex\n",
        );
        support::replace(&codex, "  workerCapacity: 16\n", "")
    };
    let (code, path, message) = failure(&codex_with(2));
    assert_eq!(
        (code, path.as_deref()),
        ("INSTALLATION_INVALID_VALUE", Some("harness.nodes")),
        "{message}"
    );
    assert!(
        message.contains("codex runtime runs on one node host"),
        "{message}"
    );
    // One node in the list is a single Codex node, rendered as a StatefulSet of one.
    let rendered = support::render_text(&codex_with(1));
    let set = support::objects(&rendered)
        .into_iter()
        .find_map(|object| match object {
            gatehouse_deploy::manifest::Object::StatefulSet(set) => Some(set),
            _ => None,
        })
        .unwrap();
    let spec = set.spec.unwrap();
    assert_eq!(spec.replicas, Some(1));
    let args = spec.template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(
        args.windows(2).any(|pair| pair == ["--runtime", "codex"]),
        "{args:?}"
    );
}

#[test]
fn every_example_parses() {
    for (name, text) in support::EXAMPLES {
        let installation = Installation::from_yaml(text).unwrap();
        assert_eq!(installation.agent_id(), "main", "{name}");
        assert_eq!(installation.topology().as_str(), name);
    }
    let err: Option<DeployError> = None;
    assert!(err.is_none());
}
