//! The error that ends a run, composed of each layer's own errors (the
//! engine's [`ConfigError`] and [`StoreError`], the wire format's
//! [`InvalidLine`], the state files' [`crate::state::snapshot::SnapshotError`]).
//! The library says what went wrong and where; the binary turns it into a
//! message and an exit status. Only the layers above the state files (the
//! pipeline, the sidecar, the workers) import this module.

use std::io;

pub use crate::engine::config::ConfigError;
pub use crate::engine::store::StoreError;
pub use crate::wire::invalid::{InvalidLine, InvalidReason};

/// A failure that ends a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the input failed.
    #[error("reading input: {0}")]
    Read(#[source] io::Error),
    /// Writing the output failed (other than a closed pipe, which is a quiet
    /// stop).
    #[error("writing output: {0}")]
    Write(#[source] io::Error),
    /// An invalid line, when invalid lines are fatal.
    #[error("invalid input: {0}")]
    Invalid(InvalidLine),
    /// A configuration value is out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A state file could not be loaded or saved.
    #[error(transparent)]
    Snapshot(#[from] crate::state::snapshot::SnapshotError),
    /// A server address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address as given.
        address: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The index store failed (Redis unreachable past the point of
    /// retrying, or an index made with other settings).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A worker thread died (a bug: please report it).
    #[error("internal error: {0}")]
    Internal(String),
}
