//! The address ranges of this crate's own allocations (`DeviceBuffer`, `PinnedBuffer`), so
//! that the recorder's pointer walk never takes kreplay's scratch for the application's
//! memory. A data word of the application that happens to lie inside one of them (a block
//! table's pair of indices read as one 8-byte word, say) is not a pointer the kernel can use:
//! kreplay's buffers are its own. Seen on the H200: touch_gather's 16 GiB block table holds
//! the word 0x7f3a001ee113, which fell inside the walk's own device copy of the output region,
//! and the capture gained a 164 MiB region of kreplay's scratch.
//!
//! One table per copy of this crate: the recorder's (statically linked into the injected
//! library) holds only the recorder's buffers, never those of a `kreplay play` it records.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Disjoint ranges, start -> length.
#[derive(Debug, Default)]
pub struct OwnedRanges {
    ranges: BTreeMap<u64, u64>,
}

impl OwnedRanges {
    pub fn insert(&mut self, start: u64, len: u64) {
        if len > 0 {
            self.ranges.insert(start, len);
        }
    }

    pub fn remove(&mut self, start: u64) {
        self.ranges.remove(&start);
    }

    /// Whether `addr` lies inside a range (`start <= addr < start + len`).
    pub fn contains(&self, addr: u64) -> bool {
        self.ranges
            .range(..=addr)
            .next_back()
            .is_some_and(|(&s, &n)| addr - s < n)
    }
}

static OWNED: Mutex<OwnedRanges> = Mutex::new(OwnedRanges {
    ranges: BTreeMap::new(),
});
/// Counts the table's changes (made under its lock, before the change), for `OwnedView`.
static CHANGES: AtomicU64 = AtomicU64::new(0);

fn owned() -> std::sync::MutexGuard<'static, OwnedRanges> {
    OWNED.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn note_alloc(start: u64, len: usize) {
    let mut o = owned();
    CHANGES.fetch_add(1, Ordering::AcqRel);
    o.insert(start, len.max(1) as u64);
}

pub(crate) fn note_free(start: u64) {
    let mut o = owned();
    CHANGES.fetch_add(1, Ordering::AcqRel);
    o.remove(start);
}

/// `is_owned` asked many times in a row (a pointer table's 10,000 answers): a copy of the
/// ranges, taken again only when they changed since, so that each question costs an atomic
/// load and a binary search, not the lock.
#[derive(Debug, Default)]
pub struct OwnedView {
    /// The change count the copy was taken at (`None`: none taken yet).
    taken_at: Option<u64>,
    ranges: Vec<(u64, u64)>,
}

impl OwnedView {
    /// Whether `addr` lies inside a live allocation of this crate's, as `is_owned`.
    pub fn contains(&mut self, addr: u64) -> bool {
        let now = CHANGES.load(Ordering::Acquire);
        if self.taken_at != Some(now) {
            let o = owned();
            // Counted under the lock before each change: the copy is of the count read here.
            self.taken_at = Some(CHANGES.load(Ordering::Acquire));
            self.ranges.clear();
            self.ranges.extend(o.ranges.iter().map(|(&s, &n)| (s, n)));
        }
        let at = self.ranges.partition_point(|&(s, _)| s <= addr);
        at.checked_sub(1)
            .and_then(|k| self.ranges.get(k))
            .is_some_and(|&(s, n)| addr - s < n)
    }
}

/// Whether `addr` lies inside an allocation of this crate's that is still live.
pub fn is_owned(addr: u64) -> bool {
    owned().contains(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: the range's end taken as inside, an address below the first range or between
    // two taken as inside, a freed range still held, an empty range held.
    #[test]
    fn an_address_is_owned_only_inside_a_live_range() {
        let mut o = OwnedRanges::default();
        o.insert(0x1000, 0x100);
        o.insert(0x3000, 8);
        o.insert(0x5000, 0);
        assert!(o.contains(0x1000) && o.contains(0x10ff) && o.contains(0x3007));
        assert!(!o.contains(0x0fff) && !o.contains(0x1100) && !o.contains(0x2000));
        assert!(!o.contains(0x3008) && !o.contains(0x5000) && !o.contains(u64::MAX));
        o.remove(0x1000);
        assert!(!o.contains(0x1000) && o.contains(0x3000));
    }

    // Catches: a view that keeps answering from a copy taken before an allocation or a free
    // (the walk would take kreplay's own scratch for the application's memory, or miss one).
    #[test]
    fn a_view_follows_every_change_of_the_table() {
        let base = u64::MAX - 0x20_0000;
        let mut view = OwnedView::default();
        assert!(!view.contains(base + 5));
        note_alloc(base, 0x100);
        assert!(view.contains(base + 5) && !view.contains(base + 0x100));
        assert!(view.contains(base) && !view.contains(base - 1));
        note_free(base);
        assert!(!view.contains(base + 5));
    }

    #[test]
    fn the_crates_table_follows_its_notes() {
        // An address range no driver hands out (the table is process-wide: others may add).
        let base = u64::MAX - 0x10_0000;
        assert!(!is_owned(base + 5));
        note_alloc(base, 0x100);
        assert!(is_owned(base + 5) && !is_owned(base + 0x100));
        note_free(base);
        assert!(!is_owned(base + 5));
    }
}
