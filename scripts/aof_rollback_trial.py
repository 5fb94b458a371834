#!/usr/bin/env python3
"""Issue 37's AOF-rollback trial of `consume`: Redis loses its last second.

Starts a throwaway `redis-server` on a free loopback port (a temporary
directory; AOF `everysec` with `aof-timestamp-enabled yes`), puts the first
N lines of `fixtures/synthetic/dev.jsonl.gz` in the stream `in`, runs three
`consume` workers (`--claim-idle 2s`), kills Redis with SIGKILL after
KILL_AT seconds, cuts the AOF at its last timestamp annotation (the last
second's writes, as a machine crash loses them), restarts Redis, waits for
the group to have nothing pending or unread, stops the workers, and prints
one JSON line: lines written, distinct ids, lines that name their own id
as `duplicate_of`, ids written more than once with different lines, and
pairs of ids that name each other.

Usage: python3 scripts/aof_rollback_trial.py BINARY N KILL_AT stream|lines
(`lines`: `--output -`, one stdout file per worker). Only loopback is used.
"""
import glob
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "synthetic", "dev.jsonl.gz")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cli(port, *args, json_out=False):
    extra = ["--json"] if json_out else []
    return subprocess.run(["redis-cli", "-p", str(port), *extra, *args],
                          capture_output=True, text=True).stdout.strip()


def start_redis(args, port):
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while cli(port, "PING") != "PONG":
        time.sleep(0.05)
    return server


def main(binary, n, kill_at, output):
    d = tempfile.mkdtemp()
    port = free_port()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--save", "",
            "--appendonly", "yes", "--appendfsync", "everysec", "--aof-timestamp-enabled", "yes"]
    redis = start_redis(args, port)
    lines = []
    with gzip.open(FIXTURE, "rt") as f:
        for line in f:
            if line.strip():
                lines.append(line.rstrip("\n").encode())
            if len(lines) >= n:
                break
    commands = b"".join(
        b"*5\r\n$4\r\nXADD\r\n$2\r\nin\r\n$1\r\n*\r\n$4\r\njson\r\n$%d\r\n%s\r\n" % (len(l), l)
        for l in lines)
    subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=commands,
                   stdout=subprocess.DEVNULL, check=True)
    out_args = ["--output", "out"] if output == "stream" else ["--output", "-"]
    workers = []
    for i in range(3):
        workers.append(subprocess.Popen(
            [binary, "consume", "--redis", f"redis://127.0.0.1:{port}", "--stream", "in",
             "--group", "g", "--consumer", f"w{i}", "--claim-idle", "2s", "--id-field", "id_str",
             "--text-field", "text", "--quiet", *out_args],
            stdout=open(os.path.join(d, f"w{i}.out"), "wb"),
            stderr=open(os.path.join(d, f"w{i}.err"), "wb")))
    time.sleep(kill_at)
    redis.send_signal(signal.SIGKILL)
    redis.wait()
    aof = sorted(glob.glob(os.path.join(d, "appendonlydir", "*.incr.aof")))[-1]
    data = open(aof, "rb").read()
    cut = data.rfind(b"#TS:")
    if cut > 0:
        open(aof, "wb").write(data[:cut])
    redis = start_redis(args, port)
    deadline = time.time() + 600
    while time.time() < deadline:
        try:
            group = json.loads(cli(port, "XINFO", "GROUPS", "in", json_out=True))[0]
            if group.get("pending") == 0 and group.get("lag") == 0:
                break
        except (ValueError, IndexError):
            pass
        time.sleep(0.5)
    time.sleep(1)
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        w.wait()
    if output == "stream":
        tagged = [e[1][1] for e in json.loads(cli(port, "XRANGE", "out", "-", "+", json_out=True))]
    else:
        tagged = []
        for i in range(3):
            text = open(os.path.join(d, f"w{i}.out"), "rb").read().decode()
            tagged += [l for l in text.split("\n") if l]
    own = 0
    by_id = {}
    names = {}
    for t in tagged:
        v = json.loads(t)
        of = v["dedup"].get("duplicate_of")
        if of == v["id_str"]:
            own += 1
        if of is not None:
            names.setdefault(v["id_str"], set()).add(str(of))
        by_id.setdefault(v["id_str"], set()).add(t)
    mutual = sum(1 for a, bs in names.items() for b in bs if a < b and a in names.get(b, ()))
    print(json.dumps({
        "output": output, "kill_at": kill_at, "lines": len(tagged), "ids": len(by_id),
        "self_duplicates": own,
        "ids_with_differing_lines": sum(1 for s in by_id.values() if len(s) > 1),
        "mutual_pairs": mutual, "aof_bytes_cut": len(data) - cut if cut > 0 else 0}))
    redis.kill()
    redis.wait()
    shutil.rmtree(d)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
