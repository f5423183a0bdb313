//! `profile --trace`: each profiled dispatch's timed passes placed on its context's GPU time
//! axis, for the trace the CLI writes.
//!
//! The axis of a context is GPU time since its origin, an event recorded on the GPU before the
//! context's first traced dispatch (`device_resources::with_trace_origin`). A dispatch measures
//! its own passes against an anchor event of its own, recorded at ENTER before anything of
//! its passes was queued: `cuEventElapsedTime` is a float of milliseconds, so the spans of
//! one dispatch, read against an anchor microseconds away, stay exact to its resolution
//! (about half a microsecond) however long the application ran, and only the anchor's place
//! on the context's axis is read across the whole run. Every length is the figure the report
//! gives (the pass timer's, the restore's events); no host clock places anything.

use kreplay_cuda::{AsStream, Event};
use kreplay_protocol::report::{PassTimeline, TimedPass};

use crate::device_resources::{ensure_trace_origin, with_trace_origin};
use crate::error::RecordError;

/// One dispatch's passes on its anchor's axis, while they run.
pub(crate) struct DispatchClock {
    anchor: Event,
    flush: (Event, Event),
    /// The flush events hold the flush before the next pass.
    flushed: bool,
    passes: Vec<TimedPass>,
}

fn cuda(during: &'static str) -> impl Fn(kreplay_cuda::CudaError) -> RecordError + Copy {
    RecordError::cuda(during)
}

impl DispatchClock {
    /// The anchor, recorded on `stream` (the context's origin first, on its first traced
    /// dispatch). Call before anything of the dispatch's passes is queued.
    pub(crate) fn start(stream: &impl AsStream) -> Result<DispatchClock, RecordError> {
        ensure_trace_origin(stream).map_err(RecordError::Config)?;
        let event = || Event::new().map_err(cuda("creating the trace events"));
        let anchor = event()?;
        anchor
            .record(stream)
            .map_err(cuda("recording the trace anchor"))?;
        Ok(DispatchClock {
            anchor,
            flush: (event()?, event()?),
            flushed: false,
            passes: Vec::new(),
        })
    }

    /// Around the L2 flush before a pass, queued on `stream`: `before` ahead of it.
    pub(crate) fn mark_flush(
        &mut self,
        stream: &impl AsStream,
        before: bool,
    ) -> Result<(), RecordError> {
        let (e, during) = match before {
            true => (&self.flush.0, "timing the L2 flush"),
            false => (&self.flush.1, "timing the L2 flush"),
        };
        e.record(stream).map_err(cuda(during))?;
        self.flushed |= !before;
        Ok(())
    }

    fn at(&self, e: &Event) -> Result<u64, RecordError> {
        e.elapsed_ns_since(&self.anchor)
            .map_err(cuda("reading the trace events"))
    }

    /// Pass `pass` (complete) began at `start` and took `dur_ns`; `restore`: the restore
    /// before it began at its event and took its figure. Takes the flush marked since the
    /// last pass.
    pub(crate) fn pass(
        &mut self,
        pass: u32,
        variant: bool,
        (start, dur_ns): (&Event, u64),
        restore: Option<(&Event, u64)>,
    ) -> Result<(), RecordError> {
        let flush = match std::mem::take(&mut self.flushed) {
            true => {
                let dur = self
                    .flush
                    .1
                    .elapsed_ns_since(&self.flush.0)
                    .map_err(cuda("reading the trace events"))?;
                Some((self.at(&self.flush.0)?, dur))
            }
            false => None,
        };
        let restore = match restore {
            Some((e, dur)) => Some((self.at(e)?, dur)),
            None => None,
        };
        self.passes.push(TimedPass {
            pass,
            variant,
            start_ns: self.at(start)?,
            dur_ns,
            restore,
            flush,
        });
        Ok(())
    }

    /// The passes on the context's axis (call with the dispatch's context current, after
    /// its passes completed).
    pub(crate) fn into_timeline(self, app_stream: u64) -> Result<PassTimeline, RecordError> {
        let DispatchClock { anchor, passes, .. } = self;
        let (context, device, origin_unix_ns, anchor_ns) = with_trace_origin(|o| {
            let at = anchor
                .elapsed_ns_since(&o.event)
                .map_err(|e| e.to_string())?;
            Ok((o.index, o.device, o.unix_ns, at))
        })
        .map_err(RecordError::Config)?;
        Ok(PassTimeline {
            context,
            device,
            app_stream,
            origin_unix_ns,
            passes: passes.into_iter().map(|p| shifted(p, anchor_ns)).collect(),
        })
    }
}

/// A pass measured from an anchor, moved onto the axis the anchor lies `anchor_ns` along.
fn shifted(p: TimedPass, anchor_ns: u64) -> TimedPass {
    let on_axis = |(s, d): (u64, u64)| (s.saturating_add(anchor_ns), d);
    TimedPass {
        start_ns: p.start_ns.saturating_add(anchor_ns),
        restore: p.restore.map(on_axis),
        flush: p.flush.map(on_axis),
        ..p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: a dispatch's spans left on its anchor's axis (every dispatch would start at
    // 0 and overlap the others), or the restore and flush not moved with the pass.
    #[test]
    fn a_pass_moves_onto_the_context_axis_with_its_restore_and_flush() {
        let p = TimedPass {
            pass: 2,
            variant: true,
            start_ns: 5_000,
            dur_ns: 700,
            restore: Some((1_000, 300)),
            flush: Some((2_000, 900)),
        };
        let s = shifted(p, 1_000_000);
        assert_eq!(s.start_ns, 1_005_000);
        assert_eq!(s.dur_ns, 700);
        assert_eq!(s.restore, Some((1_001_000, 300)));
        assert_eq!(s.flush, Some((1_002_000, 900)));
        assert_eq!((s.pass, s.variant), (2, true));
    }
}
