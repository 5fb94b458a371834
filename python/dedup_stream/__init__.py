"""dedup-stream from Python: a streaming near-duplicate filter for tweets
and feed items.

The engine is the one the ``dedup-stream`` command line runs (compiled
Rust, in ``dedup_stream._engine``), with the same options, the same
defaults and the same verdicts::

    from dedup_stream import Deduper

    d = Deduper()                      # threshold=0.8, containment, words:1-2
    d.check("Flooding closes the coastal highway tonight", id=1)
    v = d.check("RT @news: Flooding closes the coastal highway tonight", id=2)
    v.is_duplicate, v.duplicate_of, v.similarity    # (True, 1, 1.0)

A :class:`Deduper` is safe to share between threads: one lock inside,
taken with the GIL released. See ``docs/python.md`` for the whole API.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from ._engine import Deduper, Verdict, __version__, _check_outputs, compare
from ._errors import ConfigError, DedupError, InvalidInput, StateFileError, StoreError

if TYPE_CHECKING:  # typed dicts of the stubs (python/dedup_stream/_engine.pyi)
    from ._engine import Summary

__all__ = [
    "ConfigError",
    "DedupError",
    "Deduper",
    "InvalidInput",
    "StateFileError",
    "StoreError",
    "Verdict",
    "__version__",
    "compare",
    "dedupe_frame",
    "dedupe_jsonl",
]

PathLike = Union[str, "os.PathLike[str]"]

# Options of a run through the pipeline rather than of the engine.
_RUN_OPTIONS = ("emit", "on_invalid", "threads", "max_line_bytes")


def dedupe_jsonl(
    src: Union[PathLike, Sequence[PathLike]],
    dst: PathLike,
    *,
    state: Optional[PathLike] = None,
    force: bool = False,
    **options: Any,
) -> "Summary":
    """Tags every JSON line of ``src`` (a path, or a list read in order as
    one stream) into ``dst``, byte for byte as ``dedup-stream SRC > DST``
    does, and returns the run's summary (what ``--stats`` writes).

    ``options`` are the :class:`Deduper`'s (``threshold``, ``measure``,
    ``id_field``, ``index``, …) and the run's: ``emit`` ("all", "new",
    "duplicates"), ``on_invalid`` ("skip", "fail"), ``threads``,
    ``max_line_bytes``. ``state`` is ``--state``: the index is loaded
    from that file if it exists and saved there at the end.

    Before anything is read or written, ``dst`` and ``state`` are checked
    as the CLI checks ``-o`` and ``--state``: neither may be an input file
    (however spelt: ``./``, a symbolic or a hard link) nor the other, and
    an existing ``dst`` is replaced only if it is tagged output (or with
    ``force=True``), an existing ``state`` only if it is a state file.
    A refusal raises ``ConfigError`` (a ``ValueError``).
    """
    run = {k: options.pop(k) for k in _RUN_OPTIONS if k in options}
    _check_outputs(src, dst, state, force)
    if state is not None and os.path.exists(state):
        deduper = Deduper.load(state, **options)
    else:
        deduper = Deduper(**options)
    summary = deduper.dedupe_jsonl(src, dst, force=force, **run)
    if state is not None:
        deduper.save(state)
    return summary


def dedupe_frame(
    df: Any,
    text: str = "text",
    id: Optional[str] = "id_str",
    *,
    urls: Optional[str] = None,
    deduper: Optional[Deduper] = None,
    **options: Any,
) -> Any:
    """Checks every row of a pandas or Polars DataFrame, in row order, and
    returns a new frame with four columns added: ``dedup_status`` ("new"
    or "duplicate"), ``duplicate_of``, ``similarity`` (null for new rows)
    and ``cluster`` (for a new row, its own id: group by it to get one
    group per story).

    ``text`` and ``id`` name the columns; ``id=None`` numbers the rows
    from 0 instead. ``urls`` names a column of URL entities (each a dict of
    short link to expanded link, or None), as ``check(urls=...)`` takes. ``deduper`` continues with an existing index;
    otherwise ``options`` make a new :class:`Deduper`. A null text counts
    as an empty one (new, never a duplicate).
    """
    d = deduper if deduper is not None else Deduper(**options)
    if deduper is not None and options:
        raise TypeError("pass either deduper= or Deduper options, not both")
    kind = type(df).__module__.split(".")[0]
    if kind not in ("pandas", "polars"):
        raise TypeError(f"dedupe_frame takes a pandas or Polars DataFrame, got {type(df).__name__}")
    columns = list(df.columns)
    for name, role in ((text, "text"), (id, "id"), (urls, "urls")):
        if name is not None and name not in columns:
            hint = "; pass id=None to number the rows" if role == "id" else ""
            raise KeyError(f"no {role} column {name!r} (columns: {', '.join(map(str, columns))}){hint}")
    if kind == "polars":
        texts = df.get_column(text).to_list()
        ids = df.get_column(id).to_list() if id is not None else list(range(df.height))
        links = df.get_column(urls).to_list() if urls is not None else None
    else:
        texts = [t if isinstance(t, str) else None for t in df[text].tolist()]
        ids = df[id].tolist() if id is not None else list(range(len(df)))
        links = df[urls].tolist() if urls is not None else None
    if links is not None:
        links = [u if isinstance(u, (dict, list, tuple)) else None for u in links]
    verdicts = d.check_many(texts, ids, links)
    status, dup_of, similarity, cluster = [], [], [], []
    for own, v in zip(ids, verdicts):
        if v is not None and v.is_duplicate:
            status.append("duplicate")
            dup_of.append(v.duplicate_of)
            similarity.append(v.similarity)
            cluster.append(v.cluster)
        else:
            status.append("new" if v is not None else "invalid")
            dup_of.append(None)
            similarity.append(None)
            cluster.append(own)
    if kind == "polars":
        import polars as pl

        return df.with_columns(
            pl.Series("dedup_status", status, dtype=pl.Utf8),
            pl.Series("duplicate_of", dup_of),
            pl.Series("similarity", similarity, dtype=pl.Float64),
            pl.Series("cluster", cluster),
        )
    out = df.copy()
    out["dedup_status"] = status
    out["duplicate_of"] = dup_of
    out["similarity"] = [float("nan") if s is None else s for s in similarity]
    out["cluster"] = cluster
    return out
