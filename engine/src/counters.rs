//! `kreplay play --metrics`: hardware counters of the replayed dispatch through the CUPTI range
//! profiler. CUPTI says how many passes the metric set needs; the one pass loop
//! (`tool::drive_from`, with `CounterPasses` as its tool) replays the dispatch that many
//! times, restoring the written memory (and, by default, emptying L2) before each, so every
//! pass sees the captured input. Counter passes are never timing passes.

use std::ffi::CString;

use kreplay_cuda::cupti;
use kreplay_cuda::profiler::{
    self, passes_needed, MetricHost, MetricKind, ProfilerApi, RangeProfiler,
};
use kreplay_cuda::{AsFunction, ContextHandle, Device, PrimaryContext};
use serde::Serialize;

use crate::error::{MetricsError, PlayError};
use crate::options::CacheState;
use crate::passes::Replayer;
use crate::tool::{
    drive_from, DispatchView, Flow, PassOutcome, PassRequest, PassRunner, PassTool, Start,
};

/// More passes than any metric set needs: a profiler that never reports completion is a bug,
/// not a reason to spin forever.
pub const MAX_PASSES: usize = 256;

/// Checked metric names, ready to be collected on one device.
pub struct MetricRequest {
    names: Vec<String>,
    /// Each metric's unit, looked up once.
    units: Vec<String>,
    cnames: Vec<CString>,
    chip: String,
    /// Holds the metrics: made the configuration image, later evaluates the counters.
    host: MetricHost,
    config: Vec<u8>,
    // Drop order: the host object, then the profiler API, then the context (the player's
    // primary context; none in the application's process, whose context is its own).
    _api: ProfilerApi,
    _ctx: Option<PrimaryContext>,
}

impl MetricRequest {
    /// Checks every name against the device's metrics, before any memory is uploaded or any
    /// kernel runs: a typo costs nothing.
    pub fn new(device: &Device, names: &[String]) -> Result<MetricRequest, PlayError> {
        let (ctx, api) = open_profiler(device)?;
        let handle = ctx.handle();
        MetricRequest::build(device, names, handle, api, Some(ctx))
    }

    /// The same checks for the current context of the application's process (in-process
    /// replay, `kreplay profile --metrics`): no context is retained.
    pub fn in_current_context(names: &[String]) -> Result<MetricRequest, PlayError> {
        let device = Device::current()?;
        let handle = ContextHandle::current()?;
        let api = open_profiler_api(&device)?;
        MetricRequest::build(&device, names, handle, api, None)
    }

    fn build(
        device: &Device,
        names: &[String],
        context: ContextHandle,
        api: ProfilerApi,
        ctx: Option<PrimaryContext>,
    ) -> Result<MetricRequest, PlayError> {
        let mut uniq: Vec<String> = Vec::new();
        for n in names {
            let n = n.trim();
            if n.is_empty() || n.contains(char::is_whitespace) || n.contains('\0') {
                return Err(MetricsError::BadName(n.to_string()).into());
            }
            if !uniq.iter().any(|u| u == n) {
                uniq.push(n.to_string());
            }
        }
        let chip = profiler::chip_name(device).map_err(MetricsError::from)?;
        let availability = profiler::counter_availability(context).map_err(MetricsError::from)?;
        let cnames: Vec<CString> = uniq
            .iter()
            .map(|n| CString::new(n.as_str()).map_err(|_| MetricsError::BadName(n.clone())))
            .collect::<Result<_, _>>()?;
        let mut host =
            MetricHost::new(&chip, Some(availability.clone())).map_err(MetricsError::from)?;
        if let Err(all) = host.add_metrics(&cnames) {
            // Name the culprits: each name on its own host.
            let mut bad = Vec::new();
            for (n, c) in uniq.iter().zip(&cnames) {
                let mut one = MetricHost::new(&chip, Some(availability.clone()))
                    .map_err(MetricsError::from)?;
                if one.add_metrics(std::slice::from_ref(c)).is_err() {
                    bad.push(n.clone());
                }
            }
            return Err(if bad.is_empty() {
                MetricsError::from(all)
            } else {
                MetricsError::UnknownMetrics { bad, chip }
            }
            .into());
        }
        let config = host.config_image().map_err(MetricsError::from)?;
        let units = uniq
            .iter()
            .map(|name| {
                let base = name.split('.').next().unwrap_or(name);
                let dim = host
                    .properties(base)
                    .map(|p| p.dim_unit)
                    .unwrap_or_default();
                unit_of(name, &dim)
            })
            .collect();
        Ok(MetricRequest {
            units,
            names: uniq,
            cnames,
            chip,
            host,
            config,
            _api: api,
            _ctx: ctx,
        })
    }

