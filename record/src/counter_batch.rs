//! Counters of profiled dispatches (`kreplay profile --metrics`), collected in batches.
//!
//! The CUPTI range profiler costs a fixed price per collection, not per kernel: on the H200
//! with CUPTI 13.0 and ten metrics (three passes), starting the passes of one collection took
//! about 37 ms and stopping them about 14 ms, whether they held 1 or 64 kernels (enabling a
//! fresh profiler costs 170 ms more). Counting each dispatch on its own at its launch therefore
//! costs some 50 ms per dispatch, however small the kernel.
//!
//! So a dispatch's counter passes wait: at its launch's EXIT, after its own launch (pass 0) and
//! any timed passes, and with the application's output put back, the dispatch joins its
//! context's batch, keeping the pristine copy of everything it reaches. When the batch is
//! full, or before anything it reaches could go away (a free, an unmap, a module unload, the
//! context's end, the process's exit), one collection replays the whole batch: the memory the
//! batch reaches is set aside as the application has it now; then in every pass, for each
//! dispatch in turn, its reachable memory is put back to its pristine bytes, the L2 emptied,
//! and its kernel launched; last, the application's memory is put back. Each kernel is one
//! automatic range, bounded by the hardware at the kernel's own start and end, so the restores
//! and sweeps between kernels stay out of its counters.
//!
//! What this assumes, as record and play do: a kernel's work depends only on the memory it
//! reaches (which the pristine copy holds) and its arguments.

use kreplay_cuda::profiler::RangeProfiler;
use kreplay_cuda::{
    copy_dtod_async, ctx_synchronize, DeviceBuffer, ForeignFunction, KernelArgs, LaunchConfig,
    Stream,
};
use kreplay_engine::counters::{
    assign_ranges, range_is_kernel, CounterOutcome, CounterPasses, MetricRequest,
};
use kreplay_engine::tool::{drive, DispatchView, PassOutcome, PassRunner};
use kreplay_protocol::report::{MetricValue, ProfileRow};

use crate::device_resources::flush_l2;
use crate::error::RecordError;
use crate::trace::trace_with;

/// Most dispatches one collection replays.
pub const MAX_BATCH: usize = 64;
/// Most bytes of pristine copies a batch keeps on the device (also capped at an eighth of the
/// free device memory when the batch starts): the application may want that memory back.
pub const MAX_BATCH_BYTES: u64 = 2 << 30;
/// Most kernels one L2 flush launches (a sweep, then a discard where the GPU has it).
const SWEEP_KERNELS: usize = 2;
/// More counter passes than any metric set needs.
const MAX_COUNTER_PASSES: u32 = 256;

/// A profiled dispatch waiting for its counter passes.
pub struct Queued {
    /// Its report row, complete but for the counters.
    pub row: ProfileRow,
    pub view: DispatchView,
    pub function: ForeignFunction,
    pub config: LaunchConfig,
    pub args: KernelArgs,
    /// (address, bytes, pristine copy) of every region it reaches.
    pub regions: Vec<(u64, u64, DeviceBuffer)>,
}

impl Queued {
    /// The bytes of its pristine copy.
    pub fn bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.1).sum()
    }

    /// Its row, saying why it has no counters (its pristine copy is freed).
    pub fn without_counters(self, why: &str) -> ProfileRow {
        let mut row = self.row;
        row.metrics_error = Some(why.to_string());
        row
    }
}

/// The dispatches of one context waiting for their counters.
#[derive(Default)]
pub struct CounterBatch {
    queued: Vec<Queued>,
    bytes: u64,
    /// The byte budget of the current batch (set when its first dispatch joins).
    budget: u64,
}

// SAFETY: the driver handles inside (function, buffers) are usable from any thread with their
// context current; the recorder keeps a batch behind a lock and collects it with its context
// pushed.
unsafe impl Send for CounterBatch {}

/// What to do with a dispatch that wants to join a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// It joins; the batch is not full yet.
    Join,
    /// It joins and fills the batch: collect now.
    JoinThenCollect,
    /// The batch must be collected first (the dispatch would overflow its bytes).
    CollectFirst,
}

