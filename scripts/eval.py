#!/usr/bin/env python3
"""Quality evaluation of dedup-stream on real, labelled data (Python 3.11, stdlib only).

Runs the dedup-stream binary over the data sets described in ../shared/data/README.md
(or over the small labelled slice in fixtures/eval/) and prints, per data set:

  1. native retweets (rtweet_fixtures, twarc_csv_testdata, tweepy_cassettes_v1,
     json_benchmark_twitter): recall on records whose ground-truth cluster appeared
     earlier in the stream, tagged duplicates outside their cluster, quotes tagged
     duplicate of what they quote, precision (a lower bound);
  2. CrisisLex T26 silver recall and the number of extra duplicates found;
  3. false-positive rates on human-labelled pairs (PIT-2015 dev, Twitter URL corpus),
     each pair streamed as a then b with --capacity 1;
  4. optionally (--curve) a threshold curve as a markdown table.

Usage:
  scripts/eval.py [--bin PATH] [--data DIR | --fixtures DIR] [--json] [--show-fp N]
                  [--show-extra N] [--show-miss N] [--curve 0.3,0.5,...] [--strict]
                  [--opt=--shingle --opt=words:2] [-- BINARY OPTIONS...]
  scripts/eval.py --make-fixtures fixtures/eval [--data DIR]

Exit status: 0 unless --strict is given and a target fails or a run errors.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BIN = REPO / "target" / "release" / "dedup-stream"
DEFAULT_DATA = REPO.parent / "shared" / "data"

# The labelled synthetic streams (../shared/data/synthetic/README.md): name,
# data, truth, and the F1 of the peers tuned on dev.jsonl, as that README
# gives them, to print beside ours.
SYNTHETIC = [
    ("dev (10,000)", "dev.jsonl", "dev.truth.tsv",
     "exact Jaccard 0.992, rensa 0.989, datasketch 0.984"),
    ("dev-200k (200,000)", "dev-200k.jsonl.gz", "dev-200k.truth.tsv.gz",
     "rensa 0.980 (0.982 on siblings), datasketch 0.976 (0.977)"),
]
# Issue 12's targets on them: (F1, precision).
SYNTHETIC_TARGETS = {"dev (10,000)": (0.995, 0.997), "dev-200k (200,000)": (0.99, 0.995)}

RETWEET_STREAMS = ["rtweet_fixtures", "twarc_csv_testdata", "tweepy_cassettes_v1", "json_benchmark_twitter"]
INFO_STREAMS = ["tweepy_cassettes_v2"]  # no retweet metadata: every tagged duplicate is "beyond ground truth"
CRISISLEX = "crisislex_t26_labeled"

TARGETS = {
    "retweet_recall": (">=", 0.99),
    "quote_dup_of_quoted": ("==", 0),
    "crisislex_silver_recall": (">=", 0.995),
    "pit_fp_rate": ("<=", 0.005),
    "url_fp_rate": ("<=", 0.01),
}

# binary options that take a value (everything else is treated as a flag)
VALUE_OPTS = {"--threshold", "--capacity", "--shingle", "--sample", "--measure", "--id-field", "--text-field"}

DEFAULT_ID_PATHS = ["id_str", "id", "data.id"]
DEFAULT_TEXT_PATHS = ["extended_tweet.full_text", "full_text", "text", "data.text"]

csv.field_size_limit(1 << 30)


# ----------------------------------------------------------------------------- helpers

def get_path(obj, path):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def strip_opts(opts, names):
    """Remove options in `names` (and their values) from a binary option list."""
    out, i = [], 0
    while i < len(opts):
        o = opts[i]
        name = o.split("=", 1)[0]
        if name in names:
            i += 1 if ("=" in o or name not in VALUE_OPTS) else 2
            continue
        out.append(o)
        i += 1
    return out


def opt_values(opts, name):
    vals, i = [], 0
    while i < len(opts):
        o = opts[i]
        if o == name and i + 1 < len(opts):
            vals.append(opts[i + 1])
            i += 2
            continue
        if o.startswith(name + "="):
            vals.append(o.split("=", 1)[1])
        i += 1
    return vals


def id_key(value):
    """Canonical key of a JSON id value (string and number keep distinct forms)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def loose_key(value):
    return str(value)


def record_text(obj, text_paths=None):
    """The text the binary compares (best effort, for display only)."""
    if not isinstance(obj, dict):
        return ""
    if not text_paths:
        rs = obj.get("retweeted_status")
        if isinstance(rs, dict):
            t = record_text(rs)
            if t:
                return t
        for p in DEFAULT_TEXT_PATHS:
            v = get_path(obj, p)
            if isinstance(v, str):
                return v
        return ""
    parts = [get_path(obj, p) for p in text_paths]
    return " ".join(p for p in parts if isinstance(p, str))


def pct(x):
    return "n/a" if x is None else f"{100.0 * x:.2f}%"


def ratio(a, b):
    return None if b == 0 else a / b


def short(s, n=200):
    s = re.sub(r"\s+", " ", s or "").strip()
    return s if len(s) <= n else s[: n - 1] + "…"


# ----------------------------------------------------------------------------- data model

@dataclass
class Stream:
    name: str
    kind: str                    # "retweet" | "silver" | "info"
    lines: list                  # raw input lines (bytes, without newline)
    gt: list                     # ground-truth rows (dicts), same order as lines
    objs: list = field(default_factory=list)


@dataclass
class Pairs:
    name: str                    # "pit" | "url"
    pairs: list                  # (pair_id, cls, label, text_a, text_b); cls in neg/pos/other


def load_jsonl_lines(path):
    data = Path(path).read_bytes()
    return [l.rstrip(b"\r") for l in data.split(b"\n") if l.strip()]


def read_tsv(path):
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def pit_class(label):
    label = label.strip()
    if label in ("(0, 5)", "(1, 4)"):
        return "neg"
    if label in ("(5, 0)", "(4, 1)"):
        return "pos"
    return "other"


