//! Ranking: BM25 and vector scores merged 0.7 vector + 0.3 keyword, a 30-day recency half-life
//! on dated notes, and maximal marginal relevance (λ = 0.7, Jaccard over snippet tokens) to drop
//! near-duplicates. Pure functions, table-tested.

use std::collections::HashSet;

/// The weight of the vector score in a hybrid score.
pub const VECTOR_WEIGHT: f64 = 0.7;
/// The weight of the keyword score in a hybrid score.
pub const TEXT_WEIGHT: f64 = 0.3;
/// The half-life of dated notes, in days.
pub const RECENCY_HALF_LIFE_DAYS: f64 = 30.0;
/// The λ of maximal marginal relevance: relevance against diversity.
pub const MMR_LAMBDA: f64 = 0.7;
/// The longest snippet, in characters.
pub const MAX_SNIPPET_CHARS: usize = 700;

/// One chunk that matched a leg of the search.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The chunk id.
    pub id: i64,
    /// The workspace-relative path.
    pub path: String,
    /// The first line, 1-based.
    pub start_line: u32,
    /// The last line, 1-based.
    pub end_line: u32,
    /// The chunk text.
    pub text: String,
    /// The keyword score in `[0, 1)`, when the keyword leg found it.
    pub keyword: Option<f64>,
    /// The vector score (cosine similarity), when the vector leg found it.
    pub vector: Option<f64>,
}

/// Turns an FTS5 `bm25()` rank (negative, lower is better) into a score in `[0, 1)`.
pub fn bm25_score(rank: f64) -> f64 {
    if rank < 0.0 {
        -rank / (1.0 - rank)
    } else {
        1.0 / (1.0 + rank)
    }
}

/// FTS5's `bm25()` parameter k1 (term frequency saturation).
pub const BM25_K1: f64 = 1.2;
/// FTS5's `bm25()` parameter b (length normalisation).
pub const BM25_B: f64 = 0.75;

/// What `bm25()` knows of the whole index: its rows (chunks) and their tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bm25Corpus {
    /// Rows in the index.
    pub rows: u64,
    /// Tokens in all rows.
    pub tokens: u64,
}

/// One phrase (here: one word) of a query, as `bm25()` sees it for one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bm25Phrase {
    /// Rows that contain the phrase.
    pub rows: u64,
    /// Occurrences of the phrase in this row.
    pub hits: u64,
}

/// The rank FTS5's `bm25()` gives a row of `length` tokens, computed the way SQLite computes it
/// (`fts5_aux.c`): the sum over the query's phrases, in order and repeats included, of
/// `idf × f × (k1 + 1) / (f + k1 × (1 − b + b × length / avgdl))` with
/// `idf = ln((N − n + 0.5) / (n + 0.5))` (1e-6 when not positive), negated. The PostgreSQL
/// backend ranks with it, so its keyword scores are the ones SQLite computes natively.
pub fn fts5_bm25(corpus: Bm25Corpus, length: u64, phrases: &[Bm25Phrase]) -> f64 {
    let rows = corpus.rows as f64;
    let average = corpus.tokens as f64 / rows;
    let length = length as f64;
    let mut score = 0.0;
    for phrase in phrases {
        let matching = phrase.rows as f64;
        let mut idf = ((rows - matching + 0.5) / (matching + 0.5)).ln();
        if idf <= 0.0 {
            idf = 1e-6;
        }
        let hits = phrase.hits as f64;
        score += idf
            * ((hits * (BM25_K1 + 1.0))
                / (hits + BM25_K1 * (1.0 - BM25_B + BM25_B * length / average)));
    }
    -score
}

/// The score of a candidate: `0.7 × vector + 0.3 × keyword` when vectors are searched, else the
/// keyword score alone.
pub fn merged_score(candidate: &Candidate, hybrid: bool) -> f64 {
    let keyword = candidate.keyword.unwrap_or(0.0);
    if hybrid {
        VECTOR_WEIGHT * candidate.vector.unwrap_or(0.0) + TEXT_WEIGHT * keyword
    } else {
        keyword
    }
}

