//! The memory index on each backend: SQLite in a real file in a tempdir, and PostgreSQL in a
//! fresh database per test on the server `GATEHOUSE_TEST_POSTGRES_URL` names (scripts/test
//! starts a throwaway one). Each contract test is one generic function; `on_both_backends!`
//! instantiates it once per backend, so both run the same assertions. The ranking tests index
//! one fixed corpus on both backends and compare the results.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod support;

use gatehouse_memory::chunk::ChunkSettings;
use gatehouse_memory::embed::EmbedError;
use gatehouse_memory::embed::Embedder;
use gatehouse_memory::embed::EmbedderKind;
use gatehouse_memory::embed::normalize;
use gatehouse_memory::index::IndexIdentity;
use gatehouse_memory::index::MemoryIndex;
use gatehouse_memory::index::VectorState;
use gatehouse_memory::search::SearchHit;
use gatehouse_memory::search::SearchOptions;
use gatehouse_memory::search::search;
use pretty_assertions::assert_eq;
use support::Target;

gatehouse_testkit::on_both_backends!(
    threads = 2;
    keyword_hits_cite_their_lines_and_a_file_is_resynced_by_hash,
    a_vector_only_hit_is_found_and_ranked_with_the_keyword_leg,
    dated_notes_rank_by_recency_and_mmr_drops_near_duplicates,
    another_embedder_pauses_vector_search_until_a_reindex,
    non_ascii_words_and_nul_characters_are_indexed_and_found,
    hostile_queries_mean_only_their_words,
    a_rebuild_is_invisible_until_it_replaces_the_index_at_once,
    an_abandoned_rebuild_leaves_the_live_index_as_it_was,
);

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

const BUCKETS: BucketEmbedder = BucketEmbedder {
    model: "buckets-v1",
};

const TODAY: &str = "memory/2026-11-29.md";

fn today() -> i64 {
    gatehouse_memory::rank::note_day(TODAY).unwrap()
}

/// Opens a fresh index with `embedder` and indexes `files` (path, text).
async fn indexed(
    target: &Target,
    embedder: Option<&BucketEmbedder>,
    files: &[(&str, &str)],
) -> MemoryIndex {
    let embedder = embedder.map(|embedder| embedder as &dyn Embedder);
    let index = target.open(embedder).await;
    for (path, text) in files {
        index.upsert_file(path, text, path, embedder).await.unwrap();
    }
    index
}

/// Runs a hybrid search for `query`; returns the paths of the hits and the hits.
async fn hybrid(
    index: &MemoryIndex,
    embedder: &BucketEmbedder,
    query: &str,
    options: SearchOptions,
) -> (Vec<String>, Vec<SearchHit>) {
    let vector = embedder.embed(&[query.to_owned()]).await.unwrap().remove(0);
    let hits = search(index, query, Some(&vector), options, today())
        .await
        .unwrap();
    (hits.iter().map(|hit| hit.path.clone()).collect(), hits)
}

/// Runs a keyword search for `query`; returns the citations of the hits.
async fn keyword(index: &MemoryIndex, query: &str, options: SearchOptions) -> Vec<String> {
    search(index, query, None, options, today())
        .await
        .unwrap_or_else(|error| panic!("searching {query:?} failed: {error:?}"))
        .into_iter()
        .map(|hit| hit.citation)
        .collect()
}

const EVERYTHING: SearchOptions = SearchOptions {
    max_results: 3,
    min_score: 0.0,
};

const ALL: SearchOptions = SearchOptions {
    max_results: 50,
    min_score: 0.0,
};

