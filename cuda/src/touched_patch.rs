//! The patch module of `record --memory touched` (issue 35): the Compute Sanitizer device
//! callbacks of `patch/touched_patch.cu`, shipped as the fatbin `scripts/gen-patch.sh` makes
//! (SASS for sm_75 to sm_120, PTX for newer), which mark the 4 KiB pages of the captured
//! regions that the one instrumented launch reads and writes; and the host side of their
//! state: the region table (`plan`), and the bitmaps read back into page lists (`pages_of`),
//! pure functions tested here. `TouchedState` and `TouchedRegion` repeat
//! `patch/touched_state.h`; the tests check the layout against the header's (measured with a C
//! compiler). The recorder's `touched_run` loads it and runs the patched kernel.

/// The patch module (`sanitizerAddPatchesFromFile` takes a path: the recorder writes it to a
/// file of its own first).
pub const PATCH_FATBIN: &[u8] = include_bytes!("../patch/touched_patch.fatbin");

/// Each instruction kind the module hooks, and its device callback.
pub const PATCHES: [(u32, &str); 5] = [
    (
        crate::sanitizer::instruction::GLOBAL_MEMORY_ACCESS,
        "KreplayTouchedGlobal",
    ),
    (
        crate::sanitizer::instruction::MEMCPY_ASYNC,
        "KreplayTouchedMemcpyAsync",
    ),
    (
        crate::sanitizer::instruction::BULK_COPY_GLOBAL_TO_SHARED,
        "KreplayTouchedBulkG2S",
    ),
    (
        crate::sanitizer::instruction::BULK_COPY_SHARED_TO_GLOBAL,
        "KreplayTouchedBulkS2G",
    ),
    (
        crate::sanitizer::instruction::BULK_REDUCTION_SHARED_TO_GLOBAL,
        "KreplayTouchedBulkRedS2G",
    ),
];

/// The callbacks' page: the format's smallest extent page.
pub const PAGE_SHIFT: u32 = 12;
pub const PAGE: u64 = 1 << PAGE_SHIFT;

/// `struct TouchedRegion`: one captured region, sorted by base; `first_page` indexes the
/// bitmaps.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TouchedRegion {
    pub base: u64,
    pub size: u64,
    pub first_page: u64,
}

/// `struct TouchedState`: what the callbacks get as `userdata` (device addresses as u64).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TouchedState {
    pub on: u32,
    pub nregions: u32,
    pub regions: u64,
    pub read_bits: u64,
    pub write_bits: u64,
    /// Accesses in no region, and the first one's address (the walk missed memory the
    /// kernel reads: a capture by touched pages of it would be incomplete).
    pub outside: u64,
    pub first_outside: u64,
}

/// The region table the device callbacks search, and where each captured region lies in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Disjoint spans sorted by base, each with its first page in the bitmaps.
    pub table: Vec<TouchedRegion>,
    /// How many pages the bitmaps hold.
    pub pages: u64,
    /// For each region given (in its order): its table entry and its offset inside it; none
    /// for an empty region.
    pub placed: Vec<Option<(usize, u64)>>,
}

/// The region table for `regions` (base, size; any order). Overlapping regions (a VMM
/// reservation and a mapping inside it, two views of one allocation) share one entry
/// spanning both, since the device's binary search wants the entries disjoint; regions that
/// only touch stay apart. Empty regions are left out.
pub fn plan(regions: &[(u64, u64)]) -> Result<Plan, String> {
    let mut order: Vec<usize> = (0..regions.len()).filter(|&i| regions[i].1 > 0).collect();
    order.sort_unstable_by_key(|&i| regions[i]);
    let mut placed = vec![None; regions.len()];
    // (base, end) of each merged span, then the regions it holds.
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for &i in &order {
        let (base, size) = regions[i];
        let end = base.checked_add(size).ok_or_else(|| {
            format!("the region at {base:#x} ({size} bytes) wraps the address space")
        })?;
        let last = spans.len().wrapping_sub(1);
        match spans.last_mut() {
            Some((b, e)) if base < *e => {
                *e = (*e).max(end);
                placed[i] = Some((last, base - *b));
            }
            _ => {
                spans.push((base, end));
                placed[i] = Some((spans.len() - 1, 0));
            }
        }
    }
    let mut table = Vec::with_capacity(spans.len());
    let mut pages = 0u64;
    for (base, end) in spans {
        let size = end - base;
        table.push(TouchedRegion {
            base,
            size,
            first_page: pages,
        });
        pages = pages
            .checked_add(size.div_ceil(PAGE))
            .ok_or_else(|| "more pages than a bitmap can index".to_string())?;
    }
    Ok(Plan {
        table,
        pages,
        placed,
    })
}

fn bit(bits: &[u32], g: u64) -> bool {
    usize::try_from(g >> 5)
        .ok()
        .and_then(|w| bits.get(w))
        .is_some_and(|w| w & (1 << (g & 31)) != 0)
}

