//! The recorder: process-wide state and what the CUPTI callbacks do with it.
//!
//! - `hook`: the entry points the driver and the C runtime call (injection, callbacks, exit,
//!   fork), each behind a panic guard; nothing else is `extern "C"`.
//! - `router`: which part handles a decoded callback, and whether it is the application's at
//!   all (`marks`: what the calling thread is doing for kreplay). Owns no capture logic.
//! - owners of process state, each behind its own lock: `kernels` (counting, filtering),
//!   `modules` (code objects, PTX), allocations, `graphs` (executable graphs), `report`
//!   (captures, profiles, errors); NVTX ranges live in `crate::nvtx`.
//! - `units`: captures in flight between a launch's ENTER and EXIT, keyed, opened by
//!   `record_unit` (a capture to a file) and `profile_unit` (profiled in place), with
//!   `counters` for profile mode's per-context counter batches.
//! - `sink`: writes a finished capture on a thread of its own, handed what it needs
//!   (`outputs`: names, report directory, file opener).

mod context_metrics;
mod counters;
mod exec_graphs;
mod graphs;
mod hook;
mod kernels;
mod launches;
mod locking;
mod marks;
mod module_book;
mod modules;
mod outputs;
mod profile_unit;
mod record_unit;
mod report;
mod router;
mod sink;
mod state;
mod units;

pub use hook::InitializeInjection;
