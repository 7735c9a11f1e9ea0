//! The error type of this crate.

use gatehouse_protocol::error::ErrorCode;

/// A shorthand for results whose error is [`DeployError`].
pub type Result<T> = std::result::Result<T, DeployError>;

/// Why an installation file could not be rendered, or why a manifest failed validation.
///
/// Every installation-file variant carries the dotted key path of the offending key, for example
/// `runtime.scratchVolumes[0].claimUid`; the empty path stands for the document root.
/// None of these errors goes away on retry: the operator must change the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeployError {
    /// Returned by [`crate::installation::Installation::from_yaml`] when the text is not YAML, or
    /// holds more or fewer than one document.
    #[error("installation file is not valid yaml: {message}")]
    Yaml {
        /// The parser's description of the problem.
        message: String,
    },

    /// Returned when the installation file has a key that the schema does not define.
    #[error("{path}: unknown key")]
    UnknownKey {
        /// The dotted path of the unknown key.
        path: String,
    },

    /// Returned when a key is missing or has the wrong type.
    #[error("{}: {message}", display_path(path))]
    Schema {
        /// The dotted path of the offending key.
        path: String,
        /// What the schema expected.
        message: String,
    },

    /// Returned when a key has the right type but a value the topology or Kubernetes refuses.
    #[error("{path}: {reason}")]
    InvalidValue {
        /// The dotted path of the offending key.
        path: String,
        /// Why the value is refused.
        reason: String,
    },

    /// Returned when a `runtime.scratchVolumes` binding names another namespace ID, agent or
    /// Kubernetes namespace than the one being rendered.
    #[error("{path}: scratch binding is for {actual:?} but this installation renders {expected:?}")]
    ScratchBindingMismatch {
        /// The dotted path of the mismatching field, e.g. `runtime.scratchVolumes[0].agentId`.
        path: String,
        /// The value of the rendered agent.
        expected: String,
        /// The value in the binding.
        actual: String,
    },

    /// Returned by [`crate::manifest::parse_manifests`] when a document is not a Kubernetes
    /// object this crate emits, has fields its typed form does not know, or does not survive a
    /// round trip through the typed form. From `render` this is a bug, never an operator error.
    #[error("manifest document {index}: {problem}")]
    InvalidManifest {
        /// The zero-based index of the document in the stream.
        index: usize,
        /// What is wrong with it.
        problem: String,
    },
}

impl DeployError {
    /// Returns the stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Yaml { .. } => ErrorCode::InstallationYamlInvalid,
            Self::UnknownKey { .. } => ErrorCode::InstallationUnknownKey,
            Self::Schema { .. } => ErrorCode::InstallationSchemaViolation,
            Self::InvalidValue { .. } => ErrorCode::InstallationInvalidValue,
            Self::ScratchBindingMismatch { .. } => ErrorCode::ScratchBindingMismatch,
            Self::InvalidManifest { .. } => ErrorCode::ManifestInvalid,
        }
    }

    /// Returns whether the operator must fix the installation file (a configuration error), as
    /// opposed to a defect in the renderer.
    pub fn is_config_error(&self) -> bool {
        match self {
            Self::Yaml { .. }
            | Self::UnknownKey { .. }
            | Self::Schema { .. }
            | Self::InvalidValue { .. }
            | Self::ScratchBindingMismatch { .. } => true,
            Self::InvalidManifest { .. } => false,
        }
    }

    /// Returns the dotted key path this error names, if it names one.
    pub fn path(&self) -> Option<&str> {
        match self {
            Self::UnknownKey { path }
            | Self::Schema { path, .. }
            | Self::InvalidValue { path, .. }
            | Self::ScratchBindingMismatch { path, .. } => Some(path),
            Self::Yaml { .. } | Self::InvalidManifest { .. } => None,
        }
    }
}

fn display_path(path: &str) -> &str {
    match path {
        "" => "(document root)",
        path => path,
    }
}
