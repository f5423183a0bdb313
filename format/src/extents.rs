//! Region extents (REGION_EXTENTS, since 1.4): which bytes of a region the capture holds.
//! A capture made by touched pages holds only the pages the kernel read or wrote; every other
//! byte is *absent*: its value is unknown, stored as zero inside a chunk that also holds
//! present bytes, and not stored at all in a chunk that holds none. The rules and the
//! questions readers ask of extents are pure functions here, so they are tested once.

use serde::{Deserialize, Serialize};

use crate::events::{MemoryKind, Region};

/// The smallest extent page: the granularity a recorder of touched pages may use (the GPU's
/// smallest page; a smaller one would cost metadata for nothing).
pub const MIN_EXTENT_PAGE: u32 = 4096;

/// The byte ranges of one region that the capture holds (the REGION_EXTENTS event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionExtents {
    pub region_id: u32,
    /// The granularity of the extents (a power of two, `MIN_EXTENT_PAGE` to the region's
    /// chunk size): every offset and length is a multiple of it, except that the last
    /// extent may end at the region's end.
    pub page_size: u32,
    /// (offset, length) of each present range, sorted, non-overlapping, non-adjacent.
    pub present: Vec<(u64, u64)>,
}

impl RegionExtents {
    /// Bytes the capture holds of the region.
    pub fn present_bytes(&self) -> u64 {
        self.present.iter().map(|e| e.1).sum()
    }
}

/// What is wrong with `e` as the extents of region `r`, if anything.
pub fn extents_problem(r: &Region, e: &RegionExtents) -> Option<String> {
    let id = r.region_id;
    if r.kind == MemoryKind::CudaArray {
        return Some(format!(
            "region {id} is a CUDA array: its texels are captured whole, it cannot have extents"
        ));
    }
    let page = u64::from(e.page_size);
    if !e.page_size.is_power_of_two() || e.page_size < MIN_EXTENT_PAGE || page > r.chunk_size {
        return Some(format!(
            "region {id} has extents of page size {} (a power of two from {MIN_EXTENT_PAGE} to \
             its chunk size {} allowed)",
            e.page_size, r.chunk_size
        ));
    }
    let mut previous_end: Option<u64> = None;
    for (i, &(offset, len)) in e.present.iter().enumerate() {
        let Some(end) = offset.checked_add(len).filter(|&end| end <= r.size) else {
            return Some(format!(
                "extent {i} of region {id} ({len} bytes at offset {offset}) lies outside the \
                 region ({} bytes)",
                r.size
            ));
        };
        if len == 0 {
            return Some(format!("extent {i} of region {id} is empty"));
        }
        if !offset.is_multiple_of(page) || (!len.is_multiple_of(page) && end != r.size) {
            return Some(format!(
                "extent {i} of region {id} ({len} bytes at offset {offset}) is not aligned to \
                 its page size {page}"
            ));
        }
        if previous_end.is_some_and(|p| offset <= p) {
            return Some(format!(
                "extent {i} of region {id} (at offset {offset}) overlaps, touches or precedes \
                 the extent before it (extents are sorted and merged)"
            ));
        }
        previous_end = Some(end);
    }
    None
}

/// Whether every byte of `[offset, offset + len)` is present (`present` as the rules accept
/// it). An empty range is present.
pub fn is_present(present: &[(u64, u64)], offset: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    let end = offset.saturating_add(len);
    // The one extent that could hold `offset`: the last one starting at or before it.
    let i = present.partition_point(|e| e.0 <= offset);
    i > 0 && {
        let (o, l) = present[i - 1];
        o.saturating_add(l) >= end
    }
}

/// Whether `[offset, offset + len)` holds at least one present byte.
pub fn holds_present(present: &[(u64, u64)], offset: u64, len: u64) -> bool {
    // An empty range holds nothing, even inside an extent.
    if len == 0 {
        return false;
    }
    let end = offset.saturating_add(len);
    let i = present.partition_point(|e| e.0.saturating_add(e.1) <= offset);
    present.get(i).is_some_and(|&(o, _)| o < end)
}

/// The absent ranges (offset, length) inside `[offset, offset + len)`, in order: what a
/// stored chunk there holds as zeros that mean nothing.
pub fn absent_ranges(present: &[(u64, u64)], offset: u64, len: u64) -> Vec<(u64, u64)> {
    let end = offset.saturating_add(len);
    let mut out = Vec::new();
    let mut at = offset;
    let first = present.partition_point(|e| e.0.saturating_add(e.1) <= offset);
    for &(o, l) in &present[first..] {
        if o >= end {
            break;
        }
        if o > at {
            out.push((at, o - at));
        }
        at = at.max(o.saturating_add(l));
    }
    if at < end {
        out.push((at, end - at));
    }
    out
}

