#!/usr/bin/env python3
"""Benchmark of the Python package (not a test): messages/s, CPU and peak
RSS of each way of calling it, beside the CLI, datasketch and rensa doing
the same work in the same run, each scored by
../shared/data/synthetic/score.py (its rules: precision, recall, F1).

    python3 python/bench.py                      # dev-200k, every method
    python3 python/bench.py --limit 50000        # the first 50,000 messages
    python3 python/bench.py --only cli,check_many

It makes its own virtual environment (target/bench-venv: maturin, pandas,
datasketch, rensa from pip; the package built into it with maturin), and
runs again inside it. Every method is a command that score.py runs with
the stream on stdin, writing each line back with its verdict, so each is
timed end to end (reading and writing included) in its own process, whose
peak RSS and CPU score.py measures. The Python methods also time their
call alone (the `call` columns): the JSON parsing and output around it
are Python's, not the engine's.

Methods:
  cli           target/release/dedup-stream --quiet (built if missing)
  check_many    Deduper().check_many(texts, ids, urls)
  check_many_2threads  the same from two threads sharing one Deduper, each
                taking the next chunk of 1,024 in turn (the GIL is released:
                one thread prepares while the other decides)
  check         for text, id, urls in ...: Deduper.check(text, id=id, urls=urls)
  check_records Deduper().check_records(lines)   (the CLI's field discovery)
  dedupe_frame  dedupe_frame(pandas DataFrame of id_str, text, urls)

(urls: each tweet's entities.urls and media as {short: expanded}, which
the CLI reads by itself.)
  dedupe_jsonl  dedupe_jsonl("/dev/stdin", "/dev/stdout")
  datasketch    MinHashLSH(threshold=0.5, num_perm=128), word 2-shingles
  rensa         RMinHashLSH(threshold=0.5, num_perm=128, num_bands=64), word 2-shingles

datasketch and rensa run the loop their READMEs show, with the settings
the shared README gives for them (word 2-shingles after lower-casing and
dropping RT prefixes, mentions and links; threshold 0.5): query, take the
candidate of highest estimated Jaccard at or above 0.5 as the match,
insert every message.
"""

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "synthetic"
METHODS = ["cli", "check_many", "check_many_2threads", "check", "check_records", "dedupe_frame", "dedupe_jsonl", "datasketch", "rensa"]
PEERS = {"datasketch": "datasketch", "rensa": "rensa"}


# ---------------------------------------------------------------- runners
# Each runner reads JSON lines on stdin and writes them tagged on stdout;
# the seconds (and CPU seconds) of its call alone go to $BENCH_TIMING.


def read_stdin():
    lines = sys.stdin.buffer.read().splitlines()
    ids, texts, urls = [], [], []
    for line in lines:
        obj = json.loads(line)
        ids.append(obj["id_str"])
        texts.append(obj["text"])
        entities = obj.get("entities") or {}
        urls.append({u["url"]: u["expanded_url"] for u in entities.get("urls", []) + entities.get("media", [])} or None)
    return lines, ids, texts, urls


def tagged(line, member):
    return line[: line.rindex(b"}")] + b',"dedup":' + member + b"}\n"


def write(lines, members):
    out = sys.stdout.buffer
    for line, member in zip(lines, members):
        out.write(tagged(line, member))
    out.flush()


def timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    t1, c1 = time.perf_counter(), time.process_time()
    path = os.environ.get("BENCH_TIMING")
    if path:
        Path(path).write_text(json.dumps({"seconds": t1 - t0, "cpu_seconds": c1 - c0}))
    return result


