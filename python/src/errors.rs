//! Errors as Python exceptions. The classes live in Python
//! (`dedup_stream/_errors.py`) because they inherit from two builtins
//! (`DedupError` and `ValueError` or `OSError`); this module raises them
//! with the engine's own message.

use dedup_stream::StoreError;
use dedup_stream::state::snapshot::{ErrorKind, SnapshotError};
use pyo3::prelude::*;

/// An instance of `dedup_stream._errors.CLASS(message)` as a `PyErr`.
fn raise(py: Python<'_>, class: &str, message: String) -> PyErr {
    let made = py
        .import("dedup_stream._errors")
        .and_then(|m| m.getattr(class))
        .and_then(|cls| cls.call1((message,)));
    match made {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

/// A bad option value: `ConfigError`, a `ValueError`.
pub fn config(py: Python<'_>, message: String) -> PyErr {
    raise(py, "ConfigError", message)
}

/// A message or record the engine refuses: `InvalidInput`, a `ValueError`.
pub fn invalid(py: Python<'_>, message: String) -> PyErr {
    raise(py, "InvalidInput", message)
}

/// Something the engine cannot do with this index: `DedupError`.
pub fn dedup(py: Python<'_>, message: String) -> PyErr {
    raise(py, "DedupError", message)
}

/// The index store failed: `StoreError` (an `OSError`) when Redis cannot be
/// reached or refuses, `ConfigError` for a bad location, name or settings.
pub fn store(py: Python<'_>, e: &StoreError) -> PyErr {
    match e {
        StoreError::Location { .. }
        | StoreError::Name(_)
        | StoreError::Mismatch { .. }
        | StoreError::Unsupported(_) => config(py, e.to_string()),
        _ => raise(py, "StoreError", e.to_string()),
    }
}

/// An I/O error on `path` as the builtin `OSError` subclass its errno
/// names (`FileNotFoundError`, `PermissionError`, …), with the path.
pub fn io(e: &std::io::Error, path: &std::path::Path) -> PyErr {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(errno) => {
            pyo3::exceptions::PyOSError::new_err((errno, text, path.display().to_string()))
        }
        None => pyo3::exceptions::PyOSError::new_err(format!("{}: {text}", path.display())),
    }
}

/// A state file that cannot be read or written: an `OSError` for I/O,
/// `StateFileError` (a `ValueError`) for a corrupt or incompatible file.
pub fn snapshot(py: Python<'_>, e: &SnapshotError) -> PyErr {
    match &e.kind {
        ErrorKind::Io(io_error) => io(io_error, &e.path),
        _ => raise(py, "StateFileError", e.to_string()),
    }
}

/// An output path refused by the CLI's checks
/// ([`dedup_stream::state::output::check`]): `ConfigError` (a `ValueError`), or
/// the `OSError` of a path that cannot be written at all.
pub fn refused(py: Python<'_>, e: dedup_stream::state::output::OutputRefused) -> PyErr {
    use dedup_stream::state::output::OutputRefused;
    let OutputRefused::Unwritable { source, path, .. } = &e else {
        return config(py, e.to_string());
    };
    let path = std::path::Path::new(path);
    // The checks make some of their errors themselves, without an errno:
    // given one, OSError picks the subclass a caller expects.
    let errno = match source.kind() {
        _ if source.raw_os_error().is_some() => return io(source, path),
        std::io::ErrorKind::NotFound => 2,
        _ if path.is_dir() => 21,
        _ => return io(source, path),
    };
    pyo3::exceptions::PyOSError::new_err((errno, source.to_string(), path.display().to_string()))
}
