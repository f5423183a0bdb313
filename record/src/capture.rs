//! Taking one dispatch: before the launch (arguments, reachable memory, globals, code object)
//! and after it (the bytes it changed, its duration). Runs inside the launch callback, so the
//! application is stalled only while device memory is copied to the host.

use std::sync::Mutex;
use std::time::Instant;

use kreplay_cuda::cache::L2Flush;
use kreplay_cuda::texture::ForeignArray;
use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{
    copy_dtod_async, copy_dtoh, ctx_synchronize, pointer, ContextHandle, DeviceBuffer, Event,
    ForeignFunction, ForeignStream, PinnedBuffer, Stream,
};
use kreplay_format::{
    ArrayImage, DeviceInfo, Dispatch, LaunchAttribute, MemoryKind, ModuleGlobal, ModuleImage,
    Param, Region, RegionRole, Textures, TimingConditions, DEFAULT_CHUNK_SIZE,
};

use crate::device_resources::{scratch_allowed, with_chunk_kernels, with_sweep};
use crate::error::RecordError;
use crate::launch::LaunchView;
use crate::readback::{pack_changed, PackedRun};
use crate::spill::{OpenFile, Spill, Spilled};
use crate::walk::{walk, AddressSpace, Allocation, Limits, Roots, Walk, WalkError};

/// Regions larger than this are not scanned for pointers (pointer tables are small; scanning
/// gigabytes of floats finds nothing but noise).
const POINTER_SCAN_LIMIT: u64 = 64 << 20;
/// Most bytes one region grows to while joining contiguous VMM mappings.
const VMM_EXTENT_LIMIT: u64 = 64 << 30;

/// Where a snapshot's bytes are: copied to the host during the callback, or copied to a
/// device scratch buffer (2 TB/s, so the application barely waits) and brought to the host
/// later by the writer thread.
pub enum Bytes {
    Host(Vec<u8>),
    Device(DeviceBuffer),
}

/// A region and its bytes before (and after) the launch.
pub struct Snapshot {
    pub region: Region,
    /// Where to read it in this process (globals: their address here; others: same).
    pub device_addr: u64,
    pub pre: Bytes,
    /// Set after the launch for regions whose `pre` is on the device.
    pub post: Option<PostScratch>,
    /// Which chunks of `pre` hold a nonzero byte, when the GPU said (the others are written
    /// as zero chunks without being copied home).
    pub pre_nonzero: Option<Vec<bool>>,
    /// Written to the capture file during the stall (it did not fit in device scratch); `pre`
    /// is then empty.
    pub spilled: Option<Spilled>,
    /// The CUDA array whose texels the region holds (read through the array, not an address).
    pub array: Option<(ForeignArray, ArrayImage)>,
}

/// The post-dispatch bytes of a region snapshotted in device scratch.
pub struct PostScratch {
    /// The scratch (none when nothing changed).
    pub buf: Option<DeviceBuffer>,
    /// The chunks that changed, found on the GPU, and where each run is in `buf`; `None` when
    /// the GPU could not compare (`buf` then holds the whole region, compared on the host).
    pub runs: Option<Vec<PackedRun>>,
}

/// Page-locked buffer the pointer scan reads regions into (full PCIe speed, allocated once).
static STAGING: Mutex<Option<PinnedBuffer>> = Mutex::new(None);

/// Read sweeps over 4 x L2 run before the measured launch (see `settle`): at least this many,
const SETTLE_MIN_SWEEPS: u32 = 16;
/// (this many when the snapshot copies just kept the GPU busy for `BUSY_NS`: its clocks are up,
/// and two sweeps write back the copies' dirty lines and leave L2 empty),
const SETTLE_BUSY_MIN_SWEEPS: u32 = 2;
const BUSY_NS: u64 = 2_000_000;
/// and then more until two in a row take the same time within `SETTLE_STABLE`, up to this many
/// or this long (the application waits for the sweeps: after gigabytes of copies, power
/// management can keep the sweep times drifting for a hundred milliseconds; the capture then
/// says the clocks were not steady rather than stall the application for them).
const SETTLE_MAX_SWEEPS: u32 = 128;
const SETTLE_BUDGET: std::time::Duration = std::time::Duration::from_millis(2);
const SETTLE_STABLE: f64 = 0.02;
/// Before the measured launch: the snapshot copies left L2 full of dirty scratch lines, whose
/// write-backs would land inside the kernel's time, and the GPU may have idled at low clocks
/// (memory clocks drop within milliseconds of idling, e.g. while the application was stalled
/// by the capture before). Read sweeps over a buffer larger than L2 write those lines back and
/// keep the GPU busy until two sweeps in a row take the same time (the clocks are up), so the
/// in-app figure is the kernel's own duration with an empty L2 (what `kreplay play --cache
/// flush` replays: each sweep ends by discarding its own lines, see `cache`). Skipped (and said
/// so) when device memory is short. `KREPLAY_DEBUG_SETTLE=0` turns it off (a measurement aid).
fn settle(stream: &Stream, busy: bool) -> Result<TimingConditions, String> {
    if std::env::var_os("KREPLAY_DEBUG_SETTLE").is_some_and(|v| v == "0") {
        return Err("disabled".into());
    }
    with_sweep(|sweep| settle_with(sweep, stream, busy))
}

