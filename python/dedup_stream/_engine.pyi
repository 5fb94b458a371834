"""Type stubs of the compiled engine (python/src/lib.rs)."""

import os
from datetime import datetime
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypedDict, Union

Id = Union[str, int]
PathLike = Union[str, "os.PathLike[str]"]
CreatedAt = Union[str, int, datetime, None]
Urls = Union[Mapping[str, str], Sequence[Tuple[str, str]], None]

__version__: str

class Verdict:
    """What the engine decided about one message."""

    @property
    def status(self) -> str:
        """"new" or "duplicate" ("deleted" for a deletion notice in ``check_records``)."""
    @property
    def held(self) -> Optional[bool]:
        """For a deletion notice: whether the index held its tweet (None otherwise)."""
    @property
    def is_duplicate(self) -> bool:
        """Whether it is a near-duplicate."""
    @property
    def repeat(self) -> bool:
        """Whether it was indexed already under its id with the same text (sent again): its first verdict."""
    @property
    def duplicate_of(self) -> Optional[Id]:
        """The id of the earlier message it duplicates (None when new)."""
    @property
    def similarity(self) -> Optional[float]:
        """The similarity with it, in [0, 1] (None when new)."""
    @property
    def cluster(self) -> Optional[Id]:
        """The id of the first message of its chain (None when new)."""
    @property
    def explain(self) -> Optional[Dict[str, Any]]:
        """What decided it (``check(..., explain=True)``), as ``--explain`` writes it."""
    def to_dict(self) -> Dict[str, Any]:
        """The keys of the CLI's ``dedup`` member."""
    def to_json(self) -> str:
        """The CLI's ``dedup`` member, byte for byte."""
    def __bool__(self) -> bool: ...
    def __eq__(self, other: object) -> bool: ...
    def __reduce__(self) -> Any: ...

class Stats(TypedDict):
    messages: int
    new: int
    duplicates: int
    queries: int
    invalid: int
    index_size: int
    capacity: int
    evicted: int
    index_bytes: Optional[int]
    index_max_bytes: Optional[int]

class Summary(TypedDict, total=False):
    messages: int
    new: int
    duplicates: int
    invalid: int
    evicted: int
    index_size: int
    elapsed_seconds: float
    messages_per_second: float
    index_bytes: int
    index_max_bytes: int

class Comparison(TypedDict):
    similarity: float
    is_duplicate: bool
    lone_recent_match: bool
    threshold: float
    measure: str
    shingle: str
    a_normalised: str
    b_normalised: str
    a_shingles: int
    b_shingles: int
    shared: List[str]
    only_in_a: List[str]
    only_in_b: List[str]

class Deduper:
    """A streaming near-duplicate filter with the CLI's options and defaults.

    Thread-safe: one lock inside, taken with the GIL released.
    """

    def __init__(
        self,
        threshold: Union[float, str] = 0.8,
        *,
        measure: str = "containment",
        shingle: str = "words:1-2",
        sample: str = "all",
        capacity: Union[int, str] = 1_000_000,
        window: Optional[str] = None,
        recent: Union[int, str] = 3000,
        empty_text: str = "new",
        max_bucket: Union[int, str] = 32,
        max_index_bytes: Union[int, str, None] = None,
        index: str = "memory",
        index_name: Optional[str] = "dedup-stream",
        redis_timeout: Union[str, int, float] = "30s",
        redis_wait: Union[str, int, float, None] = "forever",
        id_field: Optional[str] = None,
        text_field: Union[str, Sequence[str], None] = None,
    ) -> None: ...
    def check(
        self,
        text: str,
        id: Optional[Id] = None,
        created_at: CreatedAt = None,
        urls: Urls = None,
        *,
        explain: bool = False,
    ) -> Verdict:
        """Decides on ``text`` and indexes it."""
    def query(
        self, text: str, created_at: CreatedAt = None, urls: Urls = None, *, explain: bool = False
    ) -> Verdict:
        """Decides without indexing or refreshing anything."""
    def remove(self, id: Id) -> bool:
        """Forgets every message indexed under ``id`` (a deleted tweet); True if one was held."""
    def check_many(
        self,
        texts: Iterable[Optional[str]],
        ids: Optional[Iterable[Id]] = None,
        urls: Optional[Iterable[Urls]] = None,
    ) -> List[Optional[Verdict]]:
        """Checks texts in order with the GIL released."""
    def check_records(
        self,
        records: Iterable[Union[Mapping[str, Any], str, bytes]],
        id_field: Optional[str] = None,
        text_field: Union[str, Sequence[str], None] = None,
        on_invalid: str = "skip",
    ) -> List[Optional[Verdict]]:
        """Checks tweets given as dicts (or JSON text), fields found as the CLI finds them."""
    def dedupe_jsonl(
        self,
        src: Union[PathLike, Sequence[PathLike]],
        dst: PathLike,
        *,
        emit: str = "all",
        on_invalid: str = "skip",
        threads: Optional[int] = None,
        max_line_bytes: Optional[int] = None,
        force: bool = False,
    ) -> Summary:
        """Tags JSON-lines files through the CLI's pipeline with this index."""
    def __len__(self) -> int: ...
    def stats(self) -> Stats: ...
    @property
    def options(self) -> Dict[str, Any]:
        """The options it was made with, as keyword arguments."""
    def save(self, path: PathLike) -> None:
        """Saves the index in the CLI's state-file format."""
    @classmethod
    def load(cls, path: PathLike, **options: Any) -> "Deduper":
        """A Deduper with ``options`` and the index of a state file."""
    @staticmethod
    def defaults() -> Dict[str, Any]:
        """The constructor's defaults (the CLI's)."""
    def __reduce__(self) -> Any: ...

def compare(a: Union[str, Mapping[str, Any]], b: Union[str, Mapping[str, Any]], **options: Any) -> Comparison:
    """How the engine sees two texts, as ``dedup-stream compare A B``."""

def _check_outputs(
    src: Union[PathLike, Sequence[PathLike]], dst: PathLike, state: Optional[PathLike] = None, force: bool = False
) -> None: ...
def _unpickle(options: Dict[str, Any], state: Optional[bytes], next_auto: int) -> Deduper: ...
def _verdict(of: Optional[str], similarity: Optional[float], cluster: Optional[str]) -> Verdict: ...
