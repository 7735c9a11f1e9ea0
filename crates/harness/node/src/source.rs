//! `agent.session.source`: the node host fetches one commit of a repository with its own `git`
//! and writes the commit's files into a session's missing execution workspace (the
//! `repository` and `worktree` workspace sources).
//!
//! - The parameters are checked before anything runs ([`SourceRequest::parse`]): a `file://`,
//!   `https://` or `ssh://` URL read by [`RepositoryUrl::parse`], the Gateway's reading too
//!   (so without credentials, which live in the node host's git configuration, credential
//!   helpers and ssh keys, never in the URL, which would reach argv and logs), a plain `ref` and
//!   a 40-digit lowercase hex `commit`. git is only ever given the URL's canonical form.
//! - A `file://` repository inside the node host's root is refused, whatever host or spelling
//!   the URL had, and git is given the path with its links resolved ([`resolve_file_source`]). The Gateway lets only the operator and admin keys name
//!   a `file://` repository at all.
//! - The host of an `https://` or `ssh://` repository is resolved by the node host, and every
//!   address is judged by the default rule and the node host's `source-allow-hosts`
//!   ([`SourceAllowList::check`]): loopback, link-local, private, unspecified and multicast
//!   addresses are refused unless listed. git then connects to the checked addresses only, so a
//!   name that resolves differently a moment later (DNS rebinding) changes nothing: `https`
//!   through `http.curloptResolve` (and no redirects), `ssh` through `-o HostName=ADDRESS` with
//!   `-o HostKeyAlias=NAME` (its known host key and `~/.ssh/config` entries stay those of the
//!   name); see [`Remote`].
//! - The fetch goes into a bare repository private to the node host,
//!   `<root>/sources/<session dir name>` (the directory `sources/` is 0700), next to the
//!   sessions: outside every session workspace and hidden from the sandbox, like the whole
//!   Harness root. It is created with `git init --bare --template=`, so no template hook comes
//!   with it, and it is deleted with the session directory.
//! - `git` is the binary found on `PATH`, run as a child that is killed when the request is
//!   dropped. Every call gets [`GIT_CONFIG`] (no hooks, only the `file`, `https` and `ssh`
//!   transports), `GIT_TERMINAL_PROMPT=0` and `GIT_ALLOW_PROTOCOL=file:https:ssh`, and `--`
//!   before the user-supplied URL and ref. The whole fetch is bounded by [`FETCH_TIMEOUT`].
//! - With `commit`, a commit the cache holds is not fetched again; otherwise it is fetched by id
//!   (`--depth=1`) and, when the server refuses that, with every branch and tag. Without it,
//!   `ref` (default `HEAD`) is fetched with `--depth=1` and resolved to its commit.
//! - The commit's tree is listed (`git ls-tree -r -z -l --full-tree`): regular files become
//!   files with their exec bit, links become links whose target is the blob's text (never
//!   resolved), and submodules and anything else are left out and logged, as are the paths a
//!   checkpoint excludes ([`gatehouse_agent::checkpoint::is_excluded`], `.git` first) and the
//!   entries [`validate_entry`] refuses. A tree that names a path twice or puts an entry below
//!   a file or link is refused. The contents are read through one `git cat-file --batch`.
//! - The entries are written by the writer of `agent.session.restore`
//!   ([`crate::worker::write_new_workspace`]): the session's worker is stopped first, the
//!   workspace must not exist, and everything is created through directory handles that never
//!   follow a link.
//! - With an `overlay` (a rebuild whose checkpoint left paths out), only the commit's entries
//!   that [`KeptFromEarlier`] keeps are written, then the checkpoint's entries (their hashes
//!   checked), both through the same writer; the overlay is judged by [`validate_manifest`] and
//!   [`validate_omitted`] before anything is fetched.
//! - Bounds: with `report`, the answer carries every entry with its content and must pass
//!   [`validate_manifest`] ([`MAX_CHECKPOINT_ENTRIES`] entries, [`MAX_CHECKPOINT_BYTES`]);
//!   without it, at most [`MAX_SOURCE_ENTRIES`] entries and [`MAX_SOURCE_BYTES`].
//!
//! Errors: `INVALID_PARAMS` for refused parameters, `EXISTS_NO_OVERWRITE` for an existing
//! workspace, `SOURCE_UNAVAILABLE` for a repository inside the node's own state, a refused
//! address, a host name that does not resolve, a repository that cannot be fetched, a ref or
//! commit that does not resolve, a tree past the bounds or one that cannot be written, or a node
//! host without `git`. A failed fetch never carries git's message (which would tell a caller
//! what answers at an address: a closed port, a server that speaks no TLS): the message says
//! only that the fetch failed, and the node host logs git's stderr (the URL's user name taken
//! out) at `warn`. This holds for every caller, admin keys and the operator too.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::ffi::OsString;
use std::io::BufRead;
use std::io::Read;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use gatehouse_fsops::Dir;
use gatehouse_policy::repository::Host;
use gatehouse_policy::repository::RepositoryUrl;
use gatehouse_policy::repository::Scheme;
use gatehouse_policy::repository::SourceAllowList;
use gatehouse_protocol::checkpoint::KIND_FILE;
use gatehouse_protocol::checkpoint::KIND_SYMLINK;
use gatehouse_protocol::checkpoint::KeptFromEarlier;
use gatehouse_protocol::checkpoint::MAX_CHECKPOINT_BYTES;
use gatehouse_protocol::checkpoint::MAX_CHECKPOINT_ENTRIES;
use gatehouse_protocol::checkpoint::MAX_CHECKPOINT_LINK_TARGET_BYTES;
use gatehouse_protocol::checkpoint::MAX_REPORTED_PATH_BYTES;
use gatehouse_protocol::checkpoint::truncated;
use gatehouse_protocol::checkpoint::validate_entry;
use gatehouse_protocol::checkpoint::validate_manifest;
use gatehouse_protocol::checkpoint::validate_omitted;
use gatehouse_protocol::command::AgentSessionSource;
use gatehouse_protocol::command::Serve;
use gatehouse_protocol::command::Served;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::worker::AgentSessionSourceParams;
use gatehouse_protocol::worker::AgentSessionSourceResult;
use gatehouse_protocol::worker::CheckpointEntry;
use gatehouse_protocol::worker::Inline;
use gatehouse_protocol::worker::SourceOverlay;
use tokio::io::AsyncBufReadExt;
use tokio::io::AsyncRead;
use tokio::io::AsyncReadExt;