/// The pages of `r` (region-relative indices, ascending) set in `bits`, a bitmap of one bit
/// per page (bit `p & 31` of word `p >> 5`); pages past the bitmap are taken as not set.
pub fn pages_of(bits: &[u32], r: &TouchedRegion) -> Vec<u64> {
    (0..r.size.div_ceil(PAGE))
        .filter(|&p| bit(bits, r.first_page + p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    // Catches: a field out of place in the state the device callbacks read (figures: gcc's
    // `sizeof`/`offsetof` of patch/touched_state.h, x86-64).
    #[test]
    fn the_state_is_laid_out_as_the_header_says() {
        assert_eq!(size_of::<TouchedRegion>(), 24);
        assert_eq!(offset_of!(TouchedRegion, first_page), 16);
        assert_eq!(size_of::<TouchedState>(), 48);
        assert_eq!(offset_of!(TouchedState, nregions), 4);
        assert_eq!(offset_of!(TouchedState, regions), 8);
        assert_eq!(offset_of!(TouchedState, read_bits), 16);
        assert_eq!(offset_of!(TouchedState, write_bits), 24);
        assert_eq!(offset_of!(TouchedState, outside), 32);
        assert_eq!(offset_of!(TouchedState, first_outside), 40);
    }

    #[test]
    fn the_module_ships_and_names_the_callbacks_it_defines() {
        // A fatbin's magic (0xBA55ED50, little-endian).
        assert_eq!(&PATCH_FATBIN[..4], &[0x50, 0xed, 0x55, 0xba]);
        let source = include_str!("../patch/touched_patch.cu");
        for (_, name) in PATCHES {
            assert!(
                source.contains(&format!("\n{name}(")),
                "{name} is not defined in touched_patch.cu"
            );
        }
    }

    // Catches: touched_patch.cu or its header edited and the shipped fatbin not rebuilt from it
    // (scripts/gen-patch.sh writes the sources' hashes beside the fatbin).
    #[test]
    fn the_fatbin_was_built_from_the_sources_beside_it() {
        use sha2::{Digest, Sha256};
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("patch");
        let listed = std::fs::read_to_string(dir.join("touched_patch.sources"))
            .expect("patch/touched_patch.sources (scripts/gen-patch.sh writes it)");
        let mut names = Vec::new();
        for line in listed.lines().filter(|l| !l.trim().is_empty()) {
            let (hash, name) = line
                .split_once("  ")
                .expect("sha256sum's `HASH  NAME` lines");
            let bytes = std::fs::read(dir.join(name)).expect("a listed source");
            let got: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(
                got, hash,
                "patch/{name} changed since touched_patch.fatbin was built: run scripts/gen-patch.sh"
            );
            names.push(name.to_string());
        }
        assert_eq!(names, ["touched_patch.cu", "touched_state.h"]);
    }

    // Catches: regions searched unsorted on the device, bitmaps sharing a page between two
    // regions, a page of one region read as another's, an overlap let through.
    #[test]
    fn regions_get_their_own_pages_and_the_bits_come_back_as_pages() {
        let p = plan(&[
            (0x9000_0000, 3 * PAGE + 1),
            (0x1000_0000, PAGE),
            (0x5000, 0),
        ])
        .expect("disjoint");
        let (table, pages) = (p.table, p.pages);
        assert_eq!(p.placed, vec![Some((1, 0)), Some((0, 0)), None]);
        assert_eq!(
            table,
            vec![
                TouchedRegion {
                    base: 0x1000_0000,
                    size: PAGE,
                    first_page: 0
                },
                TouchedRegion {
                    base: 0x9000_0000,
                    size: 3 * PAGE + 1,
                    first_page: 1
                },
            ]
        );
        assert_eq!(pages, 5);
        // Pages 0 (region 0) and 1, 4 (region 1's first and last).
        let bits = [0b10011u32];
        assert_eq!(pages_of(&bits, &table[0]), vec![0]);
        assert_eq!(pages_of(&bits, &table[1]), vec![0, 3]);
        assert_eq!(pages_of(&[], &table[1]), Vec::<u64>::new());
        let apart = plan(&[(0x1000, PAGE), (0x1000 + PAGE, PAGE)]).expect("apart");
        assert_eq!(apart.table.len(), 2, "touching is apart");
        proptest::proptest!(|(sizes in proptest::collection::vec(1u64..40_000, 1..20), set in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..8))| {
            let regions: Vec<(u64, u64)> = sizes.iter().enumerate().map(|(i, &s)| ((i as u64) << 32, s)).collect();
            let Plan { table, pages, .. } = plan(&regions).expect("disjoint");
            proptest::prop_assert_eq!(pages, sizes.iter().map(|s| s.div_ceil(PAGE)).sum::<u64>());
            let mut back = 0u64;
            for r in &table {
                let got = pages_of(&set, r);
                proptest::prop_assert!(got.iter().all(|&p| p < r.size.div_ceil(PAGE)));
                back += got.len() as u64;
            }
            let within: u64 = (0..pages).filter(|&g| set.get((g >> 5) as usize).is_some_and(|w| w & (1 << (g & 31)) != 0)).count() as u64;
            proptest::prop_assert_eq!(back, within);
        });
    }

    // Catches: overlapping regions refused (a VMM reservation and its mapping: the capture
    // fell back to whole regions), entries left overlapping (the device search would miss
    // pages), a region placed at the wrong offset of its entry.
    #[test]
    fn overlapping_regions_share_one_entry_at_their_offsets() {
        let base = 0x3_0340_0000u64;
        let p = plan(&[
            (base, 80 << 20),
            (base + (60 << 20), 40 << 20),
            (0x1000, PAGE),
        ])
        .expect("merged");
        assert_eq!(p.table.len(), 2);
        assert_eq!(p.table[1].base, base);
        assert_eq!(p.table[1].size, 100 << 20);
        assert_eq!(p.placed[0], Some((1, 0)));
        assert_eq!(p.placed[1], Some((1, 60 << 20)));
        assert_eq!(p.placed[2], Some((0, 0)));
        assert_eq!(p.pages, 1 + (100 << 20) / PAGE);
        assert!(plan(&[(u64::MAX - 10, 100)]).is_err());
    }
}