def load_pit(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            p = line.rstrip("\n").split("\t")
            if len(p) < 5:
                continue
            pairs.append((str(n), pit_class(p[4]), p[4].strip(), p[2], p[3]))
    return pairs


def load_url(d):
    d = Path(d)
    a = (d / "a.toks").read_text(encoding="utf-8").split("\n")
    b = (d / "b.toks").read_text(encoding="utf-8").split("\n")
    s = (d / "sim.txt").read_text(encoding="utf-8").split("\n")
    pairs = []
    for i, lab in enumerate(s):
        lab = lab.strip()
        if lab == "":
            continue
        pairs.append((str(i + 1), "neg" if lab == "0" else "pos", lab, a[i], b[i]))
    return pairs


def load_pairs_tsv(path):
    rows = read_tsv(path)
    out = []
    for r in rows:
        out.append((r["pair_id"], r["class"], r["label"], r["text_a"], r["text_b"]))
    return out


def load_data(data_dir):
    d = Path(data_dir)
    streams, pairs, missing = [], [], []
    for name in RETWEET_STREAMS + INFO_STREAMS:
        p = d / f"{name}.jsonl"
        g = d / f"{name}.groundtruth.tsv"
        if p.exists() and g.exists():
            streams.append(Stream(name, "retweet" if name in RETWEET_STREAMS else "info",
                                  load_jsonl_lines(p), read_tsv(g)))
        else:
            missing.append(name)
    p, g = d / f"{CRISISLEX}.jsonl", d / f"{CRISISLEX}.silver_groundtruth.tsv"
    if p.exists() and g.exists():
        streams.append(Stream(CRISISLEX, "silver", load_jsonl_lines(p), read_tsv(g)))
    else:
        missing.append(CRISISLEX)
    if (d / "pit2015" / "dev.data").exists():
        pairs.append(Pairs("pit", load_pit(d / "pit2015" / "dev.data")))
    else:
        missing.append("pit2015")
    if (d / "twitter_url_corpus" / "sim.txt").exists():
        pairs.append(Pairs("url", load_url(d / "twitter_url_corpus")))
    else:
        missing.append("twitter_url_corpus")
    return streams, pairs, missing


def load_fixtures(fx_dir):
    d = Path(fx_dir)
    streams, pairs, missing = [], [], []
    if (d / "retweets.jsonl").exists():
        streams.append(Stream("rtweet_fixtures(slice)", "retweet", load_jsonl_lines(d / "retweets.jsonl"),
                              read_tsv(d / "retweets.groundtruth.tsv")))
    else:
        missing.append("retweets.jsonl")
    if (d / "crisislex.jsonl").exists():
        streams.append(Stream("crisislex_t26(slice)", "silver", load_jsonl_lines(d / "crisislex.jsonl"),
                              read_tsv(d / "crisislex.silver_groundtruth.tsv")))
    else:
        missing.append("crisislex.jsonl")
    pit = []
    for fn in ("pit_negatives.tsv", "pit_positives.tsv"):
        if (d / fn).exists():
            pit += load_pairs_tsv(d / fn)
        else:
            missing.append(fn)
    if pit:
        pairs.append(Pairs("pit", pit))
    if (d / "url_negatives.tsv").exists():
        pairs.append(Pairs("url", load_pairs_tsv(d / "url_negatives.tsv")))
    else:
        missing.append("url_negatives.tsv")
    return streams, pairs, missing


# ----------------------------------------------------------------------------- running the binary

def run_binary(binary, opts, data: bytes, timeout):
    try:
        cp = subprocess.run([str(binary)] + list(opts), input=data, capture_output=True, timeout=timeout)
    except FileNotFoundError:
        return None, f"binary not found: {binary}", -1
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout}s", -1
    return cp.stdout, cp.stderr.decode("utf-8", "replace"), cp.returncode


def parse_output(out: bytes, in_lines, id_paths, key_to_index):
    """Align output lines with input records.

    Returns (tags, problems): tags[i] is None (no output line) or a dict with
    status, dup_key, dup_loose, similarity. Alignment is by the record id (ids are unique
    in every stream used here); the byte-prefix contract is checked on the way.
    """
    tags = [None] * len(in_lines)
    problems = {"unparseable_output": 0, "unaligned_output": 0, "prefix_mismatch": 0,
                "missing_dedup": 0, "bad_dedup": 0, "out_of_order": 0, "repeated": 0}
    last = -1
    for raw in out.split(b"\n"):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            problems["unparseable_output"] += 1
            continue
        idx = None
        if isinstance(obj, dict):
            for p in id_paths:
                v = get_path(obj, p)
                if v is not None:
                    idx = key_to_index.get(id_key(v))
                    if idx is None:
                        idx = key_to_index.get(loose_key(v))
                    break
        if idx is None:
            # fall back to byte-prefix alignment after the last aligned record
            for j in range(last + 1, min(len(in_lines), last + 50)):
                core = in_lines[j].strip()
                if core.endswith(b"}") and raw.startswith(core[:-1].rstrip()):
                    idx = j
                    break
        if idx is None:
            problems["unaligned_output"] += 1
            continue
        if idx <= last:
            problems["out_of_order" if tags[idx] is None else "repeated"] += 1
        last = max(last, idx)
        core = in_lines[idx].strip()
        if not (core.endswith(b"}") and raw.startswith(core[:-1].rstrip())):
            problems["prefix_mismatch"] += 1
        dd = obj.get("dedup") if isinstance(obj, dict) else None
        if not isinstance(dd, dict):
            problems["missing_dedup"] += 1
            continue
        st = dd.get("status")
        if st == "new":
            tags[idx] = {"status": "new"}
        elif st == "duplicate" and "duplicate_of" in dd:
            v = dd["duplicate_of"]
            tags[idx] = {"status": "duplicate", "dup_key": id_key(v), "dup_loose": loose_key(v),
                         "similarity": dd.get("similarity")}
        else:
            problems["bad_dedup"] += 1
    problems["no_output_line"] = sum(1 for t in tags if t is None)
    return tags, problems


# ----------------------------------------------------------------------------- evaluation

