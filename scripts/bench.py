#!/usr/bin/env python3
"""End-to-end benchmark of dedup-stream (Python 3 standard library only).

Measures in one run, on this machine, on these streams:
  - realistic: the shared synthetic stream ../shared/data/synthetic/dev-200k.jsonl.gz
    (gunzipped to a temporary file) when it is there, otherwise a generated
    stream shaped like it (examples/gen_stream.rs v1: v1.1 objects of about
    500 bytes with user and entities, 30% copies, 15% template families, a
    long-tail vocabulary, 200,000 lines);
  - crisislex: the real CrisisLex T26 tweets (../shared/data/crisislex_t26_labeled.jsonl),
    when it is there;
  - short: the easy generated {"id_str","text"} lines (about 150 bytes);
  - full: generated full v1.1 tweets (about 4 KB a line);
the v1.1 streams with --id-field id_str --text-field text. For each:
  - throughput of the release binary (messages/s, MB/s),
  - the parse-only floors on the same lines in the same run
    (examples/parse_floor.rs: serde_json into a Value, and validation only),
    and the ratio to each,
  - peak RSS.
Then memory: peak RSS of the first 10,000 realistic lines at the default
capacity, bytes per indexed message at --capacity C, and whether RSS stays
flat once the index is full (10 x C messages streamed through it).

Usage: scripts/bench.py [--realistic N] [--short N] [--full N] [--no-crisislex]
                        [--file PATH ...] [--capacity C] [--skip-memory]
  --file PATH   also measure a JSON-lines file of your own (repeatable), next to
                the same floors; --realistic 0 --short 0 --full 0 --no-crisislex
                skip the built-in streams
Figures go to stdout as a markdown report.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RELEASE = REPO / "target" / "release"
BIN = RELEASE / "dedup-stream"
# Threads from which each batch's candidates are counted on every thread
# before it is decided (src/engine/overlaps.rs, MIN_THREADS).
COUNTING_THREADS = 3
GEN = RELEASE / "examples" / "gen_stream"
FLOOR = RELEASE / "examples" / "parse_floor"
WORK = REPO / "target" / "bench"
SHARED = REPO.parent / "shared" / "data"
DEV_200K = SHARED / "synthetic" / "dev-200k.jsonl.gz"
CRISISLEX = SHARED / "crisislex_t26_labeled.jsonl"
V11_FIELDS = ["--id-field", "id_str", "--text-field", "text"]


def build() -> None:
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "dedup-stream",
                    "--example", "gen_stream", "--example", "parse_floor"], cwd=REPO, check=True)


def stream(count: int, shape: str) -> Path:
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"{shape}-{count}.jsonl"
    if not path.exists():
        with open(path.with_suffix(".tmp"), "wb") as out:
            subprocess.run([GEN, str(count), shape], stdout=out, check=True)
        path.with_suffix(".tmp").rename(path)
    return path


def realistic(count: int) -> tuple[str, Path]:
    """The shared synthetic stream gunzipped into a temporary file (its first
    `count` lines), or a generated stream shaped like it."""
    WORK.mkdir(parents=True, exist_ok=True)
    if DEV_200K.exists():
        path = WORK / f"dev-200k-{count}.jsonl"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            with gzip.open(DEV_200K, "rb") as packed, open(tmp, "wb") as out:
                for n, line in enumerate(packed):
                    if n >= count:
                        break
                    out.write(line)
            tmp.rename(path)
        return "realistic: dev-200k", path
    return "realistic: generated v1", stream(count, "v1")


def head(path: Path, lines: int) -> Path:
    """A file of the first `lines` lines of `path`."""
    out_path = path.with_name(f"{path.stem}-head{lines}.jsonl")
    if not out_path.exists():
        with open(path, "rb") as source, open(out_path, "wb") as out:
            for n, line in enumerate(source):
                if n >= lines:
                    break
                out.write(line)
    return out_path


def timed(cmd: list, stdin_path: Path, stdout=subprocess.DEVNULL) -> tuple[float, int, bytes]:
    """Runs cmd with a file on stdin; returns (seconds, peak RSS in bytes, stdout)."""
    seconds, usage, out = timed_usage(cmd, stdin_path, stdout)
    return seconds, usage.ru_maxrss * 1024, out


def timed_usage(cmd: list, stdin_path: Path, stdout=subprocess.DEVNULL):
    """Runs cmd with a file on stdin; returns (seconds, rusage, stdout)."""
    with open(stdin_path, "rb") as stdin:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE if stdout is None else stdout,
                                stderr=subprocess.DEVNULL)
        out = proc.stdout.read() if stdout is None else b""
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
    if status != 0:
        sys.exit(f"{cmd[0]} failed with status {status}")
    return seconds, usage, out


def kernel_share(usage) -> float:
    """The kernel's part of a process's CPU time (system over user and system)."""
    total = usage.ru_utime + usage.ru_stime
    return usage.ru_stime / total if total > 0 else 0.0


def first_touch_gb_per_s(megabytes: int = 140) -> float:
    """How fast this machine hands a process fresh memory: `megabytes` of
    new anonymous pages, each written once, best of three. Every page a
    process writes first costs the kernel's fault and zeroing; a run on
    dev-200k touches about 140 MB (its peak RSS, most of it the index), the
    validation floor next to nothing, so on a machine where this is slow (a virtual machine whose
    host backs the pages as they are first touched) the ratio to the floor
    falls with it. Measured in a process of its own: a child's peak RSS
    counts its parent's, through fork, and would count these pages."""
    probe = f"""
import mmap, time
size, best = {megabytes} << 20, float("inf")
for _ in range(3):
    started = time.perf_counter()
    with mmap.mmap(-1, size) as fresh:
        for offset in range(0, size, mmap.PAGESIZE):
            fresh[offset] = 1
        best = min(best, time.perf_counter() - started)
print(size / best / 1e9)
"""
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    return float(out)


