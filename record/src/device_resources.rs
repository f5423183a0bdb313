//! What the recorder keeps per CUDA context for its own work on the GPU: the L2 sweep kernels
//! (settling before a timed launch, counter passes) and the chunk kernels (write sets, digests,
//! pointer scans) and `profile --variant`'s module, each made on the context's first use and
//! freed before the context goes; and
//! the rule for how much device scratch the recorder may take. Used by capture, spill, profile
//! and the counter batches, so that none of them reaches into another for it.

use std::sync::Mutex;

use kreplay_cuda::cache::L2Flush;
use kreplay_cuda::chunks::ChunkKernels;
use kreplay_cuda::{AsStream, ContextHandle, Device, Event, Module, Stream};

/// The scratch rule, where capture, spill and profile have always asked it.
pub(crate) use crate::scratch_rule::scratch_allowed;

/// The application's sweep kernels, one per context (made on the context's first capture),
/// or why there is none.
static SETTLE: PerContext<L2Flush> = Mutex::new(Vec::new());

/// The L2 sweep for the current context (4 x L2), when device memory allows.
fn make_sweep() -> Result<L2Flush, String> {
    let device = Device::current().map_err(|e| e.to_string())?;
    let props = device.props();
    let bytes = props.l2_bytes * 4;
    if !scratch_allowed(bytes) {
        return Err("not enough free device memory for the L2 sweep".to_string());
    }
    L2Flush::new(bytes as usize, props.sm_count).map_err(|e| e.to_string())
}

/// Something the recorder makes once per context (made on the context's first capture and
/// freed before the context goes, see `forget_context`), or why it could not be made.
type PerContext<T> = Mutex<Vec<(usize, Result<T, String>)>>;

/// Runs `f` with the current context's entry of `cache`, made by `make` on first use.
fn with_per_context<T, R>(
    cache: &PerContext<T>,
    make: impl FnOnce() -> Result<T, String>,
    f: impl FnOnce(&T) -> Result<R, String>,
) -> Result<R, String> {
    let ctx = ContextHandle::current().map_err(|e| e.to_string())?.id();
    let mut all = cache.lock().unwrap_or_else(|e| e.into_inner());
    with_entry(&mut all, ctx, make, f)
}

/// `with_per_context`, unless another thread holds `cache`: then nothing is made and `Err`
/// says so. The prewarm runs inside the application's context creation, where waiting for a
/// thread that holds the lock across driver calls could wait for the driver's own lock.
fn try_with_per_context<T, R>(
    cache: &PerContext<T>,
    make: impl FnOnce() -> Result<T, String>,
    f: impl FnOnce(&T) -> Result<R, String>,
) -> Result<R, String> {
    let ctx = ContextHandle::current().map_err(|e| e.to_string())?.id();
    let mut all = match cache.try_lock() {
        Ok(all) => all,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            return Err("busy on another thread: left to the first use".into())
        }
    };
    with_entry(&mut all, ctx, make, f)
}

/// Runs `f` with context `ctx`'s entry of `all`, made by `make` when it has none.
fn with_entry<T, R>(
    all: &mut Vec<(usize, Result<T, String>)>,
    ctx: usize,
    make: impl FnOnce() -> Result<T, String>,
    f: impl FnOnce(&T) -> Result<R, String>,
) -> Result<R, String> {
    let at = match all.iter().position(|(c, _)| *c == ctx) {
        Some(i) => i,
        None => {
            all.push((ctx, make()));
            all.len() - 1
        }
    };
    let entry = all[at].1.as_ref().map_err(|e| e.clone())?;
    f(entry)
}

/// Drops the entries of `cache` that belong to `context`.
fn forget_in<T>(cache: &PerContext<T>, context: usize) {
    let mut all = cache.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|(c, _)| *c != context);
}

/// The chunk kernels, one per context.
static CHUNK_KERNELS: PerContext<ChunkKernels> = Mutex::new(Vec::new());

/// Runs `f` with the current context's chunk kernels, loading them on first use.
pub(crate) fn with_chunk_kernels<T>(
    f: impl FnOnce(&ChunkKernels) -> kreplay_cuda::CuResult<T>,
) -> Result<T, String> {
    with_kernels_of(&CHUNK_KERNELS, f)
}

/// Runs `f` with the current context's chunk kernels of `cache`, loading them on first use.
fn with_kernels_of<T>(
    cache: &PerContext<ChunkKernels>,
    f: impl FnOnce(&ChunkKernels) -> kreplay_cuda::CuResult<T>,
) -> Result<T, String> {
    with_per_context(cache, load_chunk_kernels, |k| {
        f(k).map_err(|e| e.to_string())
    })
}

