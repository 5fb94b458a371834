"""Shared helpers: the CLI binary the verdicts are held to, the fixture
feeds with the options each runs with, and the labelled dev stream.

The binary is $DEDUP_STREAM_BIN (tests/python.rs sets it to the one cargo
built), else target/release or target/debug of the repository."""

import gzip
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"

# fixtures/NAME.jsonl and the CLI options it runs with (tests/common/mod.rs
# FIXTURE_FEEDS), plus the synthetic dev stream.
FIXTURE_FEEDS = [
    ("retweet_storm", []),
    ("v2_tweets", []),
    ("cjk", []),
    ("bad_lines", []),
    ("news_items", ["--id-field", "id", "--text-field", "title", "--text-field", "summary"]),
    ("long_items", ["--id-field", "id", "--text-field", "title", "--text-field", "body", "--sample", "mod:4"]),
    ("long_items@spots", ["--id-field", "id", "--text-field", "title", "--text-field", "body", "--shingle", "spots:2"]),
    ("window", ["--window", "1h"]),
    ("deletions", []),
    ("tour", []),
]


def cli_binary():
    given = os.environ.get("DEDUP_STREAM_BIN")
    if given:
        return given
    for profile in ("release", "debug"):
        path = ROOT / "target" / profile / "dedup-stream"
        if path.exists():
            return str(path)
    found = shutil.which("dedup-stream")
    if found:
        return found
    pytest.fail("no dedup-stream binary: build it (cargo build) or set DEDUP_STREAM_BIN")


@pytest.fixture(scope="session")
def cli():
    """Runs the CLI: cli(args, stdin=b"") -> CompletedProcess (bytes)."""
    binary = cli_binary()

    def run(args, stdin=b"", check=True):
        done = subprocess.run([binary, *map(str, args)], input=stdin, capture_output=True)
        if check and done.returncode != 0:
            raise AssertionError(f"dedup-stream {args} exited {done.returncode}: {done.stderr.decode()}")
        return done

    return run


def to_kwargs(args):
    """CLI options (--name value …) as Deduper keyword arguments."""
    kwargs = {}
    it = iter(args)
    for flag in it:
        name = flag.lstrip("-").replace("-", "_")
        value = next(it)
        if name == "text_field":
            kwargs.setdefault("text_field", []).append(value)
        else:
            kwargs[name] = value
    return kwargs


def feed_path(name):
    return FIXTURES / (name.split("@")[0] + ".jsonl")


def dedup_member(line):
    """The verdict the CLI spliced into an output line, as its JSON text."""
    at = line.rindex(b'"dedup":')
    return line[at + len(b'"dedup":') : -1].decode()


@pytest.fixture(scope="session")
def dev_jsonl(tmp_path_factory):
    """fixtures/synthetic/dev.jsonl.gz, unpacked."""
    path = tmp_path_factory.mktemp("dev") / "dev.jsonl"
    with gzip.open(FIXTURES / "synthetic" / "dev.jsonl.gz", "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path
