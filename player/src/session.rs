//! A capture made live: the engine's `ReplayPlan` materialised on a device (memory mapped back
//! at the captured addresses or moved, regions uploaded, module loaded, globals restored,
//! pristine copy of the write set made), then the engine's pass loop (`tool::drive_from`),
//! its passes decided by a fixed count, by a `kreplay_tool.h` tool, or by the counters.

use std::collections::HashMap;
use std::time::Instant;

use crate::divergence::range_report;
use crate::kernels::{find_kernel, load_kernel, prepare_function, restore_globals};
use crate::range::RangeReport;
use crate::range_steps::{load_range, LoadedRange, Variant};
use kreplay_cuda::hostmap::HostMapping;
use kreplay_cuda::texture::{CudaArray, TexObject};
use kreplay_cuda::vmm::{FixedMapping, MapError};
use kreplay_cuda::{
    copy_dtoh, copy_htod, Device, DeviceBuffer, Function, KernelArgs, LaunchConfig, Module,
    PinnedBuffer, PrimaryContext, Stream, UploadRing,
};
use kreplay_engine::arrays::{self, ArraySync};
use kreplay_engine::counters::{MetricRequest, MetricsReport};
use kreplay_engine::plan::{CodePlan, LaunchPlan, MemoryPlan, Target};
use kreplay_engine::relocate::Relocation;
use kreplay_engine::restore::clipped;
use kreplay_engine::texture_desc;
use kreplay_engine::tool::{DispatchView, FixedPasses, PassTool};
use kreplay_engine::verify::{compare, VerifyOutcome};
use kreplay_engine::{
    AddressMode, CacheState, CodeChoice, CodeSource, Kernel, OpenOptions, PassStats, PassTiming,
    Placement, PlayError, PristineStore, RegionPlacement, Replayer, Restorer, RunOptions,
    Verification, WriteSet,
};
use kreplay_format::absent::ABSENT_FILL;
use kreplay_format::{
    Capture, ChunkEncoding, ChunkRef, MemoryKind, MemoryState, Region, RegionRole, TextureResource,
};
use rayon::prelude::*;
use serde::Serialize;
use std::rc::Rc;

/// Drops the file pages of bytes `[start, end)` of the capture from the process's memory
/// (`MappedFile::release`): the session calls it for chunks it has consumed, so a pass over a
/// capture larger than memory stays bounded.
pub type FilePages<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// For captures not read from a mapping, or kept resident.
fn keep_pages(_: u64, _: u64) {}

/// Verification reads device memory back in windows of this size (decoded in parallel).
const VERIFY_WINDOW: u64 = 64 << 20;

/// Staging for uploads: a ring of page-locked buffers of this size, each decoded in parallel
/// while the one before it is copied to the device.
const UPLOAD_WINDOW: u64 = 128 << 20;
const UPLOAD_BUFFERS: usize = 2;

/// Everything a replay produced.
#[derive(Debug, Clone, Serialize)]
pub struct PlayReport {
    pub kernel: String,
    #[serde(flatten)]
    pub timing: PassTiming,
    pub original_ns: Option<u64>,
    pub address_mode: AddressMode,
    /// Which code object ran: "cubin", "ptx-jit" or "variant".
    pub code: CodeSource,
    pub device: String,
    pub write_set_bytes: u64,
    /// Bytes the capture does not hold (captured by touched pages), written with
    /// `ABSENT_FILL` before the first pass and left out of verification; 0 for a capture of
    /// whole regions.
    pub absent_bytes: u64,
    /// Where the pristine copy of the write set lives.
    pub pristine: PristineStore,
    pub cache: CacheState,
    pub verify: VerifyOutcome,
    /// The tool that decided the passes (`play --tool`); absent under `--passes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolRun>,
    /// A range capture's steps and what verification found of them (absent for one
    /// dispatch: its report is unchanged).
    #[serde(flatten)]
    pub range: Option<RangeReport>,
    /// Where each timed pass's parts ran on the GPU (`RunOptions::trace`, for `play
    /// --trace`; empty otherwise; not in the JSON report).
    #[serde(skip)]
    pub pass_records: Vec<kreplay_engine::pass_trace::PassRecord>,
}

/// What a tool (`play --tool LIB.so`) made of the replay (`--json`: `tool`).
#[derive(Debug, Clone, Serialize)]
pub struct ToolRun {
    /// The library, as given.
    pub path: String,
    /// Timed passes the tool chose (the report's `passes`).
    pub passes: u32,
    /// The tool asked to stop (BEGIN or END) rather than running out of requested passes.
    pub stopped_by_tool: bool,
    /// The loop ended at `TOOL_MAX_PASSES` while the tool wanted more.
    pub capped: bool,
    /// The tool asked for no pass (CONFIG returned 0): the dispatch ran once, as without it.
    pub skipped: bool,
}

/// Most timed passes a tool may ask for (as `kreplay profile`'s).
pub const TOOL_MAX_PASSES: u32 = 1000;

/// Where the captured memory went.
enum Memory {
    /// At the original addresses (unmapped when dropped).
    Fixed {
        _mapping: FixedMapping,
        _host: HostMapping,
    },
    /// Moved to fresh allocations, pointers rewritten.
    Moved {
        relocation: Relocation,
        _buffers: Vec<DeviceBuffer>,
        _host_buffers: Vec<PinnedBuffer>,
    },
}

/// Where a captured address lives in this replay.
fn placed(relocation: Option<&Relocation>, address: u64) -> u64 {
    relocation
        .and_then(|rel| rel.translate(address))
        .unwrap_or(address)
}

/// The texture and surface objects a capture describes, made in this process.
#[derive(Default)]
struct Textures {
    // Drop order: the objects before the arrays they view, the shadows last.
    objects: Vec<TexObject>,
    arrays: Vec<Rc<CudaArray>>,
    /// Device buffers holding each array's texels (region id, buffer).
    shadows: Vec<(u32, DeviceBuffer)>,
    /// Handle words in captured memory, rewritten: (region id, offset, handle here).
    memory_words: Vec<(u32, u64, u64)>,
}

impl Textures {
    /// A device buffer for the texels of each array region (they have no address to map).
    fn shadows(cap: &Capture<'_>) -> Result<Textures, PlayError> {
        let mut t = Textures::default();
        for r in cap
            .regions
            .iter()
            .filter(|r| r.kind == MemoryKind::CudaArray)
        {
            t.shadows
                .push((r.region_id, DeviceBuffer::new(r.size as usize)?));
        }
        Ok(t)
    }

    fn shadow(&self, region_id: u32) -> Option<u64> {
        self.shadows
            .iter()
            .find(|(id, _)| *id == region_id)
            .map(|(_, b)| b.ptr())
    }

