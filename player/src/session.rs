//! A replay session: everything one capture needs on the GPU, then the pass loop.

use std::collections::HashMap;
use std::ffi::c_void;
use std::time::Instant;

use kreplay_format::{
    ptx, Capture, FormatError, LaunchApi, MemoryState, ModuleKind, Region, RegionRole,
};
use kreplay_replay::cache::{self, L2Flush};
use kreplay_replay::driver::{
    self, copy_dtod_async, copy_dtoh, copy_htod, CudaError, DeviceBuffer, DeviceProps, Event,
    Module, PinnedBuffer, PrimaryContext, Stream,
};
use kreplay_replay::timing::GatedTimer;
use kreplay_replay::vmm::{FixedMapping, MapError};
use kreplay_replay::DriverUnavailable;
use rayon::prelude::*;
use serde::Serialize;

use crate::attributes;
use crate::relocate::{self, Relocation};
use crate::verify::{compare, VerifyOutcome};

/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
const ATTR_COOPERATIVE: u32 = 2;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
const ATTR_CLUSTER_DIMENSION: u32 = 4;
/// Staging window for uploads: decoded in parallel, then one DMA.
const UPLOAD_WINDOW: u64 = 256 << 20;
/// The L2 flush sweeps this many times the L2 size (at least `MIN_FLUSH_BYTES`).
const FLUSH_L2_MULTIPLE: u64 = 4;
const MIN_FLUSH_BYTES: u64 = 64 << 20;

/// What can stop a replay.
#[derive(Debug, thiserror::Error)]
pub enum PlayError {
    #[error(transparent)]
    Driver(#[from] DriverUnavailable),
    #[error("device {requested} does not exist: this machine has {count} CUDA device(s)")]
    NoSuchDevice { requested: i32, count: i32 },
    #[error("{}", cuda_message(.0))]
    Cuda(CudaError),
    #[error("cannot map the captured memory: {0}")]
    Map(MapError),
    #[error("device addresses {start:#x}..{end:#x} are taken in this process (the driver offered {got:#x}) and the capture cannot be relocated: {why}")]
    CannotRelocate {
        start: u64,
        end: u64,
        got: u64,
        why: String,
    },
    #[error("the capture was recorded for sm_{captured} and holds no PTX, but device {ordinal} ({name}) is sm_{device}: replay it on an sm_{captured} GPU, or pass --module with a cubin built for sm_{device}")]
    WrongArch {
        captured: u32,
        device: u32,
        ordinal: i32,
        name: String,
    },
    #[error("--ptx: the capture holds no PTX for {0} (the application shipped none, or an older kreplay recorded it)")]
    NoPtx(String),
    #[error("the captured PTX targets sm_{ptx}, newer than {name} (sm_{device}): the JIT cannot compile it for this GPU")]
    PtxTooNew { ptx: u32, device: u32, name: String },
    #[error("the capture holds no module {0} for its dispatch")]
    NoModule(u32),
    #[error("kernel {kernel} was not found in the module: {source}")]
    KernelNotFound { kernel: String, source: CudaError },
    #[error("the --module variant of {kernel} takes different parameters (offset, size): captured {captured:?}, variant {variant:?}")]
    VariantMismatch {
        kernel: String,
        captured: Vec<(u32, u32)>,
        variant: Vec<(u32, u32)>,
    },
    #[error("the capture's parameter layout of {kernel} (offset, size) is {captured:?} but the kernel's own is {actual:?}: the file is damaged or was edited; refusing to launch")]
    LayoutMismatch {
        kernel: String,
        captured: Vec<(u32, u32)>,
        actual: Vec<(u32, u32)>,
    },
    #[error("the capture uses launch attribute {id}, unknown to this kreplay (recorded with a newer CUDA, or the file is damaged): upgrade kreplay")]
    UnknownAttribute { id: u32 },
    #[error("capture is damaged: {0}")]
    Format(FormatError),
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
}

// Hand-written rather than `#[from]`: the message already holds the inner error, and a
// source would make `{:#}` chains print it twice.
impl From<CudaError> for PlayError {
    fn from(e: CudaError) -> Self {
        PlayError::Cuda(e)
    }
}

impl From<MapError> for PlayError {
    fn from(e: MapError) -> Self {
        PlayError::Map(e)
    }
}

impl From<FormatError> for PlayError {
    fn from(e: FormatError) -> Self {
        PlayError::Format(e)
    }
}

/// A driver error in words a user can act on. Faults of the replayed kernel are sticky: every
/// later call fails with the same code, so the first one is explained and the rest stay out.
fn cuda_message(e: &CudaError) -> String {
    use driver::sys::CUresult as R;
    let fault = [
        R::CUDA_ERROR_ILLEGAL_ADDRESS,
        R::CUDA_ERROR_MISALIGNED_ADDRESS,
        R::CUDA_ERROR_ILLEGAL_INSTRUCTION,
        R::CUDA_ERROR_HARDWARE_STACK_ERROR,
        R::CUDA_ERROR_INVALID_ADDRESS_SPACE,
        R::CUDA_ERROR_INVALID_PC,
        R::CUDA_ERROR_LAUNCH_FAILED,
    ];
    if fault.iter().any(|&c| e.is(c)) {
        return format!(
            "the replayed kernel faulted ({}, reported by {}): it touched memory the capture \
             does not hold (memory reached through a path the recorder could not follow). \
             Re-record with `--memory all` to capture every live allocation",
            e.name, e.call
        );
    }
    format!("CUDA error: {e}")
}

/// How the pass loop runs.
#[derive(Debug, Clone)]
pub struct PlayOptions {
    pub device: i32,
    pub passes: u32,
    pub warmup: u32,
    pub verify: bool,
    pub flush_cache: bool,
    /// A replacement code object (cubin) holding a kernel of the same name and parameters.
    pub module_override: Option<Vec<u8>>,
    /// Move every region to new addresses and rewrite the known pointers, even when the
    /// original addresses are free.
    pub relocate: bool,
    /// Load the captured PTX through the driver's JIT even when the captured cubin fits.
    pub ptx: bool,
}

/// The code object a replay runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CodeSource {
    /// The captured cubin.
    Cubin,
    /// The captured PTX, compiled by the driver's JIT for this GPU.
    PtxJit,
    /// A `--module` variant.
    Variant,
}

