//! A region's bytes around one step: before it (copied to device scratch, to the host, or
//! straight into the capture file where neither holds them) and after it (what the footprint
//! says the step wrote, from a comparison made where the bytes are).

use std::sync::Arc;

use kreplay_cuda::many::{ManyScan, QueuedCopies};
use kreplay_cuda::texture::ForeignArray;
use kreplay_cuda::{copy_dtod_async, copy_dtoh, DeviceBuffer, Stream};
use kreplay_engine::write_set::{ByteRange, Evidence};
use kreplay_format::{
    ArrayImage, MemoryKind, ModuleGlobal, Region, RegionRole, DEFAULT_CHUNK_SIZE,
};

use crate::device_resources::{scratch_allowed, with_chunk_kernels};
use crate::error::RecordError;
use crate::footprint::{Footprint, RegionSpan};
use crate::reachable::WalkCopies;
use crate::readback::{self, PackedRun};
use crate::spill::{OpenFile, Spill, Spilled};
use crate::walk::Walk;

/// Where a snapshot's bytes are: copied to the host during the callback, or copied to a
/// device scratch buffer (2 TB/s, so the application barely waits) and brought to the host
/// later by the writer thread.
pub enum Bytes {
    Host(Vec<u8>),
    Device(Scratch),
}

/// Device scratch holding one region's bytes: a buffer of its own, or a stretch of a slab that
/// many small regions share (one allocation and one copy launch for all of them, where one
/// each cost a pointer table's 10,000 allocations 17 us apiece); the slab is freed with the
/// last stretch dropped.
pub struct Scratch {
    buf: Arc<DeviceBuffer>,
    at: u64,
    len: usize,
    in_slab: bool,
}

impl Scratch {
    pub fn own(buf: DeviceBuffer) -> Scratch {
        let len = buf.len();
        Scratch {
            buf: Arc::new(buf),
            at: 0,
            len,
            in_slab: false,
        }
    }

    /// `len` bytes at `at` of `slab` (the caller's plan keeps them inside it).
    fn stretch(slab: &Arc<DeviceBuffer>, at: u64, len: usize) -> Scratch {
        Scratch {
            buf: slab.clone(),
            at,
            len,
            in_slab: true,
        }
    }

    /// The same length `by` bytes further into the same slab (its second half, see
    /// `queue_into_slab`); the caller's plan keeps them inside it.
    pub(crate) fn shifted(&self, by: u64) -> Scratch {
        Scratch {
            buf: self.buf.clone(),
            at: self.at + by,
            len: self.len,
            in_slab: self.in_slab,
        }
    }

    /// Device address of the first byte.
    pub fn ptr(&self) -> u64 {
        self.buf.ptr() + self.at
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the bytes share a slab with other regions' (they are then compared after the
    /// step together, see `post_many`).
    pub fn in_slab(&self) -> bool {
        self.in_slab
    }
}

/// Regions at most this large share a slab of device scratch.
pub(crate) const SLAB_REGION_BYTES: u64 = crate::reachable::BATCH_REGION_BYTES;
/// Where each region starts in a slab (the chunk kernels' vectors want 16 bytes; 256 is what
/// `cuMemAlloc` gives each allocation).
const SLAB_ALIGN: u64 = 256;

/// Where each region's bytes go in a slab shared by the small ones: per region its offset
/// (`None`: not in the slab), and the slab's length. `regions` are (size, whether it may go
/// there: a kernel can read it). No slab for fewer than two regions.
pub(crate) fn slab_plan(regions: &[(u64, bool)]) -> (Vec<Option<u64>>, u64) {
    let fits = |&(size, ok): &(u64, bool)| ok && size > 0 && size <= SLAB_REGION_BYTES;
    if regions.iter().filter(|r| fits(r)).count() < 2 {
        return (vec![None; regions.len()], 0);
    }
    let mut total = 0u64;
    let at = regions
        .iter()
        .map(|r| {
            fits(r).then(|| {
                let at = total;
                total += r.0.next_multiple_of(SLAB_ALIGN);
                at
            })
        })
        .collect();
    (at, total)
}

/// One device buffer of `len` bytes for a slab, when the scratch rule allows it.
fn new_slab(len: u64) -> Option<Arc<DeviceBuffer>> {
    if !scratch_allowed(len) {
        return None;
    }
    DeviceBuffer::new(usize::try_from(len).ok()?)
        .ok()
        .map(Arc::new)
}

/// A slab of small regions' pre bytes, and each region's offset in it (`None`: not there).
pub(crate) type Slab = (Arc<DeviceBuffer>, Vec<Option<u64>>);

/// Where `found`'s small regions go in a slab (`slab_plan` over those a kernel may read that
/// are not host memory): per region its offset, and the slab's length.
pub(crate) fn slab_placement(found: &Walk) -> (Vec<Option<u64>>, u64) {
    let eligible: Vec<(u64, bool)> = found
        .regions
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let readable = found.kernel_readable.get(i).copied().unwrap_or(false);
            (r.size, readable && r.kind != MemoryKind::HostMapped)
        })
        .collect();
    slab_plan(&eligible)
}

