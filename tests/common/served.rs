//! A `dedup-stream serve` process for the integration tests: started with
//! options, its stderr collected, killed when dropped.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dedup_stream::server::ListenAddr;

/// A `dedup-stream serve` process, killed when dropped.
pub struct Served {
    /// The process.
    pub child: Child,
    stderr: std::sync::mpsc::Receiver<String>,
    /// Its stderr lines read so far.
    pub log: Vec<String>,
}

impl Served {
    pub fn start(args: &[&str]) -> Served {
        Served::spawn(Command::new(super::bin()).arg("serve").args(args))
    }

    /// Starts `serve` under a shell that first runs `ulimit ULIMIT`.
    #[cfg(unix)]
    pub fn start_with_ulimit(ulimit: &str, args: &[&str]) -> Served {
        let script = format!("ulimit {ulimit} && exec \"$0\" serve \"$@\"");
        Served::spawn(
            Command::new("sh")
                .args(["-c", &script, super::bin()])
                .args(args),
        )
    }

    pub fn spawn(command: &mut Command) -> Served {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Served {
            child,
            stderr: rx,
            log: Vec::new(),
        }
    }

    /// Waits (up to a generous deadline) for a stderr line containing
    /// `needle`, and returns it.
    pub fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(line) = self.log.iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => self.log.push(line),
                Err(_) => panic!("no {needle:?} on stderr: {:#?}", self.log),
            }
        }
    }

    /// Every stderr line so far.
    pub fn drain_log(&mut self) -> &[String] {
        while let Ok(line) = self.stderr.try_recv() {
            self.log.push(line);
        }
        &self.log
    }

    /// The TCP address it printed.
    pub fn tcp_addr(&mut self) -> ListenAddr {
        let line = self.wait_for("listening address=1");
        let addr = line.rsplit("address=").next().unwrap().trim();
        addr.parse().unwrap()
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the exit status, with everything it wrote on stderr.
    pub fn wait(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_millis(500)) {
            self.log.push(line);
        }
        (status, std::mem::take(&mut self.log))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
