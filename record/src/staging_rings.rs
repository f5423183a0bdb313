//! The writers' rings of page-locked staging buffers, kept between captures. A writer made
//! its ring for each capture (`cuMemHostAlloc` of up to three 64 MiB buffers, then
//! `cuMemFreeHost`): pinning takes the driver tens of milliseconds, beside the next capture's
//! stall, whose driver calls waited for it (a training step's captures once in three or four
//! stalled 7 to 57 ms in the walk, on an H100, #34). So a writer takes a spare ring of its
//! context, gives it back, and rings are made and freed only outside measured windows
//! (`quiet`): a capture waits at most for one allocation in progress, at its start.
//!
//! A ring's stream and events belong to its context: rings are kept per context, and freed
//! before it goes (`forget_context`).

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

/// Spare rings: (context, ring).
static SPARES: Mutex<Vec<(usize, DownloadRing)>> = Mutex::new(Vec::new());

fn spares() -> std::sync::MutexGuard<'static, Vec<(usize, DownloadRing)>> {
    SPARES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The buffer size of a ring for a capture whose largest region in device scratch is
/// `largest` bytes.
pub(crate) fn buffer_bytes(largest: u64) -> usize {
    let largest = usize::try_from(largest).unwrap_or(usize::MAX);
    largest
        .min(MOST_BYTES)
        .next_power_of_two()
        .clamp(LEAST_BYTES, MOST_BYTES)
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

fn sizes(all: &[(usize, DownloadRing)]) -> Vec<(usize, usize)> {
    all.iter().map(|(c, r)| (*c, r.capacity())).collect()
}

/// A ring for the current context (`context`, its id; 0 when unknown: never kept) whose
/// buffers hold `bytes`: a spare, else a new one, made outside measured windows.
pub(crate) fn take(context: usize, bytes: usize) -> CuResult<DownloadRing> {
    if context != 0 {
        let mut all = spares();
        if let Some(i) = pick(&sizes(&all), context, bytes) {
            crate::trace::trace("writer: staging ring reused");
            return Ok(all.remove(i).1);
        }
    }
    let ring = crate::quiet::outside_measurement(|| DownloadRing::new(SLOTS, bytes));
    crate::trace::trace("writer: staging ring made");
    ring
}

/// Keeps `ring` (of the current context, `context`) for a later writer; one too many is freed,
/// outside measured windows.
pub(crate) fn give_back(context: usize, ring: DownloadRing) {
    let freed = if context == 0 {
        Some(ring)
    } else {
        let mut all = spares();
        all.push((context, ring));
        evict(&sizes(&all), context).map(|i| all.remove(i).1)
    };
    if let Some(ring) = freed {
        crate::quiet::outside_measurement(|| drop(ring));
    }
}

/// Frees the rings kept for `context`, about to be destroyed (it is current).
pub(crate) fn forget_context(context: usize) {
    let gone: Vec<(usize, DownloadRing)> = {
        let mut all = spares();
        let (gone, kept) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|(c, _)| *c == context);
        *all = kept;
        gone
    };
    drop(gone);
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: rings sized per capture to the byte (no two captures sharing one), a ring
    // larger than the most a capture waits for in flight, or a zero-sized one.
    #[test]
    fn ring_sizes_are_powers_of_two_within_the_bounds() {
        assert_eq!(buffer_bytes(0), LEAST_BYTES);
        assert_eq!(buffer_bytes(1), LEAST_BYTES);
        assert_eq!(buffer_bytes(3 << 20), 4 << 20);
        assert_eq!(buffer_bytes(4 << 20), 4 << 20);
        assert_eq!(buffer_bytes((4 << 20) + 1), 8 << 20);
        assert_eq!(buffer_bytes(1 << 40), MOST_BYTES);
        assert_eq!(buffer_bytes(u64::MAX), MOST_BYTES);
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

    // Catches: rings kept without bound (pinned host memory growing with every writer), or
    // the largest freed first (the next large capture pinning again).
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
