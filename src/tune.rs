//! `dedup-stream tune`: which settings suit a user's own data, measured on
//! a labelled sample of it.
//!
//! A sample is JSON lines in stream order, and for each line the cluster it
//! belongs to (its copies are the other lines of the cluster): either in a
//! field of the line, or as a TSV of one row per line, the truth files of
//! the synthetic streams (see [`read_truth`]). The engine itself (a
//! [`Deduper`] deciding the lines in order, as the filter does) runs once
//! per point of a grid of thresholds, measures and shingle choices, and
//! each run is scored as `score.py` scores the filter's output ([`score`]),
//! so that the figures are the ones the filter's output would get.
//!
//! The lines are decoded once, and shingled once per shingle choice; a run
//! only derives the LSH band keys of its threshold from the shingles (as a
//! state file's load does) and decides. Runs go in parallel, each with its
//! own engine.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::BufRead;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::engine::config::ConfigError;
use crate::engine::config::{EngineConfig, Measure, Shingling};
use crate::engine::sketch::Sketcher;
use crate::engine::{Ask, Deduper, IndexStore, Op, Preparer, Scratch, Sketch, Verdict, lsh_params};
use crate::wire::record::{Decoder, FieldSpec, MessageId};

/// Why a sample cannot be tuned on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TuneError {
    /// Reading a file failed.
    #[error("reading {what}: {source}")]
    Io {
        /// Which file.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The truth file is not what [`read_truth`] reads.
    #[error("the truth file {0}")]
    Truth(String),
    /// A line's label is missing or not a string or a number.
    #[error("line {line}: {reason}")]
    Label {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The truth file and the data do not have one row per line.
    #[error(
        "the data has {data} lines but the truth file {truth} rows: they must pair line for row"
    )]
    Lengths {
        /// Lines of data.
        data: usize,
        /// Rows of truth.
        truth: usize,
    },
    /// A grid point's settings are not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Where each line's cluster is.
#[derive(Clone, Debug)]
pub enum Labels {
    /// In a field of the line (a dotted path), a string or a number.
    Field(String),
    /// In the rows of a truth TSV (see [`read_truth`]), one per line.
    Truth(Vec<Option<String>>),
}

/// Reads a truth TSV as `score.py` does: a header row naming the columns,
/// then one row per line of the data, in order. The `cluster` column is the
/// line's cluster; an optional `kind` column of `invalid` marks a line that
/// is expected to be refused (`None`: not scored). Other columns (`line`,
/// `id_str`, `ctype`) are ignored.
pub fn read_truth(reader: impl BufRead) -> Result<Vec<Option<String>>, TuneError> {
    let mut lines = reader.lines();
    let io = |source| TuneError::Io {
        what: "the truth file".into(),
        source,
    };
    let header = match lines.next() {
        Some(line) => line.map_err(io)?,
        None => return Err(TuneError::Truth("is empty".into())),
    };
    let columns: Vec<&str> = header.trim_end_matches('\r').split('\t').collect();
    let at = |name: &str| columns.iter().position(|c| *c == name);
    let cluster = at("cluster").ok_or_else(|| {
        TuneError::Truth(format!(
            "has no `cluster` column in its header (found: {})",
            columns.join(", ")
        ))
    })?;
    let kind = at("kind");
    let mut rows = Vec::new();
    for (n, line) in lines.enumerate() {
        let line = line.map_err(io)?;
        let fields: Vec<&str> = line.trim_end_matches('\r').split('\t').collect();
        let label = fields
            .get(cluster)
            .ok_or_else(|| TuneError::Truth(format!("row {}: no `cluster` value", n + 2)))?;
        let invalid = kind.and_then(|k| fields.get(k)) == Some(&"invalid");
        rows.push((!invalid).then(|| label.to_string()));
    }
    Ok(rows)
}

/// One message of a sample.
#[derive(Debug)]
struct Message {
    id: MessageId,
    text: String,
    urls: Vec<(String, String)>,
    time: i64,
    /// The cluster, as a number in order of first appearance.
    cluster: u32,
}

/// A labelled sample, decoded.
#[derive(Debug)]
pub struct Sample {
    messages: Vec<Message>,
    /// Lines not scored: refused by the decoder, or marked invalid.
    pub skipped: usize,
}

