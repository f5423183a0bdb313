//! In-process kernel replay (`kreplay profile`, issue 12): a matching dispatch runs as many
//! times as the tool asks, where it happens; the application's own launch is the first pass.
//!
//! At the launch callback's ENTER (the application is stalled, its context synchronised):
//! everything the dispatch can reach is copied aside to device scratch (the pristine copy), the
//! tool is asked for its passes (CONFIG) and told pass 0 begins, the L2 is emptied
//! (`--cache flush`) and the application's stream is gated for timing, as a capture does.
//! At EXIT, once the application's kernel completed: the GPU compares the pristine copy with
//! memory (`kreplay_chunk_scan`); the chunks that changed are the write set, and the
//! application's output there is kept aside. The further passes run on kreplay's own stream,
//! each after the write set was put back from the pristine copy, each timed behind a gate, each
//! output compared with the application's (determinism). Last, the application's output is put
//! back, and any other chunk a pass changed gets its pristine bytes: the application goes on
//! with its own launch's result, bit for bit as in a plain run.
//!
//! Counters (`--metrics`) are not collected here but later, for many dispatches in one range
//! profiler collection (`counter_batch`): the dispatch leaves with its pristine copy.
//!
//! The passes run at EXIT, not at ENTER, because launching the application's kernel from the
//! callback of its own launch, before that launch went through, can stall inside the driver
//! (a kernel loaded lazily on its first launch, say).
//!
//! Not replayed in place yet, and said so in the dispatch's row: dispatches that reach CUDA
//! arrays (textures, surfaces), the device heap, or more memory than device scratch can hold;
//! kernel nodes of CUDA graphs (the graph issue).

use kreplay_cuda::chunks::ChunkFlags;
use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{
    copy_dtod_async, copy_dtoh, ctx_synchronize, AsStream, DeviceBuffer, Event, ForeignFunction,
    ForeignStream, KernelArgs, LaunchConfig, Stream,
};
use kreplay_engine::plan::{launch_config, LaunchPlan};
use kreplay_engine::tool::{DispatchView, PassLoop, PassOutcome, PassRunner, PassTool};
use kreplay_engine::write_set::Evidence;
use kreplay_format::{MemoryKind, DEFAULT_CHUNK_SIZE};
use kreplay_protocol::report::ProfileRow;

use crate::capture::{device_copy, dispatch_of, reach};
use crate::counter_batch::Queued;
use crate::device_resources::{flush_l2, with_chunk_kernels};
use crate::error::RecordError;
use crate::footprint::{Footprint, Reachable, RegionSpan};
use crate::launch::LaunchView;
use crate::readback::{pack, PackedRun};
use crate::trace::{trace, trace_with};

/// kreplay's own timing as a tool (the engine's, shared with the player).
pub use kreplay_engine::tool::FixedPasses;

/// A dispatch about to run, as the launch callback sees it.
pub struct ProfileInput<'a> {
    pub view: &'a LaunchView,
    pub function: ForeignFunction,
    pub args: Vec<u8>,
    pub layout: Vec<(u32, u32)>,
    pub kernel_name: String,
    pub short_name: String,
    pub module_objects: &'a [(String, u64)],
    pub allocations: Vec<(u64, u64, MemoryKind)>,
    pub match_index: u64,
    pub launch_index: u64,
    pub cache_flush: bool,
    pub max_passes: u32,
}

/// One region reachable by the dispatch, and its pristine copy on the device.
struct Saved {
    addr: u64,
    size: u64,
    pristine: DeviceBuffer,
    /// The chunks the first pass changed (the whole region where the GPU cannot compare it:
    /// an address that is not 16-byte aligned).
    write_set: Vec<PackedRun>,
    /// The first pass's output of the write set, packed.
    first_output: Option<DeviceBuffer>,
}

/// Which chunks of `len` bytes at `live` differ from `pristine` (or everything, where the
/// GPU cannot compare), packed end to end.
fn changed_runs(pristine: u64, live: u64, len: u64, stream: &Stream) -> Vec<PackedRun> {
    let cs = DEFAULT_CHUNK_SIZE;
    let scan = with_chunk_kernels(|k| k.scan(pristine, Some(live), len, cs, stream));
    let evidence = match &scan {
        Ok(ChunkFlags { changed, .. }) => Evidence::Changed(changed),
        Err(_) => Evidence::Unknown,
    };
    let span = RegionSpan {
        base: live,
        size: len,
        chunk: cs,
    };
    pack(&Reachable.written(span, evidence)).0
}

