//! Who may reach a channel's agent: the access decision of one inbound message.

use crate::config::ChannelSpec;
use crate::config::DmPolicy;
use crate::config::GroupPolicy;

/// What an inbound message is, as far as access goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival<'a> {
    /// The sender's platform id.
    pub sender: &'a str,
    /// The group it was written in; `None` for a direct message.
    pub group: Option<&'a str>,
    /// Whether it addresses the bot (a mention, or a reply to it).
    pub mentioned: bool,
    /// Whether an operator approved the sender by pairing (kept in the store).
    pub approved: bool,
}

/// What becomes of an inbound message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It reaches the agent.
    Admit,
    /// The sender must pair first: it is sent a code (once) and the message goes nowhere.
    Pair,
    /// The policy refuses it, without a reply.
    Deny,
    /// It does not address the bot (a group message without a mention): nothing happens.
    Ignore,
}

/// Judges `arrival` under `spec`'s access policy.
#[must_use]
pub fn judge(spec: &ChannelSpec, arrival: &Arrival<'_>) -> Verdict {
    let listed = |ids: &[String], id: &str| ids.iter().any(|allowed| allowed == id);
    match arrival.group {
        None => match spec.dm_policy {
            DmPolicy::Disabled => Verdict::Deny,
            DmPolicy::Open => Verdict::Admit,
            _ if arrival.approved || listed(&spec.allow_from, arrival.sender) => Verdict::Admit,
            DmPolicy::Allowlist => Verdict::Deny,
            DmPolicy::Pairing => Verdict::Pair,
        },
        Some(group) => {
            let group_allowed = match spec.group_policy {
                GroupPolicy::Disabled => false,
                GroupPolicy::Open => true,
                GroupPolicy::Allowlist => listed(&spec.groups, group),
            };
            let member_allowed =
                spec.group_allow_from.is_empty() || listed(&spec.group_allow_from, arrival.sender);
            if !group_allowed || !member_allowed {
                Verdict::Deny
            } else if spec.require_mention && !arrival.mentioned {
                Verdict::Ignore
            } else {
                Verdict::Admit
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;

    fn spec(extra: &str) -> ChannelSpec {
        #[derive(serde::Deserialize)]
        struct File {
            channels: Vec<ChannelSpec>,
        }
        let text = format!(
            "[[channels]]\nname = \"c\"\nkind = \"webhook\"\nallow-from = [\"alice\"]\ngroups = [\"room\"]\n{extra}"
        );
        toml::from_str::<File>(&text).unwrap().channels.remove(0)
    }

    fn direct(sender: &str, approved: bool) -> Arrival<'_> {
        Arrival {
            sender,
            group: None,
            mentioned: false,
            approved,
        }
    }

    fn group<'a>(sender: &'a str, group: &'a str, mentioned: bool) -> Arrival<'a> {
        Arrival {
            sender,
            group: Some(group),
            mentioned,
            approved: false,
        }
    }

    #[test]
    fn direct_senders_follow_the_dm_policy() {
        let pairing = spec("");
        assert_eq!(judge(&pairing, &direct("alice", false)), Verdict::Admit);
        assert_eq!(judge(&pairing, &direct("bob", false)), Verdict::Pair);
        assert_eq!(judge(&pairing, &direct("bob", true)), Verdict::Admit);
        let allowlist = spec("dm-policy = \"allowlist\"\n");
        assert_eq!(judge(&allowlist, &direct("bob", false)), Verdict::Deny);
        assert_eq!(judge(&allowlist, &direct("bob", true)), Verdict::Admit);
        assert_eq!(
            judge(&spec("dm-policy = \"open\"\n"), &direct("bob", false)),
            Verdict::Admit
        );
        assert_eq!(
            judge(&spec("dm-policy = \"disabled\"\n"), &direct("alice", true)),
            Verdict::Deny
        );
    }

    #[test]
    fn groups_need_the_allowlist_and_a_mention() {
        let default = spec("");
        assert_eq!(
            judge(&default, &group("bob", "room", false)),
            Verdict::Ignore
        );
        assert_eq!(judge(&default, &group("bob", "room", true)), Verdict::Admit);
        assert_eq!(judge(&default, &group("bob", "other", true)), Verdict::Deny);
        let open = spec("group-policy = \"open\"\nrequire-mention = false\n");
        assert_eq!(judge(&open, &group("bob", "other", false)), Verdict::Admit);
        let members = spec("group-allow-from = [\"carol\"]\n");
        assert_eq!(judge(&members, &group("bob", "room", true)), Verdict::Deny);
        assert_eq!(
            judge(&members, &group("carol", "room", true)),
            Verdict::Admit
        );
        let disabled = spec("group-policy = \"disabled\"\n");
        assert_eq!(
            judge(&disabled, &group("alice", "room", true)),
            Verdict::Deny
        );
    }
}
