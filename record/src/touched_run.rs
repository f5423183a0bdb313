//! `record --memory touched` (issue 35): which 4 KiB pages of each captured region the dispatch
//! reads or writes, found by running it once more, instrumented through the Compute Sanitizer
//! API, at its launch's EXIT (the application's own launch has run uninstrumented, timed as
//! always; launching the application's kernel at its ENTER can stall inside the driver).
//!
//! At EXIT the regions hold the dispatch's output and the device scratch its input. The run
//! puts the input back where the dispatch wrote, patches the kernel's module with
//! `touched_patch`'s callbacks, runs the kernel on its own stream with the state the callbacks
//! mark pages in, reads the bitmaps, unpatches, and puts the application's output back (the
//! pristine input over every page the run wrote, then the dispatch's written runs over that).
//! The snapshots then hold their touched pages as `Snapshot::touched`; the writer stores only
//! those. Where anything of it cannot be done, the capture holds whole regions, as
//! `--memory reachable` does, and says why.

use std::collections::HashSet;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use kreplay_cuda::sanitizer::{self, SanitizerApi, Subscription};
use kreplay_cuda::touched_patch::{self, TouchedRegion, TouchedState, PAGE, PATCHES, PATCH_FATBIN};
use kreplay_cuda::{
    copy_dtod_async, copy_dtoh, copy_htod, ctx_synchronize, ContextHandle, DeviceBuffer,
    ForeignFunction, KernelArgs, LaunchConfig, Stream,
};
use kreplay_format::extents::{extents_of_pages, pages_of_ranges};
use kreplay_format::MemoryKind;

use crate::snapshot::{Bytes, Snapshot};

/// The Sanitizer API as the recorder runs on it: loaded once, subscribed once.
pub(crate) struct Front {
    pub api: SanitizerApi,
    pub subscription: Subscription,
    /// The patch module, written to a file of the recorder's (the API loads it by path).
    patch_file: CString,
    patch_path: PathBuf,
    /// Contexts the patch module was loaded into.
    patched_contexts: Mutex<HashSet<usize>>,
}

static FRONT: OnceLock<Front> = OnceLock::new();

/// The front, once `start` succeeded.
pub(crate) fn front() -> Option<&'static Front> {
    FRONT.get()
}

/// Loads the Sanitizer API, writes the patch module out and subscribes `callback`; why not,
/// when any of it fails (nothing is subscribed then).
pub(crate) fn start(callback: sanitizer::Callback) -> Result<&'static Front, String> {
    let env = std::env::var(sanitizer::LIBRARY_ENV).ok();
    let home = std::env::var("CUDA_HOME")
        .or_else(|_| std::env::var("CUDA_PATH"))
        .ok();
    let api = SanitizerApi::load(&sanitizer::candidates(env.as_deref(), home.as_deref()))
        .map_err(|e| e.to_string())?;
    let patch_path = std::env::temp_dir().join(format!(
        "kreplay-touched-patch-{}.fatbin",
        std::process::id()
    ));
    std::fs::write(&patch_path, PATCH_FATBIN)
        .map_err(|e| format!("writing the patch module to {}: {e}", patch_path.display()))?;
    let patch_file = CString::new(patch_path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a NUL in the path", patch_path.display()))?;
    let subscription = match api.subscribe(callback) {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&patch_path);
            return Err(format!(
                "{e} (another tool, compute-sanitizer or a profiler, may hold the subscription)"
            ));
        }
    };
    let front = Front {
        api,
        subscription,
        patch_file,
        patch_path,
        patched_contexts: Mutex::default(),
    };
    Ok(FRONT.get_or_init(|| front))
}

/// Removes the patch module's file (at the process's exit).
pub(crate) fn clean_up() {
    if let Some(f) = front() {
        let _ = std::fs::remove_file(&f.patch_path);
    }
}

impl Front {
    /// Loads the patch module into `context` unless it was already.
    pub(crate) fn load_patches(&self, context: &ContextHandle) -> Result<(), String> {
        let mut done = self
            .patched_contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if done.contains(&context.id()) {
            return Ok(());
        }
        self.api
            .add_patches(&self.patch_file, context)
            .map_err(|e| e.to_string())?;
        done.insert(context.id());
        Ok(())
    }