impl Sample {
    /// Decodes `data` (JSON lines) with `fields` and pairs each line with
    /// its label. Blank lines, lines the filter would refuse and lines the
    /// truth marks invalid are skipped (counted in [`Sample::skipped`]), as
    /// `score.py` leaves them out.
    pub fn load(data: &[u8], fields: FieldSpec, labels: &Labels) -> Result<Sample, TuneError> {
        let decoder = Decoder::new(fields);
        let lines: Vec<&[u8]> = data
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .collect();
        // A final newline ends the last line; it does not start another.
        let lines = match lines.split_last() {
            Some((&[], rest)) => rest,
            _ => &lines[..],
        };
        if let Labels::Truth(rows) = labels
            && rows.len() < lines.len()
        {
            return Err(TuneError::Lengths {
                data: lines.len(),
                truth: rows.len(),
            });
        }
        let mut clusters: HashMap<String, u32> = HashMap::new();
        let mut messages = Vec::new();
        let mut skipped = 0;
        let arrival = crate::wire::timestamp::now_millis();
        for (n, line) in lines.iter().enumerate() {
            // The filter passes over blank lines; the truth still has a row.
            if line.iter().all(u8::is_ascii_whitespace) {
                skipped += 1;
                continue;
            }
            let label = match labels {
                Labels::Truth(rows) => rows[n].clone(),
                Labels::Field(path) => Some(field_label(line, path, n + 1)?),
            };
            let (Some(label), Ok(record)) = (label, decoder.decode(line)) else {
                skipped += 1;
                continue;
            };
            let next = clusters.len() as u32;
            let cluster = *clusters.entry(label).or_insert(next);
            messages.push(Message {
                id: record.id.clone(),
                time: record.created_at_millis().unwrap_or(arrival),
                text: record.text.into_owned(),
                urls: record
                    .urls
                    .iter()
                    .map(|(short, long)| (short.to_string(), long.to_string()))
                    .collect(),
                cluster,
            });
        }
        Ok(Sample { messages, skipped })
    }

    /// Messages scored.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether it has no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Messages that have an earlier message of their cluster: what a
    /// perfect run tags duplicate.
    pub fn true_duplicates(&self) -> usize {
        let mut seen = std::collections::HashSet::new();
        self.messages
            .iter()
            .filter(|m| !seen.insert(m.cluster))
            .count()
    }
}

/// A line's label in the field at `path`: a string, or a number as written.
fn field_label(line: &[u8], path: &str, number: usize) -> Result<String, TuneError> {
    let bad = |reason: String| TuneError::Label {
        line: number,
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| bad(format!("not JSON: {e}")))?;
    let mut at = &value;
    for part in path.split('.') {
        at = at
            .get(part)
            .ok_or_else(|| bad(format!("no label field {path}")))?;
    }
    match at {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        other => Err(bad(format!(
            "the label {path} is {other}, not a string or a number"
        ))),
    }
}

/// The figures of one run, as `score.py` counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Scores {
    /// Messages tagged duplicate (of a message of the sample).
    pub tagged: usize,
    /// Tagged duplicates whose `duplicate_of` is of their own cluster.
    pub correct: usize,
    /// Messages with an earlier message of their cluster.
    pub true_duplicates: usize,
    /// Of those, the ones tagged duplicate.
    pub hits: usize,
    /// `correct / tagged` (1 when nothing is tagged).
    pub precision: f64,
    /// `hits / true_duplicates` (1 when there are none).
    pub recall: f64,
    /// The harmonic mean of the two.
    pub f1: f64,
}

/// Scores a run as `score.py` does: `clusters[i]` is message `i`'s cluster,
/// `targets[i]` the message its `duplicate_of` names (`None`: tagged new).
pub fn score(clusters: &[u32], targets: &[Option<usize>]) -> Scores {
    let mut seen = std::collections::HashSet::new();
    let mut s = Scores::default();
    for (i, &cluster) in clusters.iter().enumerate() {
        let is_duplicate = !seen.insert(cluster);
        let target = targets.get(i).copied().flatten();
        if let Some(j) = target {
            s.tagged += 1;
            s.correct += usize::from(clusters[j] == cluster);
        }
        if is_duplicate {
            s.true_duplicates += 1;
            s.hits += usize::from(target.is_some());
        }
    }
    s.precision = if s.tagged == 0 {
        1.0
    } else {
        s.correct as f64 / s.tagged as f64
    };
    s.recall = if s.true_duplicates == 0 {
        1.0
    } else {
        s.hits as f64 / s.true_duplicates as f64
    };
    s.f1 = if s.precision + s.recall == 0.0 {
        0.0
    } else {
        2.0 * s.precision * s.recall / (s.precision + s.recall)
    };
    s
}