fn settle_with(sweep: &L2Flush, stream: &Stream, busy: bool) -> Result<TimingConditions, String> {
    let e = |e: kreplay_cuda::CudaError| e.to_string();
    let min = if busy {
        SETTLE_BUSY_MIN_SWEEPS
    } else {
        SETTLE_MIN_SWEEPS
    };
    for _ in 0..min - 2 {
        sweep.run(stream).map_err(e)?;
    }
    let (start, stop) = (Event::new().map_err(e)?, Event::new().map_err(e)?);
    let mut last: Option<u64> = None;
    let began = Instant::now();
    for n in min - 1..=SETTLE_MAX_SWEEPS {
        if n > min && began.elapsed() > SETTLE_BUDGET {
            return Ok(TimingConditions {
                settle_sweeps: n - 1,
                clocks_steady: false,
                l2_empty: sweep.empties(),
                skipped: None,
            });
        }
        start.record(stream).map_err(e)?;
        sweep.run(stream).map_err(e)?;
        stop.record(stream).map_err(e)?;
        stop.synchronize().map_err(e)?;
        let t = stop.elapsed_ns_since(&start).map_err(e)?;
        if let Some(prev) = last {
            if (t as f64 - prev as f64).abs() <= SETTLE_STABLE * prev as f64 {
                return Ok(TimingConditions {
                    settle_sweeps: n,
                    clocks_steady: true,
                    l2_empty: sweep.empties(),
                    skipped: None,
                });
            }
        }
        last = Some(t);
    }
    Ok(TimingConditions {
        settle_sweeps: SETTLE_MAX_SWEEPS,
        clocks_steady: false,
        l2_empty: sweep.empties(),
        skipped: None,
    })
}

/// The recorder's buffers that belong to a context about to be destroyed are freed while it
/// still exists: its L2 sweep, and the pinned staging buffer (page-locked memory dies with the
/// context that allocated it; the next capture makes a new one).
pub(crate) fn forget_context(context: usize) {
    crate::device_resources::forget_context(context);
    *lock_staging() = None;
}

pub(crate) fn lock_staging() -> std::sync::MutexGuard<'static, Option<PinnedBuffer>> {
    STAGING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Copies a region to a device scratch buffer on `stream` (the caller synchronises).
pub(crate) fn device_copy(addr: u64, size: u64, stream: &Stream) -> Option<DeviceBuffer> {
    if !scratch_allowed(size) {
        return None;
    }
    let buf = DeviceBuffer::new(size as usize).ok()?;
    // SAFETY: the destination is `buf`, `size` bytes of ours; the source is a region the walk
    // found: the application's allocation as the driver reports it, read with the context
    // synchronised (no Rust value of kreplay's lives there).
    unsafe { copy_dtod_async(buf.ptr(), addr, size as usize, stream) }.ok()?;
    Some(buf)
}

/// Post-dispatch chunks: every chunk whose bytes differ.
pub fn changed_chunks(region_id: u32, cs: usize, pre: &[u8], post: &[u8]) -> Vec<PostChunk> {
    pre.chunks(cs)
        .zip(post.chunks(cs))
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (_, b))| (region_id, (i * cs) as u64, b.to_vec()))
        .collect()
}