def build_index(stream: Stream, id_paths):
    if not stream.objs:
        stream.objs = [json.loads(l) for l in stream.lines]
    key_to_index = {}
    for i, o in enumerate(stream.objs):
        for p in id_paths:
            v = get_path(o, p)
            if v is not None:
                key_to_index.setdefault(id_key(v), i)
        for p in id_paths:
            v = get_path(o, p)
            if v is not None:
                key_to_index.setdefault(loose_key(v), i)
    return key_to_index


def resolve(tag, key_to_index):
    i = key_to_index.get(tag["dup_key"])
    if i is None:
        i = key_to_index.get(tag["dup_loose"])
    return i


def eval_stream(stream: Stream, binary, opts, cfg):
    id_fields = opt_values(opts, "--id-field")
    id_paths = id_fields[-1:] if id_fields else DEFAULT_ID_PATHS
    text_paths = opt_values(opts, "--text-field") or None
    key_to_index = build_index(stream, id_paths)
    data = b"\n".join(stream.lines) + b"\n"
    out, err, rc = run_binary(binary, opts, data, cfg.timeout)
    res = {"name": stream.name, "kind": stream.kind, "records": len(stream.lines)}
    if out is None or rc != 0:
        res["error"] = f"exit {rc}: {short(err, 400)}"
        return res
    res["stderr_lines"] = sum(1 for l in err.splitlines() if l.strip())
    tags, problems = parse_output(out, stream.lines, id_paths, key_to_index)
    res["contract_problems"] = {k: v for k, v in problems.items() if v}
    texts = [record_text(o, text_paths) for o in stream.objs]
    n_dup = sum(1 for t in tags if t and t["status"] == "duplicate")
    res["tagged_duplicate"] = n_dup
    unresolved = 0

    if stream.kind in ("retweet", "info"):
        gt = stream.gt
        cluster = [r["cluster_id"] for r in gt]
        rel = [r["relation"] for r in gt]
        seen = {}
        eligible = hit = miss_new = miss_wrong = 0
        outside, misses, quote_bad = [], [], []
        in_cluster = 0
        quotes_dup = 0
        # chain-aware view: duplicates are not indexed, so when an earlier member of a cluster was
        # itself tagged duplicate of X (e.g. a bot copy of another original), a later retweet can
        # only point at X's representative. rep_of[i] = the indexed record that i resolves to.
        rep_of = list(range(len(tags)))
        cluster_reps = {}
        via_rep = 0
        for i, t in enumerate(tags):
            c = cluster[i]
            elig = c in seen
            seen.setdefault(c, i)
            j = resolve(t, key_to_index) if t and t["status"] == "duplicate" else None
            if t and t["status"] == "duplicate" and j is None:
                unresolved += 1
            if j is not None:
                rep_of[i] = rep_of[j] if j < i else j
            same = j is not None and cluster[j] == c
            chained = j is not None and not same and rep_of[j] in cluster_reps.get(c, ())
            cluster_reps.setdefault(c, set()).add(rep_of[i])
            if elig:
                eligible += 1
                if same:
                    hit += 1
                elif t and t["status"] == "duplicate":
                    miss_wrong += 1
                    via_rep += chained
                    misses.append((i, j, seen[c]))
                else:
                    miss_new += 1
                    misses.append((i, None, seen[c]))
            if t and t["status"] == "duplicate":
                if same:
                    in_cluster += 1
                else:
                    outside.append((i, j))
                if rel[i] == "quote":
                    quotes_dup += 1
                    ref = gt[i].get("ref_id", "")
                    if j is not None and (gt[j]["tweet_id"] == ref or cluster[j] == ref):
                        quote_bad.append((i, j))
        res.update({
            "eligible": eligible, "recall_hits": hit, "missed_new": miss_new, "missed_wrong_cluster": miss_wrong,
            "recall": ratio(hit, eligible),
            "missed_wrong_cluster_via_representative": via_rep,
            "recall_chain_aware": ratio(hit + via_rep, eligible),
            "dup_in_cluster": in_cluster, "dup_outside_cluster": len(outside),
            "precision_lower_bound": ratio(in_cluster, n_dup),
            "outside_by_relation": count_by(rel[i] for i, _ in outside),
            "quotes_tagged_duplicate": quotes_dup,
            "quote_dup_of_quoted": len(quote_bad),
            "unresolved_duplicate_of": unresolved,
        })

        def ex(i, j, first=None):
            d = {"id": gt[i]["tweet_id"], "relation": rel[i], "text": texts[i],
                 "status": tags[i]["status"] if tags[i] else None,
                 "similarity": tags[i].get("similarity") if tags[i] else None}
            if j is not None:
                d.update({"dup_of": gt[j]["tweet_id"], "dup_of_relation": rel[j], "dup_of_text": texts[j]})
            if first is not None:
                d.update({"first_in_cluster": gt[first]["tweet_id"], "first_in_cluster_text": texts[first]})
            return d
        res["examples_outside"] = [ex(i, j) for i, j in outside[: cfg.show_fp]]
        res["examples_quote_dup_of_quoted"] = [ex(i, j) for i, j in quote_bad[: max(cfg.show_fp, 5)]]
        res["examples_missed"] = [ex(i, j, f) for i, j, f in spread(misses, cfg.show_miss)]

    elif stream.kind == "silver":
        gt = stream.gt
        first = [r["first_seen_id"] for r in gt]
        tid = [r["tweet_id"] for r in gt]
        silver = hit = same_group = 0
        extra, misses = [], []
        for i, t in enumerate(tags):
            is_dup = t is not None and t["status"] == "duplicate"
            j = resolve(t, key_to_index) if is_dup else None
            if is_dup and j is None:
                unresolved += 1
            if first[i] != tid[i]:
                silver += 1
                if is_dup:
                    hit += 1
                    if j is not None and first[j] == first[i]:
                        same_group += 1
                else:
                    misses.append((i, None))
            elif is_dup:
                extra.append((i, j))
        res.update({
            "silver_duplicates": silver, "silver_tagged": hit, "recall": ratio(hit, silver),
            "silver_tagged_same_group": same_group, "extra_duplicates": len(extra),
            "unresolved_duplicate_of": unresolved,
        })

        def ex(i, j):
            d = {"id": tid[i], "text": texts[i], "event": stream.objs[i].get("event"),
                 "similarity": tags[i].get("similarity") if tags[i] else None}
            if j is not None:
                d.update({"dup_of": tid[j], "dup_of_text": texts[j]})
            return d
        # spread the samples over the stream rather than taking the first N
        res["examples_extra"] = [ex(i, j) for i, j in spread(extra, cfg.show_extra)]
        res["examples_missed"] = [ex(i, j) for i, j in spread(misses, cfg.show_miss)]
    if unresolved:
        res["contract_problems"]["unresolved_duplicate_of"] = unresolved
    return res