/// The settings a grid varies; the rest come from the base config.
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    /// Thresholds, each in (0, 1].
    pub thresholds: Vec<f64>,
    /// Measures.
    pub measures: Vec<Measure>,
    /// Shingle choices.
    pub shingles: Vec<Shingling>,
}

impl Grid {
    /// The default grid: thresholds 0.5 to 0.95 by 0.05, both measures,
    /// and the shingle choices that matter for short texts (word 1-2, 2
    /// and 3-grams, word 1-3 grams, character 5-grams); with the base's
    /// own settings added when they are not among them.
    pub fn around(base: &EngineConfig) -> Grid {
        Grid {
            thresholds: (10..=19).map(|t| f64::from(t) * 0.05).collect(),
            measures: vec![Measure::Containment, Measure::Jaccard],
            shingles: vec![
                Shingling::WordsUpTo(2),
                Shingling::Words(2),
                Shingling::Words(3),
                Shingling::WordsUpTo(3),
                Shingling::Chars(5),
            ],
        }
        .with(base)
    }

    /// The grid with the base's threshold, measure and shingling in it
    /// (added if missing), so that the base is always one of its points.
    pub fn with(mut self, base: &EngineConfig) -> Grid {
        // Thresholds as printed (two decimals at most in a grid): 0.8 and
        // 0.1 * 8 are one threshold.
        for t in &mut self.thresholds {
            *t = (*t * 10_000.0).round() / 10_000.0;
        }
        if !self.thresholds.contains(&base.threshold) {
            self.thresholds.push(base.threshold);
        }
        self.thresholds.sort_by(f64::total_cmp);
        self.thresholds.dedup();
        if !self.measures.contains(&base.measure) {
            self.measures.insert(0, base.measure);
        }
        if !self.shingles.contains(&base.shingling) {
            self.shingles.insert(0, base.shingling);
        }
        self
    }

    /// Runs it takes.
    pub fn len(&self) -> usize {
        self.thresholds.len() * self.measures.len() * self.shingles.len()
    }

    /// Whether it has no point.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One run: the settings and how they scored.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The shingle choice.
    pub shingling: Shingling,
    /// The measure.
    pub measure: Measure,
    /// The threshold.
    pub threshold: f64,
    /// The figures.
    pub scores: Scores,
}

/// A message's threshold-free sketch: its shingles and anchor keys.
struct Shingled {
    shingles: Vec<u32>,
    anchors: Vec<u32>,
    set_fingerprint: u64,
    truncated: bool,
}

/// Runs the engine over the sample at every point of the grid (the other
/// settings from `base`), `threads` runs at a time; points in the grid's
/// order: by shingle choice, then measure, then threshold.
pub fn run(
    sample: &Sample,
    base: &EngineConfig,
    grid: &Grid,
    threads: usize,
) -> Result<Vec<Point>, TuneError> {
    let mut configs = Vec::with_capacity(grid.len());
    for &shingling in &grid.shingles {
        for &measure in &grid.measures {
            for &threshold in &grid.thresholds {
                let config = EngineConfig {
                    shingling,
                    measure,
                    threshold,
                    ..base.clone()
                };
                config.validate()?;
                configs.push(config);
            }
        }
    }
    // Shingled once per choice, in parallel too.
    let shingled: Vec<Vec<Shingled>> = parallel(grid.shingles.len(), threads, |at| {
        shingle_sample(
            sample,
            &EngineConfig {
                shingling: grid.shingles[at],
                ..base.clone()
            },
        )
    });
    let clusters: Vec<u32> = sample.messages.iter().map(|m| m.cluster).collect();
    let per_choice = grid.measures.len() * grid.thresholds.len();
    let runs = parallel(configs.len(), threads, |at| {
        let config = &configs[at];
        let targets = decide(sample, &shingled[at / per_choice], config)?;
        Ok::<_, TuneError>(Point {
            shingling: config.shingling,
            measure: config.measure,
            threshold: config.threshold,
            scores: score(&clusters, &targets),
        })
    });
    runs.into_iter().collect()
}