    /// A context is going away: its handle may be reused by a new one.
    pub(crate) fn forget_context(&self, context: usize) {
        self.patched_contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&context);
    }
}

/// Whether a loaded module (its cubin, an ELF) calls device `printf`: a second run of one of
/// its kernels would print again, into the application's output. Per module, not per kernel
/// (a module's other kernels are taken as printing too: their captures hold whole regions).
/// An image that is not an ELF (a fatbin, whose entries may be compressed) cannot be told.
pub(crate) fn prints(image: &[u8]) -> bool {
    image.starts_with(b"\x7fELF") && image.windows(9).any(|w| w == b"\0vprintf\0")
}

/// `runs` (offset, length) cut at every multiple of `chunk`: one piece per chunk the GPU found
/// changed, so that each must hold a page the instrumented run wrote (a run of several chunks
/// would pass on one).
pub(crate) fn chunk_pieces(
    runs: impl IntoIterator<Item = (u64, u64)>,
    chunk: u64,
) -> impl Iterator<Item = (u64, u64)> {
    let chunk = chunk.max(1);
    runs.into_iter().flat_map(move |(off, len)| {
        let end = off.saturating_add(len);
        let mut at = off;
        std::iter::from_fn(move || {
            (at < end).then(|| {
                let stop = ((at / chunk).saturating_add(1).saturating_mul(chunk)).min(end);
                let piece = (at, stop - at);
                at = stop;
                piece
            })
        })
    })
}

/// The first of the dispatch's changed runs (offset, length in its region) holding no page
/// the instrumented run wrote (`written`: page indices, ascending): a run of the same kernel on
/// the same input that did not write where the application's did took another path, and its
/// pages do not stand for the application's launch.
pub(crate) fn unwritten_run(
    runs: impl IntoIterator<Item = (u64, u64)>,
    written: &[u64],
) -> Option<u64> {
    runs.into_iter().find_map(|(off, len)| {
        let (first, last) = (off / PAGE, (off + len.max(1) - 1) / PAGE);
        let i = written.partition_point(|&p| p < first);
        (written.get(i).is_none_or(|&p| p > last)).then_some(off)
    })
}

/// Why the instrumented run cannot see all of a launch's accesses, judged from its parameter
/// layout (offset, size): a TMA tensor map parameter (`relocate::tensor_map_param`), whose
/// tensor copies (`cp.async.bulk.tensor`) are not among `touched_patch::PATCHES` (the
/// Sanitizer API patches them from 13.3 on only): the pages they read or write would be
/// stored absent.
pub(crate) fn unseen_accesses(layout: &[(u32, u32)]) -> Option<String> {
    let offset = kreplay_engine::relocate::tensor_map_param(layout.iter().copied())?;
    Some(format!(
        "the parameter at offset {offset} is 128 bytes, 64-byte aligned: a TMA tensor map, whose tensor copies the instrumented run does not see"
    ))
}

/// `prints` of a module's image, found once per image: a range asks at every step, and an
/// image may be megabytes. The cache keeps each image alive, so its address names it alone.
pub(crate) fn prints_once(image: &std::sync::Arc<Vec<u8>>) -> bool {
    type Seen = std::collections::HashMap<usize, (std::sync::Arc<Vec<u8>>, bool)>;
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    let mut seen = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let key = std::sync::Arc::as_ptr(image) as usize;
    seen.entry(key)
        .or_insert_with(|| (std::sync::Arc::clone(image), prints(image)))
        .1
}

/// What the instrumented run launches: the application's kernel, as it was launched.
pub struct TouchedLaunch {
    pub function: ForeignFunction,
    pub config: LaunchConfig,
    pub args: KernelArgs,
}

/// What the run found, for the capture's notes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Found {
    pub regions: usize,
    pub pages: u64,
    pub touched_pages: u64,
    pub run_ms: f64,
}