def throughput(path: Path, threads: int | None, extra: list) -> dict:
    size = path.stat().st_size
    count, last = 0, b"\n"
    with open(path, "rb") as lines:
        for chunk in iter(lambda: lines.read(1 << 20), b""):
            count, last = count + chunk.count(b"\n"), chunk[-1:]
    count += last != b"\n"  # a last line without its newline
    # Best of three for each command, runs interleaved, so that a noisy
    # neighbour on a shared machine weighs on all of them alike.
    args = [BIN, "--quiet"] + ([f"--threads={threads}"] if threads else []) + extra
    floor_value = floor_ignored = seconds = float("inf")
    peak, kernel, floor_kernel = 0, 0.0, 0.0
    for _ in range(3):
        floor_value = min(floor_value, timed([FLOOR, "value"], path)[0])
        ignored_seconds, ignored_usage, _ = timed_usage([FLOOR, "ignored"], path)
        if ignored_seconds < floor_ignored:
            floor_ignored, floor_kernel = ignored_seconds, kernel_share(ignored_usage)
        run_seconds, usage, _ = timed_usage(args, path)
        if run_seconds < seconds:
            seconds, kernel = run_seconds, kernel_share(usage)
        peak = max(peak, usage.ru_maxrss * 1024)
    return {
        "messages": count, "bytes": size,
        "line_bytes": size / count,
        "msgs_per_s": count / seconds, "mb_per_s": size / seconds / 1e6,
        "floor_value_msgs_per_s": count / floor_value,
        "floor_ignored_msgs_per_s": count / floor_ignored,
        "ratio_value": floor_value / seconds, "ratio_ignored": floor_ignored / seconds,
        "peak_rss_mb": peak / 1e6,
        "kernel_share": kernel, "floor_kernel_share": floor_kernel,
    }


