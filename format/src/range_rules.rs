//! The rules of a range capture that need the whole capture (its steps, its RANGE event and
//! every region), as pure functions: `CaptureBuilder::check_complete` applies them to a parsed
//! file and salvage to what it keeps. A salvage that dropped regions also decides here what
//! of the range still holds (`forget_digests_over`).

use std::collections::HashSet;

use crate::events::{Dispatch, Region};
use crate::steps::{op_problem, Action, RangeInfo, Step};

/// What is wrong with the steps as a whole: a range needs a kernel step, and its first kernel
/// step is the DISPATCH event (a range may begin with an op).
pub fn kernel_steps_problem(steps: &[Step], dispatch: Option<&Dispatch>) -> Option<String> {
    if steps.is_empty() {
        return None;
    }
    match (steps.iter().find_map(Step::dispatch), dispatch) {
        (None, _) => Some("the range holds no kernel step (a range capture needs one)".into()),
        (Some(first), Some(d)) if first != d => Some(
            "the first kernel step differs from the dispatch event (a range capture's \
             dispatch is its first kernel step)"
                .into(),
        ),
        _ => None,
    }
}

/// The first op step whose device spans lie outside every region the capture holds, and
/// outside every region a salvage dropped (`lost`): an op naming lost memory is the replay's
/// blocker to report (`replay_blockers`), not a broken file.
pub fn ops_problem(steps: &[Step], regions: &[Region], lost: &[Region]) -> Option<String> {
    let with_lost: Vec<Region>;
    let known = if lost.is_empty() {
        regions
    } else {
        with_lost = regions.iter().chain(lost).cloned().collect();
        &with_lost
    };
    steps.iter().enumerate().find_map(|(i, s)| match &s.action {
        Action::Op(op) => op_problem(op, i, known),
        Action::Kernel(_) => None,
    })
}

/// The lowest region id the capture does not hold: a digest over regions `0..n` needs
/// `n` at most this.
fn first_missing_id(regions: &[Region]) -> u32 {
    let ids: HashSet<u32> = regions.iter().map(|r| r.region_id).collect();
    (0..=u32::MAX)
        .find(|i| !ids.contains(i))
        .unwrap_or(u32::MAX)
}

/// What is wrong with the RANGE event given `steps` steps and the regions held: one digest per
/// step at most, each over regions (ids `0..regions`) the capture holds.
pub fn digest_problem(range: &RangeInfo, steps: usize, regions: &[Region]) -> Option<String> {
    if range.digests.len() > steps {
        return Some(format!(
            "the range event has {} step digests for {steps} steps",
            range.digests.len()
        ));
    }
    let missing = first_missing_id(regions);
    range
        .digests
        .iter()
        .enumerate()
        .find_map(|(i, d)| d.filter(|d| d.regions > missing).map(|d| (i, d)))
        .map(|(i, d)| {
            format!(
                "step {i}'s digest covers regions 0..{}, but the capture holds no region {missing}",
                d.regions
            )
        })
}

/// Forgets (sets to none) the digests that cover a region in `dropped`: what they digest can
/// no longer be had, while a digest over regions salvage kept still names a diverging step.
/// Returns how many were forgotten.
pub fn forget_digests_over(range: &mut RangeInfo, dropped: &HashSet<u32>) -> usize {
    let Some(&lowest) = dropped.iter().min() else {
        return 0;
    };
    let mut forgotten = 0;
    for d in range.digests.iter_mut() {
        if d.is_some_and(|d| d.regions > lowest) {
            *d = None;
            forgotten += 1;
        }
    }
    forgotten
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{MemoryKind, RegionRole};
    use crate::steps::{Op, StateDigest};

    fn region(region_id: u32, address: u64) -> Region {
        Region {
            region_id,
            address,
            size: 0x100,
            kind: MemoryKind::Device,
            role: RegionRole::Argument,
            chunk_size: 256,
        }
    }

    fn digest(regions: u32) -> Option<StateDigest> {
        Some(StateDigest {
            regions,
            digest: [regions as u64, 1],
        })
    }

    #[test]
    fn a_digest_needs_every_region_it_covers() {
        let held = [region(0, 0x1000), region(2, 0x3000)];
        let ok = RangeInfo {
            digests: vec![digest(1), None],
            ..RangeInfo::default()
        };
        assert_eq!(digest_problem(&ok, 2, &held), None);
        let gap = RangeInfo {
            digests: vec![digest(1), digest(3)],
            ..RangeInfo::default()
        };
        let why = digest_problem(&gap, 2, &held).expect("region 1 is missing");
        assert!(
            why.contains("step 1") && why.contains("no region 1"),
            "{why}"
        );
        let many = RangeInfo {
            digests: vec![None; 3],
            ..RangeInfo::default()
        };
        assert!(digest_problem(&many, 2, &held)
            .expect("refused")
            .contains("3 step digests for 2 steps"));
    }

    #[test]
    fn salvage_forgets_only_the_digests_over_a_dropped_region() {
        let mut r = RangeInfo {
            digests: vec![digest(1), digest(2), None, digest(3)],
            ..RangeInfo::default()
        };
        assert_eq!(forget_digests_over(&mut r, &HashSet::new()), 0);
        assert_eq!(forget_digests_over(&mut r, &HashSet::from([1])), 2);
        assert_eq!(r.digests, vec![digest(1), None, None, None]);
    }

    #[test]
    fn an_op_may_name_memory_salvage_lost_but_nothing_else() {
        let fill = Step::op(
            0,
            Op::Fill {
                dst: 0x2000,
                value: 0,
                element_bytes: 4,
                count: 4,
            },
        );
        let kept = [region(0, 0x1000)];
        assert!(ops_problem(std::slice::from_ref(&fill), &kept, &[]).is_some());
        assert_eq!(ops_problem(&[fill], &kept, &[region(1, 0x2000)]), None);
    }

    #[test]
    fn the_first_kernel_step_may_follow_ops() {
        let d = Dispatch {
            kernel_name: "k".into(),
            module_id: 0,
            api: crate::events::LaunchApi::LaunchKernel,
            grid: [1; 3],
            block: [1; 3],
            cluster: [0; 3],
            dynamic_shared_bytes: 0,
            attributes: Vec::new(),
            params: Vec::new(),
            arg_bytes: Vec::new(),
            pointer_words: Vec::new(),
            original_duration_ns: None,
        };
        let steps = [
            Step::op(0, Op::WaitEvent { event: 1 }),
            Step::kernel(0, d.clone()),
        ];
        assert_eq!(kernel_steps_problem(&steps, Some(&d)), None);
        assert!(kernel_steps_problem(&steps[..1], Some(&d))
            .expect("no kernel")
            .contains("no kernel step"));
        let mut other = d.clone();
        other.grid = [9, 1, 1];
        assert!(kernel_steps_problem(&steps, Some(&other)).is_some());
        assert_eq!(kernel_steps_problem(&[], None), None);
    }
}