    /// Makes the arrays (filled from their shadows) and the objects; writes the new handles
    /// into the argument bytes; returns the arrays the kernel writes, with their shadows.
    fn make(
        &mut self,
        cap: &Capture<'_>,
        relocation: Option<&Relocation>,
        placements: &[RegionPlacement],
        arg_bytes: &mut [u8],
    ) -> Result<ArraySync, PlayError> {
        let stream = Stream::new()?;
        let mut written = Vec::new();
        for image in &cap.textures.arrays {
            let shadow = self.shadow(image.region_id).ok_or_else(|| {
                PlayError::Format(kreplay_format::FormatError::Inconsistent {
                    offset: 0,
                    what: format!("array region {} has no texels", image.region_id),
                })
            })?;
            let array = Rc::new(CudaArray::create(&texture_desc::array_desc(image))?);
            // SAFETY: the shadow is this session's buffer of the array region's size, which
            // the format's rules make at least the array's packed texel bytes; it lives in
            // `self.shadows`, after the arrays, and the stream is synchronised below.
            unsafe { array.copy_from_device(shadow, &stream)? };
            if arrays::written(cap, image.region_id) {
                written.push((array.clone(), shadow));
            }
            self.arrays.push(array);
        }
        stream.synchronize()?;
        for obj in &cap.textures.objects {
            let array = match obj.resource {
                TextureResource::Array { index } | TextureResource::Mipmapped { index } => {
                    self.arrays.get(index as usize).map(|a| a.as_ref())
                }
                _ => None,
            };
            let address = obj.resource.address().map_or(0, |a| placed(relocation, a));
            let desc = texture_desc::object_desc(obj, array, address).ok_or_else(|| {
                PlayError::Format(kreplay_format::FormatError::Inconsistent {
                    offset: 0,
                    what: format!(
                        "texture object {} views an array the capture lacks",
                        obj.handle
                    ),
                })
            })?;
            // SAFETY: linear memory is the recorded address placed in this replay (mapped back
            // or moved with its region), which only the capture's kernel reaches, as it would
            // any captured pointer (`Replayer::new`'s contract); the object is dropped before
            // the memory (field order of `Session`).
            let made = unsafe { TexObject::create(&desc)? };
            write_arg_handles(arg_bytes, &obj.arg_words, made.handle());
            for &(region_id, offset) in &obj.memory_words {
                let Some(p) = placements.iter().find(|p| p.region_id == region_id) else {
                    continue;
                };
                if handle_word_fits(offset, p.usable) {
                    // SAFETY: the 8 bytes lie inside the `usable` bytes this replay placed for
                    // the region (`handle_word_fits`), memory of its own that no Rust value
                    // borrows.
                    unsafe { copy_htod(p.base + offset, &made.handle().to_le_bytes())? };
                    self.memory_words.push((region_id, offset, made.handle()));
                }
            }
            self.objects.push(made);
        }
        // SAFETY: each shadow is this session's buffer of the array region's size (at least
        // the array's packed texels by the format's rules), held in `self.shadows`, which
        // outlives the replayer (field order of `Session`).
        Ok(unsafe { ArraySync::new(written) })
    }
}

/// Writes `handle` into each 8-byte argument word at the byte offsets `words`, skipping a
/// word that does not lie wholly inside the argument bytes: the offsets come from the file.
fn write_arg_handles(arg_bytes: &mut [u8], words: &[u32], handle: u64) {
    for &w in words {
        if let Some(word) = arg_bytes.get_mut(w as usize..w as usize + 8) {
            word.copy_from_slice(&handle.to_le_bytes());
        }
    }
}

/// Whether a handle word at `offset` of a region lies wholly in its `usable` bytes (a module
/// global can hold fewer bytes here than the file says): only then is it written.
fn handle_word_fits(offset: u64, usable: u64) -> bool {
    clipped(offset, 8, usable) == Some(8)
}

/// The regions uploaded chunk by chunk before the module is loaded; module globals are
/// written after it, into the loaded module's globals (`restore_globals`).
fn uploaded_regions<'a>(cap: &'a Capture<'_>) -> impl Iterator<Item = &'a Region> {
    cap.regions.iter().filter(|r| r.role != RegionRole::Global)
}

/// The size of each staging buffer: room for the largest chunk (a chunk is decoded in one
/// piece), otherwise `UPLOAD_WINDOW`, never more than the largest region needs, never zero.
fn upload_window(cap: &Capture<'_>) -> u64 {
    let largest = cap.regions.iter().map(|r| r.size).max().unwrap_or(0);
    let chunk = cap.regions.iter().map(|r| r.chunk_size).max().unwrap_or(1);
    largest.min(UPLOAD_WINDOW.max(chunk)).max(1)
}

/// How a region's pre-dispatch chunks (in offset order) are uploaded: runs of chunk indices,
/// each either zeroed on the device (`true`: adjacent chunks stored as zeros, as one run of
/// any length) or decoded into one staging buffer (`false`: at most `per_window` chunks).
/// `zeroed_here` is false for host memory, which always goes through the staging. A run never
/// spans a gap between stored chunks.
fn upload_runs(
    chunks: &[&ChunkRef],
    per_window: usize,
    zeroed_here: bool,
) -> Vec<(std::ops::Range<usize>, bool)> {
    let is_zero = |c: &ChunkRef| zeroed_here && c.encoding == ChunkEncoding::Zero;
    let mut runs = Vec::new();
    let mut i = 0;
    while i < chunks.len() {
        let zero = is_zero(chunks[i]);
        let first = i;
        // A run is of adjacent chunks: a capture by touched pages stores only the chunks that
        // hold a present byte, so the stored ones can have gaps.
        let adjacent = |i: usize| chunks[i - 1].offset + chunks[i - 1].raw_len == chunks[i].offset;
        while i < chunks.len()
            && (i == first || adjacent(i))
            && is_zero(chunks[i]) == zero
            && (zero || i - first < per_window)
        {
            i += 1;
        }
        runs.push((first..i, zero));
    }
    runs
}

/// A capture made live on the GPU.
pub struct Session<'c> {
    cap: &'c Capture<'c>,
    // Field order is drop order: the replayer (kernel, module, pristine copy, stream) first,
    // then the textures, the memory, the context last.
    replayer: Replayer<Function>,
    placements: Vec<RegionPlacement>,
    code: CodeSource,
    textures: Textures,
    memory: Memory,
    device: Device,
    /// Pages of the file the session is done with are dropped through this.
    release: FilePages<'c>,
    _ctx: PrimaryContext,
}

