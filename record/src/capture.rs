//! Taking one dispatch: before the launch (arguments, reachable memory, globals, code object)
//! and after it (the bytes it changed, its duration). Runs inside the launch callback, so the
//! application is stalled only while device memory is copied to the host.

use std::collections::HashSet;
use std::time::Instant;

use kreplay_format::{
    DeviceInfo, Dispatch, LaunchAttribute, MemoryKind, ModuleGlobal, ModuleImage, Param, Region,
    RegionRole, DEFAULT_CHUNK_SIZE,
};
use std::sync::Mutex;

use kreplay_replay::cache::{self, L2Flush};
use kreplay_replay::driver::{self, sys, ContextHandle, DeviceBuffer, Event, PinnedBuffer, Stream};
use kreplay_replay::timing::GatedTimer;

use crate::launch::{argument_bytes, LaunchView};

/// Regions larger than this are not scanned for pointers (pointer tables are small; scanning
/// gigabytes of floats finds nothing but noise).
const POINTER_SCAN_LIMIT: usize = 64 << 20;
/// Most address lookups made while following pointers in one capture.
const POINTER_LOOKUP_LIMIT: usize = 1 << 14;
/// Most bytes one region grows to while joining contiguous VMM mappings.
const VMM_EXTENT_LIMIT: u64 = 64 << 30;
/// Most candidate pointer words kept from the pointer walk for the pointer slots (24 bytes
/// each); past it, the slots are found by reading the regions again.
const CANDIDATE_LIMIT: usize = 1 << 22;
/// Pointer candidates must lie within this distance of an argument region.
const POINTER_WINDOW: u64 = 1 << 40;

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
    pub post: Option<DeviceBuffer>,
}

/// Page-locked buffer the pointer scan reads regions into (full PCIe speed, allocated once).
static STAGING: Mutex<Option<PinnedBuffer>> = Mutex::new(None);

/// Read sweeps over 4 x L2 run before the measured launch (see `settle`): at least this many,
const SETTLE_MIN_SWEEPS: u32 = 16;
/// and then more until two in a row take the same time within `SETTLE_STABLE`, up to this many.
const SETTLE_MAX_SWEEPS: u32 = 128;
const SETTLE_STABLE: f64 = 0.02;
/// The application's sweep kernels, one per context (made on the context's first capture),
/// or why there is none.
static SETTLE: Mutex<Vec<(usize, Result<L2Flush, String>)>> = Mutex::new(Vec::new());

/// Before the measured launch: the snapshot copies left L2 full of dirty scratch lines, whose
/// write-backs would land inside the kernel's time, and the GPU may have idled at low clocks
/// (memory clocks drop within milliseconds of idling, e.g. while the application was stalled
/// by the capture before). Read sweeps over a buffer larger than L2 write those lines back and
/// keep the GPU busy until two sweeps in a row take the same time (the clocks are up), so the
/// in-app figure is the kernel's own duration with an empty L2 (what `kreplay play --cache
/// flush` replays: each sweep ends by discarding its own lines, see `cache`). Skipped (and said
/// so) when device memory is short. `KREPLAY_DEBUG_SETTLE=0` turns it off (a measurement aid).
fn settle(stream: &Stream) -> Result<Settled, String> {
    if std::env::var_os("KREPLAY_DEBUG_SETTLE").is_some_and(|v| v == "0") {
        return Err("disabled".into());
    }
    let ctx = ContextHandle::current().map_err(|e| e.to_string())?.id();
    let mut sweeps = SETTLE.lock().unwrap_or_else(|e| e.into_inner());
    let at = match sweeps.iter().position(|(c, _)| *c == ctx) {
        Some(i) => i,
        None => {
            let made = (|| {
                let ordinal = driver::current_device().map_err(|e| e.to_string())?;
                let props = driver::device_props(ordinal).map_err(|e| e.to_string())?;
                let bytes = cache::l2_bytes(ordinal).map_err(|e| e.to_string())? * 4;
                if !scratch_allowed(bytes) {
                    return Err("not enough free device memory for the L2 sweep".to_string());
                }
                L2Flush::new(bytes as usize, props.sm_count).map_err(|e| e.to_string())
            })();
            sweeps.push((ctx, made));
            sweeps.len() - 1
        }
    };
    let sweep = sweeps[at].1.as_ref().map_err(|e| e.clone())?;
    let e = |e: driver::CudaError| e.to_string();
    for _ in 0..SETTLE_MIN_SWEEPS - 2 {
        sweep.run(stream).map_err(e)?;
    }
    let (start, stop) = (Event::new().map_err(e)?, Event::new().map_err(e)?);
    let mut last: Option<u64> = None;
    for n in SETTLE_MIN_SWEEPS - 1..=SETTLE_MAX_SWEEPS {
        start.record_raw(stream.raw).map_err(e)?;
        sweep.run(stream).map_err(e)?;
        stop.record_raw(stream.raw).map_err(e)?;
        stop.synchronize().map_err(e)?;
        let t = stop.elapsed_ns_since(&start).map_err(e)?;
        if let Some(prev) = last {
            if (t as f64 - prev as f64).abs() <= SETTLE_STABLE * prev as f64 {
                return Ok(Settled {
                    sweeps: n,
                    steady: true,
                    empty: sweep.empties(),
                });
            }
        }
        last = Some(t);
    }
    Ok(Settled {
        sweeps: SETTLE_MAX_SWEEPS,
        steady: false,
        empty: sweep.empties(),
    })
}

