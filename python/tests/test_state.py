"""State files both ways: the CLI's load in Python, Python's load in the
CLI, and each goes on with the same verdicts as the other; pickling."""

import pickle

import pytest

from conftest import dedup_member
from dedup_stream import Deduper, StateFileError


def halves(dev_jsonl, tmp_path):
    lines = dev_jsonl.read_bytes().splitlines(keepends=True)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_bytes(b"".join(lines[:5000]))
    second.write_bytes(b"".join(lines[5000:]))
    return first, second


def test_a_state_file_of_the_cli_loads_in_python(cli, dev_jsonl, tmp_path):
    first, second = halves(dev_jsonl, tmp_path)
    state = tmp_path / "cli.state"
    cli(["--quiet", "--state", state, first])
    resumed = [dedup_member(l) for l in cli(["--quiet", "--state", state, second]).stdout.splitlines()]
    cli(["--quiet", "--state", tmp_path / "again.state", first])
    d = Deduper.load(tmp_path / "again.state")
    assert len(d) > 0
    got = [v.to_json() for v in d.check_records(second.read_bytes().splitlines())]
    assert got == resumed


def test_a_state_file_of_python_loads_in_the_cli(cli, dev_jsonl, tmp_path):
    first, second = halves(dev_jsonl, tmp_path)
    d = Deduper()
    d.check_records(first.read_bytes().splitlines())
    state = tmp_path / "py.state"
    d.save(state)
    kept = tmp_path / "kept.state"
    kept.write_bytes(state.read_bytes())
    # The CLI saves its index back into the file at the end.
    resumed = [dedup_member(l) for l in cli(["--quiet", "--state", state, second]).stdout.splitlines()]
    # Python resumed from the same file: the same verdicts.
    from_file = Deduper.load(kept)
    assert [v.to_json() for v in from_file.check_records(second.read_bytes().splitlines())] == resumed
    # And the CLI's file after the first half is the same bytes as Python's.
    cli(["--quiet", "--state", tmp_path / "cli.state", first])
    assert (tmp_path / "cli.state").read_bytes() == kept.read_bytes()


def test_options_come_with_load_and_a_file_of_other_shingles_is_refused(tmp_path):
    d = Deduper(shingle="chars:4")
    d.check("Flooding has closed the coastal highway", id=1)
    state = tmp_path / "chars.state"
    d.save(state)
    assert len(Deduper.load(state, shingle="chars:4", threshold=0.5)) == 1
    with pytest.raises(StateFileError, match="chars:4") as raised:
        Deduper.load(state)
    assert isinstance(raised.value, ValueError)
    broken = tmp_path / "broken.state"
    broken.write_bytes(state.read_bytes()[:-3])
    with pytest.raises(StateFileError):
        Deduper.load(broken, shingle="chars:4")
    with pytest.raises(IsADirectoryError):
        d.save(tmp_path)


def test_dedupe_jsonl_keeps_state_like_the_cli(cli, dev_jsonl, tmp_path):
    from dedup_stream import dedupe_jsonl

    first, second = halves(dev_jsonl, tmp_path)
    cli_state, py_state = tmp_path / "cli.state", tmp_path / "py.state"
    for part in (first, second):
        expected = cli(["--quiet", "--state", cli_state, part]).stdout
        dedupe_jsonl(part, tmp_path / "out.jsonl", state=py_state)
        assert (tmp_path / "out.jsonl").read_bytes() == expected
    assert cli_state.read_bytes() == py_state.read_bytes()


def test_pickling_keeps_the_index_and_the_options(dev_jsonl):
    lines = dev_jsonl.read_bytes().splitlines()
    a = Deduper(threshold=0.75, capacity=4000)
    a.check_records(lines[:3000])
    b = pickle.loads(pickle.dumps(a))
    assert b.options == a.options and len(b) == len(a)
    rest = lines[3000:6000]
    assert [v.to_json() for v in b.check_records(rest)] == [v.to_json() for v in a.check_records(rest)]
    # Auto ids go on where they were.
    c = Deduper()
    c.check("one two three four five six")
    d = pickle.loads(pickle.dumps(c))
    assert d.check("RT @x: one two three four five six").duplicate_of == 0
    assert d.check("seven eight nine ten eleven twelve") == c.check("seven eight nine ten eleven twelve")


def test_verdicts_pickle():
    flood = "Flooding has closed the coastal highway north of the city tonight"
    for given in ["1", 1, "abc", 2**70]:
        d = Deduper()
        d.check(flood, id=given)
        v = d.check("RT @x: " + flood, id=f"copy-{given}")
        back = pickle.loads(pickle.dumps(v))
        assert back == v and back.duplicate_of == given and type(back.duplicate_of) is type(given)
    new = d.check("something else entirely, unrelated to the rest", id=9)
    assert pickle.loads(pickle.dumps(new)) == new
