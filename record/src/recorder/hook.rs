//! The entry points: what the CUDA driver and the C runtime call. Each catches panics (the
//! application is never harmed by the recorder), and none does anything in the child of a
//! `fork` but `forked_child_exit`, the end of a child under the Sanitizer front end. The work
//! is the router's.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use kreplay_cuda::callbacks::{self, Group};
use kreplay_cuda::cupti::{self, sys as csys, Subscriber};
use kreplay_cuda::cupti_events::{self, CallbackEvent};
use kreplay_engine::tool::{CTool, PassTool};
use kreplay_protocol::config::{rank_from, Config, MemoryScope, Mode};
use kreplay_protocol::report::ProcessReport;

use super::corpus::Corpus;
use super::corpus_ledger::CorpusLedger;
use super::kernels;
use super::marks::FORKED;
use super::outputs::{self, Outputs};
use super::report::Report;
use super::selection::{selection_of, spans_of};
use super::sink::Sink;
use super::state::{Recorder, RECORDER};
use crate::error::RecordError;
use crate::nvtx_events::{Delivery, NvtxEvent};
use crate::profile::FixedPasses;

/// In the parent, just before each `fork`: under the Sanitizer front end, the exit handler the
/// child will end with (`forked_child_exit`). Registered here, where the exit-list lock is
/// taken as in any call, not in the child (where another thread of the parent could have held
/// it at the fork); registered at every fork, so in each child it is the latest, and runs
/// before every handler registered before that fork. The parent's copy returns at once.
extern "C" fn before_fork() {
    let _ = std::panic::catch_unwind(|| {
        if crate::touched_run::front().is_none() || FORKED.load(Ordering::SeqCst) {
            return;
        }
        // SAFETY: registers a plain extern "C" function with the C runtime.
        if unsafe { on_exit(forked_child_exit, std::ptr::null_mut()) } != 0 {
            crate::diag!("kreplay: could not register the exit of a forked child (on_exit failed): the child may hang at exit under --memory touched");
        }
    });
}

extern "C" fn forked_child() {
    FORKED.store(true, Ordering::SeqCst);
    crate::retaining_alloc::after_fork_in_child();
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
        // SAFETY: what CUPTI passed to this callback; the event does not outlive it.
        let Some(event) = (unsafe { cupti_events::decode(domain, cbid, cbdata) }) else {
            return;
        };
        // First, whatever else drops the event below: the walk's allocation table must see
        // every free and context (`device_table`). SELF_CALLS has no destructor: always read.
        crate::device_table::on_event(&event, super::marks::self_calls());
        let Some(rec) = RECORDER.get() else { return };
        // A driver call after this thread's thread-locals were destroyed (an exit handler of
        // a library's, on the main thread) is dropped: its route reads them. Resource events
        // (a context's destruction, which saves the captures in flight) read none and go on.
        if matches!(event, CallbackEvent::Api(_)) && super::marks::thread_locals_gone() {
            return;
        }
        rec.route(event);
    });
    if r.is_err() {
        // The event may not have reached the table: it no longer answers.
        crate::device_table::table().lose("an internal error in the recorder");
        crate::diag!("kreplay: internal error in the recorder (caught); the application continues");
    }
}

/// NVTX's pushes and pops (from `crate::nvtx`'s entry points, which catch panics).
fn nvtx_event(event: &NvtxEvent, delivery: Delivery) {
    if FORKED.load(Ordering::Relaxed) || super::marks::thread_locals_gone() {
        return;
    }
    if let Some(rec) = RECORDER.get() {
        rec.on_nvtx(event, delivery);
    }
}

extern "C" {
    fn atexit(cb: extern "C" fn()) -> i32;
    /// glibc's `atexit` that is handed the exit status.
    fn on_exit(cb: extern "C" fn(libc::c_int, *mut c_void), arg: *mut c_void) -> i32;
}

/// The child of a `fork` under the Sanitizer front end ends here (`before_fork`). Otherwise,
/// at `exit`, it waits forever in an exit handler registered after the recorder started (on
/// the H200, robust-fork: one thread left, in `FUTEX_WAIT` on a glibc lock in the heap that a
/// thread of the parent held; not in the thread-local destructors, which had run). So the
/// child flushes its C streams and leaves with its status; the exit handlers registered before
/// the fork and the libraries' destructors do not run in it (`README`, `--memory touched`).
/// In the parent (not forked) it returns at once.
extern "C" fn forked_child_exit(status: libc::c_int, _arg: *mut c_void) {
    if !FORKED.load(Ordering::SeqCst) {
        return;
    }
    // SAFETY: flushing every open C stream and ending the process are what `exit` would do
    // (`fflush` locks each stream, whatever threads the child made since).
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(status)
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if FORKED.load(Ordering::SeqCst) {
            return;
        }
        let Some(rec) = RECORDER.get() else { return };
        // Normally done already by `collect_at_exit`, which runs first.
        rec.collect_batches(|_| true);
        // Before the range unit's exit, which closes a unit still open.
        rec.selection_at_exit();
        rec.range_at_exit();
        rec.range_timing_at_exit();
        rec.sink.join();
        crate::touched_run::clean_up();
        let (pid, rank) = (rec.outputs.pid, rec.outputs.rank);
        let mut report = rec
            .kernels
            .with_book(|b| rec.report.process_report(pid, rank, &b.counts));
        rec.add_range_spans(&mut report);
        if let Some(corpus) = &rec.outputs.corpus {
            report.left_out = corpus.left_out();
        }
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

pub(super) fn ensure_exit_collection() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a plain extern "C" function with the C runtime.
        unsafe {
            atexit(collect_at_exit);
        }
    });
}

