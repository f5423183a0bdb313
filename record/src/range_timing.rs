//! The state of a boundary range's in-app timing (see `recorder::range_timing`, which drives
//! it): the capture held back while the application's next instance of the range is timed,
//! and the pure decisions about that instance.

use kreplay_cuda::timing::GatedTimer;

use crate::capture::CaptureData;

/// Where the timing of the next instance stands.
#[derive(Default)]
pub enum RangeTiming {
    /// No capture is held.
    #[default]
    Idle,
    /// The capture is written; it waits for the next instance to open.
    Held(Box<CaptureData>),
    /// The next instance opened; its first launch arms the gate.
    Armed(Box<CaptureData>),
    /// Its launches queue behind the gate.
    Running {
        data: Box<CaptureData>,
        timer: GatedTimer,
        /// The application's stream (its handle value: a raw handle is not `Send`).
        stream: usize,
        /// A launch on another stream, or a call that waits for the GPU (the gate was
        /// opened early): the figure is not the range's GPU time.
        disturbed: Option<String>,
    },
}

/// Whether `function`, called inside the timed instance, must not find a gate armed: it waits
/// for the GPU (a synchronisation, a synchronous copy or fill, a free, a completion query the
/// application may poll, a device-to-host copy, which blocks on pageable memory) or is one we
/// cannot tell. Stream-ordered work (other async copies and fills, event records and waits)
/// and launches queue behind the gate as they would. `ignored`: the call is one a range
/// ignores (a getter or query): only the completion queries among them wait.
pub fn waits_for_gpu(function: &str, ignored: bool) -> bool {
    if ignored {
        return function.starts_with("cuStreamQuery") || function.starts_with("cuEventQuery");
    }
    let to_host = function.starts_with("cuMemcpyDtoH") || function.starts_with("cuMemcpyAsync");
    let queued = (function.contains("Async") && !to_host)
        || function.starts_with("cuEventRecord")
        || function.starts_with("cuStreamWaitEvent")
        || function.starts_with("cuLaunch");
    !queued
}

/// The note a capture carries about its in-app range time.
pub fn timing_note(ns: Option<u64>, disturbed: Option<&str>) -> String {
    match (ns, disturbed) {
        (Some(ns), None) => format!(
            "range in-app time {:.1} us: the next instance of the range, timed undisturbed (gated, launch overhead excluded)",
            ns as f64 / 1e3
        ),
        (_, Some(why)) => format!(
            "range in-app time: the sum of the kernel steps' times (the next instance could not be timed: {why})"
        ),
        (None, None) => "range in-app time: the sum of the kernel steps' times (the application made no next instance of the range)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ordered_calls_queue_behind_the_gate_and_waits_do_not() {
        for f in [
            "cuMemcpyHtoDAsync_v2",
            "cuMemcpyDtoDAsync_v2",
            "cuMemsetD32Async",
            "cuEventRecord",
            "cuEventRecordWithFlags",
            "cuStreamWaitEvent",
            "cuLaunchKernel",
        ] {
            assert!(!waits_for_gpu(f, false), "{f}");
        }
        for f in [
            "cuStreamSynchronize",
            "cuCtxSynchronize",
            "cuEventSynchronize",
            "cuMemcpyDtoH_v2",
            "cuMemcpyDtoHAsync_v2",
            "cuMemcpyAsync",
            "cuMemFree_v2",
            "cuMemAlloc_v2",
        ] {
            assert!(waits_for_gpu(f, false), "{f}");
        }
        // Of the calls a range ignores, the completion queries an application polls.
        assert!(waits_for_gpu("cuStreamQuery", true) && waits_for_gpu("cuEventQuery", true));
        assert!(
            !waits_for_gpu("cuCtxGetCurrent", true) && !waits_for_gpu("cuFuncGetAttribute", true)
        );
    }

    #[test]
    fn the_note_says_how_the_time_was_taken() {
        assert!(timing_note(Some(612_300), None).contains("612.3 us: the next instance"));
        let disturbed = timing_note(Some(1), Some("it called cuCtxSynchronize, which waits"));
        assert!(
            disturbed.contains("sum of the kernel steps") && disturbed.contains("cuCtxSynchronize")
        );
        assert!(timing_note(None, None).contains("no next instance"));
    }
}