/// The GPU side of the pass loop, in the application's process.
struct InPlace<'a> {
    function: &'a ForeignFunction,
    config: &'a LaunchConfig,
    args: &'a mut KernelArgs,
    stream: &'a Stream,
    timer: GatedTimer,
    cache_flush: bool,
    saved: &'a mut [Saved],
    restores_ns: Vec<u64>,
    /// Wall time of each extra pass beyond its kernel's run, in ns.
    overheads_ns: Vec<u64>,
    /// When the current extra pass began (its restore).
    pass_began: Option<std::time::Instant>,
    /// Each timed pass's output check (planned once the write set is known).
    check: Option<OutputCheck>,
    /// Bracket the restore copies, read after the pass's one wait.
    restore_events: (Event, Event),
    restore_queued: bool,
}

/// The output check of each timed pass, planned once after the first: one GPU scan per
/// write-set run (the first pass's output against memory), all queued into one flags buffer
/// and read back after the pass's one wait. Runs the GPU cannot compare (addresses not
/// 16-byte aligned: small globals) are compared on the host.
struct OutputCheck {
    /// (first pass's output, live memory, bytes, chunks).
    gpu: Vec<(u64, u64, u64, usize)>,
    host: Vec<(u64, u64, u64)>,
    flags: Option<DeviceBuffer>,
    readback: Vec<u8>,
}

impl OutputCheck {
    fn plan(saved: &[Saved]) -> Result<OutputCheck, RecordError> {
        let cs = DEFAULT_CHUNK_SIZE;
        let (mut gpu, mut host) = (Vec::new(), Vec::new());
        for s in saved {
            let Some(first) = &s.first_output else {
                continue;
            };
            let mut at = 0;
            for r in &s.write_set {
                let (a, b) = (first.ptr() + at, s.addr + r.offset);
                match kreplay_cuda::chunks::chunk_count(&[a, b], r.len, cs) {
                    Ok(n) => gpu.push((a, b, r.len, n)),
                    Err(_) => host.push((a, b, r.len)),
                }
                at += r.len;
            }
        }
        let total: usize = gpu.iter().map(|g| g.3 * 8).sum();
        let flags = if total > 0 {
            Some(DeviceBuffer::new(total).map_err(|_| RecordError::NoPostScratch(total as u64))?)
        } else {
            None
        };
        Ok(OutputCheck {
            gpu,
            host,
            flags,
            readback: vec![0u8; total],
        })
    }

    /// Queues the GPU scans behind the pass on `stream`.
    fn queue(&self, stream: &Stream) -> Result<(), RecordError> {
        let Some(flags) = &self.flags else {
            return Ok(());
        };
        let cs = DEFAULT_CHUNK_SIZE;
        with_chunk_kernels(|k| {
            let mut off = 0u64;
            for &(a, b, len, _) in &self.gpu {
                let n = k.scan_queued(a, b, len, cs, flags.ptr() + off, stream)?;
                off += n as u64 * 8;
            }
            Ok(())
        })
        .map_err(|e| RecordError::Config(format!("comparing a pass's output: {e}")))
    }

