//! Where each timed pass's parts ran on the GPU (`play --trace`): spans on one time axis per
//! run, read from the CUDA events the pass loop records anyway (the timed window's, the
//! restore's, a range's per-step timers) plus two around the L2 flush. The axis: nanoseconds
//! of GPU time since the run's origin event, an event recorded on the pass stream before the
//! first timed pass's restore, flush or gate (`PassClock`); each span's start is
//! `cuEventElapsedTime(origin, its start event)` and its length the figure the pass loop
//! reports for it (the timed window is exactly the duration the statistics are over). Host
//! clocks are never used.

use kreplay_cuda::{AsStream, Event};

use crate::error::PlayError;

/// A stretch of GPU time, in ns from the run's origin event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuSpan {
    pub start_ns: u64,
    pub dur_ns: u64,
}

/// A range step's timer span in one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepSpan {
    /// 0-based index of the step in the range.
    pub step: usize,
    pub span: GpuSpan,
}

/// What one timed pass ran where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassRecord {
    /// 0-based pass index, as the pass loop counts.
    pub pass: u32,
    /// The restore of the write set before the pass (none before a first pass on fresh
    /// memory).
    pub restore: Option<GpuSpan>,
    /// The L2 flush before the pass (with `--cache flush`).
    pub flush: Option<GpuSpan>,
    /// The timed window (the dispatch, or a range's whole pass).
    pub timed: GpuSpan,
    /// A range's timed steps (with `--per-step`); empty otherwise.
    pub steps: Vec<StepSpan>,
}

/// The run's origin event and the reads of other events against it.
pub struct PassClock {
    origin: Event,
    started: bool,
}

impl PassClock {
    pub fn new() -> Result<PassClock, PlayError> {
        Ok(PassClock {
            origin: Event::new()?,
            started: false,
        })
    }

    /// Records the origin on `stream` the first time it is called; later calls do nothing.
    pub fn start(&mut self, stream: &impl AsStream) -> Result<(), PlayError> {
        if !self.started {
            self.origin.record(stream)?;
            self.started = true;
        }
        Ok(())
    }

    /// Where `event` (recorded after the origin, and complete) lies on the axis.
    pub fn at(&self, event: &Event) -> Result<u64, PlayError> {
        Ok(event.elapsed_ns_since(&self.origin)?)
    }

    /// The span from `start` (complete) lasting `dur_ns`.
    pub fn span(&self, start: &Event, dur_ns: u64) -> Result<GpuSpan, PlayError> {
        Ok(GpuSpan {
            start_ns: self.at(start)?,
            dur_ns,
        })
    }
}

/// What the pass loop keeps for a trace while it runs: the clock, two events around the L2
/// flush (recorded on the pass stream only when tracing, outside the timed window), and the
/// records of the passes so far.
pub struct PassTracer {
    clock: PassClock,
    flush_start: Event,
    flush_stop: Event,
    /// The flush events hold this pass's flush (recorded since the last pass ended).
    flushed: bool,
    /// The restore before the pass being prepared.
    restore: Option<GpuSpan>,
    records: Vec<PassRecord>,
}

impl PassTracer {
    pub fn new() -> Result<PassTracer, PlayError> {
        Ok(PassTracer {
            clock: PassClock::new()?,
            flush_start: Event::new()?,
            flush_stop: Event::new()?,
            flushed: false,
            restore: None,
            records: Vec::new(),
        })
    }

    /// Before anything of a timed pass is queued on `stream` (the first call sets the origin).
    pub fn begin(&mut self, stream: &impl AsStream) -> Result<(), PlayError> {
        self.clock.start(stream)
    }

    /// The restore before the next pass began at `start` (complete) and took `dur_ns`.
    pub fn restored(&mut self, start: &Event, dur_ns: u64) -> Result<(), PlayError> {
        self.restore = Some(self.clock.span(start, dur_ns)?);
        Ok(())
    }

    /// Around the L2 flush queued on `stream`: `before` true ahead of it, false after it.
    pub fn mark_flush(&mut self, stream: &impl AsStream, before: bool) -> Result<(), PlayError> {
        if before {
            self.begin(stream)?;
            self.flush_start.record(stream)?;
        } else {
            self.flush_stop.record(stream)?;
            self.flushed = true;
        }
        Ok(())
    }

    /// Pass `pass` completed: its timed window began at `timed_start` and took `timed_ns`;
    /// `steps` are its timed steps (index, start event, time).
    pub fn finished(
        &mut self,
        pass: u32,
        timed_start: &Event,
        timed_ns: u64,
        steps: &[(usize, &Event, u64)],
    ) -> Result<(), PlayError> {
        let flush = match std::mem::take(&mut self.flushed) {
            true => {
                let dur = self.flush_stop.elapsed_ns_since(&self.flush_start)?;
                Some(self.clock.span(&self.flush_start, dur)?)
            }
            false => None,
        };
        let steps = steps
            .iter()
            .map(|&(step, start, ns)| {
                Ok(StepSpan {
                    step,
                    span: self.clock.span(start, ns)?,
                })
            })
            .collect::<Result<Vec<_>, PlayError>>()?;
        self.records.push(PassRecord {
            pass,
            restore: self.restore.take(),
            flush,
            timed: self.clock.span(timed_start, timed_ns)?,
            steps,
        });
        Ok(())
    }

    /// The passes recorded, in order.
    pub fn into_records(self) -> Vec<PassRecord> {
        self.records
    }
}
