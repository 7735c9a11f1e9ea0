//! Session keys of channel messages, in OpenClaw's shapes:
//! `agent:<agent>:<channel>:direct:<peer>` (per `dm-scope`), `agent:<agent>:<channel>:group:<id>`,
//! with `:thread:<id>` appended for a thread.
//!
//! Platform ids are opaque: an id outside `[A-Za-z0-9.-]` is encoded byte by byte as `_XX`
//! (two lowercase hex digits), which is stable and reversible ([`decode_id`]). A key that
//! would pass the API's 128 bytes ends in `~` followed by the first 32 hex digits of the
//! SHA-256 of the full key instead, which is stable but not reversible: the store keeps the raw
//! ids beside the session.

use sha2::Digest;
use sha2::Sha256;

use crate::config::DmScope;

/// The longest session key the API accepts.
pub const MAX_SESSION_KEY_BYTES: usize = 128;

/// Where a message was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place<'a> {
    /// A direct conversation with `sender`.
    Direct,
    /// The group (room, channel, chat) with this id.
    Group(&'a str),
}

/// Everything a session key is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyParts<'a> {
    /// The agent.
    pub agent: &'a str,
    /// The channel's configured name.
    pub channel: &'a str,
    /// The account the channel speaks as (the bot's own id), for `per-account-channel-peer`.
    pub account: &'a str,
    /// How direct messages map to sessions.
    pub dm_scope: DmScope,
    /// The sender.
    pub sender: &'a str,
    /// Where it was written.
    pub place: Place<'a>,
    /// The thread, when the platform has one.
    pub thread: Option<&'a str>,
}

/// Returns the session key of a message.
#[must_use]
pub fn session_key(parts: &KeyParts<'_>) -> String {
    let agent = parts.agent;
    let channel = encode_id(parts.channel);
    let mut key = match parts.place {
        Place::Direct => {
            let peer = encode_id(parts.sender);
            match parts.dm_scope {
                DmScope::Main => format!("agent:{agent}:main"),
                DmScope::PerPeer => format!("agent:{agent}:direct:{peer}"),
                DmScope::PerChannelPeer => format!("agent:{agent}:{channel}:direct:{peer}"),
                DmScope::PerAccountChannelPeer => format!(
                    "agent:{agent}:{channel}:{}:direct:{peer}",
                    encode_id(parts.account)
                ),
            }
        }
        Place::Group(id) => format!("agent:{agent}:{channel}:group:{}", encode_id(id)),
    };
    if let Some(thread) = parts.thread {
        key.push_str(":thread:");
        key.push_str(&encode_id(thread));
    }
    bounded(key)
}

/// Keeps `key` within [`MAX_SESSION_KEY_BYTES`]: a longer key keeps its first bytes and ends in
/// `~` and 32 hex digits of its SHA-256.
fn bounded(key: String) -> String {
    if key.len() <= MAX_SESSION_KEY_BYTES {
        return key;
    }
    let digest = hex::encode(Sha256::digest(key.as_bytes()));
    // The key is ASCII, so any byte index is a char boundary.
    let keep = MAX_SESSION_KEY_BYTES - 33;
    format!("{}~{}", &key[..keep], &digest[..32])
}

/// Encodes a platform id for a session key: `[A-Za-z0-9.-]` stay, every other byte becomes
/// `_XX`.
#[must_use]
pub fn encode_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-') {
            out.push(char::from(byte));
        } else {
            out.push('_');
            out.push_str(&format!("{byte:02x}"));
        }
    }
    out
}

/// Decodes what [`encode_id`] made; `None` for text it cannot have made.
#[must_use]
pub fn decode_id(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'_' => {
                let pair = encoded.get(i + 1..i + 3)?;
                if !pair
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                {
                    return None;
                }
                out.push(u8::from_str_radix(pair, 16).ok()?);
                i += 3;
            }
            byte if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-') => {
                out.push(byte);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;

    fn parts(dm_scope: DmScope, place: Place<'static>, thread: Option<&'static str>) -> String {
        session_key(&KeyParts {
            agent: "main",
            channel: "team",
            account: "@bot:hs.test",
            dm_scope,
            sender: "@alice:hs.test",
            place,
            thread,
        })
    }

    #[test]
    fn keys_follow_the_shapes_of_each_scope() {
        assert_eq!(parts(DmScope::Main, Place::Direct, None), "agent:main:main");
        assert_eq!(
            parts(DmScope::PerPeer, Place::Direct, None),
            "agent:main:direct:_40alice_3ahs.test"
        );
        assert_eq!(
            parts(DmScope::PerChannelPeer, Place::Direct, None),
            "agent:main:team:direct:_40alice_3ahs.test"
        );
        assert_eq!(
            parts(DmScope::PerAccountChannelPeer, Place::Direct, Some("t1")),
            "agent:main:team:_40bot_3ahs.test:direct:_40alice_3ahs.test:thread:t1"
        );
        assert_eq!(
            parts(DmScope::Main, Place::Group("!room:hs.test"), Some("$ev")),
            "agent:main:team:group:_21room_3ahs.test:thread:_24ev"
        );
    }

    #[test]
    fn ids_round_trip_and_keys_stay_in_the_api_alphabet() {
        for id in [
            "@alice:hs.test",
            "U012AB",
            "-100123",
            "ünïcødé / x_y",
            "_41",
            "",
        ] {
            let encoded = encode_id(id);
            assert_eq!(decode_id(&encoded).as_deref(), Some(id));
            assert!(
                encoded
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
            );
        }
        assert_eq!(decode_id("_4"), None);
        assert_eq!(decode_id("_4G"), None);
        assert_eq!(decode_id("a:b"), None);
    }

    #[test]
    fn a_long_key_is_bounded_stably_and_stays_distinct() {
        let long = "x".repeat(300);
        let key = |sender: &str| {
            session_key(&KeyParts {
                agent: "main",
                channel: "team",
                account: "bot",
                dm_scope: DmScope::PerChannelPeer,
                sender,
                place: Place::Direct,
                thread: None,
            })
        };
        let one = key(&long);
        assert_eq!(one.len(), MAX_SESSION_KEY_BYTES);
        assert_eq!(one, key(&long));
        assert_ne!(one, key(&format!("{long}y")));
    }
}
