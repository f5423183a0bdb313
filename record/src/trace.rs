//! `KREPLAY_DEBUG_PROFILE=1`: a trace of the recorder's steps on stderr (in-place replay, the
//! walk, counter batches), with the time since the process's first step.
//! `KREPLAY_DEBUG_PROFILE=buffered`: the same steps kept in memory (no write and no fault count
//! per step: a system call each cost more than some of the steps it timed) and printed when a
//! capture's stall has ended (`flush`).

use std::sync::Mutex;
use std::time::Instant;

/// How steps are traced, read once.
enum Mode {
    /// Each step printed as it happens, with the thread's faults.
    Lines(Instant),
    /// Each step kept, printed by `flush`.
    Buffered(Instant),
}

fn mode() -> Option<&'static Mode> {
    static ON: std::sync::OnceLock<Option<Mode>> = std::sync::OnceLock::new();
    ON.get_or_init(|| {
        let v = std::env::var_os("KREPLAY_DEBUG_PROFILE")?;
        let t0 = Instant::now();
        // The chunk kernels' own steps (upload, launch, wait, read-back) join the trace.
        kreplay_cuda::steps::set_hook(trace);
        Some(if v == "buffered" {
            Mode::Buffered(t0)
        } else {
            Mode::Lines(t0)
        })
    })
    .as_ref()
}

/// Steps kept by the buffered mode: (ms since the first step, step).
static KEPT: Mutex<Vec<(f64, String)>> = Mutex::new(Vec::new());

/// `KREPLAY_DEBUG_PROFILE=1`: each step of in-place replay on stderr, with the time since the
/// process's first step (a diagnosis aid for a dispatch that does not come back).
pub(crate) fn trace_with(step: impl FnOnce() -> String) {
    match mode() {
        None => {}
        Some(Mode::Lines(t0)) => {
            // With the thread's minor page faults so far: first touches of fresh pages cost
            // about 2 us each on the H200 machine, a large share of a pointer table's stall.
            // And the bytes the recorder's allocator has carved for captures (`retaining_alloc`).
            let carved = crate::retaining_alloc::carved();
            crate::diag!(
                "kreplay: profile: {:>10.3} ms [{:>7} faults, {:>6} KiB carved] {}",
                t0.elapsed().as_secs_f64() * 1e3,
                minor_faults(),
                carved >> 10,
                step()
            );
        }
        Some(Mode::Buffered(t0)) => {
            let at = t0.elapsed().as_secs_f64() * 1e3;
            // The writers' steps interleave with the capture's: told apart, so a gap in a
            // stall is read between the capture's own steps.
            let step = match std::thread::current().name() {
                Some(n @ "kreplay-writer") => format!("[{n}] {}", step()),
                _ => step(),
            };
            KEPT.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((at, step));
        }
    }
}

/// Prints the steps the buffered mode kept (call where the application no longer waits).
pub(crate) fn flush() {
    if !matches!(mode(), Some(Mode::Buffered(_))) {
        return;
    }
    let kept = std::mem::take(&mut *KEPT.lock().unwrap_or_else(|e| e.into_inner()));
    let mut last = None;
    for (at, step) in kept {
        let since = last.map_or(0.0, |l| at - l);
        last = Some(at);
        crate::diag!("kreplay: profile: {at:>10.3} ms (+{since:>7.3}) {step}");
    }
}

/// `trace_with` for a fixed message.
pub(crate) fn trace(step: &str) {
    trace_with(|| step.to_string());
}

/// Minor page faults of the calling thread so far (`KREPLAY_DEBUG_STALL`,
/// `KREPLAY_DEBUG_PROFILE`: a walk that builds megabytes of tables in fresh pages pays a fault
/// a page, dear in a virtual machine).
pub(crate) fn minor_faults() -> u64 {
    // SAFETY: getrusage writes one rusage into a zeroed local.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is the calling thread.
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    if r == 0 {
        u.ru_minflt.max(0) as u64
    } else {
        0
    }
}
