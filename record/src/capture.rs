//! Taking one dispatch: before the launch (arguments, the memory its footprint says it reads,
//! globals, code object) and after it (the bytes it wrote, its duration). Runs inside the
//! launch callback, so the application is stalled only while device memory is copied. What
//! memory that is comes from `footprint`; the copies and comparisons are `snapshot`'s; the
//! settling before the measured launch is `settle`'s.

use std::sync::Arc;
use std::time::Instant;

use kreplay_cuda::many::QueuedCopies;
use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{
    ctx_synchronize, ContextHandle, ForeignFunction, ForeignStream, KernelArgs, LaunchConfig,
    Stream,
};
use kreplay_engine::plan::{launch_config, LaunchPlan};
use kreplay_format::{
    DeviceInfo, Dispatch, LaunchAttribute, MemoryKind, ModuleGlobal, ModuleImage, Param, Textures,
    TimingConditions,
};

use crate::compare_later::CompareLater;
use crate::error::RecordError;
use crate::footprint::{Footprint, Reads, Step};
use crate::launch::LaunchView;
use crate::reachable::{heap_note, WalkCopies};
use crate::settle::{settle, SweepsAhead, BUSY_NS};
use crate::spill::{OpenFile, Spill};
use crate::walk::Walk;

// The reachable adapter moved to `reachable` and the snapshots to `snapshot`; the recorder,
// profile and graph paths still import these from here.
pub(crate) use crate::reachable::{lock_staging, reach, resolve_globals, DeviceSpace};
pub(crate) use crate::snapshot::{copy_region, device_copy};
pub use crate::snapshot::{Bytes, PostChunk, PostScratch, Scratch, Snapshot};

use crate::snapshot::{
    array_snapshots, nothing_left_to_copy, post_states, queue_into_slab, slab_placement,
    take_snapshots,
};

/// The recorder's buffers that belong to a context about to be destroyed are freed while it
/// still exists: its L2 sweep, and the pinned staging buffer (page-locked memory dies with the
/// context that allocated it; the next capture makes a new one).
pub(crate) fn forget_context(context: usize) {
    crate::device_resources::forget_context(context);
    crate::reachable::forget_staging();
}

/// A capture between launch ENTER and EXIT.
pub struct Pending {
    pub correlation: u32,
    pub stream: ForeignStream,
    pub timer: GatedTimer,
    pub data: CaptureData,
    /// The writers held off (see `quiet`): from the stall's start to the end of the post phase
    /// (`after_launch`); a range's first step, to its kernel's end (`finish_kernel`).
    pub measuring: Option<crate::quiet::Measuring>,
    /// What the dispatch reads and writes (it decides the post-dispatch state).
    pub footprint: Arc<dyn Footprint>,
    /// `--memory touched`: the launch the instrumented run repeats at EXIT, or why it cannot
    /// be repeated (the capture then holds whole regions); none in other modes.
    pub touched: Option<Result<crate::touched_run::TouchedLaunch, String>>,
    /// The slab copy's table, holding the copies into the slab's second half, and where that
    /// half starts (`queue_into_slab`): `after_launch` queues them.
    pub post_half: Option<(QueuedCopies, u64)>,
}

/// The kernel's cubin as the recorder holds it: shared, so the application is not stalled
/// while it is copied; the writer thread makes the `ModuleImage`.
pub struct CodeObject {
    pub module_id: u32,
    /// SM architecture as major*10+minor.
    pub arch: u32,
    pub image: std::sync::Arc<Vec<u8>>,
}

impl CodeObject {
    pub fn to_image(&self) -> ModuleImage {
        ModuleImage {
            module_id: self.module_id,
            kind: kreplay_format::ModuleKind::Cubin,
            arch: self.arch,
            image: self.image.as_ref().clone(),
        }
    }
}

