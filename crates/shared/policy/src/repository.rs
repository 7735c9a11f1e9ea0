//! The repository URLs of session workspace sources (`repository` and `worktree` from a
//! repository), read one way by the Gateway and the node host.
//!
//! This is policy, so it lives here: which URLs a session may name, and which network addresses
//! the node host's `git` may reach, decided as pure functions on values the caller passes in.
//! The Gateway parses a URL with [`RepositoryUrl::parse`] before it stores a source (and refuses
//! `file://` to keys that are not admin); the node host parses it again, refuses `file://` into
//! its own state, resolves the host itself, judges every address with
//! [`SourceAllowList::check`] and runs `git` on [`RepositoryUrl::as_str`], so git never reads
//! another URL than the one that was checked.
//!
//! # The URL rules
//! - At most [`MAX_URL_BYTES`] bytes, with no whitespace, control character or `\` anywhere
//!   (a leading space is refused, never trimmed).
//! - The scheme is `file`, `https` or `ssh`, in any case (`FILE://` is `file://`).
//! - No password, and a user name only in an `ssh` URL (a token as `https://TOKEN@host/` is a
//!   credential too); no query and no fragment.
//! - `https` and `ssh` name a host: a name of ASCII letters, digits, `-`, `_` and `.` that does
//!   not start with `-`, made of non-empty labels with no trailing dot (an `https` name is
//!   percent-decoded and taken in its `xn--` form first; an `ssh` name with a percent-escape
//!   is refused), or an IP literal (`[::1]` for IPv6).
//! - `file` names no host, or `localhost` (the same thing); any other host is refused, as git
//!   would silently ignore it. Its path is percent-decoded ([`RepositoryUrl::file_path`]), must
//!   be absolute and must hold no `..` component and no NUL once decoded; `.` and `..` segments
//!   (also `%2e%2e`) are resolved before that, as URL parsing does.
//!
//! # The default address rule
//! An address is refused ([`refused_class`]) when it is loopback, link-local (so
//! `169.254.169.254`, a cloud's metadata service), private (RFC 1918, the shared range
//! `100.64.0.0/10`, IPv6 unique local `fc00::/7` and site-local `fec0::/10`), unspecified
//! (`0.0.0.0/8`, `::`), multicast or broadcast; an IPv6 address that carries an IPv4 one (mapped
//! `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`,
//! 6to4 `2002::/16`) is judged by that IPv4 address. A
//! [`SourceAllowList`] names the host names and networks exempt from it (a company's own git
//! server).

use std::net::IpAddr;
use std::net::Ipv4Addr;
use std::path::Component;
use std::path::PathBuf;
use std::str::FromStr;

/// The longest repository URL, in bytes.
pub const MAX_URL_BYTES: usize = 4096;

/// The scheme of a repository URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `file://`: a path on the node host.
    File,
    /// `https://`.
    Https,
    /// `ssh://`.
    Ssh,
}

impl Scheme {
    /// Returns the port the scheme uses when the URL names none.
    #[must_use]
    pub fn default_port(self) -> Option<u16> {
        match self {
            Scheme::File => None,
            Scheme::Https => Some(443),
            Scheme::Ssh => Some(22),
        }
    }
}

/// The host of a network repository URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A host name, in lowercase ASCII.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl std::fmt::Display for Host {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(name) => formatter.write_str(name),
            Host::Ip(IpAddr::V4(address)) => write!(formatter, "{address}"),
            Host::Ip(IpAddr::V6(address)) => write!(formatter, "[{address}]"),
        }
    }
}

/// A repository URL in its canonical form: parsed once, then used as is by every check and by
/// `git`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepositoryUrl {
    scheme: Scheme,
    user: Option<String>,
    host: Option<Host>,
    port: Option<u16>,
    path: String,
    canonical: String,
}

