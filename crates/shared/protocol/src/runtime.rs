//! [`RuntimeKind`]: the runtime a node hosts and a Gateway's turns run on.
//!
//! A node declares it in `connect` (`runtime`), the Gateway lists it in `/v1/nodes`, and the CLI
//! takes it as `--runtime`. With the `clap` feature it is also a `clap::ValueEnum`, so the CLI
//! parses the flag into this type directly.

use serde::Deserialize;
use serde::Serialize;

/// The runtime that runs an Agent's turns; its wire text is `native` or `codex`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum RuntimeKind {
    /// The built-in agent runtime: the node's workers call the model and run the tools.
    #[default]
    Native,
    /// The Codex app-server runtime, reached through the node's `codex.appserver` relay.
    Codex,
}

impl RuntimeKind {
    /// Every kind, in declaration order.
    pub const ALL: &'static [RuntimeKind] = &[RuntimeKind::Native, RuntimeKind::Codex];

    /// Returns the wire text: `native` or `codex`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Native => "native",
            RuntimeKind::Codex => "codex",
        }
    }

    /// Parses the wire text; returns `None` for any other text.
    pub fn parse(text: &str) -> Option<RuntimeKind> {
        RuntimeKind::ALL
            .iter()
            .copied()
            .find(|kind| kind.as_str() == text)
    }
}

impl std::fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A runtime kind compares equal to its wire text.
impl PartialEq<&str> for RuntimeKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
