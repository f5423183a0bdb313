//! The regions the pointer walk knows so far, asked per stored word whether it points into one.
//! A list searched from the start made the walk quadratic: a dispatch reaching a table of
//! 10,000 allocations asked 10,000 words against up to 10,000 regions, twice (following, then
//! the pointer slots), most of its 248 ms walk on the H200 (#34). Here the union of the regions
//! is kept as disjoint intervals (`IntervalUnion`): each question is a binary search.

use std::collections::BTreeSet;

use crate::interval_union::IntervalUnion;

/// Regions `(base, size)` in the order they were added, and their union for lookups.
#[derive(Debug, Default, Clone)]
pub struct KnownRegions {
    entries: Vec<(u64, u64)>,
    /// Disjoint intervals covering every non-empty region. Only overlapping regions are
    /// merged, touching ones are not: then a point inside a merged interval is strictly inside
    /// some region, as an empty overlap test at it asks.
    union: IntervalUnion,
    /// Bases of empty regions (inside nothing, but an overlap test sees them).
    points: BTreeSet<u64>,
}

impl KnownRegions {
    pub fn push(&mut self, base: u64, size: u64) {
        self.entries.push((base, size));
        if size == 0 {
            self.points.insert(base);
            return;
        }
        self.union.insert(base, base.saturating_add(size));
    }

    /// Makes room for `additional` more regions.
    pub fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
        self.union.reserve(additional);
    }

    /// Whether `v` lies inside a region (`base <= v < base + size`).
    pub fn contains(&self, v: u64) -> bool {
        self.union.contains(v)
    }

    /// `contains`, from where the last question of a run was answered
    /// (`IntervalUnion::contains_near`).
    pub fn contains_near(&self, v: u64, finger: &mut usize) -> bool {
        self.union.contains_near(v, finger)
    }

    /// Whether a region overlaps `[base, base + size)` (for each region `(b, n)`: `base < b + n`
    /// and `b < base + size`).
    pub fn overlaps(&self, base: u64, size: u64) -> bool {
        let end = base.saturating_add(size);
        let interval = self.union.overlaps(base, end);
        let point = base < end && self.points.range(base + 1..end).next().is_some();
        interval || point
    }

    /// The lowest base and the highest end, `None` when empty.
    pub fn span(&self) -> Option<(u64, u64)> {
        let lo = self.entries.iter().map(|k| k.0).min()?;
        let hi = self.entries.iter().map(|k| k.0.saturating_add(k.1)).max()?;
        Some((lo, hi))
    }

    /// The regions, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = &(u64, u64)> {
        self.entries.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The list search the walk made before, the reference.
    fn naive_contains(known: &[(u64, u64)], v: u64) -> bool {
        known
            .iter()
            .any(|&(b, n)| v >= b && v < b.saturating_add(n))
    }

    fn naive_overlaps(known: &[(u64, u64)], base: u64, size: u64) -> bool {
        known
            .iter()
            .any(|&(b, n)| base < b.saturating_add(n) && b < base.saturating_add(size))
    }

    #[test]
    fn nested_touching_and_empty_regions() {
        let mut k = KnownRegions::default();
        k.push(100, 50);
        k.push(110, 10); // nested
        k.push(150, 10); // touching
        k.push(300, 0); // empty
        assert!(k.contains(100) && k.contains(159) && !k.contains(160) && !k.contains(99));
        assert!(!k.contains(300), "an empty region holds nothing");
        assert!(k.overlaps(299, 2), "but an overlap test sees it");
        assert!(
            !k.overlaps(300, 5),
            "not at its own base: b < base is false"
        );
        assert!(k.overlaps(159, 1) && !k.overlaps(160, 100) && !k.overlaps(90, 10));
        assert!(
            !k.overlaps(150, 0),
            "at a touching point, strictly inside no region"
        );
        assert_eq!(k.span(), Some((100, 300)));
        assert_eq!(k.iter().count(), 4);
    }

    proptest! {
        // Catches: a merge that drops an interval it should have kept, an off-by-one at an
        // end, or an overlap test that misses a region starting inside the queried range.
        #[test]
        fn answers_as_the_list_search_did(
            regions in proptest::collection::vec((0u64..2000, 0u64..200), 0..40),
            probes in proptest::collection::vec((0u64..2400, 0u64..300), 0..60),
        ) {
            let mut k = KnownRegions::default();
            for &(b, n) in &regions {
                k.push(b, n);
            }
            for &(v, n) in &probes {
                prop_assert_eq!(k.contains(v), naive_contains(&regions, v), "contains {}", v);
                prop_assert_eq!(k.overlaps(v, n), naive_overlaps(&regions, v, n), "overlaps {} {}", v, n);
            }
            let iv = k.union.intervals();
            prop_assert!(iv.iter().zip(iv.iter().skip(1)).all(|(a, b)| a.1 <= b.0));
        }
    }
}