/// The present ranges (offset, length) inside `[offset, offset + len)`, in order: the bytes
/// of a stored chunk there that hold the application's values (what a replay restores and
/// verifies; the rest of the chunk is absent).
pub fn present_ranges(present: &[(u64, u64)], offset: u64, len: u64) -> Vec<(u64, u64)> {
    let end = offset.saturating_add(len);
    let first = present.partition_point(|e| e.0.saturating_add(e.1) <= offset);
    present[first..]
        .iter()
        .take_while(|e| e.0 < end)
        .map(|&(o, l)| {
            let start = o.max(offset);
            (start, o.saturating_add(l).min(end) - start)
        })
        .filter(|e| e.1 > 0)
        .collect()
}

/// The present ranges of a region of `size` bytes that holds the pages `pages` (page indices
/// of `page` bytes, sorted and without repeats; those past the region are left out): merged
/// as the rules want them, the last one ending at the region's end.
pub fn extents_of_pages(pages: &[u64], page: u64, size: u64) -> Vec<(u64, u64)> {
    debug_assert!(
        pages.windows(2).all(|w| w[0] < w[1]),
        "pages sorted, no repeats"
    );
    let page = page.max(1);
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &p in pages {
        let Some(o) = p.checked_mul(page).filter(|&o| o < size) else {
            continue;
        };
        let end = o.saturating_add(page).min(size);
        match out.last_mut() {
            Some(last) if last.0 + last.1 == o => last.1 = end - last.0,
            Some(last) if last.0 + last.1 > o => {}
            _ => out.push((o, end - o)),
        }
    }
    out
}

