//! What a run keeps on disk: versioned, checksummed state files written
//! atomically (so an index survives restarts), the sidecar's journal of
//! what it indexed since the last state file, and the safety rules of every
//! file a run writes (never an input, never a file of another kind).
//!
//! It may import the engine, the wire format and the tools whose files it
//! recognises ([`crate::tune`]'s tables, [`crate::report_html`]'s pages),
//! and nothing above them.

pub mod journal;
pub mod output;
pub mod snapshot;
