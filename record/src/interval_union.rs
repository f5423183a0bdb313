//! The union of the regions the pointer walk knows, as disjoint intervals `[start, end)` that
//! answer "is this word inside one?" (`KnownRegions`, #34). Only overlapping intervals merge,
//! touching ones do not, so a point inside a merged interval is strictly inside some region.
//!
//! Kept as a sorted double-ended queue while intervals arrive at either end. That is the usual
//! order: an allocator hands out a pointer table's allocations in ascending (or descending)
//! addresses. Then an insert is O(1) and a question a binary search over contiguous memory.
//! The first insert in the middle of a large union moves it to a B-tree, logarithmic for any
//! order. The B-tree alone spent about 300 ns per region of a 10,000-entry table's walk
//! (`cargo bench -p kreplay-record --bench walk`).

use std::collections::{BTreeMap, VecDeque};

/// An insert that would shift more intervals than this moves the union to the B-tree. A shift
/// of 256 (4 KiB) costs about what a B-tree insert does, but the B-tree makes every question
/// after it dearer too: an allocator that carves 4 KiB allocations from 2 MiB chunks in order
/// and maps each chunk below the last gives ascending runs of 512, each inserted just after the
/// one before, at most 512 from the front (the walk bench's sawtooth: 254 ns a region in the
/// B-tree, against 62 for ascending addresses).
const SORTED_MOST_FOR_MIDDLE: usize = 1024;

#[derive(Debug, Clone)]
pub struct IntervalUnion {
    form: Form,
    sorted_most: usize,
    /// Where the last insert into the sorted form went: the next one is often just after it
    /// (the runs above), found without a search.
    finger: usize,
}

#[derive(Debug, Clone)]
enum Form {
    Sorted(VecDeque<(u64, u64)>),
    Tree(BTreeMap<u64, u64>),
}

impl Default for IntervalUnion {
    fn default() -> Self {
        IntervalUnion::with_sorted_most(SORTED_MOST_FOR_MIDDLE)
    }
}

impl IntervalUnion {
    /// A union that keeps the sorted form while an insert shifts at most `sorted_most`
    /// intervals.
    pub fn with_sorted_most(sorted_most: usize) -> IntervalUnion {
        IntervalUnion {
            form: Form::Sorted(VecDeque::new()),
            sorted_most,
            finger: 0,
        }
    }

    /// Adds `[start, end)` (non-empty), merging every interval it overlaps.
    pub fn insert(&mut self, start: u64, end: u64) {
        // Empty (a region at the top of the address space, its end saturated): inside nothing.
        if start >= end {
            return;
        }
        if let Form::Sorted(q) = &mut self.form {
            // The usual orders first: past the last interval, or before the first.
            if q.back().is_none_or(|&(_, e)| e <= start) {
                q.push_back((start, end));
                self.finger = q.len() - 1;
                return;
            }
            if q.front().is_some_and(|&(s, _)| end <= s) {
                q.push_front((start, end));
                self.finger = 0;
                return;
            }
            // Just after the last insert, or just inside either end (one region at that end,
            // the others marching the other way): no search, and the shorter side shifts.
            let n = q.len();
            let fits_after =
                |k: usize| k < n.saturating_sub(1) && q[k].1 <= start && end <= q[k + 1].0;
            if let Some(k) = [self.finger, n.wrapping_sub(2), 0]
                .into_iter()
                .find(|&k| fits_after(k))
            {
                // (One interval moved is never worth the B-tree.)
                if (k + 1).min(n - k - 1) <= self.sorted_most.max(1) {
                    q.insert(k + 1, (start, end));
                    self.finger = k + 1;
                    return;
                }
            }
            // Intervals [j, i) overlap: they start before `end` and end after `start` (ends
            // ascend with starts, the intervals being disjoint).
            let i = q.partition_point(|&(s, _)| s < end);
            let j = q.partition_point(|&(_, e)| e <= start).min(i);
            let merged = if j < i {
                (q[j].0.min(start), q[i - 1].1.max(end))
            } else {
                (start, end)
            };
            // A deque shifts the shorter side: nothing at either end.
            if j.min(q.len() - i) <= self.sorted_most {
                q.drain(j..i);
                q.insert(j, merged);
                self.finger = j;
                return;
            }
            self.form = Form::Tree(q.iter().copied().collect());
        }
        if let Form::Tree(t) = &mut self.form {
            tree_insert(t, start, end);
        }
    }

