#!/usr/bin/env python3
"""Benchmark of the index in Redis: 1, 2 and 4 workers sharing one index.

Starts its own redis-server (no persistence) on a free loopback port in a
temporary directory, and for each worker count splits the stream into that
many parts (runs of 1,000 lines dealt round-robin), runs that many filter
processes at once with `--index redis://...`, and reports, all from one run:

- messages/s in total (wall clock, from the first start to the last exit);
- Redis CPU time per message (INFO cpu) and round trips per message
  (INFO commandstats: every command);
- Redis bytes per indexed message: MEMORY USAGE of the index's keys (the
  log and its snapshot) over the messages indexed at the end, and
  used_memory over them;
- each worker's own memory: peak RSS, and the bytes its replica of the
  index holds per indexed message (`--stats`);
- the messages each worker applied from the others' entries, and the
  batches appended again (the fleet's retries: 0 unless Redis loses writes);
- with one worker, whether the output equals the in-memory filter's, byte
  for byte, and the in-memory filter's own messages/s for comparison; with
  several, the quality scored order-free when the stream's truth file is
  beside it (../shared/data/synthetic/score.py --outputs).

Usage: python3 scripts/redis_bench.py [--stream FILE(.gz)] [--capacity N]
       [--workers 1,2,4] [--binary target/release/dedup-stream] [--limit N]
       python3 scripts/redis_bench.py --queue [--limit N] [--batch 256]
       [--in-flight 1,16]

With --queue, only the queue's figures (issue 36): one `consume` worker
writing to an output stream, with the index in memory and in the same
Redis, and the relay (`consume --relay`: the same reads, scripts and
acknowledgements, nothing decided), each at every `--in-flight` given,
beside the in-memory filter on the same lines: messages/s, the worker's CPU
per message (/proc: every thread) and its ratio to the filter's (getrusage),
Redis CPU per message (INFO cpu), the rate against the filter's and the
relay's, and whether the output stream equals the filter's output.
The default stream is ../shared/data/synthetic/dev-200k.jsonl.gz (v1.1
tweets with templates and copies); without it, examples/gen_stream makes a
stream of 200,000 lines. Build first: cargo build --release --examples.
"""

import argparse
import gzip
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_STREAM = os.path.join(ROOT, "..", "shared", "data", "synthetic", "dev-200k.jsonl.gz")
FIELDS = ["--id-field", "id_str", "--text-field", "text"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(port, *args):
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, check=True
    ).stdout


def info(port, section):
    fields = {}
    for line in cli(port, "INFO", section).splitlines():
        if ":" in line and not line.startswith("#"):
            key, value = line.split(":", 1)
            fields[key.strip()] = value.strip()
    return fields


def commandstats(port):
    calls = {}
    for key, value in info(port, "commandstats").items():
        m = re.search(r"calls=(\d+)", value)
        if m:
            calls[key.removeprefix("cmdstat_")] = int(m.group(1))
    return calls


def command_usec(port):
    """Per command: (calls, microseconds) so far, from INFO commandstats."""
    out = {}
    for key, value in info(port, "commandstats").items():
        calls = re.search(r"calls=(\d+)", value)
        usec = re.search(r"usec=(\d+)", value)
        if calls and usec:
            out[key.removeprefix("cmdstat_")] = (int(calls.group(1)), int(usec.group(1)))
    return out


def cpu(port):
    fields = info(port, "cpu")
    return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def load_stream(path):
    if path and os.path.exists(path):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            return f.read(), os.path.basename(path)
    gen = os.path.join(ROOT, "target", "release", "examples", "gen_stream")
    data = subprocess.run([gen, "200000"], capture_output=True, check=True).stdout
    return data, "examples/gen_stream 200000"


