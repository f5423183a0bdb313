//! Everything that can stop a replay, in one place (the counters and the session both
//! return these; neither owns the other's errors).

use kreplay_cuda::cupti::{sys::CUptiResult, CuptiError};
use kreplay_cuda::vmm::MapError;
use kreplay_cuda::{CudaError, DriverUnavailable};
use kreplay_format::FormatError;

/// What can stop a replay.
#[derive(Debug, thiserror::Error)]
pub enum PlayError {
    #[error(transparent)]
    Driver(#[from] DriverUnavailable),
    #[error("{}", cuda_message(.0))]
    Cuda(CudaError),
    #[error("cannot map the captured memory: {0}")]
    Map(MapError),
    #[error("device addresses {start:#x}..{end:#x} are taken in this process (the driver offered {got:#x}) and the capture cannot be relocated: {why}")]
    CannotRelocate {
        start: u64,
        end: u64,
        got: u64,
        why: String,
    },
    #[error("--relocate: the capture cannot be moved to other addresses: {why}; replay it without --relocate")]
    RelocationRefused { why: String },
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    #[error("kernel {kernel} was not found in the module: {source}")]
    KernelNotFound { kernel: String, source: CudaError },
    #[error("the --module variant of {kernel} takes different parameters (offset, size): captured {captured:?}, variant {variant:?}")]
    VariantMismatch {
        kernel: String,
        captured: Vec<(u32, u32)>,
        variant: Vec<(u32, u32)>,
    },
    #[error("the capture's parameter layout of {kernel} (offset, size) is {captured:?} but the kernel's own is {actual:?}: the file is damaged or was edited; refusing to launch")]
    LayoutMismatch {
        kernel: String,
        captured: Vec<(u32, u32)>,
        actual: Vec<(u32, u32)>,
    },
    #[error("capture is damaged: {0}")]
    Format(FormatError),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error("this range capture cannot be replayed: {0}")]
    Range(String),
}

// Hand-written rather than `#[from]`: the message already holds the inner error, and a
// source would make `{:#}` chains print it twice.
impl From<CudaError> for PlayError {
    fn from(e: CudaError) -> Self {
        PlayError::Cuda(e)
    }
}

impl From<MapError> for PlayError {
    fn from(e: MapError) -> Self {
        PlayError::Map(e)
    }
}

impl From<FormatError> for PlayError {
    fn from(e: FormatError) -> Self {
        PlayError::Format(e)
    }
}

/// A driver error in words a user can act on. Faults of the replayed kernel are sticky: every
/// later call fails with the same code, so the first one is explained and the rest stay out.
fn cuda_message(e: &CudaError) -> String {
    if e.is_kernel_fault() {
        return format!(
            "the replayed kernel faulted ({}, reported by {}): it touched memory the capture \
             does not hold (memory reached through a path the recorder could not follow). \
             Re-record with `--memory all` to capture every live allocation",
            e.name, e.call
        );
    }
    format!("CUDA error: {e}")
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_cuda::sys::CUresult;
    use std::error::Error;

    fn err(code: CUresult, call: &'static str) -> CudaError {
        CudaError {
            call,
            code: code as u32,
            name: format!("{code:?}"),
        }
    }

    #[test]
    fn a_fault_is_explained_once() {
        let e = PlayError::from(err(
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            "cuEventSynchronize",
        ));
        let text = e.to_string();
        assert!(text.contains("faulted"), "{text}");
        assert!(text.contains("--memory all"), "{text}");
        assert!(!text.contains("  "), "{text}");
        assert_eq!(
            text.matches("CUDA_ERROR_ILLEGAL_ADDRESS").count(),
            1,
            "{text}"
        );
        // No source: a `{:#}` chain does not repeat the driver error.
        assert!(e.source().is_none());
        let other = PlayError::from(err(CUresult::CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc"));
        assert!(other
            .to_string()
            .starts_with("CUDA error: cuMemAlloc failed"));
        assert!(other.source().is_none());
        let f = PlayError::from(FormatError::Limit {
            what: "x",
            message: "y".into(),
        });
        assert!(f.source().is_none());
    }
}
