//! Mapping wire paths (absolute, under the root's logical path) to checked relative paths.

use crate::error::FsError;
use crate::error::Result;

/// A path relative to a [`crate::Root`], already checked: every component is a plain name (no
/// `/`, NUL, `.` or `..`). The empty path is the root itself.
///
/// A `RelPath` says nothing about what exists on disk; resolving it still refuses symbolic links.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelPath {
    components: Vec<String>,
}

impl RelPath {
    /// Returns the root itself.
    pub fn root() -> Self {
        Self {
            components: Vec::new(),
        }
    }

    /// Parses a relative path such as `notes/a.md`.
    ///
    /// # Errors
    /// [`FsError::InvalidPath`] for an absolute path or NUL, and [`FsError::PathTraversal`] for a
    /// `..` segment (with either slash). Empty and `.` segments are dropped.
    pub fn parse(text: &str) -> Result<Self> {
        if text.contains('\0') {
            return Err(FsError::InvalidPath {
                path: text.to_owned(),
                reason: "contains NUL",
            });
        }
        if text.starts_with('/') {
            return Err(FsError::InvalidPath {
                path: text.to_owned(),
                reason: "must be relative",
            });
        }
        if has_dot_dot_segment(text) {
            return Err(FsError::PathTraversal {
                path: text.to_owned(),
            });
        }
        let components = text
            .split('/')
            .filter(|segment| !segment.is_empty() && *segment != ".")
            .map(str::to_owned)
            .collect();
        Ok(Self { components })
    }

    /// Returns the components, outermost first.
    pub fn components(&self) -> &[String] {
        &self.components
    }

    /// Returns true for the root itself.
    pub fn is_root(&self) -> bool {
        self.components.is_empty()
    }

    /// Returns the parent and the final name, or `None` for the root.
    pub fn split_last(&self) -> Option<(RelPath, &str)> {
        let (last, parent) = self.components.split_last()?;
        Some((
            RelPath {
                components: parent.to_vec(),
            },
            last.as_str(),
        ))
    }

    /// Returns the path joined with `/`, or `.` for the root (the form the kernel takes).
    pub fn to_os_path(&self) -> String {
        match self.components.is_empty() {
            true => String::from("."),
            false => self.components.join("/"),
        }
    }

    /// Returns this path followed by `name`.
    pub fn join(&self, name: &str) -> RelPath {
        let mut components = self.components.clone();
        components.push(name.to_owned());
        RelPath { components }
    }
}

/// Returns true when `path` has a `..` segment, treating `\` and `/` alike.
pub fn has_dot_dot_segment(path: &str) -> bool {
    path.split(['/', '\\']).any(|segment| segment == "..")
}

/// Maps an absolute wire path under `root` (the root's logical absolute path) to a [`RelPath`].
///
/// # Errors
/// - [`FsError::InvalidPath`]: empty, relative, or containing NUL;
/// - [`FsError::PathTraversal`]: a `..` segment, or a path outside `root`.
pub fn map_wire_path(root: &str, path: &str) -> Result<RelPath> {
    if path.is_empty() {
        return Err(FsError::InvalidPath {
            path: String::new(),
            reason: "is empty",
        });
    }
    if path.contains('\0') {
        return Err(FsError::InvalidPath {
            path: path.to_owned(),
            reason: "contains NUL",
        });
    }
    if !path.starts_with('/') {
        return Err(FsError::InvalidPath {
            path: path.to_owned(),
            reason: "must be absolute",
        });
    }
    if has_dot_dot_segment(path) {
        return Err(FsError::PathTraversal {
            path: path.to_owned(),
        });
    }
    let mut remaining = path
        .split('/')
        .filter(|segment| !segment.is_empty() && *segment != ".");
    for root_segment in root
        .split('/')
        .filter(|segment| !segment.is_empty() && *segment != ".")
    {
        if remaining.next() != Some(root_segment) {
            return Err(FsError::PathTraversal {
                path: path.to_owned(),
            });
        }
    }
    Ok(RelPath {
        components: remaining.map(str::to_owned).collect(),
    })
}

/// Returns the logical name of an operator-chosen absolute directory path (without trailing
/// slashes), as the opened root or handle reports it.
///
/// # Errors
/// [`FsError::InvalidPath`] for a relative or non-UTF-8 path.
pub(crate) fn logical_root(path: &std::path::Path) -> Result<String> {
    let Some(logical) = path.to_str() else {
        return Err(FsError::InvalidPath {
            path: path.to_string_lossy().into_owned(),
            reason: "is not valid UTF-8",
        });
    };
    if !path.is_absolute() {
        return Err(FsError::InvalidPath {
            path: logical.to_owned(),
            reason: "must be absolute",
        });
    }
    Ok(logical.trim_end_matches('/').to_owned())
}
