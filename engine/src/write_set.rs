//! Which bytes of a region a step wrote, decided once. The recorder compares a region's bytes
//! before and after a step in several ways (a GPU scan of two copies, the host comparing two
//! copies, GPU digests of a region too large to copy); each comparison only gives evidence,
//! chunk by chunk, and `written` turns any of it into byte ranges. A capture stores those
//! ranges as its post-state chunks, and the replay's restore (`restore::WriteSet`) is built
//! from the same ranges read back from the capture.

/// `len` bytes of a region from `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub offset: u64,
    pub len: u64,
}

impl ByteRange {
    pub fn end(self) -> u64 {
        self.offset + self.len
    }

    /// The part of the range inside the first `usable` bytes (a module global holds fewer bytes
    /// in the loaded module than in the file, say); `None` when it lies wholly past them.
    pub fn clipped(self, usable: u64) -> Option<ByteRange> {
        (self.offset < usable).then(|| ByteRange {
            offset: self.offset,
            len: self.len.min(usable - self.offset),
        })
    }

    /// The range cut into consecutive pieces of at most `max` bytes (the chunks of a post
    /// state, or copies bounded by a staging buffer).
    pub fn pieces(self, max: u64) -> impl Iterator<Item = ByteRange> {
        let max = max.max(1);
        (0..self.len.div_ceil(max)).map(move |k| {
            let at = k * max;
            ByteRange {
                offset: self.offset + at,
                len: max.min(self.len - at),
            }
        })
    }
}

/// What a comparison of a region's bytes before and after a step says, chunk by chunk.
#[derive(Debug, Clone, Copy)]
pub enum Evidence<'a> {
    /// One flag per chunk, set where the chunk changed (the GPU's chunk scan).
    Changed(&'a [bool]),
    /// The bytes themselves (the host's comparison); only the bytes both hold are compared.
    Bytes { before: &'a [u8], after: &'a [u8] },
    /// A digest per chunk before and after; when the chunk count differs, nothing can be
    /// matched and every chunk counts as changed.
    Digests {
        before: &'a [[u64; 2]],
        after: &'a [[u64; 2]],
    },
    /// No comparison was possible: the whole region counts as written.
    Unknown,
}

/// The byte ranges a step wrote in a region of `size` bytes compared in chunks of `chunk`
/// bytes: each maximal run of changed chunks is one range, in order, never past the region's
/// end (its last chunk may be short); flags past the region's end are ignored.
pub fn written(evidence: Evidence<'_>, chunk: u64, size: u64) -> Vec<ByteRange> {
    let chunk = chunk.max(1);
    match evidence {
        Evidence::Changed(flags) => runs(flags.iter().copied(), chunk, size),
        Evidence::Bytes { before, after } => {
            let compared = size.min(before.len() as u64).min(after.len() as u64);
            let n = usize::try_from(chunk).unwrap_or(usize::MAX);
            let flags = before.chunks(n).zip(after.chunks(n)).map(|(a, b)| a != b);
            runs(flags, chunk, compared)
        }
        Evidence::Digests { before, after } if before.len() != after.len() => {
            runs(after.iter().map(|_| true), chunk, size)
        }
        Evidence::Digests { before, after } => {
            runs(before.iter().zip(after).map(|(a, b)| a != b), chunk, size)
        }
        Evidence::Unknown => runs(std::iter::once(true), size.max(1), size),
    }
}

/// `ranges` (in order, disjoint) with their smallest gaps bridged until at most `most` remain
/// (`most` 0 counts as 1): each range the result holds covers ranges of the input, and the
/// bytes it adds are the fewest any `most` ranges covering the input could add. For restores
/// that copy range by range: a copy call costs about as much as copying 4 MiB, so thousands of
/// 4 KiB pages cost more apart than with the unchanged bytes between them copied too.
pub fn fewest_gaps(ranges: Vec<ByteRange>, most: usize) -> Vec<ByteRange> {
    let most = most.max(1);
    if ranges.len() <= most {
        return ranges;
    }
    let mut gaps: Vec<(u64, usize)> = ranges
        .windows(2)
        .enumerate()
        .map(|(i, w)| (w[1].offset.saturating_sub(w[0].end()), i))
        .collect();
    gaps.sort_unstable();
    let mut bridged = vec![false; ranges.len()];
    for &(_, i) in gaps.iter().take(ranges.len() - most) {
        bridged[i] = true;
    }
    let mut out: Vec<ByteRange> = Vec::with_capacity(most);
    let mut join = false;
    for (i, r) in ranges.into_iter().enumerate() {
        match out.last_mut() {
            Some(last) if join => last.len = r.end() - last.offset,
            _ => out.push(r),
        }
        join = bridged[i];
    }
    out
}

