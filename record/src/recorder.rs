//! Process-wide recorder state and the CUPTI callback.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::counter_batch::{Admission, ContextCounters, CounterBatch, Queued};
use kreplay_cuda::callbacks::{self, cbid, Group};
use kreplay_cuda::cupti::{self, sys as csys, Subscriber};
use kreplay_cuda::Device;
use kreplay_engine::counters::MetricRequest;
use kreplay_engine::tool::{CTool, PassTool};
use kreplay_format::cubin;
use kreplay_format::file::PendingFile;
use kreplay_format::{
    Annotation, CaptureInfo, DeviceInfo, MemoryState, ModuleImage, ModuleKind, WriterOptions,
};
use kreplay_protocol::config::{
    demangle, expand_output, rank_from, short_kernel_name, Config, MemoryScope, Mode,
};
use kreplay_protocol::report::{CaptureSummary, KernelStat, ProcessReport, ProfileRow};

use crate::allocations::{self, AllocationTable};
use crate::capture::{after_launch, before_launch, CaptureData, CodeObject, Pending, PreInput};
use crate::error::RecordError;
use crate::inflight::InFlight;
use crate::launch;
use crate::profile::{self, Begun, Finished, FixedPasses, ProfileInput, ProfilePending};
use crate::ptx::{self, PtxSource};

struct StoredModule {
    id: u32,
    image: Arc<Vec<u8>>,
    functions: Vec<String>,
    objects: Vec<(String, u64)>,
}

/// Executions seen so far.
#[derive(Default)]
struct Counters {
    launches: u64,
    matches: u64,
    /// One per kernel name, in the order first launched; `stat_of` finds a name's.
    stats: Vec<KernelStat>,
    stat_of: HashMap<String, usize>,
}

/// What a thread's launches already told the recorder about a function handle: a launch of a
/// kernel the filter does not want then costs a lookup by handle and one counter, with no
/// allocation and no hashing of its name (the non-matching slowdown, issue 12).
struct KnownFunction {
    /// The symbol the handle launched (a handle reused for another kernel is looked up anew).
    name: Box<[u8]>,
    wanted: bool,
    stat: usize,
}

#[derive(Default)]
struct Inner {
    counts: Counters,
    /// Mangled name → (matches the filter, demangled).
    names: HashMap<String, (bool, String)>,
    modules: Vec<StoredModule>,
    next_module_id: u32,
    captures: Vec<CaptureSummary>,
    /// Dispatches profiled in place (`kreplay profile`).
    profiles: Vec<ProfileRow>,
    errors: Vec<String>,
    allocations: AllocationTable,
    /// Where PTX for wanted kernels can be found (see `ptx`).
    ptx_sources: Vec<PtxSource>,
    /// Executable graphs, by handle.
    execs: HashMap<usize, graphs::ExecState>,
}

mod graphs;

/// One kernel execution, as counted.
struct Execution<'a> {
    name: &'a str,
    demangled: &'a str,
    /// The kernel filter selects it.
    wanted: bool,
    grid: [u32; 3],
    block: [u32; 3],
    in_graph: bool,
}

/// What a capture of one kernel needs besides the launch.
struct Target {
    module: CodeObject,
    objects: Vec<(String, u64)>,
    allocations: Vec<(u64, u64, kreplay_format::MemoryKind)>,
    device: DeviceInfo,
}

struct Recorder {
    config: Config,
    pid: u32,
    rank: Option<u32>,
    host: String,
    _subscriber: Subscriber,
    inner: Mutex<Inner>,
    writers: Mutex<Vec<JoinHandle<()>>>,
    /// Captures whose writer thread may still read device scratch.
    in_flight: Mutex<Vec<Arc<InFlight>>>,
    /// Profile mode: the tool deciding the passes (kreplay's timing unless `--tool`).
    tool: Mutex<Box<dyn PassTool + Send>>,
    /// Profile mode with `--metrics`: per context (made on the context's first profiled
    /// dispatch), its counters or why there are none, and its dispatches waiting for them.
    metrics: Mutex<Vec<ContextMetrics>>,
}

/// One context's counters (`counter_batch`).
struct ContextMetrics {
    context: usize,
    counters: Result<ContextCounters, String>,
    batch: CounterBatch,
}

static RECORDER: OnceLock<Recorder> = OnceLock::new();

/// Free device memory kept for the application beyond what it asks for: below it, the
/// pristine copies waiting for their counters are counted and freed before its allocation.
const ALLOCATION_MARGIN: u64 = 256 << 20;

/// Set in the child of a `fork`: the recorder's threads did not survive it and its locks may
/// be held by threads that no longer exist, so the child records nothing, joins nothing and
/// writes no report (an `exec` that follows loads a fresh recorder).
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn forked_child() {
    FORKED.store(true, Ordering::SeqCst);
}

thread_local! {
    static IN_LAUNCH: Cell<bool> = const { Cell::new(false) };
    /// Set while the recorder itself calls the driver (its scratch allocations are not the
    /// application's).
    static SELF_CALLS: Cell<bool> = const { Cell::new(false) };
    static PENDING: RefCell<Option<Pending>> = const { RefCell::new(None) };
    /// Profile mode: the dispatch between its launch's ENTER and EXIT.
    static PROFILE_PENDING: RefCell<Option<Box<ProfilePending>>> = const { RefCell::new(None) };
    /// Function handle → what is known of it (see `KnownFunction`).
    static KNOWN: RefCell<HashMap<usize, KnownFunction>> = RefCell::new(HashMap::new());
}