def run_ours(method):
    import dedup_stream as ds

    if method == "dedupe_jsonl":
        # No JSON work in Python at all: the pipeline reads and writes.
        timed(lambda: ds.dedupe_jsonl("/dev/stdin", "/dev/stdout"))
        return
    lines, ids, texts, urls = read_stdin()
    d = ds.Deduper()
    # Texts with their URL entities (short link -> expanded), as the CLI
    # reads a tweet.
    if method == "check_many":
        verdicts = timed(lambda: d.check_many(texts, ids, urls))
    elif method == "check_many_2threads":
        verdicts = timed(lambda: two_threads(d, texts, ids, urls))
    elif method == "check":
        check = d.check
        verdicts = timed(lambda: [check(t, id=i, urls=u) for t, i, u in zip(texts, ids, urls)])
    elif method == "check_records":
        verdicts = timed(lambda: d.check_records(lines))
    elif method == "dedupe_frame":
        import pandas as pd

        df = pd.DataFrame({"id_str": ids, "text": texts, "urls": urls})
        out = timed(lambda: ds.dedupe_frame(df, urls="urls", deduper=d))
        members = []
        for status, of, s in zip(out["dedup_status"], out["duplicate_of"], out["similarity"]):
            if status == "duplicate":
                members.append(json.dumps({"status": "duplicate", "duplicate_of": of, "similarity": round(s, 4)}).encode())
            else:
                members.append(b'{"status":"new"}')
        write(lines, members)
        return
    write(lines, [v.to_json().encode() for v in verdicts])


def two_threads(d, texts, ids, urls, chunk=1024):
    """check_many from two threads sharing one Deduper: each takes the next
    chunk of the stream in turn, so chunks are decided nearly in order
    (two at a time interleave, 512 messages at a time)."""
    import threading

    verdicts = [None] * len(texts)
    lock = threading.Lock()
    next_start = [0]

    def work():
        while True:
            with lock:
                start = next_start[0]
                next_start[0] += chunk
            if start >= len(texts):
                return
            end = start + chunk
            verdicts[start:end] = d.check_many(texts[start:end], ids[start:end], urls[start:end])

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return verdicts


NOISE = re.compile(r"^(rt\s+@\w+:?\s*)+|@\w+|https?://\S+")
WORD = re.compile(r"\w+")


def shingles(text):
    words = WORD.findall(NOISE.sub(" ", text.lower()))
    grams = [f"{a} {b}" for a, b in zip(words, words[1:])]
    return grams or words or [""]


def run_peer(method):
    lines, ids, texts, _ = read_stdin()
    if method == "datasketch":
        from datasketch import MinHash, MinHashLSH

        lsh = MinHashLSH(threshold=0.5, num_perm=128)

        def make(grams):
            m = MinHash(num_perm=128)
            m.update_batch([g.encode() for g in grams])
            return m

        key = str  # datasketch keys are any hashable; its README uses str

    else:
        from rensa import RMinHash, RMinHashLSH

        lsh = RMinHashLSH(threshold=0.5, num_perm=128, num_bands=64)

        def make(grams):
            m = RMinHash(num_perm=128, seed=42)
            m.update(grams)
            return m

        key = int  # rensa takes integer keys

    def work():
        members, kept = [], []
        for n, t in enumerate(texts):
            m = make(shingles(t))
            best, best_s = None, 0.5
            for c in lsh.query(m):
                c = int(c)
                s = m.jaccard(kept[c])
                if s > best_s or (s == best_s and (best is None or c < best)):
                    best, best_s = c, s
            if best is None:
                members.append(b'{"status":"new"}')
            else:
                members.append(
                    json.dumps({"status": "duplicate", "duplicate_of": ids[best], "similarity": round(best_s, 4)}).encode()
                )
            lsh.insert(key(n), m)
            kept.append(m)
        return members

    write(lines, timed(work))


# ---------------------------------------------------------------- harness


def in_venv(venv):
    return Path(sys.prefix).resolve() == venv.resolve()


