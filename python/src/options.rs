//! The constructor's options, read as the command line reads them: every
//! Python value is turned into the text a user would type after the flag
//! and parsed by the same rules, so a bad value gets the CLI's message.
//!
//! The library's own types parse themselves (`Shingling`, `Sampling`,
//! `Measure`, `Window`, `EmptyText`, `IndexLocation`, field paths). The
//! value parsers of `--threshold`, `--capacity`, `--max-index-bytes`,
//! `--max-bucket`, `--max-line-bytes` and `--redis-timeout` are private to
//! the binary (`src/cli.rs`); they are repeated here with the same rules
//! and messages, and `python/tests/test_options.py` holds both to them.

use std::num::NonZeroUsize;
use std::str::FromStr;
use std::time::Duration;

use dedup_stream::FieldSpec;
use dedup_stream::engine::config::{
    DEFAULT_CAPACITY, DEFAULT_MAX_BUCKET, DEFAULT_RECENT, DEFAULT_THRESHOLD, EmptyText,
    EngineConfig, Measure, Sampling, Shingling, Window,
};
use dedup_stream::redis_index::{DEFAULT_INDEX_NAME, IndexLocation};
pub use dedup_stream::values::{
    at_least_one, parse_capacity, parse_duration, parse_recent, parse_size, parse_threshold,
    parse_wait,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::errors;

/// The Redis call timeout when none is given (`--redis-timeout 30s`).
pub const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything a `Deduper` was made with, in a form that makes it again
/// (pickling) and that `Deduper.options` shows.
#[derive(Clone, Debug)]
pub struct Options {
    /// The engine's settings.
    pub config: EngineConfig,
    /// `index`: memory or a Redis URL.
    pub location: IndexLocation,
    /// `index_name`.
    pub index_name: String,
    /// `redis_timeout`.
    pub redis_timeout: Duration,
    /// `redis_wait`: how long an outage of Redis is waited out; `None`:
    /// for ever (until Ctrl-C), as the CLI's `--redis-wait forever`.
    pub redis_wait: Option<Duration>,
    /// `id_field`, as given.
    pub id_field: Option<String>,
    /// `text_field`, as given (empty: discovery).
    pub text_field: Vec<String>,
}

impl Options {
    /// Where `check_records` finds the id and the text by default.
    pub fn fields(&self) -> FieldSpec {
        FieldSpec::new(self.id_field.as_deref(), self.text_field.clone())
            .expect("checked when the options were read")
    }

    /// The options as keyword arguments of the constructor.
    pub fn to_kwargs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.config;
        let d = PyDict::new(py);
        d.set_item("threshold", c.threshold)?;
        d.set_item("measure", c.measure.to_string())?;
        d.set_item("shingle", c.shingling.to_string())?;
        d.set_item("sample", c.sampling.to_string())?;
        d.set_item("capacity", c.capacity.get())?;
        d.set_item("window", c.window.map(|w| w.to_string()))?;
        d.set_item("recent", c.recent)?;
        d.set_item("empty_text", c.empty_text.to_string())?;
        d.set_item("max_bucket", c.max_bucket)?;
        d.set_item("max_index_bytes", c.max_index_bytes.map(NonZeroUsize::get))?;
        d.set_item("index", self.location.to_string())?;
        d.set_item("index_name", &self.index_name)?;
        d.set_item("redis_timeout", duration_text(self.redis_timeout))?;
        d.set_item(
            "redis_wait",
            self.redis_wait
                .map_or_else(|| "forever".to_string(), duration_text),
        )?;
        d.set_item("id_field", &self.id_field)?;
        d.set_item(
            "text_field",
            match self.text_field.as_slice() {
                [] => None,
                fields => Some(PyList::new(py, fields)?),
            },
        )?;
        Ok(d)
    }
}

