//! Words and terms: the one tokenizer behind the keyword leg on both backends.
//!
//! SQLite's FTS5 tokenizes with `unicode61`; PostgreSQL's text search parsers do not tokenize
//! alike (the default parser keeps URLs, e-mail addresses, versions and hyphenated compounds as
//! tokens, and its character classes follow the database's locale). So the PostgreSQL backend
//! does not parse text at all: it stores the [`terms`] this module makes, by the rules of
//! `unicode61` with its defaults, and the keyword scores of both backends are computed from the
//! same counts.
//!
//! - A word is a maximal run of letters (`L*`), numbers (`N*`) and private-use characters
//!   (`Co`); everything else separates words, `_` and combining marks included.
//! - A term is a word folded: lowercased, and a Latin letter with one diacritic stripped to its
//!   ASCII base (`Café` → `cafe`, `Łódź` → `łodz`), as `remove_diacritics=1` does.
//!
//! The two agree on the words notes are written in; they can differ on rare characters that
//! Unicode calls alphabetic symbols (circled letters) and on letters with two diacritics.

use unicode_normalization::char::decompose_canonical;
use unicode_normalization::char::is_combining_mark;
use unicode_properties::GeneralCategory;
use unicode_properties::GeneralCategoryGroup;
use unicode_properties::UnicodeGeneralCategory;

/// Whether `c` belongs to a word.
pub fn is_word_char(c: char) -> bool {
    matches!(
        c.general_category_group(),
        GeneralCategoryGroup::Letter | GeneralCategoryGroup::Number
    ) || c.general_category() == GeneralCategory::PrivateUse
}

/// The words of `text`, as written.
pub fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !is_word_char(c))
        .filter(|word| !word.is_empty())
}

/// Folds one word into its term: lowercase, without a single diacritic on a Latin letter.
pub fn fold(word: &str) -> String {
    let mut folded = String::with_capacity(word.len());
    for lower in word.chars().flat_map(char::to_lowercase) {
        // Lowercasing can yield a combining mark (`İ` → `i` + U+0307); unicode61 folds it away.
        if is_combining_mark(lower) {
            continue;
        }
        let mut parts: [Option<char>; 2] = [None; 2];
        let mut count = 0_usize;
        decompose_canonical(lower, |part| {
            if let Some(slot) = parts.get_mut(count) {
                *slot = Some(part);
            }
            count += 1;
        });
        match parts {
            [Some(base), Some(mark)]
                if count == 2 && base.is_ascii() && is_combining_mark(mark) =>
            {
                folded.push(base);
            }
            _ => folded.push(lower),
        }
    }
    folded
}

/// The terms of `text` in order, repeats included.
pub fn terms(text: &str) -> Vec<String> {
    words(text)
        .map(fold)
        .filter(|term| !term.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The expected terms are what SQLite's FTS5 `unicode61` tokenizer makes of the same text.
    #[test]
    fn terms_follow_the_unicode61_rules() {
        let cases: &[(&str, &[&str])] = &[
            (
                "Café naïve ÉCOLE straße İstanbul",
                &["cafe", "naive", "ecole", "straße", "istanbul"],
            ),
            (
                "foo_bar x-y a.b 3.14 user@example.com",
                &[
                    "foo", "bar", "x", "y", "a", "b", "3", "14", "user", "example", "com",
                ],
            ),
            ("हिन्दी ١٢٣ ½ ² Ⅻ", &["ह", "न", "द", "١٢٣", "½", "²", "ⅻ"]),
            ("数据库系统 日本語", &["数据库系统", "日本語"]),
            (
                "ǅemal ﬁle Æsir øre Łódź",
                &["ǆemal", "ﬁle", "æsir", "øre", "łodz"],
            ),
            ("e\u{301} combining", &["e", "combining"]),
            ("alpha\0 beta", &["alpha", "beta"]),
        ];
        for (text, expected) in cases {
            assert_eq!(terms(text), *expected, "{text}");
        }
    }
}