/// Everything the writer thread needs (it runs off the callback thread).
pub struct CaptureData {
    pub dispatch: Dispatch,
    /// A range capture's steps, the first equal to `dispatch` (empty for one dispatch).
    pub steps: Vec<kreplay_format::Step>,
    /// A range capture's code objects other than `module`.
    pub step_modules: Vec<CodeObject>,
    /// What a range capture is as a whole (written after the steps); none for one dispatch.
    pub range: Option<kreplay_format::RangeInfo>,
    pub snapshots: Vec<Snapshot>,
    pub globals: Vec<ModuleGlobal>,
    pub module: CodeObject,
    /// Where the kernel's PTX may be; resolved by the writer thread, off the app's time.
    pub ptx_sources: Vec<crate::ptx::PtxSource>,
    pub pointer_slots: Vec<(u32, u64)>,
    /// The application's context, for the writer thread's copies from device scratch.
    pub context: Option<ContextHandle>,
    /// Chunks that changed in regions snapshotted on the host.
    pub post: Vec<PostChunk>,
    /// The slab's regions copied whole after the step, compared by the writer.
    pub compare_later: Option<CompareLater>,
    pub notes: Vec<String>,
    /// Texture and surface objects in the arguments, and their arrays.
    pub textures: Textures,
    /// What the dispatch reads from the device heap, which is not captured (see `heap`).
    pub device_heap: Option<String>,
    /// How the original duration was measured.
    pub timing: TimingConditions,
    /// Where the dispatch came from, when it ran as a graph node.
    pub graph: Option<kreplay_format::GraphOrigin>,
    /// The innermost NVTX push/pop range open on the launching thread (the corpus lists it).
    pub nvtx: Option<String>,
    /// 1-based among matching dispatches, and among all launches of the process.
    pub match_index: u64,
    pub launch_index: u64,
    /// The GPU, as the recorder saw it before the launch.
    pub device: Option<DeviceInfo>,
    /// The capture file, when regions were written to it during the stall.
    pub spill: Option<Spill>,
    pub began: Instant,
    pub stall_ns: u64,
    /// Where the stall went: (phase, nanoseconds), in order.
    pub stall_phases: Vec<(&'static str, u64)>,
}

/// Times the phases of a stall, one lap each.
struct Laps {
    last: Instant,
    phases: Vec<(&'static str, u64)>,
}

impl Laps {
    fn new() -> Laps {
        Laps {
            last: Instant::now(),
            phases: Vec::new(),
        }
    }

    /// Ends the phase `name` now.
    fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        self.phases
            .push((name, now.duration_since(self.last).as_nanos() as u64));
        self.last = now;
    }
}

/// Everything known before the launch that the recorder needs to resolve.
pub struct PreInput<'a> {
    pub view: &'a LaunchView,
    pub function: ForeignFunction,
    /// The argument bytes and (offset, size) of each parameter.
    pub args: Vec<u8>,
    pub layout: Vec<(u32, u32)>,
    pub kernel_name: String,
    pub module: CodeObject,
    /// Global variables of the module: (name, size).
    pub module_objects: &'a [(String, u64)],
    /// Every live allocation, for `--memory all` (empty otherwise).
    pub allocations: Vec<(u64, u64, MemoryKind)>,
    pub correlation: u32,
    /// Opens the capture file, for regions that do not fit in device scratch.
    pub open_file: Option<OpenFile<'a>>,
    /// The slab's regions may be copied whole after the step and compared by the writer
    /// (`compare_later`): `after_launch` closes the capture, and nothing needs their write
    /// sets before the writer (not `--memory touched`'s instrumented run, not a range).
    pub compare_later: bool,
}

/// The configuration and arguments that launch `view`'s kernel again as the application
/// launched it (profile's further passes, the instrumented run of `--memory touched`); why
/// not, when the launch cannot be repeated.
pub(crate) fn repeat_launch(
    view: &LaunchView,
    layout: &[(u32, u32)],
    args: &[u8],
) -> Result<(LaunchConfig, KernelArgs), String> {
    let dispatch = dispatch_of(view, String::new(), 0, layout, args.to_vec(), Vec::new());
    let plan = LaunchPlan::of_dispatch(&dispatch).map_err(|e| e.to_string())?;
    let config = launch_config(&dispatch, &plan).map_err(|e| e.to_string())?;
    let args = KernelArgs::new(args.to_vec(), layout)?;
    Ok((config, args))
}

