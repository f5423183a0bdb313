//! The recorder's process-wide state: the owners, each behind its own lock, and the one
//! instance the entry points find.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use kreplay_cuda::cupti::Subscriber;
use kreplay_engine::tool::PassTool;
use kreplay_protocol::config::Config;

use super::context_metrics::ContextMetrics;
use super::exec_graphs::ExecState;
use super::kernels::Kernels;
use super::module_book::Modules;
use super::outputs::Outputs;
use super::report::Report;
use super::sink::Sink;
use crate::allocations::AllocationTable;
use crate::range_select::RangeSelect;
use crate::range_spans::RangeSpans;

/// Everything the recorder keeps for the process. Lock order where two are held at once:
/// `graphs` before `kernels` before `report`; `metrics` before `tool` and `report`.
pub(super) struct Recorder {
    pub config: Config,
    pub outputs: Arc<Outputs>,
    /// CUPTI's subscription; none when the recorder runs on the Compute Sanitizer API
    /// (`--memory touched`, `sanitizer_hook`).
    pub _subscriber: Option<Subscriber>,
    pub kernels: Kernels,
    pub modules: Mutex<Modules>,
    pub allocations: Mutex<AllocationTable>,
    /// Executable graphs, by handle.
    pub graphs: Mutex<HashMap<usize, ExecState>>,
    pub report: Arc<Report>,
    pub sink: Sink,
    /// Profile mode: the tool deciding the passes (kreplay's timing unless `--tool`).
    pub tool: Mutex<Box<dyn PassTool + Send>>,
    /// Profile mode with `--metrics`: per context (made on the context's first profiled
    /// dispatch), its counters or why there are none, and its dispatches waiting for them.
    pub metrics: Mutex<Vec<ContextMetrics>>,
    /// `record --nvtx-range` / `--profiler-range`: where the selected range opens and closes.
    pub selection: Option<Mutex<RangeSelect>>,
    /// `list --ranges`: NVTX range instances and the launches inside each.
    pub spans: Option<Mutex<RangeSpans>>,
    /// A boundary range's capture waiting for its next instance to be timed.
    pub range_timing: Mutex<crate::range_timing::RangeTiming>,
}

pub(super) static RECORDER: OnceLock<Recorder> = OnceLock::new();

impl Recorder {
    pub(super) fn error(&self, msg: String) {
        self.report.error(msg);
    }
}