/// The writer threads' chunk kernels, one per context, apart from the application's: a
/// writer's comparison (`compare_later`) waits for the GPU, which the application's own work
/// may keep busy for milliseconds, and holding the application's kernels meanwhile made its
/// next capture wait (a training step's tenth capture on an H100 waited 19.6 ms for them).
static WRITER_CHUNK_KERNELS: PerContext<ChunkKernels> = Mutex::new(Vec::new());

/// `with_chunk_kernels` for the writer threads (and the teardown callback's comparison).
pub(crate) fn with_writer_chunk_kernels<T>(
    f: impl FnOnce(&ChunkKernels) -> kreplay_cuda::CuResult<T>,
) -> Result<T, String> {
    with_kernels_of(&WRITER_CHUNK_KERNELS, f)
}

fn load_chunk_kernels() -> Result<ChunkKernels, String> {
    Device::current()
        .and_then(|d| ChunkKernels::load(d.props().sm_count))
        .map_err(|e| e.to_string())
}

/// `kreplay profile --variant`'s module, one per context (loaded at the context's first
/// matching dispatch), or why it would not load.
static VARIANT_MODULES: PerContext<Module> = Mutex::new(Vec::new());

/// Runs `f` with the variant's module for the current context, loading `path` (a cubin, or PTX
/// the driver compiles) on first use. Call with the recorder's driver calls marked, so the
/// module's load is not taken for one of the application's.
pub(crate) fn with_variant_module<R>(
    path: &std::path::Path,
    f: impl FnOnce(&Module) -> Result<R, String>,
) -> Result<R, String> {
    let load = || {
        let image = std::fs::read(path)
            .map_err(|e| format!("cannot read the variant {}: {e}", path.display()))?;
        Module::load(&image).map_err(|e| {
            format!(
                "the variant {} does not load on this GPU ({e}): compile it for this \
                 architecture (nvcc -cubin -arch=sm_XX) or pass its PTX",
                path.display()
            )
        })
    };
    with_per_context(&VARIANT_MODULES, load, f)
}

/// `profile --trace`: a context's origin on the GPU's time axis, and what the trace says of
/// the context.
pub(crate) struct TraceOrigin {
    /// Recorded on the GPU before the context's first traced dispatch.
    event: Event,
    /// The last dispatch's anchor and its place on the axis, in ns: the next anchor is read
    /// against it (a short interval, so `cuEventElapsedTime`'s float keeps its resolution).
    last: Option<(Event, u64)>,
    /// 0-based in the order the process's contexts were first traced.
    pub(crate) index: u32,
    /// The context's device ordinal (`u32::MAX` where the driver did not say).
    pub(crate) device: u32,
    /// Host time (ns since the Unix epoch) when the event was recorded.
    pub(crate) unix_ns: u64,
}

impl TraceOrigin {
    /// Where `anchor` (recorded after the last one, and complete) lies on the axis; it becomes
    /// the last.
    pub(crate) fn place(&mut self, anchor: Event) -> Result<u64, String> {
        let read = |r: kreplay_cuda::CuResult<u64>| {
            r.map_err(|e| format!("reading the trace's anchor: {e}"))
        };
        let at = match &self.last {
            Some((e, pos)) => pos.saturating_add(read(anchor.elapsed_ns_since(e))?),
            None => read(anchor.elapsed_ns_since(&self.event))?,
        };
        self.last = Some((anchor, at));
        Ok(at)
    }
}

/// The traced contexts' origins (an entry only for an origin that was recorded: a failure is
/// not kept, so the next dispatch tries again).
static TRACE_ORIGINS: Mutex<Vec<(usize, TraceOrigin)>> = Mutex::new(Vec::new());
static TRACED_CONTEXTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Records the current context's trace origin on `stream`, unless it has one.
pub(crate) fn ensure_trace_origin(stream: &impl AsStream) -> Result<(), String> {
    let ctx = ContextHandle::current().map_err(|e| e.to_string())?.id();
    let mut all = TRACE_ORIGINS.lock().unwrap_or_else(|e| e.into_inner());
    if all.iter().any(|(c, _)| *c == ctx) {
        return Ok(());
    }
    let event = Event::new().map_err(|e| format!("creating the trace's origin: {e}"))?;
    event
        .record(stream)
        .map_err(|e| format!("recording the trace's origin: {e}"))?;
    let unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let device = Device::current().map_or(u32::MAX, |d| d.ordinal().max(0) as u32);
    all.push((
        ctx,
        TraceOrigin {
            event,
            last: None,
            index: TRACED_CONTEXTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            device,
            unix_ns,
        },
    ));
    Ok(())
}

