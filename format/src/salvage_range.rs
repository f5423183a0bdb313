//! What a salvaged range capture lacks for a faithful replay: a step event lost or refused
//! (the range would run without it), an op step whose memory was dropped, a later kernel
//! step whose argument memory was dropped. Pure functions of the parsed capture and its
//! SALVAGE record; `replay_blockers` and salvage's own report both call them.

use crate::events::{EventKind, Region, SalvageRecord};
use crate::steps::{Action, Op, Step};

/// Whether a salvage must list event `(offset, kind)`, which its rules refused, among the
/// lost events: a step that is not in the file is a range that replays without it.
pub fn is_step_event(kind: u16) -> bool {
    kind == EventKind::Step as u16 || kind == EventKind::StepOp as u16
}

/// The steps salvage lost (damaged, or refused by the rules), as blockers.
pub fn lost_step_blockers(s: &SalvageRecord) -> Vec<String> {
    s.lost_events
        .iter()
        .filter(|(_, kind)| is_step_event(*kind))
        .map(|(offset, _)| {
            format!(
                "the step event at byte {offset} of the damaged file was lost: the range would \
                 replay without that step"
            )
        })
        .collect()
}

/// The device spans of op step `index` that lie in a region salvage dropped.
pub fn op_blockers(op: &Op, index: usize, kept: &[Region], s: &SalvageRecord) -> Vec<String> {
    let within = |r: &Region, addr: u64| addr >= r.address && addr - r.address < r.size.max(1);
    op.device_spans()
        .into_iter()
        .filter(|&(addr, _, _)| !kept.iter().any(|r| within(r, addr)))
        .filter_map(|(addr, bytes, written)| {
            s.dropped_regions.iter().find(|r| within(r, addr)).map(|r| {
                format!(
                    "step {index} ({}) {} {bytes} bytes at {addr:#x}, inside region {} \
                         ({} bytes at {:#x}), whose memory was lost",
                    op.kind(),
                    if written { "writes" } else { "reads" },
                    r.region_id,
                    r.size,
                    r.address
                )
            })
        })
        .collect()
}

/// Every blocker of the steps: lost steps, then per step its ops' lost memory and, for a
/// kernel step after the first (the DISPATCH's, which the caller checks), what
/// `kernel_blockers` says of its launch.
pub fn step_blockers(
    steps: &[Step],
    kept: &[Region],
    s: &SalvageRecord,
    kernel_blockers: &mut dyn FnMut(&crate::events::Dispatch) -> Vec<String>,
) -> Vec<String> {
    let mut out = lost_step_blockers(s);
    let first_kernel = steps.iter().position(|s| s.dispatch().is_some());
    for (i, step) in steps.iter().enumerate() {
        match &step.action {
            Action::Kernel(d) if Some(i) != first_kernel => out.extend(
                kernel_blockers(d)
                    .into_iter()
                    .map(|b| format!("step {i}: {b}")),
            ),
            Action::Kernel(_) => {}
            Action::Op(op) => out.extend(op_blockers(op, i, kept, s)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{MemoryKind, RegionRole};

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

    #[test]
    fn an_op_into_dropped_memory_is_named_with_its_region() {
        let s = SalvageRecord {
            dropped_regions: vec![region(1, 0x2000)],
            ..SalvageRecord::default()
        };
        let copy = Op::CopyDeviceToDevice {
            dst: 0x2010,
            src: 0x1000,
            bytes: 16,
        };
        let why = op_blockers(&copy, 3, &[region(0, 0x1000)], &s);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].starts_with("step 3 (copy-dtod) writes 16 bytes at 0x2010, inside region 1"),
            "{why:?}"
        );
        let inside = Op::CopyDeviceToDevice {
            dst: 0x1010,
            src: 0x1000,
            bytes: 16,
        };
        assert!(op_blockers(&inside, 3, &[region(0, 0x1000)], &s).is_empty());
    }

    #[test]
    fn a_lost_step_event_blocks_and_other_lost_events_do_not() {
        let s = SalvageRecord {
            lost_events: vec![
                (100, EventKind::MemoryChunk as u16),
                (200, EventKind::StepOp as u16),
            ],
            ..SalvageRecord::default()
        };
        let why = lost_step_blockers(&s);
        assert_eq!(why.len(), 1);
        assert!(why[0].contains("byte 200"), "{why:?}");
    }
}