def spread(items, n):
    if n <= 0 or not items:
        return []
    if len(items) <= n:
        return items
    step = len(items) / n
    return [items[int(k * step)] for k in range(n)]


def count_by(it):
    d = {}
    for x in it:
        d[x] = d.get(x, 0) + 1
    return dict(sorted(d.items()))


def barrier_text(i):
    h = hashlib.sha256(f"barrier{i}".encode()).hexdigest()
    return " ".join("qx" + h[k:k + 6] for k in range(0, 48, 6))


def eval_pairs(pairs: Pairs, binary, opts, cfg):
    """Stream each pair as a then b with --capacity 1.

    A unique nonsense "barrier" record precedes every pair, so the one-slot index holds
    the barrier when `a` arrives: `a` is then new and indexed, and `b` is compared with
    `a` alone. Without it, a pair whose `a` repeats the previous pair's `a` (frequent in
    PIT, where sent_1 repeats per topic) would leave `a` unindexed and `b` would be
    compared with an earlier message.
    """
    opts = strip_opts(opts, {"--capacity", "--id-field", "--text-field"}) + ["--capacity", "1"]
    buf = io.StringIO()
    for n, (pid, cls, label, a, b) in enumerate(pairs.pairs):
        buf.write(json.dumps({"id_str": f"s{n}", "text": barrier_text(n)}, ensure_ascii=False) + "\n")
        buf.write(json.dumps({"id_str": f"p{n}a", "text": a}, ensure_ascii=False) + "\n")
        buf.write(json.dumps({"id_str": f"p{n}b", "text": b}, ensure_ascii=False) + "\n")
    data = buf.getvalue().encode("utf-8")
    lines = data.split(b"\n")[:-1]
    key_to_index = {}
    for k, l in enumerate(lines):
        n, r = divmod(k, 3)
        key_to_index[id_key(("s", "p", "p")[r] + str(n) + ("", "a", "b")[r])] = k
    res = {"name": pairs.name, "kind": "pairs", "pairs": len(pairs.pairs)}
    out, err, rc = run_binary(binary, opts, data, cfg.timeout)
    if out is None or rc != 0:
        res["error"] = f"exit {rc}: {short(err, 400)}"
        return res
    res["stderr_lines"] = sum(1 for l in err.splitlines() if l.strip())
    tags, problems = parse_output(out, lines, ["id_str"], key_to_index)
    res["contract_problems"] = {k: v for k, v in problems.items() if v}
    by_cls, by_label = {}, {}
    fp_examples, a_dup = [], 0
    for n, (pid, cls, label, a, b) in enumerate(pairs.pairs):
        ta, tb = tags[3 * n + 1], tags[3 * n + 2]
        if ta and ta["status"] == "duplicate":
            a_dup += 1
        hit = bool(tb and tb["status"] == "duplicate" and tb["dup_key"] == id_key(f"p{n}a"))
        for d, k in ((by_cls, cls), (by_label, label)):
            s = d.setdefault(k, [0, 0])
            s[0] += 1
            s[1] += hit
        if hit and cls == "neg":
            fp_examples.append({"pair_id": pid, "label": label, "similarity": tb.get("similarity"),
                                "text_a": a, "text_b": b})
    res["a_tagged_duplicate"] = a_dup  # should be 0 thanks to the barriers
    unresolved = sum(1 for t in tags if t and t["status"] == "duplicate"
                     and t["dup_key"] not in key_to_index)
    if unresolved:
        res["contract_problems"]["unresolved_duplicate_of"] = unresolved
    res["by_class"] = {k: {"pairs": v[0], "b_dup_of_a": v[1], "rate": ratio(v[1], v[0])} for k, v in by_cls.items()}
    res["by_label"] = {k: {"pairs": v[0], "b_dup_of_a": v[1], "rate": ratio(v[1], v[0])}
                       for k, v in sorted(by_label.items())}
    res["fp_rate"] = res["by_class"].get("neg", {}).get("rate")
    res["pos_rate"] = res["by_class"].get("pos", {}).get("rate")
    res["examples_fp"] = spread(fp_examples, cfg.show_fp)
    return res


