//! The live page, `GET /` on the admin port of `serve` and `consume`: the
//! rate, the duplicate share, the index's fill, evictions, outages and the
//! largest recent clusters, on one HTML page that reloads itself every few
//! seconds (a `<meta http-equiv="refresh">`: no script, nothing fetched).
//!
//! The rate is measured between two loads of the page (the counters are
//! totals); the clusters are those of the last [`RECENT_CLUSTERS`]
//! clusters that received a duplicate, counted since they entered that
//! set, recorded once per batch by whoever decides ([`Live::note`]).

use std::fmt::Write as _;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Instant;

use lru::LruCache;

use super::Metrics;
use crate::engine::id::MessageId;

/// Clusters followed for the page; the least recently grown leave first.
pub const RECENT_CLUSTERS: usize = 1024;
/// Clusters shown.
const SHOWN: usize = 10;
/// Seconds between two reloads of the page.
pub const REFRESH_SECONDS: u32 = 2;

/// What the live page keeps between loads.
#[derive(Debug)]
pub struct Live {
    /// When the counters were last read, and the messages decided then.
    sample: Mutex<Option<(Instant, u64, f64)>>,
    /// Cluster → (duplicates seen, the latest duplicate's id).
    clusters: Mutex<LruCache<MessageId, (u64, MessageId)>>,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            sample: Mutex::new(None),
            clusters: Mutex::new(LruCache::new(
                NonZeroUsize::new(RECENT_CLUSTERS).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }
}

impl Live {
    /// Counts one batch's duplicates: `(cluster, duplicate's id)` pairs.
    /// One lock a batch that has any, none for one that has not.
    pub fn note<'a>(&self, duplicates: impl IntoIterator<Item = (&'a MessageId, &'a MessageId)>) {
        let mut duplicates = duplicates.into_iter().peekable();
        if duplicates.peek().is_none() {
            return;
        }
        let Ok(mut clusters) = self.clusters.lock() else {
            return;
        };
        for (cluster, id) in duplicates {
            match clusters.get_mut(cluster) {
                Some(entry) => {
                    entry.0 += 1;
                    entry.1 = id.clone();
                }
                None => {
                    clusters.put(cluster.clone(), (1, id.clone()));
                }
            }
        }
    }

    /// Messages a second since the last call (since the first, on the first
    /// call: `None`).
    fn rate(&self, total: u64) -> Option<f64> {
        let now = Instant::now();
        let mut sample = self.sample.lock().ok()?;
        match *sample {
            Some((at, _, rate)) if now.duration_since(at).as_secs_f64() < 1.0 => Some(rate),
            Some((at, before_total, _)) => {
                let rate = total.saturating_sub(before_total) as f64
                    / now.duration_since(at).as_secs_f64();
                *sample = Some((now, total, rate));
                Some(rate)
            }
            None => {
                *sample = Some((now, total, 0.0));
                None
            }
        }
    }

    /// The largest recent clusters, largest first (ties: by id).
    fn largest(&self) -> Vec<(MessageId, u64, MessageId)> {
        let Ok(clusters) = self.clusters.lock() else {
            return Vec::new();
        };
        let mut all: Vec<_> = clusters
            .iter()
            .map(|(c, (n, last))| (c.clone(), *n, last.clone()))
            .collect();
        all.sort_by(|a, b| {
            b.1.cmp(&a.1)
                .then_with(|| a.0.to_json().cmp(&b.0.to_json()))
        });
        all.truncate(SHOWN);
        all
    }
}

fn esc(text: &str) -> std::borrow::Cow<'_, str> {
    html_escape::encode_text(text)
}

