//! The `ainic-dra` binary as a library: the node agent (`node`), the classic
//! device plugin (`classic`), the fabric controller (`controller`), the demo
//! and the CLI commands. `main.rs` only
//! parses arguments and dispatches; integration tests and benchmarks use the
//! same modules through this crate.
//!
//! This is the imperative shell around the pure crates (`topology`,
//! `dra-model`, `allocator`): sockets, the API server, files, signals.

pub mod classic;
pub mod cli;
pub mod controller;
#[cfg(feature = "demo")]
pub mod demo;
pub mod node;
#[cfg(feature = "tools")]
pub mod why;