/// Why a repository URL is refused. The messages never quote the URL, which may carry a
/// credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlRefusal {
    /// Longer than [`MAX_URL_BYTES`].
    #[error("it is longer than 4096 bytes")]
    TooLong,
    /// Whitespace, a control character or `\` somewhere, leading and trailing included.
    #[error("it holds whitespace, a control character or \\")]
    Whitespace,
    /// Not a URL at all (an scp-like `git@host:path` too).
    #[error("it is not a URL")]
    NotUrl,
    /// A scheme other than `file`, `https` and `ssh`.
    #[error("its scheme is not file://, https:// or ssh://")]
    Scheme,
    /// A password, an encoded user name, or a user name outside `ssh`.
    #[error(
        "it carries credentials (only an ssh URL may name a plain user); credentials belong in the node host's git configuration, credential helpers or ssh keys"
    )]
    Credentials,
    /// An `ssh` user name that is empty-looking or starts with `-`.
    #[error(
        "its user name starts with - or holds characters other than letters, digits, ., _ and -"
    )]
    User,
    /// A query or a fragment.
    #[error("it has a query or a fragment")]
    Query,
    /// An `https` or `ssh` URL without a host.
    #[error("it names no host")]
    NoHost,
    /// A host name that starts with `-` or holds other characters than the rules allow.
    #[error("its host starts with - or holds characters other than letters, digits, ., _ and -")]
    Host,
    /// A `file` URL that names a host other than `localhost`.
    #[error("a file:// URL names no host but localhost")]
    FileHost,
    /// A `file` path that is not absolute, holds `..` or NUL once decoded.
    #[error("its file path is not absolute, or holds .. or NUL once decoded")]
    FilePath,
    /// No path.
    #[error("it names no path")]
    NoPath,
}

impl RepositoryUrl {
    /// Parses a repository URL into its canonical form, as the module's rules say.
    ///
    /// # Errors
    /// The [`UrlRefusal`] of the first rule the URL breaks.
    pub fn parse(text: &str) -> Result<RepositoryUrl, UrlRefusal> {
        if text.len() > MAX_URL_BYTES {
            return Err(UrlRefusal::TooLong);
        }
        if text.chars().any(|character| {
            character.is_whitespace() || character.is_control() || character == '\\'
        }) {
            return Err(UrlRefusal::Whitespace);
        }
        let url = url::Url::parse(text).map_err(|_| UrlRefusal::NotUrl)?;
        let scheme = match url.scheme() {
            "file" => Scheme::File,
            "https" => Scheme::Https,
            "ssh" => Scheme::Ssh,
            _ => return Err(UrlRefusal::Scheme),
        };
        let user = match url.username() {
            "" => None,
            user => Some(user),
        };
        if url.password().is_some()
            || (user.is_some() && scheme != Scheme::Ssh)
            || user.is_some_and(|user| user.contains('%'))
        {
            return Err(UrlRefusal::Credentials);
        }
        if let Some(user) = user
            && !is_plain_name(user)
        {
            return Err(UrlRefusal::User);
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(UrlRefusal::Query);
        }
        let host = match (scheme, url.host()) {
            // URL parsing already turned `localhost` into no host.
            (Scheme::File, None) => None,
            (Scheme::File, Some(url::Host::Domain(""))) => None,
            (Scheme::File, Some(_)) => return Err(UrlRefusal::FileHost),
            (_, None) => return Err(UrlRefusal::NoHost),
            (_, Some(url::Host::Ipv4(address))) => Some(Host::Ip(IpAddr::V4(address))),
            (_, Some(url::Host::Ipv6(address))) => Some(Host::Ip(IpAddr::V6(address))),
            // An ssh host is opaque to URL parsing: an IPv4 literal arrives as a name.
            (_, Some(url::Host::Domain(name))) => match name.parse::<IpAddr>() {
                Ok(address) => Some(Host::Ip(address)),
                Err(_) if is_plain_name(name) => Some(Host::Name(name.to_ascii_lowercase())),
                Err(_) => return Err(UrlRefusal::Host),
            },
        };
        if url.path().is_empty() {
            return Err(UrlRefusal::NoPath);
        }
        if scheme == Scheme::File {
            let path = url.to_file_path().map_err(|()| UrlRefusal::FilePath)?;
            let refused = !path.is_absolute()
                || path.as_os_str().as_encoded_bytes().contains(&0)
                || path
                    .components()
                    .any(|component| component == Component::ParentDir);
            if refused {
                return Err(UrlRefusal::FilePath);
            }
        }
        let user = user.map(str::to_owned);
        let port = url.port();
        let path = url.path().to_owned();
        let canonical = canonical(scheme, user.as_deref(), host.as_ref(), port, &path);
        Ok(RepositoryUrl {
            scheme,
            user,
            host,
            port,
            path,
            canonical,
        })
    }

    /// Returns the scheme.
    #[must_use]
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// Returns the user name of an `ssh` URL, if it names one.
    #[must_use]
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// Returns the host of an `https` or `ssh` URL; `None` for `file`.
    #[must_use]
    pub fn host(&self) -> Option<&Host> {
        self.host.as_ref()
    }

    /// Returns the port the URL names; `None` when it names none (the scheme's default).
    #[must_use]
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Returns the port a connection goes to: the one named, else the scheme's default; `None`
    /// for `file`.
    #[must_use]
    pub fn port_or_default(&self) -> Option<u16> {
        self.port.or(self.scheme.default_port())
    }