/// The page.
pub fn page(metrics: &Metrics) -> String {
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let new = get(&metrics.checks_new) + get(&metrics.queries_new);
    let duplicates = get(&metrics.checks_duplicate) + get(&metrics.queries_duplicate);
    let decided = new + duplicates;
    let share = if decided > 0 {
        format!("{:.1}%", duplicates as f64 * 100.0 / decided as f64)
    } else {
        "–".into()
    };
    let rate = match metrics.live.rate(decided) {
        Some(rate) => format!("{rate:.0}/s"),
        None => "…".into(),
    };
    let (entries, capacity) = (get(&metrics.index_entries), get(&metrics.index_capacity));
    let fill = if capacity > 0 {
        format!("{:.1}%", entries as f64 * 100.0 / capacity as f64)
    } else {
        "–".into()
    };
    let outages = get(&metrics.store_unreachable);
    let mut h = String::with_capacity(8 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\n<link rel=\"icon\" href=\"data:,\">\n\
         <title>dedup-stream: live</title>\n<style>\
         body{{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:900px;padding:0 1em;color:#1d2330}}\
         .cards{{display:flex;flex-wrap:wrap;gap:.8em}}.card{{border:1px solid #dde;border-radius:8px;padding:.6em 1em;min-width:8em}}\
         .card b{{display:block;font-size:1.5em}}.card span{{color:#667;font-size:.9em}}\
         .bad b{{color:#c9302c}}table{{border-collapse:collapse;width:100%}}td,th{{text-align:left;padding:.3em .5em;border-bottom:1px solid #eef}}\
         td.n{{text-align:right}}.sub{{color:#667}}\
         </style>\n</head>\n<body>\n<h1>dedup-stream, live</h1>\n\
         <p class=\"sub\">Reloads every {REFRESH_SECONDS} s. <a href=\"/metrics\">/metrics</a> · <a href=\"/healthz\">/healthz</a></p>\n\
         <div class=\"cards\">\n"
    );
    let cards = [
        ("rate", rate, "messages decided"),
        ("decided", decided.to_string(), "messages decided in all"),
        ("duplicates", duplicates.to_string(), "near-duplicates"),
        ("share", share, "duplicate share"),
        ("entries", entries.to_string(), "messages in the index"),
        ("fill", fill, "index fill"),
        (
            "evictions",
            get(&metrics.evictions).to_string(),
            "evictions",
        ),
        ("outages", outages.to_string(), "index store unreachable"),
        (
            "invalid",
            get(&metrics.invalid_lines).to_string(),
            "invalid lines",
        ),
    ];
    for (id, value, label) in cards {
        let bad = (id == "outages" && outages > 0) || (id == "invalid" && value != "0");
        let _ = writeln!(
            h,
            "<div class=\"card{}\"><b id=\"{id}\">{}</b><span>{label}</span></div>",
            if bad { " bad" } else { "" },
            esc(&value)
        );
    }
    h.push_str("</div>\n<h2>Largest recent clusters</h2>\n");
    let largest = metrics.live.largest();
    if largest.is_empty() {
        h.push_str("<p class=\"sub\" id=\"no-clusters\">No duplicates yet.</p>\n");
    } else {
        h.push_str(
            "<table id=\"clusters\"><tr><th>cluster (first message)</th><th>duplicates</th><th>latest</th></tr>\n",
        );
        for (cluster, n, last) in largest {
            let _ = writeln!(
                h,
                "<tr><td><code>{}</code></td><td class=\"n\">{n}</td><td><code>{}</code></td></tr>",
                esc(&cluster.to_json()),
                esc(&last.to_json())
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("</body>\n</html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_shows_the_counters_and_the_largest_clusters() {
        let metrics = Metrics::default();
        metrics.checks_new.store(7, Ordering::Relaxed);
        metrics.checks_duplicate.store(3, Ordering::Relaxed);
        let (a, b) = (MessageId::DigitString(1), MessageId::Integer(2));
        let ids = [
            MessageId::Integer(10),
            MessageId::Integer(11),
            MessageId::Integer(12),
        ];
        metrics
            .live
            .note([(&a, &ids[0]), (&b, &ids[1]), (&a, &ids[2])]);
        let page = page(&metrics);
        assert!(page.contains("<b id=\"decided\">10</b>"));
        assert!(page.contains("<b id=\"share\">30.0%</b>"));
        let first = page
            .find("<code>\"1\"</code></td><td class=\"n\">2<")
            .unwrap();
        let second = page.find("<code>2</code></td><td class=\"n\">1<").unwrap();
        assert!(first < second);
        assert!(!page.contains("<script"));
    }
}
