//! The recorder: process-wide state and what the CUPTI callbacks do with it.
//!
//! - `hook`: the entry points the driver and the C runtime call (injection, callbacks, exit,
//!   fork), each behind a panic guard; nothing else is `extern "C"`. Payloads arrive decoded
//!   (`kreplay_cuda::cupti_events`).
//! - `router`: which part handles a decoded callback, and whether it is the application's at
//!   all (`marks`: what the calling thread is doing for kreplay). Owns no capture logic.
//! - `state`: the one `Recorder`, holding the owners of process state, each behind its own
//!   lock (`locking`): `kernels` (counting, filtering), `module_book` (code objects, PTX;
//!   `modules` handles their callbacks), allocations, `exec_graphs` (executable graphs;
//!   `graphs` handles their callbacks and captures their nodes, `graph_launch` a whole
//!   launch of one as a range for `--graph-launch`), `report` (captures,
//!   profiles, errors); NVTX ranges live in `crate::nvtx`.
//! - `units`: captures in flight between a launch's ENTER and EXIT, keyed, opened by
//!   `launches` as a `record_unit` (a capture to a file) or a `profile_unit` (profiled in
//!   place), or a `range_unit` (launches I..J as one capture, in the process-wide map), with `counters` (`context_metrics`) for profile mode's counter batches.
//! - `selection`: the boundaries the application marks (NVTX pushes and pops, profiler
//!   start and stop) handed to the range selection (`crate::range_select`), which opens and
//!   closes the range unit, and to `list --ranges` (`crate::range_spans`).
//! - `corpus`: which executions `record --each-kernel` captures, over `corpus_ledger` (the
//!   `--max-bytes` budget, each capture's slot for its name, the kernels left out), which the
//!   kernels owner, the outputs and the sink share.
//! - `sink`: writes a finished capture on a thread of its own, handed what it needs
//!   (`outputs`: names, report directory, file opener), in the format's event order.
//!
//! A file here imports its siblings only, never this one, and no two import each other.

mod context_metrics;
mod corpus;
mod corpus_keep;
mod corpus_ledger;
mod counters;
mod exec_graphs;
mod graph_launch;
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
mod range_timing;
mod range_unit;
mod record_unit;
mod report;
mod router;
mod sanitizer_hook;
mod selection;
mod sink;
mod state;
mod units;
mod variant_code;

pub use hook::InitializeInjection;
