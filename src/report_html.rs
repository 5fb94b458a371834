//! `dedup-stream report`: one self-contained HTML page (inline CSS and SVG,
//! no script, nothing fetched) that shows what a run decided, from its
//! tagged output.
//!
//! The tagged files are read twice, each time as one stream, with memory
//! bounded whatever their length:
//!
//! 1. counts: totals, duplicates over time (buckets that double in width
//!    when there are too many), a histogram of similarities, counts by
//!    deciding rule and the near misses (`--explain` output), and the size
//!    of every cluster (a table that, past [`MAX_CLUSTERS`], drops its
//!    smallest entries and says the sizes are then lower bounds);
//! 2. for the largest clusters only, their first message's text and their
//!    first members.
//!
//! Ids are kept as the JSON text they have in the files, never as numbers.
//! The page is the same bytes for the same files.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{self, BufReader, IsTerminal};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::wire::input::{Inputs, Source};
use crate::wire::lines::{Line, LineReader, is_blank};
use crate::wire::record::{Decoder, FieldSpec};

/// Most clusters counted exactly; past it the smallest are dropped.
pub const MAX_CLUSTERS: usize = 1 << 20;
/// Most bars of the timeline.
const MAX_BUCKETS: usize = 240;
/// Bins of the similarity histogram.
const BINS: usize = 20;
/// Longest text shown, in characters.
const TEXT_CHARS: usize = 280;
/// Longest line read; a longer one is counted as unreadable.
const MAX_LINE: usize = 4 << 20;
/// The marker that tells a report file (which may be replaced) from any
/// other file (which may not).
pub const GENERATOR: &str = r#"<meta name="generator" content="dedup-stream report">"#;

/// What the page shows.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    /// The threshold marked on the histogram when the files carry none
    /// (`--explain` output has it).
    pub threshold: f64,
    /// Largest clusters shown.
    pub clusters: usize,
    /// Members shown per cluster.
    pub members: usize,
    /// Near misses shown.
    pub near_misses: usize,
    /// The files' names, as shown in the page's title.
    pub title: String,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            threshold: crate::engine::config::EngineConfig::default().threshold,
            clusters: 20,
            members: 5,
            near_misses: 20,
            title: String::new(),
        }
    }
}

/// A failure that stops the report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Reading a file failed.
    #[error("reading the input: {0}")]
    Read(#[from] io::Error),
    /// Not one line had a `"dedup"` member.
    #[error(
        "no tagged line in the input (a tagged line is a JSON object with a \"dedup\" member, \
         as dedup-stream writes them): is this the tool's output?"
    )]
    NothingTagged,
}

#[derive(Deserialize)]
struct Tagged<'a> {
    #[serde(borrow, default)]
    dedup: Option<Dedup<'a>>,
}

#[derive(Deserialize)]
struct Dedup<'a> {
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(borrow, default)]
    cluster: Option<&'a RawValue>,
    #[serde(default)]
    similarity: Option<f64>,
    #[serde(default)]
    repeat: bool,
    #[serde(borrow, default)]
    explain: Option<Explain<'a>>,
}

#[derive(Deserialize)]
struct Explain<'a> {
    #[serde(borrow)]
    rule: Cow<'a, str>,
    #[serde(default)]
    threshold: Option<f64>,
    #[serde(borrow, default)]
    nearest: Option<Nearest<'a>>,
}

#[derive(Deserialize)]
struct Nearest<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    similarity: f64,
}

/// Counts in buckets of a width that doubles when there are too many.
#[derive(Debug, Default)]
struct Timeline {
    width: i64,
    /// Bucket → (messages, duplicates).
    buckets: BTreeMap<i64, (u64, u64)>,
}

impl Timeline {
    fn new(width: i64) -> Timeline {
        Timeline {
            width: width.max(1),
            buckets: BTreeMap::new(),
        }
    }

    fn add(&mut self, at: i64, duplicate: bool) {
        let slot = self.buckets.entry(at.div_euclid(self.width)).or_default();
        slot.0 += 1;
        slot.1 += u64::from(duplicate);
        while self.buckets.len() > MAX_BUCKETS {
            self.width *= 2;
            let mut wider = BTreeMap::new();
            for (k, (n, d)) in std::mem::take(&mut self.buckets) {
                let slot: &mut (u64, u64) = wider.entry(k.div_euclid(2)).or_default();
                slot.0 += n;
                slot.1 += d;
            }
            self.buckets = wider;
        }
    }
}

