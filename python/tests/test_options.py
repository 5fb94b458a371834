"""Every engine option of the CLI, by the same name, default and rules: a
bad value is a ValueError (ConfigError) with the CLI's own reason."""

import pytest

from dedup_stream import ConfigError, DedupError, Deduper

CLI_DEFAULTS = {
    "threshold": 0.8,
    "measure": "containment",
    "shingle": "words:1-2",
    "sample": "all",
    "capacity": 1_000_000,
    "window": None,
    "recent": 3000,
    "empty_text": "new",
    "max_bucket": 32,
    "max_index_bytes": None,
    "index": "memory",
    "index_name": "dedup-stream",
    "redis_timeout": "30s",
    "redis_wait": "forever",
    "id_field": None,
    "text_field": None,
}


def test_defaults_are_the_clis():
    assert Deduper.defaults() == CLI_DEFAULTS
    # Issue 38: options said redis_timeout "30000ms" where defaults() said "30s".
    assert Deduper().options == CLI_DEFAULTS


def test_the_cli_help_names_every_option(cli):
    help_text = cli(["--help"]).stdout.decode()
    for name in CLI_DEFAULTS:
        assert "--" + name.replace("_", "-") in help_text, name


BAD = [
    ("threshold", 2, "--threshold"),
    ("threshold", 0, "--threshold"),
    ("threshold", "abc", "--threshold"),
    ("measure", "cosine", "--measure"),
    ("shingle", "words:0", "--shingle"),
    ("shingle", "bytes:3", "--shingle"),
    ("sample", "mod:1", "--sample"),
    ("capacity", 0, "--capacity"),
    ("capacity", 2**32, "--capacity"),
    ("window", "10", "--window"),
    ("window", "5w", "--window"),
    ("recent", -1, "--recent"),
    ("empty_text", "drop", "--empty-text"),
    ("max_bucket", 0, "--max-bucket"),
    ("max_index_bytes", "12Q", "--max-index-bytes"),
    ("max_index_bytes", 1000, "--max-index-bytes"),
    ("index", "postgres://x", "--index"),
    ("id_field", "a..b", "--id-field"),
    ("text_field", "", "--text-field"),
    ("redis_timeout", "5 minutes", "--redis-timeout"),
    ("redis_wait", "soon", "--redis-wait"),
]


@pytest.mark.parametrize("name,value,flag", BAD, ids=[f"{n}={v!r}" for n, v, _ in BAD])
def test_bad_values_are_refused_with_the_clis_reason(name, value, flag, cli):
    with pytest.raises(ValueError) as raised:
        Deduper(**{name: value})
    assert isinstance(raised.value, ConfigError) and isinstance(raised.value, DedupError)
    message = str(raised.value)
    assert message.startswith(f"invalid value '{value}' for {name}: ")
    reason = message.split(": ", 1)[1]
    done = cli([f"{flag}={value}", "--quiet", "/dev/null"], check=False)
    assert done.returncode == 2
    stderr = done.stderr.decode()
    # clap's rendering of the same parser's message.
    assert reason in stderr, stderr


def test_good_values_of_every_kind_are_taken():
    d = Deduper(
        0.7,
        measure="jaccard",
        shingle="chars:4",
        sample="mod:4",
        capacity="500",
        window="10m",
        recent=0,
        empty_text="invalid",
        max_bucket=8,
        max_index_bytes="64M",
        index_name="x",
        redis_timeout=5,
        id_field="data.id",
        text_field=["title", "body"],
    )
    o = d.options
    assert o["threshold"] == 0.7 and o["capacity"] == 500 and o["window"] == "10m"
    assert o["max_index_bytes"] == 64 << 20 and o["redis_timeout"] == "5s"
    assert o["text_field"] == ["title", "body"]
    assert Deduper(**o).options == o


def test_wrong_types_are_type_errors():
    with pytest.raises(TypeError):
        Deduper(threshold=True)
    with pytest.raises(TypeError):
        Deduper(capacity=[1])
    with pytest.raises(TypeError):
        Deduper(bogus=1)


def test_max_index_bytes_is_refused_with_redis():
    with pytest.raises(ConfigError, match="max_index_bytes bounds an index in memory"):
        Deduper(index="redis://127.0.0.1:1", max_index_bytes="64M")


def test_numbers_say_what_is_allowed_and_zero_threads_is_automatic(tmp_path):
    """Issue 38: `recent=-1` said "invalid digit found in string"."""
    with pytest.raises(ConfigError, match=r"recent: must be a whole number from 0 to \d+; 0: every match"):
        Deduper(recent=-1)
    with pytest.raises(ConfigError, match=r"words:1-N"):
        Deduper(shingle="words:x")
    src = tmp_path / "in.jsonl"
    src.write_text('{"id":1,"text":"Flooding has closed the coastal highway"}\n')
    assert Deduper().dedupe_jsonl(src, tmp_path / "out.jsonl", threads=0)["messages"] == 1
    with pytest.raises(ConfigError, match="0: one a CPU"):
        Deduper().dedupe_jsonl(src, tmp_path / "out.jsonl", threads=-1)


@pytest.mark.parametrize("spelling", ["word:3", "w:3", "wrds:3", "words:1-1", "chars:1-3"])
def test_a_shingle_spelling_is_taken_or_refused_as_the_cli_does(spelling, cli):
    done = cli([f"--shingle={spelling}", "--quiet", "/dev/null"], check=False)
    if done.returncode == 0:
        assert Deduper(shingle=spelling).options["shingle"]
    else:
        with pytest.raises(ConfigError):
            Deduper(shingle=spelling)