/// Whether a dispatch of `bytes` joins a batch of `count` dispatches holding `held` bytes
/// against `budget` and a most of `max` dispatches (a pure decision, tested on the CPU). A
/// dispatch alone over the budget still joins an empty batch: its copy exists already, and it
/// is collected at once.
pub fn admit(count: usize, held: u64, bytes: u64, budget: u64, max: usize) -> Admission {
    if count > 0 && held.saturating_add(bytes) > budget {
        return Admission::CollectFirst;
    }
    if count + 1 >= max || held.saturating_add(bytes) >= budget {
        Admission::JoinThenCollect
    } else {
        Admission::Join
    }
}

/// `KREPLAY_PROFILE_BATCH`: most dispatches per collection, 1 to `MAX_BATCH` (default); 1
/// counts each dispatch at its own launch's EXIT (slower; for comparing the two).
fn batch_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var("KREPLAY_PROFILE_BATCH")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(MAX_BATCH, |n| n.clamp(1, MAX_BATCH))
    })
}

/// Sorted `(address, bytes)` intervals covering every one given, those that overlap merged.
/// Intervals that merely touch stay apart: they may be two allocations, and one copy cannot
/// span two allocations.
pub fn merge_intervals(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.retain(|r| r.1 > 0);
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (a, n) in v {
        let end = a.saturating_add(n);
        match out.last_mut() {
            Some((b, m)) if a < b.saturating_add(*m) => {
                *m = end.max(b.saturating_add(*m)) - *b;
            }
            _ => out.push((a, n)),
        }
    }
    out
}

impl CounterBatch {
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// The admission of a dispatch reaching `bytes` (see `admit`).
    pub fn admission(&mut self, bytes: u64) -> Admission {
        if self.queued.is_empty() {
            let free = kreplay_cuda::memory_info().map_or(0, |(free, _)| free);
            self.budget = MAX_BATCH_BYTES.min(free / 8);
        }
        admit(
            self.queued.len(),
            self.bytes,
            bytes,
            self.budget,
            batch_limit(),
        )
    }

    /// Empties the batch without counting: each row says why.
    pub fn drain_without_counters(&mut self, why: &str) -> Vec<ProfileRow> {
        self.bytes = 0;
        std::mem::take(&mut self.queued)
            .into_iter()
            .map(|q| q.without_counters(why))
            .collect()
    }

    pub fn push(&mut self, q: Queued) {
        self.bytes += q.bytes();
        self.queued.push(q);
    }

    /// Whether any queued dispatch reaches memory in `[addr, addr + len)`.
    pub fn reaches(&self, addr: u64, len: u64) -> bool {
        let end = addr.saturating_add(len.max(1));
        self.queued.iter().any(|q| {
            q.regions
                .iter()
                .any(|&(a, n, _)| a < end && addr < a.saturating_add(n))
        })
    }

    /// The pristine bytes the batch holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Replays every queued dispatch through the counter passes and returns their rows (each
    /// with its counters, or with why there are none). Call with the batch's context current and
    /// the recorder's own launches marked as such. The application's memory is as before.
    pub fn collect(
        &mut self,
        counters: &mut ContextCounters,
        cache_flush: bool,
    ) -> Vec<ProfileRow> {
        let mut queued = std::mem::take(&mut self.queued);
        self.bytes = 0;
        if queued.is_empty() {
            return Vec::new();
        }
        let n = queued.len();
        trace_with(|| format!("counter batch of {n} dispatches started"));
        let outcome = collect_batch(&mut queued, counters, cache_flush);
        trace_with(|| match &outcome {
            Ok((_, passes)) => {
                format!("counter batch of {n} dispatches counted in {passes} passes")
            }
            Err(why) => format!("counter batch of {n} dispatches failed ({why})"),
        });
        let mut rows: Vec<ProfileRow> = Vec::with_capacity(queued.len());
        match outcome {
            Ok((values, passes)) => {
                for (q, v) in queued.into_iter().zip(values) {
                    let mut row = q.row;
                    match v {
                        Ok(metrics) => {
                            row.metrics = metrics;
                            row.counter_passes = passes;
                        }
                        Err(why) => row.metrics_error = Some(why),
                    }
                    rows.push(row);
                }
            }
            Err(why) => {
                for q in queued {
                    let mut row = q.row;
                    row.metrics_error = Some(why.clone());
                    rows.push(row);
                }
            }
        }
        rows
    }
}

