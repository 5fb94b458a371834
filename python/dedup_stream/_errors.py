"""The package's exceptions. Every error the engine reports is a
:class:`DedupError`; each is also the builtin a caller would catch
without knowing this package (``ValueError`` or ``OSError``)."""


class DedupError(Exception):
    """Base of every error dedup-stream raises itself."""


class ConfigError(DedupError, ValueError):
    """An option value is out of range or unreadable (the CLI's usage errors)."""


class InvalidInput(DedupError, ValueError):
    """A message or record the engine refuses: no id or text field found,
    not JSON, or nothing to compare under ``empty_text="invalid"``."""


class StateFileError(DedupError, ValueError):
    """A state file is corrupt, truncated, or was written by an engine that
    shingles differently (I/O errors are the builtin ``OSError`` family)."""


class StoreError(DedupError, OSError):
    """The index in Redis could not be reached, or refused a call."""
