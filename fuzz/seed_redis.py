#!/usr/bin/env python3
"""Seeds the redis_decode fuzz target's corpus: python3 seed_redis.py DIR BIN FIXTURES

With a redis-server on the PATH, the seeds are real: a throwaway Redis on a
free loopback port (in a temporary directory, nothing saved) is filled by
the filter (BIN --index redis://...) over fixture lines, and what it left
there is read back: the log's batches, whole XRANGE replies of the log,
snapshots of a small index, and stream entries. Without one, a few seeds
are built here in the same formats.

Each seed is the target's input: a byte choosing the decoder (0 a log
batch, 1 a snapshot, 2 an XRANGE reply of the log, 3 a stream entry), a
byte of parameter (0 for the stream field "json"), then the bytes.
"""

import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

MAX_SEEDS = 40


def encode(value):
    """A value as Redis sends it (RESP2)."""
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    return b"*%d\r\n" % len(value) + b"".join(encode(v) for v in value)


class Redis:
    """Just enough of a RESP2 client for the keys the seeds come from."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def _need(self, end):
        while len(self.buf) < end:
            data = self.sock.recv(1 << 16)
            if not data:
                raise EOFError("redis closed the connection")
            self.buf += data

    def _line(self, pos):
        while True:
            i = self.buf.find(b"\r\n", pos)
            if i >= 0:
                return i
            self._need(len(self.buf) + 1)

    def _value(self, pos):
        i = self._line(pos)
        kind, head, end = self.buf[pos : pos + 1], self.buf[pos + 1 : i], i + 2
        if kind == b"+":
            return head.decode(), end
        if kind == b"-":
            raise RuntimeError(head.decode())
        if kind == b":":
            return int(head), end
        if kind == b"$":
            n = int(head)
            if n < 0:
                return None, end
            self._need(end + n + 2)
            return self.buf[end : end + n], end + n + 2
        if kind == b"*":
            n = int(head)
            if n < 0:
                return None, end
            items = []
            for _ in range(n):
                item, end = self._value(end)
                items.append(item)
            return items, end
        raise RuntimeError("unexpected reply %r" % kind)

    def call(self, *args):
        self.sock.sendall(encode([a if isinstance(a, bytes) else str(a).encode() for a in args]))
        value, end = self._value(0)
        self.buf = self.buf[end:]
        return value

    def scan(self, pattern):
        cursor, keys = b"0", []
        while True:
            cursor, batch = self.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
            keys += batch
            if cursor == b"0":
                return sorted(keys)


WRITTEN = []


def write(out, name, mode, param, payload):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([mode, param]) + payload)
    WRITTEN.append(name)


def batch(messages, forget=()):
    """A log entry's batch, as src/redis_index/log.rs writes it."""
    out = struct.pack("<BI", 1, len(forget))
    for token in forget:
        out += struct.pack("<H", len(token)) + token
    out += struct.pack("<I", len(messages))
    for flags, time_ms, id_num, token, shingles, keys in messages:
        out += struct.pack("<Bq", flags | (4 if token else 0), time_ms)
        out += struct.pack("<BQ", 0, id_num)
        if token:
            out += struct.pack("<H", len(token)) + token
        out += struct.pack("<QH", 0x1234_5678_9ABC_DEF0, len(shingles))
        out += b"".join(struct.pack("<I", s) for s in shingles)
        out += struct.pack("<B", len(keys)) + b"".join(struct.pack("<I", k) for k in keys)
    return out


def built_seeds(out):
    """Seeds in the formats the index's log and Redis write, made here."""
    one = batch([(0, 0, 1234, b"", [3, 17, 256], [1, 2, 3, 4, 5, 6, 7, 8, 9])])
    two = batch([(2, -5, 7, b"q:in:g:1-0", [1, 2], [9]), (1, 99, 8, b"", [], [])],
                forget=[b"q:in:g:0-1"])
    write(out, "built-batch-one", 0, 0, one)
    write(out, "built-batch-two", 0, 0, two)
    entry = [b"1700000000000-0", [b"n", b"1", b"w", b"00ab", b"c", b"1", b"b", one]]
    write(out, "built-log-reply", 2, 0, encode([entry]))
    write(out, "built-log-reply-empty", 2, 0, encode([]))
    write(out, "built-entry-stream", 3, 0, encode([b"1700000000000-0", [b"json", b'{"id":1,"text":"hi"}']]))
    write(out, "built-entry-deleted", 3, 0, encode([b"1700000000000-1", None]))


def real_seeds(out, binary, fixtures):
    work = tempfile.mkdtemp(prefix="dedup-seed-redis-")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", work,
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        redis = None
        for _ in range(100):
            try:
                redis = Redis(port)
                redis.call("PING")
                break
            except OSError:
                time.sleep(0.05)
        if redis is None:
            raise RuntimeError("redis-server did not start")
        url = "redis://127.0.0.1:%d" % port
        # A few small runs: log entries, and snapshots of a small index.
        for name in ["retweet_storm.jsonl", "v2_tweets.jsonl", "cjk.jsonl", "tour.jsonl"]:
            with open(os.path.join(fixtures, name), "rb") as f:
                subprocess.run([binary, "--quiet", "--capacity", "8", "--index", url,
                                "--log-snapshot-every", "5"], stdin=f,
                               stdout=subprocess.DEVNULL, check=True)
            at = redis.call("HGET", "{dedup-stream}:cfg", "snap_n")
            if at is not None:
                chunk = redis.call("GET", b"{dedup-stream}:snap:" + at + b":0")
                if chunk:
                    write(out, "redis-snapshot-" + name, 1, 0, chunk)
        log = redis.call("XRANGE", "{dedup-stream}:log", "-", "+", "COUNT", MAX_SEEDS)
        for n, entry in enumerate(log):
            fields = entry[1]
            payload = fields[fields.index(b"b") + 1]
            write(out, "redis-batch-%d" % n, 0, 0, payload)
            write(out, "redis-log-reply-%d" % n, 2, 0, encode([entry]))
        # A consumer over a stream: its entries.
        lines = []
        for name in ["retweet_storm.jsonl", "v2_tweets.jsonl", "cjk.jsonl", "bad_lines.jsonl"]:
            with open(os.path.join(fixtures, name), "rb") as f:
                lines += [l.rstrip(b"\n") for l in f if l.strip()][:60]
        for line in lines:
            redis.call("XADD", "tweets", "*", "json", line)
        entries = redis.call("XRANGE", "tweets", "-", "+", "COUNT", MAX_SEEDS)
        for n, entry in enumerate(entries):
            write(out, "redis-stream-entry-%d" % n, 3, 0, encode(entry))
        if entries:
            write(out, "redis-stream-entry-deleted", 3, 0, encode([entries[0][0], None]))
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def main():
    out, binary, fixtures = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    built_seeds(out)
    if shutil.which("redis-server") is None:
        print("seed_redis: no redis-server: built seeds only", file=sys.stderr)
        return
    built = len(WRITTEN)
    try:
        real_seeds(out, binary, fixtures)
    except Exception as e:  # The built seeds are still there.
        print("seed_redis: real seeds failed (%s): built seeds only" % e, file=sys.stderr)
        return
    print("seed_redis: %d seeds from redis-server, %d built" % (len(WRITTEN) - built, built),
          file=sys.stderr)


if __name__ == "__main__":
    main()