/// One copy (destination, source, bytes).
type SlabCopy = (u64, u64, u64);

/// Where a slab's second half starts, and the copies into it.
type PostHalf = (u64, Vec<SlabCopy>);

/// A slab at most this long gets a second half for the regions' bytes after the step
/// (`queue_into_slab`): twice its memory, for a post-dispatch phase of one launch.
pub(crate) const POST_HALF_MOST_BYTES: u64 = 256 << 20;

/// The slab `placement` sizes, allocated, and the copies of `found`'s regions into it. With
/// `post_half` (and a slab of at most `POST_HALF_MOST_BYTES` that the scratch rule allows
/// twice over) the slab is twice as long, and the same copies into its second half come too,
/// with where that half starts.
fn slab_and_copies(
    found: &Walk,
    (at, total): (Vec<Option<u64>>, u64),
    post_half: bool,
) -> Option<(Slab, Vec<SlabCopy>, Option<PostHalf>)> {
    if total == 0 {
        return None;
    }
    let doubled = (post_half && total <= POST_HALF_MOST_BYTES)
        .then(|| new_slab(2 * total))
        .flatten();
    let half = doubled.is_some().then_some(total);
    let slab = match doubled {
        Some(slab) => slab,
        None => new_slab(total)?,
    };
    crate::trace::trace("snapshot slab allocated");
    let copies: Vec<SlabCopy> = found
        .regions
        .iter()
        .zip(&at)
        .filter_map(|(r, a)| a.map(|a| (slab.ptr() + a, r.base, r.size)))
        .collect();
    let later = half.map(|h| (h, copies.iter().map(|&(d, s, n)| (d + h, s, n)).collect()));
    Some(((slab, at), copies, later))
}

/// The small regions of `found` copied into one slab by one launch, as `slab_plan` places them;
/// `None` when there is no slab (too few, no room, the kernel cannot run): each region then
/// takes its own scratch (`take_snapshots`).
pub(crate) fn copy_into_slab(found: &Walk, stream: &Stream) -> Option<Slab> {
    let (slab, copies, _) = slab_and_copies(found, slab_placement(found), false)?;
    // SAFETY: each destination is a stretch of our slab that `slab_plan` sized for its region;
    // each source is a region the walk found that a kernel of this device may read whole
    // (`kernel_readable`), read with the context synchronised.
    with_chunk_kernels(|k| unsafe { k.copy_many(&copies, stream) }).ok()?;
    crate::trace::trace("snapshot slab copied");
    Some(slab)
}

/// A slab whose copy is queued (`queue_into_slab`).
pub(crate) struct QueuedSlab {
    pub slab: Slab,
    /// The copy's table, to give back (`copies_done`) once its stream is synchronised; when
    /// the slab has a second half, it holds that half's copies too (`copy_later`).
    pub table: QueuedCopies,
    /// Where the slab's second half starts: each region's bytes after the step go there, at
    /// its offset in the first (`copy_post_half`); none when the slab has no second half.
    pub post_half: Option<u64>,
    /// Every region's snapshot and the module globals, when the slab holds every region:
    /// built on a helper thread while this one queued the copy (`built_beside`); `None`:
    /// `take_snapshots` builds them.
    pub snapshots: Option<Built>,
}

/// Snapshots and the module globals they hold (`take_snapshots`' result).
pub(crate) type Built = (Vec<Snapshot>, Vec<ModuleGlobal>);

/// `copy_into_slab` at `placement` (`slab_placement`), the copy queued on `stream` and not
/// waited for (its table uploaded on `upload`, see `queue_copy_many`): the settle's wait for
/// the snapshot copies waits for it. Give the table back (`copies_done`) after that wait, or
/// after `copy_post_half` when the slab has a second half (`post_half`, see `slab_and_copies`).
///
/// When the slab holds every region, their snapshots are built on a helper thread meanwhile
/// (`built_beside`): host work alone, 0.35 ms for a pointer table's 10,002 regions on an
/// H100 host (up to twice that on a slower one), beside the copy rows' 0.23 ms.
pub(crate) fn queue_into_slab(
    found: &Walk,
    placement: (Vec<Option<u64>>, u64),
    (post_half, module_id): (bool, u32),
    stream: &Stream,
    upload: &Stream,
) -> Option<QueuedSlab> {
    let (slab, copies, later) = slab_and_copies(found, placement, post_half)?;
    let (half, later) = later.map_or((None, Vec::new()), |(h, l)| (Some(h), l));
    let (table, snapshots) = std::thread::scope(|scope| {
        let helper = built_beside(scope, found, &slab, module_id);
        // SAFETY: as in `copy_into_slab`; the regions are read with the context synchronised,
        // and the application's next work waits for the settle, which waits for `stream`. The
        // later copies are `copy_post_half`'s.
        let table = with_chunk_kernels(|k| unsafe {
            k.queue_copies_keeping(&copies, &later, stream, upload)
        });
        // A helper that panicked, or could not place a region, built nothing:
        // `take_snapshots` does it here.
        (table, helper.and_then(|h| h.join().ok().flatten()))
    });
    let table = table.ok()?;
    crate::trace::trace(if snapshots.is_some() {
        "snapshot slab copy queued, snapshots built beside it"
    } else {
        "snapshot slab copy queued"
    });
    Some(QueuedSlab {
        slab,
        table,
        post_half: half,
        snapshots,
    })
}