    /// Returns the path, percent-encoded as in the canonical URL.
    #[must_use]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Returns the `file://` URL of the absolute path `path` (percent-encoded as needed), read
    /// as [`RepositoryUrl::parse`] reads it: what the node host fetches once it has resolved a
    /// `file://` repository's links, so git never follows a link swapped after the check.
    ///
    /// # Errors
    /// [`UrlRefusal`] for a relative path or one the rules refuse.
    pub fn from_file_path(path: &std::path::Path) -> Result<RepositoryUrl, UrlRefusal> {
        let url = url::Url::from_file_path(path).map_err(|()| UrlRefusal::NotUrl)?;
        RepositoryUrl::parse(url.as_str())
    }

    /// Returns the decoded path of a `file` URL on the node host; `None` for the other schemes.
    #[must_use]
    pub fn file_path(&self) -> Option<PathBuf> {
        match self.scheme {
            Scheme::File => url::Url::parse(&self.canonical)
                .ok()
                .and_then(|url| url.to_file_path().ok()),
            Scheme::Https | Scheme::Ssh => None,
        }
    }

    /// Returns the canonical URL: lowercase scheme, no `localhost` in a `file` URL, lowercase
    /// host name, no default port, resolved dot segments.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.canonical
    }

    /// Returns the canonical URL with its host replaced by `address`, the same user, port and
    /// path: what a client that must connect to one checked address is given.
    #[must_use]
    pub fn with_address(&self, address: IpAddr) -> String {
        canonical(
            self.scheme,
            self.user.as_deref(),
            Some(&Host::Ip(address)),
            self.port,
            &self.path,
        )
    }
}

impl std::fmt::Display for RepositoryUrl {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.canonical)
    }
}

/// Writes a URL of its parts.
fn canonical(
    scheme: Scheme,
    user: Option<&str>,
    host: Option<&Host>,
    port: Option<u16>,
    path: &str,
) -> String {
    let scheme = match scheme {
        Scheme::File => "file",
        Scheme::Https => "https",
        Scheme::Ssh => "ssh",
    };
    let user = user.map(|user| format!("{user}@")).unwrap_or_default();
    let host = host.map(Host::to_string).unwrap_or_default();
    let port = port.map(|port| format!(":{port}")).unwrap_or_default();
    format!("{scheme}://{user}{host}{port}{path}")
}

/// Returns whether `name` is a host or user name of ASCII letters, digits, `.`, `_` and `-`
/// that does not start with `-`: nothing a shell, `ssh` or `git` would read as more.
/// A host name of non-empty labels of ASCII letters, digits, `_` and `-`, not starting with `-`
/// and without a trailing dot: `example.com.` is refused, since curl may not find the address
/// the node pins for it under that spelling and resolve the name again itself.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-'))
        })
}

/// The classes of addresses the node host refuses to fetch from by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressClass {
    /// `127.0.0.0/8`, `::1`.
    #[error("loopback")]
    Loopback,
    /// `169.254.0.0/16` (a cloud's metadata service), `fe80::/10`.
    #[error("link-local")]
    LinkLocal,
    /// RFC 1918, `100.64.0.0/10`, `fc00::/7`.
    #[error("private")]
    Private,
    /// `0.0.0.0/8`, `::`.
    #[error("unspecified")]
    Unspecified,
    /// Multicast and `255.255.255.255`.
    #[error("multicast or broadcast")]
    Multicast,
}

/// Returns the class that makes the default rule refuse `address`, or `None` for an address
/// it lets through. An IPv4-mapped IPv6 address is judged as its IPv4 address.
#[must_use]
pub fn refused_class(address: IpAddr) -> Option<AddressClass> {
    match address.to_canonical() {
        IpAddr::V4(address) => refused_v4(address),
        IpAddr::V6(address) => {
            if let Some(embedded) = embedded_v4(address) {
                return refused_v4(embedded);
            }
            if address.is_loopback() {
                Some(AddressClass::Loopback)
            } else if address.is_unicast_link_local() {
                Some(AddressClass::LinkLocal)
            } else if address.is_unique_local() || (address.segments()[0] & 0xffc0) == 0xfec0 {
                // Unique local `fc00::/7`, and the deprecated site-local `fec0::/10`.
                Some(AddressClass::Private)
            } else if address.is_unspecified() {
                Some(AddressClass::Unspecified)
            } else if address.is_multicast() {
                Some(AddressClass::Multicast)
            } else {
                None
            }
        }
    }
}