use crate::invoke::InvokeContext;
use crate::worker::NewEntry;
use crate::worker::NewEntryKind;
use crate::worker::WorkerSupervisor;

/// How long the whole fetch of a source may take (every git call that talks to the
/// repository, and the cache's preparation): 5 minutes; past it the fetch is killed and the
/// request fails with `SOURCE_UNAVAILABLE`.
pub(crate) const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// The most entries a source without `report` writes.
pub(crate) const MAX_SOURCE_ENTRIES: usize = 100_000;

/// The most bytes of file content a source without `report` writes: 1 GiB.
pub(crate) const MAX_SOURCE_BYTES: u64 = 1 << 30;

/// The directory of the node host's source caches in its root, next to `sessions/`.
pub(crate) const SOURCES_DIR: &str = "sources";

/// The configuration every git call gets: no hooks, and no transport but `file`, `https` and
/// `ssh` (so neither `ext::` nor any other remote helper runs).
const GIT_CONFIG: [&str; 10] = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "protocol.allow=never",
    "-c",
    "protocol.file.allow=always",
    "-c",
    "protocol.https.allow=always",
    "-c",
    "protocol.ssh.allow=always",
];

/// The environment variables that would point a git call at another repository; removed
/// from every call, which names its repository itself.
const GIT_REPOSITORY_ENV: [&str; 7] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
];

/// How much of git's stderr an error keeps: the last 4 KiB.
const MAX_GIT_STDERR_BYTES: usize = 4096;

/// The most a git call other than `ls-tree` and `cat-file` may write on stdout.
const MAX_GIT_STDOUT_BYTES: usize = 64 * 1024;

/// The longest record of `git ls-tree` or header of `git cat-file` read: a path of
/// [`gatehouse_protocol::checkpoint::MAX_CHECKPOINT_PATH_BYTES`] plus its header, with room.
const MAX_GIT_RECORD_BYTES: u64 = 8192;

/// The longest `ref`, in bytes.
const MAX_REF_BYTES: usize = 255;

/// The ref the cache keeps on the commit last written, so its objects are never pruned.
const CACHE_REF: &str = "refs/gatehouse/source";

/// `agent.session.source`.
pub(crate) struct SessionSourceHandler {
    pub(crate) supervisor: Arc<WorkerSupervisor>,
}

impl Serve<AgentSessionSource, InvokeContext> for SessionSourceHandler {
    fn serve(
        &self,
        params: AgentSessionSourceParams,
        _context: InvokeContext,
    ) -> Served<AgentSessionSourceResult> {
        let supervisor = Arc::clone(&self.supervisor);
        Box::pin(async move { supervisor.source(params).await })
    }
}

/// A checked `agent.session.source` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceRequest {
    /// The repository URL, in its canonical form.
    url: RepositoryUrl,
    /// The ref to resolve when `commit` is absent.
    reference: String,
    /// The pinned commit.
    commit: Option<String>,
    /// Whether the answer carries the entries.
    report: bool,
}

impl SourceRequest {
    /// Checks the parameters of `agent.session.source`.
    ///
    /// # Errors
    /// `INVALID_PARAMS`, with a message that names what is wrong and never quotes the URL: a
    /// URL [`RepositoryUrl::parse`] refuses (so `ext::`, scp-like and `-`-leading URLs, a
    /// password, whitespace anywhere, a host or user name starting with `-`); a `ref` that is
    /// empty, longer than 255 bytes, starts with `-`, or holds whitespace, a control character,
    /// `..`, `:`, `~`, `^`, `?`, `*`, `[` or `\`; a `commit` that is not 40 lowercase hex digits.
    pub(crate) fn parse(params: &AgentSessionSourceParams) -> Result<SourceRequest, WireError> {
        let url = RepositoryUrl::parse(&params.url).map_err(|refusal| {
            WireError::new(
                ErrorCode::InvalidParams,
                format!("the repository URL is refused: {refusal}"),
            )
        })?;
        let reference = params.reference.as_deref().unwrap_or("HEAD");
        check_ref(reference)?;
        if let Some(commit) = &params.commit
            && !is_commit_id(commit)
        {
            return Err(WireError::new(
                ErrorCode::InvalidParams,
                "the commit is not 40 lowercase hex digits",
            ));
        }
        if params.overlay.is_some() && (params.commit.is_none() || params.report) {
            return Err(WireError::new(
                ErrorCode::InvalidParams,
                "an overlay needs the pinned commit, and no report",
            ));
        }
        Ok(SourceRequest {
            url,
            reference: reference.to_owned(),
            commit: params.commit.clone(),
            report: params.report,
        })
    }
}

/// Checks a `ref`.
fn check_ref(reference: &str) -> Result<(), WireError> {
    let refuse = |why: &str| {
        Err(WireError::new(
            ErrorCode::InvalidParams,
            format!("the ref is refused: {why}"),
        ))
    };
    if reference.is_empty() || reference.len() > MAX_REF_BYTES {
        return refuse("it must have 1 to 255 bytes");
    }
    if reference.starts_with('-') {
        return refuse("it starts with -");
    }
    if reference
        .chars()
        .any(|character| character.is_whitespace() || character.is_control())
    {
        return refuse("it holds whitespace or a control character");
    }
    if reference.contains("..") {
        return refuse("it holds ..");
    }
    if reference.contains([':', '~', '^', '?', '*', '[', '\\']) {
        return refuse("it holds one of : ~ ^ ? * [ \\");
    }
    Ok(())
}

