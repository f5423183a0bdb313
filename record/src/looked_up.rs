//! The allocations a walk looked up, by base: asked again for each region found (may a kernel of
//! this device read it whole?) by the level's GPU scan and by the snapshots. A pointer table's
//! 10,000 answers come in address order (the allocator's, ascending or descending), so they
//! are kept in a list searched from where the last question was answered, and only answers out
//! of order go to a hash map: three hash operations per region were a tenth of a millisecond
//! per thousand regions while the application waited.

use rustc_hash::FxHashMap as HashMap;

/// base -> (size, a kernel of this device may read it whole).
#[derive(Debug, Default)]
pub struct LookedUp {
    /// Answers whose bases keep one direction (ascending, or descending: an allocator may
    /// hand a table's allocations out either way), in the order they came.
    ordered: Vec<(u64, u64, bool)>,
    /// The direction of `ordered`, once it holds two answers.
    descending: Option<bool>,
    /// Where the last question was answered in `ordered`.
    finger: usize,
    /// Answers that came out of order.
    others: HashMap<u64, (u64, bool)>,
}

impl LookedUp {
    /// Keeps an answer (a base already held keeps its first answer, as the walk asks each
    /// allocation once).
    pub fn insert(&mut self, base: u64, size: u64, readable: bool) {
        let in_order = match (self.ordered.last(), self.descending) {
            (None, _) => true,
            (Some(&(last, ..)), None) if last != base => {
                self.descending = Some(base < last);
                true
            }
            (Some(&(last, ..)), Some(false)) => base > last,
            (Some(&(last, ..)), Some(true)) => base < last,
            _ => false,
        };
        if in_order {
            self.ordered.push((base, size, readable));
        } else if self.get(base).is_none() {
            self.others.insert(base, (size, readable));
        }
    }

    /// Makes room for `additional` more answers.
    pub fn reserve(&mut self, additional: usize) {
        self.ordered.reserve(additional);
    }

    /// The answer kept for `base`.
    pub fn get(&mut self, base: u64) -> Option<(u64, bool)> {
        let at = |i: usize| self.ordered.get(i).filter(|e| e.0 == base);
        let near = [self.finger, self.finger + 1, self.finger.wrapping_sub(1)];
        let found = match near.into_iter().find(|&i| at(i).is_some()) {
            Some(i) => Some(i),
            None if self.descending == Some(true) => {
                self.ordered.binary_search_by(|e| base.cmp(&e.0)).ok()
            }
            None => self.ordered.binary_search_by_key(&base, |e| e.0).ok(),
        };
        match found {
            Some(i) => {
                self.finger = i;
                self.ordered
                    .get(i)
                    .map(|&(_, size, readable)| (size, readable))
            }
            None => self.others.get(&base).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Catches: an answer lost or replaced when bases come out of order, a finger that
        // answers for the wrong base, or a later answer for a base replacing the first.
        #[test]
        fn answers_as_a_map_of_first_answers_would(
            answers in proptest::collection::vec((0u64..64, 1u64..9, any::<bool>()), 0..80),
            questions in proptest::collection::vec(0u64..70, 0..80),
        ) {
            let mut kept = LookedUp::default();
            let mut map = std::collections::HashMap::new();
            for &(base, size, readable) in &answers {
                kept.insert(base, size, readable);
                map.entry(base).or_insert((size, readable));
            }
            for &q in questions.iter().chain(answers.iter().map(|a| &a.0)) {
                prop_assert_eq!(kept.get(q), map.get(&q).copied(), "base {}", q);
            }
        }
    }

    // Catches: answers handed out descending (as some allocators do) sent to the hash map one
    // by one, or found at the wrong place by a search that assumes ascending bases.
    #[test]
    fn descending_answers_stay_out_of_the_map() {
        let mut kept = LookedUp::default();
        for k in (0..100u64).rev() {
            kept.insert(0x1000 * (k + 1), 0x1000, k % 2 == 0);
        }
        assert!(kept.others.is_empty());
        assert_eq!(kept.get(0x1000), Some((0x1000, true)));
        assert_eq!(kept.get(0x2000), Some((0x1000, false)));
        assert_eq!(kept.get(0x50000), Some((0x1000, false)));
        assert_eq!(kept.get(0x2001), None);
    }

    #[test]
    fn ascending_answers_stay_out_of_the_map() {
        let mut kept = LookedUp::default();
        for k in 0..100u64 {
            kept.insert(0x1000 * (k + 1), 0x1000, k % 2 == 0);
        }
        assert!(kept.others.is_empty());
        assert_eq!(kept.get(0x1000), Some((0x1000, true)));
        assert_eq!(kept.get(0x2000), Some((0x1000, false)));
        assert_eq!(kept.get(0x2001), None);
    }
}
