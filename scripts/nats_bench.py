#!/usr/bin/env python3
"""Benchmark of `dedup-stream consume --nats`: 1 and 2 workers end to end.

Starts its own `nats-server -js` (file store in a temporary directory) on a
free loopback port; for each worker count, loads the stream into a fresh
input stream (not timed), starts that many workers on one durable consumer
(index in memory for one worker; with two, a Redis index started here if
`redis-server` is on the PATH), and times from their start until the
output stream holds one message per input. Reports, from one run:

- messages/s end to end (wall clock);
- worker CPU (user + system, /proc) per message, all workers together;
- nats-server CPU per message over the same span;
- with one worker, whether the outputs equal the in-memory filter's lines,
  byte for byte and in order;
- the rate and the worker's CPU per message against the in-memory
  filter's on the same lines (the filter run alone, timed once, before
  the workers: `filter_messages_per_second`, `rate_vs_filter`,
  `worker_cpu_vs_filter`);
- with `--relay`, first a relay round: one worker with `--relay` (the same
  fetches, publishes and acknowledgements, no engine: the broker's own
  limit with this client here); each worker round then gives
  `rate_vs_relay`.

It speaks the NATS text protocol itself (CONNECT, PUB, SUB, PING), so it
needs nothing beyond Python 3.

Usage: python3 scripts/nats_bench.py [--stream FILE(.gz)] [--workers 1,2]
       [--binary target/release/dedup-stream] [--limit N] [--relay]
       [--in-flight N] [--threads N]
The default stream is ../shared/data/synthetic/dev-200k.jsonl.gz. Build
first: cargo build --release.
"""

