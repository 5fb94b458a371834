#!/usr/bin/env python3
"""Benchmark of a replica applying the shared index's log (issue 42, item 3).

Starts its own redis-server (no persistence) on a free loopback port in a
temporary directory. One worker (the filter with `--index redis://...`)
appends the whole stream to an index's log (each binary its own), with
no snapshot: once as
the filter's full batches (entries of 512 messages), once written to it
`--small` lines at a time with a pause between, so that each entry holds
about that many (as a queue worker's do when messages come slowly), and
once as full batches with a snapshot published every `--snapshot-every`
messages, so that a worker opening it restores the newest snapshot and
applies the entries after it. Then, for each binary and each `--threads`
given, a second worker that appended none of it opens the index with no
input: it applies the whole log, then exits. From one run it prints, for
each:

- messages applied a second (wall clock, the process from start to exit:
  reading the log from Redis, decoding it, deciding);
- the process's CPU time a message (getrusage), and the part of it spent
  counting overlaps on every thread (`--stats`: decide_counting_cpu_seconds);
- the rate on one core of decision: the messages over the time the thread
  that applies the log would take if the counting were spread over
  `--threads` otherwise idle cores (the process's CPU time less the
  counting's, plus the counting's over the threads). It is the ceiling of
  a fleet on a machine with that many cores to spare, and it holds on a
  loaded machine, where wall clocks do not;
- its ratio to the first row's of the same log.

It also checks verdicts: one worker appends all but the last `--tail`
lines to another index, a second worker that did not append them decides
the last lines, and its output must equal the in-memory filter's on those
lines, byte for byte (exit status 1 otherwise); for each binary and
`--threads`, once more with the head appended in small entries, and once
with the head's log snapshotted (the replica restores the snapshot).

Usage: python3 scripts/replica_bench.py [--stream FILE(.gz)] [--limit N]
       [--binaries target/release/dedup-stream[,OTHER]] [--threads 1,2,4]
       [--tail N] [--small N] [--snapshot-every N]

To compare with an earlier build in one run, copy its binary aside and
name both: --binaries before/dedup-stream,target/release/dedup-stream.
"""

