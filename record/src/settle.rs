//! Settling the GPU before the measured launch of a capture: the snapshot copies leave L2 full
//! of dirty lines and the clocks may be low, so read sweeps run until the sweep time is steady
//! (see `settle`). What was done is recorded as the capture's `TimingConditions`.

use std::time::Instant;

use kreplay_cuda::cache::L2Flush;
use kreplay_cuda::{Event, Stream};
use kreplay_format::TimingConditions;

use crate::device_resources::with_sweep;

/// Read sweeps over 4 x L2 run before the measured launch (see `settle`): at least this many,
const SETTLE_MIN_SWEEPS: u32 = 16;
/// (this many when the snapshot copies just kept the GPU busy for `BUSY_NS`: its clocks are up,
/// and two sweeps write back the copies' dirty lines and leave L2 empty),
const SETTLE_BUSY_MIN_SWEEPS: u32 = 2;
pub(crate) const BUSY_NS: u64 = 2_000_000;
/// and then more until two in a row take the same time within `SETTLE_STABLE`, up to this many
/// or this long (the application waits for the sweeps: after gigabytes of copies, power
/// management can keep the sweep times drifting for a hundred milliseconds; the capture then
/// says the clocks were not steady rather than stall the application for them).
const SETTLE_MAX_SWEEPS: u32 = 128;
const SETTLE_BUDGET: std::time::Duration = std::time::Duration::from_millis(2);
const SETTLE_STABLE: f64 = 0.02;
/// Before the measured launch: the snapshot copies left L2 full of dirty scratch lines, whose
/// write-backs would land inside the kernel's time, and the GPU may have idled at low clocks
/// (memory clocks drop within milliseconds of idling, e.g. while the application was stalled
/// by the capture before). Read sweeps over a buffer larger than L2 write those lines back and
/// keep the GPU busy until two sweeps in a row take the same time (the clocks are up), so the
/// in-app figure is the kernel's own duration with an empty L2 (what `kreplay play --cache
/// flush` replays: each timed sweep, the last ones, ends by discarding its own lines, see
/// `cache`; the untimed ones before them only read, `L2Flush::run_reads_only`). Skipped (and said
/// so) when device memory is short. `KREPLAY_DEBUG_SETTLE=0` turns it off (a measurement aid).
///
/// `ahead`: sweeps `sweep_ahead` already queued on `stream` (they count among the untimed).
pub(crate) fn settle(stream: &Stream, busy: bool, ahead: u32) -> Result<TimingConditions, String> {
    if disabled() {
        return Err("disabled".into());
    }
    with_sweep(|sweep| settle_with(sweep, stream, busy, ahead))
}

fn disabled() -> bool {
    std::env::var_os("KREPLAY_DEBUG_SETTLE").is_some_and(|v| v == "0")
}

/// Queues the settle's untimed sweeps on `stream` now, ahead of the host's own work before
/// the launch (the snapshots' bookkeeping: 0.6-1.6 ms for a pointer table's 10,000 regions
/// on the H200), which then overlaps them instead of preceding them. Call only once nothing
/// else will be copied before the launch (no region left to copy, no texture array to read):
/// the settle's two timed sweeps would still empty L2 after such a copy, but the sweeps
/// ahead would have been spent for nothing. Returns how many were queued (0: none, the
/// settle runs them all); `SweepsAhead::counted` says whether they still count when it
/// begins.
pub(crate) fn sweep_ahead(stream: &Stream) -> SweepsAhead {
    if disabled() {
        return SweepsAhead::none();
    }
    let queued = with_sweep(|sweep| {
        let mut n = 0;
        for _ in 0..untimed_sweeps(SETTLE_MIN_SWEEPS, 0) {
            if sweep.run_reads_only(stream).is_err() {
                break;
            }
            n += 1;
        }
        Ok(n)
    });
    crate::trace::trace("settle: untimed sweeps queued ahead");
    SweepsAhead {
        sweeps: queued.unwrap_or(0),
        queued: Instant::now(),
    }
}

/// Sweeps `sweep_ahead` queued, and when.
pub(crate) struct SweepsAhead {
    sweeps: u32,
    queued: Instant,
}

impl SweepsAhead {
    /// No sweep queued ahead.
    pub(crate) fn none() -> SweepsAhead {
        SweepsAhead {
            sweeps: 0,
            queued: Instant::now(),
        }
    }

