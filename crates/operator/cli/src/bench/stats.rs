//! Timing samples, percentiles and the report every benchmark prints.

use std::time::Duration;
use std::time::Instant;

/// Percentiles of a set of timed samples.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) samples: usize,
}

impl Stats {
    /// Returns the percentiles of `samples` (which it sorts).
    pub(crate) fn from_samples(samples: &mut [Duration]) -> Self {
        samples.sort_unstable();
        let pick = |fraction: f64| {
            let index = ((samples.len().saturating_sub(1)) as f64 * fraction).round() as usize;
            samples.get(index).copied().unwrap_or_default()
        };
        Self {
            p50: pick(0.50),
            p99: pick(0.99),
            samples: samples.len(),
        }
    }
}

/// Runs `baseline` and `candidate` alternately `iterations` times each, so that drift in the
/// machine's speed affects both alike, and returns their statistics.
pub(crate) fn compare(
    iterations: usize,
    mut baseline: impl FnMut() -> anyhow::Result<()>,
    mut candidate: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<(Stats, Stats)> {
    let mut baseline_samples = Vec::with_capacity(iterations);
    let mut candidate_samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        baseline()?;
        baseline_samples.push(started.elapsed());
        let started = Instant::now();
        candidate()?;
        candidate_samples.push(started.elapsed());
    }
    Ok((
        Stats::from_samples(&mut baseline_samples),
        Stats::from_samples(&mut candidate_samples),
    ))
}

/// One measured figure against its baseline.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) case: String,
    pub(crate) baseline_name: String,
    pub(crate) baseline: Stats,
    pub(crate) candidate: Stats,
    pub(crate) target: String,
}

impl Row {
    /// Returns candidate p50 / baseline p50.
    pub(crate) fn ratio(&self) -> f64 {
        let baseline = self.baseline.p50.as_secs_f64();
        match baseline > 0.0 {
            true => self.candidate.p50.as_secs_f64() / baseline,
            false => f64::NAN,
        }
    }

    /// Returns candidate p50 − baseline p50, in microseconds (negative when faster).
    pub(crate) fn extra_micros(&self) -> f64 {
        (self.candidate.p50.as_secs_f64() - self.baseline.p50.as_secs_f64()) * 1e6
    }
}

/// What a benchmark prints.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) title: String,
    pub(crate) rows: Vec<Row>,
    pub(crate) notes: Vec<String>,
}

impl Report {
    /// Renders the report as an aligned text table.
    pub(crate) fn to_table(&self) -> String {
        let mut out = format!("{}\n", self.title);
        out.push_str(&format!(
            "{:<34} {:>12} {:>12} {:>12} {:>12} {:>8} {:>11}  {}\n",
            "case", "baseline p50", "p50", "p99", "baseline p99", "ratio", "extra", "target"
        ));
        for row in &self.rows {
            out.push_str(&format!(
                "{:<34} {:>12} {:>12} {:>12} {:>12} {:>7.2}x {:>9.1}µs  {}\n",
                row.case,
                human(row.baseline.p50),
                human(row.candidate.p50),
                human(row.candidate.p99),
                human(row.baseline.p99),
                row.ratio(),
                row.extra_micros(),
                row.target,
            ));
        }
        for note in &self.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        out.trim_end().to_owned()
    }

    /// Returns the report as JSON, durations in nanoseconds.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|row| {
                serde_json::json!({
                    "case": row.case,
                    "baseline": row.baseline_name,
                    "baselineP50Ns": row.baseline.p50.as_nanos() as u64,
                    "baselineP99Ns": row.baseline.p99.as_nanos() as u64,
                    "p50Ns": row.candidate.p50.as_nanos() as u64,
                    "p99Ns": row.candidate.p99.as_nanos() as u64,
                    "samples": row.candidate.samples,
                    "ratio": row.ratio(),
                    "extraMicros": row.extra_micros(),
                    "target": row.target,
                })
            })
            .collect();
        serde_json::json!({"benchmark": self.title, "rows": rows, "notes": self.notes})
    }
}

/// Formats a duration with a unit that keeps three significant digits.
pub(crate) fn human(duration: Duration) -> String {
    let nanos = duration.as_nanos() as f64;
    if nanos < 1e3 {
        format!("{nanos:.0}ns")
    } else if nanos < 1e6 {
        format!("{:.2}µs", nanos / 1e3)
    } else if nanos < 1e9 {
        format!("{:.2}ms", nanos / 1e6)
    } else {
        format!("{:.2}s", nanos / 1e9)
    }
}
