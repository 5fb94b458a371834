//! The counters of every long-running mode (the sidecar, the queue workers,
//! the index in Redis), shared as atomics and rendered in the Prometheus
//! text format (version 0.0.4) for the admin endpoint's `GET /metrics`.
//! It imports only the engine, so every layer that counts may import it.
//!
//! Every metric is updated by the task that owns the event: the engine
//! thread for verdicts and the index, connections for themselves. Updates
//! are relaxed atomic additions, once per batch where possible, so counting
//! costs nothing next to deciding.

pub mod live;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the check-latency histogram's buckets, in seconds.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 1.0,
];

/// A cumulative histogram of durations with fixed buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket (not cumulative; summed when rendered). The
    /// last slot counts observations above every bound.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    /// Sum of all observations, in nanoseconds.
    sum_nanos: AtomicU64,
    /// Number of observations.
    count: AtomicU64,
}

impl Histogram {
    /// Records `n` observations of `duration`.
    pub fn observe_n(&self, duration: Duration, n: u64) {
        if n == 0 {
            return;
        }
        let seconds = duration.as_secs_f64();
        let bucket = LATENCY_BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[bucket].fetch_add(n, Ordering::Relaxed);
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos
            .fetch_add(nanos.saturating_mul(n), Ordering::Relaxed);
        self.count.fetch_add(n, Ordering::Relaxed);
    }

    /// Number of observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// Everything `/metrics` reports.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Checks (decide and index) answered `new`.
    pub checks_new: AtomicU64,
    /// Checks answered `duplicate`.
    pub checks_duplicate: AtomicU64,
    /// Messages answered as repeats (indexed already under their id with
    /// the same text), counted by their first verdict too.
    pub repeats: AtomicU64,
    /// Queries (decide only) answered `new`.
    pub queries_new: AtomicU64,
    /// Queries answered `duplicate`.
    pub queries_duplicate: AtomicU64,
    /// Removals (deletion notices, `"dedup_op":"remove"`) of an id the
    /// index held.
    pub removals_held: AtomicU64,
    /// Removals of an id it did not hold.
    pub removals_unknown: AtomicU64,
    /// Lines answered with an error.
    pub invalid_lines: AtomicU64,
    /// Messages in the index now (set by the engine after every batch).
    pub index_entries: AtomicU64,
    /// The most messages the index holds.
    pub index_capacity: AtomicU64,
    /// Messages evicted from the index since the start.
    pub evictions: AtomicU64,
    /// Bytes of memory the index holds, plus one (0: not counted, as for
    /// an index in Redis).
    pub index_bytes: AtomicU64,
    /// The index's byte budget (`--max-index-bytes`), 0 for none.
    pub index_max_bytes: AtomicU64,
    /// Connections open now.
    pub connections_open: AtomicU64,
    /// Connections accepted since the start.
    pub connections_total: AtomicU64,
    /// Connections refused because `--max-connections` were open.
    pub connections_rejected: AtomicU64,
    /// Connections closed for being idle (or for not reading their replies).
    pub connections_timed_out: AtomicU64,
    /// State files saved.
    pub snapshots_saved: AtomicU64,
    /// State file saves that failed.
    pub snapshot_failures: AtomicU64,
    /// Time from reading a message off its connection to its reply being
    /// ready to write.
    pub check_latency: Histogram,
    /// 1 while the index store (Redis) cannot be reached, else 0.
    pub store_unreachable: AtomicU64,
    /// Failed calls to the index store (each retry counts).
    pub store_errors: AtomicU64,
    /// Calls to the index store (round trips to Redis).
    pub store_calls: AtomicU64,
    /// Messages this worker appended to the shared index's log.
    pub log_appended: AtomicU64,
    /// Messages of other workers this worker's replica applied from the log.
    pub log_applied: AtomicU64,
    /// Batches appended again because Redis lost them (a restart that lost
    /// its last writes, the index dropped): the fleet's retries.
    pub log_reappends: AtomicU64,
    /// Times the replica started again from a snapshot (at start, after
    /// Redis lost writes, after falling behind a trimmed log).
    pub log_resyncs: AtomicU64,
    /// Snapshots of the index this worker stored in Redis.
    pub log_snapshots: AtomicU64,
    /// Queue entries read (`consume`), claimed ones included.
    pub queue_read: AtomicU64,
    /// Queue entries claimed from other consumers that went quiet.
    pub queue_claimed: AtomicU64,
    /// Queue entries acknowledged.
    pub queue_acked: AtomicU64,
    /// Malformed queue entries sent to the dead-letter stream.
    pub queue_dead_lettered: AtomicU64,
    /// Whether this process talks to Redis (an index there, or Redis
    /// Streams): without it the `dedup_index_log_*` and the store's call
    /// and error counters would only ever say 0, and are not exported.
    pub uses_redis: AtomicBool,
    /// Whether this process is a queue worker (`consume`): without it the
    /// `dedup_queue_*` counters are not exported.
    pub queue_worker: AtomicBool,
    /// Fetches that began past the position the worker expected for their
    /// partition (records skipped by the broker), sought back and read
    /// again.
    pub queue_gaps: AtomicU64,
    /// Partitions of the Kafka group, held by other members, on which
    /// records wait while the committed offset has not moved for 20 s.
    pub queue_partitions_stuck: AtomicU64,
    /// HTTP requests to `/v1/check`, `/v1/query` and `DELETE
    /// /v1/messages` taken (`--listen-http`).
    pub http_requests: AtomicU64,
    /// HTTP requests refused: `413`, or `503` at `--http-max-requests`.
    pub http_rejected: AtomicU64,
    /// What the live page (`GET /` on the admin port) keeps between loads.
    pub live: live::Live,
}

