//! The writers' rings of page-locked staging buffers, kept between captures. A writer made
//! its ring for each capture (`cuMemHostAlloc` of up to three 64 MiB buffers, then
//! `cuMemFreeHost`): pinning takes the driver tens of milliseconds, beside the next capture's
//! stall, whose driver calls waited for it (a training step's captures once in three or four
//! stalled 7 to 57 ms in the walk, on an H100, #34). So a writer takes a spare ring of its
//! context, gives it back, and rings are made and freed only outside measured windows
//! (`quiet`): a capture waits at most for one allocation in progress, at its start.
//!
//! A ring's stream and events belong to its context: rings are kept per context, and freed
//! when it goes (`forget_context`, in the teardown callback, unpaced). A ring lent to a writer
//! when its context went is not kept nor freed: the driver took its buffers with the context,
//! whose handle a new context may have since (a `cudaDeviceReset`).

use std::sync::Mutex;

use kreplay_cuda::{CuResult, DownloadRing};

/// Buffers in a ring: two copies in flight while the writer compresses the third.
pub(crate) const SLOTS: usize = 3;

/// Bytes one staging buffer holds, at most. Each copy a writer starts is one buffer, and a
/// capture starting waits for those in flight (`quiet`): 16 MiB is about 0.3 ms at the 55 GB/s
/// of pinned device-to-host copies, and compression, not the bus, paces the writer.
pub(crate) const MOST_BYTES: usize = 16 << 20;

/// Bytes one staging buffer holds, at least (rings are sized in powers of two from here, so
/// captures of similar sizes share them).
const LEAST_BYTES: usize = 1 << 20;

/// Spare rings kept per context, at most (writers running at once are usually one or two).
const MOST_SPARES: usize = 2;

/// The spare rings, and how often each context id was forgotten.
struct Pool {
    /// (context, ring).
    spares: Vec<(usize, DownloadRing)>,
    /// (context, generation): how many times a context of that id was destroyed.
    forgotten: Vec<(usize, u64)>,
}

impl Pool {
    fn generation(&self, context: usize) -> u64 {
        self.forgotten
            .iter()
            .find(|(c, _)| *c == context)
            .map_or(0, |(_, g)| *g)
    }
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    spares: Vec::new(),
    forgotten: Vec::new(),
});

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A ring lent to a writer, with its context and that context's generation when lent.
pub(crate) struct Lent {
    pub ring: DownloadRing,
    context: usize,
    generation: u64,
}

/// The buffer size of a ring for a capture whose largest region in device scratch is
/// `largest` bytes, in chunks of at most `chunk` bytes (a copy is one chunk at least).
pub(crate) fn buffer_bytes(largest: u64, chunk: u64) -> usize {
    let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let for_chunk = size(chunk)
        .checked_next_power_of_two()
        .unwrap_or(usize::MAX);
    size(largest)
        .min(MOST_BYTES)
        .next_power_of_two()
        .clamp(LEAST_BYTES, MOST_BYTES)
        .max(for_chunk)
}

/// Which spare to take for `context` and `bytes` a buffer: the smallest of the context's that
/// holds `bytes`. `spares`: (context, buffer bytes) of each.
fn pick(spares: &[(usize, usize)], context: usize, bytes: usize) -> Option<usize> {
    spares
        .iter()
        .enumerate()
        .filter(|(_, &(c, b))| c == context && b >= bytes)
        .min_by_key(|(_, &(_, b))| b)
        .map(|(i, _)| i)
}

/// Which spare of `context` to free when it keeps more than `MOST_SPARES`: the smallest (only
/// the current context's: a ring's stream and events are destroyed there).
fn evict(spares: &[(usize, usize)], context: usize) -> Option<usize> {
    let of_context = spares.iter().filter(|&&(c, _)| c == context).count();
    if of_context <= MOST_SPARES {
        return None;
    }
    spares
        .iter()
        .enumerate()
        .filter(|(_, &(c, _))| c == context)
        .min_by_key(|(_, &(_, b))| b)
        .map(|(i, _)| i)
}

/// What becomes of a ring given back.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    /// Kept for a later writer of its context.
    Keep,
    /// Freed now.
    Free,
    /// Neither: its context was destroyed, which took the ring's resources with it.
    Gone,
}

/// The fate of a ring of `context` given back: `same_context` (no context of its id was
/// destroyed since it was lent), `landed` (the writer's work went well and its copies are
/// done).
fn fate(context: usize, same_context: bool, landed: bool) -> Fate {
    if !same_context {
        Fate::Gone
    } else if context == 0 || !landed {
        Fate::Free
    } else {
        Fate::Keep
    }
}

fn sizes(all: &[(usize, DownloadRing)]) -> Vec<(usize, usize)> {
    all.iter().map(|(c, r)| (*c, r.capacity())).collect()
}

/// A ring for the current context (`context`, its id; 0 when unknown: never kept) whose
/// buffers hold `bytes`: a spare, else a new one, made outside measured windows.
pub(crate) fn take(context: usize, bytes: usize) -> CuResult<Lent> {
    let generation = {
        let mut p = pool();
        let generation = p.generation(context);
        let found = (context != 0)
            .then(|| pick(&sizes(&p.spares), context, bytes))
            .flatten();
        if let Some(i) = found {
            crate::trace::trace("writer: staging ring reused");
            let ring = p.spares.remove(i).1;
            return Ok(Lent {
                ring,
                context,
                generation,
            });
        }
        generation
    };
    let ring = crate::quiet::outside_measurement(|| DownloadRing::new(SLOTS, bytes))?;
    crate::trace::trace("writer: staging ring made");
    Ok(Lent {
        ring,
        context,
        generation,
    })
}

