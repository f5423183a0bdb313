//! In-process kernel replay (`kreplay profile`, issue 12): a matching dispatch runs as many
//! times as the tool asks, where it happens, before the application's own launch.
//!
//! At the launch callback (the application is stalled, its context synchronised): everything
//! the dispatch can reach is copied aside to device scratch (the pristine copy); the passes run
//! on kreplay's own stream, each timed behind a stream gate, the L2 emptied before each with
//! `--cache flush`. After the first pass the GPU compares the pristine copy with memory
//! (`kreplay_chunk_scan`): the chunks that changed are the write set, and before every further
//! pass only they are put back, from the device copy. Each pass's output is compared with the
//! first's (determinism). Last, the whole reachable memory is compared once more and whatever
//! differs is put back, so the application's own launch, which then runs, finds its memory as
//! it was and produces one run's result, bit for bit as in a plain run.
//!
//! Not replayed in place yet, and said so in the dispatch's row: dispatches that reach CUDA
//! arrays (textures, surfaces), the device heap, or more memory than device scratch can hold;
//! kernel nodes of CUDA graphs (the graph issue).

use kreplay_cuda::chunks::ChunkFlags;
use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{
    copy_dtod_async, copy_dtoh, ctx_synchronize, AsStream, DeviceBuffer, ForeignFunction,
    KernelArgs, LaunchConfig, Stream,
};
use kreplay_engine::plan::{launch_config, LaunchPlan};
use kreplay_engine::tool::{drive, DispatchView, PassOutcome, PassRequest, PassRunner, PassTool};
use kreplay_format::{MemoryKind, DEFAULT_CHUNK_SIZE};
use kreplay_protocol::report::ProfileRow;

use crate::capture::{device_copy, dispatch_of, flush_l2, reach, with_chunk_kernels};
use crate::error::RecordError;
use crate::launch::LaunchView;
use crate::readback::{pack_changed, PackedRun};