/// `f(0..n)`, on up to `threads` threads, in order.
fn parallel<T: Send>(n: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, T)>> = Mutex::new(Vec::with_capacity(n));
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, n.max(1)) {
            scope.spawn(|| {
                loop {
                    let at = next.fetch_add(1, Ordering::Relaxed);
                    if at >= n {
                        break;
                    }
                    let result = f(at);
                    done.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((at, result));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_by_key(|(at, _)| *at);
    done.into_iter().map(|(_, result)| result).collect()
}

/// Every message's sketch under `config`'s shingling, less its band keys.
fn shingle_sample(sample: &Sample, config: &EngineConfig) -> Vec<Shingled> {
    let preparer = Preparer::new(config);
    let bands = preparer.lsh_params().bands;
    let mut scratch = Scratch::default();
    sample
        .messages
        .iter()
        .map(|m| {
            let urls: Vec<(Cow<'_, str>, Cow<'_, str>)> = m
                .urls
                .iter()
                .map(|(s, l)| (Cow::Borrowed(s.as_str()), Cow::Borrowed(l.as_str())))
                .collect();
            let sketch = preparer.sketch(&m.text, &urls, &mut scratch);
            Shingled {
                anchors: sketch.band_keys.get(bands..).unwrap_or_default().to_vec(),
                shingles: sketch.shingles,
                set_fingerprint: sketch.set_fingerprint,
                truncated: sketch.truncated,
            }
        })
        .collect()
}

/// Messages handed to the engine at a time, as the filter batches them.
const BATCH: usize = 512;

/// Decides the sample in order with a fresh engine; for each message, the
/// message its `duplicate_of` names (the latest earlier message of that
/// id, as `score.py` looks ids up), or `None` when it is new.
fn decide(
    sample: &Sample,
    shingled: &[Shingled],
    config: &EngineConfig,
) -> Result<Vec<Option<usize>>, TuneError> {
    let mut deduper = Deduper::new(config.clone())?;
    let sketcher = Sketcher::new(lsh_params(config));
    let refuses_empty = deduper.preparer().refuses_empty();
    let mut latest: HashMap<&MessageId, usize> = HashMap::with_capacity(sample.len());
    let mut targets = Vec::with_capacity(sample.len());
    let mut band_keys: Vec<Vec<u32>> = Vec::new();
    let mut mixed = Vec::new();
    let mut verdicts = Vec::with_capacity(BATCH);
    for (start, chunk) in shingled.chunks(BATCH).enumerate() {
        let start = start * BATCH;
        band_keys.resize_with(chunk.len(), Vec::new);
        for (keys, s) in band_keys.iter_mut().zip(chunk) {
            keys.clear();
            if !s.shingles.is_empty() {
                sketcher.band_keys(&s.shingles, &mut mixed, keys);
            }
            keys.extend_from_slice(&s.anchors);
        }
        // A text empty once normalised is refused under --empty-text
        // invalid, as the filter refuses it: not decided.
        let asks: Vec<Ask<'_>> = chunk
            .iter()
            .zip(&band_keys)
            .enumerate()
            .filter(|(_, (s, _))| !(refuses_empty && s.shingles.is_empty()))
            .map(|(i, (s, keys))| Ask {
                id: &sample.messages[start + i].id,
                sketch: Sketch {
                    shingles: &s.shingles,
                    band_keys: keys,
                    set_fingerprint: s.set_fingerprint,
                    truncated: s.truncated,
                },
                op: Op::Check,
                token: None,
                time: sample.messages[start + i].time,
            })
            .collect();
        verdicts.clear();
        deduper
            .decide(&asks, &mut verdicts)
            .map_err(|e| TuneError::Truth(format!("the engine failed: {e}")))?;
        let mut verdicts = verdicts.iter();
        for (i, s) in chunk.iter().enumerate() {
            let message = &sample.messages[start + i];
            let target = if refuses_empty && s.shingles.is_empty() {
                None
            } else {
                match verdicts.next() {
                    Some(Verdict::Duplicate(m)) => latest.get(&m.of).copied(),
                    _ => None,
                }
            };
            targets.push(target);
            latest.insert(&message.id, start + i);
        }
    }
    Ok(targets)
}

/// How much higher another point's F1 must be than the base's for it to
/// be recommended instead: a tenth of a point. Smaller differences are a
/// few messages of a sample (one message of 3,000 duplicates is 0.0003 of
/// recall), noise that another sample of the same stream would not repeat.
pub const MIN_GAIN: f64 = 0.001;

/// The best point: the highest F1 (ties: the higher precision, then the
/// threshold nearest the base's), unless it beats the base's own settings
/// by less than [`MIN_GAIN`]: then the base.
pub fn recommend<'p>(points: &'p [Point], base: &EngineConfig) -> Option<&'p Point> {
    let best = best(points, base)?;
    match base_point(points, base) {
        Some(given) if best.scores.f1 - given.scores.f1 < MIN_GAIN => Some(given),
        _ => Some(best),
    }
}

/// The point of the highest F1 (see [`recommend`]).
fn best<'p>(points: &'p [Point], base: &EngineConfig) -> Option<&'p Point> {
    let is_base = |p: &Point| {
        p.shingling == base.shingling && p.measure == base.measure && p.threshold == base.threshold
    };
    points.iter().max_by(|a, b| {
        a.scores
            .f1
            .total_cmp(&b.scores.f1)
            .then(is_base(a).cmp(&is_base(b)))
            .then(a.scores.precision.total_cmp(&b.scores.precision))
            .then(
                (b.threshold - base.threshold)
                    .abs()
                    .total_cmp(&(a.threshold - base.threshold).abs()),
            )
    })
}

