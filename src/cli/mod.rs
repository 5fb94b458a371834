//! The binary's parts, around the thin entry in `main.rs`: the command
//! line's definition ([`args`]), the manual pages generated from it
//! ([`manual`]), the scale-out commands' wiring ([`scale`]: `consume`,
//! `index`, the index in Redis), the live status line on a terminal
//! ([`status`]) and `tune`'s reading and printing ([`tune`]).
//!
//! These modules only parse, wire and print: every decision, file format
//! and protocol lives in the library (`dedup_stream`), which knows nothing
//! of them.

pub mod args;
pub mod manual;
pub mod scale;
pub mod status;
pub mod tune;
