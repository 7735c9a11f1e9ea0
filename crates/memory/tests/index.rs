//! The memory index on a real SQLite file: sync by content hash, both legs, ranking and the
//! index identity.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use gatehouse_memory::chunk::ChunkSettings;
use gatehouse_memory::embed::EmbedError;
use gatehouse_memory::embed::Embedder;
use gatehouse_memory::embed::EmbedderKind;
use gatehouse_memory::embed::normalize;
use gatehouse_memory::index::IndexIdentity;
use gatehouse_memory::index::MemoryIndex;
use gatehouse_memory::index::VectorState;
use gatehouse_memory::search::SearchOptions;
use gatehouse_memory::search::search;
use pretty_assertions::assert_eq;

/// A deterministic embedder for the pipeline: each word adds to one of 64 buckets, and the words
/// of one synonym group share a bucket, so "automobile" is close to "car" without sharing a
/// word. (The real semantic model is tested where it is built.)
struct BucketEmbedder {
    model: &'static str,
}

const SYNONYMS: &[&[&str]] = &[
    &["car", "automobile", "vehicle"],
    &["happy", "glad", "cheerful"],
];

fn bucket(word: &str) -> usize {
    for (group, words) in SYNONYMS.iter().enumerate() {
        if words.contains(&word) {
            return group;
        }
    }
    let hash = word.bytes().fold(0_usize, |hash, byte| {
        hash.wrapping_mul(31).wrapping_add(byte as usize)
    });
    SYNONYMS.len() + hash % (64 - SYNONYMS.len())
}

#[async_trait::async_trait]
impl Embedder for BucketEmbedder {
    fn kind(&self) -> EmbedderKind {
        EmbedderKind::Local
    }
    fn model(&self) -> &str {
        self.model
    }
    fn dimensions(&self) -> usize {
        64
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut vector = vec![0.0_f32; 64];
                for word in text
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| w.len() > 2)
                {
                    vector[bucket(&word.to_lowercase())] += 1.0;
                }
                normalize(vector)
            })
            .collect())
    }
}

const TODAY: &str = "memory/2026-11-29.md";

fn today() -> i64 {
    gatehouse_memory::rank::note_day(TODAY).unwrap()
}

async fn open(dir: &std::path::Path, embedder: Option<&dyn Embedder>) -> MemoryIndex {
    let chunking = ChunkSettings::default();
    MemoryIndex::open(
        &dir.join("memory.db"),
        IndexIdentity::of(embedder, chunking),
        chunking,
    )
    .await
    .unwrap()
}

/// Opens a fresh index with `embedder` and indexes `files` (path, text).
async fn indexed(
    dir: &std::path::Path,
    embedder: &BucketEmbedder,
    files: &[(&str, &str)],
) -> MemoryIndex {
    let index = open(dir, Some(embedder)).await;
    for (path, text) in files {
        index
            .upsert_file(path, text, path, Some(embedder))
            .await
            .unwrap();
    }
    index
}

/// Runs a hybrid search for `query`; returns the paths of the hits and the hits.
async fn hybrid(
    index: &MemoryIndex,
    embedder: &BucketEmbedder,
    query: &str,
    options: SearchOptions,
) -> (Vec<String>, Vec<gatehouse_memory::search::SearchHit>) {
    let vector = embedder.embed(&[query.to_owned()]).await.unwrap().remove(0);
    let hits = search(index, query, Some(&vector), options, today())
        .await
        .unwrap();
    (hits.iter().map(|hit| hit.path.clone()).collect(), hits)
}

const EVERYTHING: SearchOptions = SearchOptions {
    max_results: 3,
    min_score: 0.0,
};

