//! Gateway replicas: several `gatehouse gateway` processes on one store form one Gateway.
//!
//! They find each other only through the store ([`gatehouse_store::cluster`]):
//! - **A lease per replica** ([`Replica`]): taken at start under a new epoch and renewed every
//!   fifth of [`ReplicaConfig::lease`]. A replica whose lease lapsed (it stalled, or lost its
//!   store) cancels its running turns, closes its node links and takes a new lease; its old
//!   lease never writes again. Releasing the lease at shutdown hands its sessions over at once.
//! - **Node links in the store** (`links`): each replica mirrors the links it holds, so any
//!   replica knows where a node is.
//! - **Dispatch** (`dispatch`): a session's turns run on the replica holding its node's link;
//!   that replica claims them under its lease, which fences every write of the turn.
//! - **The sweep** (`sweep`), every [`SWEEP_INTERVAL`]: marks `interrupted` the running turns
//!   of leases that lapsed (never replayed), and starts the sessions this replica may dispatch.
//! - **Announcements** (`announce`, PostgreSQL `LISTEN`/`NOTIFY`): durable events are announced
//!   by the store, so event streams on every replica follow every session; deltas are sent by
//!   the replica that streams them, bounded, and best effort (a missed delta is never a missed
//!   durable event).
//! - **Forwarding** (`peers`): a request that needs a node this replica does not hold (a
//!   document, a workspace read, a memory file's lines, the workspace's skills, an abort) is
//!   carried to the replica holding it by an HTTP call to its `/internal/replica/...` routes,
//!   authenticated by the replica key every replica reads from the store. HTTP, not the
//!   notification channel: a workspace file is up to 16 MiB and a notification at most 8000
//!   bytes, and a call has an answer and a status.
//!
//! On SQLite there is one replica (the store file is locked); the lease (of [`SQLITE_LEASE`],
//! since nothing else can take it over), the fences and the sweep still run, so both stores
//! keep one contract.

pub(crate) mod announce;
pub(crate) mod dispatch;
pub(crate) mod links;
pub(crate) mod peers;
pub(crate) mod sweep;
pub(crate) mod wire;

use std::sync::Arc;
use std::time::Duration;

use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::Store;
use gatehouse_store::StoreError;
use gatehouse_store::cluster::Acquired;
use gatehouse_store::cluster::Fence;
use gatehouse_store::cluster::ReplicaLease;
use gatehouse_store::cluster::ReplicaRecord;
use parking_lot::RwLock;
use tokio::sync::Notify;

/// How long a replica's lease lasts without renewal: how long the others wait before taking
/// over the turns of a replica that died or stalled.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(5);

/// The lease of the one replica of a SQLite store, whose file lock already keeps every other
/// process out: ten years, so it never lapses while the process lives.
pub(crate) const SQLITE_LEASE: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The shortest lease accepted.
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// How often each replica sweeps: takes over lapsed leases' turns and starts the sessions it
/// may dispatch.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The name of the shared secret that authenticates replica-to-replica calls.
pub(crate) const REPLICA_KEY: &str = "replica-key";

/// How a replica identifies itself to the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// The replica's id; `None` derives one from the host name and the listen address
    /// ([`default_replica_id`]).
    pub replica_id: Option<String>,
    /// The URL other replicas reach this one at; `None` derives it from the listen address
    /// (`http://ADDR`, with the host name for an unspecified address).
    pub advertise_url: Option<String>,
    /// How long the lease lasts without renewal ([`DEFAULT_LEASE`]).
    pub lease: Duration,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        Self {
            replica_id: None,
            advertise_url: None,
            lease: DEFAULT_LEASE,
        }
    }
}

/// Returns the host name, or `localhost` when it cannot be read.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| String::from("localhost"))
}

/// Returns the default replica id: the host name and the listen address, `HOST-IP-PORT` with
/// every character outside letters, digits, `.` and `-` as `-`, so a restarted process on the
/// same host and address is the same replica.
pub fn default_replica_id(listen: std::net::SocketAddr) -> String {
    let id = format!("{}-{}-{}", host_name(), listen.ip(), listen.port());
    id.chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                true => c,
                false => '-',
            },
        )
        .collect()
}