/// Returns true for 40 lowercase hex digits.
fn is_commit_id(text: &str) -> bool {
    text.len() == 40
        && text
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
}

/// Returns the URL git fetches for `url`: a network URL as it is; for a `file://` repository,
/// the `file://` URL of its path with every link resolved, refused when that path is inside the
/// node host's root (its session workspaces and source caches), whatever host or spelling the
/// URL had, or when it does not resolve. git is then given the resolved path, so a link swapped
/// after this check (to point into the root) is never followed.
///
/// # Errors
/// `SOURCE_UNAVAILABLE` for a path inside the root or one that does not resolve.
pub(crate) fn resolve_file_source(
    root: &Path,
    url: &RepositoryUrl,
) -> Result<RepositoryUrl, WireError> {
    let Some(path) = url.file_path() else {
        return Ok(url.clone());
    };
    let own_state = || {
        WireError::new(
            ErrorCode::SourceUnavailable,
            "the repository is inside the node host's own state (its sessions and caches); name a repository outside it",
        )
    };
    let root = std::fs::canonicalize(root).map_err(|_| own_state())?;
    let resolved = match std::fs::canonicalize(&path) {
        Ok(resolved) => resolved,
        // A path under the root is refused as such, even when it does not exist (yet).
        Err(_) if path.starts_with(&root) => return Err(own_state()),
        Err(_) => {
            return Err(WireError::new(
                ErrorCode::SourceUnavailable,
                "the session's repository cannot be fetched: its path does not exist on the node host",
            ));
        }
    };
    if resolved.starts_with(&root) {
        return Err(own_state());
    }
    RepositoryUrl::from_file_path(&resolved).map_err(|refusal| {
        WireError::new(
            ErrorCode::SourceUnavailable,
            format!("the session's repository cannot be fetched: its resolved path is refused: {refusal}"),
        )
    })
}

/// How git reaches a repository: the URL it is given and the settings that pin its connection
/// to the addresses that were checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Remote {
    /// The canonical URL git fetches.
    url: String,
    /// The URL's user name (`user` in `ssh://user@host/`), taken out of git's messages.
    user: Option<String>,
    /// `-c NAME=VALUE` settings of every fetch: for `https`, no redirects (which would lead to
    /// an unchecked host) and, for a host name, `http.curloptResolve=NAME:PORT:ADDRESSES`; for
    /// `ssh` with a host name, `ssh.variant=ssh`.
    config: Vec<String>,
    /// The environment of every fetch: for `ssh` with a host name, `GIT_SSH_COMMAND=ssh -o
    /// HostName=ADDRESS -o HostKeyAlias=NAME` (`[NAME]:PORT` on another port than 22, as
    /// `known_hosts` names it), which replaces any `core.sshCommand` or `GIT_SSH_COMMAND` of
    /// the node host's; its ssh settings belong in `~/.ssh/config`, whose `Host NAME` entries
    /// still apply.
    env: Vec<(&'static str, String)>,
}

impl Remote {
    /// Returns how git reaches `url` through `addresses`, the checked addresses of its host
    /// (none for `file://`).
    pub(crate) fn pinned(url: &RepositoryUrl, addresses: &[std::net::IpAddr]) -> Remote {
        let mut remote = Remote {
            url: url.as_str().to_owned(),
            user: url.user().map(str::to_owned),
            config: Vec::new(),
            env: Vec::new(),
        };
        let (Some(Host::Name(name)), Some(port)) = (url.host(), url.port_or_default()) else {
            if url.scheme() == Scheme::Https {
                remote
                    .config
                    .push(String::from("http.followRedirects=false"));
            }
            return remote;
        };
        match url.scheme() {
            Scheme::File => {}
            Scheme::Https => {
                let addresses = addresses
                    .iter()
                    .map(|address| match address {
                        std::net::IpAddr::V4(address) => address.to_string(),
                        std::net::IpAddr::V6(address) => format!("[{address}]"),
                    })
                    .collect::<Vec<_>>()
                    .join(",");
                remote.config.extend([
                    String::from("http.followRedirects=false"),
                    format!("http.curloptResolve={name}:{port}:{addresses}"),
                ]);
            }
            Scheme::Ssh => {
                if let Some(address) = addresses.first() {
                    let alias = match port {
                        22 => name.clone(),
                        port => format!("[{name}]:{port}"),
                    };
                    remote.config.push(String::from("ssh.variant=ssh"));
                    remote.env.push((
                        "GIT_SSH_COMMAND",
                        // git runs the command through the shell: the alias is quoted, so
                        // `[NAME]:PORT` is never read as a glob (a name holds only letters,
                        // digits, `.`, `_` and `-`, never a quote).
                        format!("ssh -o HostName={address} -o 'HostKeyAlias={alias}'"),
                    ));
                }
            }
        }
        remote
    }
}

