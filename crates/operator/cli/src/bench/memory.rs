//! `gatehouse bench memory`: the memory index on a generated corpus of 2,000 notes (about 20,000
//! chunks): full index time, the incremental update of one changed file, and keyword and hybrid
//! query latencies, each against a brute-force scan of the same data in the same run. Then,
//! end to end on an embedded Gateway and node, the time from writing a note on the Harness to
//! finding it with `/v1/memory/search`.
//!
//! Vectors come from a deterministic 384-dimension feature-hashing embedder, so the figures
//! measure the index and not the model; `--local-model DIR` adds the cost of embedding one query
//! with all-MiniLM-L6-v2.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use gatehouse_api::client::Client;
use gatehouse_api::memory::MemorySearchQuery;
use gatehouse_memory::chunk::ChunkSettings;
use gatehouse_memory::embed::EmbedError;
use gatehouse_memory::embed::Embedder;
use gatehouse_memory::embed::EmbedderKind;
use gatehouse_memory::index::IndexIdentity;
use gatehouse_memory::index::MemoryIndex;
use gatehouse_memory::search::SearchOptions;

use crate::bench::stats::Report;
use crate::bench::stats::Row;
use crate::bench::stats::Stats;

/// Arguments of `gatehouse bench memory`.
#[derive(Debug, clap::Args)]
pub(crate) struct MemoryBenchArgs {
    /// Notes in the generated corpus.
    #[arg(long, default_value_t = 2000)]
    notes: usize,
    /// Queries of each kind.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Also time one query embedding with the local model in this directory.
    #[arg(long, value_name = "DIR")]
    local_model: Option<PathBuf>,
}

/// A fast deterministic embedder: words hashed into 384 buckets, normalised.
struct HashEmbedder;

const DIMENSIONS: usize = 384;

fn hash_vector(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0_f32; DIMENSIONS];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
    {
        let hash = word.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
        vector[(hash % DIMENSIONS as u64) as usize] += 1.0;
    }
    gatehouse_memory::embed::normalize(vector)
}

#[async_trait::async_trait]
impl Embedder for HashEmbedder {
    fn kind(&self) -> EmbedderKind {
        EmbedderKind::Local
    }
    fn model(&self) -> &str {
        "bench-feature-hashing-384"
    }
    fn dimensions(&self) -> usize {
        DIMENSIONS
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|text| hash_vector(text)).collect())
    }
}

/// A deterministic word generator (xorshift over a synthetic vocabulary).
struct Words {
    state: u64,
}