/// The pages (of `page` bytes, relative to `offset`, ascending) of `[offset, offset + len)`
/// that hold a byte of `ranges` (offset, length; sorted, merged): what a part of a region holds
/// by pages, given what is held of the whole (the inverse of `extents_of_pages` for the part).
pub fn pages_of_ranges(ranges: &[(u64, u64)], offset: u64, len: u64, page: u64) -> Vec<u64> {
    let page = page.max(1);
    let mut out: Vec<u64> = Vec::new();
    for (o, l) in present_ranges(ranges, offset, len) {
        let lo = o - offset;
        for p in lo / page..=(lo + l - 1) / page {
            if out.last() != Some(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Sets the absent bytes of `data`, a region's bytes from `offset`, to zero: how a capture
/// stores them (the writer refuses anything else).
pub fn zero_absent(present: &[(u64, u64)], offset: u64, data: &mut [u8]) {
    for (o, l) in absent_ranges(present, offset, data.len() as u64) {
        let at = (o - offset) as usize;
        data[at..at + l as usize].fill(0);
    }
}

/// Offsets of the region's chunks that hold a present byte: those the capture stores.
pub fn stored_chunk_offsets(r: &Region, present: &[(u64, u64)]) -> Vec<u64> {
    let cs = r.chunk_size.max(1);
    let mut out = Vec::new();
    for &(o, l) in present {
        let mut c = o - o % cs;
        while c < o.saturating_add(l) && c < r.size {
            if out.last() != Some(&c) {
                out.push(c);
            }
            c += cs;
        }
    }
    out
}

/// How many pre-dispatch chunks the region needs: each chunk, or with extents each chunk
/// that holds a present byte.
pub fn needed_pre_chunks(r: &Region, extents: Option<&RegionExtents>) -> u64 {
    match extents {
        None => r.size.div_ceil(r.chunk_size.max(1)),
        Some(e) => stored_chunk_offsets(r, &e.present).len() as u64,
    }
}

#[cfg(test)]
mod tests {
    // Catches: a part's pages counted from the whole's start, a range ending inside a page
    // leaving that page out, a page holding two ranges given twice, pages past the part.
    #[test]
    fn a_parts_pages_are_those_holding_a_held_byte() {
        let held = [(10u64, 10u64), (5 * 4096, 4096), (9 * 4096 - 1, 2)];
        assert_eq!(pages_of_ranges(&held, 0, 8 * 4096, 4096), vec![0, 5]);
        assert_eq!(pages_of_ranges(&held, 4 * 4096, 4 * 4096, 4096), vec![1]);
        assert_eq!(
            pages_of_ranges(&held, 4096 + 100, 4096, 4096),
            Vec::<u64>::new()
        );
        assert_eq!(pages_of_ranges(&held, 5 * 4096 - 100, 4096, 4096), vec![0]);
        assert_eq!(pages_of_ranges(&held, 8 * 4096, 2 * 4096, 4096), vec![0, 1]);
        assert_eq!(pages_of_ranges(&[], 0, 4096, 4096), Vec::<u64>::new());
    }

    use super::*;
    use crate::events::RegionRole;
    use proptest::prelude::*;

    const PAGE: u64 = 4096;

    fn region(size: u64, chunk_size: u64) -> Region {
        Region {
            region_id: 3,
            address: 0x7000_0000,
            size,
            kind: MemoryKind::Device,
            role: RegionRole::Argument,
            chunk_size,
        }
    }

    fn ext(present: Vec<(u64, u64)>) -> RegionExtents {
        RegionExtents {
            region_id: 3,
            page_size: PAGE as u32,
            present,
        }
    }

    #[test]
    fn the_rules_accept_merged_aligned_extents_and_a_short_last_page() {
        let r = region(10 * PAGE + 100, 4 * PAGE);
        assert_eq!(extents_problem(&r, &ext(vec![])), None);
        let e = ext(vec![(0, PAGE), (2 * PAGE, 3 * PAGE), (10 * PAGE, 100)]);
        assert_eq!(extents_problem(&r, &e), None);
        assert_eq!(e.present_bytes(), 4 * PAGE + 100);
    }

    #[test]
    fn the_rules_refuse_what_a_reader_could_not_trust() {
        let r = region(8 * PAGE, 4 * PAGE);
        let refused = |e: RegionExtents, says: &str| {
            let p = extents_problem(&r, &e).expect("refused");
            assert!(p.contains(says), "{p}");
        };
        refused(ext(vec![(7 * PAGE, 2 * PAGE)]), "outside");
        refused(ext(vec![(u64::MAX - 1, 2)]), "outside");
        refused(ext(vec![(0, 2 * PAGE), (PAGE, 2 * PAGE)]), "overlaps");
        refused(ext(vec![(0, PAGE), (PAGE, PAGE)]), "touches");
        refused(ext(vec![(2 * PAGE, PAGE), (0, PAGE)]), "precedes");
        refused(ext(vec![(100, PAGE)]), "aligned");
        refused(ext(vec![(0, 100)]), "aligned");
        refused(ext(vec![(PAGE, 0)]), "empty");
        for page_size in [0, 3, 2048, 5000, 8 * PAGE as u32] {
            let mut e = ext(vec![]);
            e.page_size = page_size;
            refused(e, "page size");
        }
        let mut array = region(8 * PAGE, 4 * PAGE);
        array.kind = MemoryKind::CudaArray;
        assert!(extents_problem(&array, &ext(vec![]))
            .expect("refused")
            .contains("CUDA array"));
    }

    #[test]
    fn only_chunks_that_hold_a_present_byte_are_stored() {
        let r = region(10 * PAGE, 4 * PAGE);
        let e = ext(vec![(PAGE, PAGE), (3 * PAGE, 2 * PAGE)]);
        assert_eq!(stored_chunk_offsets(&r, &e.present), vec![0, 4 * PAGE]);
        assert_eq!(needed_pre_chunks(&r, Some(&e)), 2);
        assert_eq!(needed_pre_chunks(&r, None), 3);
        assert_eq!(needed_pre_chunks(&r, Some(&ext(vec![]))), 0);
    }

    /// A bitmap of the present bytes of a small region: the naive model.
    fn model(size: u64, present: &[(u64, u64)]) -> Vec<bool> {
        let mut m = vec![false; size as usize];
        for &(o, l) in present {
            m[o as usize..(o + l) as usize].fill(true);
        }
        m
    }

    /// Valid extents over `pages` pages of 4 KiB, from a bitmap of pages.
    fn extents_from(pages: &[bool]) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (i, _) in pages.iter().enumerate().filter(|p| *p.1) {
            let o = i as u64 * PAGE;
            match out.last_mut() {
                Some(last) if last.0 + last.1 == o => last.1 += PAGE,
                _ => out.push((o, PAGE)),
            }
        }
        out
    }

    // Catches: an empty range inside an extent said to hold a present byte (found by the
    // property below, pages [absent, absent, present], offset 8193, length 0).
    #[test]
    fn an_empty_range_holds_nothing_and_is_wholly_present() {
        let present = [(2 * PAGE, PAGE)];
        assert!(!holds_present(&present, 2 * PAGE + 1, 0));
        assert!(is_present(&present, 2 * PAGE + 1, 0));
        assert!(absent_ranges(&present, 2 * PAGE + 1, 0).is_empty());
        assert!(holds_present(&present, 2 * PAGE + 1, 1));
    }

    /// The bytes `ranges` cover, as a bitmap of `len` bytes, once they are checked to be
    /// sorted, merged and non-empty (what every range helper promises).
    fn painted(ranges: &[(u64, u64)], len: usize) -> Result<Vec<bool>, TestCaseError> {
        for w in ranges.windows(2) {
            prop_assert!(w[0].0 + w[0].1 < w[1].0, "merged and sorted: {:?}", ranges);
        }
        let mut bits = vec![false; len];
        for &(o, l) in ranges {
            prop_assert!(l > 0);
            bits[o as usize..(o + l) as usize].fill(true);
        }
        Ok(bits)
    }

    proptest! {
        #[test]
        fn the_helpers_agree_with_a_bitmap(
            pages in proptest::collection::vec(any::<bool>(), 1..24),
            a in 0u64..100_000,
            n in 0u64..40_000,
        ) {
            let size = pages.len() as u64 * PAGE;
            let present = extents_from(&pages);
            let r = region(size, 4 * PAGE);
            prop_assert_eq!(extents_problem(&r, &ext(present.clone())), None);
            let m = model(size, &present);
            let offset = a.min(size);
            let len = n.min(size - offset);
            let bytes = &m[offset as usize..(offset + len) as usize];
            prop_assert_eq!(is_present(&present, offset, len), bytes.iter().all(|&b| b));
            prop_assert_eq!(holds_present(&present, offset, len), bytes.iter().any(|&b| b));
            let absent = painted(&absent_ranges(&present, offset, len), m.len())?;
            let held = painted(&present_ranges(&present, offset, len), m.len())?;
            for i in 0..m.len() {
                let inside = (i as u64) >= offset && (i as u64) < offset + len;
                prop_assert_eq!(absent[i], inside && !m[i], "byte {}", i);
                prop_assert_eq!(held[i], inside && m[i], "byte {}", i);
            }
            let stored = stored_chunk_offsets(&r, &present);
            let chunk = 4 * PAGE;
            let expected: Vec<u64> = (0..size.div_ceil(chunk))
                .map(|c| c * chunk)
                .filter(|&c| m[c as usize..(c + chunk).min(size) as usize].iter().any(|&b| b))
                .collect();
            prop_assert_eq!(stored, expected);
        }
    }

    // Catches: pages not merged into runs (the rules refuse adjacent extents), a last page not
    // cut at the region's end, a page past the region kept, and zeroing that touches present
    // bytes or leaves an absent one.
    #[test]
    fn pages_become_merged_extents_and_absent_bytes_zeros() {
        let size = 10 * PAGE + 100;
        assert_eq!(
            extents_of_pages(&[0, 1, 3, 10, 11], PAGE, size),
            vec![(0, 2 * PAGE), (3 * PAGE, PAGE), (10 * PAGE, 100)]
        );
        assert_eq!(extents_of_pages(&[], PAGE, size), vec![]);
        assert_eq!(extents_of_pages(&[u64::MAX], PAGE, size), vec![]);
        let r = region(size, 4 * PAGE);
        proptest!(|(mut pages in proptest::collection::vec(0u64..14, 0..14))| {
            pages.sort_unstable();
            pages.dedup();
            let present = extents_of_pages(&pages, PAGE, size);
            prop_assert_eq!(extents_problem(&r, &ext(present.clone())), None);
            for p in 0..size.div_ceil(PAGE) {
                let len = PAGE.min(size - p * PAGE);
                prop_assert_eq!(is_present(&present, p * PAGE, len), pages.contains(&p));
            }
            let mut data = vec![0xa5u8; (6 * PAGE) as usize];
            let offset = 4 * PAGE;
            zero_absent(&present, offset, &mut data);
            for (i, &b) in data.iter().enumerate() {
                let at = offset + i as u64;
                let here = at < size && is_present(&present, at, 1);
                prop_assert_eq!(b, if here { 0xa5 } else { 0 }, "byte {}", at);
            }
        });
    }
}
