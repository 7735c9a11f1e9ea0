//! Fair shares between API keys: what one key may hold of the Gateway, so that no key can take
//! it from the others.
//!
//! Every key has three shares, each set when the key is created (`maxStreams`,
//! `concurrentTurns`, `mediaQuotaBytes`) or else the Gateway's default ([`ShareConfig`]):
//! - **Streams:** the event streams (`GET /v1/sessions/{key}/events`), long polls
//!   (`GET /v1/turns/{id}?wait=`) and chat completions it holds open at once. Past its share, or
//!   past the Gateway's total, a new one is answered `429 STREAM_SHARE_EXHAUSTED` with
//!   `Retry-After` ([`StreamGate`]). The total is bounded by the process's file descriptors
//!   ([`fd_budget`]): the Gateway raises its soft `RLIMIT_NOFILE` to the hard limit at start and
//!   keeps [`fd_reserve`] descriptors out of the streams' reach, for node links, health checks,
//!   the store and ordinary requests, so a flood of streams is refused by an answer, never by a
//!   failed `accept`.
//! - **Turns:** its turns queued or running at once ([`crate::http::limits`]). The default is half
//!   the worker capacity of the smallest node linked to this replica (at least 1), so one key
//!   never holds every worker slot of a node.
//! - **Media:** the bytes charged to it: its uploads, plus the checkpoints and worktree versions
//!   of the sessions it created (`KEY_MEDIA_QUOTA_EXCEEDED`, 507). The default is a quarter of
//!   the Gateway's media quota.
//!
//! The operator token holds no share of its own; its streams count towards the total. Streams
//! and turns are counted by each replica: behind several replicas a key may hold its share on
//! each one. Media charges live in the store and hold across replicas.

use std::collections::HashMap;
use std::sync::Arc;

use gatehouse_store::records::ApiKeyRecord;
use parking_lot::Mutex;

/// The default share of open streams of one key.
pub const DEFAULT_KEY_MAX_STREAMS: u32 = 64;

/// The default total of open streams of one Gateway process, before [`fd_budget`] bounds it.
pub const DEFAULT_MAX_STREAMS: u32 = 4096;

/// The most streams any key may be given, and the most a Gateway may serve.
pub const MAX_STREAMS_LIMIT: u32 = 1_000_000;

/// The largest worker capacity a node's report is believed for the default turn share: the most
/// `gatehouse node --capacity` takes. A report past it counts as this many.
pub const MAX_REPORTED_CAPACITY: u32 = 1024;

/// The `Retry-After` of a refused stream, in seconds.
pub const STREAM_RETRY_AFTER_SECONDS: u64 = 5;

/// The fewest file descriptors kept out of the streams' reach.
pub const MIN_FD_RESERVE: u64 = 256;

/// The Gateway's shares: the defaults of keys that set none, and the total of streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareConfig {
    /// The streams a key holds at once unless it sets `maxStreams`.
    pub key_max_streams: u32,
    /// The streams this process holds at once, every key and the operator together; bounded at
    /// start by [`fd_budget`].
    pub max_streams: u32,
    /// The turns a key has queued or running unless it sets `concurrentTurns`; `None` is half
    /// the worker capacity of the smallest linked node (at least 1).
    pub key_concurrent_turns: Option<u32>,
    /// The media bytes charged to a key unless it sets `mediaQuotaBytes`; `None` is a quarter of
    /// the Gateway's media quota.
    pub key_media_quota_bytes: Option<u64>,
}

impl Default for ShareConfig {
    fn default() -> Self {
        Self {
            key_max_streams: DEFAULT_KEY_MAX_STREAMS,
            max_streams: DEFAULT_MAX_STREAMS,
            key_concurrent_turns: None,
            key_media_quota_bytes: None,
        }
    }
}

/// Returns the default turn share of a key for `worker_capacity` worker slots on the linked
/// nodes: half of them, at least 1.
pub fn default_turn_share(worker_capacity: u64) -> u32 {
    u32::try_from(worker_capacity / 2)
        .unwrap_or(u32::MAX)
        .max(1)
}

/// Returns the default media share of a key under a Gateway media quota of `quota_bytes`: a
/// quarter of it.
pub fn default_media_share(quota_bytes: u64) -> u64 {
    quota_bytes / 4
}

/// Returns the media share of a key whose own quota is `own`: that, else the configured default,
/// else [`default_media_share`] of the Gateway's media quota `gateway_quota_bytes`.
pub fn key_media_share(own: Option<u64>, config: &ShareConfig, gateway_quota_bytes: u64) -> u64 {
    own.or(config.key_media_quota_bytes)
        .unwrap_or_else(|| default_media_share(gateway_quota_bytes))
}

