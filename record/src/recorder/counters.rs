//! Profile mode with `--metrics`: each context's counters and its batch of dispatches waiting
//! for them (`counter_batch`), collected when the batch is full, before memory they reach is
//! freed or the application needs the memory their pristine copies hold, when their context
//! or a module of it goes, and at the process's exit. Also a context's end for the captures
//! still being written: their snapshots in its device scratch come home first.

use kreplay_cuda::cupti_events::{AllocationRequest, ApiCall};
use kreplay_engine::counters::MetricRequest;

use super::context_metrics::ContextMetrics;
use super::hook::ensure_exit_collection;
use super::locking::lock;
use super::marks::{self, FlagGuard, IN_LAUNCH, SELF_CALLS};
use super::state::Recorder;
use crate::counter_batch::{Admission, ContextCounters, CounterBatch, Queued};

/// Free device memory kept for the application beyond what it asks for: below it, the
/// pristine copies waiting for their counters are counted and freed before its allocation.
const ALLOCATION_MARGIN: u64 = 256 << 20;

impl Recorder {
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
    pub(super) fn queue_for_counters(&self, all: &mut Vec<ContextMetrics>, q: Queued) {
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
    pub(super) fn collect_batches(&self, which: impl Fn(&ContextMetrics) -> bool) {
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

    /// At the ENTER of an allocation call: memory a waiting dispatch reaches is about to go
    /// (its batch is collected first), or the application asks for memory the batches'
    /// pristine copies may be holding (all are collected first).
    pub(super) fn before_allocation_change(&self, call: &ApiCall<'_>) {
        if self.config.metrics.is_empty() || marks::self_calls() {
            return;
        }
        let Some(change) = call.allocation_request() else {
            return;
        };
        let waiting: u64 = lock(&self.metrics).iter().map(|c| c.batch.bytes()).sum();
        if waiting == 0 {
            return;
        }
        match change {
            AllocationRequest::Release { addr, len } => {
                self.collect_batches(|c| c.batch.reaches(addr, len))
            }
            AllocationRequest::Request { bytes } => {
                let free = kreplay_cuda::memory_info().map_or(0, |(free, _)| free);
                if free < bytes.saturating_add(ALLOCATION_MARGIN) {
                    self.collect_batches(|_| true);
                }
            }
        }
    }

    /// A context was created: what the recorder needs in it is made now, on the thread that
    /// creates it, so that none of it is loaded, compiled or allocated on the application's
    /// time at its first matching launch (#34). Failures are left for that launch to meet
    /// (and say), as without the prewarm.
    pub(super) fn on_context_created(&self, context: usize) {
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        // SAFETY: CUPTI passed the handle of the context just created; it is alive during
        // this callback.
        let Ok(_current) = unsafe { kreplay_cuda::ContextHandle::from_raw(context) }.push() else {
            return;
        };
        let began = std::time::Instant::now();
        // Only a recording captures (profile's walk keeps nothing between dispatches).
        if self.config.mode == kreplay_protocol::config::Mode::Record {
            prewarm_host_pages();
        }
        let failed = crate::device_resources::prewarm();
        crate::trace::trace_with(|| {
            format!(
                "context prewarmed in {:.3} ms{}",
                began.elapsed().as_secs_f64() * 1e3,
                if failed.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", failed.join("; "))
                }
            )
        });
    }

    /// A context is about to be destroyed: snapshots of its captures still in device scratch
    /// come to the host now (the writer threads write them afterwards), and the recorder's own
    /// buffers in it are freed while it still exists.
    pub(super) fn on_context_destroy(&self, context: usize) {
        let flights = self.sink.in_flight_in(context);
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
        // Dispatches waiting for their counters are counted while the context lives; its
        // range profiler state goes with it.
        self.collect_batches(|c| c.context == context);
        lock(&self.metrics).retain(|c| c.context != context);
        // Last: the batches above may have made the context's sweep again, which must not
        // outlive it (a later context given the same handle would find it).
        crate::capture::forget_context(context);
    }
}

/// The recorder's allocator populates one chunk of host pages for the first capture's tables
/// (`retaining_alloc::prewarm_chunk`: 9-25 ms of page faults in a virtual machine), on a
/// thread of its own at idle priority so that the application neither waits nor loses a core
/// for it; once per process.
fn prewarm_host_pages() {
    if !crate::retaining_alloc::prewarm_wanted() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("kreplay-prewarm".into())
        .spawn(|| {
            let _ = std::panic::catch_unwind(|| {
                let idle = libc::sched_param { sched_priority: 0 };
                // SAFETY: sets this thread's own policy (pid 0: the caller) from a valid
                // parameter; a refusal leaves it as it was, which is fine.
                unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) };
                let began = std::time::Instant::now();
                let bytes = crate::retaining_alloc::prewarm_chunk();
                crate::trace::trace_with(|| {
                    format!(
                        "host pages prewarmed: {} MiB in {:.1} ms",
                        bytes >> 20,
                        began.elapsed().as_secs_f64() * 1e3
                    )
                });
            });
        });
    if let Err(e) = spawned {
        crate::trace::trace_with(|| format!("host pages not prewarmed: {e}"));
    }
}
