//! Default locations.

use std::path::PathBuf;

use crate::exit::UsageError;

/// Returns the default data directory of `gatehouse up`: `$XDG_DATA_HOME/gatehouse`, else
/// `$HOME/.local/share/gatehouse`.
///
/// # Errors
/// A usage error when neither variable is set.
pub(crate) fn default_data_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|dir| !dir.is_empty()) {
        return Ok(PathBuf::from(dir).join("gatehouse"));
    }
    match std::env::var_os("HOME") {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/gatehouse")),
        None => {
            Err(UsageError::new("neither XDG_DATA_HOME nor HOME is set; pass --data DIR").into())
        }
    }
}
