#!/usr/bin/env python3
"""The acknowledging script of `consume --redis` against an earlier one, on
the same entries: Redis CPU per entry acknowledged.

Starts a redis-server (no persistence) on a free loopback port; per round
and script, loads N lines of the stream as entries, makes them pending on
one consumer (one XREADGROUP), then runs the script over them in batches of
256 (each entry's output a tagged copy of its line), all through
`redis-cli --pipe`, and prints Redis CPU per entry (INFO cpu, the requests'
reading included) and the scripts' own time per entry (commandstats).
"old" is `ACK_SCRIPT` of src/consume.rs at --base (the script that called
XPENDING and XACK for each entry), "new" the working tree's.

Usage: python3 scripts/redis_script_bench.py [--base 23d6e47] [--limit 50000] [--rounds 3]
"""
import argparse
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


ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--base", default="23d6e47")
ap.add_argument("--limit", type=int, default=50000)
ap.add_argument("--rounds", type=int, default=3)
opts = ap.parse_args()
old = ack_script(subprocess.run(["git", "-C", ROOT, "show", f"{opts.base}:src/consume.rs"],
                                capture_output=True, text=True, check=True).stdout)
new = ack_script(open(os.path.join(ROOT, "src", "consume.rs")).read())
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    P = str(s.getsockname()[1])
tmp = tempfile.mkdtemp(prefix="redis-script-bench-")
server = subprocess.Popen(["redis-server", "--port", P, "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no", "--dir", tmp],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(0.5)
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
for rnd in range(opts.rounds):
  for name, script in (("old", old), ("new", new)):
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
        if name == "old":
            args = [b"g", b"json"]
        else:
            args = [b"g", b"json", b"c", chunk[0][0], chunk[-1][0]]
        for i, t in tagged:
            args += [i, b"o", t, b""]
        calls.append(resp("EVALSHA", sha, 3, "in", "out", "out:invalid", *args))
    cli("CONFIG", "RESETSTAT")
    c0 = cpu()
    t0 = time.perf_counter()
    subprocess.run(["redis-cli", "-p", P, "--pipe"], input=b"".join(calls), capture_output=True, check=True)
    el = time.perf_counter() - t0
    c1 = cpu()
    pend = cli("XPENDING", "in", "g").split(b"\n")[0]
    print(f"{name}: evalsha {stats()/len(ids):.2f} µs/entry (usec), Redis CPU {(c1-c0)/len(ids)*1e6:.2f} µs/entry, xlen out {cli('XLEN','out').strip().decode()}, pending {pend.decode()}", flush=True)
server.terminate()
server.wait()
shutil.rmtree(tmp, ignore_errors=True)
