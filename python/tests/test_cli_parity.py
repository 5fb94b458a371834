"""Verdicts equal the CLI's, byte for byte, on every fixture feed and on
the labelled dev stream: through check_records, dedupe_jsonl, check and
check_many."""

import json

import pytest

from conftest import FIXTURE_FEEDS, dedup_member, feed_path, to_kwargs
from dedup_stream import Deduper, dedupe_jsonl

FEEDS = FIXTURE_FEEDS + [("dev", [])]


def feed(name, dev_jsonl):
    return dev_jsonl if name == "dev" else feed_path(name)


@pytest.mark.parametrize("name,args", FEEDS, ids=[n for n, _ in FEEDS])
def test_check_records_gives_the_cli_verdicts(name, args, cli, dev_jsonl):
    path = feed(name, dev_jsonl)
    expected = [dedup_member(l) for l in cli(["--quiet", *args, path]).stdout.splitlines()]
    lines = path.read_bytes().splitlines()
    d = Deduper(**to_kwargs(args))
    if name == "window":
        # The window fixture has a created_at on every line: decided by it.
        verdicts = d.check_records([json.loads(l) for l in lines])
    else:
        verdicts = d.check_records(lines)
    got = [v.to_json() for v in verdicts if v is not None]
    assert got == expected
    # Deletion notices are answered but are not messages.
    notices = sum(1 for v in verdicts if v is not None and v.status == "deleted")
    assert d.stats()["messages"] == len(expected) - notices


@pytest.mark.parametrize("name,args", FEEDS, ids=[n for n, _ in FEEDS])
def test_dedupe_jsonl_writes_what_the_cli_writes(name, args, cli, dev_jsonl, tmp_path):
    path = feed(name, dev_jsonl)
    expected = cli(["--quiet", *args, path]).stdout
    out = tmp_path / "out.jsonl"
    summary = dedupe_jsonl(path, out, **to_kwargs(args))
    assert out.read_bytes() == expected
    notices = expected.count(b'"dedup":{"status":"deleted"')
    assert summary["messages"] == len(expected.splitlines()) - notices
    assert summary.get("deletions", 0) == notices
    assert summary["new"] + summary["duplicates"] == summary["messages"]


def test_dedupe_jsonl_emit_and_summary_match_the_cli(cli, tmp_path):
    path = feed_path("retweet_storm")
    stats = tmp_path / "stats.json"
    expected = cli(["--quiet", "--emit", "new", "--stats", stats, path]).stdout
    out = tmp_path / "new.jsonl"
    summary = dedupe_jsonl(path, out, emit="new", threads=1)
    assert out.read_bytes() == expected
    cli_stats = json.loads(stats.read_text())
    for key in ("messages", "new", "duplicates", "invalid", "evicted", "index_size", "index_bytes"):
        assert summary[key] == cli_stats[key], key


def test_check_and_check_many_give_the_cli_verdicts_on_plain_texts(cli, dev_jsonl, tmp_path):
    # Plain {"id", "text"} lines: what check(text, id) sees, as the CLI sees it.
    texts = [json.loads(l)["text"] for l in dev_jsonl.read_text().splitlines()]
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({"id": n, "text": t}) + "\n" for n, t in enumerate(texts)))
    expected = [dedup_member(l) for l in cli(["--quiet", plain]).stdout.splitlines()]
    one = Deduper()
    assert [one.check(t, id=n).to_json() for n, t in enumerate(texts)] == expected
    many = Deduper()
    assert [v.to_json() for v in many.check_many(texts)] == expected, "auto ids count from 0"
    assert len(one) == len(many)


def test_check_with_url_entities_gives_the_cli_verdicts_on_tweets(cli, dev_jsonl):
    # The dev stream's v1.1 tweets: text, id_str and entities, as the CLI reads them.
    expected = [dedup_member(l) for l in cli(["--quiet", dev_jsonl]).stdout.splitlines()]
    tweets = [json.loads(l) for l in dev_jsonl.read_text().splitlines()]
    urls = [{u["url"]: u["expanded_url"] for u in t["entities"]["urls"]} for t in tweets]
    one = Deduper()
    got = [one.check(t["text"], id=t["id_str"], urls=u).to_json() for t, u in zip(tweets, urls)]
    assert got == expected
    many = Deduper()
    pairs = [list(u.items()) for u in urls]
    got = [v.to_json() for v in many.check_many([t["text"] for t in tweets], [t["id_str"] for t in tweets], pairs)]
    assert got == expected
    with pytest.raises(TypeError, match="urls takes a dict"):
        Deduper().check("x", urls=3)


def test_explain_gives_the_cli_explanations(cli):
    # fixtures/explain.jsonl has a line for each rule; check(explain=True)
    # gives the tag the CLI's --explain writes, and nothing when not asked.
    path = feed_path("explain")
    expected = [dedup_member(l) for l in cli(["--quiet", "--explain", path]).stdout.splitlines()]
    d = Deduper()
    got = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        v = d.check(record["text"], id=record["id_str"], explain=True)
        got.append(v.to_json())
        assert v.to_dict()["explain"] == v.explain
        assert json.loads(v.to_json())["explain"] == v.explain
    assert got == expected
    plain = Deduper().check("a text alone")
    assert plain.explain is None and "explain" not in plain.to_dict()
