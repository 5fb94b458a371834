//! The binary's parts, around the thin entry in `main.rs` (the exit
//! status, logging, and the helpers every command shares): the command
//! line's definition ([`args`]) and the manual pages generated from it
//! ([`manual`]); one module a command: the [`filter`], [`serve`],
//! [`compare`], [`report`], [`tune`], and the scale-out commands' wiring
//! ([`scale`]: `consume`, `index`, the index in Redis); and the live
//! status line on a terminal ([`status`]).
//!
//! These modules only parse, wire and print: every decision, file format
//! and protocol lives in the library (`dedup_stream`), which knows nothing
//! of them.

pub mod args;
pub mod compare;
pub mod filter;
pub mod manual;
pub mod report;
pub mod scale;
pub mod serve;
pub mod status;
pub mod tune;