/// The fewest regions whose snapshots are built on a helper thread: making and joining one
/// costs 36-123 us (session 23, H100), more than a few hundred snapshots take to build.
const BESIDE_LEAST_REGIONS: usize = 1024;

/// Starts building every region's snapshot on a helper thread of `scope` (`slab_snapshots`),
/// when `slab` holds every region of `found` and there are at least `BESIDE_LEAST_REGIONS`;
/// `None` otherwise, or when no thread could be made (the caller's thread then builds them).
fn built_beside<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    found: &'scope Walk,
    slab: &'scope Slab,
    module_id: u32,
) -> Option<std::thread::ScopedJoinHandle<'scope, Option<Built>>> {
    if !beside_pays(&slab.1, found.regions.len()) {
        return None;
    }
    std::thread::Builder::new()
        .name("kreplay-snapshots".into())
        .spawn_scoped(scope, move || {
            // The capture's large host blocks come from the recorder's kept pages on this
            // thread too (the snapshots' vector: about 2 MiB for 10,000 regions).
            let _kept = crate::retaining_alloc::CaptureScope::enter();
            slab_snapshots(found, &slab.1, module_id, |at, len| {
                Bytes::Device(Scratch::stretch(&slab.0, at, len))
            })
        })
        .ok()
}

/// Whether a slab placement puts each of `regions` regions in the slab.
fn every_region_in_slab(at: &[Option<u64>], regions: usize) -> bool {
    at.len() == regions && at.iter().all(Option::is_some)
}

/// Whether `built_beside` starts a helper: every region in the slab, and enough of them.
fn beside_pays(at: &[Option<u64>], regions: usize) -> bool {
    regions >= BESIDE_LEAST_REGIONS && every_region_in_slab(at, regions)
}

/// `take_snapshots`' result when the slab holds every region (`every_region_in_slab`): no
/// copy, no spill, no driver call; `stretch(at, len)` is a region's bytes in the slab. `None`
/// when a region has no place in it or a size beyond `usize` (then `take_snapshots` makes
/// them all, copying such a region itself; an empty snapshot would lose its bytes).
fn slab_snapshots(
    found: &Walk,
    at: &[Option<u64>],
    module_id: u32,
    stretch: impl Fn(u64, usize) -> Bytes,
) -> Option<Built> {
    if at.len() != found.regions.len() {
        return None;
    }
    let mut snapshots = Vec::with_capacity(found.regions.len());
    let mut module_globals = Vec::new();
    for ((id, r), at) in found.regions.iter().enumerate().zip(at) {
        let pre = stretch((*at)?, usize::try_from(r.size).ok()?);
        module_globals.extend(global_of(r, id, module_id));
        snapshots.push(snapshot_of(found, id, region_of(id, r), pre, None));
    }
    Some((snapshots, module_globals))
}

/// The capture's region `id` for a region the walk found.
fn region_of(id: usize, r: &crate::walk::FoundRegion) -> Region {
    Region {
        region_id: id as u32,
        address: r.base,
        size: r.size,
        kind: r.kind,
        role: r.role,
        chunk_size: DEFAULT_CHUNK_SIZE,
    }
}

/// The module global region `id` holds, if it holds one.
fn global_of(r: &crate::walk::FoundRegion, id: usize, module_id: u32) -> Option<ModuleGlobal> {
    r.global.as_ref().map(|name| ModuleGlobal {
        module_id,
        name: name.clone(),
        region_id: id as u32,
    })
}

/// Region `id`'s snapshot, its bytes before the step `pre` (or spilled to the file).
fn snapshot_of(
    found: &Walk,
    id: usize,
    region: Region,
    pre: Bytes,
    spilled: Option<Box<Spilled>>,
) -> Snapshot {
    Snapshot {
        device_addr: region.address,
        region,
        pre,
        post: None,
        pre_nonzero: None,
        spilled,
        array: None,
        kernel_readable: found.kernel_readable.get(id).copied().unwrap_or(false),
        touched: None,
    }
}