/// Sets a thread-local flag for its lifetime; put back as it was on drop, also when a panic
/// unwinds through (the callback catches it), so a flag can never stay stuck, and a nested
/// guard (a batch counted from a callback that marked the recorder's calls already) leaves the
/// outer one's flag set.
struct FlagGuard(&'static std::thread::LocalKey<Cell<bool>>, bool);

impl FlagGuard {
    /// Sets the flag; `None` when it was set already (a re-entrant call).
    fn set(flag: &'static std::thread::LocalKey<Cell<bool>>) -> Option<FlagGuard> {
        // No guard is built on re-entry: one built and dropped (`then_some` builds eagerly)
        // would clear the flag the outer call still holds.
        if flag.with(|f| f.replace(true)) {
            None
        } else {
            Some(FlagGuard(flag, false))
        }
    }

    /// Sets the flag whether or not it was set; put back on drop.
    fn force(flag: &'static std::thread::LocalKey<Cell<bool>>) -> FlagGuard {
        FlagGuard(flag, flag.with(|f| f.replace(true)))
    }
}

impl Drop for FlagGuard {
    fn drop(&mut self) {
        let before = self.1;
        self.0.with(|f| f.set(before));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock was caught already; the data is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

impl Recorder {
    fn error(&self, msg: String) {
        crate::diag!("kreplay: {msg}");
        lock(&self.inner).errors.push(msg);
    }

    fn matches(&self, name: &str) -> (bool, String) {
        let mut inner = lock(&self.inner);
        if let Some(v) = inner.names.get(name) {
            return v.clone();
        }
        let demangled = demangle(name);
        // With only --launch-index, any kernel may be the one: every module is kept.
        let m = match &self.config.kernel {
            Some(f) => f.matches(name, &demangled),
            None => self.config.launch_index.is_some(),
        };
        inner.names.insert(name.to_string(), (m, demangled.clone()));
        (m, demangled)
    }

    fn on_module_loaded(&self, data: &csys::CUpti_ResourceData) {
        // Profile mode needs the module's globals (what a dispatch can reach), record mode
        // also its image.
        // (Not gated on SELF_CALLS: under lazy loading the application's module is loaded
        // inside the recorder's own first query of its kernel.)
        if self.config.mode == Mode::List || data.resourceDescriptor.is_null() {
            return;
        }
        // SAFETY: for MODULE_LOADED the descriptor is a CUpti_ModuleResourceData.
        let m = unsafe { &*(data.resourceDescriptor as *const csys::CUpti_ModuleResourceData) };
        if m.pCubin.is_null() || m.cubinSize == 0 {
            return;
        }
        // SAFETY: CUPTI hands cubinSize readable bytes, valid during the callback.
        let bytes = unsafe { std::slice::from_raw_parts(m.pCubin as *const u8, m.cubinSize) };
        let Some(syms) = cubin::symbols(bytes) else {
            return;
        };
        // Keep only modules that hold a kernel the user asked for: PyTorch loads thousands;
        // the recorder's own (chunk kernels, L2 sweeps, heap probe) are never the user's.
        let wanted =
            !is_own_module(&syms.functions) && syms.functions.iter().any(|f| self.matches(f).0);
        if !wanted {
            return;
        }
        let mut inner = lock(&self.inner);
        let id = inner.next_module_id;
        inner.next_module_id += 1;
        inner.modules.push(StoredModule {
            id,
            image: Arc::new(bytes.to_vec()),
            functions: syms.functions,
            objects: syms.objects,
        });
    }

    /// A code image is about to be loaded: note where its PTX is, if it has any.
    fn on_image_load(&self, id: u32, data: &csys::CUpti_CallbackData) {
        if self.config.mode != Mode::Record
            || data.callbackSite != csys::CUpti_ApiCallbackSite::CUPTI_API_ENTER
            || data.functionParams.is_null()
            || SELF_CALLS.with(|f| f.get())
        {
            return;
        }
        // SAFETY: functionParams is the parameter struct of this callback id.
        let image = unsafe {
            match id {
                cbid::MODULE_LOAD_DATA => {
                    (*(data.functionParams as *const csys::cuModuleLoadData_params)).image
                }
                cbid::MODULE_LOAD_DATA_EX => {
                    (*(data.functionParams as *const csys::cuModuleLoadDataEx_params)).image
                }
                cbid::MODULE_LOAD_FAT_BINARY => {
                    (*(data.functionParams as *const csys::cuModuleLoadFatBinary_params)).fatCubin
                }
                cbid::LIBRARY_LOAD_DATA => {
                    (*(data.functionParams as *const csys::cuLibraryLoadData_params)).code
                }
                _ => return,
            }
        } as *const u8;
        let wanted = |name: &str| self.matches(name).0;
        // SAFETY: image is what the application passes to this load call, inside its callback.
        if let Some(src) = unsafe { ptx::inspect(image, &wanted) } {
            lock(&self.inner).ptx_sources.push(src);
        }
    }

    fn on_launch(&self, cbid: u32, data: &csys::CUpti_CallbackData) {
        let site = data.callbackSite;
        if site == csys::CUpti_ApiCallbackSite::CUPTI_API_EXIT {
            if self.config.mode == Mode::Profile {
                self.profile_exit(data.correlationId);
                return;
            }
            let pending = PENDING.with(|p| {
                let mut p = p.borrow_mut();
                match p.as_ref() {
                    Some(x) if x.correlation == data.correlationId => p.take(),
                    _ => None,
                }
            });
            if let Some(p) = pending {
                let _self_calls = FlagGuard::force(&SELF_CALLS);
                self.finish(p);
            }
            return;
        }
        // SAFETY: functionParams belongs to this callback id.
        let Some(view) = (unsafe { launch::decode(cbid, data.functionParams) }) else {
            return;
        };
        // SAFETY: CUPTI passes a NUL-terminated symbol name for launch callbacks, or null.
        let symbol = (!data.symbolName.is_null())
            .then(|| unsafe { CStr::from_ptr(data.symbolName) }.to_bytes());
        let handle = view.function as usize;
        if let Some(sym) = symbol {
            let known = KNOWN.with(|k| {
                k.borrow()
                    .get(&handle)
                    .filter(|f| !f.wanted && *f.name == *sym)
                    .map(|f| f.stat)
            });
            if let Some(stat) = known {
                // SAFETY: inside the launch callback that decoded the view.
                if matches!(unsafe { view.foreign_stream() }.is_capturing(), Ok(true)) {
                    return;
                }
                let mut inner = lock(&self.inner);
                inner.counts.launches += 1;
                if let Some(s) = inner.counts.stats.get_mut(stat) {
                    s.count += 1;
                }
                return;
            }
        }
        let name = if data.symbolName.is_null() {
            // SAFETY: inside the launch callback that decoded the view.
            unsafe { view.foreign_function() }
                .name()
                .unwrap_or_default()
        } else {
            // SAFETY: CUPTI passes a NUL-terminated symbol name for launch callbacks.
            unsafe { CStr::from_ptr(data.symbolName) }
                .to_string_lossy()
                .into_owned()
        };
        // A launch made while its stream is captured into a graph does not run now: it runs
        // (and is counted) each time the graph is launched.
        // SAFETY: inside the launch callback that decoded the view.
        if matches!(unsafe { view.foreign_stream() }.is_capturing(), Ok(true)) {
            return;
        }
        let (is_match, demangled) = self.matches(&name);
        let execution = Execution {
            name: &name,
            demangled: &demangled,
            wanted: is_match,
            grid: view.grid,
            block: view.block,
            in_graph: false,
        };
        let (stat, counted) = self.count_with_stat(&mut lock(&self.inner).counts, &execution);
        if let Some(sym) = symbol {
            KNOWN.with(|k| {
                k.borrow_mut().insert(
                    handle,
                    KnownFunction {
                        name: sym.into(),
                        wanted: is_match,
                        stat,
                    },
                )
            });
        }
        let Some((launch_index, index)) = counted else {
            return;
        };
        if self.config.mode == Mode::Profile {
            let _self_calls = FlagGuard::force(&SELF_CALLS);
            self.profile_enter(
                &view,
                name,
                &demangled,
                (index, launch_index),
                data.correlationId,
            );
            return;
        }
        let begun = {
            let _self_calls = FlagGuard::force(&SELF_CALLS);
            self.begin(&view, name, index, launch_index, data.correlationId)
        };
        match begun {
            Ok(p) => PENDING.with(|slot| *slot.borrow_mut() = Some(p)),
            Err(e) => self.error(format!(
                "capture of {} (match {index}) failed: {e}; the application continues",
                short_kernel_name(&demangled)
            )),
        }
    }

    /// Counts one execution; returns (launch index, match index) when it is to be captured.
    fn count(&self, c: &mut Counters, e: &Execution<'_>) -> Option<(u64, u64)> {
        self.count_with_stat(c, e).1
    }

    /// `count`, and the index of the kernel's statistics in `c.stats`.
    fn count_with_stat(&self, c: &mut Counters, e: &Execution<'_>) -> (usize, Option<(u64, u64)>) {
        c.launches += 1;
        let launches = c.launches;
        let at = match c.stat_of.get(e.name) {
            Some(&i) => i,
            None => {
                c.stats.push(KernelStat {
                    name: e.name.to_string(),
                    demangled: e.demangled.to_string(),
                    count: 0,
                    in_graphs: 0,
                    grid: e.grid,
                    block: e.block,
                    first_launch: launches,
                    nvtx: crate::nvtx::innermost(),
                });
                c.stat_of.insert(e.name.to_string(), c.stats.len() - 1);
                c.stats.len() - 1
            }
        };
        (at, self.count_at(c, e, at, launches))
    }

    fn count_at(
        &self,
        c: &mut Counters,
        e: &Execution<'_>,
        at: usize,
        launches: u64,
    ) -> Option<(u64, u64)> {
        let stat = &mut c.stats[at];
        stat.count += 1;
        stat.in_graphs += u64::from(e.in_graph);
        let is_match = e.wanted
            && self.config.launch_index.is_none_or(|i| i == launches)
            && self
                .config
                .nvtx
                .as_ref()
                .is_none_or(|f| f.matches(&crate::nvtx::open_ranges()));
        if self.config.mode == Mode::List || !is_match {
            return None;
        }
        c.matches += 1;
        let index = c.matches;
        let first = self.config.nth;
        (index >= first && index < first.saturating_add(self.config.count))
            .then_some((launches, index))
    }

    fn on_allocation(&self, cbid: u32, data: &csys::CUpti_CallbackData) {
        if data.callbackSite == csys::CUpti_ApiCallbackSite::CUPTI_API_ENTER {
            return self.before_allocation_change(cbid, data);
        }
        if data.callbackSite != csys::CUpti_ApiCallbackSite::CUPTI_API_EXIT
            || SELF_CALLS.with(|f| f.get())
        {
            return;
        }
        // SAFETY: at EXIT functionReturnValue points at the call's CUresult.
        let ok = !data.functionReturnValue.is_null()
            && unsafe { *(data.functionReturnValue as *const u32) } == 0;
        if !ok {
            return;
        }
        // SAFETY: functionParams belongs to this allocation callback id, at EXIT.
        if let Some(change) = unsafe { allocations::decode(cbid, data.functionParams) } {
            lock(&self.inner).allocations.apply(change);
        }
    }

    fn begin(
        &self,
        view: &launch::LaunchView,
        name: String,
        index: u64,
        launch_index: u64,
        correlation: u32,
    ) -> Result<Pending, RecordError> {
        // SAFETY: inside the launch callback that decoded the view.
        let function = unsafe { view.foreign_function() };
        let layout = function.parameter_layout();
        // SAFETY: the view was decoded in this very callback; the layout belongs to its function.
        let args =
            unsafe { launch::argument_bytes(view, &layout) }.ok_or(RecordError::NoArguments)?;
        let target = self.target(&name)?;
        let name_for_file = name.clone();
        let mut p = before_launch(PreInput {
            view,
            function,
            args,
            layout,
            kernel_name: name,
            module: target.module,
            module_objects: &target.objects,
            allocations: target.allocations,
            correlation,
            open_file: Some(&self.file_opener(index, &name_for_file)),
        })?;
        self.describe(&mut p.data, index, launch_index, target.device);
        Ok(p)
    }

    /// Profile mode, at the launch's ENTER: the pristine copy and pass 0 prepared (see
    /// `profile`); the passes follow at EXIT. A failure is reported; the application's launch
    /// runs regardless.
    fn profile_enter(
        &self,
        view: &launch::LaunchView,
        name: String,
        demangled: &str,
        (index, launch_index): (u64, u64),
        correlation: u32,
    ) {
        let short = short_kernel_name(demangled);
        let result = (|| {
            // SAFETY: inside the launch callback that decoded the view.
            let function = unsafe { view.foreign_function() };
            let layout = function.parameter_layout();
            // SAFETY: the view was decoded in this very callback; the layout is its function's.
            let args =
                unsafe { launch::argument_bytes(view, &layout) }.ok_or(RecordError::NoArguments)?;
            let target = self.target(&name)?;
            let mut tool = lock(&self.tool);
            profile::profile_begin(
                ProfileInput {
                    view,
                    function,
                    args,
                    layout,
                    kernel_name: name.clone(),
                    short_name: short.clone(),
                    module_objects: &target.objects,
                    allocations: target.allocations,
                    match_index: index,
                    launch_index,
                    cache_flush: self.config.cache_flush,
                    max_passes: kreplay_protocol::config::MAX_PASSES,
                },
                correlation,
                tool.as_mut(),
            )
        })();
        match result {
            Ok(Begun::Skipped(row)) => self.profile_row(*row),
            Ok(Begun::Pending(p)) => PROFILE_PENDING.with(|slot| *slot.borrow_mut() = Some(p)),
            Err(e) => self.error(format!(
                "profiling {short} (match {index}) failed: {e}; the application continues"
            )),
        }
    }

    /// Profile mode, at the launch's EXIT: the passes, and the application's output put back.
    fn profile_exit(&self, correlation: u32) {
        let Some(p) = PROFILE_PENDING.with(|slot| {
            let mut slot = slot.borrow_mut();
            match slot.as_ref() {
                Some(p) if p.correlation == correlation => slot.take(),
                _ => None,
            }
        }) else {
            return;
        };
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        // Launches of the passes must not be taken for the application's.
        let _in_launch = FlagGuard::force(&IN_LAUNCH);
        let short = p.short_name().to_string();
        let index = p.match_index();
        let mut metrics = lock(&self.metrics);
        let counters = !self.config.metrics.is_empty();
        let result = profile::profile_finish(*p, lock(&self.tool).as_mut(), counters);
        match result {
            Ok(Finished::Row(row)) => self.profile_row(*row),
            Ok(Finished::Counters(q)) => self.queue_for_counters(&mut metrics, *q),
            Err(e) => self.error(format!(
                "profiling {short} (match {index}) failed after the launch: {e}; the application continues"
            )),
        }
    }

    /// The current context's counters (made on first use).
    fn context_metrics<'m>(
        &self,
        all: &'m mut Vec<ContextMetrics>,
    ) -> Result<&'m mut ContextMetrics, String> {
        let ctx = kreplay_cuda::ContextHandle::current()
            .map_err(|e| e.to_string())?
            .id();
        let at = match all.iter().position(|c| c.context == ctx) {
            Some(i) => i,
            None => {
                let made = MetricRequest::in_current_context(&self.config.metrics)
                    .map(ContextCounters::new)
                    .map_err(|e| e.to_string());
                if let Err(why) = &made {
                    self.error(format!("no counters: {why}"));
                }
                all.push(ContextMetrics {
                    context: ctx,
                    counters: made,
                    batch: CounterBatch::default(),
                });
                all.len() - 1
            }
        };
        Ok(&mut all[at])
    }

    /// A profiled dispatch joins its context's batch for its counters; the batch is collected
    /// when full. Call with the dispatch's context current, the recorder's calls marked.
    fn queue_for_counters(&self, all: &mut Vec<ContextMetrics>, q: Queued) {
        let cm = match self.context_metrics(all) {
            Ok(cm) => cm,
            Err(why) => return self.profile_row(q.without_counters(&why)),
        };
        if let Err(why) = &cm.counters {
            let why = why.clone();
            return self.profile_row(q.without_counters(&why));
        }
        ensure_exit_collection();
        let bytes = q.bytes();
        let mut q = Some(q);
        while let Some(next) = q.take() {
            match cm.batch.admission(bytes) {
                Admission::CollectFirst => {
                    self.collect(cm);
                    q = Some(next);
                }
                Admission::Join => cm.batch.push(next),
                Admission::JoinThenCollect => {
                    cm.batch.push(next);
                    self.collect(cm);
                }
            }
        }
    }

    /// Runs the counter passes of a context's batch and reports its rows. Call with the
    /// context current and the recorder's own calls and launches marked as such.
    fn collect(&self, cm: &mut ContextMetrics) {
        if cm.batch.is_empty() {
            return;
        }
        let rows = match cm.counters.as_mut() {
            Ok(c) => cm.batch.collect(c, self.config.cache_flush),
            Err(why) => cm.batch.drain_without_counters(why),
        };
        for row in rows {
            self.profile_row(row);
        }
    }

    /// Collects the batches `which` selects, each with its context pushed (from a callback
    /// that is not a profiled launch's: a free, an unload, a context's end, the exit).
    fn collect_batches(&self, which: impl Fn(&ContextMetrics) -> bool) {
        if self.config.metrics.is_empty() {
            return;
        }
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        let _in_launch = FlagGuard::force(&IN_LAUNCH);
        let mut all = lock(&self.metrics);
        for cm in all.iter_mut() {
            if cm.batch.is_empty() || !which(cm) {
                continue;
            }
            // SAFETY: the context made this batch and is alive: its destruction collects the
            // batch first (`on_context_destroy`), before the handle goes stale.
            let pushed = unsafe { kreplay_cuda::ContextHandle::from_raw(cm.context) }.push();
            match pushed {
                Ok(_current) => self.collect(cm),
                Err(e) => {
                    let why = format!(
                        "its context could not be made current for the counter passes: {e}"
                    );
                    for row in cm.batch.drain_without_counters(&why) {
                        self.profile_row(row);
                    }
                }
            }
        }
    }

    /// Profile mode with `--metrics`, at the ENTER of an allocation call: memory a waiting
    /// dispatch reaches is about to go (its batch is collected first), or the application asks
    /// for memory the batches' pristine copies may be holding (all are collected first).
    fn before_allocation_change(&self, cbid: u32, data: &csys::CUpti_CallbackData) {
        if self.config.metrics.is_empty() || SELF_CALLS.with(|f| f.get()) {
            return;
        }
        // SAFETY: functionParams belongs to this allocation callback id, at ENTER.
        let Some(change) = (unsafe { allocations::entering(cbid, data.functionParams) }) else {
            return;
        };
        let waiting: u64 = lock(&self.metrics).iter().map(|c| c.batch.bytes()).sum();
        if waiting == 0 {
            return;
        }
        match change {
            allocations::Entering::Release { addr, len } => {
                self.collect_batches(|c| c.batch.reaches(addr, len))
            }
            allocations::Entering::Request { bytes } => {
                let free = kreplay_cuda::memory_info().map_or(0, |(free, _)| free);
                if free < bytes.saturating_add(ALLOCATION_MARGIN) {
                    self.collect_batches(|_| true);
                }
            }
        }
    }

    fn profile_row(&self, mut row: ProfileRow) {
        row.pid = self.pid;
        row.rank = self.rank;
        lock(&self.inner).profiles.push(row);
    }

    /// A matching kernel node of a CUDA graph in profile mode: not replayed in place yet.
    fn profile_skipped(
        &self,
        name: &str,
        demangled: &str,
        (index, launch_index): (u64, u64),
        (grid, block): ([u32; 3], [u32; 3]),
        why: &str,
    ) {
        lock(&self.inner).profiles.push(ProfileRow {
            kernel: name.to_string(),
            short_name: short_kernel_name(demangled),
            match_index: index,
            launch_index,
            grid,
            block,
            pid: self.pid,
            rank: self.rank,
            skipped: Some(why.to_string()),
            ..Default::default()
        });
    }

    /// What a capture of kernel `name` needs from the recorder's state and the driver.
    fn target(&self, name: &str) -> Result<Target, RecordError> {
        let (image, objects, module_id) = {
            let inner = lock(&self.inner);
            let m = inner
                .modules
                .iter()
                .rev()
                .find(|m| m.functions.iter().any(|f| f == name))
                .ok_or(RecordError::ModuleNotSeen)?;
            (m.image.clone(), m.objects.clone(), m.id)
        };
        let device = Device::current().map_err(RecordError::cuda("finding the device"))?;
        let props = device.props().clone();
        let allocations = if self.config.memory == MemoryScope::All {
            lock(&self.inner).allocations.list()
        } else {
            Vec::new()
        };
        Ok(Target {
            module: CodeObject {
                module_id,
                arch: props.arch(),
                image,
            },
            objects,
            allocations,
            device: DeviceInfo {
                name: props.name,
                ordinal: props.ordinal as u32,
                cc_major: props.cc_major,
                cc_minor: props.cc_minor,
                uuid: props.uuid,
                driver_version: kreplay_cuda::driver_version().unwrap_or(0),
                total_memory: props.total_memory,
                sm_count: props.sm_count,
            },
        })
    }

    fn describe(&self, data: &mut CaptureData, index: u64, launch_index: u64, device: DeviceInfo) {
        data.match_index = index;
        data.launch_index = launch_index;
        data.ptx_sources = lock(&self.inner).ptx_sources.clone();
        data.device = Some(device);
    }

    /// A context is about to be destroyed: snapshots of its captures still in device scratch
    /// come to the host now (the writer threads write them afterwards), and the recorder's own
    /// buffers in it are freed while it still exists.
    fn on_context_destroy(&self, context: usize) {
        let flights: Vec<Arc<InFlight>> = lock(&self.in_flight)
            .iter()
            .filter(|f| f.context == context || f.context == 0)
            .cloned()
            .collect();
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        // SAFETY: CUPTI passed the handle of the context about to be destroyed; it is alive
        // until this callback returns.
        let _current = unsafe { kreplay_cuda::ContextHandle::from_raw(context) }.push();
        for f in flights {
            if let Err(e) = f.evacuate() {
                self.error(format!(
                    "a capture's snapshots could not be read back before the application destroyed its CUDA context: {e}"
                ));
            }
        }
        crate::capture::forget_context(context);
        // Dispatches waiting for their counters are counted while the context lives; its
        // range profiler state goes with it.
        self.collect_batches(|c| c.context == context);
        lock(&self.metrics).retain(|c| c.context != context);
    }

    fn finish(&self, mut pending: Pending) {
        if let Err(e) = after_launch(&mut pending) {
            let name = short_kernel_name(&demangle(&pending.data.dispatch.kernel_name));
            self.error(format!("capture of {name} failed after the launch: {e}"));
            return;
        }
        self.write(pending.data);
    }

    /// Where match `index` of kernel `kernel` (mangled) is written.
    fn output_path(&self, index: u64, kernel: &str) -> PathBuf {
        let name = short_kernel_name(&demangle(kernel));
        PathBuf::from(expand_output(
            &self.config.output,
            self.pid,
            self.rank,
            &self.host,
            index,
            &name,
        ))
    }

    /// Opens the capture file of match `index` of `kernel` (its `.partial`), noted in the
    /// report directory so that `kreplay record` removes it if the application dies.
    fn file_opener(
        &self,
        index: u64,
        kernel: &str,
    ) -> impl Fn() -> Result<PendingFile, RecordError> + '_ {
        let path = self.output_path(index, kernel);
        move || {
            open_capture_file(
                &path,
                capture_uuid(now_unix_ns(), self.pid, index, &path),
                self.config.force,
                self.config.report_dir.as_deref(),
            )
        }
    }

    /// Writes a finished capture on a writer thread (off the application's time).
    fn write(&self, mut p: CaptureData) {
        let name = short_kernel_name(&demangle(&p.dispatch.kernel_name));
        let (index, launch_index) = (p.match_index, p.launch_index);
        let path = self.output_path(index, &p.dispatch.kernel_name);
        let info = CaptureInfo {
            tool_version: env!("CARGO_PKG_VERSION").into(),
            host: self.host.clone(),
            pid: self.pid,
            rank: self.rank,
            command_line: command_line(),
            time_unix_ns: now_unix_ns(),
            match_index: index,
            launch_index,
            kernel_filter: self.config.kernel_text.clone(),
        };
        let context = p.context.map_or(0, |c| c.id());
        let flight = InFlight::new(context, std::mem::take(&mut p.snapshots));
        lock(&self.in_flight).push(flight.clone());
        let handle = std::thread::Builder::new()
            .name("kreplay-writer".into())
            .spawn(move || {
                // Whatever this thread asks of the driver is the recorder's.
                let _self_calls = FlagGuard::force(&SELF_CALLS);
                let Some(rec) = RECORDER.get() else { return };
                // A panic here must not take the application down with it (a writer thread's
                // panic is caught at join, but this thread also reports); the partial file is
                // removed by PendingFile's drop.
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    write_capture(
                        &path,
                        &info,
                        p,
                        &flight,
                        rec.config.force,
                        rec.config.report_dir.as_deref(),
                    )
                }))
                .unwrap_or(Err(RecordError::WriterPanicked));
                lock(&rec.in_flight).retain(|f| !Arc::ptr_eq(f, &flight));
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    match result {
                        Ok(summary) => {
                            if !rec.config.quiet {
                                crate::diag!(
                                "kreplay: captured {} (match {}) -> {}: {} regions, {} of memory stored in {}, stalled the app {:.1} ms, {:.1} ms in all",
                                name,
                                summary.match_index,
                                summary.file,
                                summary.regions,
                                kreplay_format::units::bytes(summary.raw_bytes),
                                kreplay_format::units::bytes(summary.stored_bytes),
                                summary.stall_ms,
                                summary.total_ms
                            );
                            }
                            if std::env::var_os("KREPLAY_DEBUG_STALL").is_some() {
                                let phases: Vec<String> = summary
                                    .stall_phases
                                    .iter()
                                    .map(|p| format!("{} {:.1} ms", p.phase, p.ms))
                                    .collect();
                                crate::diag!("kreplay: stall of match {}: {}", summary.match_index, phases.join(", "));
                            }
                            if let Some(dir) = &rec.config.report_dir {
                                note_capture(dir, &summary);
                            }
                            lock(&rec.inner).captures.push(summary);
                        }
                        Err(e) => rec.error(format!(
                            "capture of {name} could not be written to {}: {e}; the application continues",
                            path.display()
                        )),
                    }
                }));
            });
        match handle {
            Ok(h) => lock(&self.writers).push(h),
            Err(e) => self.error(format!("cannot start the writer thread: {e}")),
        }
    }
}