/// The point of the base's own settings.
pub fn base_point<'p>(points: &'p [Point], base: &EngineConfig) -> Option<&'p Point> {
    points.iter().find(|p| {
        p.shingling == base.shingling && p.measure == base.measure && p.threshold == base.threshold
    })
}

/// The header of [`write_csv`]'s table.
pub const CSV_HEADER: &str =
    "shingle,measure,threshold,precision,recall,f1,tagged,correct,true_duplicates,hits";

/// The table as CSV: [`CSV_HEADER`], then a row per point.
pub fn write_csv(points: &[Point], out: &mut String) {
    out.push_str(CSV_HEADER);
    out.push('\n');
    for p in points {
        let s = &p.scores;
        out.push_str(&format!(
            "{},{},{},{:.4},{:.4},{:.4},{},{},{},{}\n",
            p.shingling,
            p.measure,
            p.threshold,
            s.precision,
            s.recall,
            s.f1,
            s.tagged,
            s.correct,
            s.true_duplicates,
            s.hits
        ));
    }
}

/// The table as JSON: `{"points":[{"shingle":…,"measure":…,"threshold":…,
/// "precision":…,"recall":…,"f1":…,"tagged":…,"correct":…,
/// "true_duplicates":…,"hits":…},…],"recommended":{…},"base":{…}}`.
pub fn to_json(points: &[Point], base: &EngineConfig) -> serde_json::Value {
    let point = |p: &Point| {
        serde_json::json!({
            "shingle": p.shingling.to_string(),
            "measure": p.measure.to_string(),
            "threshold": p.threshold,
            "precision": p.scores.precision,
            "recall": p.scores.recall,
            "f1": p.scores.f1,
            "tagged": p.scores.tagged,
            "correct": p.scores.correct,
            "true_duplicates": p.scores.true_duplicates,
            "hits": p.scores.hits,
        })
    };
    serde_json::json!({
        "points": points.iter().map(point).collect::<Vec<_>>(),
        "recommended": recommend(points, base).map(point),
        "base": base_point(points, base).map(point),
    })
}