    /// The range profiler on the current context, configured for these metrics with room for
    /// `max_ranges` automatic ranges (one per kernel launched while it is started).
    pub fn range_profiler(&self, max_ranges: usize) -> Result<RangeProfiler, PlayError> {
        let ctx = ContextHandle::current()?;
        let mut rp = RangeProfiler::enable(ctx).map_err(MetricsError::from)?;
        rp.configure(self.config.clone(), &self.cnames, max_ranges)
            .map_err(MetricsError::from)?;
        Ok(rp)
    }

    /// The counters of a finished range profiler: from the range named after `kernel` (an
    /// automatic range is named after the kernel it bounds), else the last one; in the order
    /// the user asked for them.
    pub fn evaluate(
        &self,
        rp: &mut RangeProfiler,
        kernel: &str,
    ) -> Result<Vec<MetricValue>, PlayError> {
        let names = self.decode(rp)?;
        if names.is_empty() {
            return Err(MetricsError::Dropped.into());
        }
        let range = names
            .iter()
            .position(|n| range_is_kernel(n, kernel))
            .unwrap_or(names.len() - 1);
        self.values_of_range(rp, range)
    }

    /// Decodes a finished collection: the names of its ranges, in the order the kernels ran
    /// (an automatic range is named after its kernel).
    pub fn decode(&self, rp: &mut RangeProfiler) -> Result<Vec<String>, PlayError> {
        rp.decode().map_err(MetricsError::from)?;
        let ranges = rp.ranges().map_err(MetricsError::from)?;
        (0..ranges)
            .map(|i| rp.range_name(i).map_err(|e| MetricsError::from(e).into()))
            .collect()
    }

    /// The counters of one decoded range, in the order the user asked for them.
    pub fn values_of_range(
        &self,
        rp: &RangeProfiler,
        range: usize,
    ) -> Result<Vec<MetricValue>, PlayError> {
        let values = self
            .host
            .evaluate(rp.counter_data(), range, &self.cnames)
            .map_err(MetricsError::from)?;
        Ok(self
            .names
            .iter()
            .zip(&self.units)
            .zip(values)
            .map(|((name, unit), value)| MetricValue {
                unit: unit.clone(),
                name: name.clone(),
                value,
            })
            .collect())
    }

    pub fn chip(&self) -> &str {
        &self.chip
    }
}

fn open_profiler(device: &Device) -> Result<(PrimaryContext, ProfilerApi), PlayError> {
    // The context first: the profiler API checks the device through it.
    let ctx = PrimaryContext::retain(device)?;
    let api = open_profiler_api(device)?;
    Ok((ctx, api))
}

/// CUPTI's profiler API, once CUPTI and the driver were found to work together on `device`
/// (a context of it current).
fn open_profiler_api(device: &Device) -> Result<ProfilerApi, PlayError> {
    if !cupti::cupti_present() {
        return Err(MetricsError::NoCupti.into());
    }
    // Before anything loads CUPTI's profiler libraries: take the ones beside this libcupti,
    // and refuse a CUPTI that cannot work with this driver (it would crash inside CUPTI).
    let info = cupti::pair_profiler_libraries().map_err(MetricsError::from)?;
    let driver = kreplay_cuda::driver_version()?;
    if let Err(why) = cupti::profiler_compatibility(info.api_version, driver) {
        return Err(MetricsError::IncompatibleCupti {
            path: info.path.clone(),
            why,
        }
        .into());
    }
    let api = ProfilerApi::initialize().map_err(MetricsError::from)?;
    if let Some(why) = profiler::unsupported_reason(device).map_err(MetricsError::from)? {
        return Err(MetricsError::Unsupported {
            device: device.ordinal(),
            why,
        }
        .into());
    }
    Ok(api)
}

/// One counter of the replayed dispatch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricValue {
    pub name: String,
    pub value: f64,
    pub unit: String,
}

/// Counter values of the replayed dispatch, or of a range's kernel steps.
#[derive(Debug, Clone, Serialize)]
pub struct MetricsReport {
    /// In the order the user asked for them.
    pub metrics: Vec<MetricValue>,
    /// Replay passes the metric set needed (none of them timed).
    pub passes: u32,
    /// Whether L2 was emptied before each pass.
    pub cache: CacheState,
    pub chip: String,
    /// The CUPTI that collected them.
    pub cupti: Option<cupti::CuptiInfo>,
    /// A range's kernel steps with their counters (then `metrics` holds the range's totals of
    /// the additive ones, `range_counters::is_additive`); empty for one dispatch.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepMetrics>,
}

