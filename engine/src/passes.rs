//! The player's timed passes: restore → (flush L2) → launch → time → (check), run by the one
//! pass loop (`tool::drive_from`) as many times as its tool (a fixed count, or `--tool`)
//! asks. `Replayer` owns what a pass needs (the kernel ready to launch, the restorer, a
//! stream) and nothing about where they came from; `TimedPasses` is how one of its passes
//! restores, launches and times. Counter passes are `counters::CounterRuns`.

use std::time::Instant;

use kreplay_cuda::cache::L2Flush;
use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{AsFunction, DeviceProps, Event, Stream};
use serde::Serialize;

use crate::arrays::ArraySync;
use crate::error::PlayError;
pub use crate::kernel::Kernel;
use crate::options::{CacheState, RunOptions, Verification};
use crate::pass_trace::{PassRecord, PassTracer};
use crate::restore::Restorer;
use crate::step_plan::step_medians;
use crate::steps::RangeSteps;
use crate::tool::{
    drive_from, DispatchView, LoopSummary, PassOutcome, PassRunner, PassTool, Start,
};

/// The L2 flush sweeps this many times the L2 size (at least `MIN_FLUSH_BYTES`).
const FLUSH_L2_MULTIPLE: u64 = 4;
const MIN_FLUSH_BYTES: u64 = 64 << 20;

/// A read-only L2 sweep sized for a device.
pub fn new_flush(props: &DeviceProps) -> Result<L2Flush, PlayError> {
    let bytes = (props.l2_bytes * FLUSH_L2_MULTIPLE).max(MIN_FLUSH_BYTES);
    Ok(L2Flush::new(bytes as usize, props.sm_count)?)
}

/// What the pass loop measured.
#[derive(Debug, Clone, Default)]
pub struct PassStats {
    pub timing: PassTiming,
    /// Every pass produced the same bytes in the write set (checked only when verifying).
    pub deterministic: bool,
    /// Passes whose output differed from the first pass's (1-based).
    pub divergent_passes: Vec<u32>,
    /// The tool asked to stop (from BEGIN or END) before it had all the passes it asked for.
    pub stopped_by_tool: bool,
    /// The loop ended at the dispatch's most passes while the tool wanted more.
    pub capped: bool,
    /// The tool asked for no pass (CONFIG returned 0): the dispatch ran once, as pass 0.
    pub skipped: bool,
    /// A range's per-step median times over the timed passes (with `per_step`; `None` for
    /// steps that are not timed); empty for one dispatch.
    pub step_medians: Vec<Option<u64>>,
    /// A range's device-to-host copy steps whose bytes differed from what the application
    /// received, in the verified pass (checked only when verifying).
    pub copy_mismatches: Vec<usize>,
    /// Where each timed pass's parts ran on the GPU (with `RunOptions::trace`; empty
    /// otherwise).
    pub trace: Vec<PassRecord>,
}

/// Timing of the passes (`play --json` carries these fields at its top level).
#[derive(Debug, Clone, Default, Serialize)]
pub struct PassTiming {
    pub passes: u32,
    pub warmup: u32,
    pub durations_ns: Vec<u64>,
    pub min_ns: u64,
    pub median_ns: u64,
    pub max_ns: u64,
    /// Restore copy time per pass (not inside `durations_ns`), median.
    pub restore_median_ns: u64,
    /// Kernel times exclude launch overhead (the stream was gated until the launch queued).
    pub gated_timing: bool,
    /// From opening to the first launch, in milliseconds.
    pub setup_ms: f64,
}

