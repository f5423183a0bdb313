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
        crate::diag!(
            "kreplay: profile: {:>10.3} ms [{:>7} faults] {}",
            t0.elapsed().as_secs_f64() * 1e3,
            crate::reachable::minor_faults(),
            step()
        );
    }
}

/// `trace_with` for a fixed message.
pub(crate) fn trace(step: &str) {
    trace_with(|| step.to_string());
}