/// Gives a writer's ring back (the current context is its own): kept for a later writer when
/// the writer's work `went_well` and every copy into it has landed, else freed; one too many
/// is freed; frees are outside measured windows. A ring whose context was destroyed since it
/// was lent is left alone (see the module comment).
pub(crate) fn give_back(lent: Lent, went_well: bool) {
    let Lent {
        ring,
        context,
        generation,
    } = lent;
    let landed = went_well && ring.quiesce().is_ok();
    let freed = {
        let mut p = pool();
        match fate(context, generation == p.generation(context), landed) {
            Fate::Gone => {
                std::mem::forget(ring);
                return;
            }
            Fate::Free => Some(ring),
            Fate::Keep => {
                p.spares.push((context, ring));
                evict(&sizes(&p.spares), context).map(|i| p.spares.remove(i).1)
            }
        }
    };
    if let Some(ring) = freed {
        crate::quiet::outside_measurement(|| drop(ring));
    }
}

/// Frees the rings kept for `context`, about to be destroyed (it is current; unpaced, see
/// `quiet::Pacing`), and marks rings lent for it as gone with it.
pub(crate) fn forget_context(context: usize) {
    let gone: Vec<(usize, DownloadRing)> = {
        let mut p = pool();
        match p.forgotten.iter_mut().find(|(c, _)| *c == context) {
            Some((_, g)) => *g += 1,
            None => p.forgotten.push((context, 1)),
        }
        let (gone, kept) = std::mem::take(&mut p.spares)
            .into_iter()
            .partition(|(c, _)| *c == context);
        p.spares = kept;
        gone
    };
    drop(gone);
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: rings sized per capture to the byte (no two captures sharing one), a ring
    // larger than the most a capture waits for in flight, a zero-sized one, or one smaller
    // than a chunk (a copy is a chunk at least, and a ring's copy carries its buffer's bytes
    // only: the rest would be lost without an error).
    #[test]
    fn ring_sizes_are_powers_of_two_within_the_bounds_and_hold_a_chunk() {
        let chunk = 64 << 10;
        assert_eq!(buffer_bytes(0, chunk), LEAST_BYTES);
        assert_eq!(buffer_bytes(1, chunk), LEAST_BYTES);
        assert_eq!(buffer_bytes(3 << 20, chunk), 4 << 20);
        assert_eq!(buffer_bytes(4 << 20, chunk), 4 << 20);
        assert_eq!(buffer_bytes((4 << 20) + 1, chunk), 8 << 20);
        assert_eq!(buffer_bytes(1 << 40, chunk), MOST_BYTES);
        assert_eq!(buffer_bytes(u64::MAX, chunk), MOST_BYTES);
        assert_eq!(buffer_bytes(1 << 20, 64 << 20), 64 << 20);
        assert_eq!(buffer_bytes(1 << 40, (24 << 20) + 1), 32 << 20);
    }

    // Catches: a ring of another context handed out (its stream and events belong there), a
    // ring too small taken (more copies than planned), or a large one taken when a smaller
    // one fits (the large one then missing for a large capture).
    #[test]
    fn the_smallest_fitting_ring_of_the_context_is_taken() {
        let spares = [(1, 16 << 20), (2, 4 << 20), (1, 4 << 20), (1, 2 << 20)];
        assert_eq!(pick(&spares, 1, 4 << 20), Some(2));
        assert_eq!(pick(&spares, 1, 8 << 20), Some(0));
        assert_eq!(pick(&spares, 2, 8 << 20), None);
        assert_eq!(pick(&spares, 3, 1), None);
        assert_eq!(pick(&[], 1, 1), None);
    }

    // Catches: a ring kept after its context was destroyed (a new context with the same
    // handle would copy into buffers the driver freed) or freed then (a double free), a ring
    // kept after a failed write (copies may be queued, the stream broken), or one of an
    // unknown context kept.
    #[test]
    fn a_ring_is_kept_only_from_a_live_known_context_after_its_copies_landed() {
        assert_eq!(fate(7, true, true), Fate::Keep);
        assert_eq!(fate(7, false, true), Fate::Gone);
        assert_eq!(fate(7, false, false), Fate::Gone);
        assert_eq!(fate(7, true, false), Fate::Free);
        assert_eq!(fate(0, true, true), Fate::Free);
    }

    // Catches: rings kept without bound (pinned host memory growing with every writer), the
    // largest freed first (the next large capture pinning again), or another context's ring
    // freed (its stream and events belong there).
    #[test]
    fn only_rings_past_the_most_are_freed_smallest_first_in_the_context() {
        assert_eq!(evict(&[(1, 4), (1, 8)], 1), None);
        assert_eq!(evict(&[(1, 4), (1, 8), (2, 2)], 1), None);
        assert_eq!(evict(&[(1, 4), (1, 8), (2, 2), (1, 16)], 1), Some(0));
        assert_eq!(evict(&[(1, 16), (1, 8), (1, 16)], 1), Some(1));
        assert_eq!(evict(&[(2, 1), (1, 16), (1, 8), (1, 16)], 1), Some(2));
    }
}
