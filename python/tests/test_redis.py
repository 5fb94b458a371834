"""A Deduper with its index in Redis shares it with CLI workers on the
same index name. Runs a real redis-server on a free loopback port; skipped
(visibly) without one, unless DEDUP_REQUIRE_REDIS=1."""

import os
import shutil
import socket
import subprocess
import time

import pytest

from conftest import dedup_member
from dedup_stream import ConfigError, DedupError, Deduper, dedupe_jsonl


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    if shutil.which("redis-server") is None:
        if os.environ.get("DEDUP_REQUIRE_REDIS") == "1":
            pytest.fail("redis-server is required (DEDUP_REQUIRE_REDIS=1) but not on the PATH")
        pytest.skip("SKIPPED: redis-server is not on the PATH (apt-get install redis-server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=10)


def test_python_and_the_cli_share_one_index(redis_url, cli, dev_jsonl, tmp_path):
    lines = dev_jsonl.read_bytes().splitlines(keepends=True)[:4000]
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_bytes(b"".join(lines[:2000]))
    second.write_bytes(b"".join(lines[2000:]))
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(b"".join(lines))
    # In memory, one process, the whole stream: the verdicts to match.
    alone = [dedup_member(l) for l in cli(["--quiet", whole]).stdout.splitlines()]
    # A CLI worker indexes the first half in Redis, Python decides the second.
    cli(["--quiet", "--index", redis_url, "--index-name", "shared", first])
    d = Deduper(index=redis_url, index_name="shared")
    got = [v.to_json() for v in d.check_records(second.read_bytes().splitlines())]
    assert got == alone[2000:]
    # len() of an index in Redis is as of the last call.
    assert len(d) > 2000
    # And Python's messages are there for the CLI.
    again = cli(["--quiet", "--index", redis_url, "--index-name", "shared", second]).stdout.splitlines()
    # Each is held under its id (a repeat of its first verdict) or copies
    # exactly one that is (not indexed itself).
    assert all(b'"repeat":true}' in l or b'"similarity":1,' in l for l in again)
    assert any(b'"repeat":true}' in l for l in again)


def test_check_query_and_pipeline_with_redis(redis_url, tmp_path):
    d = Deduper(index=redis_url, index_name="py-only")
    flood = "Flooding has closed the coastal highway north of the city tonight"
    assert d.check(flood, id=1).status == "new"
    assert d.query("RT @x: " + flood).duplicate_of == 1
    assert d.check("RT @x: " + flood, id=2).cluster == 1
    assert len(d) == 1 and d.stats()["messages"] == 2
    src = tmp_path / "in.jsonl"
    src.write_text('{"id":3,"text":"RT @y: %s"}\n' % flood)
    assert dedupe_jsonl(src, tmp_path / "out.jsonl", index=redis_url, index_name="py-only")["duplicates"] == 1
    with pytest.raises(DedupError, match="Redis keeps it"):
        d.save(tmp_path / "x.state")
    import pickle

    e = pickle.loads(pickle.dumps(d))
    assert e.query(flood).duplicate_of == 1, "a pickled Deduper in Redis reopens the same index"


def test_an_index_of_other_settings_is_refused(redis_url):
    Deduper(index=redis_url, index_name="settings", threshold=0.8)
    with pytest.raises(ConfigError, match="created with other settings"):
        Deduper(index=redis_url, index_name="settings", shingle="chars:4")


REMOVED_FLOOD = "Flooding has closed the coastal highway north of the city tonight"


def test_removal_reaches_every_deduper_sharing_a_redis_index(redis_url):
    # Removed in the log's order: every Deduper on the index forgets it.
    a = Deduper(index=redis_url, index_name="py-remove")
    b = Deduper(index=redis_url, index_name="py-remove")
    a.check(REMOVED_FLOOD, id="1")
    assert b.query(REMOVED_FLOOD).duplicate_of == "1"
    assert b.remove("1") is True
    assert a.query(REMOVED_FLOOD).status == "new"
    assert a.remove("1") is False