    /// Whether no sweep was queued ahead.
    pub(crate) fn is_none(&self) -> bool {
        self.sweeps == 0
    }

    /// The sweeps that still count when the settle begins now (see `ahead_counts`).
    pub(crate) fn counted(&self) -> u32 {
        if ahead_counts(self.queued.elapsed()) {
            self.sweeps
        } else {
            0
        }
    }
}

/// Sweeps queued ahead `since` the settle begins: whether they still count (the GPU has idled
/// at most about `AHEAD_FRESH` minus their own run, so its clocks are still up). After a long
/// host gap the settle runs all its sweeps again. (No writer runs in between: the capture
/// holds them off from its start, see `quiet`.)
fn ahead_counts(since: std::time::Duration) -> bool {
    since <= AHEAD_FRESH
}

/// See `ahead_counts`: the 14 sweeps queued ahead run about 1.3 ms on the H200.
const AHEAD_FRESH: std::time::Duration = std::time::Duration::from_millis(3);

/// The untimed sweeps a settle of at least `min` sweeps runs itself, `ahead` having been
/// queued before (the last two are always timed).
fn untimed_sweeps(min: u32, ahead: u32) -> u32 {
    min.saturating_sub(2).saturating_sub(ahead)
}

fn settle_with(
    sweep: &L2Flush,
    stream: &Stream,
    busy: bool,
    ahead: u32,
) -> Result<TimingConditions, String> {
    let e = |e: kreplay_cuda::CudaError| e.to_string();
    let min = if busy {
        SETTLE_BUSY_MIN_SWEEPS
    } else {
        SETTLE_MIN_SWEEPS
    };
    // Untimed: reads only; the timed ones after them are whole and leave L2 empty.
    for _ in 0..untimed_sweeps(min, ahead) {
        sweep.run_reads_only(stream).map_err(e)?;
    }
    let (start, stop) = (Event::new().map_err(e)?, Event::new().map_err(e)?);
    let mut last: Option<u64> = None;
    let began = Instant::now();
    for n in min - 1..=SETTLE_MAX_SWEEPS {
        if n > min && began.elapsed() > SETTLE_BUDGET {
            return Ok(TimingConditions {
                settle_sweeps: n - 1,
                clocks_steady: false,
                l2_empty: sweep.empties(),
                skipped: None,
            });
        }
        start.record(stream).map_err(e)?;
        sweep.run(stream).map_err(e)?;
        stop.record(stream).map_err(e)?;
        stop.synchronize().map_err(e)?;
        let t = stop.elapsed_ns_since(&start).map_err(e)?;
        if let Some(prev) = last {
            if (t as f64 - prev as f64).abs() <= SETTLE_STABLE * prev as f64 {
                return Ok(TimingConditions {
                    settle_sweeps: n,
                    clocks_steady: true,
                    l2_empty: sweep.empties(),
                    skipped: None,
                });
            }
        }
        last = Some(t);
    }
    Ok(TimingConditions {
        settle_sweeps: SETTLE_MAX_SWEEPS,
        clocks_steady: false,
        l2_empty: sweep.empties(),
        skipped: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: sweeps queued long before the settle (the GPU idled since, its clocks may have
    // dropped) counted as done.
    #[test]
    fn sweeps_queued_ahead_count_only_while_fresh() {
        let ms = std::time::Duration::from_millis;
        assert!(ahead_counts(ms(2)));
        assert!(ahead_counts(AHEAD_FRESH));
        assert!(!ahead_counts(ms(4)), "idle too long");
    }

    // Catches: sweeps queued ahead run again by the settle (the stall they were to hide paid
    // twice), or the two timed sweeps skipped when many were queued ahead.
    #[test]
    fn sweeps_queued_ahead_count_among_the_untimed_only() {
        assert_eq!(untimed_sweeps(SETTLE_MIN_SWEEPS, 0), SETTLE_MIN_SWEEPS - 2);
        assert_eq!(untimed_sweeps(SETTLE_MIN_SWEEPS, SETTLE_MIN_SWEEPS - 2), 0);
        assert_eq!(untimed_sweeps(SETTLE_MIN_SWEEPS, 5), SETTLE_MIN_SWEEPS - 7);
        assert_eq!(untimed_sweeps(SETTLE_BUSY_MIN_SWEEPS, 14), 0);
        assert_eq!(untimed_sweeps(0, 0), 0);
    }
}
