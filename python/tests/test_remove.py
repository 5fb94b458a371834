"""Deduper.remove (issue 27): a deleted tweet is forgotten, in memory and in
a state file (through Redis: test_redis.py)."""

import pickle

from dedup_stream import Deduper

FLOOD = "Flooding has closed the coastal highway north of the city tonight"
MORE = FLOOD + ", more soon"


def test_a_removed_id_is_forgotten_and_its_copy_decided_against_what_remains():
    d = Deduper()
    assert d.check(FLOOD, id="1").status == "new"
    assert d.check(MORE, id="2").duplicate_of == "1"
    assert len(d) == 2
    # A number and its digits as a string are one id.
    assert d.remove(1) is True
    assert d.remove("1") is False, "gone already"
    assert d.remove("never-seen") is False
    assert len(d) == 1
    again = d.check(FLOOD, id="3")
    assert (again.duplicate_of, again.cluster) == ("2", "1")
    assert d.remove("2") and d.remove("3")
    assert d.check(FLOOD, id="4").status == "new"


def test_a_removed_id_is_absent_from_a_saved_state(tmp_path):
    d = Deduper()
    d.check(FLOOD, id="1")
    d.check("The library reopens on Monday with longer hours", id="2")
    d.remove("1")
    path = tmp_path / "s.state"
    d.save(path)
    loaded = Deduper.load(path)
    assert len(loaded) == 1
    assert loaded.check(FLOOD, id="3").status == "new"



def test_check_records_honours_deletion_notices():
    d = Deduper()
    verdicts = d.check_records(
        [
            {"id_str": "1", "text": FLOOD},
            {"delete": {"status": {"id": 1, "id_str": "1", "user_id": 5}}},
            {"data": {"delete": {"tweet": {"id": "9", "author_id": "5"}, "event_at": "2022-12-23T12:34:56.789Z"}}},
            {"id_str": "2", "text": FLOOD},
        ]
    )
    assert [v.status for v in verdicts] == ["new", "deleted", "deleted", "new"]
    assert (verdicts[1].held, verdicts[2].held, verdicts[0].held) == (True, False, None)
    assert verdicts[1].to_dict() == {"status": "deleted", "held": True}
    assert verdicts[1].to_json() == '{"status":"deleted","held":true}'
    assert repr(verdicts[2]) == "Verdict(status='deleted', held=False)"
    assert not verdicts[1] and not verdicts[1].is_duplicate
    assert pickle.loads(pickle.dumps(verdicts[1])) == verdicts[1]
    assert d.stats()["messages"] == 2


def test_a_message_sent_again_gets_its_first_verdict_marked_a_repeat(tmp_path):
    # Issue 37: a retry is never "a duplicate of itself".
    d = Deduper()
    assert d.check(FLOOD, id="1").status == "new"
    first = d.check(MORE, id="2")
    assert first.duplicate_of == "1"
    again = d.check(FLOOD, id="1")
    assert (again.status, again.repeat, again.duplicate_of) == ("new", True, None)
    assert not first.repeat
    edited_again = d.check(MORE, id="2")
    assert edited_again.repeat and edited_again.duplicate_of == "1"
    assert (edited_again.similarity, edited_again.cluster) == (first.similarity, first.cluster)
    assert edited_again.to_json() == first.to_json()[:-1] + ',"repeat":true}'
    assert edited_again.to_dict()["repeat"] is True
    assert "repeat=True" in repr(edited_again)
    assert pickle.loads(pickle.dumps(edited_again)) == edited_again
    assert len(d) == 2, "nothing indexed again"
    # A query naming no id is never a repeat; the same across a state file.
    assert d.query(FLOOD).status == "duplicate"
    d.save(tmp_path / "s.state")
    e = Deduper.load(tmp_path / "s.state")
    assert e.check(MORE, id="2") == edited_again
