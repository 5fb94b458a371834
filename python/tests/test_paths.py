"""The CLI's path guards, from Python (issue 38): `dedupe_jsonl`'s `dst`
and `state` and `save`'s path are checked by the CLI's own checks before
anything is opened for writing, so that no input and no file of another
kind is replaced."""

import os

import pytest

from dedup_stream import ConfigError, Deduper, dedupe_jsonl

LINES = (
    b'{"id":1,"text":"Flooding has closed the coastal highway north of the city tonight"}\n'
    b'{"id":2,"text":"RT @police: Flooding has closed the coastal highway north of the city tonight"}\n'
)


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(LINES)
    return path


def test_dst_that_is_the_input_however_spelt_is_refused_and_the_input_kept(src, tmp_path):
    hard = tmp_path / "hard.jsonl"
    os.link(src, hard)
    sym = tmp_path / "sym.jsonl"
    os.symlink(src, sym)
    dotted = f"{tmp_path}/./in.jsonl"
    for dst in (src, str(src), dotted, hard, sym):
        for call in (
            lambda: dedupe_jsonl(src, dst),
            lambda: dedupe_jsonl([tmp_path / "in.jsonl"], dst, force=True),
            lambda: Deduper().dedupe_jsonl(src, dst, force=True),
        ):
            with pytest.raises(ValueError, match="is also an input file") as raised:
                call()
            assert isinstance(raised.value, ConfigError)
            assert src.read_bytes() == LINES, dst
    # The state file as an input, or as dst: refused too.
    with pytest.raises(ConfigError, match="state"):
        dedupe_jsonl(src, tmp_path / "out.jsonl", state=src)
    with pytest.raises(ConfigError, match="is also the file of dst"):
        dedupe_jsonl(src, tmp_path / "out.jsonl", state=tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def test_a_dst_that_is_not_tagged_output_needs_force(src, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    for call in (lambda: dedupe_jsonl(src, notes), lambda: Deduper().dedupe_jsonl(src, notes)):
        with pytest.raises(ValueError, match="force=True") as raised:
            call()
        assert "notes.txt" in str(raised.value) and "--" not in str(raised.value)
        assert notes.read_text() == "my notes\n"
    # Tagged output is replaced (a re-run); force=True replaces anything.
    out = tmp_path / "out.jsonl"
    assert dedupe_jsonl(src, out)["duplicates"] == 1
    assert dedupe_jsonl(src, out)["duplicates"] == 1
    assert dedupe_jsonl(src, notes, force=True)["messages"] == 2
    assert b'"dedup"' in notes.read_bytes()


def test_a_state_that_is_not_a_state_file_is_refused_before_the_run(src, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    out = tmp_path / "out.jsonl"
    with pytest.raises(ConfigError, match="state .*notes.txt.*not a state file"):
        dedupe_jsonl(src, out, state=notes)
    assert notes.read_text() == "my notes\n"
    assert not out.exists(), "refused before anything was written"


def test_save_replaces_only_a_state_file(tmp_path):
    d = Deduper()
    d.check("Flooding has closed the coastal highway north of the city tonight", id=1)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(ValueError, match="save .*notes.txt.*not a state file") as raised:
        d.save(notes)
    assert isinstance(raised.value, ConfigError)
    assert "--fresh-state" not in str(raised.value)
    assert notes.read_text() == "my notes\n"
    with pytest.raises(ConfigError, match="regular file"):
        d.save("/dev/null")
    state = tmp_path / "s.state"
    d.save(state)
    d.save(state)  # its own file again
    empty = tmp_path / "empty.state"
    empty.write_bytes(b"")
    d.save(empty)
    assert len(Deduper.load(empty)) == 1
    with pytest.raises(FileNotFoundError):
        d.save(tmp_path / "no" / "such" / "dir.state")