/// Queues on `stream` the copy of the slab's regions as the step left them into its second
/// half (`QueuedSlab::post_half`), one launch of the rows uploaded with the slab's own copy.
/// The caller synchronises `stream`, then gives the table back.
///
/// # Safety
/// The stream the slab's copy was queued on has been synchronised, and the regions are the
/// application's allocations the slab was copied from, still allocated (the step is done and
/// the application waits, the context synchronised).
pub(crate) unsafe fn copy_post_half(table: &QueuedCopies, stream: &Stream) -> Result<(), String> {
    // SAFETY: the later rows copy each region (a kernel of this device may read it, as for the
    // slab's copy) into its stretch of the slab's second half, ours; the contract covers the
    // upload and the regions.
    with_chunk_kernels(|k| unsafe { k.copy_later(table, stream) })
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
    pub pre_nonzero: Option<ChunkBits>,
    /// Written to the capture file during the stall (it did not fit in device scratch); `pre`
    /// is then empty. This and `array` are boxed: rare, and a pointer table's 10,000
    /// snapshots are built in fresh pages while the application waits (80 bytes less each).
    pub spilled: Option<Box<Spilled>>,
    /// The CUDA array whose texels the region holds (read through the array, not an address).
    pub array: Option<Box<(ForeignArray, ArrayImage)>>,
    /// The present ranges (region offsets, merged pages) when the capture holds only the
    /// pages the step touched (`--memory touched`); `None`: the region whole. Every absent
    /// byte goes to the file as zero (see `mask_absent`); a region spilled to the file during
    /// the stall is held whole.
    pub touched: Option<Vec<(u64, u64)>>,
    /// A kernel of this device may read the region where it lies (`Walk::kernel_readable`):
    /// after the step the GPU compares it in place; otherwise (managed memory, another GPU's)
    /// it is copied whole first and the two copies compared.
    pub kernel_readable: bool,
}

/// A flag per chunk of a region, without an allocation for a region of one chunk: a pointer
/// table's 10,000 small regions took an allocation each, in fresh pages, while the application
/// waited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkBits {
    One([bool; 1]),
    Many(Vec<bool>),
}

impl ChunkBits {
    pub fn of(flags: &[bool]) -> ChunkBits {
        match flags {
            &[one] => ChunkBits::One([one]),
            many => ChunkBits::Many(many.to_vec()),
        }
    }
}

impl From<Vec<bool>> for ChunkBits {
    /// Keeps the flags without a copy (one flag inline).
    fn from(flags: Vec<bool>) -> ChunkBits {
        match flags[..] {
            [one] => ChunkBits::One([one]),
            _ => ChunkBits::Many(flags),
        }
    }
}

impl std::ops::Deref for ChunkBits {
    type Target = [bool];
    fn deref(&self) -> &[bool] {
        match self {
            ChunkBits::One(one) => one,
            ChunkBits::Many(many) => many,
        }
    }
}

/// The post-dispatch bytes of a region snapshotted in device scratch.
pub struct PostScratch {
    /// The scratch (none when nothing changed).
    pub buf: Option<Scratch>,
    /// The ranges written, found on the GPU, and where each run is in `buf`; `None` when the
    /// GPU could not compare (`buf` then holds the whole region, compared on the host).
    pub runs: Option<Vec<PackedRun>>,
    /// Decides the write set when the host compares (`runs` is `None`).
    pub footprint: Arc<dyn Footprint>,
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
/// the write set. Where the memory is not 16-byte aligned or a kernel may not read it where it
/// lies (managed memory would migrate, another GPU's would fault), the region is copied whole
/// and the two scratch buffers are compared; where the kernels cannot run, the whole copy is compared
/// on the host later. Also says which pre chunks are nonzero.
fn post_on_device(
    footprint: &Arc<dyn Footprint>,
    pre: &Scratch,
    (addr, in_place): (u64, bool),
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
    let scanned = in_place.then(|| {
        with_chunk_kernels(|k| {
            // SAFETY: `pre` is our scratch copy of the region (`size` bytes); `addr` is the
            // region itself, the application's allocation, which a kernel of this device may
            // read (`in_place`), read after the dispatch with the context synchronised.
            unsafe { k.scan(pre.ptr(), Some(addr), size, cs, stream) }
        })
    });
    if let Some(Ok(flags)) = scanned {
        let written = footprint.written(span, Evidence::Changed(&flags.changed));
        let (runs, total) = readback::pack(&written);
        let buf = if total > 0 {
            if !scratch_allowed(total) {
                return Err(no_scratch(total));
            }
            let buf = DeviceBuffer::new(total as usize).map_err(|_| no_scratch(total))?;
            for r in &runs {
                // SAFETY: the run lies in the region (the engine's `write_set::written` clips runs to `size`) and
                // in `buf` (sized to the runs' total); the region is read as for the scan.
                unsafe {
                    copy_dtod_async(buf.ptr() + r.at, addr + r.offset, r.len as usize, stream)
                }
                .map_err(RecordError::cuda("copying the changed chunks"))?;
            }
            Some(Scratch::own(buf))
        } else {
            None
        };
        return Ok((scratch(buf, Some(runs)), Some(flags.nonzero)));
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
            let written = footprint.written(span, Evidence::Changed(&flags.changed));
            let runs = readback::in_place(&written);
            Ok((
                scratch(Some(Scratch::own(whole)), Some(runs)),
                Some(flags.nonzero),
            ))
        }
        Err(_) => Ok((scratch(Some(Scratch::own(whole)), None), None)),
    }
}

