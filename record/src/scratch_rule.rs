//! How much device scratch the recorder may take: the one rule capture, spill, profile, the
//! walk and the spares share (a module of its own, so that each may ask it without reaching
//! into the others).

use kreplay_cuda::memory_info;

/// Device scratch for snapshots is used only while this much device memory stays free after
/// it, so the application never runs out of memory because of a capture.
/// `KREPLAY_DEBUG_SNAPSHOT=host` makes every region take the path of those that do not fit
/// (into the file during the stall, see `spill`): a test and measurement aid, not a user option.
pub(crate) fn scratch_allowed(size: u64) -> bool {
    if std::env::var_os("KREPLAY_DEBUG_SNAPSHOT").is_some_and(|v| v == "host") {
        return false;
    }
    let allowed = memory_info()
        .is_ok_and(|(free, total)| free.saturating_sub(2 * size) > (total / 4).max(8 << 30));
    crate::trace::trace("scratch rule asked (cuMemGetInfo)");
    allowed
}