/// Uploads region `r`'s pre-dispatch chunks to `dst` through `ring`.
///
/// # Safety
/// `dst` starts the `r.size` bytes this session placed for region `r`, which nothing else
/// reads or writes until `ring` finishes.
unsafe fn upload_region(
    cap: &Capture<'_>,
    r: &Region,
    dst: u64,
    ring: &mut UploadRing,
    relocation: Option<&Relocation>,
    progress: &mut dyn FnMut(u64),
    release: FilePages<'_>,
) -> Result<(), PlayError> {
    let region_id = r.region_id;
    let chunks: Vec<_> = cap.chunks(region_id, MemoryState::Pre).collect();
    let per_window = (ring.capacity() as u64 / r.chunk_size).max(1) as usize;
    // Runs of chunks stored as zeros are zeroed on the device (device memory only: host
    // memory goes through the staging like the rest).
    let zeroed_here = r.kind != MemoryKind::HostMapped;
    for (run, zero) in upload_runs(&chunks, per_window, zeroed_here) {
        let window = &chunks[run];
        let start = window[0].offset;
        let len: u64 = window.iter().map(|c| c.raw_len).sum();
        if zero {
            // SAFETY: `dst` starts region `r`'s bytes (this function's contract), and the
            // format's rules keep every chunk inside its region.
            unsafe { ring.zero(dst + start, len as usize)? };
        } else {
            // Decoded on all cores into one staging buffer while the previous one is copied.
            let fill = |buf: &mut [u8]| -> Result<(), PlayError> {
                buf.par_chunks_mut(r.chunk_size as usize)
                    .zip(window.par_iter())
                    .try_for_each(|(dst, c)| cap.read_chunk_into(c, dst))?;
                if let Some(rel) = relocation {
                    rel.patch_region_window(cap, region_id, start, buf);
                }
                Ok(())
            };
            // SAFETY: as for the zeroing above.
            unsafe { ring.upload(dst + start, len as usize, fill)? };
            // Decoded into the staging buffer: the file's pages are no longer needed.
            for c in window {
                release(c.payload_offset, c.payload_offset + c.payload_len);
            }
        }
        progress(len);
    }
    if let Some(e) = cap.extents(region_id) {
        // SAFETY: `dst` starts region `r`'s bytes (this function's contract), and every
        // absent range lies inside the region.
        unsafe { fill_absent(r, &e.present, dst, ring, zeroed_here)? };
    }
    Ok(())
}

/// Writes `ABSENT_FILL` over every absent byte of region `r` (captured by touched pages,
/// `present` its extents), after its stored chunks on the ring's stream: the bytes no chunk
/// holds, and those a stored chunk holds as zeros that mean nothing. On the device with
/// `cuMemsetD8Async` (`on_device`), for host memory through the staging.
///
/// # Safety
/// `dst` starts the `r.size` bytes placed for region `r`, which nothing else reads or writes
/// until `ring` finishes.
unsafe fn fill_absent(
    r: &Region,
    present: &[(u64, u64)],
    dst: u64,
    ring: &mut UploadRing,
    on_device: bool,
) -> Result<(), PlayError> {
    let window = ring.capacity().max(1) as u64;
    for (offset, len) in kreplay_format::extents::absent_ranges(present, 0, r.size) {
        if on_device {
            // SAFETY: the range is inside region `r` (`absent_ranges` of its own bytes).
            unsafe { ring.fill(dst + offset, len as usize, ABSENT_FILL)? };
            continue;
        }
        let mut at = 0;
        while at < len {
            let n = (len - at).min(window);
            // SAFETY: as above.
            unsafe {
                ring.upload(dst + offset + at, n as usize, |b: &mut [u8]| {
                    b.fill(ABSENT_FILL);
                    Ok::<(), PlayError>(())
                })?
            };
            at += n;
        }
    }
    Ok(())
}

/// Uploads every region but the module globals to where `base_of` places it, staged through
/// a ring of page-locked buffers, telling `progress` the bytes loaded (of how many).
///
/// # Safety
/// For every uploaded region `r`, `base_of(r)` starts the `r.size` bytes this session placed
/// for it, which nothing else reads or writes until this returns.
unsafe fn upload_regions(
    cap: &Capture<'_>,
    base_of: &dyn Fn(&Region) -> u64,
    relocation: Option<&Relocation>,
    progress: &mut dyn FnMut(u64, u64),
    release: FilePages<'_>,
) -> Result<(), PlayError> {
    let window = upload_window(cap);
    let mut ring = UploadRing::new(UPLOAD_BUFFERS, window as usize)?;
    let total: u64 = uploaded_regions(cap).map(|r| r.size).sum();
    let mut loaded = 0u64;
    for r in uploaded_regions(cap) {
        // SAFETY: `base_of(r)` starts region `r`'s bytes (this function's contract); the ring
        // is finished before this returns.
        unsafe {
            upload_region(
                cap,
                r,
                base_of(r),
                &mut ring,
                relocation,
                &mut |n| {
                    loaded += n;
                    progress(loaded, total);
                },
                release,
            )?
        };
    }
    ring.finish()?;
    Ok(())
}

/// Maps the plan's ranges at their original addresses, or moves them (fresh allocations,
/// one per group of touching ranges) when asked or when the addresses are taken.
fn place_memory(plan: &MemoryPlan, device: &Device) -> Result<Memory, PlayError> {
    if plan.placement == Placement::Original {
        let mapped = FixedMapping::map(&plan.fixed_ranges, device).and_then(|device| {
            Ok(Memory::Fixed {
                _mapping: device,
                _host: HostMapping::map(&plan.host_ranges)?,
            })
        });
        match mapped {
            Ok(m) => return Ok(m),
            Err(MapError::AddressInUse { start, end, got }) => {
                let blocker = plan.relocation_blocker.as_deref();
                if let Some(e) = move_refusal(blocker, Some((start, end, got))) {
                    return Err(e);
                }
            }
            Err(e) => return Err(e.into()),
        }
    } else if let Some(e) = move_refusal(plan.relocation_blocker.as_deref(), None) {
        return Err(e);
    }
    let mut moves = Vec::new();
    let mut buffers = Vec::new();
    for &(addr, size) in &plan.move_groups {
        let b = DeviceBuffer::new(size as usize)?;
        moves.push((addr, size, b.ptr()));
        buffers.push(b);
    }
    let mut host_buffers = Vec::new();
    for &(addr, size) in &plan.host_move_groups {
        let b = PinnedBuffer::mapped(size as usize)?;
        moves.push((addr, size, b.device_ptr()?));
        host_buffers.push(b);
    }
    Ok(Memory::Moved {
        relocation: Relocation::new(moves),
        _buffers: buffers,
        _host_buffers: host_buffers,
    })
}

/// Why the captured memory may not be moved, if the plan says it cannot be (`blocker`): the
/// error names the `collision` (start, end, address got) when the move was forced by the
/// original addresses being taken, and says the move was refused when it was asked for.
fn move_refusal(blocker: Option<&str>, collision: Option<(u64, u64, u64)>) -> Option<PlayError> {
    let why = blocker?.to_string();
    Some(match collision {
        Some((start, end, got)) => PlayError::CannotRelocate {
            start,
            end,
            got,
            why,
        },
        None => PlayError::RelocationRefused { why },
    })
}

/// The launch configuration of the plan, with fresh events where the plan asks for them.
fn launch_config(cap: &Capture<'_>, plan: &LaunchPlan) -> Result<LaunchConfig, PlayError> {
    Ok(kreplay_engine::plan::launch_config(&cap.dispatch, plan)?)
}

/// What the replay runs: the first kernel's function (the replayer's kernel), a range's
/// steps, and which code object ran ("variant" when a `--module` replaced any kernel).
struct LoadedCode {
    function: Function,
    range: Option<LoadedRange>,
    source: CodeSource,
}