impl Found {
    pub(crate) fn note(&self) -> String {
        format!(
            "--memory touched: the dispatch touched {} of the {} 4 KiB pages of its {} region(s) ({:.1} % held); the instrumented run took {:.2} ms",
            self.touched_pages,
            self.pages,
            self.regions,
            if self.pages == 0 {
                0.0
            } else {
                100.0 * self.touched_pages as f64 / self.pages as f64
            },
            self.run_ms
        )
    }
}

/// One snapshot as the run needs it: where the region is, its pristine bytes on the device,
/// and the dispatch's written runs (offset, len, where in `post`).
struct Tracked {
    index: usize,
    addr: u64,
    size: u64,
    pre: u64,
    post: u64,
    runs: Vec<(u64, u64, u64)>,
    /// The region's chunk size, the grain the GPU compared at.
    chunk: u64,
}

/// Why a snapshot cannot take part (the run could not put its bytes back).
fn tracked(i: usize, s: &Snapshot) -> Result<Tracked, String> {
    let id = s.region.region_id;
    if s.array.is_some() {
        return Err(format!("region {id} is a CUDA array"));
    }
    if s.spilled.is_some() {
        return Err(format!(
            "region {id} went to the file during the stall (no device scratch for it)"
        ));
    }
    let Bytes::Device(pre) = &s.pre else {
        return Err(format!(
            "region {id} is held on the host (a kernel of this device may not read it where it lies)"
        ));
    };
    let Some(post) = &s.post else {
        return Err(format!(
            "region {id} has no post-dispatch state on the device"
        ));
    };
    let Some(runs) = &post.runs else {
        return Err(format!("region {id} was compared on the host"));
    };
    Ok(Tracked {
        index: i,
        addr: s.device_addr,
        size: s.region.size,
        pre: pre.ptr(),
        post: post.buf.as_ref().map_or(0, |b| b.ptr()),
        runs: runs.iter().map(|r| (r.offset, r.len, r.at)).collect(),
        chunk: s.region.chunk_size,
    })
}

/// The device buffers of one run: the state the callbacks get, the region table, the bitmaps.
struct DeviceState {
    state: DeviceBuffer,
    _regions: DeviceBuffer,
    read: DeviceBuffer,
    write: DeviceBuffer,
    words: usize,
}

impl DeviceState {
    /// Keeps every buffer allocated (`DeviceBuffer::leak`).
    fn leak(self) {
        for b in [self.state, self._regions, self.read, self.write] {
            b.leak();
        }
    }
}

fn bytes_of<T: Copy>(v: &[T]) -> Vec<u8> {
    let n = std::mem::size_of_val(v);
    let mut out = vec![0u8; n];
    // SAFETY: `T` is a repr(C) struct of integers (TouchedRegion, TouchedState): plain bytes
    // with no padding read (the layout tests check it), copied into a buffer of their size.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr().cast::<u8>(), out.as_mut_ptr(), n) };
    out
}

/// The most pages one run tracks: 64 Mi pages (256 GiB) make 8 MiB bitmaps.
const MOST_PAGES: u64 = 1 << 26;

fn device_state(table: &[TouchedRegion], pages: u64) -> Result<DeviceState, String> {
    if pages > MOST_PAGES {
        return Err(format!(
            "{pages} pages to track, more than the {MOST_PAGES} one run tracks"
        ));
    }
    let words = (pages as usize).div_ceil(32) + 1;
    let e = |what: &'static str| move |err: kreplay_cuda::CudaError| format!("{what}: {err}");
    let alloc = |n: usize| DeviceBuffer::new(n.max(8)).map_err(e("allocating the run's state"));
    let (state, regions, read, write) = (
        alloc(std::mem::size_of::<TouchedState>())?,
        alloc(std::mem::size_of_val(table))?,
        alloc(words * 4)?,
        alloc(words * 4)?,
    );
    let header = TouchedState {
        on: 1,
        nregions: table.len() as u32,
        regions: regions.ptr(),
        read_bits: read.ptr(),
        write_bits: write.ptr(),
        outside: 0,
        first_outside: 0,
    };
    read.fill(0).map_err(e("clearing the bitmaps"))?;
    write.fill(0).map_err(e("clearing the bitmaps"))?;
    // SAFETY: each destination is a buffer of ours at least as long as the bytes copied.
    unsafe {
        if !table.is_empty() {
            copy_htod(regions.ptr(), &bytes_of(table)).map_err(e("copying the region table"))?;
        }
        copy_htod(state.ptr(), &bytes_of(&[header])).map_err(e("copying the run's state"))?;
    }
    // The clears run on the legacy stream, asynchronous to the host, and the run's stream does
    // not wait for it: done before the run.
    ctx_synchronize().map_err(e("clearing the bitmaps"))?;
    Ok(DeviceState {
        state,
        _regions: regions,
        read,
        write,
        words,
    })
}

