//! The console's login sessions: an opaque random id in an `HttpOnly` cookie, mapped in this
//! process to the identity of the key that logged in and to the session's CSRF token.
//!
//! The table never holds a key's secret: a key is kept by the SHA-256 of its secret, the same
//! hash the store finds it by, and every request made with the cookie finds the key in the store
//! again ([`crate::http::auth`]), so a revoked or expired key ends its console sessions on their
//! next request. The table itself is keyed by the SHA-256 of the cookie id, so nothing in memory
//! is the cookie a browser sends.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::secrets::secrets_equal;
use crate::secrets::sha256_hex;

/// The name of the session cookie.
pub(crate) const COOKIE_NAME: &str = "gatehouse_console";

/// How long a console session lasts after its login, in milliseconds: 12 hours. A key that
/// expires earlier ends it earlier.
pub(crate) const SESSION_TTL_MS: i64 = 12 * 60 * 60 * 1000;

/// The most console sessions kept at once, so logins cannot grow the Gateway's memory without
/// bound; a login past it is refused, and no one else's session is dropped for it.
pub(crate) const MAX_SESSIONS: usize = 4096;

/// The most console sessions of one key (or of the operator token) at once; a login of that
/// key past it drops that key's oldest session, never another key's.
pub(crate) const MAX_SESSIONS_PER_KEY: usize = 16;

/// Who a console session acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// The operator token.
    Operator,
    /// An API key, by the SHA-256 of its secret.
    Key {
        /// The hex SHA-256 of the key's secret.
        secret_sha256: String,
    },
}

/// One login: who it is and the token every state-changing request must echo.
#[derive(Debug, Clone)]
pub(crate) struct ConsoleSession {
    /// Who the session acts as.
    pub(crate) identity: Identity,
    /// The audit actor of the key at login (`operator` or `key:NAME`).
    pub(crate) actor: String,
    /// The CSRF token the page sends back in `X-Gatehouse-Csrf` (or the `csrf` form field).
    pub(crate) csrf_token: String,
    /// When the session ends, Unix milliseconds.
    pub(crate) expires_at_ms: i64,
}

impl ConsoleSession {
    /// Returns whether `presented` is this session's CSRF token, compared in constant time.
    pub(crate) fn csrf_matches(&self, presented: &str) -> bool {
        secrets_equal(self.csrf_token.as_bytes(), presented.as_bytes())
    }
}

/// The console sessions of this Gateway process.
///
/// They live in memory: a restart logs every console user out, and replicas behind one address
/// each know only their own logins (a load balancer must keep a browser on one replica).
#[derive(Debug, Default)]
pub(crate) struct ConsoleSessions {
    /// By the hex SHA-256 of the cookie id.
    sessions: Mutex<HashMap<String, ConsoleSession>>,
}

/// A request's hold on one console session, so a long-lived answer (an event stream) can ask
/// whether a logout ended it.
#[derive(Debug, Clone)]
pub(crate) struct ConsoleLease {
    sessions: Arc<ConsoleSessions>,
    id_sha256: String,
}

impl ConsoleLease {
    /// Returns whether the session still exists and has not expired.
    pub(crate) fn is_live(&self, now_ms: i64) -> bool {
        self.sessions
            .sessions
            .lock()
            .get(&self.id_sha256)
            .is_some_and(|session| session.expires_at_ms > now_ms)
    }
}

impl ConsoleSessions {
    /// Starts a session for `identity` and returns its cookie id and its CSRF token; `None`
    /// when [`MAX_SESSIONS`] sessions of other keys are live. A key past
    /// [`MAX_SESSIONS_PER_KEY`] loses its own oldest session.
    ///
    /// # Errors
    /// The system's random source failed.
    pub(crate) fn create(
        &self,
        identity: Identity,
        actor: &str,
        now_ms: i64,
    ) -> std::io::Result<Option<(String, ConsoleSession)>> {
        let id = crate::secrets::random_token()?;
        let session = ConsoleSession {
            identity,
            actor: actor.to_owned(),
            csrf_token: crate::secrets::random_token()?,
            expires_at_ms: now_ms.saturating_add(SESSION_TTL_MS),
        };
        let mut sessions = self.sessions.lock();
        sessions.retain(|_, kept| kept.expires_at_ms > now_ms);
        let own: Vec<(&String, i64)> = sessions
            .iter()
            .filter(|(_, kept)| kept.identity == session.identity)
            .map(|(id_sha256, kept)| (id_sha256, kept.expires_at_ms))
            .collect();
        if own.len() >= MAX_SESSIONS_PER_KEY {
            let oldest = own
                .iter()
                .min_by_key(|(_, expires_at_ms)| *expires_at_ms)
                .map(|(id_sha256, _)| (*id_sha256).clone());
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
            }
        } else if sessions.len() >= MAX_SESSIONS {
            return Ok(None);
        }
        sessions.insert(sha256_hex(id.as_bytes()), session.clone());
        Ok(Some((id, session)))
    }

    /// Returns the unexpired session of cookie id `id`, with a lease on it.
    pub(crate) fn find(
        self: &Arc<Self>,
        id: &str,
        now_ms: i64,
    ) -> Option<(ConsoleSession, ConsoleLease)> {
        let id_sha256 = sha256_hex(id.as_bytes());
        let mut sessions = self.sessions.lock();
        let session = sessions.get(&id_sha256)?.clone();
        if session.expires_at_ms <= now_ms {
            sessions.remove(&id_sha256);
            return None;
        }
        let lease = ConsoleLease {
            sessions: Arc::clone(self),
            id_sha256,
        };
        Some((session, lease))
    }

    /// Ends the session of cookie id `id`; returns whether there was one.
    pub(crate) fn remove(&self, id: &str) -> bool {
        self.sessions
            .lock()
            .remove(&sha256_hex(id.as_bytes()))
            .is_some()
    }
}