impl Default for PlayOptions {
    fn default() -> Self {
        PlayOptions {
            device: 0,
            passes: 1,
            warmup: 0,
            verify: false,
            flush_cache: false,
            module_override: None,
            relocate: false,
            ptx: false,
        }
    }
}

/// Where the pristine copy of the write set lives (what each pass restores from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PristineStore {
    /// In device memory (a device-to-device copy per pass).
    Device,
    /// In host memory (device memory was short).
    Host,
    /// The kernel writes nothing: nothing to restore.
    None,
}

/// What L2 holds when a pass starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheState {
    /// Whatever the previous pass (and the restore) left.
    Keep,
    /// Emptied before each pass (see `kreplay_replay::cache`).
    Flush,
}

impl CacheState {
    pub(crate) fn flushed(flush: bool) -> CacheState {
        if flush {
            CacheState::Flush
        } else {
            CacheState::Keep
        }
    }
}

impl std::fmt::Display for CacheState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CacheState::Keep => "keep",
            CacheState::Flush => "flush",
        })
    }
}

/// Where the captured pointers point in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AddressMode {
    /// Every region is mapped at its captured virtual address.
    Original,
    /// Pointers were rewritten to new addresses.
    Relocated,
}

/// Everything a replay produced.
#[derive(Debug, Clone, Serialize)]
pub struct PlayReport {
    pub kernel: String,
    pub passes: u32,
    pub warmup: u32,
    pub durations_ns: Vec<u64>,
    pub min_ns: u64,
    pub median_ns: u64,
    pub max_ns: u64,
    pub original_ns: Option<u64>,
    pub address_mode: AddressMode,
    /// Which code object ran: "cubin", "ptx-jit" or "variant".
    pub code: CodeSource,
    pub device: String,
    pub write_set_bytes: u64,
    /// Restore copy time per pass (not inside `durations_ns`), median.
    pub restore_median_ns: u64,
    /// Where the pristine copy of the write set lives.
    pub pristine: PristineStore,
    pub cache: CacheState,
    /// Whether kernel times exclude launch overhead (stream gated until the launch is queued).
    pub gated_timing: bool,
    /// Wall time from opening the session to the first launch.
    pub setup_ms: f64,
    pub verify: VerifyOutcome,
}

