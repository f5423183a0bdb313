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

/// The region table for `regions` (base, size; any order), sorted by base, with each region's
/// first page in the bitmaps; and how many pages the bitmaps hold. Empty regions are left
/// out; overlapping ones are refused (the device search wants them disjoint).
pub fn plan(regions: &[(u64, u64)]) -> Result<(Vec<TouchedRegion>, u64), String> {
    let mut sorted: Vec<(u64, u64)> = regions.iter().copied().filter(|r| r.1 > 0).collect();
    sorted.sort_unstable();
    let mut out = Vec::with_capacity(sorted.len());
    let mut pages = 0u64;
    for (i, &(base, size)) in sorted.iter().enumerate() {
        if let Some(&(b, s)) = i.checked_sub(1).and_then(|j| sorted.get(j)) {
            if b.saturating_add(s) > base {
                return Err(format!(
                    "regions at {b:#x} ({s} bytes) and {base:#x} overlap: the patch's search wants them apart"
                ));
            }
        }
        out.push(TouchedRegion {
            base,
            size,
            first_page: pages,
        });
        pages = pages
            .checked_add(size.div_ceil(PAGE))
            .ok_or_else(|| "more pages than a bitmap can index".to_string())?;
    }
    Ok((out, pages))
}

/// The pages of `r` (region-relative indices, ascending) set in `bits`, a bitmap of one bit
/// per page (bit `p & 31` of word `p >> 5`); pages past the bitmap are taken as not set.
pub fn pages_of(bits: &[u32], r: &TouchedRegion) -> Vec<u64> {
    let n = r.size.div_ceil(PAGE);
    (0..n)
        .filter(|&p| {
            let g = r.first_page + p;
            usize::try_from(g >> 5)
                .ok()
                .and_then(|w| bits.get(w))
                .is_some_and(|w| w & (1 << (g & 31)) != 0)
        })
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

    // Catches: regions searched unsorted on the device, bitmaps sharing a page between two
    // regions, a page of one region read as another's, an overlap let through.
    #[test]
    fn regions_get_their_own_pages_and_the_bits_come_back_as_pages() {
        let (table, pages) = plan(&[
            (0x9000_0000, 3 * PAGE + 1),
            (0x1000_0000, PAGE),
            (0x5000, 0),
        ])
        .expect("disjoint");
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
        assert!(plan(&[(0x1000, 2 * PAGE), (0x1000 + PAGE, PAGE)]).is_err());
        assert!(
            plan(&[(0x1000, PAGE), (0x1000 + PAGE, PAGE)]).is_ok(),
            "touching is apart"
        );
        proptest::proptest!(|(sizes in proptest::collection::vec(1u64..40_000, 1..20), set in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..8))| {
            let regions: Vec<(u64, u64)> = sizes.iter().enumerate().map(|(i, &s)| ((i as u64) << 32, s)).collect();
            let (table, pages) = plan(&regions).expect("disjoint");
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
}
