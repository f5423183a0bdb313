//! A capture made live: the engine's `ReplayPlan` materialised on a device (memory mapped back
//! at the captured addresses or moved, regions uploaded, module loaded, globals restored,
//! pristine copy of the write set made), then the engine's pass loop.

use std::collections::HashMap;
use std::time::Instant;

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
use kreplay_engine::verify::{compare, VerifyOutcome};
use kreplay_engine::{
    AddressMode, CacheState, CodeSource, Kernel, OpenOptions, PassTiming, Placement, PlayError,
    PristineStore, RegionPlacement, Replayer, Restorer, RunOptions, Verification, WriteSet,
};
use kreplay_format::{
    Capture, ChunkEncoding, ChunkRef, MemoryKind, MemoryState, Reference, Region, RegionRole,
    TextureResource,
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
    /// Where the pristine copy of the write set lives.
    pub pristine: PristineStore,
    pub cache: CacheState,
    pub verify: VerifyOutcome,
}

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
            let array = Rc::new(CudaArray::create(image)?);
            array.copy_from_device(shadow, &stream)?;
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
            let made = TexObject::create(obj, array, address)?;
            for &w in &obj.arg_words {
                if let Some(word) = arg_bytes.get_mut(w as usize..w as usize + 8) {
                    word.copy_from_slice(&made.handle().to_le_bytes());
                }
            }
            for &(region_id, offset) in &obj.memory_words {
                let Some(p) = placements.iter().find(|p| p.region_id == region_id) else {
                    continue;
                };
                if clipped(offset, 8, p.usable) == Some(8) {
                    copy_htod(p.base + offset, &made.handle().to_le_bytes())?;
                    self.memory_words.push((region_id, offset, made.handle()));
                }
            }
            self.objects.push(made);
        }
        Ok(ArraySync::new(written))
    }
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

fn upload_region(
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
    let is_zero = |c: &&ChunkRef| zeroed_here && c.encoding == ChunkEncoding::Zero;
    let mut i = 0;
    while i < chunks.len() {
        let zero = is_zero(&chunks[i]);
        let first = i;
        while i < chunks.len() && is_zero(&chunks[i]) == zero && (zero || i - first < per_window) {
            i += 1;
        }
        let window = &chunks[first..i];
        let start = window[0].offset;
        let len: u64 = window.iter().map(|c| c.raw_len).sum();
        if zero {
            ring.zero(dst + start, len as usize)?;
        } else {
            // Decoded on all cores into one staging buffer while the previous one is copied.
            ring.upload(dst + start, len as usize, |buf| -> Result<(), PlayError> {
                buf.par_chunks_mut(r.chunk_size as usize)
                    .zip(window.par_iter())
                    .try_for_each(|(dst, c)| cap.read_chunk_into(c, dst))?;
                if let Some(rel) = relocation {
                    rel.patch_region_window(cap, region_id, start, buf);
                }
                Ok(())
            })?;
            // Decoded into the staging buffer: the file's pages are no longer needed.
            for c in window {
                release(c.payload_offset, c.payload_offset + c.payload_len);
            }
        }
        progress(len);
    }
    Ok(())
}

/// The kernel's own parameter layout, to compare with the file's. A cubin declares it (its
/// `.nv.info` section), so no driver call is needed; otherwise (PTX through the JIT) the
/// driver is asked parameter by parameter until it says there are no more, which costs one
/// failing call (`compute-sanitizer` lists it as an API error).
fn kernel_layout(
    image: &[u8],
    kernel: &str,
    function: &Function,
    captured: &[(u32, u32)],
) -> Vec<(u32, u32)> {
    match kreplay_format::cubin::declared_params(image, kernel) {
        Some(d) if !d.layout.is_empty() || d.total == Some(0) => d.layout,
        // Only the total is declared: the file's layout stands if it ends there.
        Some(d) if d.total == Some(captured.last().map_or(0, |&(o, s)| o + s)) => captured.to_vec(),
        _ => function.parameter_layout(),
    }
}