/// A context's metric request and its range profiler, enabled once and configured again for
/// each collection (see `RangeProfiler::reconfigure`).
pub struct ContextCounters {
    pub request: MetricRequest,
    profiler: Option<RangeProfiler>,
}

impl ContextCounters {
    pub fn new(request: MetricRequest) -> ContextCounters {
        ContextCounters {
            request,
            profiler: None,
        }
    }

    /// The profiler, ready for a new collection of up to `MAX_BATCH` dispatches and the sweeps
    /// between them (up to `SWEEP_KERNELS` kernels each).
    fn ready(&mut self) -> Result<&mut RangeProfiler, String> {
        let reused = match self.profiler.as_mut() {
            Some(p) => p.reconfigure().is_ok(),
            None => false,
        };
        if !reused {
            // Disable the old one before enabling afresh (one per context).
            self.profiler = None;
            let p = self
                .request
                .range_profiler((SWEEP_KERNELS + 1) * MAX_BATCH)
                .map_err(|e| e.to_string())?;
            self.profiler = Some(p);
        }
        self.profiler
            .as_mut()
            .ok_or_else(|| "no range profiler".to_string())
    }
}

// SAFETY: the CUPTI host object and profiler state inside are plain heap objects CUPTI lets
// any thread use (with the context current); the recorder touches them only under its lock.
unsafe impl Send for ContextCounters {}

/// One counter pass over the whole batch: each dispatch's reachable memory put back to its
/// pristine bytes, the L2 emptied, its kernel launched, all on one stream, one wait.
struct BatchPasses<'a> {
    queued: &'a mut [Queued],
    stream: &'a Stream,
    cache_flush: bool,
    /// Where each dispatch's kernel stood among the kernels of the last pass (the sweeps are
    /// kernels too, and the range profiler makes a range of each).
    positions: Vec<usize>,
    /// The kernels of the last pass.
    kernels: usize,
    /// Every pass launched its kernels in the same order (a sweep that failed in one pass
    /// shifts the positions).
    same_every_pass: bool,
}

impl PassRunner for BatchPasses<'_> {
    type Error = RecordError;

    /// Nothing: each dispatch's memory is put back inside the pass, before its kernel.
    fn restore(&mut self) -> Result<(), RecordError> {
        Ok(())
    }

    fn run(&mut self, pass: u32) -> Result<PassOutcome, RecordError> {
        let mut positions = Vec::with_capacity(self.queued.len());
        let mut kernels = 0usize;
        for q in self.queued.iter_mut() {
            for (addr, size, pristine) in &q.regions {
                copy_dtod_async(*addr, pristine.ptr(), *size as usize, self.stream)
                    .map_err(RecordError::cuda("restoring a dispatch for its counters"))?;
            }
            if self.cache_flush {
                // Without a sweep (device memory short) the pass runs with what L2 holds.
                kernels += flush_l2(self.stream).unwrap_or(0) as usize;
            }
            kreplay_cuda::launch(&q.function, &q.config, &mut q.args, self.stream)
                .map_err(RecordError::cuda("launching a counter pass"))?;
            positions.push(kernels);
            kernels += 1;
        }
        if pass > 0 && (positions != self.positions || kernels != self.kernels) {
            self.same_every_pass = false;
        }
        self.positions = positions;
        self.kernels = kernels;
        self.stream
            .synchronize()
            .map_err(RecordError::KernelFailed)?;
        Ok(PassOutcome {
            index: pass,
            duration_ns: 0,
            matches_first: None,
        })
    }
}

type BatchValues = (Vec<Result<Vec<MetricValue>, String>>, u32);