import argparse
import gzip
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_STREAM = os.path.join(ROOT, "..", "shared", "data", "synthetic", "dev-200k.jsonl.gz")
FIELDS = ["--id-field", "id_str", "--text-field", "text", "--quiet"]
NO_SNAPSHOT = ["--log-snapshot-every", str(10**12)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(port, *args):
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, check=True
    ).stdout


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def append_slowly(cmd, lines, size):
    """Runs `cmd`, writing `lines` to it `size` at a time with a pause
    between, so that its reader finds the input idle after each."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    for at in range(0, len(lines), size):
        proc.stdin.write(b"".join(lines[at:at + size]))
        proc.stdin.flush()
        time.sleep(0.002)
    proc.stdin.close()
    if proc.wait() != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode})")


def run(cmd, data):
    """Runs `cmd` on `data`: its stdout, wall seconds and CPU seconds."""
    cpu = children_cpu()
    started = time.perf_counter()
    out = subprocess.run(cmd, input=data, capture_output=True)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr.decode()}")
    return out.stdout, wall, children_cpu() - cpu


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stream", default=DEFAULT_STREAM)
    p.add_argument("--limit", type=int, default=200_000)
    p.add_argument("--binaries", default=os.path.join(ROOT, "target", "release", "dedup-stream"))
    p.add_argument("--threads", default="1,2,4")
    p.add_argument("--tail", type=int, default=10_000)
    p.add_argument("--small", type=int, default=32)
    p.add_argument("--snapshot-every", type=int, default=50_000)
    args = p.parse_args()
    if not shutil.which("redis-server"):
        sys.exit("redis-server is not installed")
    opener = gzip.open if args.stream.endswith(".gz") else open
    with opener(args.stream, "rb") as f:
        lines = f.read().splitlines(keepends=True)[: args.limit]
    data = b"".join(lines)
    binaries = args.binaries.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    print(f"stream: {os.path.basename(args.stream)}, {len(lines):,} lines; "
          f"{os.cpu_count()} cores, shared by Redis and the workers")

    port = free_port()
    tmp = tempfile.mkdtemp(prefix="dedup-replica-bench-")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    failed = False
    try:
        for _ in range(200):
            try:
                cli(port, "PING")
                break
            except subprocess.CalledProcessError:
                time.sleep(0.05)
        url = f"redis://127.0.0.1:{port}"
        index = ["--index", url, *NO_SNAPSHOT, *FIELDS]
        snapshotted = ["--index", url, "--log-snapshot-every", str(args.snapshot_every), *FIELDS]
        # The logs, appended by each binary: the rule of the decision (a
        # hash of its source) is stored with an index, and a build of
        # other source is refused.
        for i, binary in enumerate(binaries):
            run([binary, *index, "--index-name", f"full{i}"], data)
            append_slowly([binary, *index, "--index-name", f"small{i}"], lines, args.small)
            run([binary, *snapshotted, "--index-name", f"snap{i}"], data)
        for name in ["full", "small", "snap"]:
            entries = int(cli(port, "XLEN", f"{{{name}0}}:log"))
            if name == "snap":
                print(f"log snap: {entries:,} entries left after the newest snapshot")
            else:
                print(f"log {name}: {len(lines):,} messages in {entries:,} entries "
                      f"({len(lines) / entries:.1f} messages each)")
        print()
        print("| log | binary | --threads | applied/s (wall) | CPU µs/msg | "
              "counting CPU µs/msg | applied/s on one core of decision | ratio |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for log in ["full", "small", "snap"]:
            first = None
            for i, binary in enumerate(binaries):
                for t in threads:
                    stats = os.path.join(tmp, "stats.json")
                    _, wall, cpu = run([binary, *index, "--index-name", f"{log}{i}",
                                        "--threads", str(t),
                                        "--stats", stats], b"")
                    with open(stats) as f:
                        summary = json.load(f)
                    counting = summary.get("decide_counting_cpu_seconds", 0.0)
                    core = cpu - counting + counting / t
                    rate = len(lines) / core
                    first = first or rate
                    name = os.path.relpath(binary, ROOT)
                    print(f"| {log} | {name} | {t} | {len(lines) / wall:,.0f} | "
                          f"{cpu / len(lines) * 1e6:.2f} | {counting / len(lines) * 1e6:.2f} | "
                          f"{rate:,.0f} | {rate / first:.2f} |")

        # Verdicts: a replica that did not append the head decides the tail
        # as the in-memory filter does.
        head, tail = lines[: -args.tail], lines[-args.tail:]
        memory, _, _ = run([binaries[-1], *FIELDS], data)
        expected = b"".join(memory.splitlines(keepends=True)[-args.tail:])
        checks = [(binary, t, "full") for binary in binaries for t in threads]
        checks.append((binaries[-1], threads[-1], "small"))
        checks.append((binaries[-1], threads[-1], "snap"))
        for n, (binary, t, how) in enumerate(checks):
            name = f"check{n}"
            if how == "small":
                append_slowly([binary, *index, "--index-name", name], head, args.small)
            elif how == "snap":
                run([binary, *snapshotted, "--index-name", name], b"".join(head))
            else:
                run([binary, *index, "--index-name", name], b"".join(head))
            out, _, _ = run([binary, *index, "--index-name", name, "--threads", str(t)],
                            b"".join(tail))
            same = out == expected
            failed |= not same
            entries = {
                "full": "full entries",
                "small": f"entries of about {args.small}",
                "snap": f"full entries, snapshotted every {args.snapshot_every:,}",
            }[how]
            print(f"{os.path.relpath(binary, ROOT)} --threads {t}, the head in {entries}: the "
                  f"last {len(tail):,} lines decided by a replica "
                  f"{'equal' if same else 'DIFFER FROM'} the in-memory filter's, byte for byte")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