/// Runs `f` with the current context's trace origin (`ensure_trace_origin` made it).
pub(crate) fn with_trace_origin<R>(
    f: impl FnOnce(&mut TraceOrigin) -> Result<R, String>,
) -> Result<R, String> {
    let ctx = ContextHandle::current().map_err(|e| e.to_string())?.id();
    let mut all = TRACE_ORIGINS.lock().unwrap_or_else(|e| e.into_inner());
    match all.iter_mut().find(|(c, _)| *c == ctx) {
        Some((_, origin)) => f(origin),
        None => Err("no trace origin was recorded in this context".to_string()),
    }
}

/// Whether the recorder makes its per-context resources when a context is created (`prewarm`):
/// for `record` and `profile`, not for `list` (which launches nothing of its own).
/// `KREPLAY_DEBUG_PREWARM=0` leaves them to the first matching launch, as before: the
/// baseline of the stall benchmarks, not a user option.
pub(crate) fn prewarms(config: &kreplay_protocol::config::Config) -> bool {
    let off = std::env::var_os("KREPLAY_DEBUG_PREWARM").is_some_and(|v| v == "0");
    prewarms_in(&config.mode, off)
}

fn prewarms_in(mode: &kreplay_protocol::config::Mode, off: bool) -> bool {
    !off && *mode != kreplay_protocol::config::Mode::List
}

/// Makes, for the current context, what a capture or a profiled dispatch would otherwise make
/// on the application's time at its first matching launch: the L2 sweep (two PTX compiles and
/// its 4 x L2 buffer), the chunk kernels (a PTX compile), a pass timer (pinned memory) and a
/// stream; and runs each kernel once, since a kernel's first launch costs more than the next
/// (575 us against about 100 us for the sweep, measured on the H200). Returns what failed.
pub(crate) fn prewarm() -> Vec<String> {
    let mut failed = Vec::new();
    let stream = match crate::spares::spare_stream() {
        Ok(s) => s,
        Err(e) => return vec![format!("a stream: {e}")],
    };
    let sweep = |sweep: &L2Flush| sweep.run(&stream).map_err(|e| e.to_string());
    if let Err(e) = try_with_per_context(&SETTLE, make_sweep, sweep) {
        failed.push(format!("the L2 sweep: {e}"));
    }
    let first = |k: &ChunkKernels| first_launches(k, &stream).map_err(|e| e.to_string());
    if let Err(e) = try_with_per_context(&CHUNK_KERNELS, load_chunk_kernels, first) {
        failed.push(format!("the chunk kernels: {e}"));
    }
    match crate::spares::spare_timer() {
        Ok(t) => crate::spares::return_timer(t),
        Err(e) => failed.push(format!("a pass timer: {e}")),
    }
    // A capture holds two at once (the snapshot stream, and the slab copy's upload): both
    // made now, not on the application's time.
    match crate::spares::spare_stream() {
        Ok(second) => crate::spares::return_stream(second),
        Err(e) => failed.push(format!("a second stream: {e}")),
    }
    match stream.synchronize() {
        Ok(()) => crate::spares::return_stream(stream),
        Err(e) => failed.push(format!("the first launches: {e}")),
    }
    failed
}

