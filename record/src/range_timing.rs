//! The state of a boundary range's in-app timing (see `recorder::range_timing`, which drives
//! it): the capture held back while the application's next instances of the range are timed
//! (up to `TIMED_INSTANCES`; one instance of a few microseconds of kernels varied by 4 % from
//! run to run on the H200, so the median of several is the figure), and the pure decisions
//! about them.

use kreplay_cuda::timing::GatedTimer;

use crate::capture::CaptureData;

/// How many instances after the captured one are timed, at most.
pub const TIMED_INSTANCES: u32 = 5;

/// A capture waiting for its in-app time, and the instances timed so far.
pub struct Timed {
    pub data: CaptureData,
    /// Undisturbed instances' times.
    pub times: Vec<u64>,
    /// Instances that ended (timed or disturbed).
    pub instances: u32,
    /// Why the latest disturbed instance could not be timed.
    pub disturbed: Option<String>,
}

impl Timed {
    pub fn new(data: CaptureData) -> Timed {
        Timed {
            data,
            times: Vec::new(),
            instances: 0,
            disturbed: None,
        }
    }

    /// One more instance ended, with its time or why it has none; true once enough are in.
    pub fn ended(&mut self, outcome: Result<u64, String>) -> bool {
        self.instances += 1;
        match outcome {
            Ok(ns) => self.times.push(ns),
            Err(why) => self.disturbed = Some(why),
        }
        self.instances >= TIMED_INSTANCES
    }

    /// The in-app time: the median of the undisturbed instances.
    pub fn in_app_ns(&self) -> Option<u64> {
        median_ns(&self.times)
    }

    /// The note the capture carries about it.
    pub fn note(&self) -> String {
        match self.in_app_ns() {
            Some(ns) => timing_note(Some(ns), self.times.len(), None),
            None => timing_note(None, 0, self.disturbed.as_deref()),
        }
    }
}

/// Where the timing of the next instances stands.
#[derive(Default)]
pub enum RangeTiming {
    /// No capture is held.
    #[default]
    Idle,
    /// The capture waits for the next instance to open.
    Held(Box<Timed>),
    /// The next instance opened; its first launch arms the gate.
    Armed(Box<Timed>),
    /// Its launches queue behind the gate.
    Running {
        timed: Box<Timed>,
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

/// The median of `times` (the upper of the middle two), none of none.
pub fn median_ns(times: &[u64]) -> Option<u64> {
    let mut t = times.to_vec();
    t.sort_unstable();
    t.get(t.len() / 2).copied()
}

/// The note a capture carries about its in-app range time: `ns` over `instances` undisturbed
/// instances, or why there is none.
pub fn timing_note(ns: Option<u64>, instances: usize, disturbed: Option<&str>) -> String {
    match (ns, disturbed) {
        (Some(ns), _) => format!(
            "range in-app time {:.1} us: the median of the next {instances} instance(s) of the range, timed undisturbed (gated, launch overhead excluded)",
            ns as f64 / 1e3
        ),
        (None, Some(why)) => format!(
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
    fn the_in_app_time_is_the_median_of_the_timed_instances() {
        assert_eq!(median_ns(&[]), None);
        assert_eq!(median_ns(&[104_400]), Some(104_400));
        assert_eq!(median_ns(&[104_400, 99_000, 100_100]), Some(100_100));
        assert_eq!(median_ns(&[3, 1, 4, 2]), Some(3));
    }

    #[test]
    fn the_note_says_how_the_time_was_taken() {
        assert!(timing_note(Some(612_300), 3, None).contains("612.3 us: the median of the next 3"));
        let disturbed = timing_note(None, 0, Some("it called cuCtxSynchronize, which waits"));
        assert!(
            disturbed.contains("sum of the kernel steps") && disturbed.contains("cuCtxSynchronize")
        );
        assert!(timing_note(None, 0, None).contains("no next instance"));
    }
}