/// The dispatch as the format describes it, from the launch the recorder sees.
pub(crate) fn dispatch_of(
    view: &LaunchView,
    kernel_name: String,
    module_id: u32,
    layout: &[(u32, u32)],
    args: Vec<u8>,
    pointer_words: Vec<u32>,
) -> Dispatch {
    Dispatch {
        kernel_name,
        module_id,
        api: view.api,
        grid: view.grid,
        block: view.block,
        cluster: view.cluster(),
        dynamic_shared_bytes: view.shared_bytes,
        attributes: view
            .attributes
            .iter()
            .map(|(id, v)| LaunchAttribute {
                id: *id,
                value: v.to_vec(),
            })
            .collect(),
        params: layout
            .iter()
            .map(|&(offset, size)| Param { offset, size })
            .collect(),
        arg_bytes: args,
        pointer_words,
        original_duration_ns: None,
    }
}

/// Snapshots everything the dispatch reads. Call with the context synchronised. The capture's
/// large host blocks come from the recorder's kept pages (`retaining_alloc`).
pub fn before_launch(input: PreInput<'_>) -> Result<Pending, RecordError> {
    let _kept = crate::retaining_alloc::CaptureScope::enter();
    snapshot_before(input)
}

/// Holds the writers of earlier captures off the GPU and the driver for the whole stall
/// (`quiet`): waits for a piece of their work in progress (a copy being started, a ring being
/// pinned); the stall's first synchronisation then lets their copies in flight land. Their
/// copies, frees and pinning beside a stall had made its own driver calls wait (a module's
/// globals resolved, the heap limit read: 7 to 57 ms once in three or four captures of a
/// training step, on an H100).
fn writers_held_off(laps: &mut Laps) -> crate::quiet::Measuring {
    let measuring = crate::quiet::measure();
    laps.lap("quiet");
    measuring
}

/// What the dispatch reads (`Footprint::reads`), module globals resolved in the application's
/// module (restored by name at replay); the walk's regions end to end as spans where they
/// are asked for (`spans`) and the capture is one dispatch compared after its stall
/// (`compare_later`: not a range's step, not `--memory touched`, not a whole graph launch,
/// whose regions are matched against other steps' by allocation).
fn reads_of(
    footprint: &dyn crate::footprint::Footprint,
    input: &PreInput<'_>,
) -> Result<Reads, RecordError> {
    let mut reads = footprint.reads(&Step {
        args: &input.args,
        layout: &input.layout,
        function: &input.function,
        module_objects: input.module_objects,
        allocations: &input.allocations,
        copy_regions: true,
    })?;
    if input.compare_later && crate::spans::switched_on() {
        let copies = &reads.copies;
        if let Some((spans, multi)) =
            crate::spans::coalesced(&reads.walk, |b, s| copies.holds(b, s))
        {
            let placement = crate::snapshot::slab_placement(&spans);
            let allowed = crate::scratch_rule::scratch_allowed;
            if crate::spans::worth_keeping(&placement, &multi, allowed) {
                reads.walk = spans;
            }
        }
    }
    Ok(reads)
}