    /// After the wait: whether the write set holds what the first pass wrote there.
    fn same(&mut self, stream: &Stream) -> Result<bool, RecordError> {
        if let Some(flags) = &self.flags {
            copy_dtoh(&mut self.readback, flags.ptr())
                .map_err(RecordError::cuda("reading the output check"))?;
            let mut off = 0;
            for &(.., n) in &self.gpu {
                let changed = &self.readback[off + n * 4..off + n * 8];
                if changed.iter().any(|&b| b != 0) {
                    return Ok(false);
                }
                off += n * 8;
            }
        }
        for &(a, b, len) in &self.host {
            if differs(a, b, len, stream)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl InPlace<'_> {
    fn err(during: &'static str) -> impl Fn(kreplay_cuda::CudaError) -> RecordError + Copy {
        RecordError::cuda(during)
    }

    /// After the first pass: the write set, and a copy of what the pass wrote there.
    fn learn_write_set(&mut self) -> Result<(), RecordError> {
        for s in self.saved.iter_mut() {
            s.write_set = changed_runs(s.pristine.ptr(), s.addr, s.size, self.stream);
            let total: u64 = s.write_set.iter().map(|r| r.len).sum();
            s.first_output = None;
            if total > 0 {
                let out = device_copy_packed(s.addr, &s.write_set, total, self.stream)?;
                s.first_output = Some(out);
            }
        }
        self.check = Some(OutputCheck::plan(self.saved)?);
        self.stream
            .synchronize()
            .map_err(Self::err("copying the first pass's output"))
    }

    /// After a pass's wait: the restore's GPU time, when one was queued before it.
    fn note_restore(&mut self) {
        if std::mem::take(&mut self.restore_queued) {
            if let Ok(ns) = self
                .restore_events
                .1
                .elapsed_ns_since(&self.restore_events.0)
            {
                self.restores_ns.push(ns);
            }
        }
    }
}

/// Whether `len` bytes at device addresses `a` and `b` differ: on the GPU, or on the host where
/// the GPU cannot compare them (addresses not 16-byte aligned: small globals).
fn differs(a: u64, b: u64, len: u64, stream: &Stream) -> Result<bool, RecordError> {
    let cs = DEFAULT_CHUNK_SIZE;
    if let Ok(flags) = with_chunk_kernels(|k| k.scan(a, Some(b), len, cs, stream)) {
        return Ok(flags.changed.iter().any(|&c| c));
    }
    let n = usize::try_from(len).map_err(|_| RecordError::RegionTooLarge(len))?;
    let (mut x, mut y) = (vec![0u8; n], vec![0u8; n]);
    let read = RecordError::cuda("comparing a pass's output");
    copy_dtoh(&mut x, a).map_err(read)?;
    copy_dtoh(&mut y, b).map_err(read)?;
    Ok(x != y)
}

/// Copies the runs of `addr` end to end into a new device buffer of `total` bytes.
fn device_copy_packed(
    addr: u64,
    runs: &[PackedRun],
    total: u64,
    stream: &Stream,
) -> Result<DeviceBuffer, RecordError> {
    let buf = DeviceBuffer::new(total as usize).map_err(|_| RecordError::NoPostScratch(total))?;
    let mut at = 0;
    for r in runs {
        copy_dtod_async(buf.ptr() + at, addr + r.offset, r.len as usize, stream)
            .map_err(RecordError::cuda("copying the first pass's output"))?;
        at += r.len;
    }
    Ok(buf)
}

impl PassRunner for InPlace<'_> {
    type Error = RecordError;

    /// Queued, not waited for: the pass's launch follows on the same stream, and its one wait
    /// covers both (the copies' GPU time is read from events afterwards).
    fn restore(&mut self) -> Result<(), RecordError> {
        let t = std::time::Instant::now();
        self.restore_events
            .0
            .record(self.stream)
            .map_err(Self::err("timing the restore"))?;
        for s in self.saved.iter() {
            for r in &s.write_set {
                copy_dtod_async(
                    s.addr + r.offset,
                    s.pristine.ptr() + r.offset,
                    r.len as usize,
                    self.stream,
                )
                .map_err(Self::err("restoring the write set"))?;
            }
        }
        self.restore_events
            .1
            .record(self.stream)
            .map_err(Self::err("timing the restore"))?;
        self.restore_queued = true;
        self.pass_began = Some(t);
        Ok(())
    }

    /// The L2 is emptied here, before BEGIN, so a tool that starts counters at BEGIN (the
    /// built-in counters do) sees the dispatch alone.
    fn prepare(&mut self, _pass: u32) -> Result<(), RecordError> {
        if self.cache_flush {
            // Without a sweep (device memory short) the pass runs with what L2 holds.
            let _ = flush_l2(self.stream);
        }
        Ok(())
    }

    fn run(&mut self, pass: u32) -> Result<PassOutcome, RecordError> {
        trace_with(|| format!("pass {pass}: begin"));
        let outcome = self.run_timed(pass)?;
        if let Some(t) = self.pass_began.take() {
            let wall = t.elapsed().as_nanos() as u64;
            self.overheads_ns
                .push(wall.saturating_sub(outcome.duration_ns));
        }
        Ok(outcome)
    }
}

impl InPlace<'_> {
    fn run_timed(&mut self, pass: u32) -> Result<PassOutcome, RecordError> {
        self.timer
            .arm(self.stream)
            .map_err(Self::err("arming the pass timer"))?;
        trace("pass timer armed");
        let launched = kreplay_cuda::launch(self.function, self.config, self.args, self.stream)
            .map_err(Self::err("launching a pass"));
        trace("pass queued");
        let stopped = self.timer.finish(self.stream);
        trace("pass launched, gate opened");
        launched?;
        stopped.map_err(Self::err("stopping the pass timer"))?;
        if let Some(check) = &self.check {
            check.queue(self.stream)?;
        }
        // The pass's one wait: restore, kernel and output check.
        self.stream
            .synchronize()
            .map_err(RecordError::KernelFailed)?;
        self.note_restore();
        let duration_ns = self
            .timer
            .elapsed_ns()
            .map_err(Self::err("reading the pass timer"))?;
        trace_with(|| format!("pass {pass}: done, {duration_ns} ns"));
        let matches_first = match &mut self.check {
            Some(check) => Some(check.same(self.stream)?),
            None => None,
        };
        Ok(PassOutcome {
            index: pass,
            duration_ns,
            matches_first,
        })
    }
}

