#!/usr/bin/env python3
"""Benchmark of `dedup-stream consume --kafka`: 1 and 2 workers end to end.

Starts its own Tansu broker (memory storage, in a temporary directory) on a
free loopback port; for each worker count N, loads the stream into a fresh
input topic of N partitions (not timed; round robin), starts N workers in
one consumer group (index in memory for one worker; with two, a Redis
index started here if `redis-server` is on the PATH), and times from their
start until the group has committed every input's offset (each commit
follows the acknowledgement of its batch's outputs). Reports, from
one run:

- messages/s end to end (wall clock);
- worker CPU (user + system, /proc) per message, all workers together;
- broker (tansu) CPU per message over the same span;
- the outputs produced per input (above 1 only if a worker read records
  again, after a rebalance; below 1 if the broker skipped records: Tansu
  0.6 answers a fetch from inside a batch with the next batch, see
  docs/queues.md);
- with one worker, whether the outputs equal the in-memory filter's lines,
  byte for byte and in order (one input partition, one output partition);
- the rate against the in-memory filter's on the same lines (the filter
  run alone, timed once, before the workers; `filter_messages_per_second`).
- first, a relay round: one worker with `--relay` (the same reads,
  produces and commits, nothing decided), the broker's own limit with this
  client here; each worker round then gives `rate_vs_relay`, and its CPU
  per message against the filter's (`worker_cpu_vs_filter`, the filter's
  from getrusage).

Topics are made, loaded, counted and read with examples/kafka_tool.rs (the
same rdkafka as the worker), since Python here has no Kafka client.

Usage: python3 scripts/kafka_bench.py [--stream FILE(.gz)] [--workers 1,2]
       [--binary target/release/dedup-stream] [--limit N] [--batch 256]
       [--in-flight N] [--threads N] [--tool target/release/examples/kafka_tool]
The default stream is ../shared/data/synthetic/dev-200k.jsonl.gz. Build
first: cargo build --release --example kafka_tool --bin dedup-stream.
Needs `tansu` on the PATH (cargo install tansu --version 0.6.0 --features
dynostore --locked).
"""

import argparse
import gzip
import json
import resource
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_STREAM = os.path.join(ROOT, "..", "shared", "data", "synthetic", "dev-200k.jsonl.gz")
TOOL = os.path.join(ROOT, "target", "release", "examples", "kafka_tool")
if not os.path.exists(TOOL):
    TOOL = os.path.join(ROOT, "target", "debug", "examples", "kafka_tool")
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


def tool(servers, *args, data=None):
    return subprocess.run(
        [TOOL, args[0], servers, *args[1:]], input=data, capture_output=True, check=True
    ).stdout


FILTER_ARGS = ["--quiet", "--id-field", "id_str", "--text-field", "text"]


def filter_rate(binary, lines):
    """The in-memory filter's messages/s on `lines` (wall clock), its
    output, and its CPU (user + system) per message in µs."""
    data = b"\n".join(lines) + b"\n"
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = usage.ru_utime + usage.ru_stime
    started = time.monotonic()
    out = subprocess.run([binary, *FILTER_ARGS], input=data, capture_output=True, check=True)
    rate = len(lines) / (time.monotonic() - started)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage.ru_utime + usage.ru_stime - cpu_before) / len(lines) * 1e6
    return rate, out.stdout, cpu


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


