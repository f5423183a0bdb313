//! Keeping the recorder's own GPU and driver work out of a capture's stall.
//!
//! The writer thread of one capture reads its snapshots back from device scratch while the
//! application runs on. When the application launches the next matching dispatch (`--count`),
//! that work would overlap the next capture: in the benchmark, launches measured during a
//! read-back took 4 to 5 times their real duration, and a writer pinning its staging ring or
//! freeing its scratch made the capture's own driver calls wait (a module's globals resolved,
//! the heap limit read: 7 to 57 ms once in three or four captures of a training step, H100).
//! So a capture holds a window from its stall's start to the end of its post phase, and the
//! writer starts each piece of device work (one copy, a free, a ring made or freed, its
//! comparison scan) only outside windows. A capture waits for the pieces in progress only (the
//! copies in flight land during its first context synchronisation; the copies of a writer of
//! another context are not waited for), never for the writer's host work (compression, the
//! disk) or its later pieces. A capture's own work in its stall and a context's teardown are
//! unpaced (`Pacing`).

use std::sync::{Condvar, Mutex, MutexGuard};

struct State {
    /// Measured windows open (captures on several application threads may overlap).
    measuring: u32,
    /// Measured windows waiting for a writer operation to end (they go first after it).
    waiting: u32,
    /// Writer operations in progress.
    reading: u32,
}

static STATE: Mutex<State> = Mutex::new(State {
    measuring: 0,
    waiting: 0,
    reading: 0,
});
static CHANGED: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn wait(guard: MutexGuard<'static, State>) -> MutexGuard<'static, State> {
    CHANGED.wait(guard).unwrap_or_else(|e| e.into_inner())
}

/// A capture's stall in progress; the writers' device work waits until it is dropped.
#[must_use]
pub struct Measuring(());

impl Drop for Measuring {
    fn drop(&mut self) {
        state().measuring -= 1;
        CHANGED.notify_all();
    }
}

/// Starts a window: waits for a piece of writer work in progress, then holds off new ones.
pub fn measure() -> Measuring {
    let mut s = state();
    // Another measured window (a capture on another thread) is not waited for: the two would
    // only serialise the application's threads; each still keeps the writer out.
    s.waiting += 1;
    while s.reading > 0 {
        s = wait(s);
    }
    s.waiting -= 1;
    s.measuring += 1;
    Measuring(())
}

/// A piece of the writer's device work in progress (a copy being started, a free, a ring
/// made); windows wait until it is dropped.
#[must_use]
pub struct Reading(());

impl Drop for Reading {
    fn drop(&mut self) {
        let mut s = state();
        s.reading -= 1;
        drop(s);
        CHANGED.notify_all();
    }
}

/// Starts a piece of the writer's device work: waits while a measured window is open or
/// waiting, then holds new ones off until the `Reading` is dropped.
pub fn reading() -> Reading {
    let mut s = state();
    while s.measuring > 0 || s.waiting > 0 {
        s = wait(s);
    }
    s.reading += 1;
    Reading(())
}

/// Runs one piece of the writer's device work (a read-back of device scratch, freeing it)
/// outside any measured window.
pub fn outside_measurement<T>(f: impl FnOnce() -> T) -> T {
    let _reading = reading();
    f()
}

/// Who runs a piece of kreplay's device work, which says whether it waits for windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacing {
    /// A writer thread, behind the application: outside any capture's window.
    Writer,
    /// A capture's own stall (the window is its own: waiting for it would never end), or a
    /// context's teardown (the context goes now; waiting there for another thread's stall
    /// could wait on the driver's lock, which the destroying thread may hold).
    Unpaced,
}

/// Runs `f` as `pacing` says: outside measured windows for a writer, at once otherwise.
pub fn paced<T>(pacing: Pacing, f: impl FnOnce() -> T) -> T {
    match pacing {
        Pacing::Writer => outside_measurement(f),
        Pacing::Unpaced => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    // One test for both directions: the state is process-wide.
    #[test]
    fn reads_wait_for_a_measured_window_and_windows_wait_for_reads() {
        let window = measure();
        let read = Arc::new(AtomicBool::new(false));
        let r = read.clone();
        let reader =
            std::thread::spawn(move || outside_measurement(|| r.store(true, Ordering::SeqCst)));
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !read.load(Ordering::SeqCst),
            "a read-back ran inside a measured window"
        );
        drop(window);
        reader.join().expect("reader thread");
        assert!(read.load(Ordering::SeqCst));

        // A read in progress delays the next window until it is done.
        let in_read = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        let (ir, fi) = (in_read.clone(), finished.clone());
        let reader = std::thread::spawn(move || {
            outside_measurement(|| {
                ir.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(80));
                fi.store(true, Ordering::SeqCst);
            })
        });
        while !in_read.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let window = measure();
        assert!(
            finished.load(Ordering::SeqCst),
            "a measured window began during a read-back"
        );
        drop(window);
        reader.join().expect("reader thread");

        // A window waiting for a read goes before reads that arrive after it.
        let t0 = std::time::Instant::now();
        let in_read = Arc::new(AtomicBool::new(false));
        let ir = in_read.clone();
        let first = std::thread::spawn(move || {
            outside_measurement(|| {
                ir.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(80));
            })
        });
        while !in_read.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let window = std::thread::spawn(move || {
            let w = measure();
            let opened = t0.elapsed();
            std::thread::sleep(Duration::from_millis(50));
            drop(w);
            opened
        });
        std::thread::sleep(Duration::from_millis(20));
        let second = std::thread::spawn(move || outside_measurement(|| t0.elapsed()));
        first.join().expect("first reader");
        let opened = window.join().expect("window thread");
        let second_ran = second.join().expect("second reader");
        assert!(
            second_ran > opened + Duration::from_millis(40),
            "a later read-back overtook a waiting measured window ({second_ran:?} vs {opened:?})"
        );
    }
}
