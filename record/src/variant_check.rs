//! `kreplay profile --variant`: the checks that decide, before any variant launch, whether a
//! variant may run in the original's place, and which of its writes fall outside the
//! original's write set. Pure, tested on the CPU.

/// Why a variant with parameter layout `variant` cannot take the arguments of a function with
/// layout `original` (each `(offset, size)` in bytes, in order, as `cuFuncGetParamInfo` gives
/// them): the first parameter that differs, named 1-based. `None`: the same layout.
pub fn layout_difference(original: &[(u32, u32)], variant: &[(u32, u32)]) -> Option<String> {
    let describe = |p: Option<&(u32, u32)>| match p {
        Some((offset, size)) => format!("at offset {offset} B, {size} B"),
        None => "absent".to_string(),
    };
    let n = original.len().max(variant.len());
    let i = (0..n).find(|&i| original.get(i) != variant.get(i))?;
    Some(format!(
        "parameter {} differs: the original's is {}, the variant's {} (the original takes {} \
         parameters, the variant {})",
        i + 1,
        describe(original.get(i)),
        describe(variant.get(i)),
        original.len(),
        variant.len()
    ))
}

/// Why a variant that allows at most `max_threads` threads per block cannot run with the
/// original's block of `block_threads`; `None` when it can.
pub fn block_difference(block_threads: u64, max_threads: u32) -> Option<String> {
    (block_threads > u64::from(max_threads)).then(|| {
        format!(
            "the dispatch launches {block_threads} threads per block and the variant allows at \
             most {max_threads} (its .maxntid: a Triton variant needs the original's num_warps, \
             {} here)",
            block_threads.div_ceil(32)
        )
    })
}

/// The first byte offset covered by `changed` and by none of `write_set` (both lists of
/// `(offset, len)` ranges of one region), where the variant wrote what the original did not.
pub fn first_outside(changed: &[(u64, u64)], write_set: &[(u64, u64)]) -> Option<u64> {
    let covered = |at: u64| write_set.iter().any(|&(o, l)| at >= o && at < o + l);
    for &(offset, len) in changed {
        let mut at = offset;
        while at < offset + len {
            if !covered(at) {
                return Some(at);
            }
            // Jump to the end of the write-set range holding `at`.
            at = write_set
                .iter()
                .filter(|&&(o, l)| at >= o && at < o + l)
                .map(|&(o, l)| o + l)
                .max()
                .unwrap_or(offset + len);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_layout_passes_and_the_first_difference_is_named() {
        let original = [(0, 8), (8, 8), (16, 4)];
        assert_eq!(layout_difference(&original, &original), None);
        let e = layout_difference(&original, &[(0, 8), (8, 4), (16, 4)]).expect("size");
        assert!(
            e.starts_with("parameter 2 differs: the original's is at offset 8 B, 8 B, the variant's at offset 8 B, 4 B"),
            "{e}"
        );
        let e = layout_difference(&original, &[(0, 8), (8, 8)]).expect("count");
        assert!(
            e.contains("parameter 3") && e.contains("the variant's absent"),
            "{e}"
        );
        assert!(e.contains("takes 3 parameters, the variant 2"), "{e}");
        let e = layout_difference(&original, &[(0, 8), (8, 8), (16, 4), (20, 4)]).expect("more");
        assert!(
            e.contains("parameter 4") && e.contains("the original's is absent"),
            "{e}"
        );
        let e = layout_difference(&original, &[(0, 8), (12, 8), (16, 4)]).expect("offset");
        assert!(e.contains("parameter 2"), "{e}");
        assert_eq!(
            layout_difference(&[], &[]),
            None,
            "no parameters on either side"
        );
    }

    #[test]
    fn a_block_larger_than_the_variant_allows_is_refused() {
        assert_eq!(block_difference(128, 128), None);
        assert_eq!(block_difference(128, 1024), None);
        let e = block_difference(256, 128).expect("too many threads");
        assert!(
            e.contains("256 threads") && e.contains("at most 128"),
            "{e}"
        );
        assert!(e.contains("num_warps, 8"), "{e}");
    }

    #[test]
    fn writes_outside_the_write_set_are_found_at_their_first_byte() {
        let ws = [(0, 100), (200, 50)];
        assert_eq!(first_outside(&[(0, 100)], &ws), None);
        assert_eq!(first_outside(&[(10, 20), (200, 50)], &ws), None);
        assert_eq!(first_outside(&[(50, 100)], &ws), Some(100));
        assert_eq!(first_outside(&[(240, 20)], &ws), Some(250));
        assert_eq!(first_outside(&[(300, 1)], &ws), Some(300));
        assert_eq!(first_outside(&[(5, 1)], &[]), Some(5));
        assert_eq!(first_outside(&[], &ws), None);
        // Touching ranges of the write set cover what lies across their seam.
        assert_eq!(first_outside(&[(0, 200)], &[(0, 100), (100, 100)]), None);
    }
}
