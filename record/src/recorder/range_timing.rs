//! The in-app time of a boundary range (`--nvtx-range`, `--profiler-range`). The captured
//! instance cannot be timed honestly (the recorder synchronises and snapshots between its
//! steps), so the capture is held back and the application's next instance of the range is
//! timed instead, undisturbed: a gate is armed on the stream of its first launch (so its
//! kernels queue behind it and run back to back, launch overhead excluded as for a single
//! dispatch), and opened at the instance's end, which then waits for it. Up to
//! `TIMED_INSTANCES` instances are timed; the capture is written after the last of them, or at
//! the process's exit, with their median, or the sum of its kernel steps' times where none
//! could be timed (and a note saying which).

use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{sys, AsStream, ForeignStream};

use super::locking::lock;
use super::state::Recorder;
use crate::capture::CaptureData;
use crate::launch::LaunchView;
use crate::range_timing::{waits_for_gpu, RangeTiming, Timed};

impl Recorder {
    /// A boundary range's capture is complete: held until its next instances are timed.
    pub(super) fn hold_for_timing(&self, data: CaptureData) {
        *lock(&self.range_timing) = RangeTiming::Held(Box::new(Timed::new(data)));
    }

    /// The next instance opened.
    pub(super) fn range_time_begin(&self) {
        let mut t = lock(&self.range_timing);
        if let RangeTiming::Held(timed) = std::mem::take(&mut *t) {
            *t = RangeTiming::Armed(timed);
        }
    }

    /// A launch's ENTER (before it is queued): the first of the timed instance arms the gate.
    pub(super) fn time_launch(&self, view: &LaunchView) {
        let mut t = lock(&self.range_timing);
        match std::mem::take(&mut *t) {
            RangeTiming::Armed(mut timed) => {
                // SAFETY: inside the launch callback that decoded the view.
                let stream = unsafe { view.foreign_stream() };
                let armed = GatedTimer::new().and_then(|mut timer| {
                    timer.arm(&stream)?;
                    Ok(timer)
                });
                *t = match armed {
                    Ok(timer) => RangeTiming::Running {
                        timed,
                        timer,
                        stream: stream.raw_stream() as usize,
                        disturbed: None,
                    },
                    Err(e) => {
                        timed.ended(Err(e.to_string()));
                        RangeTiming::Held(timed)
                    }
                };
            }
            RangeTiming::Running {
                timed,
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
                    timed,
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

    /// A timed instance closed: its time is read and, after the last one, the capture written.
    /// Reading it waits for the instance's work inside the application's pop (or
    /// `cuProfilerStop`): the application's results are unchanged, its pop returns later.
    pub(super) fn range_time_end(&self) {
        let mut t = lock(&self.range_timing);
        let timed = match std::mem::take(&mut *t) {
            RangeTiming::Running {
                mut timed,
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
                let outcome = match (ns, disturbed, gated) {
                    (Ok(ns), None, true) => Ok(ns),
                    (Ok(_), None, false) => Err("the device cannot gate a stream".into()),
                    (Ok(_), Some(why), _) | (Err(why), _, _) => Err(why),
                };
                timed.ended(outcome);
                timed
            }
            RangeTiming::Armed(mut timed) => {
                timed.ended(Err("it made no launch".into()));
                timed
            }
            RangeTiming::Held(timed) => timed,
            RangeTiming::Idle => return,
        };
        if timed.instances >= crate::range_timing::TIMED_INSTANCES {
            drop(t);
            return self.write_timed(timed);
        }
        *t = RangeTiming::Held(timed);
    }

    /// At the process's exit: a capture still held is written with what was timed. A gate
    /// still armed is left to the watchdog: the driver may be gone.
    pub(super) fn range_timing_at_exit(&self) {
        let taken = std::mem::take(&mut *lock(&self.range_timing));
        match taken {
            RangeTiming::Held(timed) | RangeTiming::Armed(timed) => self.write_timed(timed),
            RangeTiming::Running {
                mut timed, timer, ..
            } => {
                std::mem::forget(timer);
                timed.ended(Err("the process ended inside it".into()));
                self.write_timed(timed)
            }
            RangeTiming::Idle => {}
        }
    }

    fn write_timed(&self, timed: Box<Timed>) {
        let note = timed.note();
        let ns = timed.in_app_ns();
        let mut data = timed.data;
        if let (Some(range), Some(ns)) = (data.range.as_mut(), ns) {
            range.original_duration_ns = Some(ns);
        }
        data.notes.push(note);
        self.sink.write(data);
    }
}
