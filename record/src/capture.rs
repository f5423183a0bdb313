//! Taking one dispatch: before the launch (arguments, reachable memory, globals, code object)
//! and after it (the bytes it changed, its duration). Runs inside the launch callback, so the
//! application is stalled only while device memory is copied to the host.

use std::sync::Arc;
use std::time::Instant;

use kreplay_cuda::texture::ForeignArray;
use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{
    copy_dtod_async, copy_dtoh, ctx_synchronize, ContextHandle, DeviceBuffer, ForeignFunction,
    ForeignStream, Stream,
};
use kreplay_engine::write_set::{ByteRange, Evidence};
use kreplay_format::{
    ArrayImage, DeviceInfo, Dispatch, LaunchAttribute, MemoryKind, ModuleGlobal, ModuleImage,
    Param, Region, RegionRole, Textures, TimingConditions, DEFAULT_CHUNK_SIZE,
};

use crate::device_resources::{scratch_allowed, with_chunk_kernels};
use crate::error::RecordError;
use crate::footprint::{Footprint, Reads, RegionSpan, Step};
use crate::launch::LaunchView;
use crate::reachable::heap_note;
use crate::readback::{self, PackedRun};
use crate::settle::{settle, BUSY_NS};
use crate::spill::{OpenFile, Spill, Spilled};
use crate::walk::Walk;

// The reachable adapter moved to `reachable`; the profile and graph paths still import these
// from here.
pub(crate) use crate::reachable::{lock_staging, reach, resolve_globals, DeviceSpace};

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
    /// The ranges written, found on the GPU, and where each run is in `buf`; `None` when the
    /// GPU could not compare (`buf` then holds the whole region, compared on the host).
    pub runs: Option<Vec<PackedRun>>,
    /// Decides the write set when the host compares (`runs` is `None`).
    pub footprint: Arc<dyn Footprint>,
}

/// The recorder's buffers that belong to a context about to be destroyed are freed while it
/// still exists: its L2 sweep, and the pinned staging buffer (page-locked memory dies with the
/// context that allocated it; the next capture makes a new one).
pub(crate) fn forget_context(context: usize) {
    crate::device_resources::forget_context(context);
    crate::reachable::forget_staging();
}

/// Copies a region to a device scratch buffer on `stream` (the caller synchronises).
pub(crate) fn device_copy(addr: u64, size: u64, stream: &Stream) -> Option<DeviceBuffer> {
    if !scratch_allowed(size) {
        return None;
    }
    let buf = DeviceBuffer::new(size as usize).ok()?;
    copy_dtod_async(buf.ptr(), addr, size as usize, stream).ok()?;
    Some(buf)
}

/// Post-dispatch chunks of region `region_id` from its bytes after the step: the `written`
/// ranges, cut into chunks of `chunk` bytes.
pub(crate) fn post_chunks(
    region_id: u32,
    written: &[ByteRange],
    chunk: u64,
    after: &[u8],
) -> Vec<PostChunk> {
    written
        .iter()
        .flat_map(|w| w.pieces(chunk))
        // Never past the bytes there are (a range past them has nothing to store).
        .filter_map(|c| {
            let bytes = after.get(c.offset as usize..c.end() as usize)?;
            Some((region_id, c.offset, bytes.to_vec()))
        })
        .collect()
}