/// The parts of `ranges` outside every range of `minus` (both in order, each disjoint), in
/// order: what a put-back gives its pristine bytes once the write set got the output.
pub fn outside(ranges: &[ByteRange], minus: &[ByteRange]) -> Vec<ByteRange> {
    let mut out = Vec::new();
    let mut k = 0;
    for r in ranges {
        let mut at = r.offset;
        while k < minus.len() && minus[k].end() <= at {
            k += 1;
        }
        let mut j = k;
        while at < r.end() {
            match minus.get(j) {
                Some(m) if m.offset < r.end() => {
                    if m.offset > at {
                        out.push(ByteRange {
                            offset: at,
                            len: m.offset - at,
                        });
                    }
                    at = at.max(m.end());
                    j += 1;
                }
                _ => {
                    out.push(ByteRange {
                        offset: at,
                        len: r.end() - at,
                    });
                    at = r.end();
                }
            }
        }
    }
    out
}

/// The maximal runs of set flags of consecutive `chunk`-byte chunks, cut at `size`.
fn runs(flags: impl Iterator<Item = bool>, chunk: u64, size: u64) -> Vec<ByteRange> {
    let mut out: Vec<ByteRange> = Vec::new();
    for (i, changed) in flags.enumerate() {
        let offset = (i as u64).saturating_mul(chunk);
        if offset >= size {
            break;
        }
        if !changed {
            continue;
        }
        let len = chunk.min(size - offset);
        match out.last_mut() {
            Some(last) if last.end() == offset => last.len += len,
            _ => out.push(ByteRange { offset, len }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    // Catches: more ranges left than asked, a range of the input left uncovered, a wider gap
    // bridged while a narrower one stays, ranges that were few enough changed at all.
    #[test]
    fn the_smallest_gaps_are_bridged_first() {
        let r = |offset, len| ByteRange { offset, len };
        let input = vec![r(0, 4), r(10, 4), r(16, 4), r(100, 4), r(103 + 8, 1)];
        assert_eq!(fewest_gaps(input.clone(), 5), input);
        assert_eq!(fewest_gaps(input.clone(), 9), input);
        // Gaps: 6, 2, 80, 7: the 2 goes first, then the 6, then the 7.
        assert_eq!(
            fewest_gaps(input.clone(), 4),
            vec![r(0, 4), r(10, 10), r(100, 4), r(111, 1)]
        );
        assert_eq!(
            fewest_gaps(input.clone(), 3),
            vec![r(0, 20), r(100, 4), r(111, 1)]
        );
        assert_eq!(fewest_gaps(input.clone(), 2), vec![r(0, 20), r(100, 12)]);
        assert_eq!(fewest_gaps(input.clone(), 1), vec![r(0, 112)]);
        assert_eq!(fewest_gaps(input, 0), vec![r(0, 112)]);
        assert_eq!(fewest_gaps(Vec::new(), 0), Vec::new());
    }

    proptest::proptest! {
        // Catches: a byte inside `minus` kept, a byte outside it dropped, pieces out of order
        // or overlapping (a put-back writing pristine bytes over the application's output).
        #[test]
        fn outside_keeps_exactly_the_bytes_no_minus_range_holds(
            a in proptest::collection::vec((0u64..30, 1u64..30), 0..20),
            b in proptest::collection::vec((0u64..30, 1u64..30), 0..20),
        ) {
            let build = |v: &[(u64, u64)]| {
                let mut at = 0;
                v.iter()
                    .map(|&(gap, len)| {
                        at += gap + 1;
                        let r = ByteRange { offset: at, len };
                        at += len;
                        r
                    })
                    .collect::<Vec<_>>()
            };
            let (ranges, minus) = (build(&a), build(&b));
            let out = outside(&ranges, &minus);
            let held = |v: &[ByteRange], x: u64| v.iter().any(|r| x >= r.offset && x < r.end());
            for x in 0..2000u64 {
                let want = held(&ranges, x) && !held(&minus, x);
                proptest::prop_assert_eq!(held(&out, x), want, "byte {}", x);
            }
            for w in out.windows(2) {
                proptest::prop_assert!(w[0].end() <= w[1].offset);
            }
            proptest::prop_assert!(out.iter().all(|r| r.len > 0));
        }

        // Catches: a byte of the input left out, ranges overlapping or out of order, more
        // ranges than asked, bytes added beyond the gaps bridged.
        #[test]
        fn bridged_ranges_cover_the_input_in_order(
            pieces in proptest::collection::vec((1u64..50, 1u64..20), 0..60),
            most in 0usize..70,
        ) {
            let mut at = 0;
            let input: Vec<ByteRange> = pieces
                .iter()
                .map(|&(gap, len)| {
                    at += gap;
                    let r = ByteRange { offset: at, len };
                    at += len;
                    r
                })
                .collect();
            let out = fewest_gaps(input.clone(), most);
            proptest::prop_assert!(out.len() <= most.max(1) || out.len() == input.len());
            proptest::prop_assert!(out.len() == input.len().min(most.max(1)));
            for w in out.windows(2) {
                proptest::prop_assert!(w[0].end() < w[1].offset);
            }
            for r in &input {
                proptest::prop_assert!(out.iter().any(|o| o.offset <= r.offset && r.end() <= o.end()));
            }
            let covered: u64 = out.iter().map(|o| o.len).sum();
            let exact: u64 = input.iter().map(|r| r.len).sum();
            let mut gaps: Vec<u64> = input.windows(2).map(|w| w[1].offset - w[0].end()).collect();
            gaps.sort_unstable();
            let least: u64 = gaps.iter().take(input.len().saturating_sub(most.max(1))).sum();
            proptest::prop_assert_eq!(covered, exact + least);
        }
    }

    use super::*;
    use proptest::prelude::*;

    fn r(offset: u64, len: u64) -> ByteRange {
        ByteRange { offset, len }
    }

    #[test]
    fn runs_of_changed_chunks_become_ranges_cut_at_the_region_end() {
        let flags = [false, true, true, false, true];
        assert_eq!(
            written(Evidence::Changed(&flags), 4, 18),
            vec![r(4, 8), r(16, 2)]
        );
        // Flags past the end (a scan rounded up) write nothing.
        assert_eq!(
            written(Evidence::Changed(&[true, true, true]), 4, 5),
            vec![r(0, 5)]
        );
        assert_eq!(written(Evidence::Changed(&[false; 3]), 4, 12), vec![]);
    }

    #[test]
    fn digests_that_differ_are_written_and_a_changed_count_writes_everything() {
        let a = [[1, 2], [3, 4], [5, 6]];
        let b = [[1, 2], [3, 5], [5, 6]];
        let digests = |before, after| Evidence::Digests { before, after };
        assert_eq!(written(digests(&a, &b), 4, 12), vec![r(4, 4)]);
        assert_eq!(written(digests(&a, &a), 4, 12), vec![]);
        assert_eq!(written(digests(&a[..2], &b), 4, 10), vec![r(0, 10)]);
    }

    #[test]
    fn without_a_comparison_the_whole_region_is_written() {
        assert_eq!(written(Evidence::Unknown, 4, 10), vec![r(0, 10)]);
        assert_eq!(written(Evidence::Unknown, 4, 0), vec![]);
    }

    #[test]
    fn bytes_compare_only_where_both_copies_hold_them() {
        let before = [0u8; 10];
        let mut after = [0u8; 10];
        after[9] = 1;
        let bytes = |a: &[u8]| {
            written(
                Evidence::Bytes {
                    before: &before,
                    after: a,
                },
                4,
                10,
            )
        };
        assert_eq!(bytes(&after), vec![r(8, 2)]);
        // A copy cut short inside a chunk: that chunk differs, up to where the copy ends.
        assert_eq!(bytes(&after[..7]), vec![r(4, 3)]);
        assert_eq!(bytes(&after[..8]), vec![]);
        assert_eq!(bytes(&[]), vec![]);
    }

    #[test]
    fn clipping_and_pieces() {
        assert_eq!(r(40, 100).clipped(50), Some(r(40, 10)));
        assert_eq!(r(50, 100).clipped(50), None);
        assert_eq!(r(0, 10).clipped(50), Some(r(0, 10)));
        let p: Vec<_> = r(8, 10).pieces(4).collect();
        assert_eq!(p, vec![r(8, 4), r(12, 4), r(16, 2)]);
        assert_eq!(r(8, 0).pieces(4).count(), 0);
    }

    proptest! {
        /// Whatever the comparison, the ranges are exactly the bytes of the chunks whose
        /// bytes differ: sorted, disjoint, never adjacent (joined), inside the region.
        #[test]
        fn every_comparison_gives_the_bytes_of_the_differing_chunks(
            before in proptest::collection::vec(0u8..3, 0..200),
            flips in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
            chunk in 1u64..17,
        ) {
            let mut after = before.clone();
            for f in &flips {
                if !after.is_empty() {
                    let i = f.index(after.len());
                    after[i] ^= 1;
                }
            }
            let size = before.len() as u64;
            let n = chunk as usize;
            let flags: Vec<bool> =
                before.chunks(n).zip(after.chunks(n)).map(|(a, b)| a != b).collect();
            let digest = |v: &[u8]| -> Vec<[u64; 2]> {
                v.chunks(n)
                    .map(|c| [c.iter().map(|&b| b as u64).sum(), c.iter().enumerate().map(|(i, &b)| (i as u64 + 1) * b as u64).sum()])
                    .collect()
            };
            let by_bytes = written(Evidence::Bytes { before: &before, after: &after }, chunk, size);
            let by_flags = written(Evidence::Changed(&flags), chunk, size);
            prop_assert_eq!(&by_bytes, &by_flags);
            let (db, da) = (digest(&before), digest(&after));
            let by_digest = written(Evidence::Digests { before: &db, after: &da }, chunk, size);
            // A digest may miss a change (it is a digest), never invent one.
            for w in &by_digest {
                prop_assert!(by_flags.iter().any(|f| f.offset <= w.offset && w.end() <= f.end()));
            }
            let mut covered = vec![false; before.len()];
            let mut last_end = None;
            for w in &by_flags {
                prop_assert!(w.len > 0 && w.end() <= size);
                prop_assert!(last_end.is_none_or(|e| e < w.offset));
                last_end = Some(w.end());
                for b in w.offset..w.end() {
                    covered[b as usize] = true;
                }
            }
            for (i, c) in covered.iter().enumerate() {
                prop_assert_eq!(*c, flags[i / n]);
            }
        }
    }
}