/// One range the kernel writes: restored before every pass.
struct WriteRange {
    device_addr: u64,
    pristine_offset: u64,
    len: u64,
}

enum Pristine {
    Device(DeviceBuffer),
    Host(PinnedBuffer),
    None,
}

/// A capture made live on the GPU.
pub struct Session<'c> {
    cap: &'c Capture<'c>,
    props: DeviceProps,
    // Field order is drop order: everything device-side before the context.
    stream: Stream,
    pristine: Pristine,
    flush: Option<L2Flush>,
    /// The kernel ran at least once, so the write set must be restored before the next pass.
    launched: bool,
    /// Unloaded on drop: the function handle above lives in it.
    _module: Module,
    function: driver::sys::CUfunction,
    args: Vec<u8>,
    param_offsets: Vec<u32>,
    attributes: Vec<(u32, [u8; 64])>,
    /// Events named by rebuilt attributes; they must outlive every launch.
    _attribute_events: Vec<Event>,
    write_set: Vec<WriteRange>,
    /// (region, replay address, bytes usable there): a region's full size, except module
    /// globals, which hold only what the driver says the module's global holds.
    region_addr: Vec<(u32, u64, u64)>,
    relocation: Option<Relocation>,
    code: CodeSource,
    _moved: Vec<DeviceBuffer>,
    _mapping: Option<FixedMapping>,
    ctx: PrimaryContext,
    opened: Instant,
}

/// Which code object to load: the `--module` variant, the captured cubin, or the captured
/// PTX through the driver's JIT (on another architecture, or when asked with `--ptx`).
fn choose_code(
    cap: &Capture<'_>,
    opts: &PlayOptions,
    dev_arch: u32,
    props: &DeviceProps,
) -> Result<(Vec<u8>, CodeSource), PlayError> {
    if let Some(img) = &opts.module_override {
        return Ok((img.clone(), CodeSource::Variant));
    }
    let d = &cap.dispatch;
    let m = cap
        .module(d.module_id)
        .ok_or(PlayError::NoModule(d.module_id))?;
    let ptx = cap
        .modules
        .iter()
        .find(|p| p.kind == ModuleKind::Ptx && ptx::defines_entry(&p.image, &d.kernel_name));
    let wrong_arch = m.kind == ModuleKind::Cubin && m.arch != 0 && m.arch != dev_arch;
    if !(opts.ptx || wrong_arch) {
        return Ok((m.image.clone(), CodeSource::Cubin));
    }
    match ptx {
        Some(p) if p.arch <= dev_arch || p.arch == 0 => Ok((p.image.clone(), CodeSource::PtxJit)),
        Some(p) => Err(PlayError::PtxTooNew {
            ptx: p.arch,
            device: dev_arch,
            name: props.name.clone(),
        }),
        None if wrong_arch => Err(PlayError::WrongArch {
            captured: m.arch,
            device: dev_arch,
            ordinal: opts.device,
            name: props.name.clone(),
        }),
        None => Err(PlayError::NoPtx(d.kernel_name.clone())),
    }
}

/// Loads the driver and checks that device `ordinal` exists.
pub(crate) fn open_device(ordinal: i32) -> Result<(), PlayError> {
    driver::ensure_driver()?;
    let count = driver::device_count()?;
    if ordinal < 0 || ordinal >= count {
        return Err(PlayError::NoSuchDevice {
            requested: ordinal,
            count,
        });
    }
    Ok(())
}

/// A read-only L2 sweep sized for this device.
fn new_flush(props: &DeviceProps) -> Result<L2Flush, PlayError> {
    let l2 = cache::l2_bytes(props.ordinal)?;
    let bytes = (l2 * FLUSH_L2_MULTIPLE).max(MIN_FLUSH_BYTES);
    Ok(L2Flush::new(bytes as usize, props.sm_count)?)
}

