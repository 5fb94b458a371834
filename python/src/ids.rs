//! Message ids between Python and the engine.
//!
//! A Python `str` is the id a JSON string holds (`"123"` and `"abc"`), an
//! `int` the id a JSON number holds: so ids read from records and ids
//! given to `check` name the same messages, and come back as they went in.

use dedup_stream::MessageId;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString};

/// A Python id (a str or an int) as the engine's.
pub fn from_py(value: &Bound<'_, PyAny>) -> PyResult<MessageId> {
    let json = if value.is_instance_of::<PyBool>() {
        None
    } else if let Ok(text) = value.cast::<PyString>() {
        Some(serde_json::to_string(&*text.to_cow()?).expect("a str is JSON"))
    } else if value.is_instance_of::<PyInt>() || value.hasattr("__index__")? {
        Some(value.call_method0("__index__")?.str()?.to_string())
    } else {
        None
    };
    json.and_then(|json| MessageId::from_json(&json))
        .ok_or_else(|| {
            let kind = value
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            pyo3::exceptions::PyTypeError::new_err(format!("an id is a str or an int, got {kind}"))
        })
}

/// The engine's id as Python's: a str for a JSON string, an int for a
/// JSON number.
pub fn to_py<'py>(py: Python<'py>, id: &MessageId) -> PyResult<Bound<'py, PyAny>> {
    Ok(match id {
        MessageId::DigitString(n) => PyString::new(py, &n.to_string()).into_any(),
        MessageId::Integer(n) => n.into_pyobject(py)?.into_any(),
        MessageId::Raw(raw) if raw.starts_with('"') => {
            let text: String = serde_json::from_str(raw).unwrap_or_else(|_| raw.to_string());
            PyString::new(py, &text).into_any()
        }
        MessageId::Raw(raw) => py.get_type::<PyInt>().call1((raw.as_ref(),))?.into_any(),
    })
}
