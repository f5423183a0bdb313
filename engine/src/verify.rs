//! Comparing replayed memory with the recorded post-dispatch state.

use serde::Serialize;

/// One mismatching byte range, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct Mismatch {
    pub region_id: u32,
    /// Offset inside the region of the first differing byte.
    pub offset: u64,
    pub expected: u8,
    pub found: u8,
}

/// The verification part of a play report (`--json` field `verify`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyOutcome {
    pub checked: bool,
    /// What the output was compared with: `recorded` (the application's), or nothing
    /// (`dropped`, `redacted` by `kreplay pack`: only determinism is checked).
    pub reference: kreplay_format::Reference,
    /// Every region matched the recorded post-dispatch state after the first pass (without
    /// a reference: every byte the kernel must not write stayed as it was).
    pub matched: bool,
    /// Every pass produced the same bytes in the write set.
    pub deterministic: bool,
    pub mismatched_bytes: u64,
    /// First differing bytes (at most `MAX_REPORTED`).
    pub first_mismatches: Vec<Mismatch>,
    /// Passes whose output differed from the first pass's (1-based).
    pub divergent_passes: Vec<u32>,
}

pub const MAX_REPORTED: usize = 8;

/// Counts differing bytes between `expected` and `found`, appending the first few.
pub fn compare(
    region_id: u32,
    base_offset: u64,
    expected: &[u8],
    found: &[u8],
    out: &mut VerifyOutcome,
) {
    if expected == found {
        return;
    }
    for (i, (e, f)) in expected.iter().zip(found).enumerate() {
        if e != f {
            out.mismatched_bytes += 1;
            if out.first_mismatches.len() < MAX_REPORTED {
                out.first_mismatches.push(Mismatch {
                    region_id,
                    offset: base_offset + i as u64,
                    expected: *e,
                    found: *f,
                });
            }
        }
    }
    out.mismatched_bytes += expected.len().abs_diff(found.len()) as u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_locates_differences() {
        let mut v = VerifyOutcome::default();
        compare(3, 100, &[1, 2, 3, 4], &[1, 9, 3, 8], &mut v);
        assert_eq!(v.mismatched_bytes, 2);
        assert_eq!(v.first_mismatches[0].offset, 101);
        assert_eq!(v.first_mismatches[1].offset, 103);
        assert_eq!(v.first_mismatches[0].region_id, 3);
        compare(3, 0, &[5; 4], &[5; 4], &mut v);
        assert_eq!(v.mismatched_bytes, 2);
    }
}
