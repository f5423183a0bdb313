//! What each recorded process tells `kreplay record` / `kreplay list` at exit: a JSON file in
//! the directory named by `KREPLAY_REPORT_DIR`.

use serde::{Deserialize, Serialize};

use crate::corpus::{CorpusCapture, LeftOut};

/// Launch statistics of one kernel.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KernelStat {
    pub name: String,
    pub demangled: String,
    /// Executions: plain launches, and kernel nodes each time their graph was launched (a
    /// launch made while its stream is captured into a graph is not one).
    pub count: u64,
    /// Of `count`, how many ran as nodes of CUDA graphs.
    #[serde(default)]
    pub in_graphs: u64,
    /// Geometry of the first launch seen.
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// 1-based index of its first launch among all launches of the process (what
    /// `--launch-index` takes).
    #[serde(default)]
    pub first_launch: u64,
    /// The innermost NVTX push/pop range open at its first launch, if any.
    #[serde(default)]
    pub nvtx: Option<String>,
}

/// One instance of an NVTX push/pop range and the launches made while it was open (`kreplay
/// list --ranges`: what `record --nvtx-range NAME --nth INSTANCE` would capture).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeSpan {
    /// `None`: the default domain.
    pub domain: Option<String>,
    pub name: String,
    /// 1-based among the pushes of this name in this domain in the process.
    pub instance: u64,
    /// The first and last launch index (as `--launch-index` counts) made while it was open, on
    /// any thread; `None` when none was.
    pub first_launch: Option<u64>,
    pub last_launch: Option<u64>,
    /// Popped before the process ended.
    pub closed: bool,
}

/// One finished capture.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaptureSummary {
    pub kernel: String,
    pub match_index: u64,
    pub file: String,
    pub regions: usize,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub stall_ms: f64,
    pub total_ms: f64,
    /// Where the stall went, phase by phase, in order. They add up to `stall_ms`, except
    /// `kernel`: the dispatch's own run, which the application waits for anyway.
    #[serde(default)]
    pub stall_phases: Vec<StallPhase>,
    /// `record --each-kernel`: the capture's corpus entry.
    #[serde(default)]
    pub corpus: Option<CorpusCapture>,
}

/// One dispatch profiled in place (`kreplay profile`): its passes, or why it was skipped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileRow {
    /// Mangled name, and its short demangled form.
    pub kernel: String,
    pub short_name: String,
    pub match_index: u64,
    /// 1-based among all kernel launches of the process.
    pub launch_index: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub rank: Option<u32>,
    pub pid: u32,
    /// Kernel time of each pass, in ns (launch overhead excluded).
    pub durations_ns: Vec<u64>,
    pub median_ns: u64,
    pub min_ns: u64,
    /// Bytes restored before each pass after the first: the chunks (or pages) the dispatch
    /// changed, and under `--memory touched` past 64 runs in a region the gaps bridged.
    pub write_set_bytes: u64,
    /// The chunk the write set was found in, in bytes, the largest of the regions restored:
    /// the capture's 4 MiB, or a 4 KiB page (`--memory touched`; wider over a region above
    /// 1 GiB; a region's size where the GPU could not compare it). 0 in rows of older
    /// recorders.
    #[serde(default)]
    pub restore_chunk_bytes: u64,
    /// Bytes it can reach (copied aside once, on the device).
    pub reachable_bytes: u64,
    /// Median time of one restore between passes, in ns.
    pub restore_median_ns: u64,
    /// Every pass wrote the same bytes as the first (`None`: a single pass).
    pub deterministic: Option<bool>,
    /// The L2 was emptied before each pass (`--cache flush`).
    pub cache_flush: bool,
    /// The tool ended the loop, or the pass cap did.
    pub stopped_by_tool: bool,
    pub capped: bool,
    /// Why the dispatch ran once, unprofiled (`None`: profiled).
    pub skipped: Option<String>,
    /// Median wall time an extra pass costs beyond the kernel's own run (restore, cache
    /// flush, launch, output check), in ns.
    #[serde(default)]
    pub pass_overhead_ns: u64,
    /// Hardware counters (`--metrics`), in the order asked for; collected in passes of their
    /// own (`counter_passes`, untimed), each on restored memory.
    #[serde(default)]
    pub metrics: Vec<MetricValue>,
    #[serde(default)]
    pub counter_passes: u32,
    /// Why the counters are missing (`None`: collected, or none asked for).
    #[serde(default)]
    pub metrics_error: Option<String>,
    /// `--variant`: the variant's passes and verdict at this dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<crate::variant::VariantResult>,
    /// `--variant`: why the variant did not run or was not judged here (its code would not
    /// load, another parameter layout, a failure); the original ran as usual.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant_error: Option<String>,
    /// `profile --trace`: where each timed pass ran on the GPU (`None`: no trace asked for,
    /// or the dispatch was skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<PassTimeline>,
    /// `profile --trace`: why the dispatch, profiled, has no timeline (its events could not be
    /// made or read); the row's figures are as without `--trace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_error: Option<String>,
}