/// A new message close to the threshold.
#[derive(Debug, Clone)]
struct NearMiss {
    similarity: f64,
    line: u64,
    id: String,
    nearest: String,
    text: String,
}

/// One of the largest clusters.
#[derive(Debug, Default, Clone)]
struct Cluster {
    id: String,
    duplicates: u64,
    first_text: Option<String>,
    /// (id, similarity, text)
    members: Vec<(String, f64, String)>,
}

/// Everything the first pass counts.
#[derive(Debug, Default)]
struct Counts {
    lines: u64,
    tagged: u64,
    new: u64,
    duplicates: u64,
    repeats: u64,
    deleted: u64,
    unreadable: u64,
    with_time: u64,
    threshold: Option<f64>,
    by_time: Timeline,
    by_position: Timeline,
    duplicate_bins: [u64; BINS],
    nearest_bins: [u64; BINS],
    rules: BTreeMap<String, u64>,
    clusters: HashMap<String, u64>,
    clusters_pruned: bool,
    near: Vec<NearMiss>,
}

/// Prints a progress line on a terminal's stderr once a run has taken a
/// while, at most once a second.
struct Progress {
    started: Instant,
    last: Instant,
    shown: bool,
    terminal: bool,
}

impl Progress {
    fn new() -> Progress {
        let now = Instant::now();
        Progress {
            started: now,
            last: now,
            shown: false,
            terminal: io::stderr().is_terminal(),
        }
    }

    fn tick(&mut self, pass: &str, lines: u64) {
        if !self.terminal || !lines.is_multiple_of(4096) {
            return;
        }
        let now = Instant::now();
        if now - self.started < Duration::from_secs(2) || now - self.last < Duration::from_secs(1) {
            return;
        }
        self.last = now;
        self.shown = true;
        eprint!("\rreport: {pass}: {lines} lines read   ");
    }

    fn done(&self) {
        if self.shown {
            eprintln!();
        }
    }
}

/// Calls `each(line number, line)` for every non-blank line of `sources`;
/// a line over the limit is counted in `too_long`.
fn each_line(
    sources: &[Source],
    too_long: &mut u64,
    mut each: impl FnMut(u64, &[u8]),
) -> io::Result<()> {
    let mut reader = LineReader::new(
        BufReader::with_capacity(1 << 16, Inputs::new(sources.to_vec())),
        MAX_LINE,
    );
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.next_line(&mut buf)? {
            None => return Ok(()),
            Some(Line::TooLong) => *too_long += 1,
            Some(Line::Content) if is_blank(&buf) => {}
            Some(Line::Content) => each(reader.line_number(), &buf),
        }
    }
}

fn bin(similarity: f64) -> usize {
    ((similarity.clamp(0.0, 1.0) * BINS as f64) as usize).min(BINS - 1)
}

