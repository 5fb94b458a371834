"""The Deduper and Verdict API: ids, query, stats, records, compare, errors."""

import json

import pytest

from dedup_stream import (
    DedupError,
    Deduper,
    InvalidInput,
    Verdict,
    compare,
)

FLOOD = "Flooding has closed the coastal highway north of the city tonight"


def test_verdicts_compare_print_and_convert():
    d = Deduper()
    new = d.check(FLOOD, id="1")
    dup = d.check("RT @police: " + FLOOD, id="2")
    assert new.status == "new" and not new.is_duplicate and not new
    assert new.duplicate_of is None and new.similarity is None and new.cluster is None
    assert repr(new) == "Verdict(status='new')"
    assert new.to_dict() == {"status": "new"} and new.to_json() == '{"status":"new"}'
    assert dup.is_duplicate and dup
    assert (dup.status, dup.duplicate_of, dup.similarity, dup.cluster) == ("duplicate", "1", 1.0, "1")
    assert repr(dup) == "Verdict(status='duplicate', duplicate_of='1', similarity=1.0, cluster='1')"
    assert dup.to_dict() == {"status": "duplicate", "duplicate_of": "1", "similarity": 1.0, "cluster": "1"}
    assert json.loads(dup.to_json()) == dup.to_dict()
    again = Deduper()
    again.check(FLOOD, id="1")
    assert again.check("RT @police: " + FLOOD, id="2") == dup
    assert dup != new and dup != "duplicate"
    assert isinstance(dup, Verdict)


def test_ids_come_back_as_they_went_in():
    for given in ["123", 123, "abc", -5, 2**70, "🙂", ""]:
        d = Deduper()
        d.check(FLOOD, id=given)
        v = d.check("RT @x: " + FLOOD, id="later")
        assert v.duplicate_of == given and type(v.duplicate_of) is type(given), given
        assert v.cluster == given
    with pytest.raises(TypeError):
        Deduper().check(FLOOD, id=1.5)
    with pytest.raises(TypeError):
        Deduper().check(FLOOD, id=True)


def test_auto_ids_count_the_messages_checked():
    d = Deduper()
    d.check("a message about the weather in the city today")
    d.check("another one about something else entirely now")
    v = d.check("RT @x: another one about something else entirely now")
    assert v.duplicate_of == 1


def test_a_copy_of_a_copy_names_the_copy_and_the_cluster():
    d = Deduper()
    d.check("The bakery on 5th street reopens on Monday", id=3)
    copy = d.check("the bakery on 5th street reopens monday!", id=5)
    assert copy.duplicate_of == 3 and copy.cluster == 3
    assert round(copy.similarity, 4) == 0.9231


def test_query_decides_without_indexing():
    d = Deduper()
    assert d.query(FLOOD) == d.query(FLOOD)
    assert len(d) == 0
    d.check(FLOOD, id=1)
    assert d.query("RT @x: " + FLOOD).duplicate_of == 1
    assert len(d) == 1
    stats = d.stats()
    assert stats["queries"] == 3 and stats["messages"] == 1 and stats["index_size"] == 1


def test_len_and_stats_follow_the_index():
    d = Deduper(capacity=2)
    for n, t in enumerate(["one two three four five", "six seven eight nine ten", "eleven twelve thirteen fourteen"]):
        d.check(t, id=n)
    s = d.stats()
    assert len(d) == 2 and s["evicted"] == 1 and s["capacity"] == 2
    assert (s["messages"], s["new"], s["duplicates"]) == (3, 3, 0)
    assert s["index_bytes"] > 0
    assert "len=2" in repr(d)


def test_empty_texts_follow_empty_text():
    assert Deduper().check("https://t.co/abc").status == "new"
    d = Deduper(empty_text="invalid")
    with pytest.raises(InvalidInput, match="nothing to compare"):
        d.check("RT @x: https://t.co/abc")
    first = d.check_many(["RT @x:", FLOOD])
    assert first[0] is None and first[1].status == "new"
    second = d.check_many(["", "RT @y: " + FLOOD])
    assert second[0] is None and second[1].is_duplicate
    assert d.stats()["invalid"] == 3


def test_check_many_takes_ids_and_none():
    d = Deduper()
    vs = d.check_many([FLOOD, None, "RT @a: " + FLOOD], ids=["a", "b", "c"])
    assert [v.status for v in vs] == ["new", "new", "duplicate"] and vs[2].duplicate_of == "a"
    with pytest.raises(ValueError, match="ids has 2 items, texts 3"):
        d.check_many(["x", "y", "z"], ids=[1, 2])
    with pytest.raises(TypeError):
        d.check_many([1, 2])


