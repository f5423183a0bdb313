//! What commands that cannot yet replay absent bytes call to refuse a capture by touched pages
//! (REGION_EXTENTS): replaying one takes mapping each region whole and filling its absent
//! pages, which this kreplay does not do yet, and a replay that took the stored zeros for
//! the application's memory would run the kernel on made-up data.

use crate::reader::Capture;
use crate::units::bytes;

/// `Err` with the message to show when a replay (`play`, `extract --repro`) is asked of a
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

/// Every reason this kreplay cannot replay `cap`: what salvage lost (`replay_blockers`), and
/// absent pages (`refuse_absent`). The one check `LaunchPlan::new` and `play` make before any
/// GPU work.
pub fn unreplayable(cap: &Capture<'_>) -> Vec<String> {
    let mut why = crate::replay_blockers(cap);
    if let Err(absent) = refuse_absent(cap) {
        why.push(absent);
    }
    why
}

/// The refusal for `regions` regions captured by touched pages holding `present` of their
/// `total` bytes.
pub fn absent_refusal(regions: usize, present: u64, total: u64) -> String {
    format!(
        "{regions} region{} captured by touched pages (`record --memory touched`), {} of {} \
         present: this kreplay cannot replay absent pages yet, so it neither plays this \
         capture nor writes its reproducer (`kreplay info` shows the extents)",
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
        assert!(m.contains("cannot replay absent pages yet"), "{m}");
        assert!(absent_refusal(1, 0, 4096).starts_with("1 region captured"));
    }
}