/// How the measured launch was prepared, for the capture's annotation.
struct Settled {
    sweeps: u32,
    /// The last two sweeps took the same time (the clocks were up).
    steady: bool,
    /// L2 was left empty (false: full of clean sweep lines, where the GPU has no `discard`).
    empty: bool,
}

impl std::fmt::Display for Settled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "original duration measured after {} L2 read sweeps ({}; {}; compare with play --cache flush)",
            self.sweeps,
            if self.steady {
                "the last two took the same time"
            } else {
                "their time had not settled"
            },
            if self.empty {
                "empty L2"
            } else {
                "L2 full of clean lines: this GPU cannot discard them"
            }
        )
    }
}

fn lock_staging() -> std::sync::MutexGuard<'static, Option<PinnedBuffer>> {
    STAGING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bytes of a region to scan for pointers: its host copy, or a read into the staging
/// buffer. `None` for regions too large to scan.
fn scan_view<'a>(
    s: &'a Snapshot,
    staging: &'a mut Option<PinnedBuffer>,
) -> Result<Option<&'a [u8]>, String> {
    match &s.pre {
        Bytes::Host(v) if v.len() <= POINTER_SCAN_LIMIT => Ok(Some(v)),
        Bytes::Host(_) => Ok(None),
        Bytes::Device(buf) if buf.len <= POINTER_SCAN_LIMIT => {
            // Sized to what is needed (pinning costs time while the application waits).
            if staging
                .as_ref()
                .is_none_or(|st| st.as_slice().len() < buf.len)
            {
                let size = buf
                    .len
                    .next_power_of_two()
                    .clamp(1 << 20, POINTER_SCAN_LIMIT);
                *staging = None;
                *staging = Some(PinnedBuffer::new(size).map_err(|e| e.to_string())?);
            }
            let Some(st) = staging.as_mut() else {
                return Ok(None);
            };
            let view = &mut st.as_mut_slice()[..buf.len];
            driver::copy_dtoh(view, s.device_addr).map_err(|e| e.to_string())?;
            Ok(Some(&*view))
        }
        Bytes::Device(_) => Ok(None),
    }
}

/// Device scratch for snapshots is used only while this much device memory stays free after
/// it, so the application never runs out of memory because of a capture.
/// `KREPLAY_DEBUG_SNAPSHOT=host` forces host snapshots (a measurement aid, not a user option).
fn scratch_allowed(size: u64) -> bool {
    if std::env::var_os("KREPLAY_DEBUG_SNAPSHOT").is_some_and(|v| v == "host") {
        return false;
    }
    driver::memory_info()
        .is_ok_and(|(free, total)| free.saturating_sub(2 * size) > (total / 4).max(8 << 30))
}