/// A region that changed: (region id, chunk offset, post bytes).
pub type PostChunk = (u32, u64, Vec<u8>);

/// Zeroes the absent bytes of a region's post chunks, when the capture holds only its touched
/// pages (`present`): a step writes only pages it touched, but a chunk that changed holds
/// untouched pages too, whose bytes the capture does not hold.
pub(crate) fn mask_absent(present: Option<&[(u64, u64)]>, chunks: &mut [PostChunk]) {
    if let Some(present) = present {
        for (_, offset, bytes) in chunks {
            kreplay_format::extents::zero_absent(present, *offset, bytes);
        }
    }
}

/// A snapshot's bytes as they are now, on the host.
fn read_now(s: &Snapshot) -> Result<Vec<u8>, RecordError> {
    match s.array.as_deref() {
        Some((array, image)) => read_array(array, image, s.region.size),
        None => copy_region(s.device_addr, s.region.size),
    }
}

pub(crate) fn read_array(
    array: &ForeignArray,
    image: &ArrayImage,
    size: u64,
) -> Result<Vec<u8>, RecordError> {
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

/// Whether every region of `found` is already copied, into `slab` or by the walk (`copies`):
/// `take_snapshots` then queues nothing more on the snapshot stream.
pub(crate) fn nothing_left_to_copy(
    found: &Walk,
    at: Option<&[Option<u64>]>,
    copies: &WalkCopies,
) -> bool {
    all_copied(found, at, |base, size| copies.holds(base, size))
}

/// `nothing_left_to_copy` given each region's place in the slab (`at`) and which
/// `(base, size)` the walk copied (`held`).
fn all_copied(found: &Walk, at: Option<&[Option<u64>]>, held: impl Fn(u64, u64) -> bool) -> bool {
    found.regions.iter().enumerate().all(|(i, r)| {
        at.is_some_and(|at| at.get(i).copied().flatten().is_some()) || held(r.base, r.size)
    })
}

/// Copies every region the walk found: to device scratch when memory allows (the application
/// waits for a 2 TB/s copy, not for PCIe), to the host otherwise; the small ones are already
/// in `slab` (`copy_into_slab`). Returns the snapshots and the module globals they hold.
pub(crate) fn take_snapshots(
    found: &Walk,
    slab: Option<Slab>,
    copies: &mut WalkCopies,
    module_id: u32,
    stream: &Stream,
    open_file: Option<OpenFile<'_>>,
    spill: &mut Option<Spill>,
) -> Result<(Vec<Snapshot>, Vec<ModuleGlobal>), RecordError> {
    let mut snapshots = Vec::with_capacity(found.regions.len());
    let mut module_globals = Vec::new();
    for (id, r) in found.regions.iter().enumerate() {
        let region = region_of(id, r);
        // Host-mapped memory is read straight to the host (a scratch copy would cross the bus
        // just the same).
        let in_slab = slab.as_ref().and_then(|(slab, at)| {
            let at = at.get(id).copied().flatten()?;
            Some(Scratch::stretch(slab, at, usize::try_from(r.size).ok()?))
        });
        let scratch = in_slab
            .or_else(|| copies.take(r.base, r.size).map(Scratch::own))
            .or_else(|| {
                (r.kind != MemoryKind::HostMapped)
                    .then(|| device_copy(r.base, r.size, stream).map(Scratch::own))
                    .flatten()
            });
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
                        spilled = Some(Box::new(sp.pre(&region, r.base, d)?));
                        Bytes::Host(Vec::new())
                    }
                    None => Bytes::Host(copy_region(r.base, r.size)?),
                }
            }
        };
        module_globals.extend(global_of(r, id, module_id));
        snapshots.push(snapshot_of(found, id, region, pre, spilled));
    }
    crate::trace::trace("snapshots made");
    Ok((snapshots, module_globals))
}

/// The CUDA arrays behind the texture objects, read to the host, as regions numbered from
/// `first_id`.
pub(crate) fn array_snapshots(
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
            array: Some(Box::new((*array, image.clone()))),
            kernel_readable: false,
            touched: None,
        });
    }
    Ok(snapshots)
}