def make_venv(venv):
    """The benchmark's environment: the package and its peers."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + ["maturin>=1.5,<2", "pandas"], check=True)
    for peer in PEERS.values():
        if subprocess.run(pip + [peer]).returncode != 0:
            print(f"bench: {peer} did not install: its rows are left out", file=sys.stderr)
    env = dict(os.environ, VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}:{os.environ['PATH']}")
    env.setdefault("CARGO_TARGET_DIR", str(ROOT / "target" / "python"))
    subprocess.run([str(venv / "bin" / "maturin"), "develop", "--quiet"], cwd=ROOT / "python", env=env, check=True)
    return python


def unpack(src, dst, limit):
    opener = gzip.open if str(src).endswith(".gz") else open
    with opener(src, "rb") as f, open(dst, "wb") as out:
        for n, line in enumerate(f):
            if limit is not None and n >= limit + (1 if "truth" in str(dst) else 0):
                break
            out.write(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(SHARED / "dev-200k.jsonl.gz"))
    ap.add_argument("--truth", default=str(SHARED / "dev-200k.truth.tsv.gz"))
    ap.add_argument("--limit", type=int, help="only the first N messages")
    ap.add_argument("--only", help="comma-separated methods (default: all)")
    ap.add_argument("--venv", default=str(ROOT / "target" / "bench-venv"))
    ap.add_argument("--json-out", help="write the rows as JSON here")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.run:
        (run_peer if a.run in PEERS else run_ours)(a.run)
        return

    venv = Path(a.venv)
    if not in_venv(venv):
        python = make_venv(venv)
        os.execv(str(python), [str(python), __file__, *sys.argv[1:]])

    methods = a.only.split(",") if a.only else METHODS
    cli = ROOT / "target" / "release" / "dedup-stream"
    if "cli" in methods and not cli.exists():
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    score = SHARED / "score.py"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data, truth = tmp / "data.jsonl", tmp / "truth.tsv"
        unpack(a.data, data, a.limit)
        unpack(a.truth, truth, a.limit)
        messages = sum(1 for _ in open(data, "rb"))
        for method in methods:
            if method in PEERS:
                try:
                    __import__(PEERS[method])
                except ImportError:
                    print(f"bench: {method}: not installed, left out", file=sys.stderr)
                    continue
            if method == "cli":
                cmd = f"{cli} --quiet"
            else:
                cmd = f"{sys.executable} {__file__} --run {method}"
            timing = tmp / f"{method}.timing.json"
            metrics = tmp / f"{method}.json"
            env = dict(os.environ, BENCH_TIMING=str(timing))
            print(f"bench: {method} ...", file=sys.stderr, flush=True)
            done = subprocess.run(
                [sys.executable, str(score), "--cmd", cmd, "--data", str(data), "--truth", str(truth),
                 "--allow-extra-keys", "--quiet", "--json-out", str(metrics)],
                env=env, capture_output=True, text=True,
            )
            if not metrics.exists():
                print(f"bench: {method} failed:\n{done.stdout}{done.stderr}", file=sys.stderr)
                continue
            m = json.loads(metrics.read_text())
            row = {
                "method": method,
                "messages": messages,
                "msgs_per_s": m.get("msgs_per_s"),
                "cpu_us_per_msg": 1e6 * m["cpu_s"] / messages if m.get("cpu_s") else None,
                "peak_rss_mb": m.get("peak_rss_mb"),
                "precision": m.get("precision"),
                "recall": m.get("recall"),
                "f1": m.get("f1"),
            }
            if timing.exists():
                t = json.loads(timing.read_text())
                row["call_msgs_per_s"] = messages / t["seconds"]
                row["call_cpu_us_per_msg"] = 1e6 * t["cpu_seconds"] / messages
            if done.returncode != 0:
                row["contract"] = "violated"
            rows.append(row)
            print(f"bench: {method}: {json.dumps(row)}", file=sys.stderr, flush=True)
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(rows, indent=1))
    fmt = lambda v, spec: "–" if v is None else format(v, spec)
    print(f"{messages} messages ({Path(a.data).name}{', first ' + str(a.limit) if a.limit else ''})\n")
    print("| method | msg/s (end to end) | msg/s (call) | CPU µs/msg (process) | CPU µs/msg (call) | peak RSS MB | precision | recall | F1 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['method']} | {fmt(r['msgs_per_s'], ',.0f')} | {fmt(r.get('call_msgs_per_s'), ',.0f')} "
            f"| {fmt(r['cpu_us_per_msg'], '.1f')} | {fmt(r.get('call_cpu_us_per_msg'), '.1f')} "
            f"| {fmt(r['peak_rss_mb'], ',.0f')} | {fmt(r['precision'], '.4f')} | {fmt(r['recall'], '.4f')} | {fmt(r['f1'], '.4f')} |"
        )


if __name__ == "__main__":
    main()