/// Resolves the host of a network repository and judges each address with `allow`; returns
/// the addresses git may connect to (none for `file://`).
///
/// # Errors
/// `SOURCE_UNAVAILABLE` for a host name that does not resolve, and for a refused address (the
/// message names its class, never the address).
pub(crate) async fn checked_addresses(
    url: &RepositoryUrl,
    allow: &SourceAllowList,
) -> Result<Vec<std::net::IpAddr>, WireError> {
    let (Some(host), Some(port)) = (url.host(), url.port_or_default()) else {
        return Ok(Vec::new());
    };
    let addresses = match host {
        Host::Ip(address) => vec![*address],
        Host::Name(name) => {
            let resolved = tokio::net::lookup_host((name.as_str(), port)).await;
            let mut addresses = Vec::new();
            match resolved {
                Ok(resolved) => {
                    for address in resolved.map(|address| address.ip()) {
                        if !addresses.contains(&address) {
                            addresses.push(address);
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(host = %name, %error, "the host of a session's repository does not resolve");
                }
            }
            if addresses.is_empty() {
                return Err(WireError::new(
                    ErrorCode::SourceUnavailable,
                    "the session's repository cannot be fetched: its host name does not resolve",
                ));
            }
            addresses
        }
    };
    for address in &addresses {
        if let Err(refused) = allow.check(host, *address) {
            tracing::warn!(%host, %address, class = %refused.class, "refused the address of a session's repository");
            return Err(WireError::new(
                ErrorCode::SourceUnavailable,
                refused.to_string(),
            ));
        }
    }
    Ok(addresses)
}

/// Fetches the requested commit into the session's cache and writes its tree into the
/// session's missing workspace; the caller has checked the request and stopped the session's
/// worker. `allow` is the node host's `source-allow-hosts`.
///
/// # Errors
/// As the module says.
pub(crate) async fn fetch_into_session(
    root: &Path,
    session_key: &str,
    request: &SourceRequest,
    overlay: Option<SourceOverlay>,
    allow: &SourceAllowList,
) -> Result<AgentSessionSourceResult, WireError> {
    let id = crate::worker::session_dir_name(session_key);
    let url = resolve_file_source(root, &request.url)?;
    if let Some(overlay) = &overlay {
        validate_manifest(&overlay.entries)
            .and_then(|()| validate_omitted(&overlay.omitted))
            .map_err(|error| error.to_wire())?;
    }
    // Refused before anything is fetched; the writer checks again when it creates it.
    let session_dir =
        crate::worker::open_session_dir(root, &id).map_err(|error| error.to_wire())?;
    if session_dir
        .kind(crate::worker::SESSION_WORKSPACE)
        .map_err(|error| error.to_wire())?
        .is_some()
    {
        return Err(crate::worker::workspace_exists());
    }
    let fetched = async {
        let addresses = checked_addresses(&url, allow).await?;
        let git = Git {
            git_dir: open_cache(root, &id).await?,
            remote: Remote::pinned(&url, &addresses),
        };
        let commit = fetch(&git, request).await?;
        Ok::<_, WireError>((git, commit))
    };
    let (git, commit) = match tokio::time::timeout(FETCH_TIMEOUT, fetched).await {
        Ok(fetched) => fetched?,
        Err(_) => {
            return Err(WireError::new(
                ErrorCode::SourceUnavailable,
                format!(
                    "the session's repository cannot be fetched: the fetch took longer than {} s",
                    FETCH_TIMEOUT.as_secs()
                ),
            ));
        }
    };
    let bounds = match request.report {
        true => Bounds::REPORTED,
        false => Bounds::WRITTEN,
    };
    let mut listing = list_tree(&git, &commit, bounds).await?;
    let overlay_entries = match overlay {
        Some(overlay) => {
            // The commit gives only what the checkpoint left out; the checkpoint the rest.
            let kept = KeptFromEarlier::new(
                overlay.entries.iter().map(|entry| entry.path.as_str()),
                &overlay.omitted,
            );
            listing.retain(|listed| kept.keeps(&listed.path));
            tracing::info!(
                session_key,
                checkpoint_id = %overlay.checkpoint_id,
                from_commit = listing.len(),
                from_checkpoint = overlay.entries.len(),
                "laying a checkpoint over the pinned commit"
            );
            overlay.entries
        }
        None => Vec::new(),
    };
    let (written, entries) =
        materialize(&git, session_dir, listing, overlay_entries, request.report).await?;
    tracing::info!(
        session_key,
        commit,
        written,
        "wrote a session workspace from its repository"
    );
    Ok(AgentSessionSourceResult {
        commit,
        written: u64::try_from(written).unwrap_or(u64::MAX),
        entries,
    })
}

/// Creates, when missing, the session's cache `<root>/sources/<id>` (a bare repository,
/// without template) in `<root>/sources` (mode 0700, set on its handle even when it existed);
/// returns its path.
async fn open_cache(root: &Path, id: &str) -> Result<PathBuf, WireError> {
    let sources = Dir::open(root)
        .and_then(|root| root.ensure_dir(SOURCES_DIR, crate::worker::PRIVATE_DIR_MODE))
        .map_err(|error| error.to_wire())?;
    sources
        .set_mode(crate::worker::PRIVATE_DIR_MODE)
        .map_err(|error| error.to_wire())?;
    let git_dir = root.join(SOURCES_DIR).join(id);
    match sources.kind(id).map_err(|error| error.to_wire())? {
        Some(gatehouse_fsops::root::Kind::Directory) => return Ok(git_dir),
        Some(_) => {
            return Err(WireError::new(
                ErrorCode::Internal,
                "the session's source cache is not a directory",
            ));
        }
        None => {}
    }
    let mut command = git_command(root);
    command
        .args(["init", "--quiet", "--bare", "--template=", "--"])
        .arg(&git_dir);
    run(command, None)
        .await
        .map_err(|failure| failure.internal("the node host cannot create the source cache"))?;
    Ok(git_dir)
}

/// Fetches what `request` names into the cache and returns its commit, which the cache then
/// keeps under [`CACHE_REF`].
async fn fetch(git: &Git, request: &SourceRequest) -> Result<String, WireError> {
    let commit = match &request.commit {
        Some(commit) => fetch_commit(git, commit).await?,
        None => fetch_ref(git, &request.reference).await?,
    };
    git.run(["update-ref", CACHE_REF, commit.as_str()])
        .await
        .map_err(|failure| failure.internal("the node host cannot keep the fetched commit"))?;
    Ok(commit)
}

/// Makes sure the cache has `commit`: from the cache, by id, or from every branch and tag
/// when the server refuses to send an object by id.
async fn fetch_commit(git: &Git, commit: &str) -> Result<String, WireError> {
    if git.has_commit(commit).await? {
        return Ok(commit.to_owned());
    }
    if let Err(failure) = git.fetch(&["--depth=1"], &[commit]).await {
        tracing::info!(
            stderr = %failure.detail(),
            "the repository does not send a commit by id; fetching its branches and tags"
        );
        let shallow = git
            .run(["rev-parse", "--is-shallow-repository"])
            .await
            .map_err(|failure| failure.internal("the node host cannot read the source cache"))?;
        // A shallow cache would stop the history at what it has, short of older commits.
        let options: &[&str] = match shallow.trim_ascii() == b"true" {
            true => &["--unshallow"],
            false => &[],
        };
        git.fetch(
            options,
            &[
                "+refs/heads/*:refs/gatehouse/heads/*",
                "+refs/tags/*:refs/gatehouse/tags/*",
            ],
        )
        .await
        .map_err(|failure| fetch_failed(&failure))?;
    }
    match git.has_commit(commit).await? {
        true => Ok(commit.to_owned()),
        false => Err(WireError::new(
            ErrorCode::SourceUnavailable,
            format!("the commit {commit} is not in the session's repository"),
        )),
    }
}

/// Fetches `reference` and returns the commit it resolves to.
async fn fetch_ref(git: &Git, reference: &str) -> Result<String, WireError> {
    let unresolved = || {
        WireError::new(
            ErrorCode::SourceUnavailable,
            format!("the ref {reference} does not resolve to a commit"),
        )
    };
    if let Err(failure) = git.fetch(&["--depth=1"], &[reference]).await {
        return match &failure {
            GitFailure::Exited { stderr } if stderr.contains("couldn't find remote ref") => {
                Err(unresolved())
            }
            _ => Err(fetch_failed(&failure)),
        };
    }
    let resolved = git
        .run([
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            "FETCH_HEAD^{commit}",
        ])
        .await
        .map_err(|_| unresolved())?;
    let commit = String::from_utf8_lossy(resolved.trim_ascii()).into_owned();
    match is_commit_id(&commit) {
        true => Ok(commit),
        false => Err(unresolved()),
    }
}

/// The bounds of one source.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    entries: usize,
    bytes: u64,
    /// What the bounds are, for messages.
    name: &'static str,
}

impl Bounds {
    /// The bounds of a source with `report`: those of a checkpoint manifest.
    const REPORTED: Bounds = Bounds {
        entries: MAX_CHECKPOINT_ENTRIES,
        bytes: MAX_CHECKPOINT_BYTES,
        name: "a reported source (a checkpoint manifest's bound)",
    };

    /// The bounds of a source without `report`.
    const WRITTEN: Bounds = Bounds {
        entries: MAX_SOURCE_ENTRIES,
        bytes: MAX_SOURCE_BYTES,
        name: "a source",
    };
}

/// One entry of the commit's tree that is written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    path: String,
    /// The blob's id.
    object: String,
    /// The blob's size.
    size: u64,
    kind: ListedKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListedKind {
    File { executable: bool },
    Symlink,
}

/// Lists the entries of `commit` that are written, sorted by path, within `bounds`.
///
/// # Errors
/// `SOURCE_UNAVAILABLE` past the bounds, or for a tree that names a path twice or an entry
/// below a file or link; `INTERNAL` when git fails.
async fn list_tree(git: &Git, commit: &str, bounds: Bounds) -> Result<Vec<Listed>, WireError> {
    let mut command = git.command();
    command.args(["ls-tree", "-r", "-z", "-l", "--full-tree", commit]);
    let mut child = spawn(command).map_err(|failure| failure.internal(LIST_FAILED))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(WireError::new(ErrorCode::Internal, "git has no pipes"));
    };
    let stderr = tokio::spawn(read_tail(stderr));
    let mut stdout = tokio::io::BufReader::new(stdout);
    let mut listing = Vec::new();
    let mut total: u64 = 0;
    let mut record = Vec::new();
    loop {
        record.clear();
        let n_read = (&mut stdout)
            .take(MAX_GIT_RECORD_BYTES)
            .read_until(0, &mut record)
            .await
            .map_err(|error| WireError::new(ErrorCode::Internal, error.to_string()))?;
        if n_read == 0 {
            break;
        }
        if record.pop() != Some(0) {
            return Err(WireError::new(
                ErrorCode::SourceUnavailable,
                "the commit's tree has a path longer than the node host reads",
            ));
        }
        let Some(listed) = parse_tree_record(&record) else {
            continue;
        };
        if let ListedKind::File { .. } = listed.kind {
            total = total.saturating_add(listed.size);
        }
        listing.push(listed);
        if listing.len() > bounds.entries {
            return Err(WireError::new(
                ErrorCode::SourceUnavailable,
                format!(
                    "the commit has more than {} entries, the most {} holds",
                    bounds.entries, bounds.name
                ),
            ));
        }
        if total > bounds.bytes {
            return Err(WireError::new(
                ErrorCode::SourceUnavailable,
                format!(
                    "the commit has more than {} bytes of file content, the most {} holds",
                    bounds.bytes, bounds.name
                ),
            ));
        }
    }
    let status = child
        .wait()
        .await
        .map_err(|error| WireError::new(ErrorCode::Internal, error.to_string()))?;
    if !status.success() {
        let stderr = stderr.await.unwrap_or_default();
        return Err(GitFailure::Exited {
            stderr: git.redact(&stderr),
        }
        .internal(LIST_FAILED));
    }
    listing.sort_unstable_by(|left, right| left.path.cmp(&right.path));
    check_structure(&listing)?;
    Ok(listing)
}