/// A duration as the CLI takes it, in the largest unit that keeps it
/// whole (`30s`, `5m`, `250ms`), so that `options` shows what
/// `defaults()` does and either reads back.
fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0 => "0s".to_string(),
        _ if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        _ if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        _ if ms % 1000 == 0 => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

/// The constructor's keyword arguments (all optional; `None` is the CLI's
/// default, except for `window` where it is "no window").
#[derive(Default)]
pub struct Raw<'py> {
    pub threshold: Option<Bound<'py, PyAny>>,
    pub measure: Option<Bound<'py, PyAny>>,
    pub shingle: Option<Bound<'py, PyAny>>,
    pub sample: Option<Bound<'py, PyAny>>,
    pub capacity: Option<Bound<'py, PyAny>>,
    pub window: Option<Bound<'py, PyAny>>,
    pub recent: Option<Bound<'py, PyAny>>,
    pub empty_text: Option<Bound<'py, PyAny>>,
    pub max_bucket: Option<Bound<'py, PyAny>>,
    pub max_index_bytes: Option<Bound<'py, PyAny>>,
    pub index: Option<Bound<'py, PyAny>>,
    pub index_name: Option<Bound<'py, PyAny>>,
    pub redis_timeout: Option<Bound<'py, PyAny>>,
    pub redis_wait: Option<Bound<'py, PyAny>>,
    pub id_field: Option<Bound<'py, PyAny>>,
    pub text_field: Option<Bound<'py, PyAny>>,
}

/// The text a user would have typed for `value`: a str as it is, an int
/// in decimal, a float as Python prints it. Anything else (bools
/// included) is a `TypeError`.
pub fn as_cli_text(name: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    if value.is_instance_of::<PyBool>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{name} takes a number or a str, not a bool"
        )));
    }
    if value.is_instance_of::<PyString>() {
        return value.extract::<String>();
    }
    if value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>() {
        return Ok(value.repr()?.to_string());
    }
    // numpy scalars and the like: anything with __index__ or __float__.
    if let Ok(n) = value.call_method0("__index__") {
        return Ok(n.repr()?.to_string());
    }
    if let Ok(f) = value.call_method0("__float__") {
        return Ok(f.repr()?.to_string());
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "{name} takes a number or a str, got {}",
        value.get_type().name()?
    )))
}

/// A `ValueError` (the package's `ConfigError`) in clap's words.
pub fn bad_value(py: Python<'_>, name: &str, given: &str, why: impl std::fmt::Display) -> PyErr {
    errors::config(py, format!("invalid value '{given}' for {name}: {why}"))
}

/// Parses `value` as `--NAME TEXT` would be: `parse` gets the CLI text.
fn parse_with<T, E: std::fmt::Display>(
    py: Python<'_>,
    name: &str,
    value: &Bound<'_, PyAny>,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> PyResult<T> {
    let text = as_cli_text(name, value)?;
    parse(&text).map_err(|e| bad_value(py, name, &text, e))
}