/// Notes in the report directory that the recorder started in this process (best effort: a
/// failure only means a killed application is reported as "cannot tell").
fn note_started() {
    let Some(dir) = std::env::var_os(kreplay_protocol::config::env::REPORT_DIR) else {
        return;
    };
    let dir = std::path::Path::new(&dir).join(kreplay_protocol::config::STARTED_DIR);
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join(std::process::id().to_string()), b"");
    }
}

/// Notes a `.partial` file in the report directory, so `kreplay record` can remove it if the
/// application dies before the capture is finished (best effort: a failure here only means a
/// leftover could stay behind).
fn note_partial(report_dir: &std::path::Path, partial: &std::path::Path) {
    let dir = report_dir.join(kreplay_protocol::config::PARTIALS_DIR);
    let Ok(abs) = std::path::absolute(partial) else {
        return;
    };
    if std::fs::create_dir_all(&dir).is_ok() {
        let name = format!(
            "{}-{:016x}",
            std::process::id(),
            fnv1a(abs.as_os_str().as_encoded_bytes())
        );
        let _ = std::fs::write(dir.join(name), abs.as_os_str().as_encoded_bytes());
    }
}

/// Writes a finished capture's summary into the report directory at once (best effort).
fn note_capture(report_dir: &std::path::Path, summary: &CaptureSummary) {
    let dir = report_dir.join(kreplay_protocol::config::CAPTURES_DIR);
    if std::fs::create_dir_all(&dir).is_ok() {
        if let Ok(bytes) = serde_json::to_vec(summary) {
            let name = format!("{}-{}.json", std::process::id(), summary.match_index);
            let _ = std::fs::write(dir.join(name), bytes);
        }
    }
}

