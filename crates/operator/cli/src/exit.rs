//! Error kinds that decide the process exit code.

use std::fmt;

/// A usage or configuration error: the process exits with code 2.
///
/// Wrap the message in this type (`anyhow::Error::new(UsageError::new(..))`) when the user must
/// change what they typed or configured; every other error exits with code 1.
#[derive(Debug)]
pub(crate) struct UsageError {
    message: String,
}

impl UsageError {
    /// Returns a usage error with a message that says what to do.
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UsageError {}
