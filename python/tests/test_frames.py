"""dedupe_frame on pandas and Polars frames: four columns, in row order,
the verdicts of check_many."""

import json

import pytest

from dedup_stream import Deduper, dedupe_frame


def rows(dev_jsonl, n=2000):
    out = []
    for line in dev_jsonl.read_text().splitlines()[:n]:
        t = json.loads(line)
        out.append({"id_str": t["id_str"], "text": t["text"], "user": t["user"]["screen_name"]})
    return out


def expected(records):
    vs = Deduper().check_many([r["text"] for r in records], [r["id_str"] for r in records])
    return [v.status for v in vs], [v.duplicate_of for v in vs]


def test_pandas(dev_jsonl):
    pd = pytest.importorskip("pandas")
    records = rows(dev_jsonl)
    df = pd.DataFrame(records)
    out = dedupe_frame(df)
    assert list(out.columns) == ["id_str", "text", "user", "dedup_status", "duplicate_of", "similarity", "cluster"]
    assert list(df.columns) == ["id_str", "text", "user"], "the input is left as it is"
    status, dup_of = expected(records)
    assert out["dedup_status"].tolist() == status
    assert [None if pd.isna(x) else x for x in out["duplicate_of"]] == dup_of
    new = out[out["dedup_status"] == "new"]
    assert (new["cluster"] == new["id_str"]).all() and new["similarity"].isna().all()
    dup = out[out["dedup_status"] == "duplicate"]
    assert dup["similarity"].between(0, 1).all() and len(dup) > 0
    # One group per story.
    assert out.groupby("cluster").size().sum() == len(out)
    # Another threshold, row numbers as ids, None texts, an existing index.
    df2 = pd.DataFrame({"body": ["Flooding closes the coastal highway tonight", None, "RT @a: Flooding closes the coastal highway tonight"]})
    d = Deduper(threshold=0.9)
    out2 = dedupe_frame(df2, text="body", id=None, deduper=d)
    assert out2["dedup_status"].tolist() == ["new", "new", "duplicate"]
    assert out2["duplicate_of"].tolist()[2] == 0 and out2["cluster"].tolist() == [0, 1, 0]
    assert len(d) == 1
    with pytest.raises(KeyError, match="no id column 'id_str'.*id=None"):
        dedupe_frame(df2, text="body")
    # URL entities from a column: two posts of one caption and other links stay apart.
    df3 = pd.DataFrame(
        {
            "text": ["Look at this https://t.co/a", "Look at this https://t.co/b", "RT @x: Look at this https://t.co/c"],
            "urls": [{"https://t.co/a": "https://a.example/1"}, {"https://t.co/b": "https://b.example/2"}, {"https://t.co/c": "https://a.example/1"}],
        }
    )
    out3 = dedupe_frame(df3, id=None, urls="urls")
    assert out3["dedup_status"].tolist() == ["new", "new", "duplicate"] and out3["duplicate_of"].tolist()[2] == 0


def test_polars(dev_jsonl):
    pl = pytest.importorskip("polars")
    records = rows(dev_jsonl)
    df = pl.DataFrame(records)
    out = dedupe_frame(df, threshold=0.8)
    assert out.columns == ["id_str", "text", "user", "dedup_status", "duplicate_of", "similarity", "cluster"]
    status, dup_of = expected(records)
    assert out.get_column("dedup_status").to_list() == status
    assert out.get_column("duplicate_of").to_list() == dup_of
    new = out.filter(pl.col("dedup_status") == "new")
    assert new.get_column("cluster").to_list() == new.get_column("id_str").to_list()
    assert new.get_column("similarity").null_count() == new.height


def test_not_a_frame():
    with pytest.raises(TypeError, match="pandas or Polars"):
        dedupe_frame([{"text": "x"}])