/// The report for people: the best threshold of each shingle choice and
/// measure, the threshold curve of the recommended ones, and the
/// recommended flags.
pub fn report(points: &[Point], base: &EngineConfig, sample: &Sample, took: Duration) -> String {
    let mut out = format!(
        "{} messages, {} true duplicates ({} lines skipped); {} runs in {:.1}s\n\n",
        sample.len(),
        sample.true_duplicates(),
        sample.skipped,
        points.len(),
        took.as_secs_f64()
    );
    out.push_str("best threshold of each shingle choice and measure:\n");
    out.push_str("shingle     measure      threshold  precision  recall  f1\n");
    let mut groups: Vec<(Shingling, Measure)> = Vec::new();
    for p in points {
        if !groups.contains(&(p.shingling, p.measure)) {
            groups.push((p.shingling, p.measure));
        }
    }
    let group =
        |g: (Shingling, Measure)| points.iter().filter(move |p| (p.shingling, p.measure) == g);
    for &g in &groups {
        let cut: Vec<Point> = group(g).cloned().collect();
        if let Some(best) = recommend(&cut, base) {
            out.push_str(&row(best));
        }
    }
    let Some(best) = recommend(points, base) else {
        return out;
    };
    out.push_str(&format!(
        "\nthreshold curve ({}, {}):\nthreshold  precision  recall  f1      tagged\n",
        best.shingling, best.measure
    ));
    for p in group((best.shingling, best.measure)) {
        let s = &p.scores;
        out.push_str(&format!(
            "{:<9}  {:.4}     {:.4}  {:.4}  {}\n",
            p.threshold, s.precision, s.recall, s.f1, s.tagged
        ));
    }
    out.push_str(&format!(
        "\nrecommended: --shingle {} --measure {} --threshold {} (f1 {:.4}",
        best.shingling, best.measure, best.threshold, best.scores.f1
    ));
    match base_point(points, base) {
        Some(b) if b == best => out.push_str(", the settings given)\n"),
        Some(b) => out.push_str(&format!(
            "; the settings given: f1 {:.4}, less by {MIN_GAIN} or more)\n",
            b.scores.f1
        )),
        None => out.push_str(")\n"),
    }
    out
}

/// One row of the summary table.
fn row(p: &Point) -> String {
    let s = &p.scores;
    format!(
        "{:<11} {:<12} {:<9}  {:.4}     {:.4}  {:.4}\n",
        p.shingling.to_string(),
        p.measure.to_string(),
        p.threshold,
        s.precision,
        s.recall,
        s.f1
    )
}

/// How long `f` takes, and what it gives.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let result = f();
    (result, started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_count_as_score_py() {
        // Clusters: 0 0 1 0 2; message 1 a right duplicate, 3 new (missed),
        // 4 a wrong duplicate of 2.
        let clusters = [0, 0, 1, 0, 2];
        let targets = [None, Some(0), None, None, Some(2)];
        let s = score(&clusters, &targets);
        assert_eq!(
            (s.tagged, s.correct, s.true_duplicates, s.hits),
            (2, 1, 2, 1)
        );
        assert_eq!((s.precision, s.recall, s.f1), (0.5, 0.5, 0.5));
        let none = score(&[0, 1], &[None, None]);
        assert_eq!((none.precision, none.recall), (1.0, 1.0));
    }

    #[test]
    fn truth_files_pair_rows_with_lines() {
        let tsv =
            "line\tid_str\tcluster\tkind\tctype\n0\t1\t7\torig\treal\n1\t2\t7\tinvalid\treal\n";
        let rows = read_truth(tsv.as_bytes()).unwrap();
        assert_eq!(rows, [Some("7".to_string()), None]);
        assert!(read_truth("line\tkind\n".as_bytes()).is_err());
    }

    const DATA: &str = r#"{"id_str":"1","text":"Flooding has closed the coastal highway north of the city tonight","c":"a"}
{"id_str":"2","text":"RT @police: Flooding has closed the coastal highway north of the city tonight","c":"a"}
{"id_str":"3","text":"The bakery on 5th street reopens on Monday","c":"b"}
not json
{"id_str":"4","text":"the bakery on 5th street reopens monday!","c":"b"}
"#;

    #[test]
    fn a_sample_is_scored_by_the_engine() {
        let labels = Labels::Field("c".into());
        // The line that is not JSON has no label either: refused.
        assert!(Sample::load(DATA.as_bytes(), FieldSpec::default(), &labels).is_err());
        let data: String = DATA
            .lines()
            .filter(|l| *l != "not json")
            .map(|l| format!("{l}\n"))
            .collect();
        let sample = Sample::load(data.as_bytes(), FieldSpec::default(), &labels).unwrap();
        assert_eq!((sample.len(), sample.true_duplicates()), (4, 2));
        let base = EngineConfig::default();
        let grid = Grid {
            thresholds: vec![0.5, 0.8],
            measures: vec![Measure::Jaccard],
            shingles: vec![Shingling::Words(2)],
        }
        .with(&base);
        assert_eq!(
            grid.len(),
            2 * 2 * 2,
            "the base's measure and shingling added"
        );
        let points = run(&sample, &base, &grid, 2).unwrap();
        assert_eq!(points.len(), grid.len());
        let best = recommend(&points, &base).unwrap();
        assert_eq!(best.scores.f1, 1.0);
        assert_eq!(
            best,
            base_point(&points, &base).unwrap(),
            "ties go to the base"
        );
    }
}
