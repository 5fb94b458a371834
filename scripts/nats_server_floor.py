#!/usr/bin/env python3
"""nats-server's own CPU a message, without dedup-stream: what the server
spends storing one output (a JetStream publish with a Nats-Msg-Id) and
delivering one input to a durable pull consumer that acknowledges it.
A `consume --nats` worker costs the server one of each, so their sum is
the server's floor under any worker (issue 36's target: 12 µs).

    python3 scripts/nats_server_floor.py [--server nats-server] [--limit N] MODE...

MODE: `acked` (publishes awaited one acknowledgement each, 256 at a time,
as the worker publishes), `fast` (fast-ingest batches of 256, a stream
with `allow_batched`, nats-server 2.14 and later), `consume` (the stream
loaded first, untimed; then fetched 256 at a time and each message
acknowledged). Each mode runs on a server of its own (file storage, a
temporary directory) and prints one JSON line: messages stored, the
server's CPU µs a message (from /proc), messages a second. The client is
the NATS protocol written by hand (no client library's own costs, which
are the worker's); it checks nothing beyond the count stored.
"""

import argparse
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_STREAM = os.path.join(ROOT, "..", "shared", "data", "synthetic", "dev-200k.jsonl.gz")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(srv_bin, lines, mode):
    n = len(lines)
    port = free_port()
    tmp = tempfile.mkdtemp()
    servers = []
    try:
        _run(srv_bin, lines, n, mode, port, tmp, servers)
    finally:
        for srv in servers:
            srv.terminate()
            srv.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def _run(srv_bin, lines, n, mode, port, tmp, servers):
    srv = subprocess.Popen([srv_bin, "-js", "-p", str(port), "-sd", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    servers.append(srv)
    time.sleep(0.7)
    s = socket.create_connection(("127.0.0.1", port))
    buf = b""

    def read_msgs(count):
        """Reads until `count` MSG frames came; returns their payloads."""
        nonlocal buf
        out = []
        while len(out) < count:
            while True:
                i = buf.find(b"\r\n")
                if i < 0:
                    break
                line = buf[:i]
                if line.startswith(b"MSG"):
                    size = int(line.split()[-1])
                    if len(buf) < i + 2 + size + 2:
                        break
                    out.append(buf[i + 2:i + 2 + size])
                    buf = buf[i + 2 + size + 2:]
                else:
                    buf = buf[i + 2:]
                if len(out) >= count:
                    return out
            buf += s.recv(1 << 20)
        return out
    s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,"protocol":1}\r\n')
    s.sendall(b"SUB _INBOX.x.> 1\r\nSUB _INBOX.y.> 2\r\n")
    cfg = {"name": "S", "subjects": ["s.>"], "storage": "file", "allow_batched": mode == "fast",
           "duplicate_window": 120_000_000_000}
    body = json.dumps(cfg).encode()
    s.sendall(b"PUB $JS.API.STREAM.CREATE.S _INBOX.x.api %d\r\n%s\r\n" % (len(body), body))
    created = json.loads(read_msgs(1)[0])
    if mode == "fast" and not created.get("config", {}).get("allow_batched"):
        print(json.dumps({"mode": mode, "skipped": "this nats-server has no fast ingest (2.14+)"}))
        return
    def cpu():
        f = open(f"/proc/{srv.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    B = 256
    if mode == "consume":
        # Loaded first, untimed; then a durable pull consumer reads it all,
        # acknowledging each message (+ACK), as the worker's inputs.
        for b0 in range(0, n, B):
            out = [b"PUB s.a _INBOX.x.l%d %d\r\n%s\r\n" % (b0 + k, len(l), l) for k, l in enumerate(lines[b0:b0 + B])]
            s.sendall(b"".join(out)); read_msgs(len(out))
        c = json.dumps({"stream_name": "S", "config": {"durable_name": "d", "ack_policy": "explicit",
                        "max_ack_pending": 10000}}).encode()
        s.sendall(b"PUB $JS.API.CONSUMER.CREATE.S.d _INBOX.x.c %d\r\n%s\r\n" % (len(c), c))
        read_msgs(1)
    before, started = cpu(), time.perf_counter()
    for b0 in range(0, n, B) if mode == "consume" else []:
        req = json.dumps({"batch": B, "expires": 2_000_000_000}).encode()
        s.sendall(b"SUB _INBOX.z%d 3%d\r\n" % (b0, b0))
        s.sendall(b"PUB $JS.API.CONSUMER.MSG.NEXT.S.d _INBOX.z%d %d\r\n%s\r\n" % (b0, len(req), req))
        got = 0
        acks = []
        while got < min(B, n - b0):
            # MSG subject sid reply size: the reply is the ack subject.
            while b"\r\n" not in buf:
                buf += s.recv(1 << 20)
            i = buf.find(b"\r\n"); line = buf[:i]
            if line.startswith(b"MSG"):
                parts = line.split(); size = int(parts[-1])
                while len(buf) < i + 2 + size + 2:
                    buf += s.recv(1 << 20)
                if len(parts) == 5:
                    acks.append(b"PUB %s 0\r\n\r\n" % parts[3]); got += 1
                buf = buf[i + 2 + size + 2:]
            else:
                buf = buf[i + 2:]
        s.sendall(b"".join(acks) + b"UNSUB 3%d\r\n" % b0)
    for b0 in range(0, n, B) if mode != "consume" else []:
        batch = lines[b0:b0 + B]
        out = []
        for k, line in enumerate(batch):
            h = b"NATS/1.0\r\nNats-Msg-Id: dedup.in.d.1.%d\r\n\r\n" % (b0 + k)
            if mode == "fast":
                op = 0 if k == 0 else (2 if k == len(batch) - 1 else 1)
                reply = b"_INBOX.y%d.100.fail.%d.%d.$FI" % (b0, k + 1, op)
            else:
                reply = b"_INBOX.x.%d" % (b0 + k)
            out.append(b"HPUB s.a %s %d %d\r\n%s%s\r\n" % (reply, len(h), len(h) + len(line), h, line))
        if mode == "fast":
            s.sendall(b"SUB _INBOX.y%d.> %d\r\n" % (b0, 10 + b0))
        s.sendall(b"".join(out))
        if mode == "fast":
            # Flow acks (every 100) and the commit's pub ack: until the pub ack.
            while True:
                m = read_msgs(1)[0]
                if b'"stream"' in m or b'"error"' in m:
                    if b'"error"' in m: print(m)
                    break
            s.sendall(b"UNSUB %d\r\n" % (10 + b0))
        else:
            read_msgs(len(batch))
    elapsed, used = time.perf_counter() - started, cpu() - before
    body = b""
    s.sendall(b"PUB $JS.API.STREAM.INFO.S _INBOX.x.info 0\r\n\r\n")
    info = json.loads(read_msgs(1)[0])
    print(json.dumps({"mode": mode, "messages": n, "stored": info["state"]["messages"],
                      "server_cpu_us_per_message": round(used / n * 1e6, 2),
                      "messages_per_second": round(n / elapsed)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", default="nats-server", help="the nats-server binary")
    ap.add_argument("--limit", type=int, default=50_000, help="messages (dev-200k's first)")
    ap.add_argument("--stream", default=DEFAULT_STREAM)
    ap.add_argument("modes", nargs="+", choices=["acked", "fast", "consume"])
    args = ap.parse_args()
    if not shutil.which(args.server):
        sys.exit(f"{args.server} not found")
    with gzip.open(args.stream, "rb") as f:
        lines = [l for l in f.read().split(b"\n") if l][: args.limit]
    for mode in args.modes:
        run(args.server, lines, mode)


if __name__ == "__main__":
    main()