/// The first characters of a text, on one line.
fn excerpt(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(TEXT_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(TEXT_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// Builds the page from tagged files.
pub fn build(sources: &[Source], options: &ReportOptions) -> Result<String, ReportError> {
    let decoder = Decoder::new(FieldSpec::default());
    let mut counts = Counts {
        by_time: Timeline::new(1000),
        by_position: Timeline::new(1),
        ..Counts::default()
    };
    let mut progress = Progress::new();
    let mut too_long = 0;
    each_line(sources, &mut too_long, |number, line| {
        counts.lines += 1;
        progress.tick("counting", counts.lines);
        count(&mut counts, &decoder, number, line, options);
    })?;
    counts.unreadable += too_long;
    counts.lines += too_long;
    if counts.tagged == 0 {
        progress.done();
        return Err(ReportError::NothingTagged);
    }
    let mut largest: Vec<(&String, &u64)> = counts.clusters.iter().collect();
    largest.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let mut clusters: Vec<Cluster> = largest
        .into_iter()
        .take(options.clusters)
        .map(|(id, n)| Cluster {
            id: id.clone(),
            duplicates: *n,
            ..Cluster::default()
        })
        .collect();
    if !clusters.is_empty() {
        let index: HashMap<String, usize> = clusters
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id.clone(), i))
            .collect();
        let mut read = 0u64;
        let mut ignored = 0;
        each_line(sources, &mut ignored, |_, line| {
            read += 1;
            progress.tick("clusters", read);
            members(&mut clusters, &index, &decoder, line, options.members);
        })?;
    }
    progress.done();
    Ok(render(&counts, &clusters, options))
}

/// The first pass over one line.
fn count(
    counts: &mut Counts,
    decoder: &Decoder,
    number: u64,
    line: &[u8],
    options: &ReportOptions,
) {
    let Ok(Tagged { dedup: Some(dedup) }) = serde_json::from_slice::<Tagged<'_>>(line) else {
        counts.unreadable += 1;
        return;
    };
    counts.tagged += 1;
    let record = decoder.decode(line).ok();
    let duplicate = dedup.status == "duplicate";
    match dedup.status.as_ref() {
        "new" => counts.new += 1,
        "duplicate" => counts.duplicates += 1,
        "deleted" => {
            counts.deleted += 1;
            return;
        }
        _ => {}
    }
    counts.repeats += u64::from(dedup.repeat);
    counts.by_position.add(counts.tagged as i64, duplicate);
    if let Some(at) = record.as_ref().and_then(|r| r.created_at_millis()) {
        counts.with_time += 1;
        counts.by_time.add(at, duplicate);
    }
    if let (true, Some(similarity)) = (duplicate, dedup.similarity) {
        counts.duplicate_bins[bin(similarity)] += 1;
    }
    if let (true, Some(cluster)) = (duplicate, dedup.cluster) {
        *counts
            .clusters
            .entry(cluster.get().to_string())
            .or_default() += 1;
        if counts.clusters.len() > MAX_CLUSTERS {
            prune(&mut counts.clusters);
            counts.clusters_pruned = true;
        }
    }
    let Some(explain) = dedup.explain else {
        return;
    };
    *counts.rules.entry(explain.rule.into_owned()).or_default() += 1;
    if counts.threshold.is_none() {
        counts.threshold = explain.threshold;
    }
    if let Some(nearest) = explain.nearest {
        counts.nearest_bins[bin(nearest.similarity)] += 1;
        let worth = counts.near.len() < options.near_misses
            || counts
                .near
                .last()
                .is_some_and(|last| nearest.similarity > last.similarity);
        if worth {
            counts.near.push(NearMiss {
                similarity: nearest.similarity,
                line: number,
                id: record.as_ref().map(|r| r.id.to_json()).unwrap_or_default(),
                nearest: nearest.id.get().to_string(),
                text: record
                    .as_ref()
                    .map(|r| excerpt(&r.text))
                    .unwrap_or_default(),
            });
            // Closest first; ties: the earliest line.
            counts.near.sort_by(|a, b| {
                b.similarity
                    .total_cmp(&a.similarity)
                    .then(a.line.cmp(&b.line))
            });
            counts.near.truncate(options.near_misses);
        }
    }
}

/// Halves a cluster table gone past its limit by dropping its smallest
/// entries.
fn prune(clusters: &mut HashMap<String, u64>) {
    let mut floor = 1;
    while clusters.len() > MAX_CLUSTERS / 2 {
        clusters.retain(|_, n| *n > floor);
        floor += 1;
    }
}

/// The second pass over one line: the largest clusters' first text and
/// members.
fn members(
    clusters: &mut [Cluster],
    index: &HashMap<String, usize>,
    decoder: &Decoder,
    line: &[u8],
    most: usize,
) {
    let Ok(Tagged { dedup: Some(dedup) }) = serde_json::from_slice::<Tagged<'_>>(line) else {
        return;
    };
    let Ok(record) = decoder.decode(line) else {
        return;
    };
    let id = record.id.to_json();
    if dedup.status == "new"
        && let Some(&i) = index.get(&id)
        && clusters[i].first_text.is_none()
    {
        clusters[i].first_text = Some(excerpt(&record.text));
    }
    if dedup.status == "duplicate"
        && let Some(cluster) = dedup.cluster
        && let Some(&i) = index.get(cluster.get())
        && clusters[i].members.len() < most
    {
        clusters[i].members.push((
            id,
            dedup.similarity.unwrap_or(f64::NAN),
            excerpt(&record.text),
        ));
    }
}

