//! The error type of this crate.

use crate::path::PatternList;
use crate::tool::LayerSource;

/// A shorthand for results whose error is [`PolicyError`].
pub type Result<T> = std::result::Result<T, PolicyError>;

/// Why a policy could not be validated, updated or resolved.
///
/// None of these errors goes away on retry: the configuration or the request must change.
/// Policy *decisions* (allow, ask, deny) are not errors; they are
/// [`crate::path::Decision`] and [`crate::tool::ToolDecision`] values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// Returned by [`crate::path::validate`] for a path pattern that does not compile.
    ///
    /// Evaluation never fails on such a pattern: in an allow list it matches nothing, and in
    /// `denyPaths` it denies every request that reaches that entry (fail closed).
    #[error("invalid glob in nodes[{node_key:?}].{list}: {source}")]
    InvalidGlob {
        /// The `nodes` key of the entry that holds the pattern.
        node_key: String,
        /// The list that holds the pattern.
        list: PatternList,
        /// The pattern as configured, before `~` expansion.
        pattern: String,
        /// The glob compiler's description of the problem.
        #[source]
        source: globset::Error,
    },

    /// Returned by [`crate::path::validate`] for `maxBytes: 0`.
    ///
    /// Evaluation treats it as 1, the smallest positive limit, as upstream does.
    #[error("nodes[{node_key:?}].maxBytes must be positive")]
    ZeroMaxBytes {
        /// The `nodes` key of the offending entry.
        node_key: String,
    },

    /// Returned by [`crate::path::persist_allow_always`] and [`crate::path::apply_default_policy`]
    /// when the node id would make an unsafe `nodes` key.
    ///
    /// The refused keys are the empty string, the wildcard `*` (writing there would widen every
    /// node) and `__proto__`, `prototype` and `constructor` (which corrupt a JavaScript reader of
    /// the same configuration).
    #[error("refusing to write file policy under unsafe node key {key:?}")]
    UnsafeNodeKey {
        /// The refused key.
        key: String,
    },

    /// Returned by [`crate::path::persist_allow_always`] for a path with a `..` segment.
    ///
    /// Evaluation denies such paths before any glob, so persisting one would grant nothing.
    #[error("refusing to persist a path with a '..' segment: {path:?}")]
    ParentSegment {
        /// The refused path.
        path: String,
    },

    /// Returned by [`crate::path::persist_allow_always`] for an empty or blank path.
    #[error("refusing to persist an empty path")]
    EmptyPath,

    /// Returned by [`crate::tool::build_layers`] when one scope sets both `allow` and
    /// `alsoAllow`, which the tool policy defines as a configuration error.
    #[error("{scope} sets both allow and alsoAllow")]
    AllowWithAlsoAllow {
        /// The scope that sets both.
        scope: LayerSource,
    },

    /// Returned by [`crate::tool::callable_tools`] when an allowlist leaves no callable tool.
    ///
    /// The run must stop before the model is called.
    #[error("the tool allowlists leave no callable tool")]
    NoCallableTools,
}
