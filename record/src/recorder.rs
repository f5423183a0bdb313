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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use kreplay_cuda::cupti::Subscriber;
use kreplay_engine::tool::PassTool;
use kreplay_protocol::config::Config;

use crate::allocations::AllocationTable;

mod counters;
mod graphs;
mod hook;
mod kernels;
mod launches;
mod marks;
mod modules;
mod outputs;
mod profile_unit;
mod record_unit;
mod report;
mod router;
mod sink;
mod units;

pub use hook::InitializeInjection;

/// Everything the recorder keeps for the process. Lock order where two are held at once:
/// `graphs` before `kernels`; `metrics` before `report`.
struct Recorder {
    config: Config,
    outputs: Arc<outputs::Outputs>,
    _subscriber: Subscriber,
    kernels: kernels::Kernels,
    modules: Mutex<modules::Modules>,
    allocations: Mutex<AllocationTable>,
    /// Executable graphs, by handle.
    graphs: Mutex<HashMap<usize, graphs::ExecState>>,
    report: Arc<report::Report>,
    sink: sink::Sink,
    /// Profile mode: the tool deciding the passes (kreplay's timing unless `--tool`).
    tool: Mutex<Box<dyn PassTool + Send>>,
    /// Profile mode with `--metrics`: per context (made on the context's first profiled
    /// dispatch), its counters or why there are none, and its dispatches waiting for them.
    metrics: Mutex<Vec<counters::ContextMetrics>>,
}

static RECORDER: OnceLock<Recorder> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock was caught already; the data is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Recorder {
    fn error(&self, msg: String) {
        self.report.error(msg);
    }
}
