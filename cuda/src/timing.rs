//! Kernel timing without launch overhead. Events recorded around a launch also measure the
//! CPU time the launch call takes to submit the kernel (and, in the recorder, the CUPTI
//! callback), because the GPU reaches the start event long before the kernel arrives.
//! `GatedTimer` holds the stream on a host-written flag, records the start event behind the
//! gate, lets the launch be queued, records the stop event, then opens the gate: start,
//! kernel and stop then run back to back on the GPU.
//!
//! A watchdog opens the gate after `WATCHDOG` in any case, so a launch that synchronises
//! internally (a local-memory resize, for instance) cannot deadlock on our gate. The watchdog
//! touches the word only under a lock and only while it is allocated: the context may be gone
//! by the time it wakes.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{check, CuResult};
use crate::stream::{AsStream, Event};
use crate::sys;

const WATCHDOG: Duration = Duration::from_millis(200);

/// One 4-byte word of mapped, page-locked host memory the GPU polls, plus the lock that keeps
/// the watchdog from touching it once the gate was opened (or the word freed).
struct Gate {
    /// Host address of the word, or 0 once freed.
    host: Mutex<usize>,
    device: u64,
}

impl Gate {
    fn new() -> CuResult<Gate> {
        let mut host = ptr::null_mut();
        check(
            // SAFETY: allocates 4 bytes of portable (1), device-mapped (2) pinned memory.
            unsafe { sys::cuMemHostAlloc(&mut host, 4, 1 | 2) },
            "cuMemHostAlloc",
        )?;
        // SAFETY: host points to 4 writable bytes just allocated.
        unsafe { (host as *mut u32).write_volatile(0) };
        let mut device = 0;
        // SAFETY: host is a mapped pinned allocation.
        let r = check(
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) },
            "cuMemHostGetDevicePointer",
        );
        if let Err(e) = r {
            // SAFETY: frees the allocation made above.
            unsafe { sys::cuMemFreeHost(host) };
            return Err(e);
        }
        Ok(Gate {
            host: Mutex::new(host as usize),
            device,
        })
    }

    /// Raises the word to at least `value`, unless it was freed.
    fn open(&self, value: u32) {
        let host = self.host.lock().unwrap_or_else(|e| e.into_inner());
        if *host != 0 {
            // SAFETY: the word is live (not freed: checked under the lock that `free` takes)
            // and 4-byte aligned pinned memory.
            let a = unsafe { &*(*host as *const AtomicU32) };
            a.fetch_max(value, Ordering::SeqCst);
        }
    }

    /// Frees the word. The address is taken out under the lock and freed after it is
    /// released: `cuMemFreeHost` synchronises the context, which waits for every gate armed
    /// on it, and the watchdog opens those while it holds its queue and then each gate's lock
    /// in turn; freeing under this lock deadlocked whenever another gate was still armed.
    fn free(&self) {
        let host = take_word(&mut self.host.lock().unwrap_or_else(|e| e.into_inner()));
        if host != 0 {
            // SAFETY: frees the allocation made in `new`, once (`take_word` zeroed the
            // address under the lock, so the watchdog, which checks it under that lock
            // before every access, touches it no more).
            unsafe { sys::cuMemFreeHost(host as *mut c_void) };
        }
    }
}

/// The gate word's address, left as 0 (freed) for everyone who looks after.
fn take_word(host: &mut usize) -> usize {
    std::mem::take(host)
}

/// One thread opens every armed gate once its `WATCHDOG` delay passed (a thread spawned per
/// arm cost tens of microseconds, paid by every pass of in-process replay).
mod watchdog {
    use std::sync::{Arc, Condvar, Mutex, OnceLock};
    use std::time::Instant;

    use super::{Gate, WATCHDOG};

    struct Queue {
        due: Mutex<Vec<(Instant, Arc<Gate>, u32)>>,
        wake: Condvar,
    }

