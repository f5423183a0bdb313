//! PTX text, read just far enough to name its kernels: the recorder keeps the PTX module
//! that defines the captured kernel, and the player picks that module back by the same rule
//! (`docs/FORMAT.md`, MODULE event).

/// Whether PTX text defines the kernel `name` (`.entry name(`).
pub fn defines_entry(ptx: &[u8], name: &str) -> bool {
    entry_names(ptx).iter().any(|n| n == name)
}

/// Names of every `.entry` in PTX text.
pub fn entry_names(ptx: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let needle = b".entry";
    let mut i = 0;
    while let Some(p) = ptx[i..].windows(needle.len()).position(|w| w == needle) {
        let mut j = i + p + needle.len();
        if ptx.get(j).is_some_and(|c| c.is_ascii_whitespace()) {
            while ptx.get(j).is_some_and(|c| c.is_ascii_whitespace()) {
                j += 1;
            }
            let start = j;
            while ptx
                .get(j)
                .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'$')
            {
                j += 1;
            }
            if j > start {
                out.push(String::from_utf8_lossy(&ptx[start..j]).into_owned());
            }
        }
        i = j.max(i + p + 1);
    }
    out
}

/// `.target sm_90` → 90 (0 when absent).
pub fn target_arch(text: &[u8]) -> u32 {
    let needle = b".target sm_";
    text.windows(needle.len())
        .position(|w| w == needle)
        .map(|p| {
            text[p + needle.len()..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .fold(0u32, |a, &c| {
                    a.saturating_mul(10).saturating_add((c - b'0') as u32)
                })
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_matched_by_whole_name() {
        let ptx = b".visible .entry _Z5saxpyifPKfPf(\n.param .u32 a\n)\n.entry k2 (\n.entryx k3(\n";
        assert_eq!(entry_names(ptx), ["_Z5saxpyifPKfPf", "k2"]);
        assert!(defines_entry(ptx, "_Z5saxpyifPKfPf"));
        assert!(defines_entry(ptx, "k2"));
        assert!(!defines_entry(ptx, "_Z5saxpy"));
        assert!(!defines_entry(ptx, "k"));
        assert!(entry_names(b"").is_empty());
        assert!(entry_names(b".entry").is_empty());
    }
}