/// Returns the descriptors kept out of the streams' reach for a limit of `nofile`: a quarter of
/// it, at least [`MIN_FD_RESERVE`].
pub fn fd_reserve(nofile: u64) -> u64 {
    (nofile / 4).max(MIN_FD_RESERVE)
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit, and returns the streams that
/// fit in it: `configured`, at most the limit less [`fd_reserve`] (at least 1). A limit that
/// cannot be read or raised is logged and the current one used.
pub fn fd_budget(configured: u32) -> u32 {
    use rustix::process::Resource;
    let limit = rustix::process::getrlimit(Resource::Nofile);
    let mut soft = limit.current;
    if let Some(hard) = limit.maximum
        && soft.is_none_or(|soft| soft < hard)
    {
        let raised = rustix::process::Rlimit {
            current: Some(hard),
            maximum: Some(hard),
        };
        match rustix::process::setrlimit(Resource::Nofile, raised) {
            Ok(()) => soft = Some(hard),
            Err(error) => {
                tracing::warn!(error = %error, "cannot raise the soft limit of open files to the hard limit");
            }
        }
    }
    let Some(soft) = soft else {
        return configured;
    };
    let fitting = soft.saturating_sub(fd_reserve(soft)).max(1);
    let budget = u32::try_from(fitting).unwrap_or(u32::MAX).min(configured);
    if budget < configured {
        tracing::warn!(
            configured,
            budget,
            open_files_limit = soft,
            "the open-files limit bounds the streams this Gateway serves; raise the hard limit (ulimit -Hn) for more"
        );
    }
    budget
}

/// Counts the open streams of each key and in all, and refuses one past a share.
#[derive(Debug)]
pub(crate) struct StreamGate {
    max_total: u32,
    key_default: u32,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: u32,
    /// By the key's secret hash; a key with no open stream has no entry.
    by_key: HashMap<String, u32>,
}

/// Why a stream was refused; the HTTP layer answers it as `429 STREAM_SHARE_EXHAUSTED` with
/// `Retry-After` ([`STREAM_RETRY_AFTER_SECONDS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StreamRefusal {
    /// The Gateway serves its total of streams, `max_total`, every key and the operator together.
    #[error(
        "this Gateway serves {max_total} event streams and long polls at once; retry in {} s",
        STREAM_RETRY_AFTER_SECONDS
    )]
    GatewayFull {
        /// The Gateway's total.
        max_total: u32,
    },
    /// The key holds its share of streams, `share`.
    #[error(
        "this key may hold {share} event streams and long polls open at once; close one or retry in {} s",
        STREAM_RETRY_AFTER_SECONDS
    )]
    KeyFull {
        /// The key's share.
        share: u32,
    },
}

/// One open stream, counted until it is dropped.
#[derive(Debug)]
pub(crate) struct StreamTicket {
    gate: Arc<StreamGate>,
    key: Option<String>,
}

impl Drop for StreamTicket {
    fn drop(&mut self) {
        let mut counts = self.gate.counts.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(key) = &self.key
            && let Some(count) = counts.by_key.get_mut(key)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.by_key.remove(key);
            }
        }
    }
}

impl StreamGate {
    /// Returns a gate serving at most `max_total` streams, `key_default` per key that sets no
    /// share of its own.
    pub(crate) fn new(max_total: u32, key_default: u32) -> Arc<Self> {
        Arc::new(Self {
            max_total: max_total.max(1),
            key_default: key_default.max(1),
            counts: Mutex::new(Counts::default()),
        })
    }

    /// Counts one more open stream of `key` (`None`: the operator token) until the ticket is
    /// dropped.
    ///
    /// # Errors
    /// [`StreamRefusal::GatewayFull`] when the Gateway serves its total, else
    /// [`StreamRefusal::KeyFull`] when the key holds its share.
    pub(crate) fn open(
        self: &Arc<Self>,
        key: Option<&ApiKeyRecord>,
    ) -> Result<StreamTicket, StreamRefusal> {
        let mut counts = self.counts.lock();
        if counts.total >= self.max_total {
            return Err(StreamRefusal::GatewayFull {
                max_total: self.max_total,
            });
        }
        if let Some(key) = key {
            let share = key.max_streams.unwrap_or(self.key_default);
            let held = counts.by_key.get(&key.secret_sha256).copied().unwrap_or(0);
            if held >= share {
                return Err(StreamRefusal::KeyFull { share });
            }
            counts
                .by_key
                .insert(key.secret_sha256.clone(), held.saturating_add(1));
        }
        counts.total = counts.total.saturating_add(1);
        Ok(StreamTicket {
            gate: Arc::clone(self),
            key: key.map(|key| key.secret_sha256.clone()),
        })
    }

    /// Returns the open streams in all.
    #[cfg(test)]
    pub(crate) fn open_streams(&self) -> u32 {
        self.counts.lock().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(hash: &str, max_streams: Option<u32>) -> ApiKeyRecord {
        ApiKeyRecord {
            name: hash.into(),
            secret_sha256: hash.into(),
            scopes: Vec::new(),
            session_prefix: None,
            created_at_ms: 0,
            expires_at_ms: None,
            last_used_at_ms: None,
            requests_per_minute: None,
            concurrent_turns: None,
            max_streams,
            media_quota_bytes: None,
            tokens_per_day: None,
        }
    }

    #[test]
    fn a_key_holds_its_share_and_the_total_holds_every_key() {
        let gate = StreamGate::new(5, 2);
        let a = key("a", None);
        let b = key("b", Some(3));
        let a1 = gate.open(Some(&a)).unwrap();
        let _a2 = gate.open(Some(&a)).unwrap();
        let refused = gate.open(Some(&a)).unwrap_err();
        assert_eq!(refused, StreamRefusal::KeyFull { share: 2 });
        // Closing one gives the key its slot back.
        drop(a1);
        let _a3 = gate.open(Some(&a)).unwrap();
        let _b1 = gate.open(Some(&b)).unwrap();
        let _b2 = gate.open(Some(&b)).unwrap();
        let _operator = gate.open(None).unwrap();
        assert_eq!(gate.open_streams(), 5);
        // The total is reached: the operator and a key with room are refused too.
        for refused in [gate.open(None), gate.open(Some(&b))] {
            assert_eq!(
                refused.unwrap_err(),
                StreamRefusal::GatewayFull { max_total: 5 }
            );
        }
    }

    #[test]
    fn default_shares_leave_room_for_other_keys() {
        assert_eq!(default_turn_share(8), 4);
        assert_eq!(default_turn_share(1), 1);
        assert_eq!(default_turn_share(0), 1);
        assert_eq!(default_media_share(10 << 30), 10 << 28);
        assert_eq!(fd_reserve(1024), 256);
        assert_eq!(fd_reserve(20_000), 5_000);
    }
}