impl MetricsReport {
    /// What `passes` counter passes of `req` collected (`cache`: whether L2 was emptied before
    /// each): `metrics`, and a range's `steps` (empty for one dispatch), with the request's
    /// chip and the CUPTI that collected them.
    pub(crate) fn collected(
        req: &MetricRequest,
        passes: u32,
        cache: CacheState,
        metrics: Vec<MetricValue>,
        steps: Vec<StepMetrics>,
    ) -> MetricsReport {
        MetricsReport {
            metrics,
            passes,
            cache,
            chip: req.chip().to_string(),
            cupti: cupti::pair_profiler_libraries().ok().cloned(),
            steps,
        }
    }
}

/// One kernel step's counters (`play --json`: `steps[i].metrics`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepMetrics {
    /// The step's index in the range (ops count too).
    pub index: usize,
    /// The kernel, mangled.
    pub kernel: String,
    /// In the order the user asked for them; empty when the profiler returned no range for
    /// this step (then neither for any later one).
    pub metrics: Vec<MetricValue>,
}

/// The unit of a full metric name, from its base metric's dimension and its suffix.
/// Whether an automatic range's name is that of `kernel` (CUPTI may prefix it).
pub fn range_is_kernel(range: &str, kernel: &str) -> bool {
    range == kernel || range.ends_with(kernel)
}

/// Which range holds each of `kernels` kernels of a collection that ran them in order, among
/// `ranges` (the decoded range names, in order), where other kernels (the L2 sweeps between
/// them) may have run too: kernel `k` takes the first range after the previous kernel's for
/// which `named(range, k)` holds. `None` where none does (a range dropped); no later kernel
/// is guessed then either.
pub fn assign_ranges(
    ranges: &[String],
    kernels: usize,
    named: impl Fn(&str, usize) -> bool,
) -> Vec<Option<usize>> {
    let mut out = Vec::with_capacity(kernels);
    let mut next = 0;
    for k in 0..kernels {
        match (next..ranges.len()).find(|&i| named(&ranges[i], k)) {
            Some(i) => {
                out.push(Some(i));
                next = i + 1;
            }
            None => {
                next = ranges.len();
                out.push(None);
            }
        }
    }
    out
}

fn unit_of(name: &str, dim_unit: &str) -> String {
    let suffix = name.split_once('.').map_or("", |(_, s)| s);
    if suffix.contains("pct") {
        "%".into()
    } else if suffix.contains("ratio") {
        String::new()
    } else if suffix.contains("per_second") {
        format!("{dim_unit}/second")
    } else if suffix.contains("per_cycle") {
        format!("{dim_unit}/cycle")
    } else {
        dim_unit.to_string()
    }
}

/// The built-in counters as a tool: passes until the range profiler has every pass the metric
/// set needs, the profiler started at BEGIN and stopped at END of each. The player's counter
/// passes and `kreplay profile`'s counter batches both run it.
pub struct CounterPasses<'a> {
    profiler: &'a mut RangeProfiler,
    /// Every pass the metric set needs was submitted.
    complete: bool,
    /// The first failure of the profiler (the loop stops at it).
    failed: Option<cupti::CuptiError>,
}

impl<'a> CounterPasses<'a> {
    pub fn new(profiler: &'a mut RangeProfiler) -> CounterPasses<'a> {
        CounterPasses {
            profiler,
            complete: false,
            failed: None,
        }
    }

    /// After the loop: whether the profiler failed, else whether it has every pass it needs.
    pub fn outcome(self) -> CounterOutcome {
        match self.failed {
            Some(e) => CounterOutcome::Failed(e),
            None if self.complete => CounterOutcome::Complete,
            None => CounterOutcome::Incomplete,
        }
    }
}

/// How a counter collection ended.
#[derive(Debug)]
pub enum CounterOutcome {
    Complete,
    /// The loop reached its most passes before the profiler reported completion.
    Incomplete,
    Failed(cupti::CuptiError),
}

impl PassTool for CounterPasses<'_> {
    fn config(&mut self, _d: &DispatchView) -> PassRequest {
        PassRequest::UntilStop
    }