/// The post-dispatch state of a region whose pre bytes are in device scratch: the GPU compares
/// the scratch with the memory as the kernel left it, and only the chunks that changed are
/// copied to (packed) post scratch, so the application waits for a read of both and a copy of
/// the write set. Where the memory is not 16-byte aligned, the region is copied whole and the
/// two scratch buffers are compared; where the kernels cannot run, the whole copy is compared
/// on the host later. Also says which pre chunks are nonzero.
fn post_on_device(
    footprint: &Arc<dyn Footprint>,
    pre: &DeviceBuffer,
    addr: u64,
    region: &Region,
    stream: &Stream,
) -> Result<(PostScratch, Option<Vec<bool>>), RecordError> {
    let (size, cs) = (region.size, region.chunk_size);
    let span = RegionSpan::of(region, addr);
    let no_scratch = |n: u64| RecordError::NoPostScratch(n);
    let scratch = |buf, runs| PostScratch {
        buf,
        runs,
        footprint: footprint.clone(),
    };
    if let Ok(flags) = with_chunk_kernels(|k| k.scan(pre.ptr(), Some(addr), size, cs, stream)) {
        let written = footprint.written(span, Evidence::Changed(&flags.changed));
        let (runs, total) = readback::pack(&written);
        let buf = if total > 0 {
            if !scratch_allowed(total) {
                return Err(no_scratch(total));
            }
            let buf = DeviceBuffer::new(total as usize).map_err(|_| no_scratch(total))?;
            for r in &runs {
                copy_dtod_async(buf.ptr() + r.at, addr + r.offset, r.len as usize, stream)
                    .map_err(RecordError::cuda("copying the changed chunks"))?;
            }
            Some(buf)
        } else {
            None
        };
        return Ok((scratch(buf, Some(runs)), Some(flags.nonzero)));
    }
    let whole = device_copy(addr, size, stream).ok_or(no_scratch(size))?;
    stream
        .synchronize()
        .map_err(RecordError::cuda("waiting for the post-dispatch copy"))?;
    match with_chunk_kernels(|k| k.scan(pre.ptr(), Some(whole.ptr()), size, cs, stream)) {
        Ok(flags) => {
            // The runs stay where they are in the whole copy.
            let written = footprint.written(span, Evidence::Changed(&flags.changed));
            let runs = readback::in_place(&written);
            Ok((scratch(Some(whole), Some(runs)), Some(flags.nonzero)))
        }
        Err(_) => Ok((scratch(Some(whole), None), None)),
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
    /// What the dispatch reads and writes (it decides the post-dispatch state).
    pub footprint: Arc<dyn Footprint>,
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
        .read(image, &mut v)
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
    copy_dtoh(&mut v, addr).map_err(|source| RecordError::Read { addr, size, source })?;
    Ok(v)
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

    let footprint = crate::footprint::for_capture();
    // Module globals, resolved in the application's module (restored by name at replay).
    let Reads {
        walk: found,
        mut textures,
    } = footprint.reads(&Step {
        args: &args,
        layout: &layout,
        function: &input.function,
        module_objects: input.module_objects,
        allocations: &input.allocations,
    })?;
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
    note_uncaptured_views(&found, &mut textures);
    let first_array = snapshots.len() as u32;
    snapshots.extend(array_snapshots(&textures, first_array)?);
    laps.lap("arrays");
    let texture_description = crate::textures::describe(&textures, first_array);
    let device_heap = heap_note(&found);
    if let Some(n) = &device_heap {
        say_about_the_heap(&input.kernel_name, n);
    }
    let (timing, measuring) = settle_after_copies(&stream, &mut laps)?;

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
        footprint,
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

/// The CUDA arrays behind the texture objects, read to the host, as regions numbered from
/// `first_id`.
fn array_snapshots(
    textures: &crate::textures::Found,
    first_id: u32,
) -> Result<Vec<Snapshot>, RecordError> {
    let mut snapshots = Vec::with_capacity(textures.arrays.len());
    for (i, (array, image)) in textures.arrays.iter().enumerate() {
        let size = image.texel_bytes().unwrap_or(0);
        let pre = read_array(array, image, size)?;
        snapshots.push(Snapshot {
            region: Region {
                region_id: first_id + i as u32,
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
    Ok(snapshots)
}

/// Waits for the snapshot copies on `stream`, then settles the GPU (see `settle`) and waits for
/// that too; the measurement window is held from the settling on.
fn settle_after_copies(
    stream: &Stream,
    laps: &mut Laps,
) -> Result<(TimingConditions, crate::quiet::Measuring), RecordError> {
    // The copies first, on their own: their time is the snapshot's, not the settling's.
    stream
        .synchronize()
        .map_err(RecordError::cuda("waiting for the snapshot copies"))?;
    laps.lap("copies");
    let busy = laps.phases.last().is_some_and(|&(_, ns)| ns >= BUSY_NS);
    let measuring = crate::quiet::measure();
    let timing = match settle(stream, busy) {
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
    Ok((timing, measuring))
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
        let span = RegionSpan::of(&s.region, s.device_addr);
        if let Some(before) = &mut s.spilled {
            let Some(spill) = p.data.spill.as_mut() else {
                return Err(RecordError::NoContext);
            };
            let after = crate::spill::digest(&s.region, s.device_addr, &stream)?;
            let evidence = Evidence::Digests {
                before: &before.digests,
                after: &after.digests,
            };
            let written = p.footprint.written(span, evidence);
            before.raw += spill.post(&s.region, s.device_addr, &written)?;
            continue;
        }
        match &s.pre {
            Bytes::Host(pre) => {
                let now = read_now(s)?;
                let evidence = Evidence::Bytes {
                    before: pre,
                    after: &now,
                };
                let written = p.footprint.written(span, evidence);
                let (id, chunk) = (s.region.region_id, s.region.chunk_size);
                post.extend(post_chunks(id, &written, chunk, &now));
            }
            Bytes::Device(pre) => {
                let (post, nonzero) =
                    post_on_device(&p.footprint, pre, s.device_addr, &s.region, &stream)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::{in_place, pack};
    use kreplay_engine::write_set::written;
    use proptest::prelude::*;

    /// The host comparison as it was before the write-set function: every chunk whose bytes
    /// differ, as a post chunk.
    fn chunkwise(region_id: u32, cs: usize, pre: &[u8], post: &[u8]) -> Vec<PostChunk> {
        pre.chunks(cs)
            .zip(post.chunks(cs))
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, (_, b))| (region_id, (i * cs) as u64, b.to_vec()))
            .collect()
    }

    /// The GPU flags' packing as it was: runs of changed chunks end to end.
    fn packed(changed: &[bool], chunk: u64, size: u64) -> (Vec<PackedRun>, u64) {
        let mut runs = Vec::new();
        let mut at = 0;
        for (first, count) in kreplay_cuda::chunks::runs(changed, true, usize::MAX) {
            let offset = first as u64 * chunk;
            let len = (count as u64 * chunk).min(size.saturating_sub(offset));
            if len > 0 {
                runs.push(PackedRun { offset, len, at });
                at += len;
            }
        }
        (runs, at)
    }

    #[test]
    fn post_chunks_cut_ranges_at_chunk_size_and_stop_at_the_bytes_there_are() {
        let after: Vec<u8> = (0..10).collect();
        let r = |offset, len| ByteRange { offset, len };
        assert_eq!(
            post_chunks(7, &[r(0, 6), r(8, 2)], 4, &after),
            vec![
                (7, 0, vec![0, 1, 2, 3]),
                (7, 4, vec![4, 5]),
                (7, 8, vec![8, 9])
            ]
        );
        assert_eq!(post_chunks(7, &[r(8, 4)], 4, &after), vec![]);
    }

    proptest! {
        #[test]
        fn the_write_set_path_stores_what_the_chunkwise_compare_stored(
            pre in proptest::collection::vec(0u8..2, 0..300),
            flips in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
            chunk in 1u64..33,
        ) {
            let mut post = pre.clone();
            for f in &flips {
                if !post.is_empty() {
                    let i = f.index(post.len());
                    post[i] ^= 1;
                }
            }
            let size = pre.len() as u64;
            let evidence = Evidence::Bytes { before: &pre, after: &post };
            let ranges = written(evidence, chunk, size);
            prop_assert_eq!(
                post_chunks(3, &ranges, chunk, &post),
                chunkwise(3, chunk as usize, &pre, &post)
            );
            let n = chunk as usize;
            // A scan rounds the flags up to whole chunks, maybe past the region.
            let mut flags: Vec<bool> =
                pre.chunks(n).zip(post.chunks(n)).map(|(a, b)| a != b).collect();
            flags.push(true);
            let ranges = written(Evidence::Changed(&flags), chunk, size);
            let old = packed(&flags, chunk, size);
            prop_assert_eq!(pack(&ranges), old.clone());
            let home: Vec<PackedRun> =
                old.0.into_iter().map(|r| PackedRun { at: r.offset, ..r }).collect();
            prop_assert_eq!(in_place(&ranges), home);
        }
    }
}
