//! A small Kafka client for `scripts/kafka_bench.py` (Python here has no
//! Kafka client): creates topics, loads lines into a topic, counts and
//! dumps a topic. The same rdkafka as the worker.
//!
//! ```text
//! cargo run --release --example kafka_tool -- create  HOST:PORT TOPIC PARTITIONS
//! cargo run --release --example kafka_tool -- produce HOST:PORT TOPIC < lines   # round robin over partitions
//! cargo run --release --example kafka_tool -- count   HOST:PORT TOPIC            # records held
//! cargo run --release --example kafka_tool -- dump    HOST:PORT TOPIC            # values, one a line, partition by partition
//! cargo run --release --example kafka_tool -- committed HOST:PORT TOPIC GROUP    # the group's offsets, summed
//! ```

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);

fn config(servers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", servers)
        .set("log_level", "3");
    config
}

fn partitions(consumer: &BaseConsumer, topic: &str) -> Result<i32, String> {
    let metadata = consumer
        .fetch_metadata(Some(topic), TIMEOUT)
        .map_err(|e| e.to_string())?;
    Ok(metadata
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len() as i32))
}

fn run(args: &[String]) -> Result<(), String> {
    let [command, servers, topic, rest @ ..] = args else {
        return Err(
            "usage: kafka_tool create|produce|count|dump HOST:PORT TOPIC [PARTITIONS]".into(),
        );
    };
    let e = |e: rdkafka::error::KafkaError| e.to_string();
    match command.as_str() {
        "create" => {
            let n: i32 = rest
                .first()
                .and_then(|n| n.parse().ok())
                .ok_or("create needs PARTITIONS")?;
            let admin: AdminClient<DefaultClientContext> = config(servers).create().map_err(e)?;
            let results = futures::executor::block_on(admin.create_topics(
                &[NewTopic::new(topic, n, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
            ))
            .map_err(e)?;
            for result in results {
                result.map_err(|(name, code)| format!("{name}: {code}"))?;
            }
        }
        "produce" => {
            let producer: BaseProducer = config(servers)
                .set("linger.ms", "20")
                .set("batch.num.messages", "10000")
                .create()
                .map_err(e)?;
            let consumer: BaseConsumer = config(servers).create().map_err(e)?;
            let n = partitions(&consumer, topic)?.max(1);
            let mut sent = 0u64;
            for line in std::io::stdin().lock().split(b'\n') {
                let line = line.map_err(|e| e.to_string())?;
                if line.is_empty() {
                    continue;
                }
                let mut record = BaseRecord::<[u8], [u8]>::to(topic)
                    .payload(&line)
                    .partition((sent % n as u64) as i32);
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((_, back)) => {
                            record = back;
                            producer.poll(Duration::from_millis(10));
                        }
                    }
                }
                sent += 1;
            }
            producer.flush(Duration::from_secs(300)).map_err(e)?;
            println!("{sent}");
        }
        "count" | "dump" => {
            // Read from the start until nothing comes for a second: Tansu
            // 0.6's high watermarks do not count records (see
            // docs/queues.md), so they cannot say where a topic ends.
            let consumer: BaseConsumer = config(servers)
                .set("group.id", "kafka-tool")
                .set("enable.auto.commit", "false")
                .create()
                .map_err(e)?;
            let mut list = TopicPartitionList::new();
            for p in 0..partitions(&consumer, topic)? {
                list.add_partition_offset(topic, p, Offset::Beginning)
                    .map_err(e)?;
            }
            consumer.assign(&list).map_err(e)?;
            let mut records: Vec<((i32, i64), Vec<u8>)> = Vec::new();
            let mut quiet = std::time::Instant::now();
            while quiet.elapsed() < Duration::from_secs(1) {
                match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) => {
                        quiet = std::time::Instant::now();
                        let payload = if command == "dump" {
                            m.payload().unwrap_or_default().to_vec()
                        } else {
                            Vec::new()
                        };
                        records.push(((m.partition(), m.offset()), payload));
                    }
                    Some(Err(err)) => return Err(err.to_string()),
                    None => {}
                }
            }
            if command == "count" {
                println!("{}", records.len());
                return Ok(());
            }
            records.sort_by_key(|(at, _)| *at);
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for (_, payload) in records {
                out.write_all(&payload)
                    .and_then(|()| out.write_all(b"\n"))
                    .map_err(|e| e.to_string())?;
            }
            out.flush().map_err(|e| e.to_string())?;
        }
        "committed" => {
            // kafka_tool committed HOST:PORT TOPIC GROUP: the group's
            // committed offsets on TOPIC, summed.
            let group = rest.first().ok_or("committed needs GROUP")?;
            let consumer: BaseConsumer = config(servers)
                .set("group.id", group)
                .set("enable.auto.commit", "false")
                .create()
                .map_err(e)?;
            let mut list = TopicPartitionList::new();
            for p in 0..partitions(&consumer, topic)? {
                list.add_partition(topic, p);
            }
            let committed = consumer.committed_offsets(list, TIMEOUT).map_err(e)?;
            let sum: i64 = committed
                .elements()
                .iter()
                .filter_map(|el| match el.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                })
                .sum();
            println!("{sum}");
        }
        other => return Err(format!("unknown command {other}")),
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kafka_tool: {e}");
            ExitCode::FAILURE
        }
    }
}
