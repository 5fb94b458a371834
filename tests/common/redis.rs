//! Real Redis servers for the tests: `redis-server` on a free loopback port
//! in a temporary directory, stopped when dropped.
//!
//! Without `redis-server` on the PATH the tests that need one are skipped
//! with a message on stderr, unless `DEDUP_REQUIRE_REDIS=1` (which CI
//! sets): then a missing server fails them.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `redis-server` can be run; if not, and it is not required, the
/// caller skips (and this says so).
pub fn available(test: &str) -> bool {
    super::Program {
        name: "redis-server",
        required_by: "DEDUP_REQUIRE_REDIS",
        install: "apt-get install redis-server",
    }
    .available(test)
}

/// A loopback port nobody listens on now (and, for a cluster node, its
/// bus port too: the port plus 10000).
pub fn free_port(with_bus: bool) -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().unwrap().port();
        if !with_bus {
            return port;
        }
        if port < 55000 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

/// A running `redis-server`.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    process: super::ServerProcess,
    args: Vec<String>,
    _temp: Option<tempfile::TempDir>,
}

impl RedisServer {
    /// A server with no persistence.
    pub fn start() -> RedisServer {
        Self::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// A server with the append-only file on, synced at every write: a
    /// restart (even after SIGKILL) loses nothing it acknowledged.
    pub fn start_with_aof() -> RedisServer {
        Self::start_with(&[
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ])
    }

    /// A server with these extra arguments, in its own temporary directory.
    pub fn start_with(args: &[&str]) -> RedisServer {
        Self::start_on(free_port(args.contains(&"--cluster-enabled")), args)
    }

    /// A server on `port` with these extra arguments.
    pub fn start_on(port: u16, args: &[&str]) -> RedisServer {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let dir = temp.path().to_path_buf();
        let mut server = RedisServer {
            port,
            dir,
            process: super::ServerProcess::default(),
            args: args.iter().map(|s| s.to_string()).collect(),
            _temp: Some(temp),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        self.process = super::ServerProcess::spawn(
            Command::new("redis-server")
                .arg("--port")
                .arg(self.port.to_string())
                .arg("--bind")
                .arg("127.0.0.1")
                .arg("--dir")
                .arg(&self.dir)
                .args(&self.args)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "redis-server",
        );
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut con) = self.try_connection() {
                match redis::cmd("PING").query::<String>(&mut con) {
                    Ok(_) => return,
                    // A server with --requirepass is up too.
                    Err(e) if e.code() == Some("NOAUTH") => return,
                    Err(_) => {}
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A connection to it.
    pub fn connection(&self) -> redis::Connection {
        self.try_connection()
            .expect("connect to the test redis-server")
    }

    /// Kills it with SIGKILL (nothing flushed but what was synced).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts it again on the same port and directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// `used_memory` from `INFO memory`.
    pub fn used_memory(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query(&mut self.connection())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("INFO memory has used_memory")
    }

    /// Every key whose name starts with `prefix`.
    pub fn keys_with_prefix(&self, prefix: &str) -> Vec<Vec<u8>> {
        let mut con = self.connection();
        let all: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
        all.into_iter()
            .filter(|k| k.starts_with(prefix.as_bytes()))
            .collect()
    }
}

/// A Redis Cluster of three masters on loopback.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three nodes and joins them (`redis-cli --cluster create`).
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = RedisCluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.nodes.iter().all(|n| {
            redis::cmd("CLUSTER")
                .arg("INFO")
                .query::<String>(&mut n.connection())
                .is_ok_and(|info| info.contains("cluster_state:ok"))
        }) {
            assert!(Instant::now() < deadline, "the cluster did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// `redis+cluster://HOST:PORT,…` naming every node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The port of the node serving `key`'s slot.
    pub fn owner_of(&self, key: &str) -> u16 {
        let mut con = self.nodes[0].connection();
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut con)
            .unwrap();
        let slots: Vec<(i64, i64, (String, i64))> = {
            let value: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).unwrap();
            let redis::Value::Array(ranges) = value else {
                panic!("CLUSTER SLOTS is an array")
            };
            ranges
                .into_iter()
                .map(|range| {
                    let redis::Value::Array(parts) = range else {
                        panic!()
                    };
                    let int = |v: &redis::Value| match v {
                        redis::Value::Int(n) => *n,
                        _ => panic!("an integer"),
                    };
                    let redis::Value::Array(node) = &parts[2] else {
                        panic!()
                    };
                    (
                        int(&parts[0]),
                        int(&parts[1]),
                        (String::new(), int(&node[1])),
                    )
                })
                .collect()
        };
        slots
            .into_iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, (_, port))| port as u16)
            .expect("every slot is served")
    }
}