def alongside(path: Path, extra: list, copies: int) -> float:
    """Seconds until `copies` runs of --threads 1 started together are all
    done."""
    started = time.perf_counter()
    procs = []
    for _ in range(copies):
        with open(path, "rb") as stdin:
            procs.append(subprocess.Popen([BIN, "--quiet", "--threads=1"] + extra, stdin=stdin,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for proc in procs:
        if proc.wait() != 0:
            sys.exit(f"dedup-stream failed with status {proc.returncode}")
    return time.perf_counter() - started


def decision(path: Path, extra: list) -> dict:
    """--threads 1 against one thread per CPU, and a run with the counting
    on (at least COUNTING_THREADS threads), with --stats: where a message's
    time goes (the serial part, the counting on every thread, the whole
    process's CPU), best of three interleaved runs each."""
    count = sum(1 for _ in open(path, "rb"))
    cpus = os.cpu_count() or 1
    counting_threads = max(cpus, COUNTING_THREADS)
    best = {}
    side_by_side = float("inf")
    for _ in range(3):
        if cpus > 1:
            side_by_side = min(side_by_side, alongside(path, extra, cpus))
        for threads in sorted({1, cpus, counting_threads}):
            stats_path = Path(tempfile.mkdtemp()) / "stats.json"
            seconds, usage, _ = timed_usage([BIN, "--quiet", f"--threads={threads}", f"--stats={stats_path}"]
                                            + extra, path)
            stats = json.loads(stats_path.read_text())
            stats_path.unlink()
            stats_path.parent.rmdir()
            run = {
                "seconds": seconds,
                "cpu_us": (usage.ru_utime + usage.ru_stime) / count * 1e6,
                "serial_us": stats["decide_serial_cpu_seconds"] / count * 1e6,
                "counting_us": stats["decide_counting_cpu_seconds"] / count * 1e6,
            }
            if threads not in best or run["seconds"] < best[threads]["seconds"]:
                best[threads] = run
    one, many, counting = best[1], best[cpus], best[counting_threads]
    # A batch is counted on every core, then decided in order while the
    # other cores prepare the batches after it: on n cores a message takes
    # at least its serial part plus its counting shared n ways, and at
    # least the whole process's CPU shared n ways. Below COUNTING_THREADS
    # cores there is no counting: the figures of the run on this machine's
    # CPUs; from there on, those of the run with the counting on (its CPU
    # per thread does not depend on how many cores ran it).
    def projected(n: int) -> float:
        run = counting if n >= COUNTING_THREADS else many
        per_message = max(run["serial_us"] + run["counting_us"] / n, run["cpu_us"] / n)
        return 1e6 / per_message
    return {
        "messages": count, "cpus": cpus, "counting_threads": counting_threads,
        "one_msgs_per_s": count / one["seconds"], "many_msgs_per_s": count / many["seconds"],
        "speedup": one["seconds"] / many["seconds"],
        # What the machine gives work that shares nothing: one `--threads 1`
        # run per CPU at once, their throughput together against one alone.
        "ceiling": cpus * one["seconds"] / side_by_side,
        "one_serial_us": one["serial_us"], "serial_us": many["serial_us"],
        "counting_serial_us": counting["serial_us"], "counting_us": counting["counting_us"],
        "cpu_us": many["cpu_us"], "counting_cpu_us": counting["cpu_us"],
        "projected": {n: projected(n) for n in (2, 8, 16)},
    }


def rss_of(pid: int) -> int:
    """Current resident set size of a running process, 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# A deletion notice for an id the stream never holds: the index keeps its
# table of ids (docs/deletions.md) from the first line on.
NOTICE = '{"delete":{"status":{"id":1,"id_str":"1","user_id":2,"user_id_str":"2"}}}'


def memory(capacity: int, multiple: int, deletions: bool = False) -> dict:
    """Streams multiple x capacity messages through --capacity C, sampling RSS
    as output lines come back; with `deletions`, after one deletion notice.
    Also reads the index's own count of its bytes at the end (--stats)."""
    total = capacity * multiple
    WORK.mkdir(parents=True, exist_ok=True)
    stats = WORK / "memory-stats.json"

    def run(cap: int, messages: int) -> tuple[list, int]:
        cmd = [GEN, str(messages), "short", "7"]
        if deletions:
            cmd = ["sh", "-c", 'printf "%s\\n" "$0"; exec "$@"', NOTICE] + cmd
        gen = subprocess.Popen(cmd, stdout=subprocess.PIPE)
        proc = subprocess.Popen([BIN, "--quiet", f"--capacity={cap}", "--stats", stats], stdin=gen.stdout,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        gen.stdout.close()
        lines = [0]

        def count() -> None:
            while chunk := proc.stdout.read(1 << 20):
                lines[0] += chunk.count(b"\n")

        counter = threading.Thread(target=count)
        counter.start()
        samples, next_mark = [], capacity
        while counter.is_alive():
            time.sleep(0.05)
            rss = rss_of(proc.pid)
            if rss and lines[0] >= next_mark:
                samples.append((lines[0], rss))
                next_mark = (lines[0] // capacity + 1) * capacity
        counter.join()
        _, status, usage = os.wait4(proc.pid, 0)
        gen.wait()
        if status != 0:
            sys.exit(f"dedup-stream failed with status {status}")
        return samples, usage.ru_maxrss * 1024

    small_samples, small_peak = run(1000, 2 * capacity)
    samples, peak = run(capacity, total)
    counted = json.loads(stats.read_text())
    full = [rss for lines, rss in samples if lines >= 2 * capacity]
    return {
        "capacity": capacity, "messages": total, "samples": samples,
        "peak_rss_mb": peak / 1e6, "baseline_peak_rss_mb": small_peak / 1e6,
        "bytes_per_message": (peak - small_peak) / capacity,
        "flat_ratio": max(full) / min(full) if full else float("nan"),
        "index_bytes_per_message": counted["index_bytes"] / max(counted["index_size"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--realistic", type=int, default=200_000,
                        help="lines of the realistic stream (default 200,000)")
    parser.add_argument("--no-crisislex", action="store_true", help="skip the CrisisLex stream")
    parser.add_argument("--short", type=int, default=2_000_000, help="short-line messages (default 2,000,000)")
    parser.add_argument("--full", type=int, default=200_000, help="full v1.1 messages (default 200,000)")
    parser.add_argument("--capacity", type=int, default=1_000_000, help="index capacity for the memory run")
    parser.add_argument("--file", type=Path, action="append", default=[],
                        help="a JSON-lines file to measure too (repeatable)")
    parser.add_argument("--threads", type=int, help="--threads for the binary (default: its own)")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--deletions", action="store_true",
                        help="the memory run starts with a deletion notice, so the index keeps its table of ids")
    args = parser.parse_args()
    build()
    print(f"# dedup-stream end-to-end benchmark\n\nmachine: {os.cpu_count()} CPUs; best of 3 interleaved runs of each "
          f"command; fresh memory first touched at {first_touch_gb_per_s():.1f} GB/s (140 MB, best of 3)\n")
    print("Kernel's share: system CPU over all CPU of the run timed, dedup-stream's (mostly faulting in and "
          "zeroing the pages the index first touches, and reading), then the validation floor's (reading).\n")
    print("| stream | messages | bytes/line | messages/s | MB/s | floor: Value msgs/s | ratio | floor: validate msgs/s | ratio "
          "| peak RSS | kernel's share |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    runs = []
    if args.realistic > 0:
        name, path = realistic(args.realistic)
        runs.append((name, path, V11_FIELDS))
    if CRISISLEX.exists() and not args.no_crisislex:
        runs.append(("crisislex T26 (real)", CRISISLEX, V11_FIELDS))
    runs += [(shape, stream(count, shape), []) for count, shape in [(args.short, "short"), (args.full, "full")]
             if count > 0]
    runs += [(path.name, path, []) for path in args.file]
    for name, path, extra in runs:
        r = throughput(path, args.threads, extra)
        print(f"| {name} | {r['messages']:,} | {r['line_bytes']:.0f} | {r['msgs_per_s']:,.0f} | {r['mb_per_s']:.0f} "
              f"| {r['floor_value_msgs_per_s']:,.0f} | {r['ratio_value']:.2f} "
              f"| {r['floor_ignored_msgs_per_s']:,.0f} | {r['ratio_ignored']:.2f} | {r['peak_rss_mb']:.0f} MB "
              f"| {r['kernel_share']:.0%} / {r['floor_kernel_share']:.0%} |")
    print("\n## The decision: serial part and threads\n")
    print("CPU per message from `--stats` (`decide_serial_cpu_seconds`, `decide_counting_cpu_seconds`) "
          "and the process's rusage, at --threads 1, at one thread per CPU, and with the counting on "
          f"(--threads {COUNTING_THREADS} or more); projection: a message takes at least its serial part plus its "
          "counting shared by n cores, and at least the process's CPU shared by n cores (from "
          f"{COUNTING_THREADS} cores with the counting run's figures).\n")
    print("The ceiling: one --threads 1 run per CPU started together, their throughput together against one "
          "run alone: what this machine gives work that shares nothing, the most more threads can hope for short of "
          "doing less work.\n")
    print("| stream | --threads 1 msgs/s | all CPUs msgs/s | ratio | ceiling | serial µs (1 thread) | "
          "serial µs (all CPUs) | serial µs (counting) | counting µs | process CPU µs (all CPUs / counting) | "
          "projected 2 / 8 / 16 cores msgs/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, path, extra in runs[:2]:
        d = decision(path, extra)
        p = d["projected"]
        print(f"| {name} | {d['one_msgs_per_s']:,.0f} | {d['many_msgs_per_s']:,.0f} | {d['speedup']:.2f} "
              f"| {d['ceiling']:.2f} | {d['one_serial_us']:.2f} | {d['serial_us']:.2f} | {d['counting_serial_us']:.2f} "
              f"| {d['counting_us']:.2f} | {d['cpu_us']:.2f} / {d['counting_cpu_us']:.2f} "
              f"| {p[2]:,.0f} / {p[8]:,.0f} / {p[16]:,.0f} |")
    if not args.skip_memory:
        small_name, small_source = realistic(max(args.realistic, 10_000))
        small = head(small_source, 10_000)
        _, small_peak, _ = timed([BIN, "--quiet"] + V11_FIELDS, small)
        print(f"\n## Memory\n\nfirst 10,000 lines of {small_name} at the default capacity: "
              f"**peak RSS {small_peak / 1e6:.0f} MB**")
        m = memory(args.capacity, 10, args.deletions)
        kept = " (after a deletion notice: the table of ids kept)" if args.deletions else ""
        print(f"\n## Memory at --capacity {m['capacity']:,} ({m['messages']:,} messages streamed){kept}\n")
        print(f"peak RSS {m['peak_rss_mb']:.0f} MB; baseline (capacity 1,000) {m['baseline_peak_rss_mb']:.0f} MB; "
              f"**{m['bytes_per_message']:.0f} bytes per indexed message**; "
              f"RSS max/min once full: {m['flat_ratio']:.3f}; "
              f"the index's own count (index_bytes / index_size): {m['index_bytes_per_message']:.0f}\n")
        print("| messages out | RSS MB |\n|---:|---:|")
        for lines, rss in m["samples"]:
            print(f"| {lines:,} | {rss / 1e6:.0f} |")


if __name__ == "__main__":
    main()
