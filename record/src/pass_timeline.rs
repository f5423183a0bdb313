//! `profile --trace`: each profiled dispatch's timed passes placed on its context's GPU time
//! axis, for the trace the CLI writes.
//!
//! The axis of a context is GPU time since its origin, an event recorded on the GPU before the
//! context's first traced dispatch (`device_resources::TraceOrigin`). A dispatch measures its
//! own passes against an anchor event of its own, recorded at ENTER before anything of its
//! passes was queued, and the anchor is placed on the axis against the previous dispatch's
//! anchor: `cuEventElapsedTime` is a float of milliseconds, so every interval read is short
//! (within a dispatch, or between two neighbouring dispatches) and keeps its resolution of
//! about half a microsecond however long the application ran. Every length is the figure the
//! report gives (the pass timer's, the restore's events); no host clock places anything.
//!
//! The trace never costs the profile: a failure of the clock (an event that cannot be made,
//! recorded or read) is kept as the dispatch's `timeline_error`, and its row is as without
//! `--trace`.

use kreplay_cuda::{AsStream, Event};
use kreplay_protocol::report::{PassTimeline, TimedPass};

use crate::device_resources::{ensure_trace_origin, with_trace_origin};

/// One dispatch's passes on its anchor's axis, while they run.
pub(crate) struct DispatchClock {
    anchor: Event,
    flush: (Event, Event),
    /// The flush events hold the flush before the next pass.
    flushed: bool,
    passes: Vec<TimedPass>,
    /// The first failure; nothing more is read after it.
    failed: Option<String>,
}

fn read(r: kreplay_cuda::CuResult<u64>) -> Result<u64, String> {
    r.map_err(|e| format!("reading the trace's events: {e}"))
}

impl DispatchClock {
    /// The anchor, recorded on `stream` (the context's origin first, on its first traced
    /// dispatch). Call before anything of the dispatch's passes is queued; `app` (the
    /// application's stream) is made to wait for the anchor, so pass 0 starts after it.
    pub(crate) fn start(
        stream: &impl AsStream,
        app: &impl AsStream,
    ) -> Result<DispatchClock, String> {
        let event = || Event::new().map_err(|e| format!("creating the trace's events: {e}"));
        ensure_trace_origin(stream)?;
        let anchor = event()?;
        anchor
            .record(stream)
            .map_err(|e| format!("recording the trace's anchor: {e}"))?;
        kreplay_cuda::step_ops::wait_event(app, &anchor)
            .map_err(|e| format!("ordering pass 0 after the trace's anchor: {e}"))?;
        Ok(DispatchClock {
            anchor,
            flush: (event()?, event()?),
            flushed: false,
            passes: Vec::new(),
            failed: None,
        })
    }

    fn keep(&mut self, r: Result<(), String>) {
        if let (Err(e), None) = (r, &self.failed) {
            self.failed = Some(e);
        }
    }

    /// Ahead of the L2 flush before a pass, queued on `stream`.
    pub(crate) fn before_flush(&mut self, stream: &impl AsStream) {
        let r = self.flush.0.record(stream);
        self.keep(r.map_err(|e| format!("timing the L2 flush: {e}")));
    }

    /// After it: `ran` says whether a flush was queued (the sweep may be missing).
    pub(crate) fn after_flush(&mut self, stream: &impl AsStream, ran: bool) {
        if !ran {
            return;
        }
        let r = self.flush.1.record(stream);
        self.flushed = r.is_ok();
        self.keep(r.map_err(|e| format!("timing the L2 flush: {e}")));
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
    ) {
        let flushed = std::mem::take(&mut self.flushed);
        if self.failed.is_some() {
            return;
        }
        let r = (|| {
            let at = |e: &Event| read(e.elapsed_ns_since(&self.anchor));
            let flush = match flushed {
                true => {
                    let dur = read(self.flush.1.elapsed_ns_since(&self.flush.0))?;
                    Some((at(&self.flush.0)?, dur))
                }
                false => None,
            };
            let restore = match restore {
                Some((e, dur)) => Some((at(e)?, dur)),
                None => None,
            };
            Ok(TimedPass {
                pass,
                variant,
                start_ns: at(start)?,
                dur_ns,
                restore,
                flush,
            })
        })();
        match r {
            Ok(p) => self.passes.push(p),
            Err(e) => self.keep(Err(e)),
        }
    }

    /// Only the first `n` passes stay (the later ones were not reported: a variant whose
    /// passes failed leaves the row with the application's launch alone).
    pub(crate) fn truncate(&mut self, n: usize) {
        self.passes.truncate(n);
    }

    /// The passes on the context's axis, or why there are none (call with the dispatch's
    /// context current, after its passes completed).
    pub(crate) fn into_timeline(self, app_stream: u64) -> Result<PassTimeline, String> {
        let DispatchClock {
            anchor,
            passes,
            failed,
            ..
        } = self;
        if let Some(e) = failed {
            return Err(e);
        }
        let (context, device, origin_unix_ns, anchor_ns) = with_trace_origin(|o| {
            let at = o.place(anchor)?;
            Ok((o.index, o.device, o.unix_ns, at))
        })?;
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