/// A dispatch between its launch callback's ENTER and EXIT: its application launch is pass 0.
pub struct ProfilePending {
    pub correlation: u32,
    row: ProfileRow,
    view: DispatchView,
    passes: PassLoop,
    saved: Vec<Saved>,
    stream: Stream,
    app_stream: ForeignStream,
    timer: GatedTimer,
    function: ForeignFunction,
    config: LaunchConfig,
    args: KernelArgs,
    cache_flush: bool,
}

// SAFETY: the handles (streams, function, timer, buffers) are driver handles usable from any
// thread with the context current; a pending profile lives in one thread's slot from ENTER
// to EXIT of the same launch.
unsafe impl Send for ProfilePending {}

impl ProfilePending {
    pub fn short_name(&self) -> &str {
        &self.row.short_name
    }

    pub fn match_index(&self) -> u64 {
        self.row.match_index
    }
}

/// What ENTER decided.
pub enum Begun {
    /// The dispatch runs once, unprofiled (the row says why).
    Skipped(Box<ProfileRow>),
    /// Its passes follow at EXIT.
    Pending(Box<ProfilePending>),
}

/// At ENTER: the pristine copy, CONFIG and BEGIN of pass 0, the L2 emptied, the application's
/// stream gated. Call with the launch's context current, before the launch goes through.
pub fn profile_begin(
    input: ProfileInput<'_>,
    correlation: u32,
    tool: &mut dyn PassTool,
) -> Result<Begun, RecordError> {
    let view = input.view;
    let mut row = first_row(&input);
    trace_with(|| {
        format!(
            "{} (launch {}): enter",
            input.short_name, input.launch_index
        )
    });
    ctx_synchronize().map_err(RecordError::cuda("synchronising before the passes"))?;
    trace("synchronised");
    let (stream, saved) = match copy_aside(&input, &mut row)? {
        Aside::Copied(stream, saved) => (stream, saved),
        Aside::NotInPlace(why) => {
            row.skipped = Some(why);
            return Ok(Begun::Skipped(Box::new(row)));
        }
    };
    let (config, args) = pass_launch(&input)?;
    // SAFETY: inside the launch callback that decoded the view.
    let app_stream = unsafe { view.foreign_stream() };
    let d = dispatch_view(&input, &app_stream, row.reachable_bytes);
    // The L2 is emptied before BEGIN of pass 0, as before every pass (see `prepare`).
    if input.cache_flush {
        let _ = flush_l2(&stream);
        stream
            .synchronize()
            .map_err(RecordError::cuda("emptying the L2 before pass 0"))?;
    }
    let Some(passes) = PassLoop::begin(tool, &d) else {
        row.skipped = Some("the tool skipped it".into());
        return Ok(Begun::Skipped(Box::new(row)));
    };
    // Last: the application's stream stays gated until its launch is queued.
    let mut timer = GatedTimer::new().map_err(RecordError::cuda("creating the pass timer"))?;
    timer
        .arm(&app_stream)
        .map_err(RecordError::cuda("arming the pass timer"))?;
    trace("pass 0 (the application's launch) armed");
    Ok(Begun::Pending(Box::new(ProfilePending {
        correlation,
        row,
        view: d,
        passes,
        saved,
        stream,
        app_stream,
        timer,
        function: input.function,
        config,
        args,
        cache_flush: input.cache_flush,
    })))
}

