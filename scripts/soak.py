#!/usr/bin/env python3
"""Soak test of the sidecar: a steady load for a long time, sampled.

Starts `dedup-stream serve` on loopback (capacity well below the messages
sent, so the index fills and then evicts for most of the run), sends
tweet-like messages at a steady rate over several connections, one message
at a time per connection (as consumers asking per message do), and every
`--every` seconds prints the server's RSS, the round-trip latency
percentiles of that window, the error lines, the messages answered and the
index's size and evictions (from `/metrics`). A flat RSS and flat latency
once the index is full are what it is for; it stops by itself.

Usage: python3 scripts/soak.py [--minutes 10] [--rate 2000] [--connections 8]
       [--capacity 50000] [--every 10] [--binary target/release/dedup-stream]
Only loopback is used.
"""

import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def metric(text, name):
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


class Stats:
    """Latencies and counts of the current window, shared by the senders."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latencies = []
        self.errors = 0
        self.answered = 0
        self.duplicates = 0

    def take(self):
        with self.lock:
            window = (self.latencies, self.errors, self.answered, self.duplicates)
            self.latencies, self.errors, self.answered, self.duplicates = [], 0, 0, 0
            return window


def sender(port, rate, stop, stats, seed, first_id, step):
    """One connection: a message every 1/rate seconds, each awaited."""
    rng = random.Random(seed)
    rare = [f"w{i}" for i in range(16384)]
    common = ["the", "of", "and", "a", "to", "in", "is", "for", "on", "with"]
    recent = []
    sock = socket.create_connection(("127.0.0.1", port))
    reader = sock.makefile("rb")
    interval = 1.0 / rate
    next_at = time.perf_counter()
    n = first_id
    while not stop.is_set():
        if recent and rng.random() < 0.3:
            text = "RT @someone: " + rng.choice(recent)
        else:
            words = [rng.choice(common) if rng.random() < 0.2 else rng.choice(rare)
                     for _ in range(rng.randint(10, 20))]
            text = " ".join(words)
            recent.append(text)
            recent = recent[-64:]
        line = json.dumps({"id_str": str(n), "text": text}) + "\n"
        n += step
        started = time.perf_counter()
        sock.sendall(line.encode())
        reply = reader.readline()
        elapsed = time.perf_counter() - started
        with stats.lock:
            if not reply or b'"error"' in reply:
                stats.errors += 1
            else:
                stats.answered += 1
                stats.duplicates += b'"duplicate"' in reply
            stats.latencies.append(elapsed)
        if not reply:
            return
        next_at += interval
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        else:
            next_at = time.perf_counter()  # behind: do not burst to catch up


def percentile(values, q):
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--rate", type=float, default=2000, help="messages/s in total")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--capacity", type=int, default=50_000)
    ap.add_argument("--every", type=float, default=10)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "dedup-stream"))
    args = ap.parse_args()
    port, admin = free_port(), free_port()
    server = subprocess.Popen(
        [args.binary, "serve", "--listen", f"127.0.0.1:{port}", "--admin",
         f"127.0.0.1:{admin}", "--capacity", str(args.capacity), "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{admin}/healthz", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        stats, stop = Stats(), threading.Event()
        per = args.rate / args.connections
        threads = [threading.Thread(target=sender, daemon=True,
                                    args=(port, per, stop, stats, i, i, args.connections))
                   for i in range(args.connections)]
        for t in threads:
            t.start()
        print(f"soak: {args.minutes:g} min at {args.rate:g} messages/s over "
              f"{args.connections} connections, capacity {args.capacity:,}")
        print("| t (s) | answered | messages/s | duplicates | errors | p50 ms | p99 ms | "
              "max ms | server RSS MB | indexed | evicted |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        started = time.perf_counter()
        total_errors = 0
        while time.perf_counter() - started < args.minutes * 60:
            time.sleep(args.every)
            lat, errors, answered, dups = stats.take()
            total_errors += errors
            text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
            print(f"| {time.perf_counter() - started:.0f} | {answered:,} | {answered / args.every:,.0f} | "
                  f"{dups:,} | {errors} | {percentile(lat, 0.5) * 1e3:.2f} | "
                  f"{percentile(lat, 0.99) * 1e3:.2f} | {max(lat, default=0) * 1e3:.1f} | "
                  f"{rss_kb(server.pid) / 1024:.1f} | {metric(text, 'dedup_index_entries'):,.0f} | "
                  f"{metric(text, 'dedup_evictions_total'):,.0f} |", flush=True)
        stop.set()
        for t in threads:
            t.join(timeout=5)
        print(f"errors in all: {total_errors}")
    finally:
        server.terminate()
        server.wait(timeout=30)
    sys.exit(1 if total_errors else 0)


if __name__ == "__main__":
    main()
