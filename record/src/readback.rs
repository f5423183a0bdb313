//! Bringing snapshots home from device scratch, bounded: a region is read in pieces of at most
//! the staging size through a ring of page-locked buffers, the copy engine filling the next
//! buffers while the writer compresses the last one, and chunks the GPU found all zero are
//! written as zero chunks without crossing the bus (#13). Host memory stays at the ring and the
//! writer's batch whatever the region's size.
//!
//! The plans (which copies, in which order) are pure functions tested on the CPU; `run` only
//! drives the ring.

use std::io::{Seek, Write};

use kreplay_cuda::DownloadRing;
use kreplay_engine::write_set::ByteRange;
use kreplay_format::{CaptureWriter, MemoryState};

use crate::error::RecordError;
use crate::quiet::{self, Pacing};

/// One step of writing a region's memory, in region order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Copy `len` bytes from device address `src`; they are the region's bytes at `offset`.
    Copy { src: u64, offset: u64, len: u64 },
    /// The region's bytes at `offset` are `len` zeros (nothing to copy).
    Zeros { offset: u64, len: u64 },
}

/// The steps that write a region of `size` bytes held at device address `base`, in chunks of
/// `chunk`: runs of chunks marked nonzero are copied in pieces of at most `max` bytes (a
/// multiple of `chunk`); runs of zero chunks are written as zeros. Without flags every chunk
/// is copied.
pub fn pre_steps(
    base: u64,
    size: u64,
    chunk: u64,
    nonzero: Option<&[bool]>,
    max: u64,
) -> Vec<Step> {
    let chunk = chunk.max(1);
    let max = (max / chunk).max(1) * chunk;
    let chunks = size.div_ceil(chunk) as usize;
    let flag = |i: usize| nonzero.is_none_or(|f| f.get(i).copied().unwrap_or(true));
    let mut steps = Vec::new();
    let mut i = 0;
    while i < chunks {
        let want = flag(i);
        let start = i;
        while i < chunks && flag(i) == want {
            i += 1;
        }
        let (from, to) = (start as u64 * chunk, (i as u64 * chunk).min(size));
        if want {
            let mut at = from;
            while at < to {
                let len = max.min(to - at);
                steps.push(Step::Copy {
                    src: base + at,
                    offset: at,
                    len,
                });
                at += len;
            }
        } else {
            steps.push(Step::Zeros {
                offset: from,
                len: to - from,
            });
        }
    }
    steps
}

/// Which chunks of a region of `size` bytes (chunks of `chunk`) cross the bus: those the GPU
/// found nonzero (`nonzero`; none: all) that hold a present byte (`present`, a capture by
/// touched pages; none: the region whole). The others are written as zero chunks: a 16 GiB
/// pool of which a kernel touched 1 % is read home as 1 %, not whole and then masked.
/// `None` when every chunk crosses; the GPU's flags themselves (not a copy) when the region is
/// held whole.
pub fn chunks_to_copy<'a>(
    size: u64,
    chunk: u64,
    nonzero: Option<&'a [bool]>,
    present: Option<&[(u64, u64)]>,
) -> Option<std::borrow::Cow<'a, [bool]>> {
    let Some(present) = present else {
        return nonzero.map(std::borrow::Cow::Borrowed);
    };
    let chunk = chunk.max(1);
    let chunks = size.div_ceil(chunk) as usize;
    let mut flags = vec![false; chunks];
    for &(off, len) in present {
        let end = off.saturating_add(len).min(size);
        if off >= end {
            continue;
        }
        let (first, last) = ((off / chunk) as usize, ((end - 1) / chunk) as usize);
        for f in flags.iter_mut().take(last + 1).skip(first) {
            *f = true;
        }
    }
    if let Some(nz) = nonzero {
        for (f, n) in flags
            .iter_mut()
            .zip(nz.iter().chain(std::iter::repeat(&true)))
        {
            *f &= *n;
        }
    }
    Some(std::borrow::Cow::Owned(flags))
}

/// A run of changed chunks packed into post scratch: the region's bytes at `offset`, `len`
/// long, are at `at` in the scratch buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedRun {
    pub offset: u64,
    pub len: u64,
    pub at: u64,
}

