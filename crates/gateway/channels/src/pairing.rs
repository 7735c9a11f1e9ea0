//! Pairing codes: what an unknown direct sender is given to show an operator.

/// The code alphabet: no `0`, `O`, `1` or `I`, which read alike.
pub const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";

/// The length of a code.
pub const CODE_LENGTH: usize = 8;

/// How long a code is accepted: one hour.
pub const CODE_TTL_MS: i64 = 3_600_000;

/// The most pairings a channel has pending at once.
pub const MAX_PENDING: u32 = 3;

/// Returns a fresh random code.
///
/// # Panics
/// When the operating system's random source fails, which leaves nothing safe to do.
#[must_use]
pub fn new_code() -> String {
    // 32 letters: each random byte's low five bits pick one with no bias.
    let mut bytes = [0_u8; CODE_LENGTH];
    #[expect(clippy::expect_used, reason = "no code can be made without randomness")]
    getrandom::fill(&mut bytes).expect("the OS random source");
    bytes
        .iter()
        .map(|byte| char::from(CODE_ALPHABET[usize::from(byte & 0x1f)]))
        .collect()
}

/// Whether `code` could be one [`new_code`] made (before the store is asked).
#[must_use]
pub fn plausible_code(code: &str) -> bool {
    code.len() == CODE_LENGTH && code.bytes().all(|b| CODE_ALPHABET.contains(&b))
}

/// The reply that carries `code` to the sender, shown verbatim.
#[must_use]
pub fn pairing_reply(code: &str) -> String {
    format!(
        "This agent only answers people its operator approved. Your pairing code is {code} \
         (valid for one hour): send it to the operator, who approves it with \
         `gatehouse channels approve`. Messages sent before approval are not passed on."
    )
}

/// The notice a sender gets once approved.
pub const APPROVED_NOTICE: &str = "Your pairing was approved: your next message goes to the agent.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_use_the_alphabet_and_differ() {
        let one = new_code();
        assert!(plausible_code(&one), "{one}");
        assert_eq!(CODE_ALPHABET.len(), 32);
        assert!((0..20).map(|_| new_code()).any(|other| other != one));
        assert!(pairing_reply(&one).contains(&one));
        assert!(!plausible_code("ABCDEFG0"));
        assert!(!plausible_code("abcdefgh"));
    }
}