/// Returns the URL other replicas reach a replica listening on `listen` at.
pub(crate) fn default_advertise_url(listen: std::net::SocketAddr) -> String {
    match listen.ip().is_unspecified() {
        true => format!("http://{}:{}", host_name(), listen.port()),
        false => format!("http://{listen}"),
    }
}

/// Returns why `id` is not a valid replica id: 1 to 128 letters, digits, `.`, `_` and `-`.
pub fn check_replica_id(id: &str) -> Result<(), String> {
    let valid = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    match valid {
        true => Ok(()),
        false => Err(format!(
            "the replica id {id:?} must be 1 to 128 letters, digits, '.', '_' or '-'"
        )),
    }
}

/// Returns why `url` cannot be where other replicas reach this one: it must be an `http` or
/// `https` URL with a host and without credentials.
pub fn check_advertise_url(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|error| format!("advertise-url {url:?}: {error}"))?;
    let fine = matches!(parsed.scheme(), "http" | "https")
        && parsed.host_str().is_some()
        && parsed.username().is_empty()
        && parsed.password().is_none()
        && matches!(parsed.path(), "" | "/")
        && parsed.query().is_none()
        && parsed.fragment().is_none();
    match fine {
        true => Ok(()),
        false => Err(format!(
            "advertise-url {url:?} must be http://HOST:PORT or https://HOST:PORT, without credentials, path, query or fragment"
        )),
    }
}

/// This process's replica: its id, its current lease and what it knows of the others.
pub(crate) struct Replica {
    store: Arc<dyn Store>,
    id: String,
    url: String,
    lease: Duration,
    current: RwLock<Option<ReplicaLease>>,
    /// Until when the current lease is known to hold, on this process's monotonic clock: the
    /// moment its last successful renewal was sent, plus the lease. Past it the replica acts as
    /// if the lease lapsed, even while the store cannot say (a partition from the database).
    confirmed_until: parking_lot::Mutex<tokio::time::Instant>,
    /// Every replica with a live lease, as the last sweep read them.
    replicas: RwLock<Vec<ReplicaRecord>>,
    /// Wakes the sweep before its interval (a node linked, a lease taken).
    sweep_now: Notify,
}

