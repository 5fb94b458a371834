//! The Kafka worker's watch over the rest of its consumer group: a
//! partition with records waiting whose committed offset does not move
//! is held by a member that makes no progress (hung, stopped, cut off
//! from the brokers but not yet out of the group). Nothing else shows it:
//! the member's own `/healthz` may be unreachable, and the group's
//! coordinator hands its partitions on only once its session expires (or,
//! on some brokers, later still: docs/queues.md). Every worker of the group
//! watches the partitions it does not hold, and names the member that
//! holds one stuck, on stderr and in `dedup_queue_partitions_stuck`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::metrics::Metrics;
use crate::queue::broker::REPORT_EVERY;

/// A partition is stuck when records wait on it and its committed offset
/// has not moved for this long: far longer than a batch takes, shorter
/// than the group's default session (45 s).
pub const STUCK_AFTER: Duration = Duration::from_secs(20);

/// How often the group's offsets are looked at.
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// How long a request of the watch may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A partition: topic and number.
type Partition = (String, i32);

/// A partition held by another member, as last looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    /// The group's committed offset (or the partition's first, if none).
    committed: i64,
    /// Records waiting past it.
    waiting: i64,
    /// Since when `committed` has not moved while records waited.
    since: Instant,
}

/// The partitions of the group's other members whose committed offset
/// does not move while records wait on them.
#[derive(Debug, Default)]
struct Watch {
    seen: HashMap<Partition, Seen>,
}

impl Watch {
    /// Takes one look: `partition`'s committed offset and records waiting,
    /// at `now`.
    fn look(&mut self, partition: Partition, committed: i64, waiting: i64, now: Instant) {
        if waiting <= 0 {
            self.seen.remove(&partition);
            return;
        }
        let seen = self.seen.entry(partition).or_insert(Seen {
            committed,
            waiting,
            since: now,
        });
        if seen.committed != committed {
            seen.since = now;
        }
        seen.committed = committed;
        seen.waiting = waiting;
    }

    /// Forgets the partitions not in `looked` (now this worker's, or gone).
    fn keep_only(&mut self, looked: &HashSet<Partition>) {
        self.seen.retain(|partition, _| looked.contains(partition));
    }

    /// The partitions stuck for [`STUCK_AFTER`] or more at `now`, sorted.
    fn stuck(&self, now: Instant) -> Vec<(&Partition, &Seen)> {
        let mut stuck: Vec<_> = self
            .seen
            .iter()
            .filter(|(_, seen)| now.duration_since(seen.since) >= STUCK_AFTER)
            .collect();
        stuck.sort_by(|a, b| a.0.cmp(b.0));
        stuck
    }
}