def run(args, servers, broker_pid, lines, workers, redis_url, round_no, filtered, relay=None):
    """One round; `relay`: None for the relay's own round (`--relay`), else
    the relay's messages/s, to compare with."""
    topic, out_topic = f"in{round_no}", f"out{round_no}"
    tool(servers, "create", topic, str(workers))
    tool(servers, "create", out_topic, "1")
    tool(servers, "create", f"{out_topic}.invalid", "1")
    loaded = int(tool(servers, "produce", topic, data=b"\n".join(lines) + b"\n"))
    assert loaded == len(lines), loaded
    group = f"bench{round_no}"
    cmd = [
        args.binary, "consume", "--quiet",
        "--kafka", servers, "--topic", topic, "--group", group,
        "--output-topic", out_topic,
        "--id-field", "id_str", "--text-field", "text", "--batch", str(args.batch),
    ]
    if args.in_flight:
        cmd += ["--in-flight", str(args.in_flight)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if relay is None:
        cmd.append("--relay")
    if workers > 1 and redis_url:
        cmd += ["--index", redis_url, "--index-name", f"bench{round_no}"]
    broker_cpu = cpu_seconds(broker_pid)
    started = time.monotonic()
    procs = [subprocess.Popen(cmd, stderr=subprocess.PIPE) for _ in range(workers)]
    while int(tool(servers, "committed", topic, group)) < len(lines):
        time.sleep(0.2)
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(p.stderr.read().decode())
    elapsed = time.monotonic() - started
    broker_cpu = cpu_seconds(broker_pid) - broker_cpu
    worker_cpu = sum(cpu_seconds(p.pid) for p in procs)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(timeout=60)
    outputs = int(tool(servers, "count", out_topic))
    result = {
        "workers": workers,
        "batch": args.batch,
        "in_flight": args.in_flight or "default",
        "input_partitions": workers,
        "index": "redis" if workers > 1 and redis_url else "memory",
        "messages": len(lines),
        "messages_per_second": round(len(lines) / elapsed),
        "worker_cpu_us_per_message": round(worker_cpu / len(lines) * 1e6, 1),
        "broker_cpu_us_per_message": round(broker_cpu / len(lines) * 1e6, 1),
        "outputs_per_input": round(outputs / len(lines), 4),
        "rate_vs_filter": round(len(lines) / elapsed / filtered[0], 3),
    }
    if relay is None:
        result = {"relay": True, **result}
    else:
        result["worker_cpu_vs_filter"] = round(worker_cpu / len(lines) * 1e6 / filtered[2], 2)
        result["rate_vs_relay"] = round(len(lines) / elapsed / relay, 3)
    if workers == 1 and args.check and relay is not None:
        result["equal_to_the_filter"] = tool(servers, "dump", out_topic) == filtered[1]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stream", default=DEFAULT_STREAM)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "dedup-stream"))
    parser.add_argument("--limit", type=int, default=0, help="first N lines only")
    parser.add_argument("--batch", type=int, default=256, help="the workers' --batch")
    parser.add_argument("--in-flight", type=int, default=0,
                        help="the workers' --in-flight (default: theirs)")
    parser.add_argument("--threads", type=int, default=0,
                        help="the workers' --threads (default: theirs, one a CPU)")
    parser.add_argument("--tool", default=None, help="the kafka_tool example binary")
    parser.add_argument("--no-check", dest="check", action="store_false")
    args = parser.parse_args()
    global TOOL
    if args.tool:
        TOOL = args.tool
    if not shutil.which("tansu"):
        sys.exit("tansu is not on the PATH (cargo install tansu --version 0.6.0 "
                 "--features dynostore --locked)")
    if not os.path.exists(TOOL):
        sys.exit("build first: cargo build --release --example kafka_tool --bin dedup-stream")
    if not os.path.exists(args.binary):
        sys.exit(f"no {args.binary}: cargo build --release")
    lines = read_lines(args.stream, args.limit)
    filtered = filter_rate(args.binary, lines)
    print(json.dumps({"filter_messages_per_second": round(filtered[0]),
                      "filter_cpu_us_per_message": round(filtered[2], 2)}), flush=True)
    tmp = tempfile.mkdtemp(prefix="kafka-bench-")
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    broker = subprocess.Popen(
        ["tansu", "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    servers = f"127.0.0.1:{port}"
    redis = None
    redis_url = None
    try:
        for _ in range(600):
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
        # The relay first: one worker's reads, produces and commits with
        # nothing decided, the broker's own limit here.
        relayed = run(args, servers, broker.pid, lines, 1, None, "relay", filtered)
        print(json.dumps(relayed), flush=True)
        for i, workers in enumerate(int(w) for w in args.workers.split(",")):
            print(json.dumps(run(args, servers, broker.pid, lines, workers, redis_url, i,
                                 filtered, relayed["messages_per_second"])), flush=True)
    finally:
        broker.terminate()
        broker.wait()
        if redis:
            redis.terminate()
            redis.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