/// The code choice for the first kernel step: a range's `--module` variant is loaded apart
/// (`load_code`), replacing only the kernels it defines, so the first kernel's plan is the
/// captured code.
fn first_code_choice<'a>(cap: &Capture<'_>, choice: &'a CodeChoice) -> &'a CodeChoice {
    match choice {
        CodeChoice::Variant(_) if cap.is_range() => &CodeChoice::Captured,
        other => other,
    }
}

/// Loads the planned code and its module globals (their placements added to `placements`),
/// and for a range its steps, a `--module` variant replacing the kernels it defines
/// wherever they appear.
fn load_code(
    cap: &Capture<'_>,
    code: &CodePlan,
    choice: &CodeChoice,
    launch: &LaunchPlan,
    relocation: Option<&Relocation>,
    placements: &mut Vec<RegionPlacement>,
) -> Result<LoadedCode, PlayError> {
    let (module, mut function) = load_kernel(cap, code, launch)?;
    let only = cap.is_range().then_some(cap.dispatch.module_id);
    placements.extend(restore_globals(cap, &module, relocation, only)?);
    if !cap.is_range() {
        return Ok(LoadedCode {
            function,
            range: None,
            source: code.source,
        });
    }
    let variant = match choice {
        CodeChoice::Variant(image) => Some(Variant {
            module: Module::load(image)?,
            image: image.clone(),
        }),
        _ => None,
    };
    let mut source = code.source;
    let d = &cap.dispatch;
    if let Some(v) = variant.as_ref().filter(|v| v.defines(&d.kernel_name)) {
        function = find_kernel(&v.module, &v.image, d, launch, CodeSource::Variant)?;
        source = CodeSource::Variant;
    }
    let range = load_range(cap, &module, variant.as_ref(), relocation, placements)?;
    if range.used_variant {
        source = CodeSource::Variant;
    }
    if variant.is_some() && source != CodeSource::Variant {
        return Err(PlayError::Range(
            "the --module file defines none of the range's kernels".into(),
        ));
    }
    Ok(LoadedCode {
        function,
        range: Some(range),
        source,
    })
}

/// The replayer, with a range's steps when there are some.
fn with_range(r: Replayer<Function>, range: Option<LoadedRange>) -> Replayer<Function> {
    match range {
        Some(range) => r.with_range(range.steps),
        None => r,
    }
}

