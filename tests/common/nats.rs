//! Real NATS servers for the tests: `nats-server -js` on a free loopback
//! port with its file store in a temporary directory, stopped when
//! dropped; and a client to publish inputs and read outputs with.
//!
//! Without `nats-server` on the PATH the tests that need one are skipped
//! with a message on stderr, unless `DEDUP_REQUIRE_NATS=1` (which CI
//! sets): then a missing server fails them.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;

/// Whether `nats-server` can be run; if not, and it is not required, the
/// caller skips (and this says so).
pub fn available(test: &str) -> bool {
    super::Program {
        name: "nats-server",
        required_by: "DEDUP_REQUIRE_NATS",
        install: "apt-get install nats-server",
    }
    .available(test)
}

/// A running `nats-server` with JetStream.
pub struct NatsServer {
    pub port: u16,
    dir: PathBuf,
    args: Vec<String>,
    process: super::ServerProcess,
    _temp: tempfile::TempDir,
}

impl NatsServer {
    /// A server on a free port, its store in a new temporary directory.
    pub fn start() -> NatsServer {
        Self::start_with(&[])
    }

    /// The same with extra arguments (`--user`, `--pass`, …).
    pub fn start_with(args: &[&str]) -> NatsServer {
        let port = super::free_port();
        let temp = tempfile::tempdir().expect("a temporary directory");
        let mut server = NatsServer {
            port,
            dir: temp.path().to_path_buf(),
            args: args.iter().map(|a| a.to_string()).collect(),
            process: super::ServerProcess::default(),
            _temp: temp,
        };
        server.spawn();
        server
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        self.process = super::ServerProcess::spawn(
            Command::new("nats-server")
                .args(["-js", "-a", "127.0.0.1", "-p"])
                .arg(self.port.to_string())
                .arg("-sd")
                .arg(&self.dir)
                .args(&self.args)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "nats-server",
        );
        super::wait_for_port(self.port, Duration::from_secs(20), "nats-server");
    }

    /// Kills the server (SIGKILL): what it stored stays in its directory.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts it again on the same port and store.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

/// A test's client: a runtime of its own and a JetStream context.
pub struct Client {
    pub runtime: tokio::runtime::Runtime,
    pub js: jetstream::Context,
}

/// One stored message: its subject, headers (name, value) and payload.
#[derive(Clone, Debug)]
pub struct Stored {
    pub subject: String,
    pub headers: Vec<(String, String)>,
    pub payload: Vec<u8>,
}

impl Stored {
    /// The value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Client {
    pub fn connect(url: &str) -> Client {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        // The client does not log in with credentials in the URL.
        let (url, auth) = dedup_stream::queue::nats::split_auth(url);
        let mut options = async_nats::ConnectOptions::new().retry_on_initial_connect();
        if let Some((user, Some(password))) = auth {
            options = options.user_and_password(user, password);
        }
        let client = runtime.block_on(options.connect(url)).expect("connect");
        // The JetStream context spawns a task: it needs the runtime.
        let _entered = runtime.enter();
        let js = jetstream::new(client);
        drop(_entered);
        Client { runtime, js }
    }

    /// Creates a stream (file storage) on `subjects`.
    pub fn create_stream(&self, name: &str, subjects: &[&str]) {
        self.runtime
            .block_on(self.js.create_stream(jetstream::stream::Config {
                name: name.into(),
                subjects: subjects.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }))
            .expect("create the stream");
    }

    /// Deletes a stream (and its consumers).
    pub fn delete_stream(&self, name: &str) {
        self.runtime
            .block_on(self.js.delete_stream(name))
            .expect("delete the stream");
    }

    /// Creates the durable pull consumer `durable` on `stream`, filtering
    /// `subject`, with explicit acks and this ack wait.
    pub fn create_consumer(&self, stream: &str, durable: &str, subject: &str, ack_wait: Duration) {
        self.create_consumer_holding(stream, durable, subject, ack_wait, 0);
    }

    /// The same, letting at most `max_ack_pending` messages wait for their
    /// acknowledgement (0: the server's default, 1,000).
    pub fn create_consumer_holding(
        &self,
        stream: &str,
        durable: &str,
        subject: &str,
        ack_wait: Duration,
        max_ack_pending: i64,
    ) {
        self.runtime.block_on(async {
            let s = self.js.get_stream(stream).await.expect("the stream");
            s.create_consumer(jetstream::consumer::pull::Config {
                durable_name: Some(durable.into()),
                filter_subject: subject.into(),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait,
                max_ack_pending,
                ..Default::default()
            })
            .await
            .expect("create the consumer");
        })
    }

    /// Whether `stream` has the consumer `durable`.
    pub fn has_consumer(&self, stream: &str, durable: &str) -> bool {
        self.runtime.block_on(async {
            match self.js.get_stream(stream).await {
                Ok(s) => s.consumer_info(durable).await.is_ok(),
                Err(_) => false,
            }
        })
    }

    /// Publishes each payload to `subject`, each stored before the next;
    /// retries while the server is away.
    pub fn publish(&self, subject: &str, payloads: &[Vec<u8>]) {
        self.runtime.block_on(async {
            for payload in payloads {
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let sent = match self
                        .js
                        .publish(subject.to_string(), payload.clone().into())
                        .await
                    {
                        Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    };
                    match sent {
                        Ok(()) => break,
                        Err(e) if Instant::now() < deadline => {
                            let _ = e;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(e) => panic!("publishing to {subject}: {e}"),
                    }
                }
            }
        })
    }

    /// Every message `stream` holds, in order (empty if it is missing).
    pub fn read(&self, stream: &str) -> Vec<Stored> {
        self.runtime.block_on(async {
            let Ok(mut s) = self.js.get_stream(stream).await else {
                return Vec::new();
            };
            let Ok(info) = s.info().await else {
                return Vec::new();
            };
            let (first, last) = (info.state.first_sequence, info.state.last_sequence);
            let mut out = Vec::new();
            for seq in first.max(1)..=last {
                if let Ok(m) = s.get_raw_message(seq).await {
                    let headers = m
                        .headers
                        .iter()
                        .flat_map(|(name, values)| {
                            values
                                .iter()
                                .map(move |v| (name.to_string(), v.as_str().to_string()))
                        })
                        .collect();
                    out.push(Stored {
                        subject: m.subject.to_string(),
                        headers,
                        payload: m.payload.to_vec(),
                    });
                }
            }
            out
        })
    }

    /// How many messages `stream` holds (0 if it is missing).
    pub fn count(&self, stream: &str) -> u64 {
        self.runtime.block_on(async {
            match self.js.get_stream(stream).await {
                Ok(mut s) => s.info().await.map_or(0, |i| i.state.messages),
                Err(_) => 0,
            }
        })
    }

    /// (messages waiting for delivery, delivered and not acknowledged) of
    /// a consumer.
    pub fn consumer_backlog(&self, stream: &str, durable: &str) -> (u64, usize) {
        self.runtime.block_on(async {
            let s = self.js.get_stream(stream).await.expect("the stream");
            let info = s.consumer_info(durable).await.expect("the consumer");
            (info.num_pending, info.num_ack_pending)
        })
    }
}
