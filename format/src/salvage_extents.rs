//! Salvage of regions captured by touched pages: a region whose REGION_EXTENTS event was
//! lost (or refused) must go, as for a lost pre-dispatch chunk, since without its extents the
//! zeros standing for its absent bytes would be taken for its memory.

use std::collections::BTreeMap;

use crate::rules::EventRef;

/// The regions whose extents event may be one of `lost` (offsets of REGION_EXTENTS events
/// lost or refused): a lost event's payload cannot say its region, but the rules place it
/// after its region and before the region's first chunk, so every region declared before it
/// with no extents and no chunk before it is a suspect. `accepted`: (offset, what) of the
/// events the rules took; `with_extents`: the regions whose extents survived. Sorted.
pub fn regions_of_lost_extents(
    accepted: &[(u64, EventRef)],
    lost: &[u64],
    with_extents: &dyn Fn(u32) -> bool,
) -> Vec<u32> {
    if lost.is_empty() {
        return Vec::new();
    }
    // Where each region was declared and where its first chunk is.
    let mut declared: BTreeMap<u32, u64> = BTreeMap::new();
    let mut first_chunk: BTreeMap<u32, u64> = BTreeMap::new();
    for (off, r) in accepted {
        match *r {
            EventRef::Region(id) => {
                declared.entry(id).or_insert(*off);
            }
            EventRef::Chunk(id) => {
                first_chunk.entry(id).or_insert(*off);
            }
            _ => {}
        }
    }
    declared
        .iter()
        .filter(|(id, _)| !with_extents(**id))
        .filter(|(id, &at)| {
            lost.iter()
                .any(|&l| at < l && first_chunk.get(id).is_none_or(|&c| c > l))
        })
        .map(|(id, _)| *id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_extents_event_takes_the_regions_it_may_belong_to() {
        // Region 0 at 100 (chunks from 200), region 1 at 300 (chunks from 500), region 2 at
        // 600 with surviving extents.
        let accepted = [
            (100, EventRef::Region(0)),
            (200, EventRef::Chunk(0)),
            (300, EventRef::Region(1)),
            (500, EventRef::Chunk(1)),
            (600, EventRef::Region(2)),
            (650, EventRef::Extents(2)),
        ];
        let has = |id: u32| id == 2;
        // Lost at 400: only region 1 is declared before it with no chunk yet.
        assert_eq!(regions_of_lost_extents(&accepted, &[400], &has), vec![1]);
        // Lost at 150: region 0's.
        assert_eq!(regions_of_lost_extents(&accepted, &[150], &has), vec![0]);
        // Lost after every region's first chunk but region 2's (which kept its own).
        assert_eq!(
            regions_of_lost_extents(&accepted, &[700], &has),
            Vec::<u32>::new()
        );
        assert_eq!(
            regions_of_lost_extents(&accepted, &[], &has),
            Vec::<u32>::new()
        );
    }
}