/// `KREPLAY_DEBUG_PROFILE=1`: each step of in-place replay on stderr, with the time since the
/// process's first step (a diagnosis aid for a dispatch that does not come back).
fn trace(step: &str) {
    static ON: std::sync::OnceLock<Option<std::time::Instant>> = std::sync::OnceLock::new();
    if let Some(t0) = ON.get_or_init(|| {
        std::env::var_os("KREPLAY_DEBUG_PROFILE").map(|_| std::time::Instant::now())
    }) {
        crate::diag!(
            "kreplay: profile: {:>10.3} ms {step}",
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
}

/// kreplay's own timing as a tool: a fixed number of passes.
pub struct FixedPasses(pub u32);

impl PassTool for FixedPasses {
    fn config(&mut self, _d: &DispatchView) -> PassRequest {
        PassRequest::Passes(self.0.max(1))
    }
}

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
/// GPU cannot compare).
fn changed_runs(pristine: u64, live: u64, len: u64, stream: &Stream) -> Vec<PackedRun> {
    let cs = DEFAULT_CHUNK_SIZE;
    match with_chunk_kernels(|k| k.scan(pristine, Some(live), len, cs, stream)) {
        Ok(ChunkFlags { changed, .. }) => pack_changed(&changed, cs, len).0,
        Err(_) => vec![PackedRun {
            offset: 0,
            len,
            at: 0,
        }],
    }
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
        self.stream
            .synchronize()
            .map_err(Self::err("copying the first pass's output"))
    }

    /// Whether the write set holds what the first pass wrote there.
    fn same_as_first(&self) -> Result<bool, RecordError> {
        for s in self.saved.iter() {
            let Some(first) = &s.first_output else {
                continue;
            };
            let mut at = 0;
            for r in &s.write_set {
                if differs(first.ptr() + at, s.addr + r.offset, r.len, self.stream)? {
                    return Ok(false);
                }
                at += r.len;
            }
        }
        Ok(true)
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

    fn restore(&mut self) -> Result<(), RecordError> {
        let t = std::time::Instant::now();
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
        self.stream
            .synchronize()
            .map_err(Self::err("restoring the write set"))?;
        self.restores_ns.push(t.elapsed().as_nanos() as u64);
        Ok(())
    }

    fn run(&mut self, pass: u32) -> Result<PassOutcome, RecordError> {
        trace(&format!("pass {pass}: begin"));
        if self.cache_flush {
            // Without a sweep (device memory short) the pass runs with what L2 holds.
            let _ = flush_l2(self.stream);
            trace("L2 flush queued");
        }
        self.timer
            .arm(self.stream)
            .map_err(Self::err("arming the pass timer"))?;
        let launched = kreplay_cuda::launch(self.function, self.config, self.args, self.stream)
            .map_err(Self::err("launching a pass"));
        let stopped = self.timer.finish(self.stream);
        trace("pass launched, gate opened");
        launched?;
        stopped.map_err(Self::err("stopping the pass timer"))?;
        self.stream
            .synchronize()
            .map_err(RecordError::KernelFailed)?;
        let duration_ns = self
            .timer
            .elapsed_ns()
            .map_err(Self::err("reading the pass timer"))?;
        trace(&format!("pass {pass}: done, {duration_ns} ns"));
        let matches_first = if pass == 0 {
            self.learn_write_set()?;
            trace("write set found");
            None
        } else {
            Some(self.same_as_first()?)
        };
        Ok(PassOutcome {
            index: pass,
            duration_ns,
            matches_first,
        })
    }
}

/// Profiles one dispatch in place; the row says what ran, or why it was skipped. On return
/// the dispatch's memory is as it was on entry (the application's launch runs next).
pub fn profile(
    input: ProfileInput<'_>,
    tool: &mut dyn PassTool,
) -> Result<ProfileRow, RecordError> {
    let view = input.view;
    let mut row = ProfileRow {
        kernel: input.kernel_name.clone(),
        short_name: input.short_name.clone(),
        match_index: input.match_index,
        launch_index: input.launch_index,
        grid: view.grid,
        block: view.block,
        cache_flush: input.cache_flush,
        ..Default::default()
    };
    trace(&format!(
        "{} (launch {}): start",
        input.short_name, input.launch_index
    ));
    ctx_synchronize().map_err(RecordError::cuda("synchronising before the passes"))?;
    trace("synchronised");
    let (found, textures) = reach(
        &input.args,
        &input.layout,
        &input.function,
        input.module_objects,
        &input.allocations,
    )?;
    row.reachable_bytes = found.regions.iter().map(|r| r.size).sum();
    trace(&format!(
        "walked: {} regions, {} bytes",
        found.regions.len(),
        row.reachable_bytes
    ));
    if !textures.arrays.is_empty() {
        row.skipped = Some(
            "it reaches CUDA arrays (texture or surface objects), not replayed in place yet".into(),
        );
        return Ok(row);
    }
    if found.heap_word_count > 0 {
        row.skipped = Some(
            "it reads the device heap (malloc inside kernels), which cannot be copied aside".into(),
        );
        return Ok(row);
    }
    let stream = Stream::new().map_err(RecordError::cuda("creating the pass stream"))?;
    let mut saved = Vec::with_capacity(found.regions.len());
    for r in &found.regions {
        let Some(pristine) = device_copy(r.base, r.size, &stream) else {
            row.skipped = Some(format!(
                "its reachable memory ({}) does not fit in free device memory for the pristine copy",
                kreplay_format::units::bytes(row.reachable_bytes)
            ));
            return Ok(row);
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

    let dispatch = dispatch_of(
        view,
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
    let mut args =
        KernelArgs::new(input.args.clone(), &input.layout).map_err(RecordError::Config)?;
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
    // SAFETY: inside the launch callback that decoded the view.
    d.stream = unsafe { view.foreign_stream() }.raw_stream() as u64;
    // Before the first pass only the reachable bytes are known (an upper bound).
    d.write_set_bytes = row.reachable_bytes;

    let mut runner = InPlace {
        function: &input.function,
        config: &config,
        args: &mut args,
        stream: &stream,
        timer: GatedTimer::new().map_err(RecordError::cuda("creating the pass timer"))?,
        cache_flush: input.cache_flush,
        saved: &mut saved,
        restores_ns: Vec::new(),
    };
    trace("passes start");
    let looped = drive(tool, &d, &mut runner);
    trace("passes done");
    let restores = std::mem::take(&mut runner.restores_ns);
    drop(runner);
    // Whatever happened, the application's launch must find its memory as it was.
    let put_back = put_everything_back(&saved, &stream);
    trace("memory put back");
    let summary = looped?;
    put_back?;

    let mut durations: Vec<u64> = summary.outcomes.iter().map(|o| o.duration_ns).collect();
    row.durations_ns = durations.clone();
    durations.sort_unstable();
    row.median_ns = durations.get(durations.len() / 2).copied().unwrap_or(0);
    row.min_ns = durations.first().copied().unwrap_or(0);
    let mut r = restores;
    r.sort_unstable();
    row.restore_median_ns = r.get(r.len() / 2).copied().unwrap_or(0);
    row.write_set_bytes = saved
        .iter()
        .map(|s| s.write_set.iter().map(|r| r.len).sum::<u64>())
        .sum();
    row.deterministic = summary.deterministic;
    row.stopped_by_tool = summary.stopped_by_tool;
    row.capped = summary.capped;
    if summary.skipped {
        row.skipped = Some("the tool skipped it".into());
    }
    Ok(row)
}

/// Compares all reachable memory with its pristine copy and puts back whatever differs.
fn put_everything_back(saved: &[Saved], stream: &Stream) -> Result<(), RecordError> {
    for s in saved {
        for r in changed_runs(s.pristine.ptr(), s.addr, s.size, stream) {
            copy_dtod_async(
                s.addr + r.offset,
                s.pristine.ptr() + r.offset,
                r.len as usize,
                stream,
            )
            .map_err(RecordError::cuda("putting the dispatch's memory back"))?;
        }
    }
    stream
        .synchronize()
        .map_err(RecordError::cuda("putting the dispatch's memory back"))
}