/// The dispatch's report row as ENTER starts it.
fn first_row(input: &ProfileInput<'_>) -> ProfileRow {
    ProfileRow {
        kernel: input.kernel_name.clone(),
        short_name: input.short_name.clone(),
        match_index: input.match_index,
        launch_index: input.launch_index,
        grid: input.view.grid,
        block: input.view.block,
        cache_flush: input.cache_flush,
        ..Default::default()
    }
}

/// What `copy_aside` made of the dispatch's reachable memory.
enum Aside {
    /// The pristine copy, made on this pass stream.
    Copied(Stream, Vec<Saved>),
    /// Not replayed in place, and why (the row says it).
    NotInPlace(String),
}

/// The pristine copy of everything the dispatch reaches, on a new pass stream (the row learns
/// the reachable bytes).
fn copy_aside(input: &ProfileInput<'_>, row: &mut ProfileRow) -> Result<Aside, RecordError> {
    let (found, textures) = reach(
        &input.args,
        &input.layout,
        &input.function,
        input.module_objects,
        &input.allocations,
    )?;
    row.reachable_bytes = found.regions.iter().map(|r| r.size).sum();
    trace_with(|| {
        format!(
            "walked: {} regions, {} bytes",
            found.regions.len(),
            row.reachable_bytes
        )
    });
    if !textures.arrays.is_empty() {
        return Ok(Aside::NotInPlace(
            "it reaches CUDA arrays (texture or surface objects), not replayed in place yet".into(),
        ));
    }
    if found.heap_word_count > 0 {
        return Ok(Aside::NotInPlace(
            "it reads the device heap (malloc inside kernels), which cannot be copied aside".into(),
        ));
    }
    let stream = Stream::new().map_err(RecordError::cuda("creating the pass stream"))?;
    let mut saved = Vec::with_capacity(found.regions.len());
    for r in &found.regions {
        let Some(pristine) = device_copy(r.base, r.size, &stream) else {
            return Ok(Aside::NotInPlace(format!(
                "its reachable memory ({}) does not fit in free device memory for the pristine copy",
                kreplay_format::units::bytes(row.reachable_bytes)
            )));
        };
        saved.push(Saved {
            addr: r.base,
            size: r.size,
            pristine,
            write_set: Vec::new(),
            first_output: None,
        });
    }
    stream
        .synchronize()
        .map_err(RecordError::cuda("copying the reachable memory aside"))?;
    trace("pristine copy made");
    Ok(Aside::Copied(stream, saved))
}

/// The launch configuration and arguments the further passes launch with.
fn pass_launch(input: &ProfileInput<'_>) -> Result<(LaunchConfig, KernelArgs), RecordError> {
    let dispatch = dispatch_of(
        input.view,
        input.kernel_name.clone(),
        0,
        &input.layout,
        input.args.clone(),
        Vec::new(),
    );
    let plan = LaunchPlan::of_dispatch(&dispatch)
        .map_err(|e| RecordError::Config(format!("this launch cannot be replayed: {e}")))?;
    let config =
        launch_config(&dispatch, &plan).map_err(RecordError::cuda("configuring the passes"))?;
    let args = KernelArgs::new(input.args.clone(), &input.layout).map_err(RecordError::Config)?;
    Ok((config, args))
}

/// The dispatch as the tool sees it, on the application's stream.
fn dispatch_view(
    input: &ProfileInput<'_>,
    app_stream: &ForeignStream,
    reachable_bytes: u64,
) -> DispatchView {
    let view = input.view;
    let mut d = DispatchView::new(
        &input.kernel_name,
        &kreplay_protocol::config::demangle(&input.kernel_name),
        view.grid,
        view.block,
        view.cluster(),
        view.shared_bytes,
        input.args.clone(),
        input.max_passes,
    );
    d.launch_index = input.launch_index;
    d.match_index = input.match_index;
    d.stream = app_stream.raw_stream() as u64;
    // Before the first pass only the reachable bytes are known (an upper bound).
    d.write_set_bytes = reachable_bytes;
    d
}

/// How a dispatch's profile ended at EXIT.
pub enum Finished {
    /// Its row is complete.
    Row(Box<ProfileRow>),
    /// Its counters wait for its context's batch (`counter_batch`), with its pristine copy.
    Counters(Box<Queued>),
}