async fn keyword_hits_cite_their_lines_and_a_file_is_resynced_by_hash(target: Target) {
    let index = target.open(None).await;
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

async fn a_vector_only_hit_is_found_and_ranked_with_the_keyword_leg(target: Target) {
    let index = indexed(
        &target,
        Some(&BUCKETS),
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
    let (paths, hits) = hybrid(&index, &BUCKETS, "automobile", SearchOptions::default()).await;
    assert_eq!(paths, vec!["MEMORY.md"], "{hits:?}");
}

async fn dated_notes_rank_by_recency_and_mmr_drops_near_duplicates(target: Target) {
    let note = "Standup notes: the release train leaves on Thursday.";
    let index = indexed(
        &target,
        Some(&BUCKETS),
        &[
            ("memory/2026-06-01.md", note),
            ("memory/2026-11-28.md", note),
            ("memory/2026-09-15.md", note),
        ],
    )
    .await;
    let (paths, hits) = hybrid(&index, &BUCKETS, "release train", EVERYTHING).await;
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
    let other = target.another().await;
    let index = indexed(
        &other,
        Some(&BUCKETS),
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
    let (paths, _) = hybrid(&index, &BUCKETS, "atlas backup server", two).await;
    assert!(
        paths.contains(&String::from("memory/other.md")),
        "MMR kept both duplicates: {paths:?}"
    );
}

async fn another_embedder_pauses_vector_search_until_a_reindex(target: Target) {
    let first = BucketEmbedder {
        model: "buckets-v1",
    };
    {
        let index = target.open(Some(&first)).await;
        index
            .upsert_file("MEMORY.md", "My car is blue.", "h", Some(&first))
            .await
            .unwrap();
        index.close().await;
    }
    let second = BucketEmbedder {
        model: "buckets-v2",
    };
    let index = target.open(Some(&second)).await;
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

async fn non_ascii_words_and_nul_characters_are_indexed_and_found(target: Target) {
    let index = indexed(
        &target,
        None,
        &[
            ("memory/recipes.md", "Café au lait and crème brûlée.\n"),
            (
                "memory/trip.md",
                "Zug nach Łódź, then the Straße to İstanbul.\n",
            ),
            ("memory/cjk.md", "数据库 migration notes: 日本語 too.\n"),
            ("memory/ru.md", "Привет мир, the Cyrillic note.\n"),
            ("memory/nul.md", "alpha\0beta gamma\n"),
            ("memory/emoji.md", "Launch day 🚀 went well 🙂\n"),
        ],
    )
    .await;
    // Case and one Latin diacritic fold away on both backends, as FTS5's unicode61 does.
    for (query, path) in [
        ("cafe", "memory/recipes.md"),
        ("CAFÉ creme", "memory/recipes.md"),
        ("brulee", "memory/recipes.md"),
        ("ŁÓDŹ", "memory/trip.md"),
        ("łodz", "memory/trip.md"),
        ("istanbul", "memory/trip.md"),
        ("straße", "memory/trip.md"),
        ("数据库", "memory/cjk.md"),
        ("日本語", "memory/cjk.md"),
        ("ПРИВЕТ", "memory/ru.md"),
        ("alpha", "memory/nul.md"),
        ("beta gamma", "memory/nul.md"),
        ("launch", "memory/emoji.md"),
    ] {
        let hits = keyword(&index, query, ALL).await;
        assert_eq!(hits, vec![format!("{path}#L1-L1")], "{query}");
    }
    // Non-letters are no words: nothing to match.
    assert!(keyword(&index, "🚀 🙂", ALL).await.is_empty());
    // Ł has no diacritic to strip (it does not decompose), and ß is no "ss".
    assert!(keyword(&index, "lodz", ALL).await.is_empty());
    assert!(keyword(&index, "strasse", ALL).await.is_empty());
    let hits = search(&index, "alpha", None, ALL, today()).await.unwrap();
    assert!(hits[0].snippet.contains("beta gamma"), "{hits:?}");
    assert_eq!(index.stats().await.unwrap().files, 6);
    // A query with a NUL in it is a query of the words around it.
    assert_eq!(
        keyword(&index, "alpha\0beta", ALL).await,
        vec!["memory/nul.md#L1-L1"]
    );
}

async fn hostile_queries_mean_only_their_words(target: Target) {
    let index = indexed(
        &target,
        None,
        &[
            ("MEMORY.md", "The deploy key rotates every Monday.\n"),
            ("memory/deploys.md", "Three deploys happened on Friday.\n"),
            ("memory/key.md", "The key is in the drawer.\n"),
            (
                "memory/both.md",
                "Deploy with the key from vault: deploy early.\n",
            ),
        ],
    )
    .await;
    let plain = keyword(&index, "deploy key", ALL).await;
    assert_eq!(plain.len(), 2, "{plain:?}");
    // Operators of FTS5 and of tsquery are separators: each query means "deploy AND key".
    for query in [
        "deploy & !key",
        "deploy | key",
        "'deploy' & 'key'",
        "\"deploy\" OR key",
        "deploy:* <-> key:A",
        "(deploy) (key)",
        "deploy NOT key",
        "deploy\\' key\\",
        "-deploy ^key",
        "deploy' | 'x' & key",
        "deploy''); DROP TABLE chunks; -- key",
    ] {
        let hits = keyword(&index, query, ALL).await;
        let mut words: Vec<&str> = gatehouse_memory::terms::words(query).collect();
        words.sort_unstable();
        let expected = if words == ["deploy", "key"] {
            plain.clone()
        } else {
            // The query holds other words (OR, NOT, A, DROP, ...): it asks for more.
            Vec::new()
        };
        assert_eq!(hits, expected, "{query}");
    }
    // Prefix and negation syntax is not honoured.
    assert!(keyword(&index, "depl*", ALL).await.is_empty());
    assert!(keyword(&index, "depl:*", ALL).await.is_empty());
    // Nothing but syntax: no words, no hits, no error.
    for query in ["", "\"", "'", "&|!:*()", "<->", "\\", "''", "NEAR(", "\0"] {
        assert!(keyword(&index, query, ALL).await.is_empty(), "{query:?}");
    }
    // Very long queries: many words, and one very long word.
    let many = "deploy key ".repeat(5_000);
    assert_eq!(keyword(&index, &many, ALL).await, plain);
    let many_distinct: String = (0..2_000).map(|i| format!("word{i} ")).collect();
    assert!(keyword(&index, &many_distinct, ALL).await.is_empty());
    let long_word = "x".repeat(100_000);
    assert!(keyword(&index, &long_word, ALL).await.is_empty());
    // The tables are intact.
    assert_eq!(index.stats().await.unwrap().chunks, 4);
}

async fn a_rebuild_is_invisible_until_it_replaces_the_index_at_once(target: Target) {
    let first = BucketEmbedder {
        model: "buckets-v1",
    };
    let second = BucketEmbedder {
        model: "buckets-v2",
    };
    {
        let built = indexed(
            &target,
            Some(&first),
            &[
                ("MEMORY.md", "The deploy key rotates every Monday."),
                ("memory/old.md", "An old deploy note."),
            ],
        )
        .await;
        built.close().await;
    }
    let live = target.open(Some(&second)).await;
    assert!(matches!(live.vector_state(), VectorState::Paused { .. }));
    let identity = IndexIdentity::of(Some(&second), ChunkSettings::default());
    let fresh = live.rebuild(identity.clone()).await.unwrap();
    assert_eq!(fresh.vector_state(), &VectorState::Active);
    fresh
        .upsert_file(
            "MEMORY.md",
            "The deploy key rotates every Tuesday.",
            "h2",
            Some(&second),
        )
        .await
        .unwrap();
    // Mid-way, searches answer from the live index, whole and with its own identity.
    let before = keyword(&live, "deploy", ALL).await;
    assert_eq!(before.len(), 2, "{before:?}");
    let stats = live.stats().await.unwrap();
    assert_eq!((stats.files, stats.chunks), (2, 2));
    assert!(stats.identity.contains("buckets-v1"), "{stats:?}");
    assert_eq!(fresh.stats().await.unwrap().files, 1);

    let replaced = fresh.replace(&live).await.unwrap();
    assert_eq!(replaced.vector_state(), &VectorState::Active);
    assert_eq!(
        keyword(&replaced, "deploy", ALL).await,
        vec!["MEMORY.md#L1-L1"]
    );
    assert!(keyword(&replaced, "monday", ALL).await.is_empty());
    let stats = replaced.stats().await.unwrap();
    assert_eq!((stats.files, stats.chunks, stats.vectors), (1, 1, 1));
    assert_eq!(stats.identity, identity.key());
    let (paths, _) = hybrid(&replaced, &second, "tuesday", SearchOptions::default()).await;
    assert_eq!(paths, vec!["MEMORY.md"]);
    replaced.close().await;
    // Reopened, as after a restart: the rebuilt index, with nothing of the old one.
    let reopened = target.open(Some(&second)).await;
    assert_eq!(reopened.vector_state(), &VectorState::Active);
    assert_eq!(reopened.stats().await.unwrap(), stats);
    assert_eq!(reopened.vector_search(&[0.125; 64], 10).len(), 1);
}

async fn an_abandoned_rebuild_leaves_the_live_index_as_it_was(target: Target) {
    let live = indexed(
        &target,
        None,
        &[("MEMORY.md", "The deploy key rotates every Monday.")],
    )
    .await;
    let fresh = live
        .rebuild(IndexIdentity::of(None, ChunkSettings::default()))
        .await
        .unwrap();
    fresh
        .upsert_file("memory/new.md", "A deploy note.", "h", None)
        .await
        .unwrap();
    fresh.discard().await;
    assert_eq!(keyword(&live, "deploy", ALL).await, vec!["MEMORY.md#L1-L1"]);
    let stats = live.stats().await.unwrap();
    live.close().await;
    let reopened = target.open(None).await;
    assert_eq!(reopened.stats().await.unwrap(), stats);
    assert_eq!(
        keyword(&reopened, "deploy note", ALL).await,
        Vec::<String>::new()
    );
}

/// The fixed corpus of the ranking tests: notes with overlapping words, of different lengths,
/// some dated (for the recency factor), one longer than a chunk.
fn corpus() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = [
        (
            "MEMORY.md",
            "# Memory\n\nThe deploy key rotates every Monday.\nThe backup server is named atlas.\n",
        ),
        (
            "memory/projects.md",
            "Project garden: compost, seeds and a deploy of the irrigation timer.\n\
             The deploy script lives in ops/deploy.sh and needs the deploy key.\n",
        ),
        (
            "memory/people.md",
            "Ana owns the backup rotation. Bruno owns the deploy pipeline and the release train.\n",
        ),
        (
            "memory/2026-11-28.md",
            "Standup: the release train leaves on Thursday; the deploy key rotated early.\n",
        ),
        (
            "memory/2026-11-01.md",
            "Standup: the release train slipped a week. The atlas backup ran late.\n",
        ),
        (
            "memory/2026-09-15.md",
            "Retro: deploy, deploy, deploy. Too many manual deploys this sprint.\n",
        ),
        (
            "memory/2026-06-01.md",
            "The atlas server moved racks; backups paused for a day.\n",
        ),
        (
            "memory/infra/network.md",
            "The VPN gateway is at 10.0.0.1; the atlas server sits behind it.\n",
        ),
        (
            "memory/infra/keys.md",
            "Rotate the deploy key with vault; the old key stays valid for an hour.\n\
             Key owners: Ana, Bruno.\n",
        ),
        (
            "DREAMS.md",
            "I dreamt the release train was a real train, and the atlas server drove it.\n",
        ),
        (
            "memory/recipes.md",
            "Café au lait: coffee and hot milk. Crème brûlée needs a torch.\n",
        ),
        (
            "memory/2026-10-30-trip.md",
            "Trip to Łódź: the car was blue and the hotel had a café with a backup generator.\n",
        ),
        (
            "memory/cars.md",
            "My car is a blue automobile; the vehicle needs new tyres before winter.\n",
        ),
        (
            "memory/2026-11-20.md",
            "Deploy freeze until the atlas migration ends. Ana approves every deploy.\n",
        ),
    ]
    .iter()
    .map(|(path, text)| ((*path).to_owned(), (*text).to_owned()))
    .collect();
    let long: String = (1..=120)
        .map(|line| match line % 4 {
            0 => format!("Line {line}: the backup of the atlas server finished.\n"),
            1 => format!("Line {line}: a deploy of service {line} went out.\n"),
            2 => format!("Line {line}: nothing of note; lunch was soup.\n"),
            _ => format!("Line {line}: the release train waited for the deploy key.\n"),
        })
        .collect();
    files.push((String::from("memory/log.md"), long));
    files
}

/// The queries of the ranking tests.
const QUERIES: &[&str] = &[
    "deploy",
    "deploy key",
    "atlas server",
    "release train",
    "backup",
    "cafe",
    "Ana Bruno",
    "standup",
    "automobile",
    "the",
    "deploy deploy",
];

/// One hit as the ranking tests compare it.
#[derive(Debug)]
struct Ranked {
    citation: String,
    score: f64,
}

async fn ranked(
    index: &MemoryIndex,
    embedder: Option<&BucketEmbedder>,
    query: &str,
) -> Vec<Ranked> {
    let vector = match embedder {
        Some(embedder) => Some(embedder.embed(&[query.to_owned()]).await.unwrap().remove(0)),
        None => None,
    };
    let options = SearchOptions {
        max_results: 40,
        min_score: 0.0,
    };
    search(index, query, vector.as_deref(), options, today())
        .await
        .unwrap()
        .into_iter()
        .map(|hit| Ranked {
            citation: hit.citation,
            score: hit.score,
        })
        .collect()
}

/// Asserts that both backends gave the same hits in the same order with the same scores, and
/// returns the SQLite ones.
fn assert_same_ranking(query: &str, sqlite: Vec<Ranked>, postgres: Vec<Ranked>) -> Vec<Ranked> {
    let citations =
        |hits: &[Ranked]| -> Vec<String> { hits.iter().map(|hit| hit.citation.clone()).collect() };
    assert_eq!(
        citations(&postgres),
        citations(&sqlite),
        "the backends rank {query:?} differently"
    );
    for (left, right) in sqlite.iter().zip(&postgres) {
        // Relative: a word in most chunks scores about 1e-6 (FTS5's floor of the IDF).
        let tolerance = 1e-9 * left.score.abs().max(right.score.abs());
        assert!(
            (left.score - right.score).abs() <= tolerance,
            "{query:?}: {} scores {} on SQLite and {} on PostgreSQL",
            left.citation,
            left.score,
            right.score
        );
    }
    sqlite
}

/// The fixed corpus indexed on SQLite and on PostgreSQL. The targets are returned with the
/// indexes: a SQLite target's tempdir must outlive its index.
struct Both {
    sqlite: MemoryIndex,
    postgres: MemoryIndex,
    _targets: [Target; 2],
}

async fn both_indexed(embedder: Option<&BucketEmbedder>) -> Both {
    let files = corpus();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(path, text)| (path.as_str(), text.as_str()))
        .collect();
    let targets = [Target::sqlite(), Target::postgres().await];
    Both {
        sqlite: indexed(&targets[0], embedder, &files).await,
        postgres: indexed(&targets[1], embedder, &files).await,
        _targets: targets,
    }
}

/// Keyword-only search ranks the fixed corpus in the same order with the same scores on both
/// backends; the keyword leg itself (before recency and the cut) agrees too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyword_rankings_are_the_same_on_both_backends() {
    let Both {
        sqlite,
        postgres,
        _targets,
    } = both_indexed(None).await;
    let mut distinct_orders = 0;
    for query in QUERIES {
        let left = ranked(&sqlite, None, query).await;
        let right = ranked(&postgres, None, query).await;
        let hits = assert_same_ranking(query, left, right);
        let mut scores: Vec<u64> = hits.iter().map(|hit| hit.score.to_bits()).collect();
        scores.dedup();
        if scores.len() >= 3 {
            distinct_orders += 1;
        }
        let leg =
            |candidates: Vec<gatehouse_memory::rank::Candidate>| -> Vec<(String, u32, String)> {
                candidates
                    .into_iter()
                    .map(|c| (c.path, c.start_line, format!("{:.12}", c.keyword.unwrap())))
                    .collect()
            };
        assert_eq!(
            leg(postgres.keyword_search(query, 200).await.unwrap()),
            leg(sqlite.keyword_search(query, 200).await.unwrap()),
            "the keyword legs differ for {query:?}"
        );
    }
    assert!(
        distinct_orders >= 4,
        "the corpus should give several queries three or more distinct scores, not ties"
    );
    // The order is pinned as well, so a change both backends share does not pass unnoticed.
    let deploy_key: Vec<String> = ranked(&postgres, None, "deploy key")
        .await
        .into_iter()
        .map(|hit| hit.citation)
        .collect();
    assert_eq!(
        deploy_key,
        vec![
            "memory/infra/keys.md#L1-L2",
            "MEMORY.md#L1-L4",
            "memory/log.md#L85-L117",
            "memory/log.md#L1-L34",
            "memory/log.md#L29-L62",
            "memory/log.md#L57-L90",
            "memory/2026-11-28.md#L1-L1",
            "memory/projects.md#L1-L2",
            "memory/log.md#L112-L120",
        ]
    );
}

/// Hybrid search (vectors, keywords, recency and MMR) ranks the fixed corpus in the same order
/// with the same scores on both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_rankings_are_the_same_on_both_backends() {
    let Both {
        sqlite,
        postgres,
        _targets,
    } = both_indexed(Some(&BUCKETS)).await;
    assert_eq!(postgres.vector_state(), &VectorState::Active);
    for query in QUERIES {
        let left = ranked(&sqlite, Some(&BUCKETS), query).await;
        let right = ranked(&postgres, Some(&BUCKETS), query).await;
        assert!(!left.is_empty(), "{query:?} found nothing");
        assert_same_ranking(query, left, right);
    }
    // A vector-only hit ranks the same: "automobile" shares no word with the cars note.
    let automobile = ranked(&postgres, Some(&BUCKETS), "vehicle automobile")
        .await
        .into_iter()
        .map(|hit| hit.citation)
        .collect::<Vec<_>>();
    assert_eq!(
        automobile.first().map(String::as_str),
        Some("memory/cars.md#L1-L1")
    );
}