/// The post-dispatch state of a region whose pre bytes are in device scratch: the GPU compares
/// the scratch with the memory as the kernel left it, and only the chunks that changed are
/// copied to (packed) post scratch, so the application waits for a read of both and a copy of
/// the write set. Where the memory is not 16-byte aligned, the region is copied whole and the
/// two scratch buffers are compared; where the kernels cannot run, the whole copy is compared
/// on the host later. Also says which pre chunks are nonzero.
fn post_on_device(
    pre: &DeviceBuffer,
    addr: u64,
    region: &Region,
    stream: &Stream,
) -> Result<(PostScratch, Option<Vec<bool>>), RecordError> {
    let (size, cs) = (region.size, region.chunk_size);
    let no_scratch = |n: u64| RecordError::NoPostScratch(n);
    let scanned = with_chunk_kernels(|k| {
        // SAFETY: `pre` is our scratch copy of the region (`size` bytes); `addr` is the region
        // itself, the application's allocation, read after the dispatch with the context
        // synchronised.
        unsafe { k.scan(pre.ptr(), Some(addr), size, cs, stream) }
    });
    if let Ok(flags) = scanned {
        let (runs, total) = pack_changed(&flags.changed, cs, size);
        let buf = if total > 0 {
            if !scratch_allowed(total) {
                return Err(no_scratch(total));
            }
            let buf = DeviceBuffer::new(total as usize).map_err(|_| no_scratch(total))?;
            for r in &runs {
                // SAFETY: the run lies in the region (`pack_changed` clips runs to `size`) and
                // in `buf` (sized to the runs' total); the region is read as for the scan.
                unsafe {
                    copy_dtod_async(buf.ptr() + r.at, addr + r.offset, r.len as usize, stream)
                }
                .map_err(RecordError::cuda("copying the changed chunks"))?;
            }
            Some(buf)
        } else {
            None
        };
        let post = PostScratch {
            buf,
            runs: Some(runs),
        };
        return Ok((post, Some(flags.nonzero)));
    }
    let whole = device_copy(addr, size, stream).ok_or(no_scratch(size))?;
    stream
        .synchronize()
        .map_err(RecordError::cuda("waiting for the post-dispatch copy"))?;
    // SAFETY: both are our own scratch buffers of `size` bytes.
    match with_chunk_kernels(|k| unsafe { k.scan(pre.ptr(), Some(whole.ptr()), size, cs, stream) })
    {
        Ok(flags) => {
            // The runs stay where they are in the whole copy.
            let (runs, _) = pack_changed(&flags.changed, cs, size);
            let runs = runs
                .into_iter()
                .map(|r| PackedRun { at: r.offset, ..r })
                .collect();
            let post = PostScratch {
                buf: Some(whole),
                runs: Some(runs),
            };
            Ok((post, Some(flags.nonzero)))
        }
        Err(_) => Ok((
            PostScratch {
                buf: Some(whole),
                runs: None,
            },
            None,
        )),
    }
}

/// A capture between launch ENTER and EXIT.
pub struct Pending {
    pub correlation: u32,
    pub stream: ForeignStream,
    pub timer: GatedTimer,
    pub data: CaptureData,
    /// Held from the settle sweeps until the kernel completed (see `quiet`).
    pub measuring: Option<crate::quiet::Measuring>,
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
    pub notes: Vec<String>,
    /// Texture and surface objects in the arguments, and their arrays.
    pub textures: Textures,
    /// What the dispatch reads from the device heap, which is not captured (see `heap`).
    pub device_heap: Option<String>,
    /// How the original duration was measured.
    pub timing: TimingConditions,
    /// Where the dispatch came from, when it ran as a graph node.
    pub graph: Option<kreplay_format::GraphOrigin>,
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

/// A region that changed: (region id, chunk offset, post bytes).
pub type PostChunk = (u32, u64, Vec<u8>);

/// A snapshot's bytes as they are now, on the host.
fn read_now(s: &Snapshot) -> Result<Vec<u8>, RecordError> {
    match &s.array {
        Some((array, image)) => read_array(array, image, s.region.size),
        None => copy_region(s.device_addr, s.region.size),
    }
}

fn read_array(array: &ForeignArray, image: &ArrayImage, size: u64) -> Result<Vec<u8>, RecordError> {
    let n = usize::try_from(size).map_err(|_| RecordError::RegionTooLarge(size))?;
    let mut v = vec![0u8; n];
    array
        .read(&kreplay_engine::texture_desc::array_desc(image), &mut v)
        .map_err(|source| RecordError::Read {
            addr: 0,
            size,
            source,
        })?;
    Ok(v)
}

pub(crate) fn copy_region(addr: u64, size: u64) -> Result<Vec<u8>, RecordError> {
    let n = usize::try_from(size).map_err(|_| RecordError::RegionTooLarge(size))?;
    let mut v = vec![0u8; n];
    // SAFETY: callers pass a region the walk found (the application's allocation as the driver
    // reports it) or our own scratch, read with the context synchronised; no Rust value of
    // kreplay's lives in the application's memory.
    unsafe { copy_dtoh(&mut v, addr) }.map_err(|source| RecordError::Read {
        addr,
        size,
        source,
    })?;
    Ok(v)
}

fn memory_kind(addr: u64) -> MemoryKind {
    if pointer::is_host_memory(addr) {
        MemoryKind::HostMapped
    } else if pointer::is_managed(addr) {
        MemoryKind::Managed
    } else {
        MemoryKind::Device
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
}

/// The process's memory as the walk sees it: the driver's allocation queries, and reads
/// through the pinned staging buffer.
pub(crate) struct DeviceSpace<'a> {
    pub(crate) staging: &'a mut Option<PinnedBuffer>,
}

impl AddressSpace for DeviceSpace<'_> {
    fn allocation(&mut self, addr: u64) -> Option<Allocation> {
        let (base, size) = pointer::allocation_range(addr, VMM_EXTENT_LIMIT)?;
        Some(Allocation {
            base,
            size,
            kind: memory_kind(base),
        })
    }