/// Where a profiled dispatch's timed passes ran (`profile --trace`), on its context's GPU time
/// axis: ns since the context's origin event, recorded on the GPU before the context's first
/// traced dispatch. Each span's start is read from the pass's own CUDA events; its length is
/// the figure the row gives (a pass's `durations_ns`, the restore's own events). Host clocks
/// place nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassTimeline {
    /// The dispatch's context: 0-based in the order the process's contexts were first traced.
    pub context: u32,
    /// The context's device ordinal (as the process sees it).
    pub device: u32,
    /// The application's stream handle (pass 0, the application's own launch, ran there;
    /// the further passes ran on a stream of kreplay's).
    pub app_stream: u64,
    /// Host time (ns since the Unix epoch) when the context's origin event was recorded.
    pub origin_unix_ns: u64,
    /// The timed passes, in the order they ran.
    pub passes: Vec<TimedPass>,
}

/// One timed pass of a profiled dispatch on its context's axis (ns since the origin).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedPass {
    /// 0-based: 0 is the application's launch.
    pub pass: u32,
    /// A pass of the `--variant` kernel (else the original's).
    #[serde(default)]
    pub variant: bool,
    pub start_ns: u64,
    pub dur_ns: u64,
    /// The write set's restore before it (outside the timed window): start and length.
    #[serde(default)]
    pub restore: Option<(u64, u64)>,
    /// The L2 flush before it (`--cache flush`): start and length.
    #[serde(default)]
    pub flush: Option<(u64, u64)>,
}

/// One counter of a dispatch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricValue {
    pub name: String,
    pub value: f64,
    pub unit: String,
}

/// One phase of a capture's stall of the application.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StallPhase {
    pub phase: String,
    pub ms: f64,
}

/// A process's report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProcessReport {
    pub pid: u32,
    pub rank: Option<u32>,
    pub launches: u64,
    pub matches: u64,
    pub kernels: Vec<KernelStat>,
    pub captures: Vec<CaptureSummary>,
    /// Dispatches profiled in place (`kreplay profile`).
    #[serde(default)]
    pub profiles: Vec<ProfileRow>,
    pub errors: Vec<String>,
    /// Why recording never started in this process (another CUPTI user, no libcupti).
    #[serde(default)]
    pub disabled: Option<String>,
    /// `list --ranges`: NVTX range instances in the order they were pushed.
    #[serde(default)]
    pub ranges: Vec<RangeSpan>,
    /// `list --ranges`: instances not kept (past the limit of what one report holds).
    #[serde(default)]
    pub ranges_left_out: u64,
    /// `record --each-kernel`: kernels whose executions the corpus did not keep, and why.
    #[serde(default)]
    pub left_out: Vec<LeftOut>,
}

impl ProcessReport {
    /// Writes `report-PID.json` into `dir`.
    pub fn write_to(&self, dir: &std::path::Path) -> Result<(), String> {
        let path = dir.join(format!("report-{}.json", self.pid));
        let bytes =
            serde_json::to_vec(self).map_err(|e| format!("cannot encode the report: {e}"))?;
        std::fs::write(&path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}
