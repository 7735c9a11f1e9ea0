//! The search pipeline over a [`MemoryIndex`]: both legs, merged scores, recency, MMR, the
//! minimum score and snippets.

use std::collections::HashMap;

use crate::index::IndexError;
use crate::index::MemoryIndex;
use crate::rank::Candidate;

/// How many candidates each leg returns.
pub const CANDIDATES_PER_LEG: usize = 200;

/// How many candidates per wanted result go into MMR.
pub const CANDIDATE_MULTIPLIER: usize = 4;

/// What a search asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchOptions {
    /// The most results (default 6).
    pub max_results: usize,
    /// The lowest score kept (default 0.35); when nothing reaches it, keyword hits are kept.
    pub min_score: f64,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            max_results: 6,
            min_score: 0.35,
        }
    }
}

/// One result (an API type: `GET /v1/memory/search`).
pub use gatehouse_api::memory::SearchHit;

/// Searches `index` for `query`; `query_vector` (normalised) enables the vector leg. `today` is
/// the current day since 1970-01-01, for the recency of dated notes.
///
/// # Errors
/// [`IndexError`].
pub async fn search(
    index: &MemoryIndex,
    query: &str,
    query_vector: Option<&[f32]>,
    options: SearchOptions,
    today: i64,
) -> Result<Vec<SearchHit>, IndexError> {
    let max_results = options.max_results.max(1);
    let mut merged: HashMap<i64, Candidate> = index
        .keyword_search(query, CANDIDATES_PER_LEG)
        .await?
        .into_iter()
        .map(|candidate| (candidate.id, candidate))
        .collect();
    let hybrid = query_vector.is_some();
    if let Some(vector) = query_vector {
        for (id, score, path) in index.vector_hits(vector, CANDIDATES_PER_LEG) {
            merged
                .entry(id)
                .or_insert_with(|| Candidate {
                    id,
                    path: path.to_string(),
                    start_line: 0,
                    end_line: 0,
                    // Loaded below, only for the candidates that survive the cut.
                    text: String::new(),
                    keyword: None,
                    vector: None,
                })
                .vector = Some(score);
        }
    }
    let mut scored: Vec<(f64, Candidate)> = merged
        .into_values()
        .map(|candidate| {
            let score = crate::rank::merged_score(&candidate, hybrid)
                * crate::rank::recency_factor(&candidate.path, today);
            (score, candidate)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
    scored.truncate(max_results * CANDIDATE_MULTIPLIER);
    let missing: Vec<i64> = scored
        .iter()
        .filter(|(_, candidate)| candidate.keyword.is_none())
        .map(|(_, candidate)| candidate.id)
        .collect();
    if !missing.is_empty() {
        let loaded: HashMap<i64, Candidate> = index
            .chunks(&missing)
            .await?
            .into_iter()
            .map(|candidate| (candidate.id, candidate))
            .collect();
        for (_, candidate) in &mut scored {
            if let Some(full) = loaded.get(&candidate.id) {
                candidate.start_line = full.start_line;
                candidate.end_line = full.end_line;
                candidate.text.clone_from(&full.text);
            }
        }
    }
    // Only candidates that reach the minimum compete in MMR; when none does, keyword hits are
    // still worth showing.
    let mut eligible: Vec<&(f64, Candidate)> = scored
        .iter()
        .filter(|(score, _)| *score >= options.min_score)
        .collect();
    if eligible.is_empty() {
        eligible = scored
            .iter()
            .filter(|(_, candidate)| candidate.keyword.is_some())
            .collect();
    }
    let kept: Vec<&(f64, Candidate)> = if hybrid {
        let pairs: Vec<(f64, &str)> = eligible
            .iter()
            .map(|(score, candidate)| (*score, candidate.text.as_str()))
            .collect();
        crate::rank::mmr(&pairs, max_results)
            .into_iter()
            .map(|index| eligible[index])
            .collect()
    } else {
        eligible.into_iter().take(max_results).collect()
    };
    Ok(kept
        .into_iter()
        .map(|(score, candidate)| SearchHit {
            path: candidate.path.clone(),
            start_line: candidate.start_line,
            end_line: candidate.end_line,
            score: *score,
            snippet: crate::rank::snippet(&candidate.text),
            citation: format!(
                "{}#L{}-L{}",
                candidate.path, candidate.start_line, candidate.end_line
            ),
        })
        .collect())
}