    /// Makes room for `additional` more intervals while the union is kept sorted.
    pub fn reserve(&mut self, additional: usize) {
        if let Form::Sorted(q) = &mut self.form {
            q.reserve(additional);
        }
    }

    /// Whether `v` lies inside an interval.
    pub fn contains(&self, v: u64) -> bool {
        match &self.form {
            Form::Sorted(q) => {
                // Outside the span in O(1): a pointer table's words point past every region
                // known so far when they are followed (the allocator's order).
                match (q.front(), q.back()) {
                    (Some(&(first, _)), Some(&(_, last))) if first <= v && v < last => {}
                    _ => return false,
                }
                // Searched slice by slice: the deque's own search indexes through its ring
                // (12% of a 10,000-entry pointer table's walk).
                let (front, back) = q.as_slices();
                let part = if back.first().is_some_and(|&(s, _)| s <= v) {
                    back
                } else {
                    front
                };
                let i = part.partition_point(|&(s, _)| s <= v);
                i > 0 && v < part[i - 1].1
            }
            Form::Tree(t) => t.range(..=v).next_back().is_some_and(|(_, &e)| v < e),
        }
    }

    /// `contains`, asked first of the interval at `*finger` and of its neighbours, and `*finger`
    /// moved to the interval at or before `v`: a pointer table's words, asked in order, fall
    /// in ascending (or descending) intervals, and a binary search for each of 10,000 was a
    /// fifth of a walk's bookkeeping. Any finger gives the same answer as `contains`.
    pub fn contains_near(&self, v: u64, finger: &mut usize) -> bool {
        let Form::Sorted(q) = &self.form else {
            return self.contains(v);
        };
        for at in [*finger, finger.wrapping_add(1), finger.wrapping_sub(1)] {
            let Some(&(start, end)) = q.get(at) else {
                continue;
            };
            if start <= v && v < end {
                *finger = at;
                return true;
            }
            // In the gap after this interval (before the next, or past the last).
            if end <= v && q.get(at + 1).is_none_or(|&(next, _)| v < next) {
                *finger = at;
                return false;
            }
        }
        let i = q.partition_point(|&(start, _)| start <= v);
        *finger = i.saturating_sub(1);
        i > 0 && v < q[i - 1].1
    }

    /// Whether the last interval starting before `end` ends after `base`: for disjoint
    /// intervals, whether one overlaps `[base, end)`.
    pub fn overlaps(&self, base: u64, end: u64) -> bool {
        match &self.form {
            Form::Sorted(q) => {
                let (front, back) = q.as_slices();
                let part = if back.first().is_some_and(|&(s, _)| s < end) {
                    back
                } else {
                    front
                };
                let i = part.partition_point(|&(s, _)| s < end);
                i > 0 && part[i - 1].1 > base
            }
            Form::Tree(t) => t.range(..end).next_back().is_some_and(|(_, &e)| e > base),
        }
    }

    /// The intervals, ascending.
    pub fn intervals(&self) -> Vec<(u64, u64)> {
        match &self.form {
            Form::Sorted(q) => q.iter().copied().collect(),
            Form::Tree(t) => t.iter().map(|(&s, &e)| (s, e)).collect(),
        }
    }
}