/// Whether the kernel may read a region by means the patch does not see, so that its touched
/// pages say nothing of what it needs: module globals (`__constant__` variables are read
/// through the constant banks, not global-memory instructions; all globals are small) and
/// linear memory a texture or surface object views (`tex`/`suld` fetches).
pub(crate) fn read_unseen(kind: MemoryKind, (addr, size): (u64, u64), views: &[u64]) -> bool {
    kind == MemoryKind::ModuleGlobal || views.iter().any(|&v| v >= addr && v - addr < size)
}

/// Finds the pages `launch` touches and gives the snapshots their `touched` ranges; why not,
/// when it cannot (the snapshots are then left whole). `views`: the linear memory texture and
/// surface objects of the dispatch view. The application's memory holds the dispatch's output
/// again when this returns, whatever it returns (short of a kernel fault).
pub(crate) fn find_pages(
    front: &Front,
    launch: &mut TouchedLaunch,
    snapshots: &mut [Snapshot],
    views: &[u64],
) -> Result<Found, String> {
    let began = Instant::now();
    let tracked: Vec<Tracked> = snapshots
        .iter()
        .enumerate()
        .map(|(i, s)| tracked(i, s))
        .collect::<Result<_, _>>()?;
    let stream = Stream::new().map_err(|e| format!("creating the run's stream: {e}"))?;
    // The dispatch's input back where it wrote; if that fails part way, its output goes back
    // over what was put back before the error is told.
    if let Err(why) = put_back_input(&tracked, &stream) {
        return Err(match put_back_runs(&tracked, &stream) {
            Ok(()) => why,
            Err(also) => format!("{why}; {also}: the application's output may be wrong"),
        });
    }
    let regions: Vec<(u64, u64)> = tracked.iter().map(|t| (t.addr, t.size)).collect();
    let run = run_tracking(front, launch, &regions, &stream);
    // Whatever the run did, the application's output goes back before anything else.
    let written = run.as_ref().ok().map(|r| &r.written[..]);
    let put_back = put_back_output(&tracked, written, &stream);
    // A put-back that failed is told first: the application's memory may be wrong then.
    if let Err(also) = put_back {
        let run = run.err().map(|why| format!("{why}; ")).unwrap_or_default();
        return Err(format!(
            "{run}{also}: the application's output may be wrong"
        ));
    }
    let run = run?;
    run.inside("the captured regions")
        .map_err(|why| format!("{why}: the walk missed memory the kernel uses"))?;
    for (t, written) in tracked.iter().zip(&run.written) {
        let changed = t.runs.iter().map(|&(o, l, _)| (o, l));
        if let Some(off) = unwritten_run(chunk_pieces(changed, t.chunk), written) {
            return Err(format!(
                "the instrumented run wrote nothing in bytes {off:#x}.. of region {}, which the application's launch changed: the two runs took different paths, so its pages cannot be trusted",
                snapshots[t.index].region.region_id
            ));
        }
    }
    let mut touched_pages = 0;
    for (t, either) in tracked.iter().zip(&run.touched) {
        let s = &mut snapshots[t.index];
        if read_unseen(s.region.kind, (t.addr, t.size), views) {
            touched_pages += t.size.div_ceil(PAGE);
            s.touched = None;
            continue;
        }
        touched_pages += either.len() as u64;
        s.touched = held(either, t.size);
    }
    Ok(Found {
        regions: tracked.len(),
        // Per region (overlapping ones share bitmap pages but are counted each).
        pages: tracked.iter().map(|t| t.size.div_ceil(PAGE)).sum(),
        touched_pages,
        run_ms: began.elapsed().as_secs_f64() * 1e3,
    })
}

