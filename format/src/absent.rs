//! Absent bytes: what a replay of a capture by touched pages (REGION_EXTENTS) writes where
//! the capture holds nothing, and the refusal of what cannot hold absent bytes yet (a
//! reproducer, which writes every region whole from its own files).

use crate::reader::Capture;
use crate::units::bytes;

/// The byte a replay writes over every absent byte of a region, before the first pass (the
/// capture does not know those bytes). 0xFF reads as NaN in every floating-point type (f64,
/// f32, f16, bf16) and as -1 in every signed integer, so a kernel that does read absent bytes
/// (its accesses depend on data it did not touch when recorded) shows it in its output rather
/// than computing quietly on zeros; a word of it is never a pointer into user space.
pub const ABSENT_FILL: u8 = 0xFF;

/// `Err` with the message to show when a reproducer (`extract --repro`) is asked of a
/// capture with absent bytes.
pub fn refuse_absent(cap: &Capture<'_>) -> Result<(), String> {
    if !cap.has_extents() {
        return Ok(());
    }
    let (mut present, mut total) = (0u64, 0u64);
    for id in cap.region_extents.keys() {
        present += cap.present_bytes(*id);
        total += cap.region(*id).map_or(0, |r| r.size);
    }
    Err(absent_refusal(cap.region_extents.len(), present, total))
}

/// Every reason this kreplay cannot replay `cap`: what salvage lost (`replay_blockers`). The
/// one check `LaunchPlan::new` and `play` make before any GPU work. Absent bytes are no
/// reason: the replay fills them with `ABSENT_FILL`.
pub fn unreplayable(cap: &Capture<'_>) -> Vec<String> {
    crate::replay_blockers(cap)
}

/// The refusal of a reproducer for `regions` regions captured by touched pages holding
/// `present` of their `total` bytes.
pub fn absent_refusal(regions: usize, present: u64, total: u64) -> String {
    format!(
        "{regions} region{} captured by touched pages (`record --memory touched`), {} of {} \
         present: a reproducer cannot hold absent pages yet, so none is written for this \
         capture (`kreplay play` replays it; `kreplay info` shows the extents)",
        if regions == 1 { "" } else { "s" },
        bytes(present),
        bytes(total)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_says_what_the_capture_is_and_what_is_missing() {
        let m = absent_refusal(2, 8 << 10, 16 << 30);
        assert!(m.contains("2 regions captured by touched pages"), "{m}");
        assert!(m.contains("8.0 KiB of 16.0 GiB present"), "{m}");
        assert!(
            m.contains("a reproducer cannot hold absent pages yet"),
            "{m}"
        );
        assert!(m.contains("`kreplay play` replays it"), "{m}");
        assert!(absent_refusal(1, 0, 4096).starts_with("1 region captured"));
    }
}