/// Subscribes to CUPTI and enables the callbacks `config` needs.
fn subscribe(config: &Config) -> Result<Subscriber, RecordError> {
    let sub = Subscriber::subscribe(callback)?;
    // A measurement aid: CUPTI attached with no callback enabled, what the attachment alone
    // costs the application (graph-bench's floor: +2.5 % of a graph-launch loop on an H100).
    // Nothing is counted or captured.
    if std::env::var_os("KREPLAY_DEBUG_SUBSCRIBE").is_some_and(|v| v == "none") {
        return Ok(sub);
    }
    let mut groups = vec![Group::Launch, Group::Graph];
    // Record: a code image's PTX; record and profile: which module a load returned, so a
    // capture keeps the code its launch runs when several modules share a kernel's name.
    if config.mode != Mode::List {
        groups.push(Group::ImageLoad);
    }
    // Profile mode with --metrics: a free or an allocation may need the dispatches waiting
    // for their counters collected first (`before_allocation_change`).
    let counters = config.mode == Mode::Profile && !config.metrics.is_empty();
    // Record and profile: the walk's table of the application's allocations
    // (`device_table`) follows every allocation, free and context from here on.
    let table = config.mode != Mode::List;
    if config.memory == MemoryScope::All || counters || table {
        groups.push(Group::Allocation);
    }
    for g in groups {
        for id in callbacks::ids(g) {
            sub.enable_callback(csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API, id)?;
        }
    }
    // A range capture must see every memory and stream operation the application makes
    // while it is open (each is a step or refuses it), under any of their many entry points:
    // only range recordings pay for callbacks on every driver call.
    if config.launch_range.is_some() || config.boundary_range.is_some() {
        sub.enable_domain(csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API)?;
    }
    let mut resources = vec![
        csys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_MODULE_LOADED,
        csys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
    ];
    if counters {
        resources.push(csys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING);
    }
    if crate::device_resources::prewarms(config) || table {
        resources.push(csys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_CREATED);
    }
    for id in resources {
        sub.enable_callback(
            csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE,
            id as u32,
        )?;
    }
    // Every callback the table needs is enabled, at cuInit, before any context exists.
    if table {
        crate::device_table::table().follow();
    }
    Ok(sub)
}

/// `--memory touched`: whether the recorder runs on the Compute Sanitizer API; where it cannot,
/// it says why and captures as `--memory reachable` does (on CUPTI).
fn on_sanitizer(config: &mut Config) -> bool {
    // Profile mode takes --memory touched for its restores alone (pages, found by the GPU's
    // compare) and stays on CUPTI: its passes, timing and counters need it.
    if config.memory != MemoryScope::Touched || config.mode != Mode::Record {
        return false;
    }
    match super::sanitizer_hook::subscribe(config) {
        Ok(()) => true,
        Err(why) => {
            crate::diag!(
                "kreplay: --memory touched: the Compute Sanitizer API cannot be used here: {why}; capturing whole regions instead (--memory reachable)"
            );
            config.memory = MemoryScope::Reachable;
            false
        }
    }
}

fn initialize() -> Result<(), RecordError> {
    let Some(mut config) = Config::from_env().map_err(RecordError::Config)? else {
        return Ok(()); // injected but not asked to do anything
    };
    // `KREPLAY_DEBUG_POOL=0`: every host block glibc's, as before the recorder kept a
    // capture's (the stall benchmark's baseline, same build).
    if std::env::var_os("KREPLAY_DEBUG_POOL").is_some_and(|v| v == "0") {
        crate::retaining_alloc::turn_off();
    }
    let sub = if on_sanitizer(&mut config) {
        None
    } else {
        if !cupti::cupti_present() {
            return Err(RecordError::NoCupti);
        }
        Some(subscribe(&config)?)
    };
    let get = |k: &str| std::env::var(k).ok();
    let tool: Box<dyn PassTool + Send> = match &config.tool {
        Some(path) => Box::new(CTool::load(path).map_err(|e| RecordError::Config(e.to_string()))?),
        None => Box::new(FixedPasses(config.passes)),
    };
    let ledger = config
        .each_kernel
        .map(|each| Arc::new(CorpusLedger::new(each, config.report_dir.as_deref())));
    let outputs = Arc::new(
        Outputs::new(
            &config,
            std::process::id(),
            rank_from(get),
            kreplay_protocol::config::host_name(),
        )
        .with_corpus(ledger.clone()),
    );
    let report = Arc::new(Report::default());
    let rec = Recorder {
        sink: Sink::new(outputs.clone(), report.clone()),
        outputs,
        _subscriber: sub,
        kernels: kernels::Kernels::new(ledger.map(Corpus::new)),
        modules: Mutex::default(),
        allocations: Mutex::default(),
        graphs: Mutex::new(HashMap::new()),
        report,
        tool: Mutex::new(tool),
        metrics: Mutex::new(Vec::new()),
        selection: selection_of(&config),
        spans: spans_of(&config),
        range_timing: Mutex::default(),
        config,
    };
    if RECORDER.set(rec).is_err() {
        return Ok(()); // initialised twice: keep the first
    }
    if let Some(rec) = RECORDER.get() {
        rec.follow_nvtx(nvtx_event);
    }
    // SAFETY: registers plain extern "C" functions with the C runtime; the child's fork
    // handler only stores to an atomic (async-signal-safe, as a fork handler must be), the
    // prepare handler runs in the parent, before the fork.
    unsafe {
        atexit(at_exit);
        libc::pthread_atfork(Some(before_fork), None, Some(forked_child));
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
        let _ = std::panic::catch_unwind(outputs::note_started);
    }
    if RECORDER.get().is_none() {
        // No recorder in this process: NVTX's events are held for none.
        let _ = std::panic::catch_unwind(crate::nvtx_events::ignore);
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