import argparse
import gzip
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_STREAM = os.path.join(ROOT, "..", "shared", "data", "synthetic", "dev-200k.jsonl.gz")
TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """User + system CPU of a process (and its waited-for children)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICKS


class Nats:
    """A minimal NATS client: publish, request and read replies."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""
        self.line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nPING\r\n')
        self.until_pong()
        self.sock.sendall(b"SUB _BENCH.> 1\r\n")
        self.inbox = 0

    def line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(1 << 16)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n + 2:
            self.buf += self.sock.recv(1 << 16)
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def until_pong(self):
        while True:
            line = self.line()
            if line == b"PONG":
                return
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())

    def request(self, subject, payload):
        self.inbox += 1
        reply = f"_BENCH.{self.inbox}"
        data = json.dumps(payload).encode()
        self.sock.sendall(f"PUB {subject} {reply} {len(data)}\r\n".encode() + data + b"\r\n")
        while True:
            line = self.line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"MSG") or line.startswith(b"HMSG"):
                parts = line.split()
                if line.startswith(b"HMSG"):
                    self.exact(int(parts[-1]))
                    return {}
                body = self.exact(int(parts[-1]))
                if parts[1].decode() == reply:
                    return json.loads(body or b"{}")
            elif line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())

    def publish_all(self, subject, payloads, window=2000):
        """Publishes with JetStream acks, `window` in flight at a time."""
        sent = acked = 0
        pending = []
        for payload in payloads:
            self.inbox += 1
            reply = f"_BENCH.{self.inbox}"
            pending.append(f"PUB {subject} {reply} {len(payload)}\r\n".encode() + payload + b"\r\n")
            sent += 1
            if len(pending) >= window:
                self.sock.sendall(b"".join(pending))
                pending.clear()
                acked += self.drain_acks(sent - acked - 0)
        if pending:
            self.sock.sendall(b"".join(pending))
        acked += self.drain_acks(sent - acked)
        return acked

    def drain_acks(self, n):
        got = 0
        while got < n:
            line = self.line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"MSG"):
                body = self.exact(int(line.split()[-1]))
                if b'"error"' in body:
                    raise RuntimeError(body.decode())
                got += 1
        return got

    def stored(self, stream):
        info = self.request(f"$JS.API.STREAM.INFO.{stream}", {})
        return info.get("state", {}).get("messages", 0)

    def message(self, stream, seq):
        reply = self.request(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        import base64

        return base64.b64decode(reply["message"].get("data", ""))


def read_lines(path, limit):
    opener = gzip.open if path.endswith(".gz") else open
    out = []
    with opener(path, "rb") as f:
        for line in f:
            line = line.rstrip(b"\r\n")
            if line:
                out.append(line)
                if limit and len(out) >= limit:
                    break
    return out


def filter_rate(binary, lines):
    """The in-memory filter's messages/s on `lines` (wall clock), its
    output lines, and its CPU (user + system) per message in µs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = usage.ru_utime + usage.ru_stime
    started = time.monotonic()
    out = subprocess.run(
        [binary, "--quiet", "--id-field", "id_str", "--text-field", "text"],
        input=b"\n".join(lines) + b"\n", capture_output=True, check=True,
    )
    rate = len(lines) / (time.monotonic() - started)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage.ru_utime + usage.ru_stime - cpu_before) / len(lines) * 1e6
    return rate, out.stdout.splitlines(), cpu


def run(args, port, nats_pid, lines, workers, redis_url, round_no, filtered, relay=None):
    """One round; `relay`: "relay" for the relay's own round (`--relay`),
    else the relay's messages/s to compare with, or None."""
    stream, out_stream = f"in{round_no}", f"out{round_no}"
    client = Nats(port)
    client.request(
        f"$JS.API.STREAM.CREATE.{stream}",
        {"name": stream, "subjects": [f"{stream}.tweets"], "storage": "file"},
    )
    client.publish_all(f"{stream}.tweets", lines)
    assert client.stored(stream) == len(lines)
    cmd = [
        args.binary, "consume", "--quiet",
        "--nats", f"nats://127.0.0.1:{port}",
        "--stream", stream, "--subject", f"{stream}.tweets", "--durable", "dedup", "--create",
        "--output-subject", f"{out_stream}.tagged", "--output-stream", out_stream,
        "--id-field", "id_str", "--text-field", "text",
    ]
    if workers > 1 and redis_url:
        cmd += ["--index", redis_url, "--index-name", f"bench{round_no}"]
    if args.in_flight:
        cmd += ["--in-flight", str(args.in_flight)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if relay == "relay":
        cmd.append("--relay")
    server_cpu = cpu_seconds(nats_pid)
    started = time.monotonic()
    procs = [subprocess.Popen(cmd, stderr=subprocess.PIPE) for _ in range(workers)]
    while client.stored(out_stream) < len(lines):
        time.sleep(0.05)
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(p.stderr.read().decode())
    elapsed = time.monotonic() - started
    server_cpu = cpu_seconds(nats_pid) - server_cpu
    worker_cpu = sum(cpu_seconds(p.pid) for p in procs)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(timeout=30)
    result = {
        "workers": workers,
        "index": "redis" if workers > 1 and redis_url else "memory",
        "messages": len(lines),
        "messages_per_second": round(len(lines) / elapsed),
        "worker_cpu_us_per_message": round(worker_cpu / len(lines) * 1e6, 1),
        "server_cpu_us_per_message": round(server_cpu / len(lines) * 1e6, 1),
    }
    result["rate_vs_filter"] = round(len(lines) / elapsed / filtered[0], 3)
    result["worker_cpu_vs_filter"] = round(worker_cpu / len(lines) * 1e6 / filtered[2], 2)
    if relay == "relay":
        return {"relay": True, **result}
    if relay:
        result["rate_vs_relay"] = round(len(lines) / elapsed / relay, 3)
    if workers == 1 and args.check:
        sample = range(1, len(lines) + 1, max(1, len(lines) // 500))
        result["equal_to_the_filter_sampled"] = all(
            client.message(out_stream, seq) == filtered[1][seq - 1] for seq in sample
        )
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stream", default=DEFAULT_STREAM)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "dedup-stream"))
    parser.add_argument("--limit", type=int, default=0, help="first N lines only")
    parser.add_argument("--no-check", dest="check", action="store_false")
    parser.add_argument("--relay", action="store_true", help="a relay round first")
    parser.add_argument("--in-flight", type=int, default=0, help="the workers' --in-flight")
    parser.add_argument("--threads", type=int, default=0,
                        help="the workers' --threads (default: theirs, one a CPU)")
    args = parser.parse_args()
    if not shutil.which("nats-server"):
        sys.exit("nats-server is not on the PATH (apt-get install nats-server)")
    lines = read_lines(args.stream, args.limit)
    tmp = tempfile.mkdtemp(prefix="nats-bench-")
    port = free_port()
    server = subprocess.Popen(
        ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", tmp],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    redis = None
    redis_url = None
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        if shutil.which("redis-server"):
            redis_port = free_port()
            redis = subprocess.Popen(
                ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no",
                 "--dir", tmp],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            redis_url = f"redis://127.0.0.1:{redis_port}"
            time.sleep(0.5)
        filtered = filter_rate(args.binary, lines)
        print(json.dumps({"filter_messages_per_second": round(filtered[0]),
                          "filter_cpu_us_per_message": round(filtered[2], 2)}), flush=True)
        relayed = None
        if args.relay:
            result = run(args, port, server.pid, lines, 1, None, "relay", filtered, "relay")
            print(json.dumps(result), flush=True)
            relayed = result["messages_per_second"]
        for i, workers in enumerate(int(w) for w in args.workers.split(",")):
            result = run(args, port, server.pid, lines, workers, redis_url, i, filtered, relayed)
            print(json.dumps(result), flush=True)
    finally:
        server.terminate()
        server.wait()
        if redis:
            redis.terminate()
            redis.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
