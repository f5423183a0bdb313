//! Running a capture at addresses other than the recorded ones: every known pointer (argument
//! pointer words, pointer slots inside captured memory) is rewritten to the new location.

use kreplay_format::Capture;

/// Old range → new base.
#[derive(Debug, Clone, Default)]
pub struct Relocation {
    /// (old base, size, new base), sorted by old base.
    moves: Vec<(u64, u64, u64)>,
}

impl Relocation {
    pub fn new(mut moves: Vec<(u64, u64, u64)>) -> Relocation {
        moves.sort_unstable();
        Relocation { moves }
    }

    /// Where an old address lives now; `None` for addresses outside every moved region.
    pub fn translate(&self, old: u64) -> Option<u64> {
        let i = self.moves.partition_point(|m| m.0 <= old);
        let &(base, size, new) = self.moves.get(i.checked_sub(1)?)?;
        (old < base + size).then(|| new + (old - base))
    }

    /// Rewrites the 8-byte words at `offsets` (relative to `bytes`) that hold moved addresses.
    pub fn patch_words(&self, bytes: &mut [u8], offsets: impl Iterator<Item = u64>) {
        for off in offsets {
            let Some(word) = usize::try_from(off)
                .ok()
                .and_then(|o| bytes.get_mut(o..o.checked_add(8)?))
            else {
                continue;
            };
            let v = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
            if let Some(n) = self.translate(v) {
                word.copy_from_slice(&n.to_le_bytes());
            }
        }
    }

    /// Patches the pointer slots of `region_id` that fall into a buffer holding the region's
    /// bytes from `start`.
    pub fn patch_region_window(
        &self,
        cap: &Capture<'_>,
        region_id: u32,
        start: u64,
        buf: &mut [u8],
    ) {
        let end = start + buf.len() as u64;
        let lo = cap
            .pointer_slots
            .partition_point(|s| *s < (region_id, start));
        let slots = cap.pointer_slots[lo..]
            .iter()
            .take_while(|s| s.0 == region_id && s.1 + 8 <= end)
            .map(|s| s.1 - start);
        self.patch_words(buf, slots);
    }
}

/// The offset of the first parameter that is a TMA tensor map (a `CUtensorMap`: 128 bytes at
/// a 64-byte-aligned offset), in a layout of (offset, size) pairs.
pub fn tensor_map_param(layout: impl IntoIterator<Item = (u32, u32)>) -> Option<u32> {
    layout
        .into_iter()
        .find(|&(offset, size)| size == 128 && offset % 64 == 0)
        .map(|(offset, _)| offset)
}

/// Why a capture cannot be relocated exactly, if it cannot.
pub fn blocker(cap: &Capture<'_>) -> Option<String> {
    // A CUtensorMap's address fields are encoded.
    let offset = tensor_map_param(cap.dispatch.params.iter().map(|p| (p.offset, p.size)))?;
    Some(format!(
        "parameter at offset {offset} is 128 bytes, 64-byte aligned: a TMA tensor map, whose encoded addresses cannot be rewritten"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_inside_moved_ranges_only() {
        let r = Relocation::new(vec![(0x2000, 0x100, 0x9000), (0x1000, 0x10, 0x5000)]);
        assert_eq!(r.translate(0x1000), Some(0x5000));
        assert_eq!(r.translate(0x100f), Some(0x500f));
        assert_eq!(r.translate(0x1010), None);
        assert_eq!(r.translate(0x20ff), Some(0x90ff));
        assert_eq!(r.translate(0xfff), None);
        assert_eq!(r.translate(0x2100), None);
    }

    #[test]
    fn patches_words() {
        let r = Relocation::new(vec![(0x1000, 0x100, 0x7000)]);
        let mut b = [0u8; 24];
        b[0..8].copy_from_slice(&0x1010u64.to_le_bytes());
        b[8..16].copy_from_slice(&0x3000u64.to_le_bytes());
        b[16..24].copy_from_slice(&0x10ffu64.to_le_bytes());
        r.patch_words(&mut b, [0u64, 8, 16, 20].into_iter());
        assert_eq!(u64::from_le_bytes(b[0..8].try_into().unwrap()), 0x7010);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 0x3000);
        assert_eq!(u64::from_le_bytes(b[16..24].try_into().unwrap()), 0x70ff);
    }
}
