//! The memory a range capture holds: its regions (a snapshot's position is its region id),
//! the module globals and pointer slots among them. A step adds the regions it reaches that
//! the range does not hold yet; their bytes are still at the range-start state then, since no
//! earlier step could reach them. The placement rules are pure functions, tested below.

use kreplay_cuda::{pointer, Stream};
use kreplay_format::{MemoryKind, ModuleGlobal, RegionRole};

use crate::error::RecordError;
use crate::reachable::VMM_EXTENT_LIMIT;
use crate::snapshot::{copy_into_slab, take_snapshots, Snapshot};
use crate::walk::{FoundRegion, Walk};

/// What a range holds before its first kernel step opened its capture (a range opened by a
/// boundary may begin with copies and fills).
#[derive(Default)]
pub struct Held {
    pub snapshots: Vec<Snapshot>,
    pub globals: Vec<ModuleGlobal>,
    pub pointer_slots: Vec<(u32, u64)>,
}

/// The held memory where it lives now: in `Held` or in the capture's data.
pub struct HeldMut<'a> {
    pub snapshots: &'a mut Vec<Snapshot>,
    pub globals: &'a mut Vec<ModuleGlobal>,
    pub pointer_slots: &'a mut Vec<(u32, u64)>,
}

impl Held {
    pub fn as_mut(&mut self) -> HeldMut<'_> {
        HeldMut {
            snapshots: &mut self.snapshots,
            globals: &mut self.globals,
            pointer_slots: &mut self.pointer_slots,
        }
    }
}

impl HeldMut<'_> {
    /// Snapshots the regions of `walk` the range does not hold and adds the pointer slots.
    /// Call with the context synchronised.
    pub fn add(&mut self, walk: &Walk, module_id: u32) -> Result<(), RecordError> {
        let held = held_spans(self.snapshots);
        let reached: Vec<(u64, u64)> = walk.regions.iter().map(|r| (r.base, r.size)).collect();
        let places = place_regions(&held, &reached).map_err(RecordError::Range)?;
        let new: Vec<usize> = (0..walk.regions.len())
            .filter(|&i| matches!(places.get(i), Some(Place::New(_))))
            .collect();
        let fresh = Walk {
            regions: new.iter().map(|&i| walk.regions[i].clone()).collect(),
            kernel_readable: new
                .iter()
                .map(|&i| walk.kernel_readable.get(i).copied().unwrap_or(false))
                .collect(),
            ..Walk::default()
        };
        if !fresh.regions.is_empty() {
            let stream =
                Stream::new().map_err(RecordError::cuda("creating the snapshot stream"))?;
            let slab = copy_into_slab(&fresh, &stream);
            let (mut snapshots, mut globals) = take_snapshots(
                &fresh,
                slab,
                &mut Default::default(),
                module_id,
                &stream,
                None,
                &mut None,
            )?;
            stream
                .synchronize()
                .map_err(RecordError::cuda("waiting for the snapshot copies"))?;
            let first_new = self.snapshots.len() as u32;
            for s in &mut snapshots {
                s.region.region_id += first_new;
            }
            for g in &mut globals {
                g.region_id += first_new;
            }
            self.snapshots.extend(snapshots);
            self.globals.extend(globals);
        }
        let first_new = (self.snapshots.len() - fresh.regions.len()) as u32;
        self.pointer_slots
            .extend(remap_slots(&walk.pointer_slots, &places, first_new));
        self.pointer_slots.sort_unstable();
        self.pointer_slots.dedup();
        Ok(())
    }
}

/// The allocations holding an op's device spans, as a walk the range can add (the driver
/// resolves each address).
pub fn op_walk(spans: &[(u64, u64, bool)]) -> Result<Walk, RecordError> {
    // The walk's bound on joined VMM mappings: an op's allocation and a kernel's region of the
    // same memory must be the same region.
    let regions = span_allocations(spans, |a| pointer::allocation_range(a, VMM_EXTENT_LIMIT))
        .map_err(RecordError::Range)?;
    Ok(Walk {
        regions: regions
            .into_iter()
            .map(|(base, size)| FoundRegion {
                base,
                size,
                role: RegionRole::Argument,
                kind: if pointer::is_managed(base) {
                    MemoryKind::Managed
                } else {
                    MemoryKind::Device
                },
                global: None,
                readable: None,
            })
            .collect(),
        ..Walk::default()
    })
}

/// (address, size) of the regions the range holds, by region id (a snapshot's position is
/// its region id); a CUDA array has no address, so it holds nothing a step can reach: (0, 0).
pub fn held_spans(snapshots: &[Snapshot]) -> Vec<(u64, u64)> {
    snapshots
        .iter()
        .map(|s| match s.region.kind {
            MemoryKind::CudaArray => (0, 0),
            _ => (s.device_addr, s.region.size),
        })
        .collect()
}

/// The allocations (by `allocation`: base and size of the one holding an address) that hold
/// each span, once each, in order of first use. A span the driver places in no allocation,
/// or that runs past the end of its own, is refused: its bytes could not be held.
pub fn span_allocations(
    spans: &[(u64, u64, bool)],
    allocation: impl Fn(u64) -> Option<(u64, u64)>,
) -> Result<Vec<(u64, u64)>, String> {
    let mut found: Vec<(u64, u64)> = Vec::new();
    for &(addr, bytes, _) in spans {
        let Some((base, size)) = allocation(addr) else {
            return Err(format!(
                "{bytes} bytes at {addr:#x} are in no device allocation the driver knows"
            ));
        };
        let inside = addr
            .checked_add(bytes)
            .is_some_and(|end| end <= base.saturating_add(size));
        if !inside {
            return Err(format!(
                "{bytes} bytes at {addr:#x} run past the end of their allocation ({size} bytes at {base:#x})"
            ));
        }
        if !found.contains(&(base, size)) {
            found.push((base, size));
        }
    }
    Ok(found)
}