fn write_capture(
    path: &std::path::Path,
    info: &CaptureInfo,
    mut p: CaptureData,
    flight: &InFlight,
    force: bool,
    report_dir: Option<&std::path::Path>,
) -> Result<CaptureSummary, RecordError> {
    if flight.on_device() {
        // Fails only when the context went away before this thread started, in which case
        // the teardown callback has brought the snapshots home already (checked when read).
        if let Some(c) = p.context {
            let _ = c.make_current();
        } else {
            return Err(RecordError::NoContext);
        }
    }
    // Regions that did not fit in device scratch are in the file already.
    let mut f = match p.spill.take() {
        Some(spill) => spill.file,
        None => open_capture_file(
            path,
            capture_uuid(info.time_unix_ns, info.pid, info.match_index, path),
            force,
            report_dir,
        )?,
    };
    let mut raw_bytes = 0u64;
    let mut regions = 0usize;
    let result = (|| -> Result<(), RecordError> {
        let w = &mut f.writer;
        let e = RecordError::Format;
        w.capture_info(info).map_err(e)?;
        if let Some(d) = &p.device {
            w.device(d).map_err(e)?;
        }
        w.module(&p.module.to_image()).map_err(e)?;
        // The PTX the application shipped for this kernel, for replay on other GPUs.
        if let Some((arch, text)) = ptx::resolve(&p.ptx_sources, &p.dispatch.kernel_name) {
            w.module(&ModuleImage {
                module_id: p.module.module_id.wrapping_add(1),
                kind: ModuleKind::Ptx,
                arch,
                image: text,
            })
            .map_err(e)?;
        }
        w.dispatch(&p.dispatch).map_err(e)?;
        let mut ring = None;
        let total = flight.total_bytes();
        let name = short_kernel_name(&demangle(&p.dispatch.kernel_name));
        let bar = kreplay_protocol::progress::Progress::bytes(&format!("kreplay: {name}"), total);
        let done = std::cell::Cell::new(0u64);
        let progress = |n: u64| {
            done.set(done.get() + n);
            bar.set("writing", done.get(), total);
        };
        while let Some(written) = flight.write_region(regions, w, &mut ring, &progress) {
            raw_bytes += written?;
            regions += 1;
        }
        drop(bar);
        drop(ring);
        // Post chunks of host snapshots, and of those the teardown callback brought home.
        for (region, offset, bytes) in flight.take_early_post().iter().chain(&p.post) {
            raw_bytes += bytes.len() as u64;
            w.memory(*region, MemoryState::Post, *offset, bytes)
                .map_err(e)?;
        }
        for g in &p.globals {
            w.module_global(g).map_err(e)?;
        }
        if !p.textures.is_empty() {
            w.textures(&p.textures).map_err(e)?;
        }
        if !p.pointer_slots.is_empty() {
            w.pointer_slots(&kreplay_format::PointerSlots {
                slots: p.pointer_slots.clone(),
            })
            .map_err(e)?;
        }
        w.timing_conditions(&p.timing).map_err(e)?;
        if let Some(g) = &p.graph {
            w.graph_origin(g).map_err(e)?;
        }
        for n in &p.notes {
            w.annotation(&Annotation {
                key: "recorder".into(),
                value: n.clone(),
            })
            .map_err(e)?;
        }
        if let Some(n) = &p.device_heap {
            w.annotation(&Annotation {
                key: kreplay_format::DEVICE_HEAP_ANNOTATION.into(),
                value: n.clone(),
            })
            .map_err(e)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        f.abandon();
        return Err(e);
    }
    let stored = f.writer.position();
    f.finish()?;
    Ok(CaptureSummary {
        kernel: p.dispatch.kernel_name.clone(),
        match_index: info.match_index,
        file: path.display().to_string(),
        regions,
        raw_bytes,
        stored_bytes: stored,
        stall_ms: p.stall_ns as f64 / 1e6,
        total_ms: p.began.elapsed().as_secs_f64() * 1e3,
        stall_phases: p
            .stall_phases
            .iter()
            .map(|&(phase, ns)| kreplay_protocol::report::StallPhase {
                phase: phase.into(),
                ms: ns as f64 / 1e6,
            })
            .collect(),
    })
}

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A capture's UUID: its time, process and match, and its path.
fn capture_uuid(time_unix_ns: u64, pid: u32, index: u64, path: &std::path::Path) -> [u8; 16] {
    let mut uuid = [0u8; 16];
    let seed = time_unix_ns ^ ((pid as u64) << 32) ^ index;
    uuid[..8].copy_from_slice(&seed.to_le_bytes());
    uuid[8..].copy_from_slice(&fnv1a(path.to_string_lossy().as_bytes()).to_le_bytes());
    uuid
}

/// Creates the capture file's `.partial` (and its directory), noted in the report directory.
fn open_capture_file(
    path: &std::path::Path,
    uuid: [u8; 16],
    force: bool,
    report_dir: Option<&std::path::Path>,
) -> Result<PendingFile, RecordError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let f = PendingFile::create(path, uuid, WriterOptions::default(), force)?;
    if let Some(dir) = report_dir {
        note_partial(dir, f.partial_path());
    }
    Ok(f)
}

/// 64-bit FNV-1a, for the capture UUID's second half.
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
        (h ^ c as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Whether a loaded module is the recorder's own (`cuda/kernels`: every kernel named
/// `kreplay_*`), which no capture needs.
fn is_own_module(functions: &[String]) -> bool {
    !functions.is_empty() && functions.iter().all(|f| f.starts_with("kreplay_"))
}

/// What the calling thread is doing for kreplay when a driver callback arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ThreadMarks {
    /// The recorder itself is calling the driver (capture, write, profile passes, counter
    /// batches, graph re-runs).
    self_calls: bool,
    /// Inside the ENTER callback of a launch.
    in_launch: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    Handle,
    Ignore,
}

/// Whether a driver callback is the application's. Every launch kreplay makes (chunk scans,
/// L2 sweeps, timing gates, the heap probe, profile passes, graph ancestor re-runs) is
/// invisible at ENTER and EXIT, so that it is never matched, counted, listed or profiled: a
/// chunk scan matched at the EXIT site of the capture it serves waited on the capture's own
/// lock forever (issue 29). Graph calls the recorder makes are not the application's either.
fn driver_gate(group: Option<Group>, marks: ThreadMarks) -> Gate {
    match group {
        Some(Group::Launch) if marks.self_calls => Gate::Ignore,
        // A launch from inside a launch's ENTER callback is the recorder's; its EXIT too (and
        // at the process's exit the thread's other state may be gone already).
        Some(Group::Launch) if marks.in_launch => Gate::Ignore,
        Some(Group::Graph) if marks.self_calls => Gate::Ignore,
        // Allocation and image-load callbacks check the marks themselves (an allocation's
        // ENTER decides on counter batches first); module loads are judged by their kernels.
        _ => Gate::Handle,
    }
}

unsafe extern "C" fn callback(
    _userdata: *mut c_void,
    domain: csys::CUpti_CallbackDomain,
    cbid: csys::CUpti_CallbackId,
    cbdata: *const c_void,
) {
    let r = std::panic::catch_unwind(|| {
        if FORKED.load(Ordering::Relaxed) {
            return;
        }
        let Some(rec) = RECORDER.get() else { return };
        if cbdata.is_null() {
            return;
        }
        match domain {
            csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE
                if cbid
                    == csys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_MODULE_LOADED as u32 =>
            {
                // SAFETY: resource callbacks pass CUpti_ResourceData.
                rec.on_module_loaded(unsafe { &*(cbdata as *const csys::CUpti_ResourceData) });
            }
            csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE
                if cbid
                    == csys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING
                        as u32 =>
            {
                // SAFETY: resource callbacks pass CUpti_ResourceData.
                let data = unsafe { &*(cbdata as *const csys::CUpti_ResourceData) };
                rec.on_context_destroy(data.context as usize);
            }
            csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE
                if cbid
                    == csys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING
                        as u32 =>
            {
                // A waiting dispatch's function may be in the module: its batch goes first.
                // SAFETY: resource callbacks pass CUpti_ResourceData.
                let data = unsafe { &*(cbdata as *const csys::CUpti_ResourceData) };
                let context = data.context as usize;
                rec.collect_batches(|c| c.context == context);
            }
            csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API => {
                // SAFETY: driver-API callbacks pass CUpti_CallbackData.
                let data = unsafe { &*(cbdata as *const csys::CUpti_CallbackData) };
                let group = callbacks::group(cbid);
                let enter = data.callbackSite == csys::CUpti_ApiCallbackSite::CUPTI_API_ENTER;
                let marks = ThreadMarks {
                    self_calls: SELF_CALLS.with(|f| f.get()),
                    in_launch: IN_LAUNCH.with(|f| f.get()),
                };
                match (group, driver_gate(group, marks)) {
                    (_, Gate::Ignore) | (None, _) => {}
                    (Some(Group::ImageLoad), _) => rec.on_image_load(cbid, data),
                    (Some(Group::Allocation), _) => rec.on_allocation(cbid, data),
                    (Some(Group::Graph), _) => rec.on_graph(cbid, data),
                    (Some(Group::Launch), _) => {
                        // ENTER marks the thread until the callback returns, so that the
                        // recorder's launches made from inside it are refused above.
                        let _in_launch = if enter {
                            FlagGuard::set(&IN_LAUNCH)
                        } else {
                            None
                        };
                        rec.on_launch(cbid, data);
                    }
                }
            }
            _ => {}
        }
    });
    if r.is_err() {
        crate::diag!("kreplay: internal error in the recorder (caught); the application continues");
    }
}

extern "C" {
    fn atexit(cb: extern "C" fn()) -> i32;
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if FORKED.load(Ordering::SeqCst) {
            return;
        }
        let Some(rec) = RECORDER.get() else { return };
        // Normally done already by `collect_at_exit`, which runs first.
        rec.collect_batches(|_| true);
        let handles: Vec<_> = std::mem::take(&mut *lock(&rec.writers));
        for h in handles {
            let _ = h.join();
        }
        let inner = lock(&rec.inner);
        let mut kernels: Vec<KernelStat> = inner.counts.stats.clone();
        kernels.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
        let report = ProcessReport {
            pid: rec.pid,
            rank: rec.rank,
            launches: inner.counts.launches,
            matches: inner.counts.matches,
            kernels,
            captures: inner.captures.clone(),
            profiles: {
                // Rows waiting for their counters were reported after later ones.
                let mut rows = inner.profiles.clone();
                rows.sort_by_key(|r| r.match_index);
                rows
            },
            errors: inner.errors.clone(),
            disabled: None,
        };
        drop(inner);
        if let Some(dir) = &rec.config.report_dir {
            if let Err(e) = report.write_to(dir) {
                crate::diag!("kreplay: {e}");
            }
        }
    });
}