/// Packs written ranges end to end: where each lands in a scratch buffer of the returned
/// total length.
pub fn pack(written: &[ByteRange]) -> (Vec<PackedRun>, u64) {
    let mut runs = Vec::with_capacity(written.len());
    let mut at = 0;
    for w in written {
        runs.push(PackedRun {
            offset: w.offset,
            len: w.len,
            at,
        });
        at += w.len;
    }
    (runs, at)
}

/// Written ranges read where they are (the runs sit at their own offsets: a whole copy of
/// the region, or the application's memory itself).
pub fn in_place(written: &[ByteRange]) -> Vec<PackedRun> {
    written
        .iter()
        .map(|w| PackedRun {
            offset: w.offset,
            len: w.len,
            at: w.offset,
        })
        .collect()
}

/// The copies that bring packed post runs home from the scratch at `base`, in pieces of at
/// most `max` bytes (a multiple of `chunk`).
pub fn post_steps(base: u64, runs: &[PackedRun], chunk: u64, max: u64) -> Vec<Step> {
    let max = (max / chunk.max(1)).max(1) * chunk.max(1);
    let mut steps = Vec::new();
    for r in runs {
        let mut done = 0;
        while done < r.len {
            let len = max.min(r.len - done);
            steps.push(Step::Copy {
                src: base + r.at + done,
                offset: r.offset + done,
                len,
            });
            done += len;
        }
    }
    steps
}

/// Runs `steps` in order through `ring`: copies are started up to the ring's size ahead, and
/// each one's bytes are handed to `data(offset, bytes)` once landed; zero runs go to
/// `zeros(offset, len)`. A writer (`Pacing::Writer`) starts each copy outside measured windows
/// (`quiet`); the copies already in flight when a capture begins (three buffers at most) land
/// during its first context synchronisation: the writer's host work (compression, the disk)
/// never holds it.
pub fn run(
    ring: &mut DownloadRing,
    steps: &[Step],
    pacing: Pacing,
    mut data: impl FnMut(u64, &[u8]) -> Result<(), RecordError>,
    mut zeros: impl FnMut(u64, u64) -> Result<(), RecordError>,
) -> Result<(), RecordError> {
    let copies: Vec<(u64, u64, usize)> = steps
        .iter()
        .filter_map(|s| match *s {
            Step::Copy { src, offset, len } => Some((src, offset, len as usize)),
            Step::Zeros { .. } => None,
        })
        .collect();
    let slots = ring.slots();
    let (mut started, mut consumed) = (0usize, 0usize);
    let read_back = RecordError::ReadBack;
    for step in steps {
        let (offset, len) = match *step {
            Step::Zeros { offset, len } => {
                zeros(offset, len)?;
                continue;
            }
            Step::Copy { offset, len, .. } => (offset, len as usize),
        };
        while started < copies.len() && started - consumed < slots {
            let (src, _, n) = copies[started];
            // SAFETY: the steps come from `pre_steps`/`post_steps`, which keep each copy inside
            // the region being written out: our scratch (`inflight`) or the application's
            // allocation with its context synchronised (`spill`); the slot was consumed.
            quiet::paced(pacing, || unsafe { ring.start(started % slots, src, n) })
                .map_err(read_back)?;
            started += 1;
        }
        let bytes = ring.wait(consumed % slots, len).map_err(read_back)?;
        consumed += 1;
        data(offset, bytes)?;
    }
    Ok(())
}

/// Runs `steps` of region `id` through `ring` into `w` as chunks of `state`, telling `progress`
/// of each stretch written; returns the bytes copied home (zero runs not counted).
pub fn write_steps<W: Write + Seek>(
    ring: &mut DownloadRing,
    w: &mut CaptureWriter<W>,
    (id, state, present): (u32, MemoryState, Option<&[(u64, u64)]>),
    (steps, pacing): (&[Step], Pacing),
    progress: &dyn Fn(u64),
) -> Result<u64, RecordError> {
    let copied = std::cell::Cell::new(0u64);
    // `w` is used by both callbacks, one at a time.
    let w = std::cell::RefCell::new(w);
    run(
        ring,
        steps,
        pacing,
        |offset, bytes| {
            progress(bytes.len() as u64);
            copied.set(copied.get() + bytes.len() as u64);
            let bytes = masked(present, offset, bytes);
            Ok(w.borrow_mut().memory(id, state, offset, &bytes)?)
        },
        |offset, len| {
            progress(len);
            Ok(w.borrow_mut().zeros(id, state, offset, len)?)
        },
    )?;
    Ok(copied.get())
}