    fn begin(&mut self, _d: &DispatchView, _pass: u32) -> Flow {
        match self.profiler.start() {
            Ok(()) => Flow::Continue,
            Err(e) => {
                self.failed = Some(e);
                Flow::Stop
            }
        }
    }

    fn end(&mut self, _d: &DispatchView, _o: &PassOutcome) -> Flow {
        match self.profiler.stop() {
            Ok(true) => {
                self.complete = true;
                Flow::Stop
            }
            Ok(false) => Flow::Continue,
            Err(e) => {
                self.failed.get_or_insert(e);
                Flow::Stop
            }
        }
    }
}

/// The most passes a metric set that CUPTI says needs `needed` may take.
pub fn max_counter_passes(needed: usize) -> u32 {
    MAX_PASSES
        .max(needed.saturating_add(2))
        .min(u32::MAX as usize) as u32
}

/// How a counter pass of a `Replayer` runs: restored, L2 emptied (`cache` flush) and the
/// stream drained before BEGIN starts the profiler, launched untimed (a timing gate would be
/// one more kernel among the profiler's ranges), waited for before END stops it.
struct CounterRuns<'r, F: AsFunction> {
    replayer: &'r mut Replayer<F>,
    cache: CacheState,
}

impl<F: AsFunction> PassRunner for CounterRuns<'_, F> {
    type Error = PlayError;

    fn restore(&mut self) -> Result<(), PlayError> {
        self.replayer.restore()
    }

    fn prepare(&mut self, _pass: u32) -> Result<(), PlayError> {
        self.replayer.prepare_cache(self.cache)?;
        self.replayer.stream().synchronize()?;
        Ok(())
    }

    fn run(&mut self, pass: u32) -> Result<PassOutcome, PlayError> {
        self.replayer.launch()?;
        self.replayer.stream().synchronize()?;
        Ok(PassOutcome {
            index: pass,
            duration_ns: 0,
            matches_first: None,
        })
    }
}

impl<F: AsFunction> Replayer<F> {
    /// Replays the dispatch as many times as the metric set needs, each pass on restored
    /// memory, and evaluates the counters. `cache` flush empties L2 before each pass, as
    /// profilers do by default. `view` is the dispatch (its kernel names the range).
    pub fn collect_metrics(
        &mut self,
        req: &MetricRequest,
        cache: CacheState,
        view: &DispatchView,
    ) -> Result<MetricsReport, PlayError> {
        // One automatic range per pass: the dispatch alone. The L2 sweep runs before the
        // profiler starts. (Running it inside the window as a range of its own was tried: it
        // leaves the kernel's output dirty in L2, and DRAM writes then read far below ncu's.)
        let (mut rp, passes) = self.counter_passes(req, cache, view, 1)?;
        let metrics = req.evaluate(&mut rp, view.kernel())?;
        Ok(MetricsReport::collected(
            req,
            passes,
            cache,
            metrics,
            Vec::new(),
        ))
    }

    /// Runs the counter passes the metric set needs (each a whole `launch`: the dispatch, or a
    /// range's every step) with room for `max_ranges` automatic ranges per pass; the profiler
    /// holding the collection, and the number of passes.
    pub(crate) fn counter_passes(
        &mut self,
        req: &MetricRequest,
        cache: CacheState,
        view: &DispatchView,
        max_ranges: usize,
    ) -> Result<(RangeProfiler, u32), PlayError> {
        let mut config = req.config.clone();
        let needed = passes_needed(&mut config).map_err(MetricsError::from)?;
        let mut rp = req.range_profiler(max_ranges)?;
        let mut view = view.clone();
        view.max_passes = max_counter_passes(needed);
        let start = Start {
            warmup: 0,
            ran_before: self.launched(),
        };
        let mut tool = CounterPasses::new(&mut rp);
        let mut runner = CounterRuns {
            replayer: self,
            cache,
        };
        let summary = drive_from(&mut tool, &view, &mut runner, start)?;
        match tool.outcome() {
            CounterOutcome::Complete => {}
            CounterOutcome::Incomplete => {
                return Err(MetricsError::NoCompletion(summary.passes as usize).into())
            }
            CounterOutcome::Failed(e) => return Err(MetricsError::from(e).into()),
        }
        Ok((rp, summary.passes))
    }
}

/// One base metric of the device, for `--list-metrics`.
#[derive(Debug, Clone, Serialize)]
pub struct MetricInfo {
    pub name: String,
    pub kind: &'static str,
    pub unit: String,
    pub hw_unit: String,
    pub description: String,
}

