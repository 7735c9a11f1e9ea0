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

/// One result.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    /// The workspace-relative path.
    pub path: String,
    /// The first line, 1-based.
    pub start_line: u32,
    /// The last line, 1-based.
    pub end_line: u32,
    /// The final score.
    pub score: f64,
    /// At most 700 characters of the chunk.
    pub snippet: String,
    /// `path#Lstart-Lend`.
    pub citation: String,
}

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
        let nearest = index.vector_search(vector, CANDIDATES_PER_LEG);
        let missing: Vec<i64> = nearest
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !merged.contains_key(id))
            .collect();
        for candidate in index.chunks(&missing).await? {
            merged.insert(candidate.id, candidate);
        }
        for (id, score) in nearest {
            if let Some(candidate) = merged.get_mut(&id) {
                candidate.vector = Some(score);
            }
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
    let order: Vec<usize> = if hybrid {
        let pairs: Vec<(f64, &str)> = scored
            .iter()
            .map(|(score, candidate)| (*score, candidate.text.as_str()))
            .collect();
        crate::rank::mmr(&pairs, scored.len())
    } else {
        (0..scored.len()).collect()
    };
    let ranked: Vec<&(f64, Candidate)> = order.iter().map(|&index| &scored[index]).collect();
    let mut kept: Vec<&(f64, Candidate)> = ranked
        .iter()
        .copied()
        .filter(|(score, _)| *score >= options.min_score)
        .take(max_results)
        .collect();
    if kept.is_empty() {
        // Nothing reached the minimum: keyword hits are still worth showing.
        kept = ranked
            .iter()
            .copied()
            .filter(|(_, candidate)| candidate.keyword.is_some())
            .take(max_results)
            .collect();
    }
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
