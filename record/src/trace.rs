//! `KREPLAY_DEBUG_PROFILE=1`: a trace of the recorder's steps on stderr (in-place replay, the
//! walk, counter batches), with the time since the process's first step.

/// `KREPLAY_DEBUG_PROFILE=1`: each step of in-place replay on stderr, with the time since the
/// process's first step (a diagnosis aid for a dispatch that does not come back).
pub(crate) fn trace_with(step: impl FnOnce() -> String) {
    static ON: std::sync::OnceLock<Option<std::time::Instant>> = std::sync::OnceLock::new();
    if let Some(t0) = ON.get_or_init(|| {
        std::env::var_os("KREPLAY_DEBUG_PROFILE").map(|_| std::time::Instant::now())
    }) {
        // With the thread's minor page faults so far: first touches of fresh pages cost about
        // 2 us each on the H200 machine, a large share of a pointer table's stall.
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
