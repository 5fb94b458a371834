"""The Python examples of docs/python.md and of the README's "From
Python" section, run: they cannot drift from the package."""

import re

import pytest

from conftest import ROOT


def blocks(path, section=None):
    text = path.read_text()
    if section is not None:
        start = text.index(section)
        end = text.find("\n## ", start + 1)
        text = text[start : end if end != -1 else None]
    return re.findall(r"```python\n(.*?)```", text, re.S)


EXAMPLES = [(f"docs/python.md#{n}", code) for n, code in enumerate(blocks(ROOT / "docs" / "python.md"))] + [
    (f"README.md#{n}", code) for n, code in enumerate(blocks(ROOT / "README.md", "## From Python"))
]


def test_there_are_examples():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("where,code", EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_example_runs(where, code):
    if "pandas" in code:
        pytest.importorskip("pandas")
    exec(compile(code, where, "exec"), {})


def test_every_method_the_docs_name_exists_and_none_they_deny():
    """`d.NAME(` in docs/python.md is a method of a Deduper, and "There is
    no `NAME(…)`" names none (issue 38: the docs denied `remove`)."""
    from dedup_stream import Deduper

    text = (ROOT / "docs" / "python.md").read_text()
    named = set(re.findall(r"`d\.([a-z_]+)\(", text))
    assert "remove" in named and "check" in named
    assert not [n for n in named if not hasattr(Deduper, n)]
    denied = re.findall(r"There is no `([a-z_]+)\(", text)
    assert not [n for n in denied if hasattr(Deduper, n)], denied
