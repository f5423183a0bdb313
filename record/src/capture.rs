//! Taking one dispatch: before the launch (arguments, reachable memory, globals, code object)
//! and after it (the bytes it changed, its duration). Runs inside the launch callback, so the
//! application is stalled only while device memory is copied to the host.

use std::collections::HashSet;
use std::time::Instant;

use kreplay_format::{
    Dispatch, LaunchAttribute, MemoryKind, ModuleGlobal, ModuleImage, Param, Region, RegionRole,
    DEFAULT_CHUNK_SIZE,
};
use kreplay_replay::driver::{self, sys};
use kreplay_replay::timing::GatedTimer;

use crate::launch::{argument_bytes, LaunchView};

/// Regions larger than this are not scanned for pointers (pointer tables are small; scanning
/// gigabytes of floats finds nothing but noise).
const POINTER_SCAN_LIMIT: usize = 64 << 20;
/// Most address lookups made while following pointers in one capture.
const POINTER_LOOKUP_LIMIT: usize = 1 << 14;
/// Pointer candidates must lie within this distance of an argument region.
const POINTER_WINDOW: u64 = 1 << 40;

/// A region and its bytes before the launch.
pub struct Snapshot {
    pub region: Region,
    /// Where to read it in this process (globals: their address here; others: same).
    pub device_addr: u64,
    pub pre: Vec<u8>,
}

/// A capture between launch ENTER and EXIT.
pub struct Pending {
    pub correlation: u32,
    pub stream: sys::CUstream,
    pub timer: GatedTimer,
    pub data: CaptureData,
}

/// Everything the writer thread needs (no CUDA handles: it runs off the callback thread).
pub struct CaptureData {
    pub dispatch: Dispatch,
    pub snapshots: Vec<Snapshot>,
    pub globals: Vec<ModuleGlobal>,
    pub module: ModuleImage,
    pub pointer_slots: Vec<(u32, u64)>,
    pub notes: Vec<String>,
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
    pub module: ModuleImage,
    /// Global variables of the module: (name, size).
    pub module_objects: &'a [(String, u64)],
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
    let mut snapshots: Vec<Snapshot> = Vec::new();
    let mut pointer_words = Vec::new();
    let mut known: Vec<(u64, u64)> = Vec::new();
    let mut next_id = 0u32;
    let mut add = |base: u64,
                   size: u64,
                   role: RegionRole,
                   snaps: &mut Vec<Snapshot>,
                   known: &mut Vec<(u64, u64)>|
     -> Result<(), String> {
        let pre = copy_region(base, size)?;
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
                if let Some((base, len)) = driver::address_range(word) {
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

    // Pointers stored in captured memory, transitively.
    if let (Some(lo), Some(hi)) = (
        known.iter().map(|k| k.0).min(),
        known.iter().map(|k| k.0 + k.1).max(),
    ) {
        let lo = lo.saturating_sub(POINTER_WINDOW);
        let hi = hi.saturating_add(POINTER_WINDOW);
        let mut failed: HashSet<u64> = HashSet::new();
        let mut lookups = 0usize;
        let mut i = 0;
        'regions: while i < snapshots.len() {
            if snapshots[i].pre.len() > POINTER_SCAN_LIMIT {
                i += 1;
                continue;
            }
            let words: Vec<u64> = snapshots[i]
                .pre
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .filter(|&v| v >= lo && v < hi && v != 0)
                .collect();
            for v in words {
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
                match driver::address_range(v) {
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

    // Words in captured memory that point into captured memory: replay rewrites them if it
    // has to move the regions.
    let mut pointer_slots = Vec::new();
    if let (Some(lo), Some(hi)) = (
        known.iter().map(|k| k.0).min(),
        known.iter().map(|k| k.0 + k.1).max(),
    ) {
        for s in snapshots
            .iter()
            .filter(|s| s.pre.len() <= POINTER_SCAN_LIMIT)
        {
            for (i, c) in s.pre.chunks_exact(8).enumerate() {
                let v = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
                if v >= lo && v < hi && known.iter().any(|&(b, n)| v >= b && v < b + n) {
                    pointer_slots.push((s.region.region_id, (i * 8) as u64));
                }
            }
        }
    }

    // Module globals: resolved in the application's module, restored by name at replay.
    let mut globals = Vec::new();
    if let Ok(module) = driver::function_module(input.function) {
        for (name, _) in input.module_objects {
            let Ok((addr, size)) = driver::module_global(module, name) else {
                continue;
            };
            if size == 0 {
                continue;
            }
            let pre = copy_region(addr, size)?;
            globals.push(ModuleGlobal {
                module_id: input.module.module_id,
                name: name.clone(),
                region_id: next_id,
            });
            snapshots.push(Snapshot {
                region: Region {
                    region_id: next_id,
                    address: addr,
                    size,
                    kind: MemoryKind::ModuleGlobal,
                    role: RegionRole::Global,
                    chunk_size: DEFAULT_CHUNK_SIZE,
                },
                device_addr: addr,
                pre,
            });
            next_id += 1;
        }
    }

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
        data: CaptureData {
            dispatch,
            snapshots,
            globals,
            module: input.module,
            pointer_slots,
            notes,
            stall_ns: began.elapsed().as_nanos() as u64,
            began,
        },
    })
}

/// After the launch: duration, and every chunk whose bytes changed.
pub fn after_launch(p: &mut Pending) -> Result<Vec<PostChunk>, String> {
    let t = Instant::now();
    p.timer.finish(p.stream).map_err(|e| e.to_string())?;
    driver::ctx_synchronize().map_err(|e| format!("the kernel failed: {e}"))?;
    p.data.dispatch.original_duration_ns = p.timer.elapsed_ns().ok();
    let mut post = Vec::new();
    for s in &p.data.snapshots {
        let now = copy_region(s.device_addr, s.region.size)?;
        let cs = s.region.chunk_size as usize;
        for (i, (a, b)) in s.pre.chunks(cs).zip(now.chunks(cs)).enumerate() {
            if a != b {
                post.push((s.region.region_id, (i * cs) as u64, b.to_vec()));
            }
        }
    }
    p.data.stall_ns += t.elapsed().as_nanos() as u64;
    Ok(post)
}