fn median(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

/// A dispatch that can be run again and again on restored memory.
pub struct Replayer<F: AsFunction> {
    // Field order is drop order: the kernel and copies before the stream they ran on.
    kernel: Kernel<F>,
    /// A range capture's steps (`kernel` among them, as `StepAction::Primary`), a pass runs
    /// and times them all; `None` for one dispatch.
    range: Option<RangeSteps<F>>,
    restorer: Restorer,
    /// Arrays the kernel writes, synchronised with their shadows around each pass.
    arrays: ArraySync,
    /// Made on the first pass that flushes.
    flush: Option<L2Flush>,
    props: DeviceProps,
    stream: Stream,
    /// The kernel ran at least once, so the write set must be restored before the next pass.
    launched: bool,
    opened: Instant,
    /// From opening to the first launch, in milliseconds (once it was made).
    setup_ms: Option<f64>,
    /// A range's device-to-host copy steps that received other bytes in the verified pass.
    copy_mismatches: Vec<usize>,
}

impl<F: AsFunction> Replayer<F> {
    /// `restorer` must have been snapshotted with the input in place; `opened` is when the
    /// caller began preparing (for the setup time).
    ///
    /// # Safety
    /// `kernel`, launched with its arguments any number of times while the `Replayer` lives,
    /// touches only memory it may (`kreplay_cuda::launch`'s contract): `launch` queues it
    /// without further checks. A capture's kernel over the memory the replay placed for it,
    /// or the application's own dispatch replayed in place, qualifies.
    pub unsafe fn new(
        kernel: Kernel<F>,
        restorer: Restorer,
        stream: Stream,
        props: DeviceProps,
        opened: Instant,
    ) -> Replayer<F> {
        Replayer {
            kernel,
            range: None,
            restorer,
            arrays: ArraySync::default(),
            flush: None,
            props,
            stream,
            launched: false,
            opened,
            setup_ms: None,
            copy_mismatches: Vec::new(),
        }
    }

    /// Arrays the kernel writes (see `arrays`).
    pub fn with_arrays(mut self, arrays: ArraySync) -> Replayer<F> {
        self.arrays = arrays;
        self
    }

    /// A range's steps (see `range`); `self`'s stream is their pass stream.
    pub fn with_range(mut self, range: RangeSteps<F>) -> Replayer<F> {
        self.range = Some(range);
        self
    }

    /// Whether this replays a range's steps rather than one dispatch.
    pub fn is_range(&self) -> bool {
        self.range.is_some()
    }

    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Whether the kernel ran on this memory already (a later run must restore first).
    pub fn launched(&self) -> bool {
        self.launched
    }

    /// Restores the write set and puts the restored texels into written arrays.
    pub(crate) fn restore(&self) -> Result<(), PlayError> {
        self.restorer.restore(&self.stream)?;
        self.arrays.push(&self.stream)?;
        Ok(())
    }

    pub fn restorer(&self) -> &Restorer {
        &self.restorer
    }

    /// Notes the setup time, when the next launch is the first (called before anything of
    /// the launch, its timer included, is queued).
    fn note_setup(&mut self) {
        if !self.launched {
            self.setup_ms = Some(self.opened.elapsed().as_secs_f64() * 1e3);
        }
    }

    pub fn launch(&mut self) -> Result<(), PlayError> {
        self.launch_with(&mut || {})
    }

    /// Queues the dispatch, or a range's whole pass (`before_host_wait` is called before
    /// the host blocks on one of its host-wait steps).
    fn launch_with(&mut self, before_host_wait: &mut dyn FnMut()) -> Result<(), PlayError> {
        match &mut self.range {
            None => {
                let k = &mut self.kernel;
                // SAFETY: what the kernel touches was vouched for at `Replayer::new`.
                unsafe { kreplay_cuda::launch(&k.function, &k.config, &mut k.args, &self.stream)? };
            }
            Some(range) => range.run_pass(&mut self.kernel, &self.stream, before_host_wait)?,
        }
        self.launched = true;
        Ok(())
    }

    /// Restores the write set and waits for it: the captured input is in place.
    pub fn restore_and_wait(&mut self) -> Result<(), PlayError> {
        self.restore()?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Runs a range's step `i` alone and waits for every range stream (after the steps
    /// before it, for a faithful state); nothing for one dispatch.
    pub fn run_step(&mut self, i: usize) -> Result<(), PlayError> {
        if let Some(range) = &mut self.range {
            self.launched = true;
            range.run_step_and_wait(i, &mut self.kernel, &self.stream)?;
        }
        Ok(())
    }

    /// A range replayed once more step by step: restore, then each step alone, every stream
    /// waited for after it, `differs(i)` asked after step `i`; the first step it says
    /// differs (`None`: none did, or this is one dispatch).
    pub fn first_divergent_step(
        &mut self,
        differs: &mut dyn FnMut(usize, &Stream) -> Result<bool, PlayError>,
    ) -> Result<Option<usize>, PlayError> {
        let Some(steps) = self.range.as_ref().map(|r| r.len()) else {
            return Ok(None);
        };
        self.restore_and_wait()?;
        for i in 0..steps {
            self.run_step(i)?;
            if differs(i, &self.stream)? {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// Empties L2 (queued on the stream) when `cache` asks for it.
    pub fn prepare_cache(&mut self, cache: CacheState) -> Result<(), PlayError> {
        if cache == CacheState::Keep {
            return Ok(());
        }
        if self.flush.is_none() {
            self.flush = Some(new_flush(&self.props)?);
        }
        if let Some(f) = &self.flush {
            f.run(&self.stream)?;
        }
        Ok(())
    }

    /// After the verified pass completed: which of a range's device-to-host copies received
    /// other bytes than the application did.
    fn note_copies(&mut self) {
        if let Some(r) = &self.range {
            self.copy_mismatches = r.copy_mismatches();
        }
    }

    /// Copies written arrays back into their shadows (where verification and --save-output
    /// read them) and waits.
    fn pull_arrays(&mut self) -> Result<(), PlayError> {
        self.arrays.pull(&self.stream)?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Runs warm-up and timed passes, as many as `tool` asks (`tool::FixedPasses` for
    /// `--passes`); `view` is the dispatch as the tool sees it. With verification on,
    /// `check_reference` is called once with the output of a pass that ran on the captured
    /// input (the first timed pass, or an extra one after warm-up), and every pass's write set
    /// is compared with the first's.
    pub fn run(
        &mut self,
        opts: &RunOptions,
        tool: &mut dyn PassTool,
        view: &DispatchView,
        check_reference: &mut dyn FnMut() -> Result<(), PlayError>,
    ) -> Result<PassStats, PlayError> {
        let verify = opts.verification == Verification::Check;
        let start = Start {
            warmup: opts.warmup,
            ran_before: self.launched,
        };
        if let Some(r) = &mut self.range {
            r.time_steps(opts.per_step);
        }
        let mut runner = TimedPasses::new(self, opts, &mut *check_reference)?;
        let summary = drive_from(tool, view, &mut runner, start)?;
        let TimedPasses {
            restores_ns,
            timer,
            step_ns,
            tracer,
            ..
        } = runner;
        self.finish_timed(verify, opts.warmup, check_reference)?;
        let timed = self.range.as_ref().map(|r| r.timed()).unwrap_or_default();
        let timing = timing_of(
            &summary,
            opts.warmup,
            &restores_ns,
            timer.is_gated(),
            self.setup_ms.unwrap_or(0.0),
        );
        let divergent = divergent_passes(&summary.outcomes);
        Ok(PassStats {
            timing,
            deterministic: divergent.is_empty(),
            divergent_passes: divergent,
            stopped_by_tool: summary.stopped_by_tool,
            capped: summary.capped,
            skipped: summary.skipped,
            step_medians: step_medians(&step_ns, &timed),
            copy_mismatches: self.copy_mismatches.clone(),
            trace: tracer.map(PassTracer::into_records).unwrap_or_default(),
        })
    }

    /// After the timed passes: the reference check when warm-up passes ran first (restore and
    /// run once more), and the shadows of written arrays filled with the last pass's output
    /// (for --save-output; a verified run pulled them already).
    fn finish_timed(
        &mut self,
        verify: bool,
        warmup: u32,
        check_reference: &mut dyn FnMut() -> Result<(), PlayError>,
    ) -> Result<(), PlayError> {
        if verify && warmup > 0 {
            self.restore()?;
            self.launch()?;
            self.pull_arrays()?;
            check_reference()?;
            self.note_copies();
        }
        if !verify && !self.arrays.is_empty() {
            self.pull_arrays()?;
        }
        Ok(())
    }
}

/// The statistics of the timed passes of `summary`.
fn timing_of(
    summary: &LoopSummary,
    warmup: u32,
    restores_ns: &[u64],
    gated_timing: bool,
    setup_ms: f64,
) -> PassTiming {
    let durations: Vec<u64> = summary.outcomes.iter().map(|o| o.duration_ns).collect();
    let mut sorted = durations.clone();
    sorted.sort_unstable();
    PassTiming {
        passes: summary.passes,
        warmup,
        min_ns: sorted.first().copied().unwrap_or(0),
        median_ns: median(&durations),
        max_ns: sorted.last().copied().unwrap_or(0),
        durations_ns: durations,
        restore_median_ns: median(restores_ns),
        gated_timing,
        setup_ms,
    }
}

/// The passes (1-based) whose output differed from the first pass's.
fn divergent_passes(outcomes: &[PassOutcome]) -> Vec<u32> {
    outcomes
        .iter()
        .filter(|o| o.matches_first == Some(false))
        .map(|o| o.index + 1)
        .collect()
}

/// How a timed pass of a `Replayer` restores (timed by events, outside the measured window),
/// launches (behind a timing gate) and checks its output.
struct TimedPasses<'r, 'c, F: AsFunction> {
    replayer: &'r mut Replayer<F>,
    cache: CacheState,
    verify: bool,
    /// The reference check follows pass 0 (no warm-up ran before it).
    check_after_first: bool,
    check_reference: &'c mut dyn FnMut() -> Result<(), PlayError>,
    /// The first pass's write-set digest, which every later pass's is compared with.
    reference: Option<Vec<u32>>,
    timer: GatedTimer,
    restore_start: Event,
    restore_stop: Event,
    restores_ns: Vec<u64>,
    /// A range's per-step times, per step, one per timed pass (with `per_step`).
    step_ns: Vec<Vec<u64>>,
    /// With `RunOptions::trace`.
    tracer: Option<PassTracer>,
}

impl<'r, 'c, F: AsFunction> TimedPasses<'r, 'c, F> {
    fn new(
        replayer: &'r mut Replayer<F>,
        opts: &RunOptions,
        check_reference: &'c mut dyn FnMut() -> Result<(), PlayError>,
    ) -> Result<Self, PlayError> {
        let verify = opts.verification == Verification::Check;
        Ok(TimedPasses {
            replayer,
            cache: opts.cache,
            verify,
            check_after_first: verify && opts.warmup == 0,
            check_reference,
            reference: None,
            timer: GatedTimer::new()?,
            restore_start: Event::new()?,
            restore_stop: Event::new()?,
            restores_ns: Vec::new(),
            step_ns: Vec::new(),
            tracer: match opts.trace {
                true => Some(PassTracer::new()?),
                false => None,
            },
        })
    }

    /// After pass `pass` completed: the reference check (pass 0) and whether its write set
    /// holds what the first pass's did (`None`: not verifying).
    fn check(&mut self, pass: u32) -> Result<Option<bool>, PlayError> {
        if !self.verify {
            return Ok(None);
        }
        if !self.replayer.arrays.is_empty() {
            self.replayer.pull_arrays()?;
        }
        if pass == 0 && self.check_after_first {
            (self.check_reference)()?;
            self.replayer.note_copies();
        }
        let digest = self.replayer.restorer.digest()?;
        Ok(Some(match &self.reference {
            None => {
                self.reference = Some(digest);
                true
            }
            Some(r) => *r == digest,
        }))
    }
}

impl<F: AsFunction> TimedPasses<'_, '_, F> {
    /// Adds the pass's per-step times (a range timed step by step; nothing otherwise).
    fn note_step_times(&mut self) -> Result<(), PlayError> {
        let Some(range) = &self.replayer.range else {
            return Ok(());
        };
        let times = range.step_times()?;
        self.step_ns.resize(times.len(), Vec::new());
        for (all, t) in self.step_ns.iter_mut().zip(times) {
            all.extend(t);
        }
        Ok(())
    }

    /// Keeps where pass `pass`'s parts ran (when tracing), after its timed window completed.
    fn note_trace(&mut self, pass: u32, timed_ns: u64) -> Result<(), PlayError> {
        let Some(tracer) = &mut self.tracer else {
            return Ok(());
        };
        let steps = match &self.replayer.range {
            Some(range) => range.step_starts()?,
            None => Vec::new(),
        };
        tracer.finished(pass, self.timer.start_event(), timed_ns, &steps)
    }
}

impl<F: AsFunction> PassRunner for TimedPasses<'_, '_, F> {
    type Error = PlayError;

    fn restore(&mut self) -> Result<(), PlayError> {
        let r = &mut *self.replayer;
        if let Some(t) = &mut self.tracer {
            t.begin(&r.stream)?;
        }
        self.restore_start.record(&r.stream)?;
        r.restore()?;
        self.restore_stop.record(&r.stream)?;
        self.restore_stop.synchronize()?;
        let ns = self.restore_stop.elapsed_ns_since(&self.restore_start)?;
        self.restores_ns.push(ns);
        if let Some(t) = &mut self.tracer {
            t.restored(&self.restore_start, ns)?;
        }
        Ok(())
    }

    fn prepare(&mut self, _pass: u32) -> Result<(), PlayError> {
        let flushes = self.cache == CacheState::Flush;
        let (Some(t), true) = (&mut self.tracer, flushes) else {
            return self.replayer.prepare_cache(self.cache);
        };
        t.mark_flush(&self.replayer.stream, true)?;
        self.replayer.prepare_cache(self.cache)?;
        t.mark_flush(&self.replayer.stream, false)
    }

    fn run(&mut self, pass: u32) -> Result<PassOutcome, PlayError> {
        let r = &mut *self.replayer;
        r.note_setup();
        if let Some(t) = &mut self.tracer {
            t.begin(&r.stream)?;
        }
        self.timer.arm(&r.stream)?;
        let timer = &mut self.timer;
        let launched_ok = r.launch_with(&mut || timer.release());
        self.timer.finish(&r.stream)?;
        launched_ok?;
        let duration_ns = self.timer.elapsed_ns()?;
        self.note_step_times()?;
        self.note_trace(pass, duration_ns)?;
        let matches_first = self.check(pass)?;
        Ok(PassOutcome {
            index: pass,
            duration_ns,
            matches_first,
        })
    }

    /// Untimed, unflushed, restored without timing the copy.
    fn warm_up(&mut self, restore_first: bool) -> Result<(), PlayError> {
        let r = &mut *self.replayer;
        if restore_first {
            r.restore()?;
        }
        r.note_setup();
        r.launch()?;
        r.stream.synchronize()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_of_the_sorted_values() {
        assert_eq!(median(&[5, 1, 3]), 3);
        assert_eq!(median(&[4, 1]), 4);
        assert_eq!(median(&[]), 0);
    }

    fn outcome(index: u32, duration_ns: u64, matches_first: Option<bool>) -> PassOutcome {
        PassOutcome {
            index,
            duration_ns,
            matches_first,
        }
    }

    fn summary(outcomes: Vec<PassOutcome>) -> LoopSummary {
        LoopSummary {
            passes: outcomes.len() as u32,
            skipped: false,
            stopped_by_tool: true,
            capped: false,
            deterministic: None,
            outcomes,
        }
    }

    // Catches: the pass count taken from the options instead of the loop (a tool's choice
    // lost), statistics over unsorted durations, or the durations reordered in the report.
    #[test]
    fn timing_is_of_the_passes_the_loop_ran_in_their_order() {
        let s = summary(vec![
            outcome(0, 300, None),
            outcome(1, 100, None),
            outcome(2, 200, None),
            outcome(3, 900, None),
        ]);
        let t = timing_of(&s, 2, &[40, 10, 30], true, 12.5);
        assert_eq!((t.passes, t.warmup), (4, 2));
        assert_eq!(t.durations_ns, vec![300, 100, 200, 900]);
        assert_eq!((t.min_ns, t.median_ns, t.max_ns), (100, 300, 900));
        assert_eq!(t.restore_median_ns, 30);
        assert!(t.gated_timing);
        assert_eq!(t.setup_ms, 12.5);
        // No restore (a single pass): zero, not a panic.
        let one = timing_of(&summary(vec![outcome(0, 5, None)]), 0, &[], false, 0.0);
        assert_eq!(
            (one.min_ns, one.median_ns, one.restore_median_ns),
            (5, 5, 0)
        );
    }

    // Catches: divergent passes numbered from 0 (the report's are 1-based, "differ from pass
    // 1"), or unchecked passes counted as divergent.
    #[test]
    fn divergent_passes_are_those_checked_and_different_counted_from_one() {
        let o = [
            outcome(0, 1, Some(true)),
            outcome(1, 1, Some(false)),
            outcome(2, 1, None),
            outcome(3, 1, Some(false)),
        ];
        assert_eq!(divergent_passes(&o), vec![2, 4]);
        assert_eq!(divergent_passes(&o[..1]), Vec::<u32>::new());
    }
}