/// Where a region a step reaches goes in the range's regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Inside held region `id`, at `delta` bytes from its start.
    Held { id: u32, delta: u64 },
    /// Not held yet: the `n`th new region of this step.
    New(u32),
}

/// Places each reached (address, size) among the held ones (held index = region id). A
/// reached region that overlaps a held one without lying inside it is refused: its bytes
/// would be held twice with different range-start states.
pub fn place_regions(held: &[(u64, u64)], reached: &[(u64, u64)]) -> Result<Vec<Place>, String> {
    let mut fresh = 0u32;
    let mut fresh_spans: Vec<(u64, u64)> = Vec::new();
    let mut places = Vec::with_capacity(reached.len());
    for &(base, size) in reached {
        let end = base.saturating_add(size);
        let inside = held
            .iter()
            .position(|&(b, s)| base >= b && end <= b.saturating_add(s));
        if let Some(id) = inside {
            places.push(Place::Held {
                id: id as u32,
                delta: base - held[id].0,
            });
            continue;
        }
        let overlaps = |&(b, s): &(u64, u64)| base < b.saturating_add(s) && b < end;
        if held.iter().chain(&fresh_spans).any(overlaps) {
            return Err(format!(
                "a step reaches {size} bytes at {base:#x}, which overlap memory an earlier step reached with other bounds; not supported in range captures yet"
            ));
        }
        fresh_spans.push((base, size));
        places.push(Place::New(fresh));
        fresh += 1;
    }
    Ok(places)
}

/// A step's pointer slots (region = index into its walk) in the range's region ids, new
/// regions numbered from `first_new`.
pub fn remap_slots(slots: &[(u32, u64)], places: &[Place], first_new: u32) -> Vec<(u32, u64)> {
    slots
        .iter()
        .filter_map(|&(r, off)| match places.get(r as usize)? {
            Place::Held { id, delta } => Some((*id, off + delta)),
            Place::New(n) => Some((first_new + n, off)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reached_regions_are_placed_inside_held_ones_or_new() {
        let held = [(0x1000, 0x100), (0x4000, 0x1000)];
        let reached = [(0x4010, 0x10), (0x8000, 0x40), (0x1000, 0x100), (0x9000, 8)];
        let places = place_regions(&held, &reached).expect("placed");
        assert_eq!(
            places,
            vec![
                Place::Held { id: 1, delta: 0x10 },
                Place::New(0),
                Place::Held { id: 0, delta: 0 },
                Place::New(1)
            ]
        );
        let slots = remap_slots(&[(0, 8), (1, 16), (3, 0)], &places, 2);
        assert_eq!(slots, vec![(1, 0x18), (2, 16), (3, 0)]);
    }

    #[test]
    fn an_empty_held_span_holds_nothing() {
        // A CUDA array's slot among the held regions: ids stay positions, nothing lands there.
        let places =
            place_regions(&[(0, 0), (0x1000, 0x100)], &[(0x1000, 8), (0, 8)]).expect("placed");
        assert_eq!(places, vec![Place::Held { id: 1, delta: 0 }, Place::New(0)]);
    }

    #[test]
    fn a_region_straddling_a_held_one_is_refused() {
        let err = place_regions(&[(0x1000, 0x100)], &[(0x10f0, 0x20)]).unwrap_err();
        assert!(err.contains("overlap"), "{err}");
        // Two new regions of one step that overlap each other too.
        assert!(place_regions(&[], &[(0, 16), (8, 16)]).is_err());
    }

    /// Two allocations: 0x1000..0x2000 and 0x8000..0x8100.
    fn allocation(a: u64) -> Option<(u64, u64)> {
        [(0x1000u64, 0x1000u64), (0x8000, 0x100)]
            .into_iter()
            .find(|&(b, s)| a >= b && a < b + s)
    }

    #[test]
    fn an_ops_spans_are_held_as_their_allocations_once_each() {
        // A copy within one allocation names it once; a fill of another adds it.
        let spans = [
            (0x1800, 0x100, false),
            (0x1000, 0x100, true),
            (0x8010, 4, true),
        ];
        assert_eq!(
            span_allocations(&spans, allocation),
            Ok(vec![(0x1000, 0x1000), (0x8000, 0x100)])
        );
        // The allocations are then placed like a kernel's: inside a held region, nothing new.
        let places = place_regions(&[(0x1000, 0x1000)], &[(0x1000, 0x1000)]).expect("placed");
        assert_eq!(places, vec![Place::Held { id: 0, delta: 0 }]);
    }

    #[test]
    fn a_span_outside_or_past_its_allocation_is_refused() {
        let outside = span_allocations(&[(0x5000, 8, true)], allocation).unwrap_err();
        assert!(outside.contains("no device allocation"), "{outside}");
        let past = span_allocations(&[(0x80f0, 0x20, false)], allocation).unwrap_err();
        assert!(past.contains("run past the end"), "{past}");
        let wraps = span_allocations(&[(0x1000, u64::MAX, false)], allocation);
        assert!(wraps.is_err());
    }
}