/// Why a replica could not take its lease.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another live process holds this replica id.
    #[error(
        "{code}: a live gateway replica holds the replica id {id} on this store (its lease expires \
         in {remaining_ms} ms); give this replica another --replica-id, or stop the other one",
        code = ErrorCode::ReplicaIdInUse.as_str()
    )]
    InUse {
        /// The id.
        id: String,
        /// How long the other lease still runs.
        remaining_ms: i64,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Replica {
    /// Takes the lease of `id` (reached at `url`) for `lease`, retrying for `wait` while a live
    /// lease of that id is held (this replica's previous run, until it expires).
    pub(crate) async fn acquire(
        store: Arc<dyn Store>,
        id: String,
        url: String,
        lease: Duration,
        wait: Duration,
    ) -> Result<Arc<Self>, LeaseError> {
        let deadline = tokio::time::Instant::now() + wait;
        let (taken, asked) = loop {
            let asked = tokio::time::Instant::now();
            match store
                .acquire_replica(&id, Some(&url), duration_ms(lease))
                .await?
            {
                Acquired::Taken(taken) => break (taken, asked),
                Acquired::Held { expires_at_ms } => {
                    let remaining_ms =
                        expires_at_ms.saturating_sub(gatehouse_protocol::time::now_ms());
                    if tokio::time::Instant::now() >= deadline {
                        return Err(LeaseError::InUse { id, remaining_ms });
                    }
                    tracing::warn!(replica_id = %id, remaining_ms, "a live lease holds this replica id; waiting for it to expire");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        tracing::info!(replica_id = %id, epoch = taken.fence.epoch, url = %url, "took the replica lease");
        Ok(Arc::new(Self {
            store,
            id,
            url,
            lease,
            current: RwLock::new(Some(taken)),
            confirmed_until: parking_lot::Mutex::new(asked + lease),
            replicas: RwLock::new(Vec::new()),
            sweep_now: Notify::new(),
        }))
    }

    /// Returns the replica's id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Returns the fence of the current lease; `None` while the replica has none (it lost it
    /// and has not taken a new one yet).
    pub(crate) fn fence(&self) -> Option<Fence> {
        if self.locally_expired() {
            return None;
        }
        self.current
            .read()
            .as_ref()
            .map(|lease| lease.fence.clone())
    }

    /// Returns true once the lease may have lapsed by this process's own clock: no renewal
    /// confirmed it for a whole lease since the renewal was sent (the store's expiry, set when
    /// the renewal arrived, is never earlier).
    fn locally_expired(&self) -> bool {
        tokio::time::Instant::now() >= *self.confirmed_until.lock()
    }

    /// Returns when the current lease was taken, in the store's clock.
    pub(crate) fn acquired_at_ms(&self) -> Option<i64> {
        self.current
            .read()
            .as_ref()
            .map(|lease| lease.acquired_at_ms)
    }

    /// Returns true when another replica's lease was live at the last sweep.
    pub(crate) fn has_peers(&self) -> bool {
        self.replicas
            .read()
            .iter()
            .any(|replica| replica.live && replica.replica_id != self.id)
    }

    /// Returns the URL of the live replica `replica_id`, as the last sweep read it.
    pub(crate) fn peer_url(&self, replica_id: &str) -> Option<String> {
        self.replicas
            .read()
            .iter()
            .find(|replica| replica.live && replica.replica_id == replica_id)
            .and_then(|replica| replica.url.clone())
    }

    /// Asks the sweep to run now.
    pub(crate) fn sweep_soon(&self) {
        self.sweep_now.notify_one();
    }

    /// Renews the lease; returns false when it lapsed (the replica then has no lease until
    /// [`Replica::retake`]).
    ///
    /// # Errors
    /// The store's failure; the lease is kept until it answers.
    async fn renew(&self) -> Result<bool, StoreError> {
        let Some(fence) = self.fence() else {
            return Ok(false);
        };
        let sent = tokio::time::Instant::now();
        match self
            .store
            .renew_replica(&fence, duration_ms(self.lease))
            .await?
        {
            Some(expires_at_ms) => {
                if let Some(lease) = self.current.write().as_mut() {
                    lease.expires_at_ms = expires_at_ms;
                }
                *self.confirmed_until.lock() = sent + self.lease;
                Ok(true)
            }
            None => {
                *self.current.write() = None;
                Ok(false)
            }
        }
    }

    /// Takes a new lease after the last one (`lost`) lapsed, retrying while the store fails,
    /// until it is taken or `stop` is cancelled. A lease this process gave up by its own clock
    /// may still be live in the store: it is ended first, so it is never mistaken for another
    /// process's.
    async fn retake(
        &self,
        mut lost: Option<Fence>,
        stop: &tokio_util::sync::CancellationToken,
    ) -> Retaken {
        loop {
            if let Some(fence) = &lost {
                match self.store.release_replica(fence).await {
                    Ok(()) => lost = None,
                    Err(error) => {
                        tracing::warn!(error = %error, "cannot end the lapsed replica lease; retrying");
                        tokio::select! {
                            () = tokio::time::sleep(self.renew_interval()) => continue,
                            () = stop.cancelled() => return Retaken::Stopped,
                        }
                    }
                }
            }
            let asked = tokio::time::Instant::now();
            match self
                .store
                .acquire_replica(&self.id, Some(&self.url), duration_ms(self.lease))
                .await
            {
                Ok(Acquired::Taken(lease)) => {
                    tracing::warn!(replica_id = %self.id, epoch = lease.fence.epoch, "took a new replica lease");
                    *self.confirmed_until.lock() = asked + self.lease;
                    *self.current.write() = Some(lease);
                    self.sweep_soon();
                    return Retaken::Taken;
                }
                Ok(Acquired::Held { .. }) => return Retaken::IdInUse,
                Err(error) => {
                    tracing::warn!(error = %error, "cannot take a new replica lease; retrying");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(self.renew_interval()) => {}
                () = stop.cancelled() => return Retaken::Stopped,
            }
        }
    }

    /// Returns how often the lease is renewed: a fifth of its length.
    fn renew_interval(&self) -> Duration {
        (self.lease / 5).max(Duration::from_millis(100))
    }

    /// Ends the lease (at shutdown), so the other replicas take this one's nodes and sessions
    /// over at once.
    pub(crate) async fn release(&self) {
        let Some(fence) = self.fence() else {
            return;
        };
        if let Err(error) = self.store.release_replica(&fence).await {
            tracing::warn!(error = %error, "cannot release the replica lease; it expires by itself");
        }
        *self.current.write() = None;
    }
}

/// Returns `duration` in whole milliseconds.
pub(crate) fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// What [`Replica::retake`] ended with.
enum Retaken {
    /// A new lease is held.
    Taken,
    /// Another live process holds this replica id.
    IdInUse,
    /// The replica is stopping.
    Stopped,
}

/// Renews the lease every fifth of its length until `stop`. When it lapsed (the store says
/// so, or no renewal confirmed it for a lease by this process's clock while the store cannot be
/// reached), cancels this replica's running turns (none of them can write any more), closes
/// its node links (the nodes reconnect, here or to another replica) and takes a new lease.
/// When another process took this replica's id meanwhile, stops the Gateway (`shutdown`)
/// rather than serve links it could never record.
pub(crate) async fn keep_lease(
    replica: Arc<Replica>,
    turns: Arc<crate::turns::TurnEngine>,
    registry: Arc<crate::link::registry::NodeRegistry>,
    stop: tokio_util::sync::CancellationToken,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(replica.renew_interval()) => {}
            () = stop.cancelled() => return,
        }
        let lapsed = match replica.renew().await {
            Ok(renewed) => !renewed,
            Err(error) => {
                tracing::warn!(error = %error, "cannot renew the replica lease; retrying");
                replica.locally_expired()
            }
        };
        if !lapsed {
            continue;
        }
        tracing::error!(
            replica_id = %replica.id,
            code = ErrorCode::ReplicaLeaseLost.as_str(),
            "this replica's lease lapsed before it was renewed; stopping its turns and node links"
        );
        let lost = replica.current.write().take().map(|lease| lease.fence);
        turns.cancel_running();
        registry
            .close_all(ErrorCode::ReplicaLeaseLost.as_str())
            .await;
        match replica.retake(lost, &stop).await {
            Retaken::Taken => {
                // Links that reconnected meanwhile are recorded under the new lease.
                for connection in registry.all() {
                    registry.mark_changed(&connection.device_id);
                }
            }
            Retaken::IdInUse => {
                tracing::error!(
                    replica_id = %replica.id,
                    code = ErrorCode::ReplicaIdInUse.as_str(),
                    "another process took this replica's id while its lease had lapsed; stopping"
                );
                shutdown.cancel();
                return;
            }
            Retaken::Stopped => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn a_default_replica_id_is_a_valid_one() {
        for listen in ["127.0.0.1:7420", "0.0.0.0:80", "[::1]:9000"] {
            let id = default_replica_id(listen.parse().unwrap());
            assert_eq!(check_replica_id(&id), Ok(()), "{id}");
            assert!(
                id.ends_with(
                    &listen
                        .parse::<std::net::SocketAddr>()
                        .unwrap()
                        .port()
                        .to_string()
                )
            );
        }
        assert!(check_replica_id("").is_err());
        assert!(check_replica_id("a/b").is_err());
        assert!(check_replica_id(&"x".repeat(129)).is_err());
    }

    #[test]
    fn an_advertise_url_is_http_with_a_host_and_no_credentials() {
        assert_eq!(check_advertise_url("http://10.0.0.7:7420"), Ok(()));
        assert_eq!(check_advertise_url("https://gw-0.gw.svc:7420/"), Ok(()));
        for bad in [
            "ftp://x",
            "http://user:pw@x:1",
            "not a url",
            "unix:/run/x",
            "http://x:1/a",
            "http://x:1/?q=1",
            "http://x:1/#f",
        ] {
            assert!(check_advertise_url(bad).is_err(), "{bad}");
        }
    }
}
