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


def test_redis_wait_bounds_the_wait_and_the_wait_is_logged(caplog):
    """Issue 38: an index in a Redis that does not answer waited in silence
    for ever; `redis_wait` bounds it, and the engine's warnings reach
    `logging` (and, with no logging set up, stderr)."""
    import logging

    import pytest

    from dedup_stream import Deduper, StoreError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="dedup_stream"):
        with pytest.raises(StoreError):
            Deduper(index=f"redis://127.0.0.1:{port}", redis_timeout="1s", redis_wait="2s")
    assert time.monotonic() - started < 30
    said = [r.getMessage() for r in caplog.records if r.name == "dedup_stream"]
    assert any("Redis cannot be reached" in m for m in said), said
    with pytest.raises(ValueError, match="or forever"):
        Deduper(redis_wait="soon")
    assert Deduper().options["redis_wait"] == "forever"
    assert Deduper(redis_wait="90s").options["redis_wait"] == "90s"
    # A script that set up no logging sees the warning on stderr.
    proc = start(
        f"""
        from dedup_stream import Deduper, StoreError
        try:
            Deduper(index="redis://127.0.0.1:{port}", redis_timeout="1s", redis_wait="1s")
        except StoreError:
            print("gave up", flush=True)
        """
    )
    out, err = proc.communicate(timeout=60)
    assert "gave up" in out, (out, err)
    assert "Redis cannot be reached" in err, err


def test_ctrl_c_stops_check_many_at_a_batch_and_hands_back_what_was_decided():
    """Issue 38: Ctrl-C was heard only once the whole call had ended, and
    then every verdict was thrown away while the index kept every message.
    Now the call stops at a batch boundary; KeyboardInterrupt's `verdicts`
    holds what was decided (and indexed), None for the rest."""
    for method in ("check_many", "check_records"):
        proc = start(
            f"""
            import json
            from dedup_stream import Deduper
            d = Deduper()
            n = 950_000
            texts = [f"story {{i}} about the harbour festival {{i * 7919 % 10007}} tonight, ref {{i}}" for i in range(n)]
            args = texts if {method!r} == "check_many" else [{{"id": i, "text": t}} for i, t in enumerate(texts)]
            print("running", flush=True)
            try:
                getattr(d, {method!r})(args)
                print(json.dumps({{"ended": True}}), flush=True)
            except KeyboardInterrupt as e:
                decided = [v for v in e.verdicts if v is not None]
                first_none = next((i for i, v in enumerate(e.verdicts) if v is None), len(e.verdicts))
                print(json.dumps({{
                    "ended": False, "n": n, "listed": len(e.verdicts), "decided": len(decided),
                    "prefix": all(v is None for v in e.verdicts[first_none:]),
                    "held": len(d), "counted": d.stats()["messages"],
                }}), flush=True)
            """
        )
        wait_for(proc, "running")
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        import json

        assert out.strip(), (method, err)
        got = json.loads(out.strip().splitlines()[-1])
        assert not got["ended"], (method, "the call ran to its end: make it longer", err)
        assert got["listed"] == got["n"] and got["prefix"], (method, got)
        assert got["decided"] < got["n"], (method, got)
        assert got["decided"] % 512 == 0, (method, "a batch boundary", got)
        # The index holds exactly what was handed back (every text is new).
        assert got["held"] == got["decided"] == got["counted"], (method, got)
