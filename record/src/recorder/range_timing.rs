//! The in-app time of a boundary range (`--nvtx-range`, `--profiler-range`). The captured
//! instance cannot be timed honestly (the recorder synchronises and snapshots between its
//! steps), so the capture is held back and the application's next instance of the range is
//! timed instead, undisturbed: a gate is armed on the stream of its first launch (so its
//! kernels queue behind it and run back to back, launch overhead excluded as for a single
//! dispatch), and opened at the instance's end, which then waits for it. The capture is
//! written then, with that time, or at the process's exit with the sum of its kernel steps'
//! times (and a note saying which).

use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{sys, AsStream, ForeignStream};

use super::locking::lock;
use super::state::Recorder;
use crate::capture::CaptureData;
use crate::launch::LaunchView;
use crate::range_timing::{timing_note, waits_for_gpu, RangeTiming};

impl Recorder {
    /// A boundary range's capture is complete: held until its next instance is timed.
    pub(super) fn hold_for_timing(&self, data: CaptureData) {
        *lock(&self.range_timing) = RangeTiming::Held(Box::new(data));
    }

    /// The next instance opened.
    pub(super) fn range_time_begin(&self) {
        let mut t = lock(&self.range_timing);
        if let RangeTiming::Held(data) = std::mem::take(&mut *t) {
            *t = RangeTiming::Armed(data);
        }
    }

    /// A launch's ENTER (before it is queued): the first of the timed instance arms the gate.
    pub(super) fn time_launch(&self, view: &LaunchView) {
        let mut t = lock(&self.range_timing);
        match std::mem::take(&mut *t) {
            RangeTiming::Armed(data) => {
                // SAFETY: inside the launch callback that decoded the view.
                let stream = unsafe { view.foreign_stream() };
                let mut timer = match GatedTimer::new() {
                    Ok(timer) => timer,
                    Err(e) => {
                        drop(t);
                        return self.write_timed(data, None, Some(e.to_string()));
                    }
                };
                if let Err(e) = timer.arm(&stream) {
                    drop(t);
                    return self.write_timed(data, None, Some(e.to_string()));
                }
                *t = RangeTiming::Running {
                    data,
                    timer,
                    stream: stream.raw_stream() as usize,
                    disturbed: None,
                };
            }
            RangeTiming::Running {
                data,
                timer,
                stream,
                mut disturbed,
            } => {
                // SAFETY: as above.
                let this = unsafe { view.foreign_stream() };
                if this.raw_stream() as usize != stream && disturbed.is_none() {
                    disturbed = Some("it launched on a second stream".into());
                }
                *t = RangeTiming::Running {
                    data,
                    timer,
                    stream,
                    disturbed,
                };
            }
            other => *t = other,
        }
    }

    /// A driver call of the application inside the timed instance: one that waits for the GPU
    /// opens the gate first (it would wait behind it until the watchdog).
    pub(super) fn time_call(&self, function: &str, ignored: bool) {
        if !waits_for_gpu(function, ignored) {
            return;
        }
        let mut t = lock(&self.range_timing);
        if let RangeTiming::Running {
            timer, disturbed, ..
        } = &mut *t
        {
            timer.release();
            disturbed
                .get_or_insert_with(|| format!("it called {function}, which waits for the GPU"));
        }
    }

    /// The timed instance closed: the time is read and the capture written. Reading it waits
    /// for the instance's work inside the application's pop (or `cuProfilerStop`), once per
    /// process: the application's results are unchanged, its pop returns later.
    pub(super) fn range_time_end(&self) {
        let taken = std::mem::take(&mut *lock(&self.range_timing));
        match taken {
            RangeTiming::Running {
                data,
                mut timer,
                stream,
                disturbed,
            } => {
                // SAFETY: the application's stream the instance's first launch was queued on;
                // the instance is closing, so the application still uses it.
                let stream = unsafe { ForeignStream::from_raw(stream as sys::CUstream) };
                let ns = timer
                    .finish(&stream)
                    .and_then(|()| timer.elapsed_ns())
                    .map_err(|e| e.to_string());
                let gated = timer.is_gated();
                drop(timer);
                match (ns, disturbed, gated) {
                    (Ok(ns), None, true) => self.write_timed(data, Some(ns), None),
                    (Ok(_), None, false) => {
                        self.write_timed(data, None, Some("the device cannot gate a stream".into()))
                    }
                    (Ok(_), Some(why), _) => self.write_timed(data, None, Some(why)),
                    (Err(e), _, _) => self.write_timed(data, None, Some(e)),
                }
            }
            RangeTiming::Armed(data) => {
                self.write_timed(data, None, Some("it made no launch".into()))
            }
            RangeTiming::Held(data) => self.write_timed(data, None, None),
            RangeTiming::Idle => {}
        }
    }

    /// At the process's exit: a capture still held is written with the steps' time. A gate
    /// still armed is left to the watchdog: the driver may be gone.
    pub(super) fn range_timing_at_exit(&self) {
        let taken = std::mem::take(&mut *lock(&self.range_timing));
        match taken {
            RangeTiming::Held(data) | RangeTiming::Armed(data) => {
                self.write_timed(data, None, None)
            }
            RangeTiming::Running { data, timer, .. } => {
                std::mem::forget(timer);
                self.write_timed(data, None, Some("the process ended inside it".into()))
            }
            RangeTiming::Idle => {}
        }
    }

    fn write_timed(&self, mut data: Box<CaptureData>, ns: Option<u64>, disturbed: Option<String>) {
        if let (Some(range), Some(ns)) = (data.range.as_mut(), ns) {
            range.original_duration_ns = Some(ns);
        }
        data.notes.push(timing_note(ns, disturbed.as_deref()));
        self.sink.write(*data);
    }
}