/// `before_launch`'s work.
fn snapshot_before(input: PreInput<'_>) -> Result<Pending, RecordError> {
    let began = Instant::now();
    let mut laps = Laps::new();
    let view = input.view;
    let measuring = writers_held_off(&mut laps);
    ctx_synchronize().map_err(RecordError::cuda("synchronising before the snapshot"))?;
    laps.lap("synchronise");

    let footprint = crate::footprint::for_capture();
    let Reads {
        walk: found,
        mut textures,
        mut copies,
    } = reads_of(&*footprint, &input)?;
    let (args, layout) = (input.args, input.layout);
    laps.lap("walk");

    // A spare (made with the context): a stream made and destroyed is driver work.
    let stream =
        crate::spares::spare_stream().map_err(RecordError::cuda("creating the snapshot stream"))?;
    let mut spill = None;
    let post_half = input.compare_later && !crate::compare_later::switched_off();
    let mut prep = snapshots_with_sweeps_ahead(
        &found,
        &textures,
        &mut copies,
        (input.module.module_id, post_half),
        &stream,
        input.open_file,
        &mut spill,
    )?;
    laps.lap("scratch");
    let texture_description = add_arrays(&found, &mut textures, &mut prep.snapshots)?;
    crate::touched_debug::from_env(&mut prep.snapshots).map_err(RecordError::Config)?;
    laps.lap("arrays");
    let device_heap = heap_note_said(&found, &input.kernel_name);
    let (slab_table, half) = (prep.slab_table, prep.post_half);
    let (timing, kept) = settle_and_keep(stream, prep.ahead, slab_table, half, &mut laps)?;

    // Last: the stream stays gated until the launch is queued (see GatedTimer).
    // SAFETY: inside the launch callback that decoded the view.
    let (app_stream, timer) = unsafe { armed_timer(view) }?;
    let dispatch = dispatch_of(
        view,
        input.kernel_name,
        input.module.module_id,
        &layout,
        args,
        found.pointer_words,
    );
    Ok(Pending {
        correlation: input.correlation,
        stream: app_stream,
        timer,
        measuring: Some(measuring),
        footprint,
        touched: None,
        post_half: kept.zip(half),
        data: CaptureData {
            dispatch,
            steps: Vec::new(),
            step_modules: Vec::new(),
            range: None,
            snapshots: prep.snapshots,
            globals: prep.globals,
            module: input.module,
            ptx_sources: Vec::new(),
            pointer_slots: found.pointer_slots,
            context: ContextHandle::current().ok(),
            post: Vec::new(),
            compare_later: None,
            device_heap,
            notes: found.notes.into_iter().chain(textures.notes).collect(),
            textures: texture_description,
            timing,
            graph: None,
            nvtx: None,
            match_index: 0,
            launch_index: 0,
            device: None,
            spill,
            stall_ns: began.elapsed().as_nanos() as u64,
            stall_phases: {
                laps.lap("arm");
                laps.phases
            },
            began,
        },
    })
}

/// The application's stream of `view`'s launch, and a timer armed on it.
///
/// # Safety
/// Called inside the launch callback that decoded `view`.
unsafe fn armed_timer(view: &LaunchView) -> Result<(ForeignStream, GatedTimer), RecordError> {
    // SAFETY: the contract: inside the launch callback that decoded the view.
    let app_stream = unsafe { view.foreign_stream() };
    let mut timer =
        crate::spares::spare_timer().map_err(RecordError::cuda("creating the timer"))?;
    timer
        .arm(&app_stream)
        .map_err(RecordError::cuda("arming the timer"))?;
    Ok((app_stream, timer))
}

/// Copies at most this many bytes into the slab after the settle's untimed sweeps rather than
/// before them (`snapshots_with_sweeps_ahead`): a copy this short keeps the GPU busy for less
/// than `BUSY_NS` on any current GPU, so the settle runs all its sweeps anyway.
const SWEEPS_FIRST_MOST_BYTES: u64 = 256 << 20;