/// The address ranges a capture needs at their original addresses.
pub fn fixed_ranges(cap: &Capture<'_>) -> Vec<(u64, u64)> {
    cap.regions
        .iter()
        .filter(|r| r.role != RegionRole::Global)
        .map(|r| (r.address, r.size))
        .collect()
}

fn upload_region(
    cap: &Capture<'_>,
    r: &Region,
    dst: u64,
    staging: &mut PinnedBuffer,
    relocation: Option<&Relocation>,
) -> Result<(), PlayError> {
    let region_id = r.region_id;
    let chunks: Vec<_> = cap.chunks(region_id, MemoryState::Pre).collect();
    let per_window = (staging.as_slice().len() as u64 / r.chunk_size).max(1) as usize;
    for window in chunks.chunks(per_window) {
        let start = window[0].offset;
        let len: u64 = window.iter().map(|c| c.raw_len).sum();
        let buf = &mut staging.as_mut_slice()[..len as usize];
        buf.par_chunks_mut(r.chunk_size as usize)
            .zip(window.par_iter())
            .try_for_each(|(dst, c)| cap.read_chunk_into(c, dst))?;
        if let Some(rel) = relocation {
            rel.patch_region_window(cap, region_id, start, buf);
        }
        copy_htod(dst + start, buf)?;
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
    function: driver::sys::CUfunction,
    captured: &[(u32, u32)],
) -> Vec<(u32, u32)> {
    match kreplay_format::cubin::declared_params(image, kernel) {
        Some(d) if !d.layout.is_empty() || d.total == Some(0) => d.layout,
        // Only the total is declared: the file's layout stands if it ends there.
        Some(d) if d.total == Some(captured.last().map_or(0, |&(o, s)| o + s)) => captured.to_vec(),
        _ => driver::parameter_layout(function),
    }
}

/// The part of the chunk at `offset` (`len` bytes) that lies inside `usable` bytes.
fn clipped(offset: u64, len: u64, usable: u64) -> Option<u64> {
    (offset < usable).then(|| len.min(usable - offset))
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

impl<'c> Session<'c> {
    /// Prepares the capture on device `opts.device`.
    pub fn open(cap: &'c Capture<'c>, opts: &PlayOptions) -> Result<Session<'c>, PlayError> {
        let opened = Instant::now();
        let d = &cap.dispatch;
        // A damaged dispatch is refused before any GPU work.
        if let Some(p) = d
            .params
            .iter()
            .find(|p| p.offset as u64 + p.size as u64 > d.arg_bytes.len() as u64)
        {
            return Err(PlayError::Format(FormatError::Inconsistent {
                offset: 0,
                what: format!(
                    "parameter at offset {} ({} bytes) lies outside the {} argument bytes",
                    p.offset,
                    p.size,
                    d.arg_bytes.len()
                ),
            }));
        }
        let attribute_plan =
            attributes::plan(&d.attributes).map_err(|id| PlayError::UnknownAttribute { id })?;
        open_device(opts.device)?;
        let props = driver::device_props(opts.device)?;
        let dev_arch = props.cc_major * 10 + props.cc_minor;
        let (image, code) = choose_code(cap, opts, dev_arch, &props)?;

        let ctx = PrimaryContext::retain(opts.device)?;
        // Map before anything else allocates device memory, so nothing of ours sits where
        // the capture needs to be.
        let ranges = fixed_ranges(cap);
        let mapped = if opts.relocate {
            Err((0, 0, 0))
        } else {
            match FixedMapping::map(&ranges, opts.device) {
                Ok(m) => Ok(m),
                Err(MapError::AddressInUse { start, end, got }) => Err((start, end, got)),
                Err(e) => return Err(e.into()),
            }
        };
        let (mapping, relocation, moved) = match mapped {
            Ok(m) => (Some(m), None, Vec::new()),
            Err((start, end, got)) => {
                if let Some(why) = relocate::blocker(cap) {
                    return Err(PlayError::CannotRelocate {
                        start,
                        end,
                        got,
                        why,
                    });
                }
                // Ranges that touch or overlap move together, so a buffer that spans them
                // (VMM pieces, sub-allocations) stays contiguous.
                let mut sorted = ranges.clone();
                sorted.sort_unstable();
                let mut groups: Vec<(u64, u64)> = Vec::new();
                for (addr, size) in sorted {
                    match groups.last_mut() {
                        Some(g) if addr <= g.0 + g.1 => g.1 = g.1.max(addr + size - g.0),
                        _ => groups.push((addr, size)),
                    }
                }
                let mut moves = Vec::new();
                let mut bufs = Vec::new();
                for (addr, size) in groups {
                    let b = DeviceBuffer::new(size as usize)?;
                    moves.push((addr, size, b.ptr));
                    bufs.push(b);
                }
                (None, Some(Relocation::new(moves)), bufs)
            }
        };
        let base_of = |r: &Region| {
            relocation
                .as_ref()
                .and_then(|rel| rel.translate(r.address))
                .unwrap_or(r.address)
        };

        let largest = cap.regions.iter().map(|r| r.size).max().unwrap_or(0);
        let chunk = cap.regions.iter().map(|r| r.chunk_size).max().unwrap_or(1);
        let window = largest.min(UPLOAD_WINDOW.max(chunk)).max(1);
        let mut staging = PinnedBuffer::new(window as usize)?;
        for r in cap.regions.iter().filter(|r| r.role != RegionRole::Global) {
            upload_region(cap, r, base_of(r), &mut staging, relocation.as_ref())?;
        }

        let module = Module::load(&image)?;
        let function =
            module
                .function(&d.kernel_name)
                .map_err(|source| PlayError::KernelNotFound {
                    kernel: d.kernel_name.clone(),
                    source,
                })?;
        // The driver reads the arguments by the kernel's own layout: a file whose layout
        // differs (damaged, crafted, or a --module variant with other parameters) would make
        // it read past the argument bytes.
        let captured: Vec<(u32, u32)> = d.params.iter().map(|p| (p.offset, p.size)).collect();
        let layout = kernel_layout(&image, &d.kernel_name, function, &captured);
        if layout != captured {
            return Err(if opts.module_override.is_some() {
                PlayError::VariantMismatch {
                    kernel: d.kernel_name.clone(),
                    captured,
                    variant: layout,
                }
            } else {
                PlayError::LayoutMismatch {
                    kernel: d.kernel_name.clone(),
                    captured,
                    actual: layout,
                }
            });
        }
        let mut region_addr: Vec<(u32, u64, u64)> = cap
            .regions
            .iter()
            .filter(|r| r.role != RegionRole::Global)
            .map(|r| (r.region_id, base_of(r), r.size))
            .collect();
        for g in &cap.globals {
            let Ok((ptr, size)) = driver::module_global(module.raw, &g.name) else {
                continue; // the variant module may lack it; the kernel cannot reference it then
            };
            let Some(r) = cap.region(g.region_id) else {
                continue;
            };
            // Sized by the driver's global, never by the file's claim.
            let mut data = read_region_prefix(cap, r, size)?;
            if let Some(rel) = &relocation {
                rel.patch_region_window(cap, g.region_id, 0, &mut data);
            }
            copy_htod(ptr, &data)?;
            region_addr.push((g.region_id, ptr, data.len() as u64));
        }

        if d.dynamic_shared_bytes > 48 * 1024 {
            driver::set_max_dynamic_shared(function, d.dynamic_shared_bytes)?;
        }
        let cluster_blocks: u32 = d.cluster.iter().map(|&c| c.max(1)).product();
        if cluster_blocks > 8 {
            driver::set_non_portable_cluster(function)?;
        }
        let mut attribute_events = Vec::new();
        let mut attributes: Vec<(u32, [u8; 64])> = Vec::new();
        for a in attribute_plan.attributes {
            let mut value = a.value;
            if a.needs_event {
                let e = Event::new()?;
                value[..8].copy_from_slice(&(e.raw as usize as u64).to_le_bytes());
                attribute_events.push(e);
            }
            attributes.push((a.id, value));
        }
        if d.cluster != [0, 0, 0] && !attributes.iter().any(|a| a.0 == ATTR_CLUSTER_DIMENSION) {
            let mut v = [0u8; 64];
            for (i, c) in d.cluster.iter().enumerate() {
                v[i * 4..i * 4 + 4].copy_from_slice(&c.max(&1).to_le_bytes());
            }
            attributes.push((ATTR_CLUSTER_DIMENSION, v));
        }
        if d.api == LaunchApi::LaunchCooperativeKernel
            && !attributes.iter().any(|a| a.0 == ATTR_COOPERATIVE)
        {
            let mut v = [0u8; 64];
            v[..4].copy_from_slice(&1i32.to_le_bytes());
            attributes.push((ATTR_COOPERATIVE, v));
        }

        // The write set: every chunk with a post-dispatch state.
        let mut write_set: Vec<WriteRange> = Vec::new();
        let mut total = 0u64;
        for r in &cap.regions {
            let Some(&(_, base, usable)) = region_addr.iter().find(|(id, ..)| *id == r.region_id)
            else {
                continue;
            };
            for c in cap.chunks(r.region_id, MemoryState::Post) {
                // Never past what the replay holds there (a global larger in the file than
                // in the module).
                let Some(len) = clipped(c.offset, c.raw_len, usable) else {
                    continue;
                };
                // Adjacent chunks become one copy: fewer, larger copies restore faster.
                match write_set.last_mut() {
                    Some(w)
                        if w.device_addr + w.len == base + c.offset
                            && w.pristine_offset + w.len == total =>
                    {
                        w.len += len
                    }
                    _ => write_set.push(WriteRange {
                        device_addr: base + c.offset,
                        pristine_offset: total,
                        len,
                    }),
                }
                total += len;
            }
        }
        let stream = Stream::new()?;
        let pristine = if total == 0 {
            Pristine::None
        } else {
            match DeviceBuffer::new(total as usize) {
                Ok(buf) => {
                    for w in &write_set {
                        copy_dtod_async(
                            buf.ptr + w.pristine_offset,
                            w.device_addr,
                            w.len as usize,
                            &stream,
                        )?;
                    }
                    stream.synchronize()?;
                    Pristine::Device(buf)
                }
                Err(_) => {
                    let mut host = PinnedBuffer::new(total as usize)?;
                    for w in &write_set {
                        let s = w.pristine_offset as usize;
                        copy_dtoh(
                            &mut host.as_mut_slice()[s..s + w.len as usize],
                            w.device_addr,
                        )?;
                    }
                    Pristine::Host(host)
                }
            }
        };
        let flush = if opts.flush_cache {
            Some(new_flush(&props)?)
        } else {
            None
        };
        let param_offsets = d.params.iter().map(|p| p.offset).collect();
        let mut args = d.arg_bytes.clone();
        if let Some(rel) = &relocation {
            rel.patch_words(&mut args, d.pointer_words.iter().map(|&w| w as u64));
        }
        Ok(Session {
            cap,
            props,
            stream,
            pristine,
            flush,
            launched: false,
            _module: module,
            function,
            args,
            relocation,
            code,
            _moved: moved,
            param_offsets,
            attributes,
            _attribute_events: attribute_events,
            write_set,
            region_addr,
            _mapping: mapping,
            ctx,
            opened,
        })
    }

    pub(crate) fn capture(&self) -> &'c Capture<'c> {
        self.cap
    }

    /// Where a region lives in this replay: its device address and the bytes usable there.
    pub(crate) fn placement(&self, region_id: u32) -> Option<(u64, u64)> {
        self.region_addr
            .iter()
            .find(|r| r.0 == region_id)
            .map(|&(_, base, usable)| (base, usable))
    }

    pub(crate) fn device_name(&self) -> &str {
        &self.props.name
    }

    pub(crate) fn is_relocated(&self) -> bool {
        self.relocation.is_some()
    }

    pub(crate) fn context(&self) -> driver::sys::CUcontext {
        self.ctx.ctx
    }

    pub(crate) fn kernel_name(&self) -> &str {
        &self.cap.dispatch.kernel_name
    }

    pub(crate) fn stream(&self) -> &Stream {
        &self.stream
    }

    pub(crate) fn new_l2_flush(&self) -> Result<L2Flush, PlayError> {
        new_flush(&self.props)
    }

    /// Puts the captured input back when an earlier pass changed it.
    pub(crate) fn restore_if_launched(&self) -> Result<(), PlayError> {
        if self.launched {
            self.restore()?;
        }
        Ok(())
    }

    fn restore(&self) -> Result<(), PlayError> {
        match &self.pristine {
            Pristine::Device(buf) => {
                for w in &self.write_set {
                    copy_dtod_async(
                        w.device_addr,
                        buf.ptr + w.pristine_offset,
                        w.len as usize,
                        &self.stream,
                    )?;
                }
            }
            Pristine::Host(host) => {
                for w in &self.write_set {
                    let s = w.pristine_offset as usize;
                    copy_htod(w.device_addr, &host.as_slice()[s..s + w.len as usize])?;
                }
            }
            Pristine::None => {}
        }
        Ok(())
    }

    pub(crate) fn launch(&mut self) -> Result<(), PlayError> {
        let base = self.args.as_mut_ptr();
        let mut params: Vec<*mut c_void> = self
            .param_offsets
            .iter()
            // SAFETY: `open` checked every parameter lies inside `args`.
            .map(|&o| unsafe { base.add(o as usize) } as *mut c_void)
            .collect();
        let mut l = driver::Launch {
            function: self.function,
            grid: self.cap.dispatch.grid,
            block: self.cap.dispatch.block,
            shared_bytes: self.cap.dispatch.dynamic_shared_bytes,
            attributes: &self.attributes,
            params: &mut params,
        };
        driver::launch(&mut l, &self.stream)?;
        self.launched = true;
        Ok(())
    }

    /// CRC of the whole write set as it is on the device now.
    fn write_set_digest(&self) -> Result<Vec<u32>, PlayError> {
        let mut out = Vec::with_capacity(self.write_set.len());
        let mut buf = Vec::new();
        for w in &self.write_set {
            buf.resize(w.len as usize, 0);
            copy_dtoh(&mut buf, w.device_addr)?;
            out.push(crc32fast::hash(&buf));
        }
        Ok(out)
    }

    /// Compares every region with the recorded post-dispatch state (pre where unchanged).
    fn check_against_capture(&self, v: &mut VerifyOutcome) -> Result<(), PlayError> {
        let mut expected = Vec::new();
        let mut found = Vec::new();
        for &(region_id, base, usable) in &self.region_addr {
            let post: HashMap<u64, _> = self
                .cap
                .chunks(region_id, MemoryState::Post)
                .map(|p| (p.offset, p))
                .collect();
            for c in self.cap.chunks(region_id, MemoryState::Pre) {
                let src = post.get(&c.offset).copied().unwrap_or(c);
                expected.resize(c.raw_len as usize, 0);
                self.cap.read_chunk_into(src, &mut expected)?;
                if let Some(rel) = &self.relocation {
                    rel.patch_region_window(self.cap, region_id, c.offset, &mut expected);
                }
                let Some(len) = clipped(c.offset, c.raw_len, usable) else {
                    continue;
                };
                found.resize(len as usize, 0);
                copy_dtoh(&mut found, base + c.offset)?;
                compare(region_id, c.offset, &expected[..len as usize], &found, v);
            }
        }
        Ok(())
    }

    /// Runs warm-up and timed passes.
    pub fn run(&mut self, opts: &PlayOptions) -> Result<PlayReport, PlayError> {
        let mut timer = GatedTimer::new()?;
        let stop = Event::new()?;
        let restore_start = Event::new()?;
        let mut setup_ms = 0.0;
        for _ in 0..opts.warmup {
            if self.launched {
                self.restore()?;
            } else {
                setup_ms = self.opened.elapsed().as_secs_f64() * 1e3;
            }
            self.launch()?;
            self.stream.synchronize()?;
        }
        let mut durations = Vec::new();
        let mut restores = Vec::new();
        let mut v = VerifyOutcome {
            checked: opts.verify,
            deterministic: true,
            ..Default::default()
        };
        let mut reference: Option<Vec<u32>> = None;
        for pass in 0..opts.passes.max(1) {
            if self.launched {
                restore_start.record_raw(self.stream.raw)?;
                self.restore()?;
                stop.record_raw(self.stream.raw)?;
                stop.synchronize()?;
                restores.push(stop.elapsed_ns_since(&restore_start)?);
            }
            if let Some(f) = &self.flush {
                f.run(&self.stream)?;
            }
            if !self.launched {
                setup_ms = self.opened.elapsed().as_secs_f64() * 1e3;
            }
            timer.arm(self.stream.raw)?;
            let launched_ok = self.launch();
            timer.finish(self.stream.raw)?;
            launched_ok?;
            durations.push(timer.elapsed_ns()?);
            if opts.verify {
                if pass == 0 && opts.warmup == 0 {
                    self.check_against_capture(&mut v)?;
                }
                let digest = self.write_set_digest()?;
                match &reference {
                    None => reference = Some(digest),
                    Some(r) if *r != digest => {
                        v.deterministic = false;
                        v.divergent_passes.push(pass + 1);
                    }
                    Some(_) => {}
                }
            }
        }
        if opts.verify && opts.warmup > 0 {
            // Warm-up passes ran first: restore and run once more for the reference check.
            self.restore()?;
            self.launch()?;
            self.stream.synchronize()?;
            self.check_against_capture(&mut v)?;
        }
        v.matched = opts.verify && v.mismatched_bytes == 0;
        let mut sorted = durations.clone();
        sorted.sort_unstable();
        let mut rs = restores.clone();
        rs.sort_unstable();
        Ok(PlayReport {
            kernel: self.cap.dispatch.kernel_name.clone(),
            passes: opts.passes.max(1),
            warmup: opts.warmup,
            min_ns: sorted.first().copied().unwrap_or(0),
            median_ns: sorted.get(sorted.len() / 2).copied().unwrap_or(0),
            max_ns: sorted.last().copied().unwrap_or(0),
            durations_ns: durations,
            original_ns: self.cap.dispatch.original_duration_ns,
            address_mode: if self.relocation.is_some() {
                AddressMode::Relocated
            } else {
                AddressMode::Original
            },
            code: self.code,
            device: self.props.name.clone(),
            write_set_bytes: self.write_set.iter().map(|w| w.len).sum(),
            restore_median_ns: rs.get(rs.len() / 2).copied().unwrap_or(0),
            pristine: match self.pristine {
                Pristine::Device(_) => PristineStore::Device,
                Pristine::Host(_) => PristineStore::Host,
                Pristine::None => PristineStore::None,
            },
            cache: CacheState::flushed(self.flush.is_some()),
            gated_timing: timer.is_gated(),
            setup_ms,
            verify: v,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    fn err(code: driver::sys::CUresult, call: &'static str) -> CudaError {
        CudaError {
            call,
            code: code as u32,
            name: format!("{code:?}"),
        }
    }

    #[test]
    fn a_fault_is_explained_once() {
        let e = PlayError::from(err(
            driver::sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            "cuEventSynchronize",
        ));
        let text = e.to_string();
        assert!(text.contains("faulted"), "{text}");
        assert!(text.contains("--memory all"), "{text}");
        assert!(!text.contains("  "), "{text}");
        assert_eq!(
            text.matches("CUDA_ERROR_ILLEGAL_ADDRESS").count(),
            1,
            "{text}"
        );
        // No source: a `{:#}` chain does not repeat the driver error.
        assert!(e.source().is_none());
        let other = PlayError::from(err(
            driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            "cuMemAlloc",
        ));
        assert!(other
            .to_string()
            .starts_with("CUDA error: cuMemAlloc failed"));
        assert!(other.source().is_none());
        let f = PlayError::from(FormatError::Limit {
            what: "x",
            message: "y".into(),
        });
        assert!(f.source().is_none());
    }
}