/// Returns the value of the cookie `name` among the request's `Cookie` headers.
pub(crate) fn cookie_value<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(key, _)| *key == name)
        .map(|(_, value)| value.trim());
    let first = values.next()?;
    // Two cookies of one name: one may be planted by another service of the same host (a
    // browser sends a host's cookies to every port), so neither is trusted.
    match values.next() {
        Some(_) => None,
        None => Some(first),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_found_by_its_id_until_it_expires_or_is_removed() {
        let sessions = Arc::new(ConsoleSessions::default());
        let (id, created) = sessions
            .create(Identity::Operator, "operator", 1_000)
            .unwrap()
            .unwrap();
        let (found, lease) = sessions.find(&id, 2_000).unwrap();
        assert_eq!(found.identity, Identity::Operator);
        assert!(found.csrf_matches(&created.csrf_token));
        assert!(!found.csrf_matches("other"));
        assert!(lease.is_live(2_000));
        assert!(sessions.find("another-id", 2_000).is_none());
        assert!(sessions.find(&id, 1_000 + SESSION_TTL_MS).is_none());
        let (id, _) = sessions
            .create(Identity::Operator, "operator", 1_000)
            .unwrap()
            .unwrap();
        let (_, lease) = sessions.find(&id, 2_000).unwrap();
        assert!(sessions.remove(&id));
        assert!(!lease.is_live(2_000));
        assert!(!sessions.remove(&id));
    }

    #[test]
    fn a_keys_logins_past_its_bound_drop_its_own_oldest_session_only() {
        let sessions = Arc::new(ConsoleSessions::default());
        let key = |n: usize| Identity::Key {
            secret_sha256: format!("{n:064x}"),
        };
        let (operator, _) = sessions
            .create(Identity::Operator, "operator", 0)
            .unwrap()
            .unwrap();
        // One key logging in again and again drops only its own oldest session.
        let (first, _) = sessions.create(key(1), "key:a", 1).unwrap().unwrap();
        for n_login in 0..MAX_SESSIONS_PER_KEY * 4 {
            let at = 2 + i64::try_from(n_login).unwrap();
            sessions.create(key(1), "key:a", at).unwrap().unwrap();
        }
        assert!(sessions.find(&first, 3).is_none());
        assert!(
            sessions.find(&operator, 3).is_some(),
            "another key's logins ended the operator's session"
        );
        assert_eq!(sessions.sessions.lock().len(), 1 + MAX_SESSIONS_PER_KEY);
        // Past the bound of all sessions a new login is refused; no live session is dropped.
        let mut n_key = 2;
        while sessions.sessions.lock().len() < MAX_SESSIONS {
            sessions.create(key(n_key), "key:b", 100).unwrap().unwrap();
            n_key += 1;
        }
        assert!(sessions.create(key(n_key), "key:c", 100).unwrap().is_none());
        assert!(sessions.find(&operator, 101).is_some());
        assert_eq!(sessions.sessions.lock().len(), MAX_SESSIONS);
    }

    #[test]
    fn the_cookie_is_read_from_any_cookie_header() {
        let mut headers = axum::http::HeaderMap::new();
        headers.append("cookie", "a=1; gatehouse_console=abc".parse().unwrap());
        headers.append("cookie", "b=2".parse().unwrap());
        assert_eq!(cookie_value(&headers, COOKIE_NAME), Some("abc"));
        assert_eq!(cookie_value(&headers, "b"), Some("2"));
        assert_eq!(cookie_value(&headers, "c"), None);
        // A second cookie of the name (planted by another port of the host) is no session.
        headers.append("cookie", "gatehouse_console=planted".parse().unwrap());
        assert_eq!(cookie_value(&headers, COOKIE_NAME), None);
    }
}