/// `take_snapshots` after the slab's one copy, queued (not waited for), with the settle's
/// untimed sweeps queued on the same stream when nothing else will be copied before the launch
/// (no region left, no texture array to read: see `settle::sweep_ahead`). A small slab's sweeps
/// go first, right after the walk, so that they run while the host allocates the slab and
/// builds the snapshots (the slab's copy then follows them, and the settle's two timed sweeps
/// still empty L2 after it); a large slab's copy goes first. Also returns the sweeps queued
/// ahead, and the slab copy's table to give back once the stream is synchronised.
fn snapshots_with_sweeps_ahead(
    found: &Walk,
    textures: &crate::textures::Found,
    copies: &mut WalkCopies,
    (module_id, post_half): (u32, bool),
    stream: &Stream,
    open_file: Option<OpenFile<'_>>,
    spill: &mut Option<Spill>,
) -> Result<Prepared, RecordError> {
    let placement = slab_placement(found);
    let no_arrays = textures.arrays.is_empty() && found.handle_tables.is_empty();
    let all_placed = no_arrays && nothing_left_to_copy(found, Some(&placement.0), copies);
    let placement_bytes = placement.1;
    let mut ahead = if sweeps_first(all_placed, placement_bytes, sweeps_after()) {
        crate::settle::sweep_ahead(stream)
    } else {
        SweepsAhead::none()
    };
    let upload = crate::spares::spare_stream().ok();
    let queued = upload.as_ref().and_then(|upload| {
        queue_into_slab(found, placement, (post_half, module_id), stream, upload)
    });
    // The upload stream is kept with the copy's table until the settle has waited for it;
    // without a slab's copy nothing waits on it.
    let (slab, slab_table, post_half, built) = match (queued, upload) {
        (Some(q), Some(upload)) => (
            Some(q.slab),
            Some((q.table, upload)),
            q.post_half,
            q.snapshots,
        ),
        (_, idle) => {
            if let Some(idle) = idle {
                crate::spares::return_stream(idle);
            }
            (None, None, None, None)
        }
    };
    if slab.is_none() && placement_bytes > 0 && !ahead.is_none() {
        // The planned slab did not come (no room, no stream, the launch refused): its regions
        // are copied one by one after the sweeps queued first, which then did not follow the
        // last copy. The settle runs all of its own.
        ahead = SweepsAhead::none();
    }
    let at = slab.as_ref().map(|(_, at)| at.as_slice());
    if ahead.is_none() && no_arrays && nothing_left_to_copy(found, at, copies) {
        ahead = crate::settle::sweep_ahead(stream);
    }
    let (snapshots, globals) = match built {
        Some(built) => built,
        None => take_snapshots(found, slab, copies, module_id, stream, open_file, spill)?,
    };
    Ok(Prepared {
        snapshots,
        globals,
        ahead,
        slab_table,
        post_half,
    })
}

/// Whether the settle's untimed sweeps go before the slab's copy: every region is in the slab
/// or copied by the walk (`all_placed`: nothing else is copied after them), the slab is at most
/// `SWEEPS_FIRST_MOST_BYTES`, and the measurement switch does not say otherwise.
fn sweeps_first(all_placed: bool, slab_bytes: u64, after_switch: bool) -> bool {
    all_placed && slab_bytes <= SWEEPS_FIRST_MOST_BYTES && !after_switch
}

/// `KREPLAY_DEBUG_SWEEPS=after`: the settle's sweeps queued after the slab's copy whatever its
/// size (as before they went first: the same build's baseline, a measurement aid).
fn sweeps_after() -> bool {
    static AFTER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AFTER.get_or_init(|| std::env::var_os("KREPLAY_DEBUG_SWEEPS").is_some_and(|v| v == "after"))
}

/// What `snapshots_with_sweeps_ahead` prepared.
struct Prepared {
    snapshots: Vec<Snapshot>,
    globals: Vec<ModuleGlobal>,
    ahead: SweepsAhead,
    /// The slab copy's table (`queue_into_slab`) and the stream it went up on, to give back
    /// once the stream is synchronised (which waited for the upload).
    slab_table: Option<(QueuedCopies, Stream)>,
    /// Where the slab's second half starts (`QueuedSlab::post_half`): the table is then kept
    /// for the copies into it after the step.
    post_half: Option<u64>,
}