/// Returns the IPv4 address an IPv6 address carries and reaches through a translator or a
/// tunnel: NAT64 (`64:ff9b::/96`, and the local-use `64:ff9b:1::/48` with the address in its
/// last 32 bits), 6to4 (`2002:AABB:CCDD::/48`) and the deprecated IPv4-compatible `::a.b.c.d`
/// (not `::` or `::1`). The mapped form `::ffff:a.b.c.d` is handled by `to_canonical`.
fn embedded_v4(address: std::net::Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = address.segments();
    let last32 = Ipv4Addr::from(u32::from(segments[6]) << 16 | u32::from(segments[7]));
    let nat64 = segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
        || (segments[0] == 0x64 && segments[1] == 0xff9b && segments[2] == 1);
    if nat64 {
        return Some(last32);
    }
    if segments[0] == 0x2002 {
        return Some(Ipv4Addr::from(
            u32::from(segments[1]) << 16 | u32::from(segments[2]),
        ));
    }
    if segments[..6] == [0; 6] && u32::from(last32) > 1 {
        return Some(last32);
    }
    None
}

/// [`refused_class`] of an IPv4 address.
fn refused_v4(address: Ipv4Addr) -> Option<AddressClass> {
    let [first, second, ..] = address.octets();
    if address.is_loopback() {
        Some(AddressClass::Loopback)
    } else if address.is_link_local() {
        Some(AddressClass::LinkLocal)
    } else if address.is_private() || (first == 100 && (64..128).contains(&second)) {
        Some(AddressClass::Private)
    } else if first == 0 {
        Some(AddressClass::Unspecified)
    } else if address.is_multicast() || address.is_broadcast() {
        Some(AddressClass::Multicast)
    } else {
        None
    }
}

/// An address the node host refuses to fetch from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the repository's host is refused: it is or resolves to a {class} address, and the node host's source-allow-hosts does not name it"
)]
pub struct AddressRefused {
    /// Why the default rule refuses it.
    pub class: AddressClass,
}

/// The node host's `source-allow-hosts`: host names and networks exempt from the default
/// address rule. Empty by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceAllowList {
    names: Vec<String>,
    networks: Vec<ipnet::IpNet>,
}

/// An entry of `source-allow-hosts` that is neither a host name, an IP address nor a network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "source-allow-hosts: {entry:?} is no host name (letters, digits, ., _ and -), IP address or network (10.0.0.0/8)"
)]
pub struct AllowEntryInvalid {
    /// The entry as given.
    pub entry: String,
}

impl FromStr for SourceAllowList {
    type Err = AllowEntryInvalid;

    /// Parses a comma-separated list; see [`SourceAllowList::new`].
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        SourceAllowList::new(text.split(',').filter(|entry| !entry.is_empty()))
    }
}

impl SourceAllowList {
    /// Builds the list of `entries`, each a host name (matched exactly, in any case), an IP
    /// address or a network in CIDR form (`10.0.0.0/8`, `fd00::/8`).
    ///
    /// # Errors
    /// The first entry that is none of these.
    pub fn new<I, S>(entries: I) -> Result<SourceAllowList, AllowEntryInvalid>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut list = SourceAllowList::default();
        for entry in entries {
            let entry = entry.as_ref().trim();
            if let Ok(network) = entry.parse::<ipnet::IpNet>() {
                list.networks.push(network.trunc());
            } else if let Ok(address) = entry.parse::<IpAddr>() {
                list.networks.push(ipnet::IpNet::from(address));
            } else if is_plain_name(entry) {
                list.names.push(entry.to_ascii_lowercase());
            } else {
                return Err(AllowEntryInvalid {
                    entry: entry.to_owned(),
                });
            }
        }
        Ok(list)
    }

    /// Returns whether the list names nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.networks.is_empty()
    }

    /// Judges one address a connection to `host` would go to (the host's own address for an
    /// IP literal, else each address its name resolves to): allowed when the default rule lets
    /// it through, the list names the host name, or a listed network holds the address (or its
    /// IPv4 form, for an IPv4-mapped one).
    ///
    /// # Errors
    /// [`AddressRefused`] with the class the default rule refuses.
    pub fn check(&self, host: &Host, address: IpAddr) -> Result<(), AddressRefused> {
        let Some(class) = refused_class(address) else {
            return Ok(());
        };
        let named = matches!(host, Host::Name(name) if self.names.contains(name));
        let in_network = self
            .networks
            .iter()
            .any(|network| network.contains(&address) || network.contains(&address.to_canonical()));
        match named || in_network {
            true => Ok(()),
            false => Err(AddressRefused { class }),
        }
    }
}

#[cfg(test)]
#[path = "repository_tests.rs"]
mod tests;
