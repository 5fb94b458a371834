#!/usr/bin/env python3
"""The acknowledging script of `consume --redis` against earlier ones, on
the same entries: Redis CPU (or instructions) per entry acknowledged.

Starts a redis-server (no persistence) on a free loopback port; per round
and script, loads N lines of the stream as entries, makes them pending on
one consumer (one XREADGROUP), then runs the script over them in batches of
256 (each entry's output a tagged copy of its line), all through
`redis-cli --pipe`, and prints Redis CPU per entry (INFO cpu, the requests'
reading included) and the scripts' own time per entry (commandstats).
The scripts:
- "per-entry" (23d6e47, src/consume.rs): XPENDING and XACK for each entry;
- "batch" (6bb0421): one XPENDING over the batch's range on this consumer
  and one XACK of them all;
- "now": the working tree's (an XACK, then the XADD, for each entry).

With --callgrind, redis-server runs under valgrind's callgrind and each
script's line also gives Redis's instructions per entry over the batches
(zeroed before, dumped after): figures that hold on a busy machine. Use a
smaller --limit (10000) then: valgrind is about 50 times slower.

Usage: python3 scripts/redis_script_bench.py [--limit 50000] [--rounds 3] [--callgrind]
"""
import argparse
import glob
import gzip
import os
import shutil
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STREAM = os.path.join(ROOT, "..", "shared", "data", "synthetic", "dev-200k.jsonl.gz")


def ack_script(source):
    start = source.index('const ACK_SCRIPT: &str = r"') + len('const ACK_SCRIPT: &str = r"')
    return source[start:source.index('";', start)].encode()


def at(commit, path):
    return subprocess.run(["git", "-C", ROOT, "show", f"{commit}:{path}"],
                          capture_output=True, text=True, check=True).stdout


ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--limit", type=int, default=50000)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--callgrind", action="store_true")
opts = ap.parse_args()


def per_entry_args(chunk):
    args = [b"g", b"json"]
    for i, t in chunk:
        args += [i, b"o", t, b""]
    return args


def batch_args(chunk):
    args = [b"g", b"json", b"c", chunk[0][0], chunk[-1][0]]
    for i, t in chunk:
        args += [i, b"o", t, b""]
    return args


def now_args(chunk):
    args = [b"g", b"json", b"o" * len(chunk)]
    for i, t in chunk:
        args += [i, t]
    return args


scripts = [
    ("per-entry", ack_script(at("23d6e47", "src/consume.rs")), per_entry_args),
    ("batch", ack_script(at("6bb0421", "src/queue/redis_streams.rs")), batch_args),
    ("now", ack_script(open(os.path.join(ROOT, "src", "queue", "redis_streams.rs")).read()),
     now_args),
]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    P = str(s.getsockname()[1])
tmp = tempfile.mkdtemp(prefix="redis-script-bench-")
wrap = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out"] if opts.callgrind else []
server = subprocess.Popen(wrap + ["redis-server", "--port", P, "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no", "--dir", tmp],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(200):
    time.sleep(0.1)
    if subprocess.run(["redis-cli", "-p", P, "PING"], capture_output=True).stdout.strip() == b"PONG":
        break
def resp(*a):
    out = [b"*%d\r\n" % len(a)]
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(x), x))
    return b"".join(out)
def cli(*a):
    return subprocess.run(["redis-cli", "-p", P, *a], capture_output=True, check=True).stdout
lines = []
with gzip.open(STREAM, 'rb') as f:
    for i, l in enumerate(f):
        if i >= opts.limit: break
        lines.append(l.rstrip(b"\n"))
def stats():
    info = cli("INFO", "commandstats").decode()
    for l in info.splitlines():
        if l.startswith("cmdstat_evalsha:"):
            return int(l.split("usec=")[1].split(",")[0])
    return 0
def cpu():
    info = dict(l.split(":",1) for l in cli("INFO","cpu").decode().splitlines() if ":" in l)
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
def instructions():
    """Redis's instructions since the last zeroing (callgrind's dump)."""
    for f in glob.glob(tmp + "/cg.out*"):
        os.remove(f)
    subprocess.run(["callgrind_control", "-d", str(server.pid)], capture_output=True)
    for _ in range(100):
        for f in glob.glob(tmp + "/cg.out*"):
            for line in open(f):
                if line.startswith("summary:") or line.startswith("totals:"):
                    return int(line.split()[1])
        time.sleep(0.1)
    return 0


for rnd in range(opts.rounds):
  for name, script, build in scripts:
    cli("FLUSHALL")
    load = b"".join(resp("XADD", "in", "*", "json", l) for l in lines)
    subprocess.run(["redis-cli", "-p", P, "--pipe"], input=load, capture_output=True, check=True)
    cli("XGROUP", "CREATE", "in", "g", "0")
    # Make them pending on consumer c, and learn their ids.
    out = cli("--raw", "XREADGROUP", "GROUP", "g", "c", "COUNT", "1000000", "STREAMS", "in", ">").split(b"\n")
    ids = [x for x in out if x[:1].isdigit() and b"-" in x and len(x) < 30]
    ids = ids[:len(lines)]
    sha = cli("SCRIPT", "LOAD", script).strip()
    calls = []
    for b in range(0, len(ids), 256):
        chunk = list(zip(ids[b:b+256], lines[b:b+256]))
        tagged = [(i, l[:-1] + b',"dedup":{"status":"new"}}') for i, l in chunk]
        calls.append(resp("EVALSHA", sha, 3, "in", "out", "out:invalid", *build(tagged)))
    cli("CONFIG", "RESETSTAT")
    if opts.callgrind:
        subprocess.run(["callgrind_control", "-z", str(server.pid)], capture_output=True, check=True)
    c0 = cpu()
    subprocess.run(["redis-cli", "-p", P, "--pipe"], input=b"".join(calls), capture_output=True, check=True)
    c1 = cpu()
    counted = f"{instructions() / len(ids):,.0f} instructions/entry, " if opts.callgrind else ""
    pend = cli("XPENDING", "in", "g").split(b"\n")[0]
    print(f"{name}: {counted}evalsha {stats()/len(ids):.2f} µs/entry (usec), Redis CPU {(c1-c0)/len(ids)*1e6:.2f} µs/entry, xlen out {cli('XLEN','out').strip().decode()}, pending {pend.decode()}", flush=True)
server.terminate()
server.wait()
shutil.rmtree(tmp, ignore_errors=True)