def evaluate(streams, pairs, binary, opts, cfg):
    jobs = []
    with cf.ThreadPoolExecutor(max_workers=cfg.jobs) as ex:
        for s in streams:
            jobs.append(ex.submit(eval_stream, s, binary, opts, cfg))
        for p in pairs:
            jobs.append(ex.submit(eval_pairs, p, binary, opts, cfg))
        results = [j.result() for j in jobs]
    rep = {"binary": str(binary), "options": list(opts), "streams": [], "pairs": {}}
    for r in results:
        if r["kind"] == "pairs":
            rep["pairs"][r["name"]] = r
        else:
            rep["streams"].append(r)
    # pooled figures over the four retweet streams
    rt = [r for r in rep["streams"] if r["kind"] == "retweet" and "error" not in r]
    elig = sum(r["eligible"] for r in rt)
    hits = sum(r["recall_hits"] for r in rt)
    ndup = sum(r["tagged_duplicate"] for r in rt)
    inc = sum(r["dup_in_cluster"] for r in rt)
    sil = [r for r in rep["streams"] if r["kind"] == "silver" and "error" not in r]
    rep["summary"] = {
        "retweet_recall": ratio(hits, elig) if rt else None,
        "retweet_eligible": elig,
        "retweet_recall_chain_aware": ratio(hits + sum(r["missed_wrong_cluster_via_representative"] for r in rt), elig)
        if rt else None,
        "retweet_streams_tagged_duplicate": ndup,
        "retweet_streams_dup_outside_cluster": ndup - inc,
        "precision_lower_bound": ratio(inc, ndup) if rt else None,
        "quote_dup_of_quoted": sum(r["quote_dup_of_quoted"] for r in rt) if rt else None,
        "crisislex_silver_recall": sil[0]["recall"] if sil else None,
        "crisislex_extra_duplicates": sil[0]["extra_duplicates"] if sil else None,
        "pit_fp_rate": rep["pairs"].get("pit", {}).get("fp_rate"),
        "pit_pos_rate": rep["pairs"].get("pit", {}).get("pos_rate"),
        "url_fp_rate": rep["pairs"].get("url", {}).get("fp_rate"),
        "url_pos_rate": rep["pairs"].get("url", {}).get("pos_rate"),
        "errors": [f"{r['name']}: {r['error']}" for r in results if "error" in r],
        # every input line used here is valid JSON with an id: any problem breaks the contract
        "contract_problems": {r["name"]: r["contract_problems"] for r in results if r.get("contract_problems")},
    }
    return rep


def verdicts(summary):
    out = {"output_contract": "FAIL" if (summary.get("contract_problems") or summary.get("errors")) else "PASS"}
    for k, (op, lim) in TARGETS.items():
        v = summary.get(k)
        if v is None:
            out[k] = "SKIP"
        elif op == ">=":
            out[k] = "PASS" if v >= lim else "FAIL"
        elif op == "<=":
            out[k] = "PASS" if v <= lim else "FAIL"
        else:
            out[k] = "PASS" if v == lim else "FAIL"
    return out


# ----------------------------------------------------------------------------- printing

def print_report(rep, cfg, w=sys.stdout):
    p = lambda *a: print(*a, file=w)
    p(f"# dedup-stream evaluation\n\nbinary: {rep['binary']}\noptions: {' '.join(rep['options']) or '(defaults)'}")
    if rep.get("missing"):
        p(f"missing inputs (skipped): {', '.join(rep['missing'])}")
    s = rep["summary"]
    for e in s["errors"]:
        p(f"ERROR {e}")

    p("\n## 1. Native retweets\n")
    p("| stream | records | eligible | recall | missed (new) | missed (other cluster) | of which via representative | recall (chain-aware) | tagged dup | outside cluster | precision (lower bound) | quotes tagged dup | quote dup of quoted |")
    p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rep["streams"]:
        if r["kind"] not in ("retweet", "info"):
            continue
        if "error" in r:
            p(f"| {r['name']} | {r['records']} | ERROR | | | | | | | | | | |")
            continue
        p(f"| {r['name']}{' (info)' if r['kind'] == 'info' else ''} | {r['records']} | {r['eligible']} | {pct(r['recall'])} | "
          f"{r['missed_new']} | {r['missed_wrong_cluster']} | {r['missed_wrong_cluster_via_representative']} | "
          f"{pct(r['recall_chain_aware'])} | {r['tagged_duplicate']} | {r['dup_outside_cluster']} | "
          f"{pct(r['precision_lower_bound'])} | {r['quotes_tagged_duplicate']} | {r['quote_dup_of_quoted']} |")
    p(f"| **pooled (retweet streams)** | | {s['retweet_eligible']} | {pct(s['retweet_recall'])} | | | | "
      f"{pct(s['retweet_recall_chain_aware'])} | "
      f"{s['retweet_streams_tagged_duplicate']} | {s['retweet_streams_dup_outside_cluster']} | "
      f"{pct(s['precision_lower_bound'])} | | {s['quote_dup_of_quoted']} |")
    for r in rep["streams"]:
        if r["kind"] not in ("retweet", "info") or "error" in r:
            continue
        if r["dup_outside_cluster"]:
            p(f"\n{r['name']}: tagged duplicate outside ground-truth cluster, by relation: {r['outside_by_relation']}")
        print_examples(p, f"{r['name']}: duplicates outside the ground-truth cluster (classify: hand-made copy / bot text / true error)",
                       r["examples_outside"], "text", "dup_of_text")
        if r["quote_dup_of_quoted"]:
            print_examples(p, f"{r['name']}: QUOTES TAGGED DUPLICATE OF WHAT THEY QUOTE",
                           r["examples_quote_dup_of_quoted"], "text", "dup_of_text")
        print_examples(p, f"{r['name']}: missed (cluster seen earlier, not tagged duplicate in cluster; "
                          f"B = duplicate_of if tagged, C = first record of the cluster)",
                       r["examples_missed"], "text", "dup_of_text", "first_in_cluster_text")
        print_problems(p, r)

    p("\n## 2. CrisisLex T26 silver\n")
    for r in rep["streams"]:
        if r["kind"] != "silver":
            continue
        if "error" in r:
            p(f"{r['name']}: ERROR {r['error']}")
            continue
        p(f"{r['name']}: {r['records']} records, {r['silver_duplicates']} silver duplicates, "
          f"tagged {r['silver_tagged']} = {pct(r['recall'])} "
          f"(of which duplicate_of in the same silver group: {r['silver_tagged_same_group']}); "
          f"extra duplicates beyond silver: {r['extra_duplicates']} (total tagged {r['tagged_duplicate']})")
        print_examples(p, f"{r['name']}: extra duplicates (beyond silver)", r["examples_extra"], "text", "dup_of_text")
        print_examples(p, f"{r['name']}: missed silver duplicates", r["examples_missed"], "text", "dup_of_text")
        print_problems(p, r)

    p("\n## 3. Human-labelled pairs (a then b, --capacity 1)\n")
    for name, title in (("pit", "PIT-2015 dev"), ("url", "Twitter URL corpus")):
        r = rep["pairs"].get(name)
        if not r:
            continue
        if "error" in r:
            p(f"{title}: ERROR {r['error']}")
            continue
        p(f"{title}: {r['pairs']} pairs")
        p("| label | pairs | b tagged duplicate of a | rate |\n|---|---:|---:|---:|")
        for lab, v in r["by_label"].items():
            p(f"| {lab} | {v['pairs']} | {v['b_dup_of_a']} | {pct(v['rate'])} |")
        neg = r["by_class"].get("neg", {"pairs": 0, "b_dup_of_a": 0})
        pos = r["by_class"].get("pos")
        negl = "(0,5)+(1,4)" if name == "pit" else "label 0"
        posl = "(5,0)+(4,1)" if name == "pit" else "label 1"
        p(f"\nFP rate on {negl}: {neg['b_dup_of_a']}/{neg['pairs']} = {pct(r['fp_rate'])}")
        if pos:
            p(f"rate on {posl} (information): {pos['b_dup_of_a']}/{pos['pairs']} = {pct(r['pos_rate'])}")
        if r["a_tagged_duplicate"]:
            p(f"warning: {r['a_tagged_duplicate']} 'a' records were tagged duplicate (of a barrier or earlier pair)")
        print_examples(p, f"{title}: false positives", r["examples_fp"], "text_a", "text_b")
        print_problems(p, r)
        p("")

    print_verdicts(p, s)