    fn read(&mut self, base: u64, size: u64) -> Result<&[u8], WalkError> {
        let fail = |why: String| WalkError { base, size, why };
        let n = usize::try_from(size).map_err(|_| fail("too large".into()))?;
        // Sized to what is needed (pinning costs time while the application waits).
        if self
            .staging
            .as_ref()
            .is_none_or(|st| st.as_slice().len() < n)
        {
            let cap = n.next_power_of_two().max(1 << 20);
            *self.staging = None;
            *self.staging = Some(PinnedBuffer::new(cap).map_err(|e| fail(e.to_string()))?);
        }
        let Some(st) = self.staging.as_mut() else {
            return Err(fail("no staging buffer".into()));
        };
        let view = &mut st.as_mut_slice()[..n];
        crate::trace::trace("region to read for the pointer scan");
        // SAFETY: the walk reads an allocation the driver reported (`base`, `size`), with the
        // context synchronised; no Rust value of kreplay's lives there.
        unsafe { copy_dtoh(view, base) }.map_err(|e| fail(e.to_string()))?;
        crate::trace::trace("region read (the scan follows)");
        Ok(view)
    }
}

/// Copies every region the walk found: to device scratch when memory allows (the application
/// waits for a 2 TB/s copy, not for PCIe), to the host otherwise. Returns the snapshots and the
/// module globals they hold.
fn take_snapshots(
    found: &Walk,
    module_id: u32,
    stream: &Stream,
    open_file: Option<OpenFile<'_>>,
    spill: &mut Option<Spill>,
) -> Result<(Vec<Snapshot>, Vec<ModuleGlobal>), RecordError> {
    let mut snapshots = Vec::with_capacity(found.regions.len());
    let mut module_globals = Vec::new();
    for (id, r) in found.regions.iter().enumerate() {
        let region = Region {
            region_id: id as u32,
            address: r.base,
            size: r.size,
            kind: r.kind,
            role: r.role,
            chunk_size: DEFAULT_CHUNK_SIZE,
        };
        // Host-mapped memory is read straight to the host (a scratch copy would cross the bus
        // just the same).
        let scratch = (r.kind != MemoryKind::HostMapped)
            .then(|| device_copy(r.base, r.size, stream))
            .flatten();
        let mut spilled = None;
        let pre = match scratch {
            Some(b) => Bytes::Device(b),
            None => {
                // Too large for scratch: straight into the file where the GPU can digest it.
                let digests = (r.kind != MemoryKind::HostMapped)
                    .then_some(open_file)
                    .flatten()
                    .and_then(|open| {
                        crate::spill::digest(&region, r.base, stream)
                            .ok()
                            .map(|d| (open, d))
                    });
                match digests {
                    Some((open, d)) => {
                        if spill.is_none() {
                            *spill = Some(Spill::open(open)?);
                        }
                        let Some(sp) = spill.as_mut() else {
                            return Err(RecordError::NoContext);
                        };
                        spilled = Some(sp.pre(&region, r.base, d)?);
                        Bytes::Host(Vec::new())
                    }
                    None => Bytes::Host(copy_region(r.base, r.size)?),
                }
            }
        };
        if let Some(name) = &r.global {
            module_globals.push(ModuleGlobal {
                module_id,
                name: name.clone(),
                region_id: id as u32,
            });
        }
        snapshots.push(Snapshot {
            region,
            device_addr: r.base,
            pre,
            post: None,
            pre_nonzero: None,
            spilled,
            array: None,
        });
    }
    Ok((snapshots, module_globals))
}