/// The texture objects' CUDA arrays as snapshots after the walk's (their region ids follow),
/// the handle tables the walk found (confirmed by the driver) added; their description.
fn add_arrays(
    found: &Walk,
    textures: &mut crate::textures::Found,
    snapshots: &mut Vec<Snapshot>,
) -> Result<Textures, RecordError> {
    textures.add_tables(&found.handle_tables);
    note_uncaptured_views(found, textures);
    let first_array = snapshots.len() as u32;
    snapshots.extend(array_snapshots(textures, first_array)?);
    Ok(crate::textures::describe(textures, first_array))
}

/// `heap_note`, also said on stderr as it happens (`say_about_the_heap`).
fn heap_note_said(found: &Walk, kernel_name: &str) -> Option<String> {
    let note = heap_note(found);
    if let Some(n) = &note {
        say_about_the_heap(kernel_name, n);
    }
    note
}

/// Says on stderr, as it happens, that the kernel reads memory no capture can hold.
fn say_about_the_heap(kernel_name: &str, note: &str) {
    use kreplay_protocol::config::{demangle, short_kernel_name};
    crate::diag!(
        "kreplay: {}: {note}",
        short_kernel_name(&demangle(kernel_name))
    );
}

/// A note for each texture object (found in a handle table only) that views memory in no
/// captured region.
fn note_uncaptured_views(found: &Walk, textures: &mut crate::textures::Found) {
    let captured = |a: u64| {
        found
            .regions
            .iter()
            .any(|r| a >= r.base && a < r.base + r.size)
    };
    for o in &textures.objects {
        if let Some(a) = o.resource.address().filter(|&a| !captured(a)) {
            textures.notes.push(format!(
                "texture object {} views {a:#x}, which is in no captured region (it was found in a handle table only); not captured",
                o.handle
            ));
        }
    }
}

/// The settle (`settle_after_copies`), then the spare streams and the slab copy's table given
/// back; the table is returned instead when the slab has a second half (`post_half`), whose
/// copies it holds for after the step.
fn settle_and_keep(
    stream: Stream,
    ahead: SweepsAhead,
    slab_table: Option<(QueuedCopies, Stream)>,
    post_half: Option<u64>,
    laps: &mut Laps,
) -> Result<(TimingConditions, Option<QueuedCopies>), RecordError> {
    crate::trace::trace("capture: to the settle");
    let timing = settle_after_copies(&stream, ahead, laps)?;
    let mut kept = None;
    if let Some((table, upload)) = slab_table {
        if post_half.is_some() {
            kept = Some(table);
        } else {
            copies_done(table);
        }
        crate::spares::return_stream(upload);
    }
    crate::spares::return_stream(stream);
    crate::trace::trace("capture: settled");
    Ok((timing, kept))
}

/// Gives a copy's table back to the chunk kernels (its stream synchronised).
fn copies_done(table: QueuedCopies) {
    let _kept = crate::device_resources::with_chunk_kernels(|k| {
        k.copies_done(table);
        Ok(())
    });
}

/// Waits for the snapshot copies on `stream`, then settles the GPU (see `settle`) and waits for
/// that too (the measurement window is held from the stall's start).
///
/// `ahead`: the sweeps queued ahead (`sweep_ahead`).
fn settle_after_copies(
    stream: &Stream,
    ahead: SweepsAhead,
    laps: &mut Laps,
) -> Result<TimingConditions, RecordError> {
    // The copies first, on their own: their time is the snapshot's, not the settling's (when
    // sweeps were queued ahead, this waits for what is left of them too).
    stream
        .synchronize()
        .map_err(RecordError::cuda("waiting for the snapshot copies"))?;
    laps.lap("copies");
    crate::trace::trace("capture: snapshot copies waited for");
    let busy = laps.phases.last().is_some_and(|&(_, ns)| ns >= BUSY_NS);
    let ahead = ahead.counted();
    let timing = match settle(stream, busy, ahead) {
        Ok(settled) => settled,
        Err(why) => TimingConditions {
            skipped: Some(why),
            ..Default::default()
        },
    };
    // The kernel must not start before the sweeps are done.
    stream
        .synchronize()
        .map_err(RecordError::cuda("waiting for the settle sweeps"))?;
    laps.lap("settle");
    Ok(timing)
}