/// Each chunk kernel once, over a small buffer of ours.
fn first_launches(k: &ChunkKernels, stream: &Stream) -> kreplay_cuda::CuResult<()> {
    const BYTES: u64 = kreplay_format::DEFAULT_CHUNK_SIZE;
    let buf = kreplay_cuda::DeviceBuffer::new(BYTES as usize)?;
    buf.fill(0)?;
    // SAFETY: `buf` is ours, `BYTES` long, and lives until this returns (each call waits for
    // its kernel).
    unsafe {
        k.scan(buf.ptr(), Some(buf.ptr()), BYTES, BYTES, stream)?;
        k.digest(buf.ptr(), BYTES, BYTES, stream)?;
        // A zeroed buffer has no hit (zero is never one): only the launch matters here.
        let _hits = k.pointer_scan(buf.ptr(), BYTES, (1, u64::MAX), None, 1, None, stream)?;
        // The kernels over many pieces (a pointer table's allocations), each over two.
        let half = BYTES / 2;
        k.copy_many(
            &[
                (buf.ptr(), buf.ptr() + half, 16),
                (buf.ptr() + 16, buf.ptr() + half + 16, 16),
            ],
            stream,
        )?;
        let scan = |at: u64| kreplay_cuda::many::ManyScan {
            pre: buf.ptr() + at,
            post: buf.ptr() + half + at,
            bytes: 4096,
            chunk_shift: BYTES.trailing_zeros(),
            first_flag: (at / 4096) as usize,
        };
        k.scan_many(&[scan(0), scan(4096)], stream)?;
        let ranges = [(buf.ptr(), 4096), (buf.ptr() + 4096, 4096)];
        let _hits =
            k.pointer_scan_many(&ranges, (1, u64::MAX), None, u64::from(u32::MAX), 1, stream)?;
    }
    // Room kept for a first capture's larger calls (a pointer table's 10,000 regions): the
    // walk's first GPU scan keeps room for `FIRST_SCAN_HITS` hits, and the tables of 10,000
    // pieces (a row of at most four words each) take 320 KiB. Never the application's last
    // free memory: without room, the first capture allocates as before.
    // Optional: without it (an allocation refused) the first capture allocates as before, and
    // the prewarm did not fail.
    if scratch_allowed((PREWARM_SCRATCH + PREWARM_ROWS) as u64) {
        let _room = k.keep_room(PREWARM_SCRATCH, PREWARM_ROWS);
    }
    Ok(())
}

/// Output room kept at context creation: the walk's first GPU scan's `FIRST_SCAN_HITS` hits of
/// 24 bytes, and its regions' shape words.
const PREWARM_SCRATCH: usize = 2 << 20;
/// Pieces' table room kept at context creation: 32,768 rows of four words.
const PREWARM_ROWS: usize = 1 << 20;

/// Queues one L2 flush (the settle sweep, see `cache`) on `stream`, loading it for the current
/// context on first use; returns the kernels queued, or why there is none (device memory
/// short).
pub(crate) fn flush_l2(stream: &Stream) -> Result<u32, String> {
    with_sweep(|sweep| sweep.run(stream).map_err(|e| e.to_string()))
}

/// Runs `f` with the current context's L2 sweep, made on first use.
pub(crate) fn with_sweep<R>(f: impl FnOnce(&L2Flush) -> Result<R, String>) -> Result<R, String> {
    with_per_context(&SETTLE, make_sweep, f)
}

/// Drops what belongs to a context about to be destroyed (its L2 sweep, its chunk kernels,
/// the variant's module, the writers' staging rings).
pub(crate) fn forget_context(context: usize) {
    forget_in(&SETTLE, context);
    forget_in(&CHUNK_KERNELS, context);
    forget_in(&WRITER_CHUNK_KERNELS, context);
    forget_in(&VARIANT_MODULES, context);
    crate::spares::forget_context(context);
    crate::staging_rings::forget_context(context);
    TRACE_ORIGINS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(c, _)| *c != context);
}

#[cfg(test)]
mod tests {
    use super::{prewarms_in, PREWARM_ROWS, PREWARM_SCRATCH};
    use kreplay_protocol::config::Mode;

    // Catches: the room kept at context creation too small for the first capture of a
    // 10,000-entry pointer table (its first calls would allocate, and free the smaller
    // buffer, while the application waits).
    #[test]
    fn the_room_kept_covers_a_pointer_tables_first_calls() {
        let regions = 10_000;
        let cap = crate::reachable::FIRST_SCAN_HITS;
        let first_scan = kreplay_cuda::many::pointer_scan_out_len(regions, cap);
        assert!(PREWARM_SCRATCH >= first_scan, "{first_scan} bytes");
        // A 4 KiB region is one piece; a scan row is four words.
        assert!(PREWARM_ROWS >= regions * 4 * 8);
    }

    // Catches: `list` paying for sweeps and kernels it never runs, or the debug switch (the
    // stall benchmark's baseline) not turning the prewarm off.
    #[test]
    fn record_and_profile_prewarm_unless_turned_off_list_never() {
        assert!(prewarms_in(&Mode::Record, false));
        assert!(prewarms_in(&Mode::Profile, false));
        assert!(!prewarms_in(&Mode::List, false));
        assert!(!prewarms_in(&Mode::Record, true));
        assert!(!prewarms_in(&Mode::Profile, true));
    }
}