/// Watches `topics` of `group` through `consumer` (the worker's own: the
/// calls are thread-safe and touch neither its assignment nor its
/// position) until `done`, reporting stuck partitions every
/// [`REPORT_EVERY`]. A thread of its own: each look makes a few requests.
pub fn watch<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    group: &str,
    topics: &[String],
    metrics: &Metrics,
    done: &AtomicBool,
) {
    let mut watch = Watch::default();
    let mut reported: Option<Instant> = None;
    while !done.load(Ordering::Relaxed) {
        if let Err(e) = look(consumer, topics, &mut watch, done) {
            // The worker's own outage reports say why; the watch waits.
            tracing::debug!("the group watch could not look: {e}");
        }
        let now = Instant::now();
        let stuck = watch.stuck(now);
        metrics
            .queue_partitions_stuck
            .store(stuck.len() as u64, Ordering::Relaxed);
        if !stuck.is_empty() && reported.is_none_or(|at| at.elapsed() >= REPORT_EVERY) {
            reported = Some(now);
            let holders = holders(consumer, group);
            for ((topic, partition), seen) in stuck {
                let holder = match &holders {
                    Some(holders) => holders
                        .get(&(topic.clone(), *partition))
                        .map_or("no member (the group is rebalancing?)", String::as_str),
                    None => "another member (the brokers do not describe the group's assignments)",
                };
                tracing::warn!(
                    topic,
                    partition,
                    waiting = seen.waiting,
                    committed = seen.committed,
                    for_seconds = now.duration_since(seen.since).as_secs(),
                    "a partition makes no progress: records wait and its committed offset has \
                     not moved; held by {holder}"
                );
            }
        }
        let next = Instant::now() + LOOK_EVERY;
        while !done.load(Ordering::Relaxed) && Instant::now() < next {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One look at every partition of `topics` this worker does not hold;
/// cut short when `done` (each request may wait for a hung broker).
fn look<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topics: &[String],
    watch: &mut Watch,
    done: &AtomicBool,
) -> Result<(), rdkafka::error::KafkaError> {
    let ours: HashSet<Partition> = consumer
        .assignment()?
        .elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect();
    let mut others = TopicPartitionList::new();
    for topic in topics {
        let metadata = consumer.fetch_metadata(Some(topic), REQUEST_TIMEOUT)?;
        for t in metadata.topics() {
            for p in t.partitions() {
                if !ours.contains(&(t.name().to_string(), p.id())) {
                    others.add_partition(t.name(), p.id());
                }
            }
        }
    }
    let committed = consumer.committed_offsets(others, REQUEST_TIMEOUT)?;
    let now = Instant::now();
    let mut looked = HashSet::new();
    for element in committed.elements() {
        if done.load(Ordering::Relaxed) {
            return Ok(());
        }
        let partition = (element.topic().to_string(), element.partition());
        let (low, high) = consumer.fetch_watermarks(&partition.0, partition.1, REQUEST_TIMEOUT)?;
        let committed = match element.offset() {
            Offset::Offset(offset) => offset.max(low),
            _ => low,
        };
        looked.insert(partition.clone());
        watch.look(partition, committed, high - committed, now);
    }
    watch.keep_only(&looked);
    Ok(())
}

/// Which member holds each partition, from the group's description:
/// `member MEMBER_ID (client CLIENT_ID on HOST)`. `None` when the brokers
/// do not describe the group's assignments (Tansu 0.6 does not).
fn holders<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    group: &str,
) -> Option<HashMap<Partition, String>> {
    let mut holders = HashMap::new();
    let list = consumer
        .fetch_group_list(Some(group), REQUEST_TIMEOUT)
        .ok()?;
    for info in list.groups().iter().filter(|g| g.name() == group) {
        for member in info.members() {
            let Some(assigned) = member.assignment().and_then(assignment) else {
                continue;
            };
            let name = format!(
                "member {} (client {} on {})",
                member.id(),
                member.client_id(),
                member.client_host()
            );
            for partition in assigned {
                holders.insert(partition, name.clone());
            }
        }
    }
    (!holders.is_empty()).then_some(holders)
}

/// The partitions of a member's assignment, as the consumer protocol
/// encodes it (big-endian): `version: i16`, then `[topic: string (i16
/// length), [partition: i32] (i32 count)] (i32 count)`, then user data.
/// `None` for bytes that do not parse.
fn assignment(bytes: &[u8]) -> Option<Vec<Partition>> {
    let mut rest = bytes;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = rest.split_at_checked(n)?;
        rest = tail;
        Some(head)
    };
    let _version = take(2)?;
    let topics = i32::from_be_bytes(take(4)?.try_into().ok()?);
    let mut partitions = Vec::new();
    for _ in 0..topics.max(0) {
        let length = i16::from_be_bytes(take(2)?.try_into().ok()?);
        let topic = std::str::from_utf8(take(usize::try_from(length).ok()?)?)
            .ok()?
            .to_string();
        let count = i32::from_be_bytes(take(4)?.try_into().ok()?);
        for _ in 0..count.max(0) {
            let partition = i32::from_be_bytes(take(4)?.try_into().ok()?);
            partitions.push((topic.clone(), partition));
        }
    }
    Some(partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(topics: &[(&str, &[i32])]) -> Vec<u8> {
        let mut bytes = 1i16.to_be_bytes().to_vec();
        bytes.extend((topics.len() as i32).to_be_bytes());
        for (topic, partitions) in topics {
            bytes.extend((topic.len() as i16).to_be_bytes());
            bytes.extend(topic.as_bytes());
            bytes.extend((partitions.len() as i32).to_be_bytes());
            for p in *partitions {
                bytes.extend(p.to_be_bytes());
            }
        }
        bytes.extend((-1i32).to_be_bytes());
        bytes
    }

    #[test]
    fn an_assignment_is_read_as_the_consumer_protocol_writes_it() {
        let bytes = encoded(&[("tweets", &[0, 2]), ("feed", &[1])]);
        assert_eq!(
            assignment(&bytes),
            Some(vec![
                ("tweets".to_string(), 0),
                ("tweets".to_string(), 2),
                ("feed".to_string(), 1),
            ])
        );
        for cut in 0..bytes.len() - 4 {
            assert_eq!(assignment(&bytes[..cut]), None, "cut at {cut}");
        }
    }

    #[test]
    fn a_partition_is_stuck_only_while_records_wait_and_its_offset_stays() {
        let start = Instant::now();
        let p = ("tweets".to_string(), 0);
        let mut watch = Watch::default();
        watch.look(p.clone(), 10, 5, start);
        watch.look(p.clone(), 10, 7, start + STUCK_AFTER / 2);
        assert!(watch.stuck(start + STUCK_AFTER / 2).is_empty());
        watch.look(p.clone(), 10, 7, start + STUCK_AFTER);
        assert_eq!(watch.stuck(start + STUCK_AFTER).len(), 1);
        // Progress: the wait counts from here.
        watch.look(p.clone(), 12, 5, start + STUCK_AFTER);
        assert!(
            watch
                .stuck(start + STUCK_AFTER + STUCK_AFTER / 2)
                .is_empty()
        );
        // Nothing waiting: not stuck, however long the offset stays.
        watch.look(p.clone(), 12, 0, start + STUCK_AFTER * 3);
        assert!(watch.stuck(start + STUCK_AFTER * 4).is_empty());
        // A partition now this worker's is forgotten.
        watch.look(p.clone(), 12, 3, start);
        watch.keep_only(&HashSet::new());
        assert!(watch.stuck(start + STUCK_AFTER * 4).is_empty());
    }
}
