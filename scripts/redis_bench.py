#!/usr/bin/env python3
"""Benchmark of the index in Redis: 1, 2 and 4 workers sharing one index.

Starts its own redis-server (no persistence) on a free loopback port in a
temporary directory, and for each worker count splits the stream into that
many parts (runs of 1,000 lines dealt round-robin), runs that many filter
processes at once with `--index redis://...`, and reports, all from one run:

- messages/s in total (wall clock, from the first start to the last exit);
- Redis CPU time per message (INFO cpu) and round trips per message
  (INFO commandstats: script calls and reads);
- Redis bytes per indexed message: MEMORY USAGE of the index's keys over the
  messages indexed (`dedup-stream index info`), and used_memory over them;
- how many verdicts the workers verified and Redis took as they were;
- with one worker, whether the output equals the in-memory filter's, byte
  for byte, and the in-memory filter's own messages/s for comparison.

Usage: python3 scripts/redis_bench.py [--stream FILE(.gz)] [--capacity N]
       [--workers 1,2,4] [--binary target/release/dedup-stream]
The default stream is ../shared/data/synthetic/dev-200k.jsonl.gz (v1.1
tweets with templates and copies); without it, examples/gen_stream makes a
stream of 200,000 lines. Build first: cargo build --release --examples.
"""

import argparse
import gzip
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_STREAM = os.path.join(ROOT, "..", "shared", "data", "synthetic", "dev-200k.jsonl.gz")
FIELDS = ["--id-field", "id_str", "--text-field", "text"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(port, *args):
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, check=True
    ).stdout


def info(port, section):
    fields = {}
    for line in cli(port, "INFO", section).splitlines():
        if ":" in line and not line.startswith("#"):
            key, value = line.split(":", 1)
            fields[key.strip()] = value.strip()
    return fields


def commandstats(port):
    calls = {}
    for key, value in info(port, "commandstats").items():
        m = re.search(r"calls=(\d+)", value)
        if m:
            calls[key.removeprefix("cmdstat_")] = int(m.group(1))
    return calls


def cpu(port):
    fields = info(port, "cpu")
    return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def load_stream(path):
    if path and os.path.exists(path):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            return f.read(), os.path.basename(path)
    gen = os.path.join(ROOT, "target", "release", "examples", "gen_stream")
    data = subprocess.run([gen, "200000"], capture_output=True, check=True).stdout
    return data, "examples/gen_stream 200000"


def split(lines, n):
    parts = [[] for _ in range(n)]
    for i in range(0, len(lines), 1000):
        parts[(i // 1000) % n].extend(lines[i : i + 1000])
    return [b"".join(p) for p in parts]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stream", default=DEFAULT_STREAM)
    ap.add_argument("--capacity", type=int, default=100_000)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "dedup-stream"))
    ap.add_argument("--pin", action="store_true",
                    help="run Redis on CPU 0 and the workers on the other CPUs (taskset), as a "
                         "deployment gives Redis a core of its own")
    ap.add_argument("--redis-verifies", action="store_true",
                    help="leave every verification to Redis (the slower path, for comparison)")
    args = ap.parse_args()
    if not shutil.which("redis-server"):
        sys.exit("redis-server is not installed (apt-get install redis-server)")
    data, name = load_stream(args.stream)
    lines = data.splitlines(keepends=True)
    print(f"stream: {name}, {len(lines):,} lines; capacity {args.capacity:,}; "
          f"{os.cpu_count()} cores shared by Redis and the workers")

    base = [args.binary, "--quiet", "--capacity", str(args.capacity), *FIELDS]
    started = time.perf_counter()
    memory = subprocess.run(base, input=data, capture_output=True, check=True).stdout
    memory_rate = len(lines) / (time.perf_counter() - started)
    print(f"in memory, one process: {memory_rate:,.0f} messages/s")

    port = free_port()
    tmp = tempfile.mkdtemp(prefix="dedup-redis-bench-")
    pin_redis = ["taskset", "-c", "0"] if args.pin else []
    pin_workers = ["taskset", "-c", f"1-{os.cpu_count() - 1}"] if args.pin and os.cpu_count() > 1 else []
    server = subprocess.Popen(
        pin_redis + ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                cli(port, "PING")
                break
            except subprocess.CalledProcessError:
                time.sleep(0.05)
        url = f"redis://127.0.0.1:{port}"
        print()
        print("| workers | messages/s | Redis CPU µs/msg | round trips/msg | bytes/indexed msg "
              "(keys) | used_memory/msg | verified by workers | taken by Redis | same as memory |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in [int(w) for w in args.workers.split(",")]:
            cli(port, "FLUSHALL")
            cli(port, "CONFIG", "RESETSTAT")
            memory_before = int(info(port, "memory")["used_memory"])
            cpu_before = cpu(port)
            cmd = [b for b in base if b != "--quiet"] + ["--index", url, "--index-name", f"bench{n}", "-v"]
            if args.redis_verifies:
                cmd.append("--redis-verifies")
            started = time.perf_counter()
            procs = []
            for part in split(lines, n):
                p = subprocess.Popen(pin_workers + cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
                procs.append((p, part))
            outputs = []
            results = [None] * len(procs)

            def talk(i, p, part):
                results[i] = p.communicate(part)

            threads = [threading.Thread(target=talk, args=(i, p, part))
                       for i, (p, part) in enumerate(procs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - started
            verified = taken = 0
            for (p, _), (out, err) in zip(procs, results):
                if p.returncode != 0:
                    sys.exit(f"a worker failed: {err.decode(errors='replace')}")
                outputs.append(out)
                m = re.search(rb"verified_here=(\d+) decided_by_redis=(\d+)", err)
                if m:
                    verified += int(m.group(1))
                    taken += int(m.group(1)) - int(m.group(2))
            calls = commandstats(port)
            trips = sum(v for k, v in calls.items() if k in ("evalsha", "eval", "mget"))
            redis_cpu = cpu(port) - cpu_before
            used = int(info(port, "memory")["used_memory"]) - memory_before
            index = subprocess.run([args.binary, "index", "info", "--index", url,
                                    "--index-name", f"bench{n}"], capture_output=True,
                                   text=True, check=True).stdout
            indexed = int(re.search(r"(\d+) indexed", index).group(1))
            per = re.search(r"(\d+) bytes per indexed message", index)
            same = "yes" if n > 1 or outputs[0] == memory else "NO"
            if n > 1:
                same = "n/a"
            print(f"| {n} | {len(lines) / elapsed:,.0f} | {redis_cpu / len(lines) * 1e6:.1f} | "
                  f"{trips / len(lines):.4f} | {per.group(1) if per else '?'} | "
                  f"{used // max(indexed, 1)} | {verified:,} | {taken:,} | {same} |")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