/// `bytes`, a region's bytes from `offset`, as a capture by touched pages stores them (its
/// absent bytes zero; `present` none: the region whole): borrowed when nothing is absent.
pub fn masked<'a>(
    present: Option<&[(u64, u64)]>,
    offset: u64,
    bytes: &'a [u8],
) -> std::borrow::Cow<'a, [u8]> {
    let len = bytes.len() as u64;
    match present.filter(|p| !kreplay_format::extents::is_present(p, offset, len)) {
        Some(p) => {
            let mut out = bytes.to_vec();
            kreplay_format::extents::zero_absent(p, offset, &mut out);
            std::borrow::Cow::Owned(out)
        }
        None => std::borrow::Cow::Borrowed(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Catches: a write set kept in place (a whole post copy: the slab's second half,
        // compared by the writer) bringing home other bytes, or other offsets, than the same
        // write set packed end to end (the comparison during the stall): the capture file
        // must not depend on which of the two the recorder took.
        #[test]
        fn runs_in_place_and_packed_bring_home_the_same_bytes(
            gaps in proptest::collection::vec((0u64..20_000, 1u64..70_000), 0..12),
            chunk_pow in 12u32..20,
            max_chunks in 1u64..6,
        ) {
            let mut written = Vec::new();
            let mut end = 0;
            for (gap, len) in gaps {
                written.push(kreplay_engine::write_set::ByteRange { offset: end + gap, len });
                end += gap + len;
            }
            let chunk = 1u64 << chunk_pow;
            let (whole, packed_base) = (0x7000_0000u64, 0x9000_0000u64);
            let region = |steps: Vec<Step>, base: u64| -> Vec<(u64, u64, u64)> {
                steps
                    .into_iter()
                    .map(|s| match s {
                        Step::Copy { src, offset, len } => (offset, len, src - base),
                        Step::Zeros { offset, len } => (offset, len, u64::MAX),
                    })
                    .collect()
            };
            let in_place_steps = region(post_steps(whole, &in_place(&written), chunk, max_chunks * chunk), whole);
            let (runs, total) = pack(&written);
            let packed_steps = region(post_steps(packed_base, &runs, chunk, max_chunks * chunk), packed_base);
            prop_assert_eq!(total, written.iter().map(|w| w.len).sum::<u64>());
            // The same pieces of the region, in the same order...
            let pieces = |v: &[(u64, u64, u64)]| v.iter().map(|&(o, l, _)| (o, l)).collect::<Vec<_>>();
            prop_assert_eq!(pieces(&in_place_steps), pieces(&packed_steps));
            // ...each read where its kind of scratch holds it: in place at its own offset,
            // packed at its run's place end to end.
            prop_assert!(in_place_steps.iter().all(|&(o, _, at)| at == o));
            let mut at = 0;
            for &(_, l, from) in &packed_steps {
                prop_assert_eq!(from, at);
                at += l;
            }
        }
    }

    // Catches: a device read-back step of a capture by touched pages written with its absent
    // bytes (the writer refuses them), present bytes zeroed, or a whole region copied for no
    // reason.
    #[test]
    fn a_step_is_masked_only_where_pages_are_absent() {
        let bytes = vec![9u8; 8192];
        let present = [(4096u64, 4096u64)];
        assert!(matches!(
            masked(None, 0, &bytes),
            std::borrow::Cow::Borrowed(_)
        ));
        assert!(matches!(
            masked(Some(&present), 4096, &bytes[..4096]),
            std::borrow::Cow::Borrowed(_)
        ));
        let m = masked(Some(&present), 0, &bytes);
        assert!(m[..4096].iter().all(|&b| b == 0) && m[4096..].iter().all(|&b| b == 9));
        let m = masked(Some(&present), 8192, &bytes);
        assert!(m.iter().all(|&b| b == 0), "past the extent");
    }

    // Catches: a capture by touched pages reading its absent chunks home (a 16 GiB pool of
    // which 1 % was touched took 23.7 s to write), a chunk holding a present byte skipped, or
    // a zero chunk copied.
    #[test]
    fn only_chunks_with_present_nonzero_bytes_cross_the_bus() {
        let flags = |c: Option<std::borrow::Cow<'_, [bool]>>| c.map(|c| c.into_owned());
        assert_eq!(flags(chunks_to_copy(100, 10, None, None)), None);
        assert_eq!(
            flags(chunks_to_copy(30, 10, Some(&[true, false, true]), None)),
            Some(vec![true, false, true])
        );
        // Present: [5, 15) and [29, 30): chunks 0, 1 and 2.
        let present = [(5u64, 10u64), (29, 1)];
        assert_eq!(
            flags(chunks_to_copy(35, 10, None, Some(&present))),
            Some(vec![true, true, true, false])
        );
        assert_eq!(
            flags(chunks_to_copy(
                35,
                10,
                Some(&[true, false, true, true]),
                Some(&present)
            )),
            Some(vec![true, false, true, false])
        );
        assert_eq!(
            flags(chunks_to_copy(35, 10, None, Some(&[]))),
            Some(vec![false; 4])
        );
        let steps = pre_steps(
            0x1000,
            35,
            10,
            chunks_to_copy(35, 10, None, Some(&present)).as_deref(),
            1 << 20,
        );
        assert_eq!(
            steps,
            vec![
                Step::Copy {
                    src: 0x1000,
                    offset: 0,
                    len: 30
                },
                Step::Zeros { offset: 30, len: 5 }
            ]
        );
    }

    const C: u64 = 4;

    #[test]
    fn zero_runs_are_not_copied_and_copies_are_capped() {
        let flags = [true, true, true, false, false, true, false];
        let steps = pre_steps(1000, 27, C, Some(&flags), 8);
        assert_eq!(
            steps,
            vec![
                Step::Copy {
                    src: 1000,
                    offset: 0,
                    len: 8
                },
                Step::Copy {
                    src: 1008,
                    offset: 8,
                    len: 4
                },
                Step::Zeros { offset: 12, len: 8 },
                Step::Copy {
                    src: 1020,
                    offset: 20,
                    len: 4
                },
                // The last chunk is short (27 bytes).
                Step::Zeros { offset: 24, len: 3 },
            ]
        );
    }

    #[test]
    fn without_flags_everything_is_copied_and_every_byte_is_covered_once() {
        for size in [0u64, 1, 4, 5, 31, 64] {
            let steps = pre_steps(0, size, C, None, 12);
            let mut next = 0;
            for s in &steps {
                let Step::Copy { offset, len, .. } = *s else {
                    panic!("zeros without flags")
                };
                assert_eq!(offset, next);
                assert!(len <= 12 && len > 0);
                next += len;
            }
            assert_eq!(next, size);
        }
    }

    #[test]
    fn written_ranges_pack_end_to_end_and_come_home_to_their_offsets() {
        let r = |offset, len| ByteRange { offset, len };
        let (runs, total) = pack(&[r(4, 8), r(16, 2)]);
        assert_eq!(
            runs,
            vec![
                PackedRun {
                    offset: 4,
                    len: 8,
                    at: 0
                },
                PackedRun {
                    offset: 16,
                    len: 2,
                    at: 8
                },
            ]
        );
        assert_eq!(total, 10);
        let steps = post_steps(500, &runs, C, 4);
        assert_eq!(
            steps,
            vec![
                Step::Copy {
                    src: 500,
                    offset: 4,
                    len: 4
                },
                Step::Copy {
                    src: 504,
                    offset: 8,
                    len: 4
                },
                Step::Copy {
                    src: 508,
                    offset: 16,
                    len: 2
                },
            ]
        );
        assert_eq!(pack(&[]), (vec![], 0));
        let home: Vec<u64> = in_place(&[r(4, 8), r(16, 2)])
            .iter()
            .map(|p| p.at)
            .collect();
        assert_eq!(home, vec![4, 16]);
    }
}