/// Every base metric the device offers, sorted by name.
pub fn list_metrics(device: &Device) -> Result<(String, Vec<MetricInfo>), PlayError> {
    let (ctx, _api) = open_profiler(device)?;
    let chip = profiler::chip_name(device).map_err(MetricsError::from)?;
    let availability = profiler::counter_availability(ctx.handle()).map_err(MetricsError::from)?;
    let host = MetricHost::new(&chip, Some(availability)).map_err(MetricsError::from)?;
    let mut out = Vec::new();
    for kind in MetricKind::ALL {
        for name in host.base_metrics(kind).map_err(MetricsError::from)? {
            let p = host.properties(&name).map_err(MetricsError::from)?;
            out.push(MetricInfo {
                name,
                kind: kind.as_str(),
                unit: p.dim_unit,
                hw_unit: p.hw_unit,
                description: p.description,
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((chip, out))
}

#[cfg(test)]
mod tests {
    use super::unit_of;
    use crate::error::MetricsError;
    use kreplay_cuda::cupti::{sys::CUptiResult, CuptiError};

    fn err(code: CUptiResult) -> MetricsError {
        MetricsError::from(CuptiError {
            call: "cuptiProfilerInitialize",
            code: code as u32,
            name: format!("{code:?}"),
        })
    }

    #[test]
    fn cupti_failures_become_actionable_messages() {
        let e = err(CUptiResult::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES);
        assert!(matches!(e, MetricsError::Privileges(_)));
        assert!(e
            .to_string()
            .contains("NVreg_RestrictProfilingToAdminUsers"));
        let e = err(CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
        assert!(matches!(e, MetricsError::Busy(_)));
        assert!(e.to_string().contains("without --metrics"));
        assert!(matches!(
            err(CUptiResult::CUPTI_ERROR_INVALID_PARAMETER),
            MetricsError::Cupti(_)
        ));
        let e = MetricsError::UnknownMetrics {
            bad: vec!["a.sum".into(), "b".into()],
            chip: "GH100".into(),
        };
        let m = e.to_string();
        assert!(m.contains("unknown metrics for GH100: a.sum, b"), "{m}");
        assert!(m.contains("--list-metrics"), "{m}");
    }

    #[test]
    fn each_kernel_takes_the_next_range_of_its_name() {
        let r = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let assign = |ranges: &[String], kernels: &[&str]| {
            super::assign_ranges(ranges, kernels.len(), |r, k| {
                super::range_is_kernel(r, kernels[k])
            })
        };
        // Sweeps between the kernels are passed over.
        let ranges = r(&["sweep", "gemm", "sweep", "Kernel2", "sweep", "gemm"]);
        assert_eq!(
            assign(&ranges, &["gemm", "Kernel2", "gemm"]),
            vec![Some(1), Some(3), Some(5)]
        );
        // A missing range leaves its kernel, and every later one, without counters.
        let ranges = r(&["gemm", "sweep", "gemm"]);
        assert_eq!(
            assign(&ranges, &["gemm", "Kernel2", "gemm"]),
            vec![Some(0), None, None]
        );
        // CUPTI may prefix the kernel's name.
        assert_eq!(assign(&r(&["ctx/gemm"]), &["gemm"]), vec![Some(0)]);
        assert_eq!(assign(&[], &["gemm"]), vec![None]);
    }

    // Catches: a cap below what CUPTI says the metric set needs (a collection refused as
    // incomplete although it would finish), or no cap at all.
    #[test]
    fn counter_passes_are_capped_above_what_the_metric_set_needs() {
        assert_eq!(super::max_counter_passes(3), super::MAX_PASSES as u32);
        assert_eq!(super::max_counter_passes(300), 302);
        assert_eq!(super::max_counter_passes(usize::MAX - 2), u32::MAX);
    }

    #[test]
    fn units_follow_the_suffix() {
        assert_eq!(unit_of("dram__bytes_read.sum", "byte"), "byte");
        assert_eq!(
            unit_of("dram__bytes_read.sum.per_second", "byte"),
            "byte/second"
        );
        assert_eq!(
            unit_of("sm__throughput.avg.pct_of_peak_sustained_elapsed", ""),
            "%"
        );
        assert_eq!(
            unit_of("smsp__inst_executed.avg.per_cycle_active", "inst"),
            "inst/cycle"
        );
        assert_eq!(unit_of("sm__warps_active.avg.ratio", "warp"), "");
    }
}
