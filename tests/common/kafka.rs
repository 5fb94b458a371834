//! A real Kafka-compatible broker for the tests: Tansu (`cargo install
//! tansu --version 0.6.0 --features dynostore --locked`) on a free
//! loopback port with its memory storage, started in a temporary directory
//! and stopped when dropped; and a client to create topics, produce inputs
//! and read outputs with (rdkafka, as the worker).
//!
//! Without `tansu` on the PATH the tests that need one are skipped with a
//! message on stderr, unless `DEDUP_REQUIRE_KAFKA=1` (which CI sets): then
//! a missing broker fails them.

#![allow(dead_code)]

use std::collections::BTreeMap;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

/// Whether `tansu` can be run; if not, and it is not required, the caller
/// skips (and this says so).
pub fn available(test: &str) -> bool {
    super::Program {
        name: "tansu",
        required_by: "DEDUP_REQUIRE_KAFKA",
        install: "cargo install tansu --version 0.6.0 --features dynostore --locked",
    }
    .available(test)
}

/// A running Tansu broker (memory storage: what it holds dies with it).
pub struct Broker {
    pub port: u16,
    process: super::ServerProcess,
    temp: tempfile::TempDir,
}

impl Broker {
    /// A broker on a free port, run in a new temporary directory.
    pub fn start() -> Broker {
        let port = super::free_port();
        let temp = tempfile::tempdir().expect("a temporary directory");
        let url = format!("tcp://127.0.0.1:{port}");
        let process = super::ServerProcess::spawn(
            Command::new("tansu")
                .args(["broker", "--listener-url", &url])
                .args(["--advertised-listener-url", &url])
                .args(["--storage-engine", "memory://tansu/"])
                .current_dir(temp.path())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(temp.path().join("tansu.log")).expect("a log")),
            "tansu",
        );
        super::wait_for_port(port, Duration::from_secs(30), "tansu");
        Broker {
            port,
            process,
            temp,
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn servers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.servers())
            .set("log_level", "3");
        config
    }

    /// Creates `topic` with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> =
            self.config().create().expect("an admin client");
        let results = futures::executor::block_on(admin.create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))
        .expect("create the topic");
        for result in results {
            result.expect("the topic is created");
        }
    }

    /// Produces each value to `topic` (round robin over the partitions,
    /// no key), every one acknowledged. One record per batch: Tansu 0.6
    /// answers a fetch from an offset inside a batch with the next batch,
    /// so a worker resuming mid-batch (after a rebalance or a kill) would
    /// never see the rest of it (a broker bug, not Kafka's behaviour; see
    /// docs/queues.md).
    pub fn produce(&self, topic: &str, values: &[Vec<u8>]) {
        let producer: BaseProducer = self
            .config()
            .set("enable.idempotence", "true")
            .set("batch.num.messages", "1")
            .create()
            .expect("a producer");
        let partitions = self.partitions(topic);
        for (i, value) in values.iter().enumerate() {
            send(&producer, topic, value, i as i32 % partitions);
        }
        producer
            .flush(Duration::from_secs(30))
            .expect("every input is acknowledged");
    }

    /// Produces `values` to partition 0 of `topic` in record batches of
    /// `per_batch` (as a busy producer writes them), every one
    /// acknowledged.
    pub fn produce_batched(&self, topic: &str, values: &[Vec<u8>], per_batch: usize) {
        let producer: BaseProducer = self
            .config()
            .set("enable.idempotence", "true")
            .set("batch.num.messages", per_batch.to_string())
            .set("linger.ms", "2000")
            .create()
            .expect("a producer");
        for chunk in values.chunks(per_batch) {
            for value in chunk {
                send(&producer, topic, value, 0);
            }
            // The chunk goes as one batch, alone.
            producer
                .flush(Duration::from_secs(30))
                .expect("every input is acknowledged");
        }
    }

    /// Commits `offset` on partition 0 of `topic` for `group`, as a
    /// member that stopped there would have.
    pub fn commit(&self, group: &str, topic: &str, offset: i64) {
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .expect("a consumer");
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(topic, 0, Offset::Offset(offset))
            .expect("an offset");
        consumer
            .commit(&list, rdkafka::consumer::CommitMode::Sync)
            .expect("the offset is committed");
    }

    /// How many partitions `topic` has.
    pub fn partitions(&self, topic: &str) -> i32 {
        let consumer: BaseConsumer = self.config().create().expect("a consumer");
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("metadata");
        metadata.topics()[0].partitions().len() as i32
    }

    /// Every record `topic` holds, partition by partition in offset order:
    /// read from the start until nothing more comes for a second. (Tansu
    /// 0.6 reports a high watermark one past the first record of the last
    /// batch, not past its last record: watermarks cannot count records.)
    pub fn read(&self, topic: &str) -> Vec<Stored> {
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", "dedup-test-reader")
            .set("enable.auto.commit", "false")
            .create()
            .expect("a consumer");
        let mut list = TopicPartitionList::new();
        for p in 0..self.partitions(topic) {
            list.add_partition_offset(topic, p, Offset::Beginning)
                .expect("an offset");
        }
        consumer.assign(&list).expect("assign");
        let mut stored: BTreeMap<(i32, i64), Stored> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut quiet_since = Instant::now();
        while quiet_since.elapsed() < Duration::from_secs(1) {
            assert!(Instant::now() < deadline, "reading {topic} timed out");
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    quiet_since = Instant::now();
                    let headers = m
                        .headers()
                        .map(|h| {
                            h.iter()
                                .map(|h| {
                                    (
                                        h.key.to_string(),
                                        String::from_utf8_lossy(h.value.unwrap_or_default())
                                            .into_owned(),
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    stored.insert(
                        (m.partition(), m.offset()),
                        Stored {
                            key: m.key().map(<[u8]>::to_vec),
                            headers,
                            value: m.payload().unwrap_or_default().to_vec(),
                        },
                    );
                }
                Some(Err(e)) => panic!("reading {topic}: {e}"),
                None => {}
            }
        }
        stored.into_values().collect()
    }

    /// The offsets `group` committed on `topic`, by partition.
    pub fn committed(&self, group: &str, topic: &str) -> BTreeMap<i32, i64> {
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .expect("a consumer");
        let mut list = TopicPartitionList::new();
        for p in 0..self.partitions(topic) {
            list.add_partition(topic, p);
        }
        let committed = consumer
            .committed_offsets(list, Duration::from_secs(10))
            .expect("committed offsets");
        committed
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), o)),
                _ => None,
            })
            .collect()
    }

    /// Freezes the broker (SIGSTOP): its port still takes connections and
    /// requests, and nothing is answered, as with a hung broker.
    pub fn pause(&self) {
        self.process.signal("-STOP");
    }

    /// Lets a paused broker go on (SIGCONT).
    pub fn resume(&self) {
        self.process.signal("-CONT");
    }

    /// The broker's log (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.temp.path().join("tansu.log")).unwrap_or_default()
    }
}

/// One stored record: its key, headers (name, value) and value.
#[derive(Clone, Debug)]
pub struct Stored {
    pub key: Option<Vec<u8>>,
    pub headers: Vec<(String, String)>,
    pub value: Vec<u8>,
}

impl Stored {
    /// The value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `value` to `partition` of `topic`, waiting while the producer's
/// queue is full.
fn send(producer: &BaseProducer, topic: &str, value: &[u8], partition: i32) {
    let mut record = BaseRecord::<[u8], [u8]>::to(topic)
        .payload(value)
        .partition(partition);
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, back)) => {
                record = back;
                producer.poll(Duration::from_millis(50));
            }
        }
    }
}
