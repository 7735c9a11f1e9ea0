//! What a mock remembers across requests: prompt-cache prefixes and `/flaky` counts.

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;

/// The state one mock instance (a server, an in-process client) keeps over its lifetime, so that
/// its cache and `/flaky` answers are deterministic per instance. Cloning shares the state.
#[derive(Debug, Clone, Default)]
pub struct MockMemory {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    prefixes: HashSet<String>,
    flaky_counts: HashMap<String, u32>,
}

impl MockMemory {
    /// Records that a request marked `prefix` for caching and returns true when an earlier
    /// request already did (a cache read), false the first time (a cache write).
    pub fn cache_prefix(&self, prefix: &str) -> bool {
        !self.inner.lock().prefixes.insert(prefix.to_owned())
    }

    /// Counts one more request with the `/flaky` message `user_text` and returns its number,
    /// from 1.
    pub fn flaky_attempt(&self, user_text: &str) -> u32 {
        let mut inner = self.inner.lock();
        let count = inner.flaky_counts.entry(user_text.to_owned()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }
}