impl<'c> Session<'c> {
    /// Prepares the capture on device `opts.device`.
    pub fn open(cap: &'c Capture<'c>, opts: &OpenOptions) -> Result<Session<'c>, PlayError> {
        Self::open_with_progress(cap, opts, &mut |_, _| {}, &keep_pages)
    }

    /// `open`, telling `progress` how many bytes of memory are loaded (of how many), and
    /// `release` which bytes of the file it is done with.
    pub fn open_with_progress(
        cap: &'c Capture<'c>,
        opts: &OpenOptions,
        progress: &mut dyn FnMut(u64, u64),
        release: FilePages<'c>,
    ) -> Result<Session<'c>, PlayError> {
        let opened = Instant::now();
        // A damaged dispatch is refused before any GPU work.
        let launch = LaunchPlan::new(cap)?;
        let device = Device::open(opts.device)?;
        let props = device.props().clone();
        let target = Target {
            ordinal: props.ordinal,
            name: props.name.clone(),
            arch: props.arch(),
        };
        let code = CodePlan::choose(cap, first_code_choice(cap, &opts.code), &target)?;
        let memory_plan = MemoryPlan::new(cap, opts.placement);

        let ctx = PrimaryContext::retain(&device)?;
        // Map before anything else allocates device memory, so nothing of ours sits where
        // the capture needs to be.
        let memory = place_memory(&memory_plan, &device)?;
        let relocation = match &memory {
            Memory::Moved { relocation, .. } => Some(relocation),
            Memory::Fixed { .. } => None,
        };
        let mut textures = Textures::shadows(cap)?;
        let base_of = |r: &Region| {
            if r.kind == MemoryKind::CudaArray {
                return textures.shadow(r.region_id).unwrap_or(0);
            }
            placed(relocation, r.address)
        };

        // SAFETY: `base_of` is where `place_memory` (or the shadows) put each region, the
        // region's size in all, memory of this session's that nothing else touches yet.
        unsafe { upload_regions(cap, &base_of, relocation, progress, release)? };

        let mut placements: Vec<RegionPlacement> = uploaded_regions(cap)
            .map(|r| RegionPlacement {
                region_id: r.region_id,
                base: base_of(r),
                usable: r.size,
            })
            .collect();
        let loaded = load_code(cap, &code, &opts.code, &launch, relocation, &mut placements)?;
        let function = loaded.function;

        prepare_function(&function, &launch)?;
        let config = launch_config(cap, &launch)?;
        let d = &cap.dispatch;
        let mut arg_bytes = d.arg_bytes.clone();
        if let Some(rel) = relocation {
            rel.patch_words(&mut arg_bytes, d.pointer_words.iter().map(|&w| w as u64));
        }
        let written_arrays = textures.make(cap, relocation, &placements, &mut arg_bytes)?;
        let args = KernelArgs::new(arg_bytes, &launch.layout).map_err(|what| {
            PlayError::Format(kreplay_format::FormatError::Inconsistent { offset: 0, what })
        })?;

        let stream = match &loaded.range {
            Some(r) => Stream::with_priority(r.steps.pass_priority())?,
            None => Stream::new()?,
        };
        // SAFETY: the write set is clipped to the bytes this session placed for each region
        // (`WriteSet::of_capture`), held by `memory` and `textures`, which outlive the
        // replayer (field order of `Session`).
        let restorer =
            unsafe { Restorer::snapshot(WriteSet::of_capture(cap, &placements), &stream)? };
        let kernel = Kernel {
            function,
            config,
            args,
        };
        Ok(Session {
            cap,
            // SAFETY: the capture's kernel, on memory this session placed at the recorded
            // addresses (or moved, with its pointers patched), as `play` promises to run it;
            // the memory outlives the replayer (field order of `Session`). A hostile capture
            // can still reach anything in this context: DESIGN's threat model.
            replayer: with_range(
                unsafe { Replayer::new(kernel, restorer, stream, props, opened) }
                    .with_arrays(written_arrays),
                loaded.range,
            ),
            placements,
            code: loaded.source,
            textures,
            memory,
            device,
            release,
            _ctx: ctx,
        })
    }

    pub(crate) fn capture(&self) -> &'c Capture<'c> {
        self.cap
    }

    /// The replayer, for what runs a range's steps outside the pass loop (`--save-step`).
    pub(crate) fn replayer_mut(&mut self) -> &mut Replayer<Function> {
        &mut self.replayer
    }

    fn relocation(&self) -> Option<&Relocation> {
        match &self.memory {
            Memory::Moved { relocation, .. } => Some(relocation),
            Memory::Fixed { .. } => None,
        }
    }

    /// Where a region lives in this replay: its device address and the bytes usable there.
    pub(crate) fn placement(&self, region_id: u32) -> Option<(u64, u64)> {
        self.placements
            .iter()
            .find(|p| p.region_id == region_id)
            .map(|p| (p.base, p.usable))
    }

    pub(crate) fn device_name(&self) -> &str {
        &self.device.props().name
    }

    pub(crate) fn is_relocated(&self) -> bool {
        self.relocation().is_some()
    }

    /// The dispatch as a pass tool sees it, with `max_passes` its most passes.
    fn dispatch_view(&self, max_passes: u32) -> DispatchView {
        let d = &self.cap.dispatch;
        let demangled = cpp_demangle::Symbol::new(&d.kernel_name)
            .ok()
            .and_then(|s| s.demangle(&Default::default()).ok())
            .unwrap_or_else(|| d.kernel_name.clone());
        let mut view = DispatchView::new(
            &d.kernel_name,
            &demangled,
            d.grid,
            d.block,
            d.cluster,
            d.dynamic_shared_bytes,
            d.arg_bytes.clone(),
            max_passes,
        );
        view.write_set_bytes = self.replayer.restorer().write_set().bytes();
        // As the recorder saw it, so a tool's lines name the same launch in play and profile.
        if let Some(info) = &self.cap.info {
            view.launch_index = info.launch_index;
            view.match_index = info.match_index;
        }
        view
    }

    /// Replays the dispatch (a range: all its steps) as many times as the metric set needs
    /// (see the engine).
    pub fn collect_metrics(
        &mut self,
        req: &MetricRequest,
        cache: CacheState,
    ) -> Result<MetricsReport, PlayError> {
        let view = self.dispatch_view(1);
        if self.replayer.is_range() {
            // Range only: whole-range passes, counters per kernel step.
            let kernels = crate::range_metrics::kernel_steps(self.cap);
            let steps = crate::range_metrics::as_kernel_steps(&kernels);
            return self.replayer.collect_range_metrics(
                req,
                cache,
                &view,
                &steps,
                self.cap.steps.len(),
            );
        }
        self.replayer.collect_metrics(req, cache, &view)
    }

    /// Runs warm-up and `opts.passes` timed passes.
    pub fn run(&mut self, opts: &RunOptions) -> Result<PlayReport, PlayError> {
        let passes = opts.passes.max(1);
        Ok(self.run_loop(opts, &mut FixedPasses(passes), passes)?.0)
    }

    /// Runs warm-up passes, then as many timed passes as `tool` asks (at most
    /// `TOOL_MAX_PASSES`; `opts.passes` is not used), the tool seeing each begin and end;
    /// `path` names the tool in the report.
    pub fn run_with_tool(
        &mut self,
        opts: &RunOptions,
        tool: &mut dyn PassTool,
        path: &str,
    ) -> Result<PlayReport, PlayError> {
        let (mut report, stats) = self.run_loop(opts, tool, TOOL_MAX_PASSES)?;
        report.tool = Some(ToolRun {
            path: path.to_string(),
            passes: report.timing.passes,
            stopped_by_tool: stats.stopped_by_tool,
            capped: stats.capped,
            skipped: stats.skipped,
        });
        Ok(report)
    }

    /// The pass loop with `tool`, the reference check, and the report.
    fn run_loop(
        &mut self,
        opts: &RunOptions,
        tool: &mut dyn PassTool,
        max_passes: u32,
    ) -> Result<(PlayReport, PassStats), PlayError> {
        let checked = opts.verification == Verification::Check;
        let mut v = VerifyOutcome {
            checked,
            reference: self.cap.reference(),
            deterministic: true,
            ..Default::default()
        };
        let view = self.dispatch_view(max_passes);
        let relocation = match &self.memory {
            Memory::Moved { relocation, .. } => Some(relocation),
            Memory::Fixed { .. } => None,
        };
        let (cap, placements, release) = (self.cap, &self.placements, self.release);
        let handles = &self.textures.memory_words;
        let stats = self.replayer.run(opts, tool, &view, &mut || {
            check_against_capture(cap, placements, relocation, handles, release, &mut v)
        })?;
        v.deterministic = stats.deterministic;
        v.divergent_passes = stats.divergent_passes.clone();
        // `pack --redact` zeroes the bytes a range's device-to-host copies received: those are
        // no reference then (the write set still is, as for a single capture).
        let copies_differ =
            !stats.copy_mismatches.is_empty() && v.reference != kreplay_format::Reference::Redacted;
        v.matched = checked && v.mismatched_bytes == 0 && !copies_differ;
        let range = match self.replayer.is_range() {
            true => Some(range_report(
                cap,
                placements,
                &mut self.replayer,
                &stats,
                checked && !v.matched,
                relocation.is_some(),
                self.device.props().sm_count,
            )?),
            false => None,
        };
        let restorer = self.replayer.restorer();
        let report = PlayReport {
            kernel: cap.dispatch.kernel_name.clone(),
            timing: stats.timing.clone(),
            original_ns: crate::range::original_ns(cap),
            address_mode: if relocation.is_some() {
                AddressMode::Relocated
            } else {
                AddressMode::Original
            },
            code: self.code,
            device: self.device.props().name.clone(),
            write_set_bytes: restorer.write_set().bytes(),
            absent_bytes: absent_bytes(cap),
            pristine: restorer.store(),
            cache: opts.cache,
            verify: v,
            tool: None,
            range,
            pass_records: stats.trace.clone(),
        };
        Ok((report, stats))
    }
}

/// Compares every region with the recorded post-dispatch state (pre where unchanged).
fn check_against_capture(
    cap: &Capture<'_>,
    placements: &[RegionPlacement],
    relocation: Option<&Relocation>,
    handles: &[(u32, u64, u64)],
    release: FilePages<'_>,
    v: &mut VerifyOutcome,
) -> Result<(), PlayError> {
    let mut staging: Option<PinnedBuffer> = None;
    for p in placements {
        let items = expected_chunks(cap, p.region_id, p.usable);
        // Captured by touched pages: only the present bytes are the application's.
        let present = cap.extents(p.region_id).map(|e| e.present.as_slice());
        let spans: Vec<(u64, u64)> = items
            .iter()
            .map(|&(_, offset, len)| (offset, len))
            .collect();
        // Windows of adjacent chunks: decoded on all cores, read back with one copy.
        for (run, bytes) in verify_windows(&spans, VERIFY_WINDOW) {
            let window = &items[run];
            let expected: Vec<Vec<u8>> = window
                .par_iter()
                .map(|&(src, offset, len)| -> Result<Vec<u8>, PlayError> {
                    let mut e = vec![0u8; src.raw_len as usize];
                    cap.read_chunk_into(src, &mut e)?;
                    if let Some(rel) = relocation {
                        rel.patch_region_window(cap, p.region_id, offset, &mut e);
                    }
                    patch_handles(&mut e, p.region_id, offset, handles);
                    e.truncate(len as usize);
                    Ok(e)
                })
                .collect::<Result<_, _>>()?;
            for &(src, _, _) in window {
                release(src.payload_offset, src.payload_offset + src.payload_len);
            }
            if staging
                .as_ref()
                .is_none_or(|b| (b.as_slice().len() as u64) < bytes)
            {
                drop(staging.take());
                staging = Some(PinnedBuffer::new(bytes as usize)?);
            }
            let Some(found) = staging.as_mut() else {
                continue;
            };
            let found = &mut found.as_mut_slice()[..bytes as usize];
            // SAFETY: the window's chunks lie in the `usable` bytes placed for the region
            // (`expected_chunks` clips them), memory of this session's.
            unsafe { copy_dtoh(found, p.base + window[0].1)? };
            let mut at = 0usize;
            for (&(_, offset, len), e) in window.iter().zip(&expected) {
                let found = &found[at..at + len as usize];
                match present {
                    None => compare(p.region_id, offset, e, found, v),
                    Some(present) => compare_present(p.region_id, offset, e, found, present, v),
                }
                at += len as usize;
            }
        }
    }
    Ok(())
}