/// Copies a region to a device scratch buffer on `stream` (the caller synchronises).
fn device_copy(addr: u64, size: u64, stream: &Stream) -> Option<DeviceBuffer> {
    if !scratch_allowed(size) {
        return None;
    }
    let buf = DeviceBuffer::new(size as usize).ok()?;
    driver::copy_dtod_async(buf.ptr, addr, size as usize, stream).ok()?;
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

/// Pointer slots from the pointer walk's candidate words `(region, offset, value)`: those whose
/// value lies inside a captured region `(base, size)`, in region then offset order.
fn slots_from_candidates(candidates: &[(u32, u64, u64)], known: &[(u64, u64)]) -> Vec<(u32, u64)> {
    candidates
        .iter()
        .filter(|&&(_, _, v)| known.iter().any(|&(b, n)| v >= b && v < b + n))
        .map(|&(region, offset, _)| (region, offset))
        .collect()
}

/// A capture between launch ENTER and EXIT.
pub struct Pending {
    pub correlation: u32,
    pub stream: sys::CUstream,
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
    /// 1-based among matching dispatches, and among all launches of the process.
    pub match_index: u64,
    pub launch_index: u64,
    /// The GPU, as the recorder saw it before the launch.
    pub device: Option<DeviceInfo>,
    pub began: Instant,
    pub stall_ns: u64,
}

/// A region that changed: (region id, chunk offset, post bytes).
pub type PostChunk = (u32, u64, Vec<u8>);

fn copy_region(addr: u64, size: u64) -> Result<Vec<u8>, String> {
    let n = usize::try_from(size).map_err(|_| format!("region of {size} bytes"))?;
    let mut v = vec![0u8; n];
    driver::copy_dtoh(&mut v, addr)
        .map_err(|e| format!("reading {size} bytes at {addr:#x}: {e}"))?;
    Ok(v)
}

fn memory_kind(addr: u64) -> MemoryKind {
    if driver::is_managed(addr) {
        MemoryKind::Managed
    } else {
        MemoryKind::Device
    }
}

/// Everything known before the launch that the recorder needs to resolve.
pub struct PreInput<'a> {
    pub view: &'a LaunchView,
    pub function: sys::CUfunction,
    pub kernel_name: String,
    pub module: CodeObject,
    /// Global variables of the module: (name, size).
    pub module_objects: &'a [(String, u64)],
    /// Every live allocation, for `--memory all` (empty otherwise).
    pub allocations: Vec<(u64, u64, MemoryKind)>,
    pub correlation: u32,
}