/// Counts the dispatches still waiting for their counters at the process's exit, while the
/// driver is still up: registered when the first one waits (after `cuInit` returned, so it runs
/// before any exit handler the driver registered during `cuInit`).
extern "C" fn collect_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if FORKED.load(Ordering::SeqCst) {
            return;
        }
        if let Some(rec) = RECORDER.get() {
            rec.collect_batches(|_| true);
        }
    });
}

fn ensure_exit_collection() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a plain extern "C" function with the C runtime.
        unsafe {
            atexit(collect_at_exit);
        }
    });
}

fn initialize() -> Result<(), RecordError> {
    let Some(config) = Config::from_env().map_err(RecordError::Config)? else {
        return Ok(()); // injected but not asked to do anything
    };
    if !cupti::cupti_present() {
        return Err(RecordError::NoCupti);
    }
    let sub = Subscriber::subscribe(callback)?;
    let mut groups = vec![Group::Launch, Group::Graph];
    if config.mode == Mode::Record {
        groups.push(Group::ImageLoad);
    }
    // Profile mode with --metrics: a free or an allocation may need the dispatches waiting
    // for their counters collected first (`before_allocation_change`).
    let counters = config.mode == Mode::Profile && !config.metrics.is_empty();
    if config.memory == MemoryScope::All || counters {
        groups.push(Group::Allocation);
    }
    for g in groups {
        for id in callbacks::ids(g) {
            sub.enable_callback(csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API, id)?;
        }
    }
    let mut resources = vec![
        csys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_MODULE_LOADED,
        csys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
    ];
    if counters {
        resources.push(csys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING);
    }
    for id in resources {
        sub.enable_callback(
            csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE,
            id as u32,
        )?;
    }
    let get = |k: &str| std::env::var(k).ok();
    let tool: Box<dyn PassTool + Send> = match &config.tool {
        Some(path) => Box::new(CTool::load(path).map_err(|e| RecordError::Config(e.to_string()))?),
        None => Box::new(FixedPasses(config.passes)),
    };
    let rec = Recorder {
        config,
        pid: std::process::id(),
        rank: rank_from(get),
        host: kreplay_protocol::config::host_name(),
        _subscriber: sub,
        inner: Mutex::new(Inner::default()),
        writers: Mutex::new(Vec::new()),
        in_flight: Mutex::new(Vec::new()),
        tool: Mutex::new(tool),
        metrics: Mutex::new(Vec::new()),
    };
    if RECORDER.set(rec).is_err() {
        return Ok(()); // initialised twice: keep the first
    }
    // SAFETY: registers plain extern "C" functions with the C runtime; the fork handler
    // only stores to an atomic (async-signal-safe, as a fork handler must be).
    unsafe {
        atexit(at_exit);
        libc::pthread_atfork(None, None, Some(forked_child));
    }
    Ok(())
}