/// The start of the message of a tree that cannot be listed.
const LIST_FAILED: &str = "the node host cannot list the commit's tree";

/// Parses one record of `git ls-tree -l` (`<mode> <type> <object> <size>\t<path>`); returns
/// `None`, after logging why, for an entry that is left out.
fn parse_tree_record(record: &[u8]) -> Option<Listed> {
    let tab = record.iter().position(|byte| *byte == b'\t')?;
    let (header, path) = (&record[..tab], &record[tab + 1..]);
    let Ok(path) = std::str::from_utf8(path) else {
        tracing::info!(
            path = %String::from_utf8_lossy(path),
            "left an entry with a path that is not UTF-8 out of the session workspace"
        );
        return None;
    };
    let reported_path = truncated(path, MAX_REPORTED_PATH_BYTES);
    let header = std::str::from_utf8(header).ok()?;
    let mut fields = header.split_ascii_whitespace();
    let (Some(mode), Some(_), Some(object), Some(size)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return None;
    };
    let kind = match mode {
        "100644" => ListedKind::File { executable: false },
        "100755" => ListedKind::File { executable: true },
        "120000" => ListedKind::Symlink,
        _ => {
            tracing::info!(
                path = reported_path,
                mode,
                "left a submodule or special entry out of the session workspace"
            );
            return None;
        }
    };
    if gatehouse_agent::checkpoint::is_excluded(path) {
        tracing::info!(
            path = reported_path,
            "left an excluded path out of the session workspace"
        );
        return None;
    }
    let size = size.parse::<u64>().ok()?;
    if kind == ListedKind::Symlink && size > MAX_CHECKPOINT_LINK_TARGET_BYTES as u64 {
        tracing::info!(
            path = reported_path,
            "left a link with an over-long target out of the session workspace"
        );
        return None;
    }
    // The content is checked when it is read; the placeholders only stand for it here.
    let placeholder = match kind {
        ListedKind::File { executable } => CheckpointEntry {
            path: path.to_owned(),
            kind: String::from(KIND_FILE),
            executable,
            sha256: Some("0".repeat(64)),
            size,
            target: None,
            content: Inline::default(),
        },
        ListedKind::Symlink => link_entry(path.to_owned(), String::from("-")),
    };
    if let Err(violation) = validate_entry(&placeholder) {
        tracing::info!(
            path = reported_path,
            reason = violation.reason(),
            "left an entry a checkpoint refuses out of the session workspace"
        );
        return None;
    }
    Some(Listed {
        path: placeholder.path,
        object: object.to_owned(),
        size,
        kind,
    })
}