/// What one instrumented run found of each region it tracked (in their order): the pages it
/// wrote, and those it read or wrote (region-relative, ascending).
pub(crate) struct RunPages {
    pub written: Vec<Vec<u64>>,
    pub touched: Vec<Vec<u64>>,
    outside: u64,
    first_outside: u64,
}

impl RunPages {
    /// Why the pages say too little: the run accessed memory outside the regions tracked
    /// (`what` names them).
    pub(crate) fn inside(&self, what: &str) -> Result<(), String> {
        if self.outside == 0 {
            return Ok(());
        }
        Err(format!(
            "the instrumented run made {} access(es) outside {what} (the first at {:#x}; a write there by the run was not undone)",
            self.outside, self.first_outside
        ))
    }
}

/// Runs `launch` once on `stream`, its module patched, tracking the 4 KiB pages of `regions`
/// (address, size; they may overlap). The caller has put the input in place, and puts the
/// output back whatever this returns.
pub(crate) fn run_tracking(
    front: &Front,
    launch: &mut TouchedLaunch,
    regions: &[(u64, u64)],
    stream: &Stream,
) -> Result<RunPages, String> {
    let plan = touched_patch::plan(regions)?;
    let context = ContextHandle::current().map_err(|e| e.to_string())?;
    front.load_patches(&context)?;
    let module = launch
        .function
        .module()
        .map_err(|e| format!("the kernel's module: {e}"))?;
    let dev = device_state(&plan.table, plan.pages)?;
    if let Err(ran) = instrumented_run(front, launch, &module, &dev, stream) {
        if ran.state_still_set {
            // The patched kernel would write into it at the application's next launch of
            // it: it stays allocated, for the process's life.
            dev.leak();
        }
        return Err(ran.why);
    }
    let (state, write_bits, read_bits) = read_bits(&dev)?;
    let part = |bits: &[u32], i: usize| {
        let at = plan.placed.get(i).copied().flatten();
        at.and_then(|(entry, off)| plan.table.get(entry).map(|r| (r, off)))
            .map_or_else(Vec::new, |(r, off)| part_pages(bits, r, off, regions[i].1))
    };
    let written: Vec<Vec<u64>> = (0..regions.len()).map(|i| part(&write_bits, i)).collect();
    let touched = (0..regions.len())
        .map(|i| merge(&part(&read_bits, i), &written[i]))
        .collect();
    Ok(RunPages {
        written,
        touched,
        outside: state.outside,
        first_outside: state.first_outside,
    })
}

/// The pages (relative to the part, ascending) of the part of table entry `r` at `offset`,
/// `size` bytes long, that hold a byte of a page set in `bits` (a part need not start on a
/// page of its entry: overlapping regions share one).
fn part_pages(bits: &[u32], r: &TouchedRegion, offset: u64, size: u64) -> Vec<u64> {
    let held = extents_of_pages(&touched_patch::pages_of(bits, r), PAGE, r.size);
    pages_of_ranges(&held, offset, size, PAGE)
}

/// What a snapshot holds of a region of `size` bytes whose touched pages are `pages`: the
/// region whole (`None`) when they cover it, else their ranges.
pub(crate) fn held(pages: &[u64], size: u64) -> Option<Vec<(u64, u64)>> {
    let extents = extents_of_pages(pages, PAGE, size);
    (extents != [(0, size)]).then_some(extents)
}

