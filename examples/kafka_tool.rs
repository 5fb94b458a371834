//! A small Kafka client for `scripts/kafka_bench.py` (Python here has no
//! Kafka client): creates topics, loads lines into a topic, counts and
//! dumps a topic. The same rdkafka as the worker.
//!
//! ```text
//! cargo run --release --example kafka_tool -- create  HOST:PORT TOPIC PARTITIONS
//! cargo run --release --example kafka_tool -- produce HOST:PORT TOPIC < lines   # round robin over partitions
//! cargo run --release --example kafka_tool -- count   HOST:PORT TOPIC            # records held
//! cargo run --release --example kafka_tool -- dump    HOST:PORT TOPIC            # values, one a line, partition by partition
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
            let consumer: BaseConsumer = config(servers)
                .set("group.id", "kafka-tool")
                .set("enable.auto.commit", "false")
                .create()
                .map_err(e)?;
            let mut total = 0i64;
            let mut list = TopicPartitionList::new();
            let mut ends = Vec::new();
            for p in 0..partitions(&consumer, topic)? {
                let (low, high) = consumer.fetch_watermarks(topic, p, TIMEOUT).map_err(e)?;
                total += high - low;
                if high > low {
                    list.add_partition_offset(topic, p, Offset::Offset(low))
                        .map_err(e)?;
                    ends.push((p, high));
                }
            }
            if command == "count" {
                println!("{total}");
                return Ok(());
            }
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for (p, high) in ends {
                let mut one = TopicPartitionList::new();
                let low = match list.find_partition(topic, p).map(|e| e.offset()) {
                    Some(Offset::Offset(low)) => low,
                    _ => 0,
                };
                one.add_partition_offset(topic, p, Offset::Offset(low))
                    .map_err(e)?;
                consumer.assign(&one).map_err(e)?;
                let mut next = low;
                while next < high {
                    match consumer.poll(TIMEOUT) {
                        Some(Ok(m)) => {
                            out.write_all(m.payload().unwrap_or_default())
                                .and_then(|()| out.write_all(b"\n"))
                                .map_err(|e| e.to_string())?;
                            next = m.offset() + 1;
                        }
                        Some(Err(err)) => return Err(err.to_string()),
                        None => return Err(format!("no record at {topic}/{p}/{next}")),
                    }
                }
            }
            out.flush().map_err(|e| e.to_string())?;
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