/// The first `limit` bytes of a region's pre-dispatch state (all of it when it is smaller),
/// decoded chunk by chunk: `limit` comes from the driver, so the file cannot choose the size.
fn read_region_prefix(cap: &Capture<'_>, r: &Region, limit: u64) -> Result<Vec<u8>, PlayError> {
    let n = r.size.min(limit);
    let mut out = vec![0u8; n as usize];
    let mut chunk = Vec::new();
    for c in cap.chunks(r.region_id, MemoryState::Pre) {
        if c.offset >= n {
            break;
        }
        chunk.resize(c.raw_len as usize, 0);
        cap.read_chunk_into(c, &mut chunk)?;
        let take = (n - c.offset).min(c.raw_len) as usize;
        out[c.offset as usize..c.offset as usize + take].copy_from_slice(&chunk[..take]);
    }
    Ok(out)
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
                if let Some(why) = &plan.relocation_blocker {
                    return Err(PlayError::CannotRelocate {
                        start,
                        end,
                        got,
                        why: why.clone(),
                    });
                }
            }
            Err(e) => return Err(e.into()),
        }
    } else if let Some(why) = &plan.relocation_blocker {
        return Err(PlayError::RelocationRefused { why: why.clone() });
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

/// The launch configuration of the plan, with fresh events where the plan asks for them.
fn launch_config(cap: &Capture<'_>, plan: &LaunchPlan) -> Result<LaunchConfig, PlayError> {
    Ok(kreplay_engine::plan::launch_config(&cap.dispatch, plan)?)
}

/// Loads the planned code and finds the kernel, refusing a kernel whose own parameter layout
/// differs from the capture's: the driver reads the arguments by the kernel's layout, so a
/// damaged or crafted file (or a --module variant with other parameters) would make it read
/// past the argument bytes.
fn load_kernel(
    cap: &Capture<'_>,
    code: &CodePlan,
    launch: &LaunchPlan,
) -> Result<(Module, Function), PlayError> {
    let d = &cap.dispatch;
    let module = Module::load(&code.image)?;
    let function = module
        .function(&d.kernel_name)
        .map_err(|source| PlayError::KernelNotFound {
            kernel: d.kernel_name.clone(),
            source,
        })?;
    let layout = kernel_layout(&code.image, &d.kernel_name, &function, &launch.layout);
    if layout != launch.layout {
        return Err(if code.source == CodeSource::Variant {
            PlayError::VariantMismatch {
                kernel: d.kernel_name.clone(),
                captured: launch.layout.clone(),
                variant: layout,
            }
        } else {
            PlayError::LayoutMismatch {
                kernel: d.kernel_name.clone(),
                captured: launch.layout.clone(),
                actual: layout,
            }
        });
    }
    Ok((module, function))
}

/// Writes each module global's captured bytes into the loaded module's global, sized by the
/// driver's global, never by the file's claim; returns where each landed.
fn restore_globals(
    cap: &Capture<'_>,
    module: &Module,
    relocation: Option<&Relocation>,
) -> Result<Vec<RegionPlacement>, PlayError> {
    let mut placed = Vec::new();
    for g in &cap.globals {
        let Ok((ptr, size)) = module.global(&g.name) else {
            continue; // the variant module may lack it; the kernel cannot reference it then
        };
        let Some(r) = cap.region(g.region_id) else {
            continue;
        };
        let mut data = read_region_prefix(cap, r, size)?;
        if let Some(rel) = relocation {
            rel.patch_region_window(cap, g.region_id, 0, &mut data);
        }
        copy_htod(ptr, &data)?;
        placed.push(RegionPlacement {
            region_id: g.region_id,
            base: ptr,
            usable: data.len() as u64,
        });
    }
    Ok(placed)
}

impl<'c> Session<'c> {
    /// Prepares the capture on device `opts.device`.
    pub fn open(cap: &'c Capture<'c>, opts: &OpenOptions) -> Result<Session<'c>, PlayError> {
        Self::open_with_progress(cap, opts, &mut |_, _| {}, &keep_pages)
    }

    /// `open`, telling `progress` how many of the capture's memory bytes are on the device.
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
        let code = CodePlan::choose(cap, &opts.code, &target)?;
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

        let largest = cap.regions.iter().map(|r| r.size).max().unwrap_or(0);
        let chunk = cap.regions.iter().map(|r| r.chunk_size).max().unwrap_or(1);
        let window = largest.min(UPLOAD_WINDOW.max(chunk)).max(1);
        let mut ring = UploadRing::new(UPLOAD_BUFFERS, window as usize)?;
        let total: u64 = cap
            .regions
            .iter()
            .filter(|r| r.role != RegionRole::Global)
            .map(|r| r.size)
            .sum();
        let mut loaded = 0u64;
        for r in cap.regions.iter().filter(|r| r.role != RegionRole::Global) {
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
            )?;
        }
        ring.finish()?;
        drop(ring);

        let (module, function) = load_kernel(cap, &code, &launch)?;
        let mut placements: Vec<RegionPlacement> = cap
            .regions
            .iter()
            .filter(|r| r.role != RegionRole::Global)
            .map(|r| RegionPlacement {
                region_id: r.region_id,
                base: base_of(r),
                usable: r.size,
            })
            .collect();
        placements.extend(restore_globals(cap, &module, relocation)?);

        if let Some(bytes) = launch.max_dynamic_shared {
            function.set_max_dynamic_shared(bytes)?;
        }
        if launch.non_portable_cluster {
            function.allow_non_portable_cluster()?;
        }
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

        let stream = Stream::new()?;
        let restorer = Restorer::snapshot(WriteSet::of_capture(cap, &placements), &stream)?;
        let kernel = Kernel {
            function,
            config,
            args,
        };
        Ok(Session {
            cap,
            replayer: Replayer::new(kernel, restorer, stream, props, opened)
                .with_arrays(written_arrays),
            placements,
            code: code.source,
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

    /// Replays the dispatch as many times as the metric set needs (see the engine).
    pub fn collect_metrics(
        &mut self,
        req: &MetricRequest,
        cache: CacheState,
    ) -> Result<MetricsReport, PlayError> {
        let kernel = self.cap.dispatch.kernel_name.clone();
        self.replayer.collect_metrics(req, cache, &kernel)
    }

    /// Runs warm-up and timed passes.
    pub fn run(&mut self, opts: &RunOptions) -> Result<PlayReport, PlayError> {
        let checked = opts.verification == Verification::Check;
        let mut v = VerifyOutcome {
            checked,
            reference: self.cap.reference(),
            deterministic: true,
            ..Default::default()
        };
        let relocation = match &self.memory {
            Memory::Moved { relocation, .. } => Some(relocation),
            Memory::Fixed { .. } => None,
        };
        let (cap, placements, release) = (self.cap, &self.placements, self.release);
        let handles = &self.textures.memory_words;
        let stats = self.replayer.run(opts, &mut || {
            check_against_capture(cap, placements, relocation, handles, release, &mut v)
        })?;
        v.deterministic = stats.deterministic;
        v.divergent_passes = stats.divergent_passes.clone();
        v.matched = checked && v.mismatched_bytes == 0;
        let restorer = self.replayer.restorer();
        Ok(PlayReport {
            kernel: cap.dispatch.kernel_name.clone(),
            timing: stats.timing,
            original_ns: cap.dispatch.original_duration_ns,
            address_mode: if relocation.is_some() {
                AddressMode::Relocated
            } else {
                AddressMode::Original
            },
            code: self.code,
            device: self.device.props().name.clone(),
            write_set_bytes: restorer.write_set().bytes(),
            pristine: restorer.store(),
            cache: opts.cache,
            verify: v,
        })
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
    // Without a recorded output, the post chunks say only where the kernel writes: those
    // bytes are checked across passes (determinism), the rest against the input. A salvaged
    // capture has it for the chunks whose output survived.
    let reference = cap.reference();
    let recorded = |c: &ChunkRef| match reference {
        Reference::Recorded => true,
        Reference::Partial => cap.recorded_output(c),
        Reference::Dropped | Reference::Redacted => false,
    };
    let mut staging: Option<PinnedBuffer> = None;
    for p in placements {
        let post: HashMap<u64, _> = cap
            .chunks(p.region_id, MemoryState::Post)
            .map(|c| (c.offset, c))
            .collect();
        // (what to expect, where in the region, bytes there), in region order.
        let mut items: Vec<(&ChunkRef, u64, u64)> = Vec::new();
        for c in cap.chunks(p.region_id, MemoryState::Pre) {
            let src = match post.get(&c.offset) {
                Some(post) if !recorded(post) => continue,
                Some(post) => post,
                None => c,
            };
            if let Some(len) = clipped(c.offset, c.raw_len, p.usable) {
                items.push((src, c.offset, len));
            }
        }
        items.sort_by_key(|i| i.1);
        // Windows of adjacent chunks: decoded on all cores, read back with one copy.
        let mut start = 0;
        while start < items.len() {
            let mut end = start + 1;
            let mut bytes = items[start].2;
            while end < items.len()
                && items[end].1 == items[end - 1].1 + items[end - 1].2
                && bytes + items[end].2 <= VERIFY_WINDOW
            {
                bytes += items[end].2;
                end += 1;
            }
            let window = &items[start..end];
            let expected: Vec<Vec<u8>> = window
                .par_iter()
                .map(|&(src, offset, len)| -> Result<Vec<u8>, PlayError> {
                    let mut e = vec![0u8; src.raw_len as usize];
                    cap.read_chunk_into(src, &mut e)?;
                    if let Some(rel) = relocation {
                        rel.patch_region_window(cap, p.region_id, offset, &mut e);
                    }
                    // Handle words hold this process's handles.
                    for &(_, off, h) in handles.iter().filter(|w| w.0 == p.region_id) {
                        let at = off.wrapping_sub(offset);
                        if off >= offset && at + 8 <= e.len() as u64 {
                            e[at as usize..at as usize + 8].copy_from_slice(&h.to_le_bytes());
                        }
                    }
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
            copy_dtoh(found, p.base + window[0].1)?;
            let mut at = 0usize;
            for (&(_, offset, len), e) in window.iter().zip(&expected) {
                compare(p.region_id, offset, e, &found[at..at + len as usize], v);
                at += len as usize;
            }
            start = end;
        }
    }
    Ok(())
}