/// The sorted union of two sorted page lists.
fn merge(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out: Vec<u64> = a.iter().chain(b).copied().collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Why the instrumented run failed, and whether the kernel may still call the patches with
/// the run's state (neither unset nor unpatched): the state must then outlive the process.
struct RunFailed {
    why: String,
    state_still_set: bool,
}

impl From<String> for RunFailed {
    fn from(why: String) -> RunFailed {
        RunFailed {
            why,
            state_still_set: false,
        }
    }
}

/// Patches, launches and unpatches; the launch waited for.
fn instrumented_run(
    front: &Front,
    launch: &mut TouchedLaunch,
    module: &kreplay_cuda::ForeignModule,
    dev: &DeviceState,
    stream: &Stream,
) -> Result<(), RunFailed> {
    let api = &front.api;
    api.patch(module, &PATCHES).map_err(|e| e.to_string())?;
    // SAFETY: the state is a buffer of ours holding a TouchedState, alive past the launch,
    // unset below before it is freed.
    let set = unsafe { api.set_function_data(&launch.function, dev.state.ptr()) };
    let ran = set.map_err(|e| e.to_string()).and_then(|()| {
        // SAFETY: the application's own launch, with its arguments, configuration and the
        // input it had (put back above), in its context, while the application waits in the
        // launch's EXIT callback: it reads and writes what the dispatch did.
        unsafe { kreplay_cuda::launch(&launch.function, &launch.config, &mut launch.args, stream) }
            .and_then(|()| stream.synchronize())
            .map_err(|e| format!("the instrumented run: {e}"))
    });
    // SAFETY: unsetting (0) needs nothing alive.
    let unset = unsafe { api.set_function_data(&launch.function, 0) };
    let unpatched = api.unpatch(module);
    if let (Err(a), Err(b)) = (&unset, &unpatched) {
        return Err(RunFailed {
            why: format!("the kernel could be neither unset ({a}) nor unpatched ({b}) after its instrumented run"),
            state_still_set: true,
        });
    }
    ran?;
    unset.map_err(|e| e.to_string())?;
    unpatched.map_err(|e| e.to_string().into())
}

/// The state and the two bitmaps (write, read) after the run.
fn read_bits(dev: &DeviceState) -> Result<(TouchedState, Vec<u32>, Vec<u32>), String> {
    let mut head = vec![0u8; std::mem::size_of::<TouchedState>()];
    let mut rd = vec![0u8; dev.words * 4];
    let mut wr = vec![0u8; dev.words * 4];
    // SAFETY: each source is a buffer of ours at least as long as the bytes read.
    unsafe {
        copy_dtoh(&mut head, dev.state.ptr())
            .and_then(|()| copy_dtoh(&mut rd, dev.read.ptr()))
            .and_then(|()| copy_dtoh(&mut wr, dev.write.ptr()))
    }
    .map_err(|e| format!("reading the bitmaps back: {e}"))?;
    let words = |b: &[u8]| {
        b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<u32>>()
    };
    let u64_at = |o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&head[o..o + 8]);
        u64::from_le_bytes(a)
    };
    let state = TouchedState {
        outside: u64_at(std::mem::offset_of!(TouchedState, outside)),
        first_outside: u64_at(std::mem::offset_of!(TouchedState, first_outside)),
        ..TouchedState::default()
    };
    Ok((state, words(&wr), words(&rd)))
}

/// The application's output back: the pristine input over every page the run wrote (`written`,
/// each tracked region's pages; all of each region when the bitmaps could not be read), then,
/// once every region has its input (regions may overlap), the dispatch's written runs.
fn put_back_output(
    tracked: &[Tracked],
    written: Option<&[Vec<u64>]>,
    stream: &Stream,
) -> Result<(), String> {
    let e = |err: kreplay_cuda::CudaError| format!("putting the application's output back: {err}");
    for (i, t) in tracked.iter().enumerate() {
        let ranges = match written.and_then(|w| w.get(i)) {
            Some(pages) => extents_of_pages(pages, PAGE, t.size),
            None => vec![(0, t.size)],
        };
        for (off, len) in ranges {
            // SAFETY: a range of the region (the application's, written by the kernel anyway)
            // from our scratch of its input, while the application waits.
            unsafe { copy_dtod_async(t.addr + off, t.pre + off, len as usize, stream) }
                .map_err(e)?;
        }
    }
    put_back_runs(tracked, stream)
}

/// The dispatch's input back over the runs it wrote, from our scratch of each region's input.
fn put_back_input(tracked: &[Tracked], stream: &Stream) -> Result<(), String> {
    copy_runs(
        tracked,
        |t, off, _| t.pre + off,
        "putting the input back",
        stream,
    )
}