impl Words {
    fn next(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    fn word(&mut self) -> String {
        const SYLLABLES: [&str; 16] = [
            "ka", "lo", "mi", "ner", "ta", "vo", "su", "rin", "pe", "dak", "zu", "ol", "bri", "e",
            "sha", "mon",
        ];
        // About 4,000 distinct words, Zipf-like: small ids are common.
        let id = (self.next() % 4000).min(self.next() % 4000);
        let mut word = String::new();
        let mut rest = id + 16;
        while rest > 0 {
            word.push_str(SYLLABLES[(rest % 16) as usize]);
            rest /= 16;
        }
        word
    }

    fn note(&mut self, chars: usize) -> String {
        let mut text = String::with_capacity(chars + 100);
        while text.len() < chars {
            let words = 8 + (self.next() % 10) as usize;
            let line: Vec<String> = (0..words).map(|_| self.word()).collect();
            text.push_str(&line.join(" "));
            text.push_str(".\n");
        }
        text
    }
}

/// Runs the benchmark.
pub(crate) fn run(args: &MemoryBenchArgs) -> anyhow::Result<Report> {
    crate::signals::runtime()?.block_on(measure(args))
}

async fn measure(args: &MemoryBenchArgs) -> anyhow::Result<Report> {
    let temp = tempfile::tempdir()?;
    let chunking = ChunkSettings::default();
    let embedder = HashEmbedder;
    let index = MemoryIndex::open(
        &gatehouse_memory::index::IndexLocation::File(temp.path().join("memory.db")),
        IndexIdentity::of(Some(&embedder), chunking),
        chunking,
    )
    .await?;
    let mut words = Words {
        state: 0x9e37_79b9_7f4a_7c15,
    };
    let notes: Vec<(String, String)> = (0..args.notes)
        .map(|n| {
            let path = if n % 2 == 0 {
                format!(
                    "memory/2026-{:02}-{:02}-note-{n}.md",
                    1 + n % 12,
                    1 + n % 28
                )
            } else {
                format!("memory/topics/note-{n}.md")
            };
            (path, words.note(12_000))
        })
        .collect();
    crate::output::line(&format!(
        "indexing {} notes ({} MB of text)…",
        notes.len(),
        notes.iter().map(|(_, text)| text.len()).sum::<usize>() / 1_000_000
    ));
    let started = Instant::now();
    for (path, text) in &notes {
        index.upsert_file(path, text, path, Some(&embedder)).await?;
    }
    let full_index = started.elapsed();
    let chunks = index.stats().await?.chunks;

    // The brute-force baseline holds the same chunks in memory.
    let corpus: Vec<(String, Vec<f32>)> = notes
        .iter()
        .flat_map(|(_, text)| gatehouse_memory::chunk::chunk_lines(text, chunking))
        .map(|chunk| {
            let vector = hash_vector(&chunk.text);
            (chunk.text.to_lowercase(), vector)
        })
        .collect();

    // One changed file.
    let (changed_path, changed_text) = &notes[notes.len() / 2];
    let changed_text = format!("{changed_text}\nzzbenchmarker appears once.\n");
    let started = Instant::now();
    index
        .upsert_file(changed_path, &changed_text, "changed", Some(&embedder))
        .await?;
    let incremental = started.elapsed();
    let started = Instant::now();
    let lowered = changed_text.to_lowercase();
    let vectors: Vec<Vec<f32>> = gatehouse_memory::chunk::chunk_lines(&lowered, chunking)
        .iter()
        .map(|chunk| hash_vector(&chunk.text))
        .collect();
    std::hint::black_box(vectors);
    let rescan_one = started.elapsed();

    let queries: Vec<String> = (0..args.queries)
        .map(|_| format!("{} {}", words.word(), words.word()))
        .collect();
    let options = SearchOptions::default();
    let mut keyword = Vec::new();
    let mut hybrid = Vec::new();
    let mut brute_keyword = Vec::new();
    let mut brute_hybrid = Vec::new();
    for query in &queries {
        let started = Instant::now();
        gatehouse_memory::search::search(&index, query, None, options, 20_786).await?;
        keyword.push(started.elapsed());
        let started = Instant::now();
        let vector = hash_vector(query);
        gatehouse_memory::search::search(&index, query, Some(&vector), options, 20_786).await?;
        hybrid.push(started.elapsed());
        let terms: Vec<String> = query.split(' ').map(str::to_lowercase).collect();
        let started = Instant::now();
        let matched = corpus
            .iter()
            .filter(|(text, _)| terms.iter().all(|term| text.contains(term.as_str())))
            .count();
        brute_keyword.push(started.elapsed());
        let started = Instant::now();
        let mut best = corpus
            .iter()
            .map(|(text, candidate)| {
                let keyword_hit = terms.iter().all(|term| text.contains(term.as_str()));
                0.7 * f64::from(gatehouse_memory::rank::dot(candidate, &vector))
                    + if keyword_hit { 0.3 } else { 0.0 }
            })
            .collect::<Vec<f64>>();
        best.sort_by(|a, b| b.total_cmp(a));
        brute_hybrid.push(started.elapsed());
        std::hint::black_box((matched, best.first().copied()));
    }
    let end_to_end = end_to_end().await?;

    let mut notes_out = vec![
        format!(
            "corpus: {} notes, {chunks} chunks; full index {:.1} s (one upsert per file, hashing embedder)",
            notes.len(),
            full_index.as_secs_f64()
        ),
        format!(
            "end to end (embedded Gateway and node): a note written on the Harness was found by /v1/memory/search after {:.2} s (target < 2 s; the watch debounce is 1.5 s)",
            end_to_end.as_secs_f64()
        ),
        String::from(
            "brute force: every chunk held in memory, lowercase substring match for keywords, and a full dot-product scan for vectors",
        ),
    ];
    #[cfg(feature = "local-embedder")]
    if let Some(dir) = &args.local_model {
        let model = gatehouse_memory::local::LocalEmbedder::load(dir)?;
        let mut samples = Vec::new();
        for query in queries.iter().take(50) {
            let started = Instant::now();
            model.embed(std::slice::from_ref(query)).await?;
            samples.push(started.elapsed());
        }
        let stats = Stats::from_samples(&mut samples);
        notes_out.push(format!(
            "embedding one query with all-MiniLM-L6-v2 adds p50 {:?}, p99 {:?}",
            stats.p50, stats.p99
        ));
    }
    let row = |case: &str,
               baseline_name: &str,
               baseline: &mut Vec<Duration>,
               candidate: &mut Vec<Duration>,
               target: &str| Row {
        case: String::from(case),
        baseline_name: String::from(baseline_name),
        baseline: Stats::from_samples(baseline),
        candidate: Stats::from_samples(candidate),
        target: String::from(target),
    };
    Ok(Report {
        title: format!("gatehouse bench memory: {chunks} chunks"),
        rows: vec![
            row(
                "keyword query (FTS5)",
                "brute-force substring scan",
                &mut brute_keyword,
                &mut keyword,
                "informational",
            ),
            row(
                "hybrid query (FTS5 + vectors, MMR)",
                "brute-force keyword + vector scan",
                &mut brute_hybrid,
                &mut hybrid,
                "p50 < 10ms",
            ),
            row(
                "incremental update of one file",
                "re-chunking and embedding that file alone",
                &mut vec![rescan_one],
                &mut vec![incremental],
                "informational",
            ),
        ],
        notes: notes_out,
    })
}

/// Writes a note on an embedded Harness and returns how long until search finds it.
async fn end_to_end() -> anyhow::Result<Duration> {
    let temp = tempfile::tempdir()?;
    let base = temp.path().canonicalize()?;
    let mut config = crate::bench::gateway_config(base.join("gateway"))?;
    config.memory_embedder = Some(EmbedderKind::Local);
    let extensions = gatehouse_gateway::Extensions {
        memory_embedder: Some(Arc::new(HashEmbedder)),
        ..gatehouse_gateway::Extensions::default()
    };
    let running = crate::embedded::start_gateway_with(config, extensions).await?;
    let url = format!("http://{}", running.local_addr);
    let shutdown = gatehouse_harness::CancellationToken::new();
    let node = crate::embedded::start_node(
        &running,
        &base.join("harness"),
        gatehouse_harness::host::Runtime::Native,
        gatehouse_harness::host::RuntimeConfig::default(),
        shutdown.clone(),
    )
    .await?;
    let client = Client::new(&url, crate::bench::turn::BENCH_TOKEN);
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.memory_status().await?.stale {
        anyhow::ensure!(Instant::now() < deadline, "the memory index never synced");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let written = Instant::now();
    std::fs::write(
        base.join("harness/workspace/MEMORY.md"),
        "The benchmark marker is quillfeather.\n",
    )?;
    let query = MemorySearchQuery {
        q: Some(String::from("quillfeather")),
        ..MemorySearchQuery::default()
    };
    loop {
        if !client.memory_search(&query).await?.results.is_empty() {
            break;
        }
        anyhow::ensure!(
            written.elapsed() < Duration::from_secs(30),
            "the note was never found"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = written.elapsed();
    shutdown.cancel();
    let _ = node.task.await;
    running.shutdown.cancel();
    let _ = running.wait().await;
    Ok(took)
}