/// Entry point the CUDA driver calls during `cuInit` when this library is named by
/// `CUDA_INJECTION64_PATH`. Returns 1 (success) even when recording cannot start: the
/// application must run on regardless.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> i32 {
    let failed = match std::panic::catch_unwind(initialize) {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some("internal error during start-up".to_string()),
    };
    if failed.is_none() {
        let _ = std::panic::catch_unwind(note_started);
    }
    if let Some(why) = failed {
        crate::diag!("kreplay: recording disabled: {why}");
        // Tell `kreplay record` that the recorder did start, and why it stood down.
        let _ = std::panic::catch_unwind(|| {
            if let Some(dir) = std::env::var_os(kreplay_protocol::config::env::REPORT_DIR) {
                let report = ProcessReport {
                    pid: std::process::id(),
                    disabled: Some(why),
                    ..Default::default()
                };
                if let Err(e) = report.write_to(std::path::Path::new(&dir)) {
                    crate::diag!("kreplay: {e}");
                }
            }
        });
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static FLAG: Cell<bool> = const { Cell::new(false) };
    }

    #[test]
    fn flags_are_cleared_even_when_a_panic_unwinds() {
        {
            let g = FlagGuard::set(&FLAG).expect("first entry");
            assert!(FLAG.with(|f| f.get()));
            assert!(FlagGuard::set(&FLAG).is_none(), "re-entry is refused");
            assert!(
                FLAG.with(|f| f.get()),
                "a refused re-entry leaves the outer call's flag set"
            );
            drop(g);
        }
        assert!(!FLAG.with(|f| f.get()));
        let r = std::panic::catch_unwind(|| {
            let _g = FlagGuard::force(&FLAG);
            panic!("inside the callback");
        });
        assert!(r.is_err());
        assert!(!FLAG.with(|f| f.get()), "the unwind cleared the flag");
        {
            let _outer = FlagGuard::force(&FLAG);
            {
                let _inner = FlagGuard::force(&FLAG);
            }
            assert!(
                FLAG.with(|f| f.get()),
                "a nested guard leaves the outer one's flag set"
            );
        }
        assert!(!FLAG.with(|f| f.get()));
    }

    #[test]
    fn the_recorders_own_launches_are_invisible_at_enter_and_exit() {
        let app = ThreadMarks {
            self_calls: false,
            in_launch: false,
        };
        // A chunk scan launched while a capture finishes at the application launch's EXIT:
        // the thread is marked as the recorder's, not inside a launch's ENTER.
        let finishing = ThreadMarks {
            self_calls: true,
            in_launch: false,
        };
        let inside_enter = ThreadMarks {
            self_calls: true,
            in_launch: true,
        };
        let launch = Some(Group::Launch);
        assert_eq!(driver_gate(launch, app), Gate::Handle);
        assert_eq!(driver_gate(launch, finishing), Gate::Ignore);
        assert_eq!(driver_gate(launch, inside_enter), Gate::Ignore);
        assert_eq!(
            driver_gate(
                launch,
                ThreadMarks {
                    self_calls: false,
                    in_launch: true
                }
            ),
            Gate::Ignore
        );
        assert_eq!(driver_gate(Some(Group::Graph), finishing), Gate::Ignore);
        assert_eq!(driver_gate(Some(Group::Graph), app), Gate::Handle);
        // Allocation callbacks judge the marks themselves (ENTER of a free collects batches).
        assert_eq!(
            driver_gate(Some(Group::Allocation), finishing),
            Gate::Handle
        );
    }

    #[test]
    fn the_recorders_own_module_is_told_by_its_kernels() {
        let own: Vec<String> = [
            "kreplay_chunk_scan",
            "kreplay_l2_sweep",
            "kreplay_heap_probe",
        ]
        .map(String::from)
        .to_vec();
        assert!(is_own_module(&own));
        let mixed = vec![
            "kreplay_chunk_scan".to_string(),
            "_Z5saxpyifPKfPf".to_string(),
        ];
        assert!(!is_own_module(&mixed));
        assert!(!is_own_module(&[]));
    }
}