def split(lines, n):
    parts = [[] for _ in range(n)]
    for i in range(0, len(lines), 1000):
        parts[(i // 1000) % n].extend(lines[i : i + 1000])
    return [b"".join(p) for p in parts]


def order_free_f1(stream, outputs, tmp):
    """F1 of a fleet's outputs scored order-free, when the truth is there."""
    truth = re.sub(r"\.jsonl(\.gz)?$", ".truth.tsv", stream or "")
    scorer = os.path.join(os.path.dirname(stream or ""), "score.py")
    if not truth or not os.path.exists(scorer):
        return "n/a"
    files = []
    for name, suffix in [(stream, ".data.jsonl"), (truth, ".truth.tsv")]:
        plain = name if os.path.exists(name) and not name.endswith(".gz") else None
        if plain is None:
            packed = name if name.endswith(".gz") else name + ".gz"
            if not os.path.exists(packed):
                return "n/a"
            plain = os.path.join(tmp, "scored" + suffix)
            if not os.path.exists(plain):
                with gzip.open(packed, "rb") as f, open(plain, "wb") as out:
                    shutil.copyfileobj(f, out)
        files.append(plain)
    paths = []
    for i, out in enumerate(outputs):
        path = os.path.join(tmp, f"worker-{i}.out")
        with open(path, "wb") as f:
            f.write(out)
        paths.append(path)
    scored = subprocess.run([sys.executable, scorer, "--outputs", *paths, "--data", files[0],
                             "--truth", files[1]], capture_output=True, text=True)
    m = re.search(r"order_free precision=([\d.]+) recall=([\d.]+) f1=([\d.]+)", scored.stdout)
    return f"P {m.group(1)} R {m.group(2)} F1 {m.group(3)}" if m else "score failed"


def resp(*args):
    """One command in the Redis protocol."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def load_entries(port, stream, lines):
    """An empty Redis, then `stream` made of `lines`, one entry each."""
    cli(port, "FLUSHALL")
    payload = b"".join(resp("XADD", stream, "*", "json", l.rstrip(b"\n")) for l in lines)
    subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=payload,
                   capture_output=True, check=True)


def read_reply(f):
    """One RESP2 reply from the file `f`: bytes, an int, None or a list."""
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode(errors="replace"))
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise RuntimeError(f"not a RESP reply: {line!r}")


def wait_drained(port, stream, procs, every):
    """Until the group has read and acknowledged every entry of `stream`;
    exits if a worker stops first. Polls on one connection: a redis-cli
    started at each poll took CPU from what is timed."""
    with socket.create_connection(("127.0.0.1", port)) as s, s.makefile("rb") as f:
        while True:
            time.sleep(every)
            s.sendall(resp("XINFO", "GROUPS", stream))
            groups = read_reply(f) or []
            for group in groups:
                fields = dict(zip(group[::2], group[1::2]))
                if fields.get(b"lag") == 0 and fields.get(b"pending") == 0:
                    return
            if any(p.poll() is not None for p in procs):
                sys.exit("a consume worker stopped: "
                         + b"".join(p.stderr.read() for p in procs).decode(errors="replace"))

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU of a running process, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def busiest_thread(pid):
    """The name and CPU seconds of the process's busiest thread: the
    worker's rate on a machine with a core for each of its threads."""
    busiest = ("-", 0.0)
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = tail.split()
        seconds = (int(fields[11]) + int(fields[12])) / TICKS
        if seconds > busiest[1]:
            busiest = (head.split("(", 1)[1], seconds)
    return busiest


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def stream_values(port, stream):
    """The `json` field of every entry of `stream`, as lines."""
    out = subprocess.run(["redis-cli", "-p", str(port), "--raw", "XRANGE", stream, "-", "+"],
                         capture_output=True, check=True).stdout.split(b"\n")
    # Each entry prints as three lines: its id, the field's name, the value.
    return b"".join(v + b"\n" for v in out[2::3])


def queue_table(args, port, url, lines, base):
    """One `consume` worker beside the in-memory filter and the relay, on
    the same lines, in one run: the queue's own cost (issue 36)."""
    data = b"".join(lines)
    before = children_cpu()
    started = time.perf_counter()
    memory = subprocess.run(base, input=data, capture_output=True, check=True).stdout
    filter_rate = len(lines) / (time.perf_counter() - started)
    filter_cpu = (children_cpu() - before) / len(lines) * 1e6
    print(f"in-memory filter: {filter_rate:,.0f} messages/s, {filter_cpu:.2f} µs CPU per message")
    print()
    print("One `consume` worker, the stream in Redis, tagged messages to an output stream "
          "(`--output`); the relay (`--relay`) passes entries on undecided:")
    print()
    print("| run | `--in-flight` | index | messages/s | worker CPU µs/msg (× filter) | "
          "busiest worker thread µs/msg | Redis CPU µs/msg | rate vs filter | rate vs relay | "
          "output = filter's |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    engine = [a for a in base[1:] if a != "--quiet"]
    relay_rate = {}
    breakdowns = []
    runs = []
    for depth in args.in_flight.split(","):
        runs += [("relay", depth, "-"), ("worker", depth, "memory"), ("worker", depth, "redis")]
    for kind, depth, index in runs:
        load_entries(port, "q:in", lines)
        cmd = [args.binary, "consume", *engine, "--redis", url, "--stream", "q:in",
               "--group", "g", "--consumer", "c", "--output", "q:out", "--quiet",
               "--batch", str(args.batch), "--in-flight", depth]
        if args.threads is not None:
            cmd += ["--threads", str(args.threads)]
        if kind == "relay":
            cmd.append("--relay")
        if index == "memory":
            cmd += ["--index", "memory"]
        redis_before = cpu(port)
        commands_before = command_usec(port)
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_drained(port, "q:in", [proc], 0.01)
        elapsed = time.perf_counter() - started
        redis_cpu = (cpu(port) - redis_before) / len(lines) * 1e6
        commands = command_usec(port)
        spent = {name: (calls - commands_before.get(name, (0, 0))[0],
                        usec - commands_before.get(name, (0, 0))[1])
                 for name, (calls, usec) in commands.items()}
        busiest = sorted(((u, c, n) for n, (c, u) in spent.items() if c and n != "info"),
                         reverse=True)[:5]
        breakdowns.append(f"{kind}, --in-flight {depth}, index {index}: " + "; ".join(
            f"{n} {u / len(lines):.2f} µs ({len(lines) / c:,.0f} messages a call)"
            for u, c, n in busiest))
        worker_cpu = cpu_seconds(proc.pid) / len(lines) * 1e6
        thread, thread_cpu = busiest_thread(proc.pid)
        proc.terminate()
        proc.wait()
        rate = len(lines) / elapsed
        out = stream_values(port, "q:out")
        if kind == "relay":
            relay_rate[depth] = rate
            versus_relay, same = "1", "(untagged: " + ("all" if out == data else "NOT all") + " passed)"
        else:
            versus_relay = f"{rate / relay_rate[depth]:.2f}" if depth in relay_rate else "-"
            same = "yes" if out == memory else "NO"
        print(f"| {kind} | {depth} | {index} | {rate:,.0f} | {worker_cpu:.2f} "
              f"({worker_cpu / filter_cpu:.2f}) | {thread_cpu / len(lines) * 1e6:.2f} ({thread}) | "
              f"{redis_cpu:.2f} | {rate / filter_rate:.2f} | "
              f"{versus_relay} | {same} |")
    print()
    print("Redis's time by command (INFO commandstats, µs a message; scripts include the "
          "commands they call):")
    print()
    for line in breakdowns:
        print(f"- {line}")


def consume_table(args, port, url, lines, base, tmp):
    """A fleet as it is deployed: `consume` workers of one group reading one
    stream, so that the order the index sees is the stream's, up to the
    batches in flight."""
    counts = [int(w) for w in args.consume.split(",") if w]
    if not counts:
        return
    print()
    print("`consume` workers of one consumer group, the stream in Redis, tagged lines to stdout:")
    print()
    print("| workers | messages/s | Redis CPU µs/msg (queue included) | same as memory / order-free F1 |")
    print("|---|---|---|---|")
    engine = [a for a in base[1:] if a != "--quiet"]
    for n in counts:
        load_entries(port, "bench:in", lines)
        cpu_before = cpu(port)
        cmd = [args.binary, "consume", *engine, "--redis", url, "--stream", "bench:in",
               "--group", "g", "--output", "-", "--index-name", f"consume{n}", "--quiet"]
        if args.snapshot_every:
            cmd += ["--log-snapshot-every", str(args.snapshot_every)]
        started = time.perf_counter()
        files = [open(os.path.join(tmp, f"consume-{n}-{i}.out"), "wb") for i in range(n)]
        procs = [subprocess.Popen(cmd + ["--consumer", f"c{i}"], stdout=f, stderr=subprocess.PIPE)
                 for i, f in enumerate(files)]
        wait_drained(port, "bench:in", procs, 0.2)
        elapsed = time.perf_counter() - started
        redis_cpu = cpu(port) - cpu_before
        for p in procs:
            p.terminate()
            p.wait()
        outputs = []
        for f in files:
            f.close()
            with open(f.name, "rb") as g:
                outputs.append(g.read())
        if n == 1:
            memory = subprocess.run(base, input=b"".join(lines), capture_output=True,
                                    check=True).stdout
            same = "yes" if outputs[0] == memory else "NO"
        else:
            same = order_free_f1(args.stream, outputs, tmp)
        print(f"| {n} | {len(lines) / elapsed:,.0f} | {redis_cpu / len(lines) * 1e6:.2f} | {same} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stream", default=DEFAULT_STREAM)
    ap.add_argument("--capacity", type=int, default=100_000)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "dedup-stream"))
    ap.add_argument("--pin", action="store_true",
                    help="run Redis on CPU 0 and the workers on the other CPUs (taskset), as a "
                         "deployment gives Redis a core of its own")
    ap.add_argument("--consume", default="1,2,4",
                    help="worker counts for the second table: `consume` workers of one "
                         "consumer group reading the stream from Redis ('' for none)")
    ap.add_argument("--snapshot-every", type=int, default=None,
                    help="messages between snapshots of the index in Redis (default: capacity)")
    ap.add_argument("--queue", action="store_true",
                    help="only the queue table: one `consume` worker beside the in-memory filter "
                         "and the relay, worker and Redis CPU per message (issue 36)")
    ap.add_argument("--limit", type=int, default=0, help="the first N lines only")
    ap.add_argument("--batch", type=int, default=256, help="with --queue: the worker's --batch")
    ap.add_argument("--threads", type=int, help="with --queue: the worker's --threads "
                    "(default: theirs, one a CPU)")
    ap.add_argument("--in-flight", default="1,16",
                    help="with --queue: the worker's --in-flight values, one run each")
    args = ap.parse_args()
    if not shutil.which("redis-server"):
        sys.exit("redis-server is not installed (apt-get install redis-server)")
    data, name = load_stream(args.stream)
    lines = data.splitlines(keepends=True)
    if args.limit:
        lines = lines[: args.limit]
        data = b"".join(lines)
    print(f"stream: {name}, {len(lines):,} lines; capacity {args.capacity:,}; "
          f"{os.cpu_count()} cores shared by Redis and the workers")

    base = [args.binary, "--quiet", "--capacity", str(args.capacity), *FIELDS]
    if not args.queue:
        started = time.perf_counter()
        memory = subprocess.run(base, input=data, capture_output=True, check=True).stdout
        memory_rate = len(lines) / (time.perf_counter() - started)
        print(f"in memory, one process: {memory_rate:,.0f} messages/s")

    port = free_port()
    tmp = tempfile.mkdtemp(prefix="dedup-redis-bench-")
    pin_redis = ["taskset", "-c", "0"] if args.pin else []
    pin_workers = ["taskset", "-c", f"1-{os.cpu_count() - 1}"] if args.pin and os.cpu_count() > 1 else []
    server = subprocess.Popen(
        pin_redis + ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                cli(port, "PING")
                break
            except subprocess.CalledProcessError:
                time.sleep(0.05)
        url = f"redis://127.0.0.1:{port}"
        if args.queue:
            queue_table(args, port, url, lines, base)
            return
        print()
        print("| workers | messages/s | Redis CPU µs/msg | round trips/msg | Redis bytes/indexed msg "
              "(keys) | used_memory/msg | worker peak RSS MB | worker bytes/indexed msg | "
              "applied from others | re-appended | same as memory / order-free F1 |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for n in [int(w) for w in args.workers.split(",")]:
            cli(port, "FLUSHALL")
            cli(port, "CONFIG", "RESETSTAT")
            memory_before = int(info(port, "memory")["used_memory"])
            cpu_before = cpu(port)
            cmd = [b for b in base if b != "--quiet"] + ["--index", url, "--index-name", f"bench{n}", "-v"]
            if args.snapshot_every:
                cmd += ["--log-snapshot-every", str(args.snapshot_every)]
            started = time.perf_counter()
            procs = []
            for i, part in enumerate(split(lines, n)):
                stats = os.path.join(tmp, f"stats-{n}-{i}.json")
                p = subprocess.Popen(pin_workers + cmd + ["--stats", stats], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                procs.append((p, part, stats))
            outputs = []
            results = [None] * len(procs)

            def talk(i, p, part):
                # Feed and drain by hand; the worker's own peak RSS is its
                # VmHWM, sampled until it exits (wait4's ru_maxrss would count
                # this Python process's pages, shared with the child until
                # it execs).
                peak = [0]

                def sample():
                    path = f"/proc/{p.pid}/status"
                    while p.returncode is None:
                        try:
                            with open(path) as f:
                                for line in f:
                                    if line.startswith("VmHWM:"):
                                        peak[0] = max(peak[0], int(line.split()[1]))
                        except OSError:
                            return
                        time.sleep(0.05)

                sampler = threading.Thread(target=sample)
                sampler.start()
                chunks = []
                reader = threading.Thread(target=lambda: chunks.append(p.stdout.read()))
                err = []
                err_reader = threading.Thread(target=lambda: err.append(p.stderr.read()))
                reader.start()
                err_reader.start()
                p.stdin.write(part)
                p.stdin.close()
                reader.join()
                err_reader.join()
                # Wait for the exit without reaping, so the sampler reads the
                # status file to the end.
                os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
                p.returncode = p.wait()
                sampler.join()
                results[i] = (chunks[0], err[0], peak[0])

            threads = [threading.Thread(target=talk, args=(i, p, part))
                       for i, (p, part, _) in enumerate(procs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - started
            applied = reappended = 0
            peak_rss = 0
            worker_bytes = []
            for (p, _, stats), (out, err, rss) in zip(procs, results):
                if p.returncode != 0:
                    sys.exit(f"a worker failed: {err.decode(errors='replace')}")
                outputs.append(out)
                peak_rss = max(peak_rss, rss)
                m = re.search(rb"applied_from_others=(\d+) reappends=(\d+)", err)
                if m:
                    applied += int(m.group(1))
                    reappended += int(m.group(2))
                with open(stats) as f:
                    summary = json.load(f)
                if summary.get("index_size"):
                    worker_bytes.append(summary["index_bytes"] / summary["index_size"])
            calls = commandstats(port)
            trips = sum(calls.values())
            redis_cpu = cpu(port) - cpu_before
            used = int(info(port, "memory")["used_memory"]) - memory_before
            index = subprocess.run([args.binary, "index", "info", "--index", url,
                                    "--index-name", f"bench{n}"], capture_output=True,
                                   text=True, check=True).stdout
            indexed = int(re.search(r"(\d+) indexed", index).group(1))
            per = re.search(r"(\d+) bytes per indexed message", index)
            if n == 1:
                same = "yes" if outputs[0] == memory else "NO"
            else:
                same = order_free_f1(args.stream, outputs, tmp)
            print(f"| {n} | {len(lines) / elapsed:,.0f} | {redis_cpu / len(lines) * 1e6:.2f} | "
                  f"{trips / len(lines):.4f} | {per.group(1) if per else '?'} | "
                  f"{used // max(indexed, 1)} | {peak_rss / 1024:.0f} | "
                  f"{max(worker_bytes) if worker_bytes else 0:.0f} | {applied:,} | {reappended} | "
                  f"{same} |")
        consume_table(args, port, url, lines, base, tmp)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