/// After the step, each snapshot's post-dispatch state: written to the capture file for
/// spilled regions, compared now on the host for host snapshots (their post chunks are
/// returned), compared on the GPU and kept in post scratch for the others, except the slab's
/// regions when `slab_copied` (their bytes already queued into the slab's second half, see
/// `copy_post_half`). The caller synchronises `stream`.
pub(crate) fn post_states(
    snapshots: &mut [Snapshot],
    footprint: &Arc<dyn Footprint>,
    mut spill: Option<&mut Spill>,
    stream: &Stream,
    slab_copied: bool,
) -> Result<Vec<PostChunk>, RecordError> {
    let mut post = Vec::new();
    let in_slab: Vec<usize> = (0..snapshots.len())
        .filter(|&i| in_slab(&snapshots[i]))
        .collect();
    let mut compared = vec![false; snapshots.len()];
    // Copied whole into the slab's second half (`slab_copied`): compared by the writer
    // (`compare_later`), not now.
    if !in_slab.is_empty() && (slab_copied || post_many(snapshots, &in_slab, footprint, stream)?) {
        for &i in &in_slab {
            compared[i] = true;
        }
    }
    for (s, _) in snapshots.iter_mut().zip(compared).filter(|(_, done)| !done) {
        let span = RegionSpan::of(&s.region, s.device_addr);
        if let Some(before) = &mut s.spilled {
            let Some(spill) = spill.as_deref_mut() else {
                return Err(RecordError::NoContext);
            };
            let after = crate::spill::digest(&s.region, s.device_addr, stream)?;
            let evidence = Evidence::Digests {
                before: &before.digests,
                after: &after.digests,
            };
            let written = footprint.written(span, evidence);
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
                let written = footprint.written(span, evidence);
                let (id, chunk) = (s.region.region_id, s.region.chunk_size);
                let mut chunks = post_chunks(id, &written, chunk, &now);
                mask_absent(s.touched.as_deref(), &mut chunks);
                post.extend(chunks);
            }
            Bytes::Device(pre) => {
                let at = (s.device_addr, s.kernel_readable);
                let (post, nonzero) = post_on_device(footprint, pre, at, &s.region, stream)?;
                s.post = Some(post);
                s.pre_nonzero = nonzero.map(ChunkBits::from);
            }
        }
    }
    Ok(post)
}

/// Whether `s`'s pre bytes are a stretch of the slab (compared with the others', after the
/// step: `post_many`, or `compare_later` from the slab's second half).
pub(crate) fn in_slab(s: &Snapshot) -> bool {
    s.spilled.is_none() && matches!(&s.pre, Bytes::Device(b) if b.in_slab())
}

/// The many-regions scan of the snapshots `batch` (their pre bytes on the device) against the
/// post bytes at `post_of(snapshot, pre)`, their flags end to end, and the flags' count;
/// `None` when one cannot take part (its pre bytes on the host, or chunks the scan refuses:
/// not a power of two of at least a piece).
pub(crate) fn many_scans(
    snapshots: &[Snapshot],
    batch: &[usize],
    post_of: impl Fn(&Snapshot, &Scratch) -> u64,
) -> Option<(Vec<ManyScan>, usize)> {
    let mut scans = Vec::with_capacity(batch.len());
    let mut flag_count = 0;
    for &i in batch {
        let s = &snapshots[i];
        let Bytes::Device(pre) = &s.pre else {
            return None;
        };
        let cs = s.region.chunk_size;
        if !cs.is_power_of_two() || cs < kreplay_cuda::many::PIECE_BYTES {
            return None;
        }
        scans.push(ManyScan {
            pre: pre.ptr(),
            post: post_of(s, pre),
            bytes: s.region.size,
            chunk_shift: cs.trailing_zeros(),
            first_flag: flag_count,
        });
        flag_count += s.region.size.div_ceil(cs) as usize;
    }
    Some((scans, flag_count))
}