/// Snapshots everything the dispatch reads. Call with the context synchronised.
pub fn before_launch(input: PreInput<'_>) -> Result<Pending, String> {
    let began = Instant::now();
    let view = input.view;
    let layout = driver::parameter_layout(input.function);
    // SAFETY: the view was decoded in this very callback; the layout belongs to its function.
    let args = unsafe { argument_bytes(view, &layout) }
        .ok_or("the launch passed neither kernelParams nor a usable extra buffer")?;
    driver::ctx_synchronize().map_err(|e| e.to_string())?;

    let mut notes = Vec::new();
    let mut staging = lock_staging();
    let mut snapshots: Vec<Snapshot> = Vec::new();
    let mut pointer_words = Vec::new();
    let mut known: Vec<(u64, u64)> = Vec::new();
    let mut next_id = 0u32;
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let mut add = |base: u64,
                   size: u64,
                   role: RegionRole,
                   snaps: &mut Vec<Snapshot>,
                   known: &mut Vec<(u64, u64)>|
     -> Result<(), String> {
        // Device scratch when memory allows (the application waits for a 2 TB/s copy, not
        // for PCIe); the host otherwise.
        let pre = match device_copy(base, size, &stream) {
            Some(b) => Bytes::Device(b),
            None => Bytes::Host(copy_region(base, size)?),
        };
        snaps.push(Snapshot {
            region: Region {
                region_id: next_id,
                address: base,
                size,
                kind: memory_kind(base),
                role,
                chunk_size: DEFAULT_CHUNK_SIZE,
            },
            device_addr: base,
            pre,
            post: None,
        });
        known.push((base, size));
        next_id += 1;
        Ok(())
    };

    // Arguments: every aligned 8-byte word inside a parameter of 8 bytes or more.
    for &(off, size) in &layout {
        if size < 8 {
            continue;
        }
        let mut w = off.div_ceil(8) * 8;
        while w + 8 <= off + size {
            let word = u64::from_le_bytes(
                args[w as usize..w as usize + 8]
                    .try_into()
                    .unwrap_or([0; 8]),
            );
            if word != 0 {
                if let Some((base, len)) = driver::allocation_range(word, VMM_EXTENT_LIMIT) {
                    if driver::is_host_memory(base) {
                        notes.push(format!("argument word at offset {w} points to host memory at {word:#x}; not captured"));
                    } else {
                        pointer_words.push(w);
                        if !known.iter().any(|&(b, _)| b == base) {
                            add(base, len, RegionRole::Argument, &mut snapshots, &mut known)?;
                        }
                    }
                }
            }
            w += 8;
        }
    }

    // Module globals: resolved in the application's module, restored by name at replay. They
    // are roots of the pointer walk below: a library may keep its tables behind a pointer in
    // a global (cuFFT's `lut_sp`), which no argument mentions.
    let mut globals = Vec::new();
    if let Ok(module) = driver::function_module(input.function) {
        for (name, _) in input.module_objects {
            let Ok((addr, size)) = driver::module_global(module, name) else {
                continue;
            };
            if size == 0 {
                continue;
            }
            add(addr, size, RegionRole::Global, &mut snapshots, &mut known)?;
            if let Some(s) = snapshots.last_mut() {
                s.region.kind = MemoryKind::ModuleGlobal;
                globals.push(ModuleGlobal {
                    module_id: input.module.module_id,
                    name: name.clone(),
                    region_id: s.region.region_id,
                });
            }
        }
    }

    // Pointers stored in captured memory, transitively. The words that may be pointers are
    // kept with their offsets, so the pointer slots below need not read the regions again.
    let mut window: Option<(u64, u64)> = None;
    let mut scanned: HashSet<u32> = HashSet::new();
    let mut candidates: Vec<(u32, u64, u64)> = Vec::new();
    if let (Some(lo), Some(hi)) = (
        known.iter().map(|k| k.0).min(),
        known.iter().map(|k| k.0 + k.1).max(),
    ) {
        let lo = lo.saturating_sub(POINTER_WINDOW);
        let hi = hi.saturating_add(POINTER_WINDOW);
        window = Some((lo, hi));
        let mut failed: HashSet<u64> = HashSet::new();
        let mut lookups = 0usize;
        let mut i = 0;
        'regions: while i < snapshots.len() {
            let words: Vec<(u64, u64)> = match scan_view(&snapshots[i], &mut staging)? {
                Some(pre) => pre
                    .chunks_exact(8)
                    .enumerate()
                    .map(|(k, c)| {
                        (
                            (k * 8) as u64,
                            u64::from_le_bytes(c.try_into().unwrap_or([0; 8])),
                        )
                    })
                    .filter(|&(_, v)| v >= lo && v < hi && v != 0)
                    .collect(),
                None => {
                    i += 1;
                    continue;
                }
            };
            let region_id = snapshots[i].region.region_id;
            if candidates.len() + words.len() <= CANDIDATE_LIMIT {
                scanned.insert(region_id);
                candidates.extend(words.iter().map(|&(off, v)| (region_id, off, v)));
            }
            for (_, v) in words {
                if known.iter().any(|&(b, s)| v >= b && v < b + s) || failed.contains(&v) {
                    continue;
                }
                lookups += 1;
                if lookups > POINTER_LOOKUP_LIMIT {
                    notes.push(format!(
                        "stopped following stored pointers after {POINTER_LOOKUP_LIMIT} lookups"
                    ));
                    break 'regions;
                }
                match driver::allocation_range(v, VMM_EXTENT_LIMIT) {
                    Some((base, len)) if !driver::is_host_memory(base) => {
                        add(base, len, RegionRole::Indirect, &mut snapshots, &mut known)?
                    }
                    _ => {
                        failed.insert(v);
                    }
                }
            }
            i += 1;
        }
    }

    // `--memory all`: every other live allocation too.
    for &(base, size, kind) in &input.allocations {
        if known.iter().any(|&(b, n)| base < b + n && b < base + size) {
            continue;
        }
        add(
            base,
            size,
            RegionRole::Allocation,
            &mut snapshots,
            &mut known,
        )?;
        if let Some(s) = snapshots.last_mut() {
            s.region.kind = kind;
        }
    }

    // Words in captured memory that point into captured memory: replay rewrites them if it
    // has to move the regions. Regions the pointer walk read are settled from its candidates
    // (exact when every captured region lies inside its window); only the others are read.
    let mut pointer_slots = Vec::new();
    let covered = window.is_some_and(|(lo, hi)| known.iter().all(|&(b, n)| b >= lo && b + n <= hi));
    if covered {
        pointer_slots = slots_from_candidates(&candidates, &known);
    } else {
        scanned.clear();
    }
    if let (Some(lo), Some(hi)) = (
        known.iter().map(|k| k.0).min(),
        known.iter().map(|k| k.0 + k.1).max(),
    ) {
        for s in snapshots
            .iter()
            .filter(|s| !scanned.contains(&s.region.region_id))
        {
            let Some(pre) = scan_view(s, &mut staging)? else {
                continue;
            };
            for (i, c) in pre.chunks_exact(8).enumerate() {
                let v = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
                if v >= lo && v < hi && known.iter().any(|&(b, n)| v >= b && v < b + n) {
                    pointer_slots.push((s.region.region_id, (i * 8) as u64));
                }
            }
        }
    }
    pointer_slots.sort_unstable();

    let measuring = crate::quiet::measure();
    match settle(&stream) {
        Ok(settled) => notes.push(settled.to_string()),
        Err(why) => notes.push(format!(
            "original duration measured without settling L2 ({why}); the snapshot copies may slow the kernel"
        )),
    }
    // The kernel must not start before the scratch copies (and sweeps) are done.
    stream.synchronize().map_err(|e| e.to_string())?;

    // Last: the stream stays gated until the launch is queued (see GatedTimer).
    let mut timer = GatedTimer::new().map_err(|e| e.to_string())?;
    timer.arm(view.stream).map_err(|e| e.to_string())?;
    let dispatch = Dispatch {
        kernel_name: input.kernel_name,
        module_id: input.module.module_id,
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
    };
    Ok(Pending {
        correlation: input.correlation,
        stream: view.stream,
        timer,
        measuring: Some(measuring),
        data: CaptureData {
            dispatch,
            snapshots,
            globals,
            module: input.module,
            ptx_sources: Vec::new(),
            pointer_slots,
            context: ContextHandle::current().ok(),
            post: Vec::new(),
            notes,
            match_index: 0,
            launch_index: 0,
            device: None,
            stall_ns: began.elapsed().as_nanos() as u64,
            began,
        },
    })
}