fn parsed<T: FromStr>(py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<T>
where
    T::Err: std::fmt::Display,
{
    parse_with(py, name, value, |s| s.parse::<T>())
}

impl Raw<'_> {
    /// Reads and checks every option.
    pub fn read(&self, py: Python<'_>) -> PyResult<Options> {
        let mut config = EngineConfig::default();
        if let Some(v) = &self.threshold {
            config.threshold = parse_with(py, "threshold", v, parse_threshold)?;
        }
        if let Some(v) = &self.measure {
            config.measure = parsed::<Measure>(py, "measure", v)?;
        }
        if let Some(v) = &self.shingle {
            config.shingling = parsed::<Shingling>(py, "shingle", v)?;
        }
        if let Some(v) = &self.sample {
            config.sampling = parsed::<Sampling>(py, "sample", v)?;
        }
        if let Some(v) = &self.capacity {
            config.capacity = parse_with(py, "capacity", v, parse_capacity)?;
        }
        if let Some(v) = &self.window {
            config.window = Some(parsed::<Window>(py, "window", v)?);
        }
        if let Some(v) = &self.recent {
            config.recent = parse_with(py, "recent", v, parse_recent)?;
        }
        if let Some(v) = &self.empty_text {
            config.empty_text = parsed::<EmptyText>(py, "empty_text", v)?;
        }
        if let Some(v) = &self.max_bucket {
            config.max_bucket = parse_with(py, "max_bucket", v, at_least_one)?;
        }
        if let Some(v) = &self.max_index_bytes {
            config.max_index_bytes = Some(parse_with(py, "max_index_bytes", v, parse_size)?);
        }
        config
            .validate()
            .map_err(|e| errors::config(py, e.to_string()))?;
        let location = match &self.index {
            Some(v) => parse_with(py, "index", v, |s| s.parse::<IndexLocation>())?,
            None => IndexLocation::Memory,
        };
        let index_name = match &self.index_name {
            Some(v) => v.extract::<String>()?,
            None => DEFAULT_INDEX_NAME.to_string(),
        };
        let redis_timeout = match &self.redis_timeout {
            Some(v) => parse_with(py, "redis_timeout", v, parse_duration)?,
            None => DEFAULT_REDIS_TIMEOUT,
        };
        let redis_wait = match &self.redis_wait {
            Some(v) if !v.is_none() => parse_with(py, "redis_wait", v, parse_wait)?,
            _ => None,
        };
        if location != IndexLocation::Memory && config.max_index_bytes.is_some() {
            return Err(errors::config(
                py,
                format!(
                    "max_index_bytes bounds an index in memory; with index={location} bound the \
                     index with capacity, and give Redis a maxmemory above that with \
                     maxmemory-policy noeviction"
                ),
            ));
        }
        let (id_field, text_field) =
            read_fields(py, self.id_field.as_ref(), self.text_field.as_ref())?;
        Ok(Options {
            config,
            location,
            index_name,
            redis_timeout,
            redis_wait,
            id_field,
            text_field,
        })
    }
}

/// `id_field` (a dotted path) and `text_field` (a path or a list of
/// paths), checked as `--id-field` and `--text-field` are.
pub fn read_fields(
    py: Python<'_>,
    id_field: Option<&Bound<'_, PyAny>>,
    text_field: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Option<String>, Vec<String>)> {
    let id = match id_field {
        Some(v) if !v.is_none() => Some(v.extract::<String>()?),
        _ => None,
    };
    let text: Vec<String> = match text_field {
        Some(v) if v.is_none() => Vec::new(),
        Some(v) if v.is_instance_of::<PyString>() => vec![v.extract()?],
        Some(v) if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() => v.extract()?,
        Some(v) => {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "text_field takes a dotted path or a list of them, got {}",
                v.get_type().name()?
            )));
        }
        None => Vec::new(),
    };
    for (name, path) in id
        .iter()
        .map(|p| ("id_field", p))
        .chain(text.iter().map(|p| ("text_field", p)))
    {
        FieldSpec::new(Some(path), Vec::new()).map_err(|e| bad_value(py, name, path, e))?;
    }
    Ok((id, text))
}

/// The defaults, for the docs and `Deduper.defaults()`.
pub fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let options = Options {
        config: EngineConfig::default(),
        location: IndexLocation::Memory,
        index_name: DEFAULT_INDEX_NAME.to_string(),
        redis_timeout: DEFAULT_REDIS_TIMEOUT,
        redis_wait: None,
        id_field: None,
        text_field: Vec::new(),
    };
    debug_assert_eq!(options.config.threshold, DEFAULT_THRESHOLD);
    debug_assert_eq!(options.config.capacity.get(), DEFAULT_CAPACITY);
    debug_assert_eq!(options.config.max_bucket, DEFAULT_MAX_BUCKET);
    debug_assert_eq!(options.config.recent, DEFAULT_RECENT);
    options.to_kwargs(py)
}