/// What verification compares in one region: (the chunk holding the expected bytes, offset in
/// the region, bytes of it inside the region's `usable` part), in region order. Where the
/// kernel left a chunk alone (no post chunk) the input is expected back; where it wrote, the
/// recorded output. Without a recorded output for a chunk (packed without it, redacted, or
/// lost to salvage) the post chunk says only that the kernel writes there: it is left out
/// here and checked across passes instead (determinism).
fn expected_chunks<'a>(
    cap: &'a Capture<'_>,
    region_id: u32,
    usable: u64,
) -> Vec<(&'a ChunkRef, u64, u64)> {
    let post: HashMap<u64, _> = cap
        .chunks(region_id, MemoryState::Post)
        .map(|c| (c.offset, c))
        .collect();
    let mut items: Vec<(&ChunkRef, u64, u64)> = Vec::new();
    for c in cap.chunks(region_id, MemoryState::Pre) {
        let src = match post.get(&c.offset) {
            Some(post) if !cap.recorded_output(post) => continue,
            Some(post) => post,
            None => c,
        };
        if let Some(len) = clipped(c.offset, c.raw_len, usable) {
            items.push((src, c.offset, len));
        }
    }
    items.sort_by_key(|i| i.1);
    items
}

/// The bytes of `cap`'s regions that it does not hold (captured by touched pages).
fn absent_bytes(cap: &Capture<'_>) -> u64 {
    cap.region_extents
        .keys()
        .filter_map(|&id| Some(cap.region(id)?.size.saturating_sub(cap.present_bytes(id))))
        .fold(0u64, u64::saturating_add)
}

/// `compare` of the present bytes only (`present`: the region's extents) of `expected` and
/// `found`, the bytes of a region from `offset` on: an absent byte holds the replay's fill, not
/// the application's value, in both the device and the file.
fn compare_present(
    region_id: u32,
    offset: u64,
    expected: &[u8],
    found: &[u8],
    present: &[(u64, u64)],
    v: &mut VerifyOutcome,
) {
    let len = expected.len().min(found.len()) as u64;
    for (o, l) in kreplay_format::extents::present_ranges(present, offset, len) {
        let (a, b) = ((o - offset) as usize, (o - offset + l) as usize);
        compare(region_id, o, &expected[a..b], &found[a..b], v);
    }
    // As `compare` counts them: bytes one side lacks.
    v.mismatched_bytes += expected.len().abs_diff(found.len()) as u64;
}

/// Groups `spans` (offset, length; in region order) into windows read back with one copy
/// each: runs of touching spans, at most `limit` bytes unless one span alone is larger.
/// Returns each window's span indices and its bytes.
fn verify_windows(spans: &[(u64, u64)], limit: u64) -> Vec<(std::ops::Range<usize>, u64)> {
    let mut windows = Vec::new();
    let mut start = 0;
    while start < spans.len() {
        let mut end = start + 1;
        let mut bytes = spans[start].1;
        while end < spans.len()
            && spans[end].0 == spans[end - 1].0 + spans[end - 1].1
            && bytes + spans[end].1 <= limit
        {
            bytes += spans[end].1;
            end += 1;
        }
        windows.push((start..end, bytes));
        start = end;
    }
    windows
}