def test_check_records_finds_v1_and_v2_tweets_and_named_fields():
    d = Deduper()
    v1 = {"id_str": "10", "text": FLOOD, "user": {"screen_name": "a"}}
    v2 = {"data": {"id": "11", "text": "RT @a: " + FLOOD}}
    retweet = {"id_str": "12", "text": "RT @a: Flooding has…", "retweeted_status": {"id_str": "10", "full_text": FLOOD}}
    item = {"guid": "x", "title": FLOOD, "summary": "police say"}
    vs = d.check_records([v1, v2, retweet, {"no": "text"}])
    assert vs[0].status == "new" and vs[1].duplicate_of == "10" and vs[2].duplicate_of == "10"
    assert vs[3] is None
    with pytest.raises(InvalidInput, match=r"record 0: no id field \(looked for id_str, id, data.id\)"):
        d.check_records([{"text": FLOOD}], on_invalid="raise")
    (v,) = d.check_records([item], id_field="guid", text_field=["title", "summary"])
    assert v.duplicate_of == "10"
    # Sent again under its id: its first verdict, a repeat, never a
    # duplicate of itself.
    again = d.check_records([json.dumps(v1), json.dumps(v1).encode()])
    assert [(v.status, v.repeat) for v in again] == [("new", True), ("new", True)]
    with pytest.raises(ValueError, match="must be skip or raise"):
        d.check_records([v1], on_invalid="ignore")


def test_deduper_fields_apply_to_records():
    d = Deduper(id_field="guid", text_field="title")
    d.check_records([{"guid": 1, "title": FLOOD}])
    assert d.check_records([{"guid": 2, "title": "RT @x: " + FLOOD}])[0].duplicate_of == 1


def test_created_at_drives_the_window():
    d = Deduper(window="1h")
    d.check(FLOOD, id=1, created_at="Wed Oct 10 20:00:00 +0000 2018")
    assert d.check(FLOOD + "!", id=2, created_at="2018-10-10T20:30:00Z").duplicate_of == 1
    # Two hours later: the first has left the window (the second renewed it).
    assert d.check(FLOOD, id=3, created_at=1539200000000 + 3 * 3600_000).status == "new"
    import datetime

    d.check(FLOOD, id=4, created_at=datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc))
    with pytest.raises(TypeError):
        d.check(FLOOD, created_at=[1])


def test_compare_says_what_the_cli_says(cli):
    a, b = "The bakery on 5th street reopens on Monday", "the bakery on 5th street reopens monday!"
    c = compare(a, b)
    out = cli(["compare", a, b]).stdout.decode().splitlines()
    assert out[0].startswith(f"similarity: {c['similarity']:.4f} (containment, words:1-2); threshold 0.8: duplicate")
    assert out[1] == f'A normalised: "{c["a_normalised"]}" ({c["a_shingles"]} shingles)'
    assert out[3].startswith(f"shared ({len(c['shared'])}):")
    assert c["is_duplicate"] and not c["lone_recent_match"]
    j = compare(a, b, measure="jaccard", threshold=0.95)
    # The CLI's compare exits 1 when the texts are not near-duplicates, as cmp does.
    done = cli(["compare", "--measure", "jaccard", "--threshold", "0.95", a, b], check=False)
    assert done.returncode == 1
    out = done.stdout.decode()
    assert out.startswith(f"similarity: {j['similarity']:.4f} (jaccard, words:1-2); threshold 0.95: not a duplicate")
    assert not j["is_duplicate"]
    # Below the threshold by at most 0.1, short, alone: a lone recent match.
    lone = compare(a, b, measure="jaccard", threshold=0.9)
    out = cli(["compare", "--measure", "jaccard", "--threshold", "0.9", a, b]).stdout.decode()
    assert "threshold 0.9: duplicate (a lone recent match" in out
    assert lone["is_duplicate"] and lone["lone_recent_match"]
    rec = compare({"id": 1, "text": a}, json.dumps({"id": 2, "text": b}))
    assert rec["similarity"] == c["similarity"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'capacity'"):
        compare(a, b, capacity=3)


def test_every_error_is_a_dedup_error_or_a_builtin(tmp_path):
    with pytest.raises(FileNotFoundError):
        Deduper.load(tmp_path / "missing.state")
    with pytest.raises(FileNotFoundError):
        Deduper().dedupe_jsonl(tmp_path / "missing.jsonl", tmp_path / "out.jsonl")
    with pytest.raises(IsADirectoryError):
        Deduper().dedupe_jsonl(tmp_path, tmp_path / "out.jsonl")
    with pytest.raises(DedupError):
        Deduper(threshold=3)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    with pytest.raises(InvalidInput, match="no usable line"):
        Deduper().dedupe_jsonl(bad, tmp_path / "out.jsonl")
    with pytest.raises(InvalidInput, match="invalid input: .*bad.jsonl:1: not valid JSON"):
        Deduper().dedupe_jsonl(bad, tmp_path / "out.jsonl", on_invalid="fail")