/// What the passes of a batch launched: the kernels of each pass, and where each dispatch's
/// stood among them (`None`: not the same in every pass).
struct Launched {
    passes: u32,
    kernels: usize,
    positions: Option<Vec<usize>>,
}

/// Which range holds each dispatch's counters: by position when the profiler returned one
/// range per kernel launched (exact, whatever the ranges are named), else by name.
/// `names` holds each dispatch's kernel name, mangled and demangled.
fn ranges_of(ranges: &[String], launched: &Launched, names: &[(&str, &str)]) -> Vec<Option<usize>> {
    match &launched.positions {
        Some(p) if ranges.len() == launched.kernels => p.iter().map(|&i| Some(i)).collect(),
        _ => assign_ranges(ranges, names.len(), |r, k| {
            range_is_kernel(r, names[k].0) || range_is_kernel(r, names[k].1)
        }),
    }
}

fn collect_batch(
    queued: &mut [Queued],
    counters: &mut ContextCounters,
    cache_flush: bool,
) -> Result<BatchValues, String> {
    ctx_synchronize().map_err(|e| format!("synchronising before the counter passes: {e}"))?;
    let stream = Stream::new().map_err(|e| format!("creating the counter stream: {e}"))?;
    // The application's memory as it is now, put back whatever the passes do.
    let union = merge_intervals(
        queued
            .iter()
            .flat_map(|q| q.regions.iter().map(|&(a, n, _)| (a, n)))
            .collect(),
    );
    let mut live = Vec::with_capacity(union.len());
    for &(addr, len) in &union {
        let buf = DeviceBuffer::new(len as usize).map_err(|_| {
            format!(
                "device memory is short for setting the application's memory aside ({}) during the counter passes",
                kreplay_format::units::bytes(union.iter().map(|u| u.1).sum())
            )
        })?;
        copy_dtod_async(buf.ptr(), addr, len as usize, &stream)
            .map_err(|e| format!("setting the application's memory aside: {e}"))?;
        live.push((addr, len, buf));
    }
    stream
        .synchronize()
        .map_err(|e| format!("setting the application's memory aside: {e}"))?;
    let passes = run_passes(queued, counters, &stream, cache_flush);
    // Whatever happened, the application's memory is put back.
    let mut put_back = Ok(());
    for (addr, len, buf) in &live {
        if let Err(e) = copy_dtod_async(*addr, buf.ptr(), *len as usize, &stream) {
            put_back = Err(e);
        }
    }
    let synced = stream.synchronize();
    put_back.and(synced).map_err(|e| {
        format!("putting the application's memory back after the counter passes: {e}")
    })?;
    let launched = passes?;
    let ranges = counters
        .request
        .decode(counters.profiler.as_mut().ok_or("no range profiler")?)
        .map_err(|e| e.to_string())?;
    let names: Vec<(&str, &str)> = queued
        .iter()
        .map(|q| (q.view.kernel(), q.view.demangled()))
        .collect();
    let assigned = ranges_of(&ranges, &launched, &names);
    let rp = counters.profiler.as_ref().ok_or("no range profiler")?;
    let values = assigned
        .into_iter()
        .map(|a| match a {
            Some(range) => counters
                .request
                .values_of_range(rp, range)
                .map(|v| {
                    v.into_iter()
                        .map(|m| MetricValue {
                            name: m.name,
                            value: m.value,
                            unit: m.unit,
                        })
                        .collect()
                })
                .map_err(|e| e.to_string()),
            None => Err(format!(
                "its kernel's range is not among the {} the range profiler returned for the {} kernels of each pass (first: {:?})",
                ranges.len(),
                launched.kernels,
                ranges.iter().take(3).collect::<Vec<_>>()
            )),
        })
        .collect();
    Ok((values, launched.passes))
}