fn tree_insert(t: &mut BTreeMap<u64, u64>, mut start: u64, mut end: u64) {
    let overlapping: Vec<u64> = t
        .range(..end)
        .rev()
        .take_while(|&(_, &e)| e > start)
        .map(|(&s, _)| s)
        .collect();
    for s in overlapping {
        if let Some(e) = t.remove(&s) {
            start = start.min(s);
            end = end.max(e);
        }
    }
    t.insert(start, end);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive_union(intervals: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = Vec::new();
        for &(s, e) in intervals {
            let (mut s, mut e) = (s, e);
            v.retain(|&(a, b)| {
                let overlap = a < e && b > s;
                if overlap {
                    s = s.min(a);
                    e = e.max(b);
                }
                !overlap
            });
            v.push((s, e));
        }
        v.sort_unstable();
        v
    }

    // Catches: touching intervals merged, an overlap at either end missed, a merge that
    // drops an interval, the ascending and descending fast paths out of order, the move to
    // the B-tree losing intervals (small limits force it).
    #[test]
    fn in_either_form_the_union_is_the_list_merge() {
        for limit in [0, 3, SORTED_MOST_FOR_MIDDLE] {
            let mut u = IntervalUnion::with_sorted_most(limit);
            for (s, e) in [
                (10, 20),
                (30, 40),
                (20, 30),
                (5, 11),
                (50, 60),
                (45, 46),
                (39, 51),
            ] {
                u.insert(s, e);
            }
            assert_eq!(
                u.intervals(),
                vec![(5, 20), (20, 30), (30, 60)],
                "limit {limit}"
            );
            assert!(u.contains(5) && u.contains(19) && u.contains(20) && !u.contains(60));
            assert!(!u.contains(4) && u.overlaps(59, 70) && !u.overlaps(60, 70));
        }
        let mut up = IntervalUnion::with_sorted_most(0);
        let mut down = IntervalUnion::with_sorted_most(0);
        for k in 0..1000u64 {
            up.insert(k * 10, k * 10 + 5);
            down.insert((1000 - k) * 10, (1000 - k) * 10 + 5);
        }
        assert!(matches!(up.form, Form::Sorted(_)) && matches!(down.form, Form::Sorted(_)));
        assert!(up.contains(9994) && !up.contains(9995) && down.contains(10_004));
    }

    // Catches: an interval put just inside either end, or just after the last insert, out of
    // order, over a neighbour, or moving the union to the B-tree (a table below its
    // allocations, handed out descending, and the mirror image; ascending runs, each below the
    // last).
    #[test]
    fn intervals_marching_inward_from_one_end_stay_sorted() {
        let mut below = IntervalUnion::with_sorted_most(0);
        below.insert(0, 10);
        let mut above = IntervalUnion::with_sorted_most(0);
        above.insert(100_000, 100_010);
        let mut want_below = vec![(0, 10)];
        let mut want_above = Vec::new();
        for k in 0..500u64 {
            let s = 90_000 - k * 100;
            below.insert(s, s + 50);
            want_below.push((s, s + 50));
            let t = 1000 + k * 100;
            above.insert(t, t + 50);
            want_above.push((t, t + 50));
        }
        want_above.push((100_000, 100_010));
        want_below.sort_unstable();
        assert!(matches!(below.form, Form::Sorted(_)) && matches!(above.form, Form::Sorted(_)));
        assert_eq!(below.intervals(), want_below);
        assert_eq!(above.intervals(), want_above);
        let mut runs = IntervalUnion::default();
        let mut want_runs = Vec::new();
        for k in 0..4096u64 {
            let s = (7 - k / 512) * 1_000_000 + (k % 512) * 100;
            runs.insert(s, s + 50);
            want_runs.push((s, s + 50));
        }
        want_runs.sort_unstable();
        assert!(
            matches!(runs.form, Form::Sorted(_)),
            "runs of 512 stay sorted"
        );
        assert_eq!(runs.intervals(), want_runs);
        // Overlapping the neighbour still merges (not the fast path).
        below.insert(89_990, 90_010);
        assert!(below.intervals().contains(&(89_990, 90_050)));
    }

    proptest! {
        // Catches: a finger that answers for the wrong interval (inside its neighbour, in a
        // gap, before the first or past the last), in either form, from any starting finger.
        #[test]
        fn contains_near_answers_as_contains_from_any_finger(
            intervals in proptest::collection::vec((0u64..3000, 1u64..40), 0..60),
            probes in proptest::collection::vec(0u64..3100, 0..120),
            start in 0usize..80,
            limit in 0usize..4,
        ) {
            let mut u = IntervalUnion::with_sorted_most(if limit == 3 { SORTED_MOST_FOR_MIDDLE } else { limit });
            for &(s, n) in &intervals {
                u.insert(s, s + n);
            }
            let mut finger = start;
            let mut sorted_probes = probes.clone();
            sorted_probes.sort_unstable();
            for &v in probes.iter().chain(&sorted_probes) {
                prop_assert_eq!(u.contains_near(v, &mut finger), u.contains(v), "{}", v);
            }
        }

        // Catches: a union grown at both ends (its deque's storage then wraps) answering
        // wrongly across the seam, or leaving the sorted form.
        #[test]
        fn a_union_grown_at_both_ends_answers_across_its_wrap(
            gaps in proptest::collection::vec((1u64..20, 1u64..20), 1..80),
            probes in proptest::collection::vec(0u64..3500, 0..80),
        ) {
            let mut at = 0;
            let sorted: Vec<(u64, u64)> = gaps
                .iter()
                .map(|&(gap, len)| {
                    at += gap;
                    let iv = (at, at + len);
                    at += len;
                    iv
                })
                .collect();
            // From the middle outwards: one to the back, one to the front, in turn.
            let mid = sorted.len() / 2;
            let mut u = IntervalUnion::default();
            u.insert(sorted[mid].0, sorted[mid].1);
            for k in 1..=sorted.len() {
                if let Some(&(s, e)) = sorted.get(mid + k) {
                    u.insert(s, e);
                }
                if let Some(&(s, e)) = mid.checked_sub(k).and_then(|i| sorted.get(i)) {
                    u.insert(s, e);
                }
            }
            prop_assert!(matches!(u.form, Form::Sorted(_)));
            prop_assert_eq!(u.intervals(), sorted.clone());
            for v in probes.iter().copied().chain(sorted.iter().flat_map(|&(s, e)| [s - 1, s, e - 1, e])) {
                let inside = sorted.iter().any(|&(s, e)| v >= s && v < e);
                prop_assert_eq!(u.contains(v), inside, "contains {}", v);
                let over = sorted.iter().any(|&(s, e)| s < v + 3 && e > v);
                prop_assert_eq!(u.overlaps(v, v + 3), over, "overlaps {}", v);
            }
        }

        #[test]
        fn answers_as_the_list_merge_does(
            intervals in proptest::collection::vec((0u64..2000, 1u64..200), 0..60),
            probes in proptest::collection::vec((0u64..2400, 1u64..300), 0..60),
            limit in 0usize..8,
        ) {
            let ivs: Vec<(u64, u64)> = intervals.iter().map(|&(s, n)| (s, s + n)).collect();
            let mut u = IntervalUnion::with_sorted_most(limit);
            for &(s, e) in &ivs {
                u.insert(s, e);
            }
            let want = naive_union(&ivs);
            prop_assert_eq!(u.intervals(), want.clone());
            for &(v, n) in &probes {
                let inside = want.iter().any(|&(s, e)| v >= s && v < e);
                prop_assert_eq!(u.contains(v), inside, "contains {}", v);
                let over = want.iter().any(|&(s, e)| s < v + n && e > v);
                prop_assert_eq!(u.overlaps(v, v + n), over, "overlaps {} {}", v, n);
            }
        }
    }
}