/// At EXIT: pass 0's time, the write set, the further passes, and the application's output
/// put back. With `counters`, the dispatch then waits for its counter passes in a batch.
/// Call with the launch's context current.
pub fn profile_finish(
    p: ProfilePending,
    tool: &mut dyn PassTool,
    counters: bool,
) -> Result<Finished, RecordError> {
    let ProfilePending {
        mut row,
        view: d,
        passes,
        mut saved,
        stream,
        app_stream,
        mut timer,
        function,
        config,
        mut args,
        cache_flush,
        ..
    } = p;
    let finished = timer.finish(&app_stream);
    ctx_synchronize().map_err(RecordError::KernelFailed)?;
    finished.map_err(RecordError::cuda("stopping the pass timer"))?;
    let first = PassOutcome {
        index: 0,
        duration_ns: timer
            .elapsed_ns()
            .map_err(RecordError::cuda("reading the pass timer"))?,
        matches_first: None,
    };
    trace_with(|| format!("pass 0 done, {} ns", first.duration_ns));
    let mut runner = InPlace {
        function: &function,
        config: &config,
        args: &mut args,
        stream: &stream,
        timer,
        cache_flush,
        saved: &mut saved,
        restores_ns: Vec::new(),
        overheads_ns: Vec::new(),
        pass_began: None,
        check: None,
        restore_events: (
            Event::new().map_err(RecordError::cuda("creating the restore events"))?,
            Event::new().map_err(RecordError::cuda("creating the restore events"))?,
        ),
        restore_queued: false,
    };
    runner.learn_write_set()?;
    trace("write set found");
    let looped = passes.after_first(tool, &d, first, &mut runner);
    let restores = std::mem::take(&mut runner.restores_ns);
    let overheads = std::mem::take(&mut runner.overheads_ns);
    drop(runner);
    trace("passes done");
    // Whatever happened, the application goes on with its own launch's result.
    let put_back = put_back_application_output(&saved, &stream);
    trace("application output put back");
    let summary = looped?;
    put_back?;

    let mut durations: Vec<u64> = summary.outcomes.iter().map(|o| o.duration_ns).collect();
    row.durations_ns = durations.clone();
    durations.sort_unstable();
    row.median_ns = durations.get(durations.len() / 2).copied().unwrap_or(0);
    row.min_ns = durations.first().copied().unwrap_or(0);
    row.restore_median_ns = median(restores);
    row.pass_overhead_ns = median(overheads);
    row.write_set_bytes = saved
        .iter()
        .map(|s| s.write_set.iter().map(|r| r.len).sum::<u64>())
        .sum();
    row.deterministic = summary.deterministic;
    row.stopped_by_tool = summary.stopped_by_tool;
    row.capped = summary.capped;
    if !counters {
        return Ok(Finished::Row(Box::new(row)));
    }
    Ok(Finished::Counters(Box::new(Queued {
        row,
        view: d,
        function,
        config,
        args,
        regions: saved
            .into_iter()
            .map(|s| (s.addr, s.size, s.pristine))
            .collect(),
    })))
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Puts the application's own output back over the write set, and the pristine bytes over any
/// other chunk a pass changed.
fn put_back_application_output(saved: &[Saved], stream: &Stream) -> Result<(), RecordError> {
    let e = RecordError::cuda("putting the application's output back");
    for s in saved {
        let mut at = 0;
        if let Some(first) = &s.first_output {
            for r in &s.write_set {
                copy_dtod_async(s.addr + r.offset, first.ptr() + at, r.len as usize, stream)
                    .map_err(e)?;
                at += r.len;
            }
        }
        stream.synchronize().map_err(e)?;
        let in_write_set = |off: u64| {
            s.write_set
                .iter()
                .any(|r| off >= r.offset && off < r.offset + r.len)
        };
        for r in changed_runs(s.pristine.ptr(), s.addr, s.size, stream) {
            let cs = DEFAULT_CHUNK_SIZE;
            let mut off = r.offset;
            while off < r.offset + r.len {
                let n = cs.min(r.offset + r.len - off);
                if !in_write_set(off) {
                    copy_dtod_async(s.addr + off, s.pristine.ptr() + off, n as usize, stream)
                        .map_err(e)?;
                }
                off += n;
            }
        }
    }
    stream.synchronize().map_err(e)
}
