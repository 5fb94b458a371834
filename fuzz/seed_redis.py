#!/usr/bin/env python3
"""Seeds the redis_decode fuzz target's corpus: python3 seed_redis.py DIR BIN FIXTURES

With a redis-server on the PATH, the seeds are real: a throwaway Redis on a
free loopback port (in a temporary directory, nothing saved) is filled by
the filter (BIN --index redis://...) and by a `consume` worker over fixture
lines, and what they left there is read back: indexed messages' entries,
verdicts from the consumer's memo, whole script replies made of those
verdicts, and stream entries. Without one, a few seeds are built here in
the same formats.

Each seed is the target's input: a byte choosing the decoder (0 entry,
1 verdict, 2 reply, 3 stream entry), a byte of parameter (the LSH bands;
the verdicts in a reply; 0 for the stream field "json"), then the bytes.
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


def built_seeds(out):
    """Seeds in the formats decide.lua and Redis write, made here."""
    bands = 9
    keys = [0x1000 + k for k in range(bands + 2)]
    shingles = [3, 17, 256, 70000, 0xFFFFFFF0]
    for name, id_json, cluster, flags in [
        ("new", b'"1234"', b"", 0),
        ("dup", b"42", b'"7"', 0),
        ("cut", b'"a\\u00e9"', b"", 0x80),
    ]:
        entry = struct.pack(">IIBI", 0, 9, len(keys) | flags, len(shingles))
        entry += b"".join(struct.pack(">I", k) for k in keys)
        entry += b"".join(struct.pack(">I", s) for s in shingles)
        entry += struct.pack(">I", len(id_json)) + id_json + cluster
        write(out, "built-entry-" + name, 0, bands, entry)
    verdicts = [b"n", b"d" + struct.pack(">III", 5, 6, 6) + b'"1234"' + b'"1234"',
                b"d" + struct.pack(">III", 3, 3, 2) + b"42" + b'"abc"']
    for i, v in enumerate(verdicts):
        write(out, "built-verdict-%d" % i, 1, 0, v)
    write(out, "built-reply", 2, len(verdicts), encode(verdicts + [12, 0, 1]))
    write(out, "built-reply-empty", 2, 0, encode([0, 0, 0]))
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
        storm = os.path.join(fixtures, "retweet_storm.jsonl")
        with open(storm, "rb") as f:
            subprocess.run([binary, "--quiet", "--index", url], stdin=f,
                           stdout=subprocess.DEVNULL, check=True)
        # A consumer over a stream: its entries, and verdicts in its memo.
        lines = []
        for name in ["retweet_storm.jsonl", "v2_tweets.jsonl", "cjk.jsonl", "bad_lines.jsonl"]:
            with open(os.path.join(fixtures, name), "rb") as f:
                lines += [l.rstrip(b"\n") for l in f if l.strip()][:60]
        for line in lines:
            redis.call("XADD", "tweets", "*", "json", line)
        worker = subprocess.Popen(
            [binary, "consume", "--redis", url, "--stream", "tweets", "--group", "dedup",
             "--output", "tweets:tagged", "--index-name", "consumed"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        # Every entry is appended, tagged, to the output or, malformed, to
        # its invalid stream.
        while time.time() < deadline and redis.call("XLEN", "tweets:tagged") + redis.call(
            "XLEN", "tweets:tagged:invalid"
        ) < len(lines):
            time.sleep(0.1)
        worker.terminate()
        worker.wait(timeout=30)

        for index in ["dedup-stream", "consumed"]:
            settings = redis.call("HGET", "{%s}:cfg" % index, "settings") or b""
            bands = [int(f[6:]) for f in settings.split() if f.startswith(b"bands=")]
            bands = bands[0] if bands else 0
            for n, key in enumerate(redis.scan("{%s}:e:*" % index)[:MAX_SEEDS]):
                write(out, "redis-%s-entry-%d" % (index, n), 0, bands, redis.call("GET", key))
        verdicts = []
        for key in redis.scan("{consumed}:memo:*"):
            values = redis.call("HGETALL", key)[1::2]
            verdicts += sorted(set(v for v in values if v[:1] in (b"n", b"d")))
        # The duplicates first: they hold the most.
        verdicts.sort(key=lambda v: (v[:1] != b"d", len(v)))
        for n, v in enumerate(verdicts[:MAX_SEEDS]):
            write(out, "redis-verdict-%d" % n, 1, 0, v)
        length = redis.call("HGET", "{consumed}:meta", "len")
        length = int(length) if length else 0
        for n in range(1, 6):
            part = verdicts[n - 1 : 2 * n - 1]
            write(out, "redis-reply-%d" % n, 2, len(part), encode(part + [length, 0, 0]))
        entries = redis.call("XRANGE", "tweets", "-", "+", "COUNT", MAX_SEEDS)
        entries += redis.call("XRANGE", "tweets:tagged", "-", "+", "COUNT", 5)
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