/// Refuses a listing (sorted by path) that names a path twice or has an entry below another:
/// every ancestor of an entry is created as a directory.
fn check_structure(listing: &[Listed]) -> Result<(), WireError> {
    let refuse = |path: &str, why: &str| {
        Err(WireError::new(
            ErrorCode::SourceUnavailable,
            format!(
                "the commit's tree cannot be written: {:?} {why}",
                truncated(path, MAX_REPORTED_PATH_BYTES)
            ),
        ))
    };
    let mut kinds = HashMap::with_capacity(listing.len());
    for listed in listing {
        if kinds.insert(listed.path.as_str(), listed.kind).is_some() {
            return refuse(&listed.path, "is named twice");
        }
    }
    for listed in listing {
        let ancestors = listed
            .path
            .match_indices('/')
            .map(|(end, _)| &listed.path[..end]);
        for ancestor in ancestors {
            match kinds.get(ancestor) {
                None => {}
                Some(ListedKind::Symlink) => return refuse(&listed.path, "is below a link"),
                Some(ListedKind::File { .. }) => return refuse(&listed.path, "is below a file"),
            }
        }
    }
    Ok(())
}

/// Returns the checkpoint entry of a link.
fn link_entry(path: String, target: String) -> CheckpointEntry {
    CheckpointEntry {
        path,
        kind: String::from(KIND_SYMLINK),
        executable: false,
        sha256: None,
        size: 0,
        target: Some(target),
        content: Inline::default(),
    }
}

/// Reads the listed blobs through one `git cat-file --batch` and writes them into the new
/// session workspace; returns how many entries were written and, with `report`, the entries
/// with their contents (sorted by path, checked with [`validate_manifest`]).
async fn materialize(
    git: &Git,
    session_dir: Dir,
    listing: Vec<Listed>,
    then: Vec<CheckpointEntry>,
    report: bool,
) -> Result<(usize, Vec<CheckpointEntry>), WireError> {
    let mut command = git.command();
    command.args(["cat-file", "--batch"]).stdin(Stdio::piped());
    let mut child = spawn(command).map_err(|failure| failure.internal(READ_FAILED))?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(WireError::new(ErrorCode::Internal, "git has no pipes"));
    };
    let stderr = tokio::spawn(read_tail(stderr));
    // The writer runs on a blocking thread, reading the pipes as plain files; should this
    // future be dropped, the child is killed and the writer's next read ends.
    let to_file = |fd: std::io::Result<std::os::fd::OwnedFd>| {
        fd.map(std::fs::File::from)
            .map_err(|error| WireError::new(ErrorCode::Internal, error.to_string()))
    };
    let batch = Batch {
        requests: to_file(stdin.into_owned_fd())?,
        answers: std::io::BufReader::new(to_file(stdout.into_owned_fd())?),
    };
    let written = tokio::task::spawn_blocking(move || {
        write_listing(&session_dir, batch, listing, &then, report)
    })
    .await
    .map_err(|error| WireError::new(ErrorCode::Internal, error.to_string()))?;
    let status = child.wait().await;
    let (n_written, entries) = match written {
        Ok(written) => written,
        Err(error) => {
            let stderr = stderr.await.unwrap_or_default();
            if !stderr.is_empty() {
                tracing::warn!(stderr = %git.redact(&stderr), "git cat-file failed");
            }
            return Err(error);
        }
    };
    if !status.is_ok_and(|status| status.success()) {
        let stderr = stderr.await.unwrap_or_default();
        return Err(GitFailure::Exited {
            stderr: git.redact(&stderr),
        }
        .internal(READ_FAILED));
    }
    if report {
        validate_manifest(&entries).map_err(|error| {
            WireError::new(
                ErrorCode::SourceUnavailable,
                format!("the commit's tree is no valid manifest: {error}"),
            )
        })?;
    }
    Ok((n_written, entries))
}

