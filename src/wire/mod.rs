//! The wire format and the files it travels in: lines read within a
//! bound, JSON lines decoded once into id, text and URL entities, the tag
//! spliced back into the line's bytes, message times, input files, and
//! batches of lines decoded and sketched for the engine.
//!
//! It may import the engine (for the message id, the settings and the
//! preparation of a batch) and nothing else of this crate.

pub mod batch;
pub mod input;
pub mod invalid;
pub mod lines;
pub mod record;
pub mod timestamp;