#[tokio::test]
async fn keyword_hits_cite_their_lines_and_a_file_is_resynced_by_hash() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path(), None).await;
    assert_eq!(index.vector_state(), &VectorState::Off);
    let text = "# Memory\n\nThe deploy key rotates every Monday.\nLunch is at noon.\n";
    index
        .upsert_file("MEMORY.md", text, "h1", None)
        .await
        .unwrap();
    let hits = search(
        &index,
        "deploy key",
        None,
        SearchOptions::default(),
        today(),
    )
    .await
    .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].citation, "MEMORY.md#L1-L4");
    assert!(hits[0].snippet.contains("deploy key rotates"));
    assert!(hits[0].score > 0.0);
    // No word of the query: no hit, whatever the minimum score.
    assert!(
        search(
            &index,
            "automobile",
            None,
            SearchOptions::default(),
            today()
        )
        .await
        .unwrap()
        .is_empty()
    );
    // A new version replaces the old chunks.
    index
        .upsert_file("MEMORY.md", "The deploy key moved to vault.\n", "h2", None)
        .await
        .unwrap();
    let hits = search(&index, "Monday", None, SearchOptions::default(), today())
        .await
        .unwrap();
    assert!(hits.is_empty(), "{hits:?}");
    assert_eq!(
        index
            .file_hashes()
            .await
            .unwrap()
            .get("MEMORY.md")
            .map(String::as_str),
        Some("h2")
    );
    index.remove_file("MEMORY.md").await.unwrap();
    assert_eq!(index.stats().await.unwrap().chunks, 0);
}

#[tokio::test]
async fn a_vector_only_hit_is_found_and_ranked_with_the_keyword_leg() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = BucketEmbedder {
        model: "buckets-v1",
    };
    let index = indexed(
        dir.path(),
        &embedder,
        &[
            ("MEMORY.md", "My car is blue."),
            (
                "memory/projects.md",
                "The garden project needs compost and seeds.",
            ),
        ],
    )
    .await;
    assert_eq!(index.vector_state(), &VectorState::Active);
    let (paths, hits) = hybrid(&index, &embedder, "automobile", SearchOptions::default()).await;
    assert_eq!(paths, vec!["MEMORY.md"], "{hits:?}");
}

#[tokio::test]
async fn dated_notes_rank_by_recency_and_mmr_drops_near_duplicates() {
    let embedder = BucketEmbedder {
        model: "buckets-v1",
    };
    let note = "Standup notes: the release train leaves on Thursday.";
    let dir = tempfile::tempdir().unwrap();
    let index = indexed(
        dir.path(),
        &embedder,
        &[
            ("memory/2026-06-01.md", note),
            ("memory/2026-11-28.md", note),
            ("memory/2026-09-15.md", note),
        ],
    )
    .await;
    let (paths, hits) = hybrid(&index, &embedder, "release train", EVERYTHING).await;
    // Identical text: the newest note wins, and the older copies follow in recency order.
    assert_eq!(
        paths,
        vec![
            "memory/2026-11-28.md",
            "memory/2026-09-15.md",
            "memory/2026-06-01.md"
        ]
    );
    assert!(hits[0].score > hits[1].score);

    // MMR prefers a different chunk over a near-duplicate of the best one.
    let dir = tempfile::tempdir().unwrap();
    let index = indexed(
        dir.path(),
        &embedder,
        &[
            (
                "MEMORY.md",
                "The backup server is named atlas and runs nightly backups.",
            ),
            (
                "memory/copy.md",
                "The backup server is named atlas and runs nightly backups too.",
            ),
            (
                "memory/other.md",
                "Backups of laptops go to the atlas server weekly on Friday.",
            ),
        ],
    )
    .await;
    let two = SearchOptions {
        max_results: 2,
        ..EVERYTHING
    };
    let (paths, _) = hybrid(&index, &embedder, "atlas backup server", two).await;
    assert!(
        paths.contains(&String::from("memory/other.md")),
        "MMR kept both duplicates: {paths:?}"
    );
}

#[tokio::test]
async fn another_embedder_pauses_vector_search_until_a_reindex() {
    let dir = tempfile::tempdir().unwrap();
    let first = BucketEmbedder {
        model: "buckets-v1",
    };
    {
        let index = open(dir.path(), Some(&first)).await;
        index
            .upsert_file("MEMORY.md", "My car is blue.", "h", Some(&first))
            .await
            .unwrap();
        index.close().await;
    }
    let second = BucketEmbedder {
        model: "buckets-v2",
    };
    let index = open(dir.path(), Some(&second)).await;
    match index.vector_state() {
        VectorState::Paused {
            built_with,
            configured,
        } => {
            assert!(built_with.contains("buckets-v1") && configured.contains("buckets-v2"));
        }
        other => panic!("vector search should be paused, not {other:?}"),
    }
    // Keyword search still answers, and the old vectors are never compared with new ones.
    assert!(index.vector_search(&[1.0; 64], 5).is_empty());
    let hits = search(&index, "car", None, SearchOptions::default(), today())
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
}