/// The start of the message of contents that cannot be read.
const READ_FAILED: &str = "the node host cannot read the commit's contents";

/// The pipes of a `git cat-file --batch`, as blocking files.
struct Batch {
    requests: std::fs::File,
    answers: std::io::BufReader<std::fs::File>,
}

impl Batch {
    /// Returns the content of the blob `listed` names, which must have the listed size.
    fn read(&mut self, listed: &Listed) -> Result<Vec<u8>, WireError> {
        let failed =
            |why: String| WireError::new(ErrorCode::Internal, format!("{READ_FAILED}: {why}"));
        writeln!(self.requests, "{}", listed.object)
            .and_then(|()| self.requests.flush())
            .map_err(|error| failed(error.to_string()))?;
        let mut header = Vec::new();
        (&mut self.answers)
            .take(MAX_GIT_RECORD_BYTES)
            .read_until(b'\n', &mut header)
            .map_err(|error| failed(error.to_string()))?;
        let header = String::from_utf8_lossy(&header);
        let mut fields = header.split_ascii_whitespace();
        let expected = (Some(listed.object.as_str()), Some("blob"));
        let size = match (fields.next(), fields.next(), fields.next()) {
            (object, kind, Some(size)) if (object, kind) == expected => size.parse::<u64>().ok(),
            _ => None,
        };
        if size != Some(listed.size) {
            return Err(failed(format!(
                "git answered {:?} for a blob of {} bytes",
                header.trim_end(),
                listed.size
            )));
        }
        let mut content = Vec::new();
        (&mut self.answers)
            .take(listed.size)
            .read_to_end(&mut content)
            .map_err(|error| failed(error.to_string()))?;
        let mut newline = [0_u8; 1];
        self.answers
            .read_exact(&mut newline)
            .map_err(|error| failed(error.to_string()))?;
        if content.len() as u64 != listed.size || newline != *b"\n" {
            return Err(failed(String::from("git ended a blob early")));
        }
        Ok(content)
    }
}

/// Writes `listing` into the new session workspace, reading each blob as it is written.
fn write_listing(
    session_dir: &Dir,
    mut batch: Batch,
    listing: Vec<Listed>,
    then: &[CheckpointEntry],
    report: bool,
) -> Result<(usize, Vec<CheckpointEntry>), WireError> {
    let mut reported = Vec::new();
    let mut listing = listing.into_iter();
    let entries = std::iter::from_fn(|| {
        loop {
            let listed = listing.next()?;
            let content = match batch.read(&listed) {
                Ok(content) => content,
                Err(error) => return Some(Err(error)),
            };
            let entry = match listed.kind {
                ListedKind::File { executable } => {
                    if report {
                        use base64::Engine;
                        reported.push(CheckpointEntry {
                            path: listed.path.clone(),
                            kind: String::from(KIND_FILE),
                            executable,
                            sha256: Some(gatehouse_fsops::commands::sha256_hex(&content)),
                            size: listed.size,
                            target: None,
                            content: Inline {
                                base64: Some(
                                    base64::engine::general_purpose::STANDARD.encode(&content),
                                ),
                            },
                        });
                    }
                    NewEntry {
                        path: listed.path,
                        kind: NewEntryKind::File {
                            content,
                            executable,
                        },
                    }
                }
                ListedKind::Symlink => {
                    let Some(entry) = String::from_utf8(content)
                        .ok()
                        .map(|target| link_entry(listed.path.clone(), target))
                        .filter(|entry| validate_entry(entry).is_ok())
                    else {
                        tracing::info!(
                            path = truncated(&listed.path, MAX_REPORTED_PATH_BYTES),
                            "left a link with an unusable target out of the session workspace"
                        );
                        continue;
                    };
                    let target = entry.target.clone().unwrap_or_default();
                    if report {
                        reported.push(entry);
                    }
                    NewEntry {
                        path: listed.path,
                        kind: NewEntryKind::Symlink { target },
                    }
                }
            };
            return Some(Ok(entry));
        }
    });
    let then = then
        .iter()
        .enumerate()
        .map(|(index, entry)| crate::worker::decode_entry(index, entry));
    let written = crate::worker::write_new_workspace(session_dir, entries.chain(then))?;
    Ok((written, reported))
}

/// The git calls of one session's cache.
struct Git {
    /// The bare repository of the cache.
    git_dir: PathBuf,
    /// The repository, as git reaches it.
    remote: Remote,
}

impl Git {
    /// Returns a git command on the cache, with the fixed configuration and environment.
    fn command(&self) -> tokio::process::Command {
        let mut command = git_command(&self.git_dir);
        let mut git_dir = OsString::from("--git-dir=");
        git_dir.push(&self.git_dir);
        command.arg(git_dir);
        command
    }

    /// Runs git on the cache with `args`; returns its stdout.
    async fn run<I, S>(&self, args: I) -> Result<Vec<u8>, GitFailure>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = self.command();
        command.args(args);
        run(command, self.remote.user.as_deref()).await
    }

    /// Returns whether the cache holds `commit` as a commit.
    async fn has_commit(&self, commit: &str) -> Result<bool, WireError> {
        match self
            .run(["cat-file", "-e", &format!("{commit}^{{commit}}")])
            .await
        {
            Ok(_) => Ok(true),
            Err(GitFailure::Exited { .. }) => Ok(false),
            Err(failure) => Err(failure.internal("the node host cannot read the source cache")),
        }
    }

    /// Fetches `refspecs` from the remote into the cache, without tags beyond the refspecs,
    /// with the remote's pinning settings.
    async fn fetch(&self, options: &[&str], refspecs: &[&str]) -> Result<(), GitFailure> {
        let mut command = self.command();
        for setting in &self.remote.config {
            command.args(["-c", setting]);
        }
        if !self.remote.env.is_empty() {
            command.env_remove("GIT_SSH");
        }
        command.envs(self.remote.env.iter().map(|(name, value)| (name, value)));
        command
            .args(["fetch", "--quiet", "--no-tags", "--no-recurse-submodules"])
            .args(options)
            .arg("--")
            .arg(&self.remote.url)
            .args(refspecs);
        run(command, self.remote.user.as_deref()).await.map(|_| ())
    }

    /// Returns `text` without the URL's user name.
    fn redact(&self, text: &[u8]) -> String {
        redact(text, self.remote.user.as_deref())
    }
}

