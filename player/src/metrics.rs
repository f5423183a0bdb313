//! `kreplay play --metrics`: hardware counters of the replayed dispatch through the CUPTI range
//! profiler. CUPTI says how many passes the metric set needs; the player replays the dispatch
//! that many times, restoring the written memory (and, by default, emptying L2) before each,
//! so every pass sees the captured input. Counter passes are never timing passes.

use std::ffi::CString;

use kreplay_replay::cupti::{self, sys::CUptiResult, CuptiError};
use kreplay_replay::driver::{self, PrimaryContext};
use kreplay_replay::profiler::{
    self, passes_needed, MetricHost, MetricKind, ProfilerApi, RangeProfiler,
};
use serde::Serialize;

use crate::session::{open_device, CacheState, PlayError, Session};

/// More passes than any metric set needs: a profiler that never reports completion is a bug,
/// not a reason to spin forever.
const MAX_PASSES: usize = 256;

/// Why counters cannot be collected.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("counters need CUPTI, and libcupti.so could not be loaded: add the CUDA toolkit's library directory (e.g. /usr/local/cuda/lib64) to LD_LIBRARY_PATH")]
    NoCupti,
    #[error("device {device} cannot be profiled: {why}")]
    Unsupported { device: i32, why: String },
    #[error("cannot collect counters with the CUPTI at {path}: {why}")]
    IncompatibleCupti { path: String, why: String },
    #[error("another profiler holds the GPU performance counters in this process ({0}): under ncu or nsys, run `kreplay play` without --metrics and let that profiler collect them")]
    Busy(CuptiError),
    #[error("access to GPU performance counters is restricted to administrators on this machine ({0}): run as root, or load the NVIDIA driver with NVreg_RestrictProfilingToAdminUsers=0")]
    Privileges(CuptiError),
    #[error("unknown metric{} for {chip}: {}; `kreplay play --list-metrics` lists the base metrics (add a rollup: .sum, .avg, .min, .max for counters, .pct or .ratio for ratios, .avg.pct_of_peak_sustained_elapsed for throughputs)", if bad.len() == 1 { "" } else { "s" }, bad.join(", "))]
    UnknownMetrics { bad: Vec<String>, chip: String },
    #[error("metric name {0:?} is empty or contains a space or NUL")]
    BadName(String),
    #[error("the range profiler did not finish after {0} passes")]
    NoCompletion(usize),
    #[error("the range profiler dropped the replayed range; no counter values were produced")]
    Dropped,
    #[error("CUPTI: {0}")]
    Cupti(CuptiError),
}

impl From<CuptiError> for MetricsError {
    fn from(e: CuptiError) -> Self {
        if e.is(CUptiResult::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES) {
            MetricsError::Privileges(e)
        } else if e.is_multiple_subscribers()
            || e.is(CUptiResult::CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED)
            || e.is(CUptiResult::CUPTI_ERROR_HARDWARE_BUSY)
        {
            MetricsError::Busy(e)
        } else {
            MetricsError::Cupti(e)
        }
    }
}

/// Checked metric names, ready to be collected on one device.
pub struct MetricRequest {
    names: Vec<String>,
    cnames: Vec<CString>,
    chip: String,
    /// Holds the metrics: made the configuration image, later evaluates the counters.
    host: MetricHost,
    config: Vec<u8>,
    // Drop order: the host object, then the profiler API, then the context.
    _api: ProfilerApi,
    _ctx: PrimaryContext,
}

impl MetricRequest {
    /// Checks every name against the device's metrics, before any memory is uploaded or any
    /// kernel runs: a typo costs nothing.
    pub fn new(device: i32, names: &[String]) -> Result<MetricRequest, PlayError> {
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
        let (ctx, api) = open_profiler(device)?;
        let chip = profiler::chip_name(device).map_err(MetricsError::from)?;
        let availability =
            profiler::counter_availability(ctx.ctx as _).map_err(MetricsError::from)?;
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
        Ok(MetricRequest {
            names: uniq,
            cnames,
            chip,
            host,
            config,
            _api: api,
            _ctx: ctx,
        })
    }
}