    fn queue() -> Option<&'static Queue> {
        static Q: OnceLock<Option<&'static Queue>> = OnceLock::new();
        *Q.get_or_init(|| {
            let q: &'static Queue = Box::leak(Box::new(Queue {
                due: Mutex::new(Vec::new()),
                wake: Condvar::new(),
            }));
            std::thread::Builder::new()
                .name("kreplay-gate".into())
                .spawn(move || run(q))
                .ok()
                .map(|_| q)
        })
    }

    fn run(q: &'static Queue) {
        let mut due = q.due.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            due.retain(|(at, gate, value)| {
                let open = *at <= now;
                if open {
                    gate.open(*value);
                }
                !open
            });
            due = match due.iter().map(|(at, ..)| *at).min() {
                None => q.wake.wait(due).unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    q.wake
                        .wait_timeout(due, at.saturating_duration_since(now))
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }

    /// Opens `gate` to `value` after `WATCHDOG`; false when no watchdog thread could start.
    pub(super) fn schedule(gate: Arc<Gate>, value: u32) -> bool {
        let Some(q) = queue() else { return false };
        q.due.lock().unwrap_or_else(|e| e.into_inner()).push((
            Instant::now() + WATCHDOG,
            gate,
            value,
        ));
        q.wake.notify_one();
        true
    }
}

/// Times one launch at a time on one stream.
pub struct GatedTimer {
    word: Option<Arc<Gate>>,
    next: u32,
    armed: bool,
    start: Event,
    stop: Event,
}

impl GatedTimer {
    /// Falls back to plain events when the device cannot wait on memory.
    pub fn new() -> CuResult<GatedTimer> {
        Ok(GatedTimer {
            word: Gate::new().ok().map(Arc::new),
            next: 0,
            armed: false,
            start: Event::new()?,
            stop: Event::new()?,
        })
    }

    /// Call before the launch is queued on `stream`.
    pub fn arm(&mut self, stream: &impl AsStream) -> CuResult<()> {
        if let Some(word) = &self.word {
            self.next = self.next.wrapping_add(1).max(1);
            // SAFETY: waits on our own mapped word (GEQ flag 0) on a live stream.
            let r = unsafe {
                sys::cuStreamWaitValue32_v2(stream.raw_stream(), word.device, self.next, 0)
            };
            if check(r, "cuStreamWaitValue32").is_ok() {
                self.armed = true;
                if !watchdog::schedule(Arc::clone(word), self.next) {
                    word.open(self.next);
                    self.armed = false;
                }
            } else {
                self.word = None;
            }
        }
        self.start.record(stream)
    }

    /// Call after the launch was queued on `stream`.
    pub fn finish(&mut self, stream: &impl AsStream) -> CuResult<()> {
        let r = self.stop.record(stream);
        self.open();
        r
    }

    /// Opens the gate before `finish`: the host is about to wait for work queued behind it
    /// (a range's host-wait step), which would otherwise stall until the watchdog.
    pub fn release(&mut self) {
        self.open();
    }

    fn open(&mut self) {
        if self.armed {
            if let Some(w) = &self.word {
                w.open(self.next);
            }
            self.armed = false;
        }
    }

    /// Whether the gate is in use (else the figure includes launch overhead).
    pub fn is_gated(&self) -> bool {
        self.word.is_some()
    }

    /// The start event of the last window (where it lies on a trace's GPU-time axis).
    pub fn start_event(&self) -> &Event {
        &self.start
    }

    /// Waits for the stop event and returns the kernel time in nanoseconds.
    pub fn elapsed_ns(&self) -> CuResult<u64> {
        self.stop.synchronize()?;
        self.stop.elapsed_ns_since(&self.start)
    }
}

impl Drop for GatedTimer {
    fn drop(&mut self) {
        self.open();
        // Free now, while the context surely lives; a watchdog still sleeping finds the word
        // gone and touches nothing.
        if let Some(w) = &self.word {
            w.free();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_is_taken_once_and_left_freed() {
        let mut host = 0x1000usize;
        assert_eq!(take_word(&mut host), 0x1000);
        assert_eq!(host, 0, "the watchdog finds it freed");
        assert_eq!(take_word(&mut host), 0, "a second free frees nothing");
    }
}