/// The counter passes of the batch.
fn run_passes(
    queued: &mut [Queued],
    counters: &mut ContextCounters,
    stream: &Stream,
    cache_flush: bool,
) -> Result<Launched, String> {
    let Some(first) = queued.first() else {
        return Ok(Launched {
            passes: 0,
            kernels: 0,
            positions: None,
        });
    };
    let mut view = first.view.clone();
    view.max_passes = MAX_COUNTER_PASSES;
    let profiler = counters.ready()?;
    let mut tool = CounterPasses::new(profiler);
    let mut runner = BatchPasses {
        queued,
        stream,
        cache_flush,
        positions: Vec::new(),
        kernels: 0,
        same_every_pass: true,
    };
    let summary = drive(&mut tool, &view, &mut runner).map_err(|e| e.to_string())?;
    match tool.outcome() {
        CounterOutcome::Complete => {}
        CounterOutcome::Failed(why) => return Err(why.to_string()),
        CounterOutcome::Incomplete => {
            return Err(format!(
                "the range profiler did not finish after {} passes",
                summary.passes
            ))
        }
    }
    Ok(Launched {
        passes: summary.passes,
        kernels: runner.kernels,
        positions: runner.same_every_pass.then_some(runner.positions),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_merge_where_they_overlap_but_not_where_they_touch() {
        assert_eq!(
            merge_intervals(vec![
                (100, 50),
                (0, 10),
                (120, 100),
                (10, 5),
                (300, 0),
                (400, 1)
            ]),
            vec![(0, 10), (10, 5), (100, 120), (400, 1)]
        );
        // The same region twice.
        assert_eq!(merge_intervals(vec![(7, 3), (7, 3)]), vec![(7, 3)]);
        // One inside another.
        assert_eq!(merge_intervals(vec![(0, 100), (10, 5)]), vec![(0, 100)]);
        assert_eq!(merge_intervals(Vec::new()), Vec::new());
    }

    #[test]
    fn ranges_are_taken_by_position_when_there_is_one_per_kernel_else_by_name() {
        let r = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let names = [("_Z4gemmv", "gemm()"), ("_Z3addv", "add()")];
        // Sweep, sweep, gemm, sweep, sweep, add: one range per kernel, named oddly.
        let launched = Launched {
            passes: 3,
            kernels: 6,
            positions: Some(vec![2, 5]),
        };
        let six = r(&["0", "1", "2", "3", "4", "5"]);
        assert_eq!(ranges_of(&six, &launched, &names), vec![Some(2), Some(5)]);
        // A range missing: positions cannot be trusted; names decide.
        let named = r(&["sweep", "_Z4gemmv", "sweep", "add()"]);
        assert_eq!(ranges_of(&named, &launched, &names), vec![Some(1), Some(3)]);
        // Positions that moved between passes are not trusted either.
        let moved = Launched {
            positions: None,
            ..launched
        };
        assert_eq!(ranges_of(&six, &moved, &names), vec![None, None]);
    }

    #[test]
    fn a_batch_is_collected_when_full_or_before_it_would_overflow() {
        let gib = 1u64 << 30;
        assert_eq!(admit(0, 0, gib, 2 * gib, MAX_BATCH), Admission::Join);
        assert_eq!(
            admit(1, gib, gib, 2 * gib, MAX_BATCH),
            Admission::JoinThenCollect
        );
        assert_eq!(
            admit(1, gib, gib + 1, 2 * gib, MAX_BATCH),
            Admission::CollectFirst
        );
        // Alone over the budget: it joins and is collected at once.
        assert_eq!(
            admit(0, 0, 3 * gib, 2 * gib, MAX_BATCH),
            Admission::JoinThenCollect
        );
        // The count fills it too.
        assert_eq!(admit(MAX_BATCH - 2, 0, 1, gib, MAX_BATCH), Admission::Join);
        assert_eq!(
            admit(MAX_BATCH - 1, 0, 1, gib, MAX_BATCH),
            Admission::JoinThenCollect
        );
        // A smaller most (KREPLAY_PROFILE_BATCH=1: each dispatch on its own).
        assert_eq!(admit(0, 0, 1, gib, 1), Admission::JoinThenCollect);
        // No budget at all (free memory unknown): every dispatch is counted on its own.
        assert_eq!(admit(0, 0, 1, 0, MAX_BATCH), Admission::JoinThenCollect);
    }
}