/// The module's `__device__`/`__constant__` variables as the application's module holds them:
/// (name, address, size); those the driver does not resolve are left out.
pub(crate) fn resolve_globals(
    function: &ForeignFunction,
    objects: &[(String, u64)],
) -> Vec<(String, u64, u64)> {
    let Ok(module) = function.module() else {
        return Vec::new();
    };
    objects
        .iter()
        .filter_map(|(name, _)| module.global(name).ok().map(|(a, s)| (name.clone(), a, s)))
        .collect()
}

/// Which words point into the device heap, in words, when some do.
fn heap_note(found: &Walk) -> Option<String> {
    if found.heap_word_count == 0 {
        return None;
    }
    let shown: Vec<String> = found
        .heap_words
        .iter()
        .take(4)
        .map(|h| match h.region {
            None => format!("argument offset {} = {:#x}", h.offset, h.value),
            Some(r) => format!("region {r} offset {:#x} = {:#x}", h.offset, h.value),
        })
        .collect();
    let more = found.heap_word_count - shown.len() as u64;
    Some(format!(
        "{} word(s) point into the device heap (malloc inside kernels): {}{}. The heap cannot be read outside a kernel (the driver resolves none of its addresses), so it is not captured: a replay that follows these pointers reads memory that is not there",
        found.heap_word_count,
        shown.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    ))
}

