//! Golden tests of the rendered YAML for the three topologies and the node-host and replica
//! examples, with the hashes redacted.

use crate::suite::support;

#[test]
fn embedded_golden() {
    insta::assert_snapshot!("embedded", support::redacted(support::EMBEDDED));
}

#[test]
fn dedicated_native_golden() {
    insta::assert_snapshot!(
        "dedicated_native",
        support::redacted(support::DEDICATED_NATIVE)
    );
}

#[test]
fn dedicated_codex_golden() {
    insta::assert_snapshot!(
        "dedicated_codex",
        support::redacted(support::DEDICATED_CODEX)
    );
}

#[test]
fn the_same_input_renders_byte_identical_output() {
    for (name, text) in support::ALL_EXAMPLES {
        let first = support::render_text(text).to_yaml();
        let second = support::render_text(text).to_yaml();
        assert_eq!(first, second, "{name} rendered differently twice");
    }
}

#[test]
fn formatting_and_key_order_do_not_change_the_revision() {
    let reordered = format!(
        "# a comment\n{}",
        support::DEDICATED_CODEX.replace(
            "agentId: main\nnamespaceId: acme\n",
            "namespaceId: acme\nagentId: main\n"
        )
    );
    assert_ne!(reordered, support::DEDICATED_CODEX);
    let original = support::render_text(support::DEDICATED_CODEX);
    let rendered = support::render_text(&reordered);
    assert_eq!(rendered.revision(), original.revision());
    assert_eq!(rendered.to_yaml(), original.to_yaml());
}

#[test]
fn a_changed_setting_changes_the_revision() {
    let changed = support::replace(support::DEDICATED_CODEX, "name: gpt-5", "name: gpt-5-mini");
    let original = support::render_text(support::DEDICATED_CODEX);
    let rendered = support::render_text(&changed);
    assert_ne!(rendered.revision(), original.revision());
    assert_eq!(rendered.revision().len(), 12);
}

#[test]
fn dedicated_nodes_golden() {
    insta::assert_snapshot!(
        "dedicated_nodes",
        support::redacted(support::DEDICATED_NODES)
    );
}

#[test]
fn dedicated_replicas_golden() {
    insta::assert_snapshot!(
        "dedicated_replicas",
        support::redacted(support::DEDICATED_REPLICAS)
    );
}