/// After the launch: duration, and the post-dispatch state (compared now for host snapshots,
/// copied to device scratch for the others).
pub fn after_launch(p: &mut Pending) -> Result<(), String> {
    let t = Instant::now();
    p.timer.finish(p.stream).map_err(|e| e.to_string())?;
    let done = driver::ctx_synchronize().map_err(|e| format!("the kernel failed: {e}"));
    p.measuring = None;
    done?;
    p.data.dispatch.original_duration_ns = p.timer.elapsed_ns().ok();
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let mut post = Vec::new();
    for s in &mut p.data.snapshots {
        match &s.pre {
            Bytes::Host(pre) => {
                let now = copy_region(s.device_addr, s.region.size)?;
                post.extend(changed_chunks(
                    s.region.region_id,
                    s.region.chunk_size as usize,
                    pre,
                    &now,
                ));
            }
            Bytes::Device(_) => {
                let copy = device_copy(s.device_addr, s.region.size, &stream);
                match copy {
                    Some(b) => s.post = Some(b),
                    None => {
                        return Err(format!(
                            "no device memory left for the post-dispatch copy of {} bytes",
                            s.region.size
                        ))
                    }
                }
            }
        }
    }
    stream.synchronize().map_err(|e| e.to_string())?;
    p.data.post = post;
    p.data.stall_ns += t.elapsed().as_nanos() as u64;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_settle_annotation_says_what_l2_held() {
        let empty = super::Settled {
            sweeps: 18,
            steady: true,
            empty: true,
        };
        let s = empty.to_string();
        assert!(
            s.contains("after 18 L2 read sweeps") && s.contains("empty L2"),
            "{s}"
        );
        let full = super::Settled {
            sweeps: 128,
            steady: false,
            empty: false,
        };
        let s = full.to_string();
        assert!(
            s.contains("had not settled") && s.contains("cannot discard"),
            "{s}"
        );
        assert!(!s.contains("empty L2"), "{s}");
    }

    #[test]
    fn pointer_slots_are_the_candidates_that_land_in_captured_memory() {
        let known = [(0x1000, 0x100), (0x8000, 0x10)];
        let candidates = [
            (0, 0, 0x1000),  // first byte of a region
            (0, 8, 0x10ff),  // last byte
            (0, 16, 0x1100), // one past the end
            (1, 0, 0x800f),
            (1, 8, 0x7fff),
            (2, 24, 0x8000),
        ];
        assert_eq!(
            super::slots_from_candidates(&candidates, &known),
            vec![(0, 0), (0, 8), (1, 0), (2, 24)]
        );
    }
}
