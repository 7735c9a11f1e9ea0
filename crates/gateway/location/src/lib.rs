//! [`Location`]: where a Gateway service keeps its data, as the operator names it with a URL.
//!
//! Each service that takes such a URL (the store, the media store) has one local scheme, whose
//! rest is a path (`sqlite://PATH`, `file://DIR`), and remote schemes that name a service
//! (`postgres://…`, `s3://…`). The service implements [`Remote`] for its remote location, and
//! `Location<ItsRemote>` is its location type: this crate parses the local form and shows it,
//! the service parses its remote form and words its refusals.
//!
//! A location's [`Display`](fmt::Display) is its URL, and the URL never holds a secret (a
//! service refuses a URL that carries one), so it is safe to log.
//!
//! ```
//! use gatehouse_location::Location;
//! use gatehouse_location::Remote;
//!
//! /// `mem://NAME`, for the example.
//! #[derive(Debug, PartialEq)]
//! struct Memory(String);
//!
//! impl std::fmt::Display for Memory {
//!     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
//!         write!(f, "mem://{}", self.0)
//!     }
//! }
//!
//! impl Remote for Memory {
//!     const LOCAL_SCHEME: &'static str = "file://";
//!     type Error = String;
//!
//!     fn empty_path() -> String {
//!         "a file:// URL needs a path".to_owned()
//!     }
//!
//!     fn parse_remote(text: &str) -> Option<Result<Self, String>> {
//!         text.strip_prefix("mem://").map(|name| Ok(Memory(name.to_owned())))
//!     }
//!
//!     fn unknown_scheme(_text: &str) -> String {
//!         "neither file:// nor mem://".to_owned()
//!     }
//! }
//!
//! let local: Location<Memory> = "file:///srv/data".parse().unwrap();
//! assert_eq!(local, Location::Local("/srv/data".into()));
//! assert_eq!(local.to_string(), "file:///srv/data");
//! let remote: Location<Memory> = "mem://cache".parse().unwrap();
//! assert_eq!(remote, Location::Remote(Memory("cache".to_owned())));
//! assert!("file://".parse::<Location<Memory>>().is_err());
//! ```

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Where a service keeps its data: a local path, or a remote service `R` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location<R> {
    /// A local file or directory: the rest of a [`Remote::LOCAL_SCHEME`] URL, relative or
    /// absolute (`sqlite:///abs/file`, `file://relative/dir`).
    Local(PathBuf),
    /// A remote service.
    Remote(R),
}

/// The remote side of a service's [`Location`]: its schemes and its refusals.
pub trait Remote: Sized + fmt::Display {
    /// The scheme of the local form, with its `://` (`sqlite://`, `file://`).
    const LOCAL_SCHEME: &'static str;

    /// A URL that cannot be used.
    type Error;

    /// The refusal of a local URL without a path.
    fn empty_path() -> Self::Error;

    /// Parses a URL of one of the remote schemes; `None` when `text` has none of them.
    ///
    /// # Errors
    /// Whatever makes the URL unusable for the service.
    fn parse_remote(text: &str) -> Option<Result<Self, Self::Error>>;

    /// The refusal of a URL of neither the local nor a remote scheme. The URL may be a mistyped
    /// one with a secret in it: the refusal must not echo that.
    fn unknown_scheme(text: &str) -> Self::Error;
}

impl<R: Remote> FromStr for Location<R> {
    type Err = R::Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Some(path) = text.strip_prefix(R::LOCAL_SCHEME) {
            if path.is_empty() {
                return Err(R::empty_path());
            }
            return Ok(Location::Local(PathBuf::from(path)));
        }
        match R::parse_remote(text) {
            Some(remote) => remote.map(Location::Remote),
            None => Err(R::unknown_scheme(text)),
        }
    }
}

impl<R: Remote> fmt::Display for Location<R> {
    /// Shows the URL; it never holds a secret, so it is safe to log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Local(path) => write!(f, "{}{}", R::LOCAL_SCHEME, path.display()),
            Location::Remote(remote) => remote.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "a test fails loudly on any unexpected error"
    )]

    use std::fmt;
    use std::path::PathBuf;

    use super::Location;
    use super::Remote;

    /// A remote service with one scheme, `mem://NAME`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Memory(String);

    impl fmt::Display for Memory {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "mem://{}", self.0)
        }
    }

    impl Remote for Memory {
        const LOCAL_SCHEME: &'static str = "file://";
        type Error = String;

        fn empty_path() -> String {
            String::from("empty")
        }

        fn parse_remote(text: &str) -> Option<Result<Self, String>> {
            let name = text.strip_prefix("mem://")?;
            Some(if name.is_empty() {
                Err(String::from("no name"))
            } else {
                Ok(Memory(name.to_owned()))
            })
        }

        fn unknown_scheme(_text: &str) -> String {
            String::from("unknown")
        }
    }

    /// The local scheme names an absolute or a relative path, shown back as it was written;
    /// without a path it is the service's refusal.
    #[test]
    fn the_local_form_names_an_absolute_or_a_relative_path() {
        for (text, path) in [
            ("file:///srv/gatehouse/media", "/srv/gatehouse/media"),
            ("file://state/media", "state/media"),
        ] {
            let location: Location<Memory> = text.parse().unwrap();
            assert_eq!(location, Location::Local(PathBuf::from(path)));
            assert_eq!(location.to_string(), text);
        }
        assert_eq!(
            "file://".parse::<Location<Memory>>(),
            Err(String::from("empty"))
        );
    }

    /// Every other URL goes to the remote side, whose refusals are kept, and a URL of no known
    /// scheme is the service's refusal, which never echoes the URL.
    #[test]
    fn other_urls_are_the_remote_sides() {
        assert_eq!(
            "mem://cache".parse::<Location<Memory>>(),
            Ok(Location::Remote(Memory(String::from("cache"))))
        );
        assert_eq!(
            "mem://cache"
                .parse::<Location<Memory>>()
                .unwrap()
                .to_string(),
            "mem://cache"
        );
        assert_eq!(
            "mem://".parse::<Location<Memory>>(),
            Err(String::from("no name"))
        );
        assert_eq!(
            "mysql://user:secret@db/x".parse::<Location<Memory>>(),
            Err(String::from("unknown"))
        );
    }
}