/// An index copied from one backend to the other with its stored chunks and vectors searches
/// the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_copied_between_backends_searches_the_same() {
    let Both {
        sqlite,
        postgres,
        _targets,
    } = both_indexed(Some(&BUCKETS)).await;
    for (source, target) in [
        (&sqlite, Target::postgres().await),
        (&postgres, Target::sqlite()),
    ] {
        let copy = target.open(Some(&BUCKETS)).await;
        let files = source.stored_files().await.unwrap();
        assert_eq!(files.len(), corpus().len());
        for file in &files {
            copy.restore_file(file).await.unwrap();
        }
        assert_eq!(copy.stored_files().await.unwrap(), files);
        assert_eq!(copy.stats().await.unwrap(), source.stats().await.unwrap());
        for query in QUERIES {
            let left = ranked(source, Some(&BUCKETS), query).await;
            let right = ranked(&copy, Some(&BUCKETS), query).await;
            assert_same_ranking(query, left, right);
        }
    }
}

mod postgres_only {
    use gatehouse_memory::index::IndexError;
    use pretty_assertions::assert_eq;
    use sqlx::Connection;

    use super::ALL;
    use super::keyword;
    use super::support::Target;

    /// A connection lost in the middle of writing a file is `Unavailable` and leaves nothing of
    /// the file; the pool reconnects on the next call, and a search after the server dropped
    /// every connection answers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lost_connection_is_unavailable_writes_nothing_and_the_pool_reconnects() {
        let target = Target::postgres().await;
        let index = target.open(None).await;
        index
            .upsert_file("MEMORY.md", "The deploy key rotates.\n", "h1", None)
            .await
            .unwrap();
        let mut admin = sqlx::PgConnection::connect(target.postgres_url())
            .await
            .unwrap();
        sqlx::raw_sql(
            "CREATE FUNCTION gatehouse_memory.lose_connection() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN \
                 IF NEW.text LIKE '%doomed%' THEN \
                     PERFORM pg_terminate_backend(pg_backend_pid()); \
                 END IF; \
                 RETURN NEW; \
             END $$; \
             CREATE TRIGGER lose_connection BEFORE INSERT ON gatehouse_memory.chunks \
                 FOR EACH ROW EXECUTE FUNCTION gatehouse_memory.lose_connection();",
        )
        .execute(&mut admin)
        .await
        .unwrap();
        let error = index
            .upsert_file(
                "memory/doomed.md",
                "first line\n\nthe doomed note\n",
                "h2",
                None,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                gatehouse_memory::MemoryError::Index(IndexError::Unavailable(_))
            ),
            "{error:?}"
        );
        let hashes = index.file_hashes().await.unwrap();
        assert_eq!(hashes.len(), 1, "a half-written file stayed: {hashes:?}");
        assert_eq!(index.stats().await.unwrap().chunks, 1);
        // Every connection of the index dropped by the server: the next search reconnects.
        sqlx::raw_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .execute(&mut admin)
        .await
        .unwrap();
        assert_eq!(
            keyword(&index, "deploy", ALL).await,
            vec!["MEMORY.md#L1-L1"]
        );
        index
            .upsert_file("memory/fine.md", "A fine deploy note.\n", "h3", None)
            .await
            .unwrap();
        assert_eq!(index.stats().await.unwrap().files, 2);
    }

    /// Gateways opening one database at once migrate one after the other and agree on the live
    /// generation.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn indexes_opening_at_once_share_one_generation() {
        let target = std::sync::Arc::new(Target::postgres().await);
        let mut opens = Vec::new();
        for _ in 0..6 {
            let target = std::sync::Arc::clone(&target);
            opens.push(tokio::spawn(async move {
                let index = target.open(None).await;
                index
                    .upsert_file("MEMORY.md", "The deploy key.\n", "h", None)
                    .await
                    .unwrap();
                format!("{index:?}")
            }));
        }
        let mut seen = std::collections::BTreeSet::new();
        for open in opens {
            seen.insert(open.await.unwrap());
        }
        assert_eq!(seen.len(), 1, "{seen:?}");
        let index = target.open(None).await;
        assert_eq!(index.stats().await.unwrap().files, 1);
    }

    /// An unreachable server is `Unavailable` at open, promptly.
    #[tokio::test]
    async fn an_unreachable_server_is_unavailable() {
        use std::str::FromStr;
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let options = sqlx::postgres::PgConnectOptions::from_str(&format!(
            "postgres://gatehouse@127.0.0.1:{port}/gatehouse"
        ))
        .unwrap();
        let chunking = gatehouse_memory::chunk::ChunkSettings::default();
        let error = gatehouse_memory::index::MemoryIndex::open(
            &gatehouse_memory::index::IndexLocation::Postgres(Box::new(options)),
            gatehouse_memory::index::IndexIdentity::of(None, chunking),
            chunking,
        )
        .await
        .unwrap_err();
        assert!(matches!(error, IndexError::Unavailable(_)), "{error:?}");
    }
}