/// Returns the date of a dated note (`memory/YYYY-MM-DD*.md`) as days since 1970-01-01, or
/// `None` for evergreen files.
pub fn note_day(path: &str) -> Option<i64> {
    let name = path.strip_prefix("memory/")?.rsplit('/').next()?;
    let date = name.get(..10)?;
    let bytes = date.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let year: i64 = date.get(0..4)?.parse().ok()?;
    let month: i64 = date.get(5..7)?.parse().ok()?;
    let day: i64 = date.get(8..10)?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The recency factor of `path` on `today` (days since 1970-01-01): `exp(-ln2/30 × age)` for a
/// dated note, 1 for evergreen files and for notes dated in the future.
pub fn recency_factor(path: &str, today: i64) -> f64 {
    match note_day(path) {
        Some(day) => {
            let age = (today - day).max(0) as f64;
            (-(std::f64::consts::LN_2 / RECENCY_HALF_LIFE_DAYS) * age).exp()
        }
        None => 1.0,
    }
}

/// The lowercase word tokens of `text`, for the Jaccard similarity.
pub fn tokens(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|token| !token.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The Jaccard similarity of two token sets.
pub fn jaccard(left: &HashSet<String>, right: &HashSet<String>) -> f64 {
    if left.is_empty() && right.is_empty() {
        return 1.0;
    }
    let shared = left.intersection(right).count() as f64;
    let union = (left.len() + right.len()) as f64 - shared;
    if union == 0.0 { 0.0 } else { shared / union }
}

/// Picks up to `limit` of `scored` (score, text) by maximal marginal relevance and returns their
/// indices in the order picked. Each candidate's redundancy (its highest similarity to a picked
/// one) is updated once per pick, so the cost is O(candidates × picks).
pub fn mmr(scored: &[(f64, &str)], limit: usize) -> Vec<usize> {
    let token_sets: Vec<HashSet<String>> = scored.iter().map(|(_, text)| tokens(text)).collect();
    let mut redundancy = vec![0.0_f64; scored.len()];
    let mut picked: Vec<usize> = Vec::new();
    let mut left: Vec<usize> = (0..scored.len()).collect();
    while picked.len() < limit && !left.is_empty() {
        let mut best: Option<(usize, f64)> = None;
        for (position, &index) in left.iter().enumerate() {
            let value = MMR_LAMBDA * scored[index].0 - (1.0 - MMR_LAMBDA) * redundancy[index];
            if best.is_none_or(|(_, best_value)| value > best_value) {
                best = Some((position, value));
            }
        }
        let Some((position, _)) = best else {
            break;
        };
        let chosen = left.remove(position);
        picked.push(chosen);
        for &index in &left {
            let similarity = jaccard(&token_sets[index], &token_sets[chosen]);
            redundancy[index] = redundancy[index].max(similarity);
        }
    }
    picked
}

/// Cuts `text` to at most [`MAX_SNIPPET_CHARS`] characters.
pub fn snippet(text: &str) -> String {
    if text.chars().count() <= MAX_SNIPPET_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_SNIPPET_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// The cosine similarity of two L2-normalised vectors (their dot product). Eight independent
/// accumulators let the compiler use SIMD lanes.
pub fn dot(left: &[f32], right: &[f32]) -> f32 {
    let mut lanes = [0.0_f32; 8];
    let left_chunks = left.chunks_exact(8);
    let right_chunks = right.chunks_exact(8);
    let tail: f32 = left_chunks
        .remainder()
        .iter()
        .zip(right_chunks.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (a, b) in left_chunks.zip(right_chunks) {
        for lane in 0..8 {
            lanes[lane] += a[lane] * b[lane];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bm25_ranks_map_into_the_unit_interval_in_order() {
        let scores: Vec<f64> = [-8.0, -2.0, -0.5, 0.0, 3.0]
            .iter()
            .map(|rank| bm25_score(*rank))
            .collect();
        assert!((scores[0] - 8.0 / 9.0).abs() < 1e-12);
        assert!(scores[0] > scores[1] && scores[1] > scores[2]);
        assert!((scores[3] - 1.0).abs() < 1e-12 && (scores[4] - 0.25).abs() < 1e-12);
    }

    #[test]
    fn hybrid_scores_weigh_vectors_0_7_and_keywords_0_3() {
        let candidate = Candidate {
            id: 1,
            path: String::from("MEMORY.md"),
            start_line: 1,
            end_line: 2,
            text: String::new(),
            keyword: Some(0.5),
            vector: Some(0.8),
        };
        assert!((merged_score(&candidate, true) - (0.56 + 0.15)).abs() < 1e-12);
        assert!((merged_score(&candidate, false) - 0.5).abs() < 1e-12);
        let vector_only = Candidate {
            keyword: None,
            ..candidate
        };
        assert!((merged_score(&vector_only, true) - 0.56).abs() < 1e-12);
    }

    #[test]
    fn dated_notes_decay_with_a_30_day_half_life() {
        let today = note_day("memory/2026-11-29.md").unwrap();
        assert_eq!(today, 20_786);
        assert_eq!(note_day("memory/1970-01-01-start.md"), Some(0));
        assert!((recency_factor("memory/2026-10-30-trip.md", today) - 0.5).abs() < 1e-12);
        assert!((recency_factor("memory/2026-11-29.md", today) - 1.0).abs() < 1e-12);
        for evergreen in [
            "MEMORY.md",
            "memory/projects.md",
            "notes/2026-01-01.md",
            "memory/2026-13-01.md",
        ] {
            assert_eq!(recency_factor(evergreen, today), 1.0, "{evergreen}");
        }
        assert_eq!(recency_factor("memory/2027-01-01.md", today), 1.0);
    }

    #[test]
    fn mmr_drops_a_near_duplicate_for_a_diverse_result() {
        let scored = [
            (0.90, "the deploy key rotates every monday morning"),
            (0.89, "the deploy key rotates every monday morning too"),
            (0.60, "lunch is at noon in the blue room"),
        ];
        assert_eq!(mmr(&scored, 2), vec![0, 2]);
        assert_eq!(mmr(&scored, 5), vec![0, 2, 1]);
        assert!(mmr(&[], 3).is_empty());
    }

    #[test]
    fn dot_products_match_the_plain_sum() {
        let left: Vec<f32> = (0..21).map(|i| i as f32 * 0.5).collect();
        let right: Vec<f32> = (0..21).map(|i| 1.0 - i as f32 * 0.1).collect();
        let plain: f32 = left.iter().zip(&right).map(|(a, b)| a * b).sum();
        assert!((dot(&left, &right) - plain).abs() < 1e-3);
    }

    #[test]
    fn snippets_are_at_most_700_chars() {
        let long = "é".repeat(2000);
        let cut = snippet(&long);
        assert_eq!(cut.chars().count(), MAX_SNIPPET_CHARS);
        assert!(cut.ends_with('…'));
        assert_eq!(snippet("short"), "short");
    }
}