/// Text for HTML.
fn esc(text: &str) -> Cow<'_, str> {
    html_escape::encode_text(text)
}

/// A count with thousands separators.
fn num(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `2026-11-27 14:03` (UTC) from Unix milliseconds.
fn utc(millis: i64) -> String {
    let secs = millis.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

const STYLE: &str = "body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1000px;padding:0 1em;color:#1d2330;background:#fff}\
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #dde;padding-bottom:.2em}\
.sub{color:#667}.cards{display:flex;flex-wrap:wrap;gap:.8em;margin:1.2em 0}\
.card{border:1px solid #dde;border-radius:8px;padding:.6em 1em;min-width:8em}\
.card b{display:block;font-size:1.5em}.card span{color:#667;font-size:.9em}\
table{border-collapse:collapse;width:100%;margin:.5em 0}td,th{text-align:left;padding:.3em .5em;border-bottom:1px solid #eef;vertical-align:top}\
th{font-weight:600;color:#445}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
.cluster{border:1px solid #dde;border-radius:8px;padding:.6em 1em;margin:.8em 0}\
.cluster p{margin:.2em 0 .5em}.legend span{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 1em;vertical-align:middle}\
svg{display:block;max-width:100%;height:auto}code{font-size:.9em}";

/// Colours: duplicates, new messages, the threshold.
const DUP: &str = "#d9534f";
const NEW: &str = "#9aa7bd";
const MARK: &str = "#1d2330";

fn render(counts: &Counts, clusters: &[Cluster], options: &ReportOptions) -> String {
    let threshold = counts.threshold.unwrap_or(options.threshold);
    let mut h = String::with_capacity(64 * 1024);
    let messages = counts.new + counts.duplicates;
    let share = if messages > 0 {
        counts.duplicates as f64 * 100.0 / messages as f64
    } else {
        0.0
    };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n{GENERATOR}\n<link rel=\"icon\" href=\"data:,\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>dedup-stream report: {title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>What the filter did</h1>\n<p class=\"sub\">{title}</p>\n<div class=\"cards\">\n",
        title = esc(&options.title)
    );
    for (id, value, label) in [
        ("messages", num(messages), "messages tagged"),
        ("new", num(counts.new), "new"),
        ("duplicates", num(counts.duplicates), "near-duplicates"),
        ("share", format!("{share:.1}%"), "duplicate share"),
        ("repeats", num(counts.repeats), "repeats (an id sent again)"),
        ("deleted", num(counts.deleted), "removals"),
        ("unreadable", num(counts.unreadable), "lines not tagged"),
    ] {
        let _ = writeln!(
            h,
            "<div class=\"card\"><b id=\"{id}\">{value}</b><span>{label}</span></div>"
        );
    }
    h.push_str("</div>\n");

    // Over time.
    let by_time = counts.with_time * 10 >= messages * 9 && counts.with_time > 0;
    let timeline = if by_time {
        &counts.by_time
    } else {
        &counts.by_position
    };
    let _ = writeln!(
        h,
        "<h2>Duplicates over time</h2>\n<p class=\"sub\">{}. \
         <span class=\"legend\"><span style=\"background:{DUP}\"></span>duplicates\
         <span style=\"background:{NEW}\"></span>new</span></p>",
        if by_time {
            "By <code>created_at</code>, UTC"
        } else {
            "By position in the input (the messages carry no <code>created_at</code>)"
        }
    );
    timeline_svg(&mut h, timeline, by_time);

    // Similarities.
    let _ = writeln!(
        h,
        "<h2>Similarities</h2>\n<p class=\"sub\">Duplicates by their similarity{}; the line is \
         the threshold, {threshold}. <span class=\"legend\"><span style=\"background:{DUP}\"></span>duplicates{}</span></p>",
        if counts.nearest_bins.iter().any(|&n| n > 0) {
            ", and new messages by their nearest candidate's (<code>--explain</code>)"
        } else {
            ""
        },
        if counts.nearest_bins.iter().any(|&n| n > 0) {
            format!("<span style=\"background:{NEW}\"></span>new (nearest)")
        } else {
            String::new()
        }
    );
    histogram_svg(&mut h, counts, threshold);

    // Rules.
    h.push_str("<h2>Deciding rules</h2>\n");
    if counts.rules.is_empty() {
        h.push_str(
            "<p class=\"sub\">The output was not made with <code>--explain</code>: no rules to count.</p>\n",
        );
    } else {
        h.push_str("<table id=\"rules\"><tr><th>rule</th><th>messages</th></tr>\n");
        let mut rules: Vec<_> = counts.rules.iter().collect();
        rules.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (rule, n) in rules {
            let _ = writeln!(
                h,
                "<tr><td><code>{}</code></td><td class=\"n\">{}</td></tr>",
                esc(rule),
                num(*n)
            );
        }
        h.push_str("</table>\n");
    }

    // Clusters.
    let _ = writeln!(
        h,
        "<h2>Largest clusters</h2>\n<p class=\"sub\">A cluster is a first message and its near-duplicates{}.</p>",
        if counts.clusters_pruned {
            "; the input has so many clusters that the smallest were not counted, and sizes are lower bounds"
        } else {
            ""
        }
    );
    if clusters.is_empty() {
        h.push_str("<p>No duplicates.</p>\n");
    }
    for cluster in clusters {
        let _ = write!(
            h,
            "<div class=\"cluster\"><b>{} duplicates</b> of <code>{}</code>\n<p>{}</p>\n<table>",
            num(cluster.duplicates),
            esc(&cluster.id),
            match &cluster.first_text {
                Some(text) => esc(text).into_owned(),
                None => "<i>(the first message is not in these files)</i>".into(),
            }
        );
        for (id, similarity, text) in &cluster.members {
            let _ = write!(
                h,
                "<tr><td><code>{}</code></td><td class=\"n\">{similarity:.2}</td><td>{}</td></tr>",
                esc(id),
                esc(text)
            );
        }
        h.push_str("</table></div>\n");
    }

    // Near misses.
    h.push_str("<h2>Near misses</h2>\n");
    if counts.near.is_empty() {
        h.push_str(
            "<p class=\"sub\">None shown: near misses need <code>--explain</code> output.</p>\n",
        );
    } else {
        h.push_str(
            "<p class=\"sub\">New messages whose nearest candidate came closest to the threshold.</p>\n\
             <table id=\"near\"><tr><th>id</th><th>similarity</th><th>nearest</th><th>text</th></tr>\n",
        );
        for near in &counts.near {
            let _ = writeln!(
                h,
                "<tr><td><code>{}</code></td><td class=\"n\">{:.2}</td><td><code>{}</code></td><td>{}</td></tr>",
                esc(&near.id),
                near.similarity,
                esc(&near.nearest),
                esc(&near.text)
            );
        }
        h.push_str("</table>\n");
    }
    let _ = writeln!(
        h,
        "<p class=\"sub\">{} lines read. Made by <code>dedup-stream report</code>.</p>\n</body>\n</html>",
        num(counts.lines)
    );
    h
}

fn timeline_svg(h: &mut String, timeline: &Timeline, by_time: bool) {
    let (Some((&first, _)), Some((&last, _))) = (
        timeline.buckets.first_key_value(),
        timeline.buckets.last_key_value(),
    ) else {
        h.push_str("<p>No messages.</p>\n");
        return;
    };
    let span = (last - first + 1).max(1) as f64;
    let top = timeline
        .buckets
        .values()
        .map(|v| v.0)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let (width, height, left, bottom) = (900.0, 220.0, 50.0, 24.0);
    let plot_h = height - bottom - 10.0;
    let bar = ((width - left) / span).max(0.5);
    let _ = writeln!(
        h,
        "<svg id=\"timeline\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"duplicates over time\">"
    );
    for (&k, &(n, d)) in &timeline.buckets {
        let x = left + (k - first) as f64 * bar;
        let total_h = n as f64 / top * plot_h;
        let dup_h = d as f64 / top * plot_h;
        let _ = writeln!(
            h,
            "<rect x=\"{x:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{NEW}\"/>\
             <rect x=\"{x:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{dup_h:.2}\" fill=\"{DUP}\"><title>{n} messages, {d} duplicates</title></rect>",
            10.0 + plot_h - total_h,
            bar * 0.9,
            total_h - dup_h,
            10.0 + plot_h - dup_h,
            bar * 0.9,
        );
    }
    let label = |k: i64| {
        if by_time {
            utc(k * timeline.width)
        } else {
            format!("message {}", num((k * timeline.width).max(1) as u64))
        }
    };
    let _ = writeln!(
        h,
        "<line x1=\"{left}\" y1=\"{y}\" x2=\"{width}\" y2=\"{y}\" stroke=\"#889\"/>\
         <text x=\"{left}\" y=\"{ty}\" font-size=\"12\">{}</text>\
         <text x=\"{width}\" y=\"{ty}\" font-size=\"12\" text-anchor=\"end\">{}</text>\
         <text x=\"{lx}\" y=\"18\" font-size=\"12\" text-anchor=\"end\">{}</text>\n</svg>",
        label(first),
        label(last + 1),
        num(top as u64),
        y = 10.0 + plot_h,
        ty = height - 6.0,
        lx = left - 6.0,
    );
}

fn histogram_svg(h: &mut String, counts: &Counts, threshold: f64) {
    let top = counts
        .duplicate_bins
        .iter()
        .zip(&counts.nearest_bins)
        .map(|(a, b)| a + b)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let (width, height, left, bottom) = (900.0, 220.0, 50.0, 24.0);
    let plot_h = height - bottom - 10.0;
    let plot_w = width - left;
    let bar = plot_w / BINS as f64;
    let _ = writeln!(
        h,
        "<svg id=\"histogram\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"similarities\">"
    );
    for i in 0..BINS {
        let (d, n) = (counts.duplicate_bins[i], counts.nearest_bins[i]);
        let x = left + i as f64 * bar;
        let dh = d as f64 / top * plot_h;
        let nh = n as f64 / top * plot_h;
        let _ = writeln!(
            h,
            "<rect x=\"{x:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{dh:.2}\" fill=\"{DUP}\"><title>{:.2}–{:.2}: {d} duplicates</title></rect>\
             <rect x=\"{x:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{nh:.2}\" fill=\"{NEW}\"><title>{:.2}–{:.2}: {n} new (nearest)</title></rect>",
            10.0 + plot_h - dh,
            bar * 0.9,
            i as f64 / BINS as f64,
            (i + 1) as f64 / BINS as f64,
            10.0 + plot_h - dh - nh,
            bar * 0.9,
            i as f64 / BINS as f64,
            (i + 1) as f64 / BINS as f64,
        );
    }
    let tx = left + threshold.clamp(0.0, 1.0) * plot_w;
    let _ = writeln!(
        h,
        "<line x1=\"{left}\" y1=\"{y}\" x2=\"{width}\" y2=\"{y}\" stroke=\"#889\"/>\
         <line id=\"threshold\" x1=\"{tx:.2}\" y1=\"6\" x2=\"{tx:.2}\" y2=\"{y}\" stroke=\"{MARK}\" stroke-dasharray=\"5 4\"/>\
         <text x=\"{tx:.2}\" y=\"18\" font-size=\"12\" dx=\"4\">threshold {threshold}</text>\
         <text x=\"{left}\" y=\"{ty}\" font-size=\"12\">0</text>\
         <text x=\"{width}\" y=\"{ty}\" font-size=\"12\" text-anchor=\"end\">1</text>\
         <text x=\"{lx}\" y=\"18\" font-size=\"12\" text-anchor=\"end\">{}</text>\n</svg>",
        num(top as u64),
        y = 10.0 + plot_h,
        ty = height - 6.0,
        lx = left - 6.0,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_counts_are_written_plainly() {
        assert_eq!(utc(0), "1970-01-01 00:00");
        assert_eq!(utc(1_499_342_400_000), "2017-07-06 12:00");
        assert_eq!(num(1234567), "1,234,567");
        assert_eq!(num(12), "12");
    }

    #[test]
    fn the_timeline_stays_bounded() {
        let mut t = Timeline::new(1);
        for i in 0..100_000 {
            t.add(i, i % 3 == 0);
        }
        assert!(t.buckets.len() <= MAX_BUCKETS);
        let total: u64 = t.buckets.values().map(|v| v.0).sum();
        assert_eq!(total, 100_000);
    }
}