/// Everything a dispatch can reach: the regions (walked from its arguments, module globals and
/// texture objects, following pointers in the memory read), and the texture objects found.
/// Call with the context synchronised.
pub(crate) fn reach(
    args: &[u8],
    layout: &[(u32, u32)],
    function: &ForeignFunction,
    module_objects: &[(String, u64)],
    allocations: &[(u64, u64, MemoryKind)],
) -> Result<(Walk, crate::textures::Found), RecordError> {
    let globals = resolve_globals(function, module_objects);
    crate::trace::trace_with(|| {
        format!(
            "globals resolved ({} of {})",
            globals.len(),
            module_objects.len()
        )
    });
    let textures = crate::textures::find(args, layout);
    // Only where a kernel that calls malloc has run (the probe changes nothing otherwise).
    let heap = kreplay_cuda::heap::probe().ok().flatten();
    crate::trace::trace("heap probed");
    let mut staging = lock_staging();
    let found = walk(
        &Roots {
            args,
            layout,
            globals: &globals,
            allocations,
            addresses: &textures.addresses,
            heap: heap.map(|h| h.bounds()),
        },
        &mut DeviceSpace {
            staging: &mut staging,
        },
        &Limits {
            scan_bytes: POINTER_SCAN_LIMIT,
            ..Limits::default()
        },
    )?;
    Ok((found, textures))
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

/// Snapshots everything the dispatch reads. Call with the context synchronised.
pub fn before_launch(input: PreInput<'_>) -> Result<Pending, RecordError> {
    let began = Instant::now();
    let mut laps = Laps::new();
    let view = input.view;
    let (args, layout) = (input.args, input.layout);
    ctx_synchronize().map_err(RecordError::cuda("synchronising before the snapshot"))?;
    laps.lap("synchronise");

    // Module globals, resolved in the application's module (restored by name at replay).
    let (found, mut textures) = reach(
        &args,
        &layout,
        &input.function,
        input.module_objects,
        &input.allocations,
    )?;
    laps.lap("walk");

    let stream = Stream::new().map_err(RecordError::cuda("creating the snapshot stream"))?;
    let mut spill = None;
    let (mut snapshots, module_globals) = take_snapshots(
        &found,
        input.module.module_id,
        &stream,
        input.open_file,
        &mut spill,
    )?;
    laps.lap("scratch");
    // Tables of handles the walk found in the memory it read (confirmed by the driver).
    textures.add_tables(&found.handle_tables);
    for o in &textures.objects {
        let captured = |a: u64| {
            found
                .regions
                .iter()
                .any(|r| a >= r.base && a < r.base + r.size)
        };
        if let Some(a) = o.resource.address().filter(|&a| !captured(a)) {
            textures.notes.push(format!(
                "texture object {} views {a:#x}, which is in no captured region (it was found in a handle table only); not captured",
                o.handle
            ));
        }
    }
    let first_array = snapshots.len() as u32;
    for (i, (array, image)) in textures.arrays.iter().enumerate() {
        let size = image.texel_bytes().unwrap_or(0);
        let pre = read_array(array, image, size)?;
        snapshots.push(Snapshot {
            region: Region {
                region_id: first_array + i as u32,
                address: 0,
                size,
                kind: MemoryKind::CudaArray,
                role: RegionRole::Argument,
                chunk_size: DEFAULT_CHUNK_SIZE,
            },
            device_addr: 0,
            pre: Bytes::Host(pre),
            post: None,
            pre_nonzero: None,
            spilled: None,
            array: Some((*array, image.clone())),
        });
    }
    laps.lap("arrays");
    let texture_description = crate::textures::describe(&textures, first_array);
    let device_heap = heap_note(&found);
    if let Some(n) = &device_heap {
        crate::diag!(
            "kreplay: {}: {n}",
            kreplay_protocol::config::short_kernel_name(&kreplay_protocol::config::demangle(
                &input.kernel_name
            ))
        );
    }

    // The copies first, on their own: their time is the snapshot's, not the settling's.
    stream
        .synchronize()
        .map_err(RecordError::cuda("waiting for the snapshot copies"))?;
    laps.lap("copies");
    let busy = laps.phases.last().is_some_and(|&(_, ns)| ns >= BUSY_NS);
    let measuring = crate::quiet::measure();
    let timing = match settle(&stream, busy) {
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

    // Last: the stream stays gated until the launch is queued (see GatedTimer).
    // SAFETY: inside the launch callback that decoded the view.
    let app_stream = unsafe { view.foreign_stream() };
    let mut timer = GatedTimer::new().map_err(RecordError::cuda("creating the timer"))?;
    timer
        .arm(&app_stream)
        .map_err(RecordError::cuda("arming the timer"))?;
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
        data: CaptureData {
            dispatch,
            snapshots,
            globals: module_globals,
            module: input.module,
            ptx_sources: Vec::new(),
            pointer_slots: found.pointer_slots,
            context: ContextHandle::current().ok(),
            post: Vec::new(),
            device_heap,
            notes: found.notes.into_iter().chain(textures.notes).collect(),
            textures: texture_description,
            timing,
            graph: None,
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

/// After the launch: duration, and the post-dispatch state (compared now for host snapshots,
/// copied to device scratch for the others).
pub fn after_launch(p: &mut Pending) -> Result<(), RecordError> {
    let t = Instant::now();
    let mut laps = Laps::new();
    p.timer
        .finish(&p.stream)
        .map_err(RecordError::cuda("stopping the timer"))?;
    let done = ctx_synchronize().map_err(RecordError::KernelFailed);
    p.measuring = None;
    done?;
    laps.lap("kernel");
    p.data.dispatch.original_duration_ns = p.timer.elapsed_ns().ok();
    let stream = Stream::new().map_err(RecordError::cuda("creating the snapshot stream"))?;
    let mut post = Vec::new();
    for s in &mut p.data.snapshots {
        if let Some(before) = &mut s.spilled {
            let Some(spill) = p.data.spill.as_mut() else {
                return Err(RecordError::NoContext);
            };
            let after = crate::spill::digest(&s.region, s.device_addr, &stream)?;
            before.raw += spill.post(&s.region, s.device_addr, before, &after)?;
            continue;
        }
        match &s.pre {
            Bytes::Host(pre) => {
                let now = read_now(s)?;
                post.extend(changed_chunks(
                    s.region.region_id,
                    s.region.chunk_size as usize,
                    pre,
                    &now,
                ));
            }
            Bytes::Device(pre) => {
                let (post, nonzero) = post_on_device(pre, s.device_addr, &s.region, &stream)?;
                s.post = Some(post);
                s.pre_nonzero = nonzero;
            }
        }
    }
    stream
        .synchronize()
        .map_err(RecordError::cuda("waiting for the post-dispatch copies"))?;
    p.data.post = post;
    laps.lap("post");
    // The kernel's own run is not the capture's: the application waits for it anyway.
    let kernel_ns = laps.phases.first().map_or(0, |&(_, ns)| ns);
    p.data.stall_phases.extend(laps.phases);
    p.data.stall_ns += (t.elapsed().as_nanos() as u64).saturating_sub(kernel_ns);
    Ok(())
}