def print_examples(p, title, exs, ka, kb, kc=None):
    if not exs:
        return
    p(f"\n{title}:")
    for e in exs:
        meta = ", ".join(f"{k}={e[k]}" for k in ("id", "relation", "status", "dup_of", "dup_of_relation",
                                                   "first_in_cluster", "event", "pair_id", "label", "similarity")
                         if e.get(k) is not None)
        p(f"  - {meta}")
        p(f"      A: {short(e.get(ka, ''))}")
        p(f"      B: {short(e.get(kb, '')) if e.get(kb) is not None else '(not tagged duplicate)'}")
        if kc and e.get(kc) is not None:
            p(f"      C: {short(e[kc])}")


def print_problems(p, r):
    if r.get("contract_problems"):
        p(f"  contract check ({r['name']}): {r['contract_problems']}")
    if r.get("unresolved_duplicate_of"):
        p(f"  {r['name']}: {r['unresolved_duplicate_of']} duplicate_of values matched no record id")


def print_verdicts(p, s):
    v = verdicts(s)
    p("## Targets\n")
    lines = [
        ("output_contract", "output contract (one line per input line, input bytes + dedup member, ids resolve): "
                            + (f"problems {s['contract_problems']}" if s.get("contract_problems") else "ok")
                            + (f"; errors {s['errors']}" if s.get("errors") else "")),
        ("retweet_recall", f"retweet recall (pooled) {pct(s['retweet_recall'])} >= 99%"),
        ("quote_dup_of_quoted", f"quotes tagged duplicate of what they quote: {s['quote_dup_of_quoted']} == 0"),
        ("crisislex_silver_recall", f"CrisisLex silver recall {pct(s['crisislex_silver_recall'])} >= 99.5%"),
        ("pit_fp_rate", f"PIT (0,5)/(1,4) FP rate {pct(s['pit_fp_rate'])} <= 0.5%"),
        ("url_fp_rate", f"URL corpus label-0 FP rate {pct(s['url_fp_rate'])} <= 1%"),
    ]
    for k, text in lines:
        p(f"{v[k]} {text}")