/// Returns a git command with the fixed configuration and environment, run in `dir` (never
/// the node host's working directory), with no stdin and piped output, killed when dropped.
fn git_command(dir: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("git");
    command
        .args(GIT_CONFIG)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ALLOW_PROTOCOL", "file:https:ssh")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for name in GIT_REPOSITORY_ENV {
        command.env_remove(name);
    }
    command
}

/// Why a git call failed.
#[derive(Debug)]
enum GitFailure {
    /// git could not be started (it is not on `PATH`).
    Spawn(std::io::Error),
    /// git exited unsuccessfully; the tail of its stderr, redacted.
    Exited { stderr: String },
    /// git wrote more than expected on stdout.
    TooMuchOutput,
    /// The pipes failed.
    Io(std::io::Error),
}

impl GitFailure {
    /// Returns what went wrong, for a message.
    fn detail(&self) -> String {
        match self {
            GitFailure::Spawn(error) => format!("git cannot be run: {error}"),
            GitFailure::Exited { stderr } => match stderr.trim() {
                "" => String::from("git failed"),
                stderr => stderr.to_owned(),
            },
            GitFailure::TooMuchOutput => String::from("git wrote more than expected"),
            GitFailure::Io(error) => error.to_string(),
        }
    }

    /// Returns the error of a call on the cache that failed: `SOURCE_UNAVAILABLE` when git
    /// cannot be run on the node host, else `INTERNAL`; the message is `context` and the detail.
    fn internal(&self, context: &str) -> WireError {
        let code = match self {
            GitFailure::Spawn(_) => ErrorCode::SourceUnavailable,
            GitFailure::Exited { .. } | GitFailure::TooMuchOutput | GitFailure::Io(_) => {
                ErrorCode::Internal
            }
        };
        WireError::new(code, format!("{context}: {}", self.detail()))
    }
}

/// Logs why a fetch failed, git's stderr included, and returns its error for the caller:
/// `SOURCE_UNAVAILABLE`, "the session's repository cannot be fetched" and what failed, without
/// git's message (which tells what answers at an address).
fn fetch_failed(failure: &GitFailure) -> WireError {
    tracing::warn!(detail = %failure.detail(), "git cannot fetch a session's repository");
    let what = match failure {
        GitFailure::Spawn(_) => "git cannot be run on the node host",
        GitFailure::Exited { .. } | GitFailure::TooMuchOutput | GitFailure::Io(_) => {
            "git failed (the node host's log has its message)"
        }
    };
    WireError::new(
        ErrorCode::SourceUnavailable,
        format!("the session's repository cannot be fetched: {what}"),
    )
}

/// Starts `command`.
fn spawn(mut command: tokio::process::Command) -> Result<tokio::process::Child, GitFailure> {
    command.spawn().map_err(GitFailure::Spawn)
}

/// Runs `command` to its end; returns its stdout (at most [`MAX_GIT_STDOUT_BYTES`]).
async fn run(command: tokio::process::Command, user: Option<&str>) -> Result<Vec<u8>, GitFailure> {
    let mut child = spawn(command)?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(GitFailure::Io(std::io::Error::other("git has no pipes")));
    };
    // An over-long stdout ends both reads at once; the child is then killed when dropped.
    let (stdout, stderr) =
        tokio::try_join!(read_bounded(stdout), async { Ok(read_tail(stderr).await) })?;
    let status = child.wait().await.map_err(GitFailure::Io)?;
    match status.success() {
        true => Ok(stdout),
        false => Err(GitFailure::Exited {
            stderr: redact(&stderr, user),
        }),
    }
}

/// Reads `reader` to its end, at most [`MAX_GIT_STDOUT_BYTES`].
async fn read_bounded(reader: impl AsyncRead + Unpin) -> Result<Vec<u8>, GitFailure> {
    let mut output = Vec::new();
    let limit = MAX_GIT_STDOUT_BYTES as u64 + 1;
    reader
        .take(limit)
        .read_to_end(&mut output)
        .await
        .map_err(GitFailure::Io)?;
    match output.len() > MAX_GIT_STDOUT_BYTES {
        true => Err(GitFailure::TooMuchOutput),
        false => Ok(output),
    }
}

/// Reads `reader` to its end, keeping the last [`MAX_GIT_STDERR_BYTES`].
async fn read_tail(mut reader: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut tail = Vec::new();
    let mut buffer = [0_u8; 4096];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => return tail,
            Ok(n_read) => {
                tail.extend_from_slice(&buffer[..n_read]);
                if tail.len() > MAX_GIT_STDERR_BYTES {
                    tail.drain(..tail.len() - MAX_GIT_STDERR_BYTES);
                }
            }
        }
    }
}

/// Returns `text` as (lossy) UTF-8 without `user@`, the URL's user name.
fn redact(text: &[u8], user: Option<&str>) -> String {
    let text = String::from_utf8_lossy(text);
    match user {
        Some(user) => text.replace(&format!("{user}@"), ""),
        None => text.into_owned(),
    }
}

#[cfg(test)]
#[path = "source_tests.rs"]
mod tests;