/// Appends one metric family header.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

impl Metrics {
    /// Copies the index's gauges (size, capacity, evictions so far).
    pub fn record_index(&self, stats: crate::engine::IndexStats) {
        self.index_entries.store(stats.len, Ordering::Relaxed);
        self.index_capacity.store(stats.capacity, Ordering::Relaxed);
        self.evictions.store(stats.evictions, Ordering::Relaxed);
        self.index_bytes
            .store(stats.bytes.map_or(0, |b| b + 1), Ordering::Relaxed);
        self.index_max_bytes
            .store(stats.max_bytes.unwrap_or(0), Ordering::Relaxed);
    }

    /// Whether the index store is reachable (always, for an index in
    /// memory): what `/healthz` answers.
    pub fn healthy(&self) -> bool {
        self.store_unreachable.load(Ordering::Relaxed) == 0
    }

    /// Renders every metric in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = String::with_capacity(4096);
        header(
            &mut out,
            "dedup_messages_total",
            "counter",
            "Messages decided, by operation (check indexes new messages, query does not, remove forgets an id) and verdict.",
        );
        for (op, verdict, value) in [
            ("check", "new", &self.checks_new),
            ("check", "duplicate", &self.checks_duplicate),
            ("query", "new", &self.queries_new),
            ("query", "duplicate", &self.queries_duplicate),
            ("remove", "held", &self.removals_held),
            ("remove", "unknown", &self.removals_unknown),
        ] {
            let _ = writeln!(
                out,
                "dedup_messages_total{{op=\"{op}\",verdict=\"{verdict}\"}} {}",
                get(value)
            );
        }
        header(
            &mut out,
            "dedup_repeats_total",
            "counter",
            "Messages found indexed already under their id with the same text (sent again), answered with their first verdict; counted in dedup_messages_total by that verdict too.",
        );
        let _ = writeln!(out, "dedup_repeats_total {}", get(&self.repeats));
        header(
            &mut out,
            "dedup_index_store_up",
            "gauge",
            "1 while the index store is reachable (always for an index in memory), 0 while Redis is not.",
        );
        let _ = writeln!(out, "dedup_index_store_up {}", u8::from(self.healthy()));
        let simple: [(&str, &str, &str, &AtomicU64); 25] = [
            (
                "dedup_index_log_appended_messages_total",
                "counter",
                "Messages this worker appended to the shared index's log in Redis.",
                &self.log_appended,
            ),
            (
                "dedup_index_log_applied_messages_total",
                "counter",
                "Messages of other workers this worker's replica applied from the log.",
                &self.log_applied,
            ),
            (
                "dedup_index_log_reappends_total",
                "counter",
                "Batches appended again because Redis lost them (restart with lost writes, index dropped).",
                &self.log_reappends,
            ),
            (
                "dedup_index_log_resyncs_total",
                "counter",
                "Times this worker's replica started again from the index's snapshot.",
                &self.log_resyncs,
            ),
            (
                "dedup_index_log_snapshots_total",
                "counter",
                "Snapshots of the shared index this worker stored in Redis.",
                &self.log_snapshots,
            ),
            (
                "dedup_index_store_errors_total",
                "counter",
                "Failed calls to the index store (Redis), each retry counted.",
                &self.store_errors,
            ),
            (
                "dedup_index_store_calls_total",
                "counter",
                "Calls to the index store: round trips to Redis.",
                &self.store_calls,
            ),
            (
                "dedup_queue_entries_read_total",
                "counter",
                "Queue entries read by consume, claimed ones included.",
                &self.queue_read,
            ),
            (
                "dedup_queue_entries_claimed_total",
                "counter",
                "Queue entries claimed from consumers idle past --claim-idle.",
                &self.queue_claimed,
            ),
            (
                "dedup_queue_entries_acked_total",
                "counter",
                "Queue entries acknowledged.",
                &self.queue_acked,
            ),
            (
                "dedup_queue_entries_dead_lettered_total",
                "counter",
                "Malformed queue entries sent to the dead-letter stream.",
                &self.queue_dead_lettered,
            ),
            (
                "dedup_queue_gaps_total",
                "counter",
                "Fetches that began past the expected position of their partition, sought back.",
                &self.queue_gaps,
            ),
            (
                "dedup_queue_partitions_stuck",
                "gauge",
                "Kafka partitions held by other members of the group with records waiting and no commit for 20 s.",
                &self.queue_partitions_stuck,
            ),
            (
                "dedup_invalid_lines_total",
                "counter",
                "Lines answered with an error line.",
                &self.invalid_lines,
            ),
            (
                "dedup_index_entries",
                "gauge",
                "Messages in the index.",
                &self.index_entries,
            ),
            (
                "dedup_index_capacity",
                "gauge",
                "The most messages the index holds before evicting the least recently used.",
                &self.index_capacity,
            ),
            (
                "dedup_evictions_total",
                "counter",
                "Messages evicted from the index.",
                &self.evictions,
            ),
            (
                "dedup_connections_open",
                "gauge",
                "Client connections open.",
                &self.connections_open,
            ),
            (
                "dedup_connections_total",
                "counter",
                "Client connections accepted.",
                &self.connections_total,
            ),
            (
                "dedup_connections_rejected_total",
                "counter",
                "Client connections refused at the --max-connections limit.",
                &self.connections_rejected,
            ),
            (
                "dedup_connections_timed_out_total",
                "counter",
                "Client connections closed by --idle-timeout (idle, or not reading their replies).",
                &self.connections_timed_out,
            ),
            (
                "dedup_http_requests_total",
                "counter",
                "HTTP requests with messages taken (--listen-http).",
                &self.http_requests,
            ),
            (
                "dedup_http_rejected_total",
                "counter",
                "HTTP requests refused: 413 (over a limit) or 503 (--http-max-requests).",
                &self.http_rejected,
            ),
            (
                "dedup_snapshots_total",
                "counter",
                "State files saved.",
                &self.snapshots_saved,
            ),
            (
                "dedup_snapshot_failures_total",
                "counter",
                "State file saves that failed.",
                &self.snapshot_failures,
            ),
        ];
        let uses_redis = self.uses_redis.load(Ordering::Relaxed);
        let queue_worker = self.queue_worker.load(Ordering::Relaxed);
        for (name, kind, help, value) in simple {
            let redis_only =
                name.starts_with("dedup_index_log_") || name.starts_with("dedup_index_store_");
            if (redis_only && !uses_redis) || (name.starts_with("dedup_queue_") && !queue_worker) {
                continue;
            }
            header(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {}", get(value));
        }
        if let Some(bytes) = get(&self.index_bytes).checked_sub(1) {
            let name = "dedup_index_bytes";
            header(
                &mut out,
                name,
                "gauge",
                "Bytes of memory the index in memory holds (entries, shingle sets, postings).",
            );
            let _ = writeln!(out, "{name} {bytes}");
        }
        let max_bytes = get(&self.index_max_bytes);
        if max_bytes > 0 {
            let name = "dedup_index_max_bytes";
            header(
                &mut out,
                name,
                "gauge",
                "The index's byte budget (--max-index-bytes): past it the least recently used are evicted.",
            );
            let _ = writeln!(out, "{name} {max_bytes}");
        }
        let name = "dedup_check_duration_seconds";
        header(
            &mut out,
            name,
            "histogram",
            "Time from reading a message off its connection to its reply being ready to write.",
        );
        let mut cumulative = 0;
        for (bound, bucket) in LATENCY_BUCKETS.iter().zip(&self.check_latency.buckets) {
            cumulative += get(bucket);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        cumulative += get(&self.check_latency.buckets[LATENCY_BUCKETS.len()]);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let sum = get(&self.check_latency.sum_nanos) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {}", get(&self.check_latency.count));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_prometheus_text_format() {
        let m = Metrics::default();
        m.checks_new.fetch_add(3, Ordering::Relaxed);
        m.index_capacity.store(100, Ordering::Relaxed);
        m.check_latency.observe_n(Duration::from_micros(30), 2);
        m.check_latency.observe_n(Duration::from_secs(5), 1);
        let text = m.render();
        assert!(text.contains("dedup_messages_total{op=\"check\",verdict=\"new\"} 3\n"));
        assert!(text.contains("# TYPE dedup_index_capacity gauge\ndedup_index_capacity 100\n"));
        assert!(
            !text.contains("dedup_index_bytes"),
            "not counted: not reported"
        );
        m.record_index(crate::engine::IndexStats {
            bytes: Some(0),
            max_bytes: Some(1 << 20),
            ..crate::engine::IndexStats::default()
        });
        let text = m.render();
        assert!(text.contains("\ndedup_index_bytes 0\n"));
        assert!(text.contains("\ndedup_index_max_bytes 1048576\n"));
        assert!(text.contains("dedup_check_duration_seconds_bucket{le=\"0.000025\"} 0\n"));
        assert!(text.contains("dedup_check_duration_seconds_bucket{le=\"0.00005\"} 2\n"));
        assert!(text.contains("dedup_check_duration_seconds_bucket{le=\"1\"} 2\n"));
        assert!(text.contains("dedup_check_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("dedup_check_duration_seconds_count 3\n"));
        // An index in memory, no queue: no series that could only say 0.
        assert!(text.contains("\ndedup_index_store_up 1\n"));
        for absent in [
            "dedup_index_store_errors_total",
            "dedup_index_log_",
            "dedup_queue_",
        ] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
        m.uses_redis.store(true, Ordering::Relaxed);
        m.queue_worker.store(true, Ordering::Relaxed);
        let text = m.render();
        for present in [
            "\ndedup_index_store_errors_total 0\n",
            "\ndedup_index_log_appended_messages_total 0\n",
            "\ndedup_queue_entries_acked_total 0\n",
        ] {
            assert!(text.contains(present), "{present} in {text}");
        }
        // Every sample line is `name{labels} value` with a numeric value.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