def curve_table(rows):
    out = ["| threshold | retweet recall (4 streams) | CrisisLex silver recall | PIT FP rate (0,5)+(1,4) | "
           "URL FP rate (label 0) | precision, tweet streams (lower bound) | PIT (5,0)+(4,1) rate | URL label-1 rate | "
           "retweet recall (chain-aware) | output contract | synthetic F1, dev | synthetic F1, dev-200k |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for t, s in rows:
        out.append(f"| {t} | {pct(s['retweet_recall'])} | {pct(s['crisislex_silver_recall'])} | {pct(s['pit_fp_rate'])} | "
                   f"{pct(s['url_fp_rate'])} | {pct(s['precision_lower_bound'])} | {pct(s['pit_pos_rate'])} | "
                   f"{pct(s['url_pos_rate'])} | {pct(s['retweet_recall_chain_aware'])} | "
                   f"{'ok' if not (s.get('contract_problems') or s.get('errors')) else 'PROBLEMS'} | "
                   f"{s.get('synthetic_f1_dev', float('nan')):.4f} | {s.get('synthetic_f1_dev_200k', float('nan')):.4f} |")
    return "\n".join(out)


# ----------------------------------------------------------------------------- synthetic

def eval_synthetic(binary, opts, data_dir, timeout):
    """Scores the binary on the labelled synthetic streams with their own
    scorer (score.py); one row per stream found, gunzipping to a temporary
    directory where needed."""
    import gzip
    import shlex
    import tempfile
    base = Path(data_dir) / "synthetic"
    scorer = base / "score.py"
    rows = []
    if not scorer.exists():
        return rows
    cmd = " ".join(shlex.quote(a) for a in [str(binary), *opts, "--id-field", "id_str",
                                            "--text-field", "text", "--quiet"])
    with tempfile.TemporaryDirectory() as tmp:
        for name, data, truth, peers in SYNTHETIC:
            paths = []
            for f in (data, truth):
                src = base / f
                if not src.exists():
                    break
                if f.endswith(".gz"):
                    dst = Path(tmp) / f[:-3]
                    with gzip.open(src, "rb") as fin, open(dst, "wb") as fout:
                        while chunk := fin.read(1 << 20):
                            fout.write(chunk)
                    paths.append(dst)
                else:
                    paths.append(src)
            if len(paths) != 2:
                continue
            out = Path(tmp) / "score.json"
            run = subprocess.run([sys.executable, str(scorer), "--cmd", cmd, "--data", str(paths[0]),
                                  "--truth", str(paths[1]), "--allow-extra-keys", "--json-out", str(out),
                                  "--timeout", str(int(timeout))],
                                 capture_output=True, text=True)
            if not out.exists():
                rows.append({"stream": name, "error": (run.stderr or run.stdout)[-500:]})
                continue
            m = json.loads(out.read_text())
            rows.append({"stream": name, "precision": m["precision"], "recall": m["recall"],
                         "f1": m["f1"], "contract_ok": m["contract_ok"], "peers": peers,
                         "wrong_tags": m.get("false_tags_by_ctype", {})})
            out.unlink()
    return rows


def print_synthetic(rows, w=sys.stdout):
    if not rows:
        return
    w.write("\n## Labelled synthetic streams (../shared/data/synthetic, score.py)\n\n")
    w.write("| stream | precision | recall | F1 | target (F1, precision) | tuned peers' F1 | wrong tags by type |\n")
    w.write("|---|---:|---:|---:|---|---|---|\n")
    for r in rows:
        if "error" in r:
            w.write(f"| {r['stream']} | error: {r['error']!r} | | | | | |\n")
            continue
        f1_t, p_t = SYNTHETIC_TARGETS[r["stream"]]
        met = "met" if r["f1"] >= f1_t and r["precision"] >= p_t else "NOT met"
        wrong = ", ".join(f"{k} {v}" for k, v in list(r["wrong_tags"].items())[:5])
        w.write(f"| {r['stream']} | {r['precision']:.4f} | {r['recall']:.4f} | **{r['f1']:.4f}** | "
                f"{f1_t}, {p_t}: {met} | {r['peers']} | {wrong} |\n")


# ----------------------------------------------------------------------------- fixtures

def word_jaccard(a, b):
    ta, tb = set(re.findall(r"\w+", a.lower())), set(re.findall(r"\w+", b.lower()))
    return len(ta & tb) / max(1, len(ta | tb))


def systematic(items, n):
    """Every k-th item, k = len/n, starting at the first: deterministic and spread over the file."""
    if len(items) <= n:
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def write_pairs_tsv(path, pairs):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("pair_id\tclass\tlabel\ttext_a\ttext_b\n")
        for pid, cls, label, a, b in pairs:
            for t in (a, b):
                assert "\t" not in t and "\n" not in t
            f.write(f"{pid}\t{cls}\t{label}\t{a}\t{b}\n")


def write_tsv_rows(path, header, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("\t".join(header) + "\n")
        for r in rows:
            f.write("\t".join(r[h] for h in header) + "\n")


def make_fixtures(data_dir, out_dir, budget_rt=110_000, budget_quotes=45_000):
    d, o = Path(data_dir), Path(out_dir)
    o.mkdir(parents=True, exist_ok=True)
    summary = {}

    # --- rtweet_fixtures: whole clusters with >= 2 members in the stream, plus quotes of in-stream tweets
    lines = load_jsonl_lines(d / "rtweet_fixtures.jsonl")
    gt = read_tsv(d / "rtweet_fixtures.groundtruth.tsv")
    assert len(lines) == len(gt)
    members = {}
    for i, r in enumerate(gt):
        members.setdefault(r["cluster_id"], []).append(i)
    # units: clusters with >= 2 members; sorted by mean line size, then first position (deterministic)
    units = [m for m in members.values() if len(m) >= 2]
    units.sort(key=lambda m: (sum(len(lines[i]) for i in m) / len(m), m[0]))
    chosen, used = set(), 0
    for m in units:
        size = sum(len(lines[i]) + 1 for i in m)
        if used + size > budget_rt:
            continue
        chosen.update(m)
        used += size
    n_clusters = len({gt[i]["cluster_id"] for i in chosen})
    # quotes whose quoted tweet is in the stream: quote + the quoted tweet's whole cluster
    idx = {r["tweet_id"]: i for i, r in enumerate(gt)}
    qunits = []
    for i, r in enumerate(gt):
        if r["relation"] == "quote" and r["ref_id"] in idx:
            j = idx[r["ref_id"]]
            qunits.append(sorted({i} | set(members[gt[j]["cluster_id"]])))
    qunits.sort(key=lambda m: (sum(len(lines[i]) for i in m) / len(m), m[0]))
    qused, n_quotes = 0, 0
    for m in qunits:
        new = [i for i in m if i not in chosen]
        size = sum(len(lines[i]) + 1 for i in new)
        if qused + size > budget_quotes:
            continue
        chosen.update(m)
        qused += size
        n_quotes += 1
    sel = sorted(chosen)
    sel_ids = {gt[i]["tweet_id"] for i in sel}
    with open(o / "retweets.jsonl", "wb") as f:
        for i in sel:
            f.write(lines[i] + b"\n")
    rows = []
    for i in sel:
        r = dict(gt[i])
        r["ref_in_stream"] = "1" if r["ref_id"] and r["ref_id"] in sel_ids else "0"
        rows.append(r)
    write_tsv_rows(o / "retweets.groundtruth.tsv", ["tweet_id", "cluster_id", "relation", "ref_id", "ref_in_stream"], rows)
    summary["retweets"] = {"records": len(sel), "clusters_ge2": n_clusters, "quote_units": n_quotes,
                           "relations": count_by(gt[i]["relation"] for i in sel)}

    # --- CrisisLex T26: every k-th silver group of size >= 2 (whole group), plus every k-th singleton
    lines = load_jsonl_lines(d / f"{CRISISLEX}.jsonl")
    gt = read_tsv(d / f"{CRISISLEX}.silver_groundtruth.tsv")
    groups = {}
    for i, r in enumerate(gt):
        groups.setdefault(r["first_seen_id"], []).append(i)
    multi = [m for m in groups.values() if 2 <= len(m) <= 6]
    multi.sort(key=lambda m: m[0])
    chosen = set()
    for m in systematic(multi, 30):
        chosen.update(m)
    singles = sorted(m[0] for m in groups.values() if len(m) == 1)
    chosen.update(systematic(singles, 40))
    sel = sorted(chosen)
    with open(o / "crisislex.jsonl", "wb") as f:
        for i in sel:
            f.write(lines[i] + b"\n")
    write_tsv_rows(o / "crisislex.silver_groundtruth.tsv", ["tweet_id", "first_seen_id", "is_rt_prefixed"], [gt[i] for i in sel])
    summary["crisislex"] = {"records": len(sel), "silver_duplicates": sum(gt[i]["tweet_id"] != gt[i]["first_seen_id"] for i in sel)}

    # --- PIT-2015 dev
    pit = load_pit(d / "pit2015" / "dev.data")
    neg = [p for p in pit if p[1] == "neg"]
    hard = sorted(neg, key=lambda p: (-word_jaccard(p[3], p[4]), int(p[0])))[:200]
    hard.sort(key=lambda p: int(p[0]))
    write_pairs_tsv(o / "pit_negatives.tsv", hard)
    pos = systematic([p for p in pit if p[2] == "(5, 0)"], 50)
    write_pairs_tsv(o / "pit_positives.tsv", pos)
    summary["pit"] = {"negatives": len(hard), "positives": len(pos)}

    # --- Twitter URL corpus
    url = load_url(d / "twitter_url_corpus")
    uneg = systematic([p for p in url if p[1] == "neg"], 200)
    write_pairs_tsv(o / "url_negatives.tsv", uneg)
    summary["url"] = {"negatives": len(uneg)}

    sizes = {p.name: p.stat().st_size for p in sorted(o.iterdir()) if p.is_file()}
    summary["bytes"] = sizes
    summary["total_bytes"] = sum(sizes.values())
    return summary


# ----------------------------------------------------------------------------- main

def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough = []
    if "--" in argv:
        k = argv.index("--")
        argv, passthrough = argv[:k], argv[k + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(DEFAULT_BIN), help="dedup-stream binary (default: %(default)s)")
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="data directory (default: %(default)s)")
    ap.add_argument("--fixtures", metavar="DIR", help="run on the labelled slice in DIR instead of --data")
    ap.add_argument("--json", action="store_true", help="print machine-readable JSON instead of the report")
    ap.add_argument("--show-fp", type=int, default=0, metavar="N", help="print N false-positive examples per data set")
    ap.add_argument("--show-extra", type=int, default=0, metavar="N", help="print N CrisisLex extra duplicates")
    ap.add_argument("--show-miss", type=int, default=0, metavar="N", help="print N missed duplicates per data set")
    ap.add_argument("--curve", metavar="T1,T2,...", help="rerun at each threshold and print a markdown table")
    ap.add_argument("--strict", action="store_true", help="exit 1 if a target fails or a run errors")
    ap.add_argument("--opt", action="append", default=[], metavar="ARG", help="one binary argument (repeatable)")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 2), help="parallel binary runs")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per binary run")
    ap.add_argument("--make-fixtures", metavar="DIR", help="write the labelled slice from --data to DIR and exit")
    ap.add_argument("--no-synthetic", action="store_true",
                    help="skip the labelled synthetic streams (DATA/synthetic), which run by default with --data")
    cfg = ap.parse_args(argv)
    opts = cfg.opt + passthrough

    if cfg.make_fixtures:
        summ = make_fixtures(cfg.data, cfg.make_fixtures)
        print(json.dumps(summ, indent=2))
        return 0

    binary = Path(cfg.bin)
    if not binary.exists():
        print(f"error: binary not found: {binary} (build with cargo build --release, or pass --bin)", file=sys.stderr)
        return 2
    if cfg.fixtures:
        streams, pairs, missing = load_fixtures(cfg.fixtures)
    else:
        streams, pairs, missing = load_data(cfg.data)
        if not streams and not pairs:
            # A fresh clone without the shared data beside it: the bundled
            # labelled slice, said so, rather than a report of skips.
            bundled = Path(__file__).resolve().parent.parent / "fixtures" / "eval"
            if not bundled.is_dir():
                print(f"error: no labelled data at {cfg.data} (see ../shared/data/README.md), "
                      f"and no bundled slice at {bundled}", file=sys.stderr)
                return 2
            print(f"note: no labelled data at {cfg.data}: running on the bundled slice {bundled} "
                  "(pass --data DIR for the full sets)", file=sys.stderr)
            cfg.fixtures = str(bundled)
            streams, pairs, missing = load_fixtures(cfg.fixtures)

    rep = evaluate(streams, pairs, binary, opts, cfg)
    rep["missing"] = missing
    rep["verdicts"] = verdicts(rep["summary"])
    synthetic = []
    if not cfg.fixtures and not cfg.no_synthetic:
        synthetic = eval_synthetic(binary, opts, cfg.data, cfg.timeout)
        rep["synthetic"] = synthetic
    curve_rows = []
    if cfg.curve:
        base = strip_opts(opts, {"--threshold"})
        quiet = argparse.Namespace(**{**vars(cfg), "show_fp": 0, "show_extra": 0, "show_miss": 0})
        for t in [x.strip() for x in cfg.curve.split(",") if x.strip()]:
            r = evaluate(streams, pairs, binary, base + ["--threshold", t], quiet)
            if not cfg.fixtures and not cfg.no_synthetic:
                for row in eval_synthetic(binary, base + ["--threshold", t], cfg.data, cfg.timeout):
                    if "f1" in row:
                        key = "synthetic_f1_" + row["stream"].split(" ")[0].replace("-", "_")
                        r["summary"][key] = row["f1"]
            curve_rows.append((t, r["summary"]))
        rep["curve"] = [{"threshold": t, **s} for t, s in curve_rows]

    if cfg.json:
        print(json.dumps(rep, indent=2, ensure_ascii=False))
    else:
        print_report(rep, cfg)
        print_synthetic(synthetic)
        if curve_rows:
            print("\n## Threshold curve\n")
            print(f"options: {' '.join(strip_opts(opts, {'--threshold'})) or '(defaults)'}; "
                  f"data: {cfg.fixtures or cfg.data}\n")
            print(curve_table(curve_rows))
    failed = any(v == "FAIL" for v in rep["verdicts"].values()) or rep["summary"]["errors"]
    if cfg.curve:
        failed = failed or any(s["errors"] for _, s in curve_rows)
    return 1 if (cfg.strict and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