fn open_profiler(device: i32) -> Result<(PrimaryContext, ProfilerApi), PlayError> {
    open_device(device)?;
    if !cupti::cupti_present() {
        return Err(MetricsError::NoCupti.into());
    }
    // Before anything loads CUPTI's profiler libraries: take the ones beside this libcupti,
    // and refuse a CUPTI that cannot work with this driver (it would crash inside CUPTI).
    let info = cupti::pair_profiler_libraries().map_err(MetricsError::from)?;
    let driver = driver::driver_version()?;
    if let Err(why) = cupti::profiler_compatibility(info.api_version, driver) {
        return Err(MetricsError::IncompatibleCupti {
            path: info.path.clone(),
            why,
        }
        .into());
    }
    let ctx = PrimaryContext::retain(device)?;
    let api = ProfilerApi::initialize().map_err(MetricsError::from)?;
    if let Some(why) = profiler::unsupported_reason(device).map_err(MetricsError::from)? {
        return Err(MetricsError::Unsupported { device, why }.into());
    }
    Ok((ctx, api))
}

/// One counter of the replayed dispatch.
#[derive(Debug, Clone, Serialize)]
pub struct MetricValue {
    pub name: String,
    pub value: f64,
    pub unit: String,
}

/// Counter values of the replayed dispatch.
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
}

/// The unit of a full metric name, from its base metric's dimension and its suffix.
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

impl Session<'_> {
    /// Replays the dispatch as many times as the metric set needs, each pass on restored
    /// memory, and evaluates the counters. `flush` empties L2 before each pass, as profilers
    /// do by default.
    pub fn collect_metrics(
        &mut self,
        req: &MetricRequest,
        flush: bool,
    ) -> Result<MetricsReport, PlayError> {
        let sweep = if flush {
            Some(self.new_l2_flush()?)
        } else {
            None
        };
        let mut config = req.config.clone();
        let needed = passes_needed(&mut config).map_err(MetricsError::from)?;
        let mut rp = RangeProfiler::enable(self.context()).map_err(MetricsError::from)?;
        // One automatic range per pass: the dispatch alone. The L2 sweep runs before the
        // profiler starts. (Running it inside the window as a range of its own was tried: it
        // leaves the kernel's output dirty in L2, and DRAM writes then read far below ncu's.)
        rp.configure(config, &req.cnames, 1)
            .map_err(MetricsError::from)?;
        let mut passes = 0usize;
        loop {
            self.restore_if_launched()?;
            if let Some(s) = &sweep {
                s.run(self.stream())?;
            }
            self.stream().synchronize()?;
            rp.start().map_err(MetricsError::from)?;
            let launched = self.launch();
            let stopped = rp.stop();
            launched?;
            let done = stopped.map_err(MetricsError::from)?;
            self.stream().synchronize()?;
            passes += 1;
            if done {
                break;
            }
            if passes >= MAX_PASSES.max(needed + 2) {
                return Err(MetricsError::NoCompletion(passes).into());
            }
        }
        rp.decode().map_err(MetricsError::from)?;
        let ranges = rp.ranges().map_err(MetricsError::from)?;
        if ranges == 0 {
            return Err(MetricsError::Dropped.into());
        }
        // The dispatch's range: the one named after the kernel, else the last one.
        let kernel = self.kernel_name().to_string();
        let range = (0..ranges)
            .find(|&i| {
                rp.range_name(i)
                    .is_ok_and(|n| n == kernel || n.ends_with(&kernel))
            })
            .unwrap_or(ranges - 1);
        let values = req
            .host
            .evaluate(rp.counter_data(), range, &req.cnames)
            .map_err(MetricsError::from)?;
        let metrics = req
            .names
            .iter()
            .zip(values)
            .map(|(name, value)| {
                let base = name.split('.').next().unwrap_or(name);
                let dim = req
                    .host
                    .properties(base)
                    .map(|p| p.dim_unit)
                    .unwrap_or_default();
                MetricValue {
                    unit: unit_of(name, &dim),
                    name: name.clone(),
                    value,
                }
            })
            .collect();
        Ok(MetricsReport {
            metrics,
            passes: passes as u32,
            cache: CacheState::flushed(flush),
            chip: req.chip.clone(),
            cupti: cupti::pair_profiler_libraries().ok().cloned(),
        })
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
pub fn list_metrics(device: i32) -> Result<(String, Vec<MetricInfo>), PlayError> {
    let (ctx, _api) = open_profiler(device)?;
    let chip = profiler::chip_name(device).map_err(MetricsError::from)?;
    let availability = profiler::counter_availability(ctx.ctx as _).map_err(MetricsError::from)?;
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
    use super::{unit_of, MetricsError};
    use kreplay_replay::cupti::{sys::CUptiResult, CuptiError};

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