/// The post-dispatch state of the snapshots `batch` (their pre bytes in a slab), compared on
/// the GPU together: one scan launch finds which chunks changed in all of them, one slab holds
/// the chunks that changed, one launch copies them there. False when the scan cannot run (the
/// snapshots are then compared one by one).
fn post_many(
    snapshots: &mut [Snapshot],
    batch: &[usize],
    footprint: &Arc<dyn Footprint>,
    stream: &Stream,
) -> Result<bool, RecordError> {
    // The region itself is the post state, where it lies.
    let Some((scans, flag_count)) = many_scans(snapshots, batch, |s, _| s.device_addr) else {
        return Ok(false);
    };
    crate::trace::trace("post: scans listed");
    // SAFETY: each scan reads our slab's stretch of a region's pre bytes and the region itself
    // (a kernel may read it, as for the slab's copy), after the dispatch with the context
    // synchronised.
    let Ok(flags) = with_chunk_kernels(|k| unsafe { k.scan_many(&scans, stream) }) else {
        return Ok(false);
    };
    crate::trace::trace("post: compared on the GPU");
    if flags.changed.len() < flag_count || flags.nonzero.len() < flag_count {
        return Ok(false);
    }
    // Each snapshot's write set, packed into its stretch of one post slab.
    let mut plans = Vec::with_capacity(batch.len());
    let mut total = 0u64;
    for (&i, scan) in batch.iter().zip(&scans) {
        let s = &snapshots[i];
        let chunks = s.region.size.div_ceil(s.region.chunk_size) as usize;
        let flags_of = scan.first_flag..scan.first_flag + chunks;
        let Some(changed) = flags.changed.get(flags_of.clone()) else {
            return Ok(false);
        };
        let span = RegionSpan::of(&s.region, s.device_addr);
        let written = footprint.written(span, Evidence::Changed(changed));
        let (runs, len) = readback::pack(&written);
        plans.push((runs, total, len, flags_of));
        total += len.next_multiple_of(SLAB_ALIGN);
    }
    crate::trace::trace("post: write sets planned");
    let slab = match total {
        0 => None,
        n => Some(new_slab(n).ok_or(RecordError::NoPostScratch(n))?),
    };
    crate::trace::trace("post: slab allocated");
    if let Some(slab) = &slab {
        let copies: Vec<(u64, u64, u64)> = batch
            .iter()
            .zip(&plans)
            .flat_map(|(&i, (runs, at, ..))| {
                let addr = snapshots[i].device_addr;
                runs.iter()
                    .map(move |r| (slab.ptr() + at + r.at, addr + r.offset, r.len))
            })
            .collect();
        // SAFETY: each destination is inside the run's stretch of our post slab (sized to the
        // runs' totals); each source is a run inside a region (the engine's write set clips
        // runs to the region), read as for the scan.
        with_chunk_kernels(|k| unsafe { k.copy_many(&copies, stream) })
            .map_err(RecordError::WriteSet)?;
        crate::trace::trace("post: write sets copied");
    }
    for (&i, (runs, at, len, flags_of)) in batch.iter().zip(plans) {
        let s = &mut snapshots[i];
        let buf = match (&slab, len) {
            (Some(slab), n) if n > 0 => Some(Scratch::stretch(
                slab,
                at,
                usize::try_from(n).map_err(|_| RecordError::RegionTooLarge(n))?,
            )),
            _ => None,
        };
        s.post = Some(PostScratch {
            buf,
            runs: Some(runs),
            footprint: footprint.clone(),
        });
        s.pre_nonzero = flags.nonzero.get(flags_of).map(ChunkBits::of);
    }
    Ok(true)
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

    // Catches: the settle's sweeps queued ahead while a region is still to be copied after
    // them (outside the slab, not copied by the walk), or a slab shorter than the regions
    // taken to hold the ones past its end.
    #[test]
    fn nothing_is_left_to_copy_only_when_slab_or_walk_holds_every_region() {
        use crate::walk::FoundRegion;
        use kreplay_format::RegionRole;
        let region = |base| FoundRegion {
            base,
            size: 64,
            role: RegionRole::Argument,
            kind: MemoryKind::Device,
            global: None,
            readable: None,
        };
        let found = Walk {
            regions: vec![region(0x1000), region(0x2000), region(0x3000)],
            ..Walk::default()
        };
        let walk_copied = |b: u64, _: u64| b == 0x3000;
        let none = |_: u64, _: u64| false;
        assert!(all_copied(
            &found,
            Some(&[Some(0), Some(256), None]),
            walk_copied
        ));
        assert!(!all_copied(
            &found,
            Some(&[Some(0), None, None]),
            walk_copied
        ));
        assert!(
            !all_copied(&found, Some(&[Some(0), Some(256)]), none),
            "past the slab"
        );
        assert!(!all_copied(&found, None, walk_copied));
        assert!(
            all_copied(&Walk::default(), None, none),
            "no region, nothing to copy"
        );
    }

    // Catches: a slab stretch not aligned for the kernels' vectors, a region too large (or
    // one a kernel may not read) put in the slab, stretches that overlap, or a slab made for a
    // single region (its own buffer costs the same).
    #[test]
    fn the_slab_holds_the_small_readable_regions_apart_and_aligned() {
        let big = SLAB_REGION_BYTES + 1;
        let (at, total) = slab_plan(&[
            (100, true),
            (big, true),
            (0, true),
            (4096, false),
            (300, true),
        ]);
        assert_eq!(at, vec![Some(0), None, None, None, Some(256)]);
        assert_eq!(total, 256 + 512);
        assert_eq!(
            slab_plan(&[(100, true), (200, false)]),
            (vec![None, None], 0)
        );
        proptest!(|(regions in proptest::collection::vec((0u64..3 << 20, any::<bool>()), 0..40))| {
            let (at, total) = slab_plan(&regions);
            let mut placed: Vec<(u64, u64)> = regions
                .iter()
                .zip(&at)
                .filter_map(|(&(size, ok), a)| {
                    a.map(|a| {
                        assert!(ok && size > 0 && size <= SLAB_REGION_BYTES);
                        (a, size)
                    })
                })
                .collect();
            placed.sort_unstable();
            for (k, &(a, size)) in placed.iter().enumerate() {
                prop_assert_eq!(a % SLAB_ALIGN, 0);
                prop_assert!(a + size <= total);
                if let Some(&(next, _)) = placed.get(k + 1) {
                    prop_assert!(a + size <= next);
                }
            }
            prop_assert!(placed.len() != 1);
        });
    }

    // Catches: a region of one chunk losing its flag, or one of several read as one.
    #[test]
    fn chunk_bits_hold_the_flags_they_were_given() {
        for flags in [&[][..], &[true], &[false], &[true, false, true]] {
            assert_eq!(&*ChunkBits::of(flags), flags);
            assert_eq!(ChunkBits::from(flags.to_vec()), ChunkBits::of(flags));
        }
        assert!(matches!(ChunkBits::of(&[true]), ChunkBits::One(_)));
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

    fn found(regions: &[(u64, u64, Option<&str>)], readable: &[bool]) -> Walk {
        Walk {
            regions: regions
                .iter()
                .map(|&(base, size, global)| crate::walk::FoundRegion {
                    base,
                    size,
                    role: if global.is_some() {
                        RegionRole::Global
                    } else {
                        RegionRole::Indirect
                    },
                    kind: MemoryKind::Device,
                    global: global.map(str::to_string),
                    readable: Some(true),
                })
                .collect(),
            kernel_readable: readable.to_vec(),
            ..Walk::default()
        }
    }

    // Catches: snapshots built beside the copy when a region is not in the slab (it would have
    // been snapshotted as empty, its bytes never copied), or a placement of another walk's
    // length taken for this one's.
    #[test]
    fn snapshots_are_built_beside_the_copy_only_when_the_slab_holds_every_region() {
        assert!(every_region_in_slab(&[Some(0), Some(4096)], 2));
        assert!(
            !every_region_in_slab(&[Some(0), None], 2),
            "one region outside"
        );
        assert!(!every_region_in_slab(&[Some(0)], 2), "a shorter placement");
        assert!(!every_region_in_slab(&[Some(0), Some(1), Some(2)], 2));
        assert!(every_region_in_slab(&[], 0));
        // A thread only where it pays: a pointer table's 10,002 regions, not a saxpy's five.
        let placed = |n: usize| vec![Some(0); n];
        assert!(beside_pays(&placed(10_002), 10_002));
        assert!(beside_pays(
            &placed(BESIDE_LEAST_REGIONS),
            BESIDE_LEAST_REGIONS
        ));
        assert!(
            !beside_pays(&placed(5), 5),
            "five regions: a thread costs more"
        );
        let mut one_out = placed(10_002);
        one_out[77] = None;
        assert!(!beside_pays(&one_out, 10_002));
    }

    // Catches: a snapshot built beside the copy that differs from `take_snapshots`' for a
    // region in the slab: its id, address, size or role, the stretch it reads (offset and
    // length), its readable flag, or a module global lost or given another region's id.
    #[test]
    fn slab_snapshots_place_each_region_at_its_stretch_with_its_globals() {
        let walk = found(
            &[
                (0x7f00_0000_0000, 80_000, None),
                (0x7f10_0000_0000, 4096, Some("table")),
                (0x7f10_0000_2000, 4096, None),
            ],
            &[true, true, false],
        );
        let at = [Some(8192), Some(0), Some(4096)];
        let stretch = |at: u64, len: usize| {
            Bytes::Host([at.to_le_bytes(), (len as u64).to_le_bytes()].concat())
        };
        assert!(
            slab_snapshots(&walk, &[Some(8192), None, Some(4096)], 7, stretch).is_none(),
            "a region without its place in the slab"
        );
        assert!(
            slab_snapshots(&walk, &at[..2], 7, stretch).is_none(),
            "a shorter placement"
        );
        let (snaps, globals) = slab_snapshots(&walk, &at, 7, stretch).expect("every region placed");
        assert_eq!(snaps.len(), 3);
        for (i, s) in snaps.iter().enumerate() {
            let r = &walk.regions[i];
            assert_eq!(s.region, region_of(i, r));
            assert_eq!(
                (s.region.region_id, s.region.address, s.region.size),
                (i as u32, r.base, r.size)
            );
            assert_eq!(s.device_addr, r.base);
            assert_eq!(s.kernel_readable, walk.kernel_readable[i]);
            assert!(
                s.post.is_none() && s.spilled.is_none() && s.array.is_none() && s.touched.is_none()
            );
            let Bytes::Host(b) = &s.pre else {
                panic!("the stretch's bytes")
            };
            let expected = [
                at[i].unwrap_or(u64::MAX).to_le_bytes(),
                r.size.to_le_bytes(),
            ]
            .concat();
            assert_eq!(b, &expected, "region {i}'s stretch");
        }
        assert_eq!(snaps[1].region.role, RegionRole::Global);
        assert_eq!(
            globals,
            vec![ModuleGlobal {
                module_id: 7,
                name: "table".into(),
                region_id: 1
            }]
        );
    }
}
