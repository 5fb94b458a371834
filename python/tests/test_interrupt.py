"""Ctrl-C reaches a Deduper waiting on something: opening an index in a
Redis that does not answer, and dedupe_jsonl reading an input that has not
ended (which stops at a line boundary, writes what it decided, and
raises KeyboardInterrupt)."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time


def start(code, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def wait_for(proc, marker):
    line = proc.stdout.readline()
    assert marker in line, (line, proc.stderr.read() if proc.poll() is not None else "")


def test_ctrl_c_stops_waiting_for_redis():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there
    proc = start(
        f"""
        import sys
        from dedup_stream import Deduper
        print("opening", flush=True)
        try:
            Deduper(index="redis://127.0.0.1:{port}", redis_timeout="1s")
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
        print("opened?!", flush=True)
        """
    )
    wait_for(proc, "opening")
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert "interrupted" in out, (out, err)


def test_ctrl_c_stops_dedupe_jsonl_at_a_line_boundary(tmp_path):
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    out_path = tmp_path / "out.jsonl"
    proc = start(
        f"""
        import sys
        from dedup_stream import dedupe_jsonl
        print("running", flush=True)
        try:
            dedupe_jsonl({str(fifo)!r}, {str(out_path)!r})
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
        print("ended?!", flush=True)
        """
    )
    wait_for(proc, "running")
    with open(fifo, "w") as writer:
        writer.write('{"id":1,"text":"Flooding has closed the coastal highway north of the city"}\n')
        writer.write('{"id":2,"text":"RT @x: Flooding has closed the coastal highway north of the city"}\n')
        writer.flush()
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert "interrupted" in out, (out, err)
    lines = out_path.read_text().splitlines()
    assert len(lines) == 2 and '"duplicate_of":1' in lines[1]