/// After the launch: duration, and the post-dispatch state (compared now for host snapshots,
/// copied to device scratch for the others).
pub fn after_launch(p: &mut Pending) -> Result<(), RecordError> {
    let t = Instant::now();
    let _kept = crate::retaining_alloc::CaptureScope::enter();
    // Held to the end of the post phase, whose frees and synchronisations would wait for the
    // writers' GPU work too; dropped on every way out.
    let _measuring = p.measuring.take();
    let mut laps = Laps::new();
    p.timer
        .finish(&p.stream)
        .map_err(RecordError::cuda("stopping the timer"))?;
    ctx_synchronize().map_err(RecordError::KernelFailed)?;
    laps.lap("kernel");
    p.data.dispatch.original_duration_ns = p.timer.elapsed_ns().ok();
    crate::trace::trace("capture: kernel done");
    let stream =
        crate::spares::spare_stream().map_err(RecordError::cuda("creating the snapshot stream"))?;
    crate::trace::trace("capture: post stream made");
    let half = match p.post_half.take() {
        Some((table, half)) => {
            // SAFETY: the slab copy's stream was synchronised by the settle; the regions are
            // the ones copied into the slab, the step done and the context synchronised.
            let queued = unsafe { crate::snapshot::copy_post_half(&table, &stream) };
            // Waited for, and the table given back, before any other post work: the chunk
            // kernels' row slot is empty since the slab's copy took its buffer, so the table
            // fills it and nothing is freed. Given back last, it replaced a buffer kept
            // meanwhile, and that `cuMemFree` waits for the whole context, the writer threads'
            // work on the GPU included (a training step's post phase took 3 to 10 ms so, on
            // an H100).
            let waited = stream.synchronize();
            copies_done(table);
            waited.map_err(RecordError::cuda("waiting for the slab's second half"))?;
            queued.ok().map(|()| half)
        }
        None => None,
    };
    crate::trace::trace("post: slab's second half copied");
    let post = post_states(
        &mut p.data.snapshots,
        &p.footprint,
        p.data.spill.as_mut(),
        &stream,
        half.is_some(),
    )?;
    // The last copies into post scratch are still queued on this non-blocking stream, which
    // nothing orders before the application's next work on its output, the writer's readback,
    // or `--memory touched`'s restore of the input over the same bytes (as a range does).
    stream
        .synchronize()
        .map_err(RecordError::cuda("waiting for the post-dispatch copies"))?;
    crate::spares::return_stream(stream);
    p.data.post = post;
    p.data.compare_later = half.map(|half| CompareLater {
        half,
        footprint: p.footprint.clone(),
    });
    laps.lap("post");
    crate::trace::trace("capture: post states kept");
    // The kernel's own run is not the capture's: the application waits for it anyway.
    let kernel_ns = laps.phases.first().map_or(0, |&(_, ns)| ns);
    p.data.stall_phases.extend(laps.phases);
    p.data.stall_ns += (t.elapsed().as_nanos() as u64).saturating_sub(kernel_ns);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: the sweeps queued before a long slab copy (they would add their time to a large
    // capture's stall instead of overlapping host work), or before a copy that is not the last
    // (a region left to copy after them, or a texture array to read).
    #[test]
    fn sweeps_go_first_only_before_a_short_last_copy() {
        assert!(sweeps_first(true, 36 << 20, false));
        assert!(sweeps_first(true, 0, false));
        assert!(!sweeps_first(true, SWEEPS_FIRST_MOST_BYTES + 1, false));
        assert!(!sweeps_first(false, 36 << 20, false));
        assert!(
            !sweeps_first(true, 36 << 20, true),
            "the switch keeps the order before"
        );
    }
}
