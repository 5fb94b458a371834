#!/usr/bin/env python3
"""HTTP against the line protocol of `dedup-stream serve`, in one run
(Python 3 standard library only).

Both sides get the same lines, each on a fresh server started here on free
loopback ports:
  - line protocol: one TCP connection, every line written by one thread
    while another reads the replies (pipelined, as docs/sidecar.md advises);
  - HTTP: POST /v1/check with NDJSON bodies of --batch lines (512), from
    --in-flight keep-alive connections at once (pipelined batches: each
    connection sends its next batch as soon as its last is answered).
Prints messages/s of each and their ratio (the target of issue 40: HTTP
at least 0.7 of the line protocol).

Usage: scripts/http_bench.py [--bin PATH] [--lines N] [--batch 512]
                             [--in-flight 8] [--rounds 3]
The lines: ../shared/data/synthetic/dev-200k.jsonl.gz when it is there,
else fixtures/synthetic/dev.jsonl.gz (10,000 lines, repeated under new ids).
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEV_200K = REPO.parent / "shared" / "data" / "synthetic" / "dev-200k.jsonl.gz"
DEV_10K = REPO / "fixtures" / "synthetic" / "dev.jsonl.gz"


def load(n: int) -> list[bytes]:
    source = DEV_200K if DEV_200K.exists() else DEV_10K
    with gzip.open(source, "rb") as f:
        base = [line.rstrip(b"\n") for line in f if line.strip()]
    lines = []
    round_no = 0
    while len(lines) < n:
        for line in base:
            if round_no:
                # New ids, so that a second pass is not all repeats.
                line = line.replace(b'"id_str":"', b'"id_str":"r%d-' % round_no, 1)
            lines.append(line + b"\n")
            if len(lines) == n:
                break
        round_no += 1
    print(f"lines: {len(lines):,} from {source.name}")
    return lines


class Server:
    """`dedup-stream serve` on free loopback ports, stopped on exit."""

    def __init__(self, binary: str):
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--listen-http", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        self.tcp = self.http = None
        deadline = time.time() + 30
        while (self.tcp is None or self.http is None) and time.time() < deadline:
            line = self.proc.stderr.readline().decode()
            if not line:
                break
            if m := re.search(r"HTTP listening http=(\S+)", line):
                self.http = m.group(1)
            elif m := re.search(r"listening address=(\S+)", line):
                self.tcp = m.group(1)
        if self.tcp is None or self.http is None:
            raise SystemExit("the server did not start")
        # Keep reading its stderr so that it never blocks on a full pipe.
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def line_protocol(addr: str, lines: list[bytes]) -> float:
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    body = b"".join(lines)

    def send():
        sock.sendall(body)
        sock.shutdown(socket.SHUT_WR)

    started = time.perf_counter()
    writer = threading.Thread(target=send)
    writer.start()
    replies = 0
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        replies += chunk.count(b"\n")
    elapsed = time.perf_counter() - started
    writer.join()
    sock.close()
    assert replies == len(lines), (replies, len(lines))
    return len(lines) / elapsed


def over_http(addr: str, lines: list[bytes], batch: int, in_flight: int) -> float:
    host, port = addr.rsplit(":", 1)
    batches = [b"".join(lines[i:i + batch]) for i in range(0, len(lines), batch)]
    next_batch = iter(range(len(batches)))
    lock = threading.Lock()
    answered = [0] * in_flight

    def worker(k: int):
        conn = http.client.HTTPConnection(host, int(port))
        while True:
            with lock:
                i = next(next_batch, None)
            if i is None:
                break
            conn.request("POST", "/v1/check", body=batches[i],
                         headers={"Content-Type": "application/x-ndjson"})
            response = conn.getresponse()
            assert response.status == 200, response.status
            answered[k] += response.read().count(b"\n")
        conn.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(in_flight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    assert sum(answered) == len(lines), (sum(answered), len(lines))
    return len(lines) / elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", default=str(REPO / "target" / "release" / "dedup-stream"))
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    lines = load(args.lines)
    print(f"binary: {args.bin}; HTTP: batches of {args.batch} lines, "
          f"{args.in_flight} in flight; best of {args.rounds} rounds, a fresh server each")
    best_tcp = best_http = 0.0
    ratios = []
    for round_no in range(1, args.rounds + 1):
        with Server(args.bin) as server:
            tcp = line_protocol(server.tcp, lines)
        with Server(args.bin) as server:
            over = over_http(server.http, lines, args.batch, args.in_flight)
        ratios.append(over / tcp)
        print(f"round {round_no}: line protocol {tcp:,.0f} msg/s, HTTP {over:,.0f} msg/s, "
              f"ratio {over / tcp:.2f}")
        best_tcp, best_http = max(best_tcp, tcp), max(best_http, over)
    ratio = best_http / best_tcp
    # Rounds side by side share the machine's load at that moment: the
    # median of their ratios is the steadier figure on a busy machine.
    median = sorted(ratios)[len(ratios) // 2]
    print(f"best: line protocol {best_tcp:,.0f} msg/s, HTTP {best_http:,.0f} msg/s, "
          f"ratio of the bests {ratio:.2f}, median ratio of the rounds {median:.2f} "
          f"(target 0.70: {'met' if median >= 0.7 else 'NOT met'} by the median)")


if __name__ == "__main__":
    main()