/// The dispatch's written runs back from our scratch of its output: the application's output
/// where anything of ours (the input put back, the instrumented run) wrote over it.
fn put_back_runs(tracked: &[Tracked], stream: &Stream) -> Result<(), String> {
    copy_runs(
        tracked,
        |t, _, at| t.post + at,
        "putting the application's output back",
        stream,
    )
}

/// Copies over each run the dispatch wrote (offset in its region) from `source(region,
/// offset, packed position)`, an address in our scratch of the region's input or output;
/// waited for.
fn copy_runs(
    tracked: &[Tracked],
    source: impl Fn(&Tracked, u64, u64) -> u64,
    what: &str,
    stream: &Stream,
) -> Result<(), String> {
    let e = |err: kreplay_cuda::CudaError| format!("{what}: {err}");
    for t in tracked {
        for &(off, len, at) in &t.runs {
            // SAFETY: a run the dispatch wrote, inside its region (the application's memory,
            // which the kernel writes anyway, while the application waits), from our scratch
            // of the region's input or output, which holds the run (`source`).
            unsafe { copy_dtod_async(t.addr + off, source(t, off, at), len as usize, stream) }
                .map_err(e)?;
        }
    }
    stream.synchronize().map_err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: pages of a run that diverged from the application's trusted (the dispatch
    // changed bytes where the run wrote nothing), or a run that wrote the first or the last
    // page of a changed run taken for one that did not.
    #[test]
    fn a_changed_run_without_a_written_page_is_found() {
        let p = PAGE;
        assert_eq!(unwritten_run([(0, 2 * p)], &[1]), None);
        assert_eq!(unwritten_run([(p, p), (4 * p, 3 * p)], &[1, 6]), None);
        assert_eq!(
            unwritten_run([(p, p), (4 * p, 3 * p)], &[1, 7]),
            Some(4 * p)
        );
        assert_eq!(unwritten_run([(p, p), (4 * p, 3 * p)], &[3, 4]), Some(p));
        assert_eq!(unwritten_run([(10, 1)], &[]), Some(10));
        assert_eq!(
            unwritten_run([(p - 1, 2)], &[1]),
            None,
            "a run across a page boundary"
        );
        assert_eq!(unwritten_run([], &[]), None);
        // A run of two changed chunks whose second holds no written page is refused once cut.
        let c = 4 * p;
        let two = [(0, 2 * c)];
        assert_eq!(unwritten_run(two, &[1]), None);
        assert_eq!(unwritten_run(chunk_pieces(two, c), &[1]), Some(c));
        assert_eq!(unwritten_run(chunk_pieces(two, c), &[1, 5]), None);
        // Pieces end at every multiple of the chunk, a run's own ends kept.
        let cut: Vec<(u64, u64)> = chunk_pieces([(3, 10), (16, 0), (20, 12)], 8).collect();
        assert_eq!(cut, vec![(3, 5), (8, 5), (20, 4), (24, 8)]);
    }

    // Catches: a kernel taking a TMA tensor map (CUTLASS 3, cuBLAS on sm_90) captured by
    // touched pages, its operands read by tensor copies the patches do not see and stored
    // absent; or an ordinary 128-byte struct at an unaligned offset refused.
    #[test]
    fn a_tensor_map_parameter_is_an_access_the_run_cannot_see() {
        let why = unseen_accesses(&[(0, 8), (64, 128), (192, 4)]).expect("refused");
        assert!(
            why.contains("offset 64") && why.contains("TMA tensor map"),
            "{why}"
        );
        assert_eq!(unseen_accesses(&[(0, 8), (8, 128)]), None);
        assert_eq!(unseen_accesses(&[(0, 64), (64, 64)]), None);
        assert_eq!(unseen_accesses(&[]), None);
    }

    // Catches: a region the kernel touched all over stored as one extent (info would show it
    // as partly held), or an untouched region stored whole.
    #[test]
    fn a_region_touched_all_over_is_held_whole_and_an_untouched_one_absent() {
        assert_eq!(held(&[0, 1, 2], 3 * PAGE - 10), None);
        assert_eq!(held(&[1], 3 * PAGE), Some(vec![(PAGE, PAGE)]));
        assert_eq!(held(&[], 3 * PAGE), Some(vec![]));
    }

    // Catches: a `__constant__` global held by its (never seen) touched pages, so replay reads
    // the fill pattern for its coefficients (cuda-globals on the H200), or a texture's linear
    // memory held by the global accesses alone.
    #[test]
    fn globals_and_texture_memory_are_held_whole() {
        assert!(read_unseen(MemoryKind::ModuleGlobal, (0x1000, 16), &[]));
        assert!(read_unseen(MemoryKind::Device, (0x1000, 0x100), &[0x10ff]));
        assert!(!read_unseen(
            MemoryKind::Device,
            (0x1000, 0x100),
            &[0x1100, 0xfff]
        ));
        assert!(!read_unseen(MemoryKind::Vmm, (0x1000, 0x100), &[]));
    }

    // Catches: a kernel that prints run again (its printf output twice in the application's
    // stdout, beyond-printf on the H200), or a module naming a longer symbol taken as printing.
    #[test]
    fn a_module_that_prints_is_told_by_its_vprintf_symbol() {
        let mut elf = b"\x7fELF\x02\x01".to_vec();
        elf.extend_from_slice(b"\0.strtab\0_Z5printPf\0");
        assert!(!prints(&elf));
        let mut named = elf.clone();
        named.extend_from_slice(b"my_vprintf\0");
        assert!(!prints(&named), "a longer name is not vprintf");
        elf.extend_from_slice(b"vprintf\0");
        assert!(prints(&elf));
        assert!(
            !prints(b"\x50\xed\x55\xba\0vprintf\0"),
            "not an ELF: cannot be told"
        );
    }

    // Catches: a part starting inside a page of its entry given the entry's page indices, a
    // page of the entry straddling two pages of the part counted once, or pages past the
    // part's end.
    #[test]
    fn a_parts_pages_are_its_own() {
        let r = TouchedRegion {
            base: 0,
            size: 8 * PAGE,
            first_page: 3,
        };
        // Entry pages 2 and 5 set.
        let bits = [(1u32 << 5) | (1 << 8)];
        assert_eq!(part_pages(&bits, &r, 0, r.size), vec![2, 5]);
        assert_eq!(part_pages(&bits, &r, 2 * PAGE, 2 * PAGE), vec![0]);
        // A part from the middle of page 1: entry page 2 covers its pages 0 and 1.
        assert_eq!(part_pages(&bits, &r, PAGE + 100, 2 * PAGE), vec![0, 1]);
        assert_eq!(part_pages(&bits, &r, 6 * PAGE, 4 * PAGE), Vec::<u64>::new());
        assert_eq!(part_pages(&bits, &r, 9 * PAGE, PAGE), Vec::<u64>::new());
        proptest::proptest!(|(off in 0u64..8 * 4096, size in 1u64..8 * 4096, set in proptest::prelude::any::<u32>())| {
            let bits = [set << 3, set >> 29];
            let set_pages = touched_patch::pages_of(&bits, &r);
            let got = part_pages(&bits, &r, off, size);
            let end = (off + size).min(r.size);
            let want: Vec<u64> = (0..size.div_ceil(PAGE)).filter(|&q| {
                let (lo, hi) = (off + q * PAGE, (off + (q + 1) * PAGE).min(end));
                lo < hi && (lo / PAGE..=(hi - 1) / PAGE).any(|g| set_pages.contains(&g))
            }).collect();
            proptest::prop_assert_eq!(got, want);
        });
    }

    #[test]
    fn page_lists_merge_sorted_without_repeats() {
        assert_eq!(merge(&[1, 4, 9], &[0, 4, 5]), vec![0, 1, 4, 5, 9]);
        assert_eq!(merge(&[], &[3]), vec![3]);
    }

    #[test]
    fn the_note_says_how_much_was_held() {
        let f = Found {
            regions: 3,
            pages: 4000,
            touched_pages: 40,
            run_ms: 2.5,
        };
        let n = f.note();
        assert!(
            n.contains("40 of the 4000 4 KiB pages of its 3 region(s) (1.0 % held)"),
            "{n}"
        );
        assert!(n.contains("2.50 ms"), "{n}");
    }
}