/// Writes this process's texture and surface handles into `expected`, the bytes of a region
/// from `offset` on: the captured handle words held the recording process's handles, and the
/// replay rewrote them on the device. A word not wholly inside `expected` is left alone.
fn patch_handles(expected: &mut [u8], region_id: u32, offset: u64, handles: &[(u32, u64, u64)]) {
    for &(_, off, h) in handles.iter().filter(|w| w.0 == region_id) {
        let at = off.wrapping_sub(offset);
        if off >= offset && at + 8 <= expected.len() as u64 {
            expected[at as usize..at as usize + 8].copy_from_slice(&h.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    //! The session's decisions, on the CPU: what verification compares and how it reads the
    //! device back, how regions are uploaded, which code layout and which placement errors
    //! stand. Each test names the mutation of the code it is there to catch.

    use super::*;
    use crate::testdata;
    use kreplay_format::Reference;

    const MIB: u64 = 1 << 20;

    /// (offset, len, whether the expected bytes come from the post-dispatch state).
    fn expected_of(cap: &Capture<'_>, region_id: u32, usable: u64) -> Vec<(u64, u64, bool)> {
        expected_chunks(cap, region_id, usable)
            .into_iter()
            .map(|(src, offset, len)| {
                assert_eq!(
                    src.offset, offset,
                    "the expected chunk is the one at the offset"
                );
                assert_eq!(src.region_id, region_id);
                (offset, len, src.state == MemoryState::Post)
            })
            .collect()
    }

    fn all_of(cap: &Capture<'_>, region_id: u32) -> u64 {
        cap.region(region_id).expect("region").size
    }

    // Catches: expecting the input back where the kernel wrote (`Some(post) => post` made
    // `c`), or expecting the output where it did not (`None => c` made a post lookup).
    #[test]
    fn a_written_region_is_compared_with_the_recorded_output_an_unwritten_with_its_input() {
        let b = testdata::bytes("cuda-saxpy");
        let cap = testdata::parse(&b);
        assert_eq!(cap.reference(), Reference::Recorded);
        let chunks = |post| {
            (0..4)
                .map(|i| (i * 4 * MIB, 4 * MIB, post))
                .collect::<Vec<_>>()
        };
        // y (region 1) is written: its post chunks; x (region 0) is not: its pre chunks.
        assert_eq!(expected_of(&cap, 1, all_of(&cap, 1)), chunks(true));
        assert_eq!(expected_of(&cap, 0, all_of(&cap, 0)), chunks(false));
    }

    // Catches: `Reference::Dropped | Reference::Redacted => true` (a capture packed without
    // its output compared against the zero-length stand-ins of the output it lost).
    #[test]
    fn without_a_recorded_output_written_chunks_are_left_to_the_determinism_check() {
        let packed = testdata::without_output(&testdata::bytes("cuda-saxpy"));
        let cap = testdata::parse(&packed);
        assert_eq!(cap.reference(), Reference::Dropped);
        // Every chunk of y is written: nothing of it is compared with the file.
        assert_eq!(expected_of(&cap, 1, all_of(&cap, 1)), vec![]);
        // x is not written: still compared with its input, all of it.
        let x = expected_of(&cap, 0, all_of(&cap, 0));
        assert_eq!(x.len(), 4);
        assert!(x.iter().all(|&(_, _, post)| !post));
    }

    // Catches: `Reference::Partial => true` (output salvage lost taken for the recorded one)
    // and `=> false` (the output that survived no longer compared).
    #[test]
    fn a_salvaged_capture_compares_only_the_output_that_survived() {
        let salvaged = testdata::salvaged_unfinished(&testdata::bytes("cuda-globals"));
        let cap = testdata::parse(&salvaged);
        assert_eq!(cap.reference(), Reference::Partial);
        // Region 1 and global 3 (hits) kept their recorded output: compared with it.
        assert_eq!(
            expected_of(&cap, 1, all_of(&cap, 1)),
            vec![(0, 4 * MIB, true)]
        );
        assert_eq!(expected_of(&cap, 3, 8), vec![(0, 8, true)]);
        // Salvage marked region 0 and global 2's output unknown: determinism only.
        assert_eq!(expected_of(&cap, 0, all_of(&cap, 0)), vec![]);
        assert_eq!(expected_of(&cap, 2, 16), vec![]);
    }

    // Catches: dropping the clip (`len = c.raw_len`: reading past a module global smaller in
    // the loaded module than in the file) or clipping the offset test wrongly (`<=`).
    #[test]
    fn verification_stops_at_the_usable_bytes_of_a_global() {
        let b = testdata::bytes("cuda-globals");
        let cap = testdata::parse(&b);
        // coef is 16 bytes in the file; a module whose coef holds 10 is compared on 10.
        assert_eq!(expected_of(&cap, 2, 10), vec![(0, 10, false)]);
        assert_eq!(expected_of(&cap, 2, 16), vec![(0, 16, false)]);
        assert_eq!(expected_of(&cap, 2, 0), vec![]);
        // A region larger than usable: the chunks past the end are left out.
        let saxpy = testdata::bytes("cuda-saxpy");
        let cap = testdata::parse(&saxpy);
        assert_eq!(
            expected_of(&cap, 1, 6 * MIB),
            vec![(0, 4 * MIB, true), (4 * MIB, 2 * MIB, true)]
        );
        assert_eq!(expected_of(&cap, 1, 4 * MIB).len(), 1);
    }

    // Catches: `<=` made `<` in the window limit (one window too small), dropping the
    // adjacency test (a gap read back as if it were contiguous), or a window that ignores
    // the limit.
    #[test]
    fn verify_windows_join_touching_spans_up_to_the_limit() {
        let spans = [(0, 4), (4, 4), (8, 4), (16, 4), (20, 10), (30, 2)];
        assert_eq!(
            verify_windows(&spans, 8),
            vec![(0..2, 8), (2..3, 4), (3..4, 4), (4..5, 10), (5..6, 2)]
        );
        assert_eq!(verify_windows(&spans, 100), vec![(0..3, 12), (3..6, 16)]);
        assert_eq!(verify_windows(&[], 8), vec![]);
    }

    // Catches: the same on a real region: 16 MiB of 4 MiB chunks is one read with the 64 MiB
    // window, and four with a window of one chunk.
    #[test]
    fn a_region_is_read_back_in_as_few_windows_as_the_limit_allows() {
        let b = testdata::bytes("cuda-saxpy");
        let cap = testdata::parse(&b);
        let spans: Vec<_> = expected_chunks(&cap, 1, all_of(&cap, 1))
            .iter()
            .map(|&(_, o, l)| (o, l))
            .collect();
        assert_eq!(
            verify_windows(&spans, VERIFY_WINDOW),
            vec![(0..4, 16 * MIB)]
        );
        assert_eq!(verify_windows(&spans, 4 * MIB).len(), 4);
        assert_eq!(
            verify_windows(&spans, 8 * MIB),
            vec![(0..2, 8 * MIB), (2..4, 8 * MIB)]
        );
    }

    // Catches: dropping `off >= offset` (a word before the window wraps round and panics),
    // the region filter (another region's handle written here) or the end test (a word
    // running past the chunk).
    #[test]
    fn only_handle_words_wholly_in_the_window_and_region_are_rewritten() {
        // texture-table's three texture objects are handle words at 0, 8 and 16 of region 0.
        let b = testdata::bytes("texture-table");
        let cap = testdata::parse(&b);
        let words: Vec<_> = cap
            .textures
            .objects
            .iter()
            .map(|o| o.memory_words.clone())
            .collect();
        assert_eq!(words, vec![vec![(0, 0)], vec![(0, 8)], vec![(0, 16)]]);
        let handles = [(0, 0, 0x11), (0, 8, 0x22), (0, 16, 0x33), (1, 0, 0x44)];
        let mut e = cap.read_region(0).expect("region 0");
        assert_eq!(e.len(), 24);
        patch_handles(&mut e, 0, 0, &handles);
        let word = |e: &[u8], i: usize| u64::from_le_bytes(e[i..i + 8].try_into().unwrap());
        assert_eq!((word(&e, 0), word(&e, 8), word(&e, 16)), (0x11, 0x22, 0x33));
        // A window starting at 4 of 12 bytes: only the word at 8 lies wholly in it.
        let mut e = vec![0u8; 12];
        patch_handles(&mut e, 0, 4, &handles);
        assert_eq!(word(&e, 4), 0x22);
        assert_eq!(&e[..4], &[0; 4]);
        // Region 1's handle lands only in region 1.
        let mut e = vec![0u8; 8];
        patch_handles(&mut e, 2, 0, &handles);
        assert_eq!(e, vec![0; 8]);
    }

    // Catches: writing an argument word that runs past the argument bytes (a panic on a file
    // whose word offset is near the end), or skipping one that fits.
    #[test]
    fn argument_handle_words_outside_the_arguments_are_skipped() {
        let mut args = vec![0u8; 20];
        write_arg_handles(&mut args, &[0, 12, 13, u32::MAX], 0x0102_0304_0506_0708);
        assert_eq!(&args[..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&args[12..20], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&args[8..12], &[0; 4]);
    }

    // Catches: `handle_word_fits` made `clipped(..).is_some()` (a word half outside a global
    // written past its end on the device).
    #[test]
    fn a_memory_handle_word_is_written_only_when_all_8_bytes_are_usable() {
        assert!(handle_word_fits(0, 8));
        assert!(handle_word_fits(16, 24));
        assert!(!handle_word_fits(20, 24));
        assert!(!handle_word_fits(24, 24));
        assert!(!handle_word_fits(0, 7));
    }

    fn with_encoding(c: &ChunkRef, encoding: ChunkEncoding) -> ChunkRef {
        ChunkRef { encoding, ..*c }
    }

    // Catches: the window limit dropped for data runs (`zero ||` made `true`: one staging
    // buffer overrun), zero runs cut at the window (needless), or host memory zeroed on the
    // device (`zeroed_here` ignored).
    #[test]
    fn upload_runs_zero_runs_of_zeros_and_stage_the_rest_a_window_at_a_time() {
        let b = testdata::bytes("cuda-saxpy");
        let cap = testdata::parse(&b);
        let c = *cap.chunks(1, MemoryState::Pre).next().expect("a chunk");
        let kinds = [0, 0, 0, 1, 1, 1, 0, 1].map(|k| [ChunkEncoding::Zero, ChunkEncoding::Zstd][k]);
        let owned: Vec<ChunkRef> = kinds
            .iter()
            .enumerate()
            .map(|(i, &e)| ChunkRef {
                offset: i as u64 * c.raw_len,
                ..with_encoding(&c, e)
            })
            .collect();
        let chunks: Vec<&ChunkRef> = owned.iter().collect();
        assert_eq!(
            upload_runs(&chunks, 2, true),
            vec![
                (0..3, true),
                (3..5, false),
                (5..6, false),
                (6..7, true),
                (7..8, false)
            ]
        );
        // Host memory: zeros go through the staging like the rest.
        assert_eq!(
            upload_runs(&chunks, 4, false),
            vec![(0..4, false), (4..8, false)]
        );
        assert_eq!(upload_runs(&[], 2, true), vec![]);
    }

    // Catches: a run across a gap between stored chunks (a capture by touched pages leaves
    // wholly absent chunks out): the staged bytes of the chunk after the gap would land at the
    // gap's offset, and a zero run would zero the gap.
    #[test]
    fn upload_runs_stop_at_a_gap_between_stored_chunks() {
        let b = testdata::bytes("cuda-saxpy");
        let cap = testdata::parse(&b);
        let c = *cap.chunks(1, MemoryState::Pre).next().expect("a chunk");
        let at = |i: u64, e| ChunkRef {
            offset: i * c.raw_len,
            ..with_encoding(&c, e)
        };
        let owned = [
            at(0, ChunkEncoding::Zstd),
            at(1, ChunkEncoding::Zstd),
            at(3, ChunkEncoding::Zstd),
            at(4, ChunkEncoding::Zero),
            at(6, ChunkEncoding::Zero),
        ];
        let chunks: Vec<&ChunkRef> = owned.iter().collect();
        assert_eq!(
            upload_runs(&chunks, 8, true),
            vec![(0..2, false), (2..3, false), (3..4, true), (4..5, true)]
        );
    }

    // Catches: absent bytes compared (the fill against the file's zeros: every absent byte a
    // mismatch), present bytes skipped, or a mismatch reported at the wrong offset.
    #[test]
    fn only_present_bytes_are_verified() {
        // Bytes 4096.. of a chunk at 4096 hold [present 4096..8192, absent 8192..12288,
        // present 12288..12300].
        let present = [(4096u64, 4096u64), (12288, 12)];
        let expected = vec![0u8; 8204];
        let mut found = vec![ABSENT_FILL; 8204];
        found[..4096].fill(0);
        found[8192..].fill(0);
        let mut v = VerifyOutcome::default();
        compare_present(7, 4096, &expected, &found, &present, &mut v);
        assert_eq!(v.mismatched_bytes, 0, "{:?}", v.first_mismatches);
        found[100] = 1;
        found[8200] = 2;
        compare_present(7, 4096, &expected, &found, &present, &mut v);
        assert_eq!(v.mismatched_bytes, 2);
        let at: Vec<u64> = v.first_mismatches.iter().map(|m| m.offset).collect();
        assert_eq!(at, vec![4196, 12296]);
    }

    // Catches: the same on a real region (its zeroed global and its compressed y), and a
    // run list that skips or repeats chunks.
    #[test]
    fn upload_runs_of_real_regions_cover_every_chunk_once() {
        let b = testdata::bytes("cuda-saxpy");
        let cap = testdata::parse(&b);
        let y: Vec<_> = cap.chunks(1, MemoryState::Pre).collect();
        assert_eq!(upload_runs(&y, 3, true), vec![(0..3, false), (3..4, false)]);
        let coef: Vec<_> = cap.chunks(2, MemoryState::Pre).collect();
        assert_eq!(upload_runs(&coef, 1, true), vec![(0..1, true)]);
    }

    // Catches: a staging buffer smaller than a chunk (`UPLOAD_WINDOW.max(chunk)` made
    // `UPLOAD_WINDOW`), larger than the largest region needs (the `largest.min` dropped),
    // or of zero bytes for a capture without memory (the `.max(1)` dropped).
    #[test]
    fn the_staging_window_fits_a_chunk_and_no_more_than_the_largest_region() {
        let b = testdata::bytes("cuda-saxpy");
        let mut cap = testdata::parse(&b);
        assert_eq!(upload_window(&cap), 16 * MIB);
        cap.regions[1].size = 1 << 40;
        assert_eq!(upload_window(&cap), UPLOAD_WINDOW);
        cap.regions[1].chunk_size = 2 * UPLOAD_WINDOW;
        assert_eq!(upload_window(&cap), 2 * UPLOAD_WINDOW);
        cap.regions.clear();
        assert_eq!(upload_window(&cap), 1);
    }

    // Catches: uploading module globals with the regions (they are written into the loaded
    // module's globals, at the module's addresses) or leaving a region out of the progress
    // total.
    #[test]
    fn regions_are_uploaded_and_globals_left_to_the_module() {
        let b = testdata::bytes("cuda-pointers");
        let cap = testdata::parse(&b);
        let ids: Vec<_> = uploaded_regions(&cap).map(|r| r.region_id).collect();
        assert_eq!(ids, (0..7).collect::<Vec<_>>());
        let total: u64 = uploaded_regions(&cap).map(|r| r.size).sum();
        assert_eq!(total, 40 + 5 * MIB + MIB);
    }

    // Catches: the two refusals swapped (a forced move reported as refused by the user, or
    // the reverse), the collision lost, or a move refused with nothing blocking it.
    #[test]
    fn a_move_is_refused_only_when_something_blocks_it() {
        assert!(move_refusal(None, None).is_none());
        assert!(move_refusal(None, Some((1, 2, 3))).is_none());
        match move_refusal(
            Some("a pointer in a texture"),
            Some((0x1000, 0x2000, 0x3000)),
        ) {
            Some(PlayError::CannotRelocate {
                start,
                end,
                got,
                why,
            }) => assert_eq!(
                (start, end, got, why.as_str()),
                (0x1000, 0x2000, 0x3000, "a pointer in a texture")
            ),
            e => panic!("{e:?}"),
        }
        match move_refusal(Some("why"), None) {
            Some(PlayError::RelocationRefused { why }) => assert_eq!(why, "why"),
            e => panic!("{e:?}"),
        }
    }

    // Catches: `placed` ignoring the relocation, or translating addresses outside every
    // moved range (they stay where they were).
    #[test]
    fn a_moved_address_is_translated_and_others_stay() {
        let rel = Relocation::new(vec![(0x1000, 0x100, 0x9000)]);
        assert_eq!(placed(Some(&rel), 0x1010), 0x9010);
        assert_eq!(placed(Some(&rel), 0x1100), 0x1100);
        assert_eq!(placed(None, 0x1010), 0x1010);
    }
}
