//! Absent bytes: what a replay of a capture by touched pages (REGION_EXTENTS) writes where
//! the capture holds nothing (`play`, and the reproducer of `extract --repro`, whose ABSENT
//! table lists the ranges it fills).

use crate::reader::Capture;

/// The byte a replay writes over every absent byte of a region, before the first pass (the
/// capture does not know those bytes). 0xFF reads as NaN in every floating-point type (f64,
/// f32, f16, bf16) and as -1 in every signed integer, so a kernel that does read absent bytes
/// (its accesses depend on data it did not touch when recorded) shows it in its output rather
/// than computing quietly on zeros; a word of it is never a pointer into user space.
pub const ABSENT_FILL: u8 = 0xFF;

/// Every reason this kreplay cannot replay `cap`: what salvage lost (`replay_blockers`). The
/// one check `LaunchPlan::new` and `play` make before any GPU work. Absent bytes are no
/// reason: the replay fills them with `ABSENT_FILL`.
pub fn unreplayable(cap: &Capture<'_>) -> Vec<String> {
    crate::replay_blockers(cap)
}
