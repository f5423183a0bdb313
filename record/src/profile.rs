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
//! With `--variant` the further passes alternate the original and a variant kernel
//! (`variant`), whose output is compared with the application's.
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

use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{
    ctx_synchronize, AsStream, ForeignFunction, ForeignStream, KernelArgs, LaunchConfig, Stream,
};
use kreplay_engine::tool::{
    deterministic, DispatchView, LoopSummary, PassLoop, PassOutcome, PassTool,
};
use kreplay_format::MemoryKind;
use kreplay_protocol::report::ProfileRow;

use crate::capture::{reach, repeat_launch};
use crate::counter_batch::Queued;
use crate::device_resources::flush_l2;
use crate::error::RecordError;
use crate::in_place::{pristine_copy, put_back_application_output, InPlace, Saved};
use crate::launch::LaunchView;
use crate::pass_timeline::DispatchClock;
use crate::spares::{spare_stream, spare_timer};
use crate::trace::{trace, trace_with};
use crate::variant::{alternate, VariantInput};

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
    /// The chunk the write set is found in and restored by (`--memory touched`: a 4 KiB page;
    /// else the capture's 4 MiB chunk).
    pub restore_chunk: u64,
    pub max_passes: u32,
    /// `--variant`: run beside the original (its layout checked already).
    pub variant: Option<VariantInput>,
    /// `--variant`: why it does not run at this dispatch (the original is profiled as usual).
    pub variant_refused: Option<String>,
    /// `--trace`: place the passes on the GPU's time axis (`pass_timeline`).
    pub trace: bool,
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
    restore_chunk: u64,
    variant: Option<VariantInput>,
    clock: Option<DispatchClock>,
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
    trace("passes planned");
    // Before anything of the passes is queued: the trace's anchor.
    let mut clock = None;
    if input.trace {
        match DispatchClock::start(&stream, &app_stream) {
            Ok(c) => clock = Some(c),
            Err(e) => row.timeline_error = Some(e),
        }
    }
    // The L2 is emptied before BEGIN of pass 0, as before every pass (see `prepare`).
    if input.cache_flush {
        if let Some(c) = &mut clock {
            c.before_flush(&stream);
        }
        let ran = flush_l2(&stream).is_ok();
        if let Some(c) = &mut clock {
            c.after_flush(&stream, ran);
        }
        stream
            .synchronize()
            .map_err(RecordError::cuda("emptying the L2 before pass 0"))?;
        trace("L2 emptied");
    }
    let Some(passes) = PassLoop::begin(tool, &d) else {
        row.skipped = Some("the tool skipped it".into());
        return Ok(Begun::Skipped(Box::new(row)));
    };
    // Last: the application's stream stays gated until its launch is queued.
    trace("tool's BEGIN done");
    let mut timer = spare_timer().map_err(RecordError::cuda("creating the pass timer"))?;
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
        restore_chunk: input.restore_chunk,
        variant: input.variant,
        clock,
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
        restore_chunk_bytes: input.restore_chunk,
        variant_error: input.variant_refused.clone(),
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
    let (found, textures, _) = reach(
        &input.args,
        &input.layout,
        &input.function,
        input.module_objects,
        &input.allocations,
        false,
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
    let stream = spare_stream().map_err(RecordError::cuda("creating the pass stream"))?;
    let mut saved = Vec::with_capacity(found.regions.len());
    for r in &found.regions {
        let Some(pristine) = pristine_copy(r.base, r.size, &stream) else {
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
            chunk: kreplay_format::DEFAULT_CHUNK_SIZE,
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
    repeat_launch(input.view, &input.layout, &input.args)
        .map_err(|e| RecordError::Config(format!("this launch cannot be replayed: {e}")))
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
        restore_chunk,
        variant,
        mut clock,
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
    if let Some(c) = &mut clock {
        c.pass(0, false, (timer.start_event(), first.duration_ns), None);
    }
    let mut runner = InPlace::new(
        (&function, &config, &mut args),
        &stream,
        timer,
        cache_flush,
        &mut saved,
    )?;
    runner.clock = clock;
    runner.restore_chunk = restore_chunk;
    runner.learn_write_set()?;
    trace("write set found");
    let (looped, keep_variant) = match &variant {
        None => (passes.after_first(tool, &d, first, &mut runner), false),
        Some(v) => variant_passes(&mut runner, v, first, &mut row),
    };
    let restores = std::mem::take(&mut runner.restores_ns);
    let overheads = std::mem::take(&mut runner.overheads_ns);
    let clock = runner.clock.take();
    let spent = runner.into_spent();
    trace("passes done");
    // Whatever happened, the application goes on with its own launch's result (or, asked
    // for and once the variant's passes all ran, with the variant's).
    let put_back = put_back_application_output(&saved, &stream, keep_variant && looped.is_ok());
    trace("application output put back");
    let summary = looped?;
    put_back?;
    if let Some(c) = clock {
        match c.into_timeline(app_stream.raw_stream() as u64) {
            Ok(t) => row.timeline = Some(t),
            Err(e) => row.timeline_error = Some(e),
        }
    }

    fill_row(&mut row, &summary, (restores, overheads), &saved);
    if !counters {
        // `put_back` synchronised the pass stream: nothing queued uses these any more.
        spent.recycle(saved, stream);
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

/// `--variant`'s passes after the application's launch (`first`), as the pass loop would have
/// summed them up, and whether the variant's output stays. A launch the driver refused leaves
/// the context usable: the row says why, and the original's output is put back (a fault fails
/// that too).
fn variant_passes(
    runner: &mut InPlace<'_>,
    v: &VariantInput,
    first: PassOutcome,
    row: &mut ProfileRow,
) -> (Result<LoopSummary, RecordError>, bool) {
    match alternate(runner, v, first) {
        Ok(a) => {
            row.variant = Some(a.result);
            (Ok(alternated_summary(a.original)), a.keep_variant_output)
        }
        Err(e) => {
            row.variant_error = Some(format!(
                "the variant's passes failed ({e}); the application keeps the original's output"
            ));
            if let Some(c) = &mut runner.clock {
                c.truncate(1);
            }
            (Ok(alternated_summary(vec![first])), false)
        }
    }
}

/// The row's figures from the passes: times, restores, overheads, write set, verdicts.
fn fill_row(
    row: &mut ProfileRow,
    summary: &LoopSummary,
    (restores, overheads): (Vec<u64>, Vec<u64>),
    saved: &[Saved],
) {
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
    // The chunk actually used: the largest of the regions restored (widened over a large
    // region, a whole region where the GPU could not compare it).
    if let Some(c) = saved
        .iter()
        .filter(|s| !s.write_set.is_empty())
        .map(|s| s.chunk)
        .max()
    {
        row.restore_chunk_bytes = c;
    }
    row.deterministic = summary.deterministic;
    row.stopped_by_tool = summary.stopped_by_tool;
    row.capped = summary.capped;
}

/// The original's passes of an alternation, as the pass loop would have summed them up.
fn alternated_summary(original: Vec<PassOutcome>) -> LoopSummary {
    LoopSummary {
        passes: original.len() as u32,
        skipped: false,
        stopped_by_tool: false,
        capped: false,
        deterministic: deterministic(&original),
        outcomes: original,
    }
}

fn median(v: Vec<u64>) -> u64 {
    crate::range_timing::median_ns(&v).unwrap_or(0)
}
