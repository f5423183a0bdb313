//! What a profiled dispatch made for its passes, kept per context for the next one: its pass
//! timer, its pass stream, and its device buffers (the pristine copy, the first pass's output,
//! the output check's flags). Each was made and freed per dispatch: `cuMemHostAlloc` of the
//! timer's gate word, `cuMemAlloc` of every copy, and the frees, `cuMemFreeHost` and
//! `cuMemFree` waiting for the whole context; together most of `profile`'s fixed cost once the
//! pointer walk ran on the GPU (#34). A training step profiles the same shapes again and again,
//! so a buffer of the very size asked for is usually there.
//!
//! Buffers are reused only at their exact size (callers read `len()`). At most
//! `kept_cap(total)` bytes and `KEPT_BUFFERS` of them are kept per context, the oldest freed
//! first, and one is kept only while device memory stays as free as scratch must leave it
//! (`scratch_allowed`), so the application never has much less device memory than without
//! kreplay. A timer that could not gate (its device cannot wait on memory) is not kept.

use std::sync::Mutex;

use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{memory_info, ContextHandle, CuResult, DeviceBuffer, Stream};

/// Timers and streams kept per context, at most (one dispatch in flight per thread needs one).
const KEPT_HANDLES: usize = 4;
/// Device bytes kept per context, at most, whatever the device's size.
const KEPT_BYTES_MAX: u64 = 256 << 20;
/// Buffers kept per context, at most: a dispatch reaching thousands of small regions would
/// otherwise leave thousands, searched one by one.
const KEPT_BUFFERS: usize = 64;

/// The most device bytes kept per context on a device of `total` bytes: 1/64 of it, up to
/// `KEPT_BYTES_MAX` (256 MiB of an 80 GiB GPU, 128 MiB of an 8 GiB one).
pub(crate) fn kept_cap(total: u64) -> u64 {
    (total / 64).min(KEPT_BYTES_MAX)
}

/// Spare things of one context, oldest first.
struct Spares<B, T, S> {
    buffers: Vec<B>,
    buffer_bytes: u64,
    timers: Vec<T>,
    streams: Vec<S>,
    cap: u64,
}

impl<B, T, S> Spares<B, T, S> {
    /// Nothing kept yet; at most `cap` bytes of buffers.
    fn new(cap: u64) -> Spares<B, T, S> {
        Spares {
            buffers: Vec::new(),
            buffer_bytes: 0,
            timers: Vec::new(),
            streams: Vec::new(),
            cap,
        }
    }

    /// The spare buffer of exactly `len` bytes, if there is one (`len_of` tells a buffer's).
    fn take_buffer(&mut self, len: u64, len_of: impl Fn(&B) -> u64) -> Option<B> {
        let at = self.buffers.iter().rposition(|b| len_of(b) == len)?;
        self.buffer_bytes -= len;
        Some(self.buffers.remove(at))
    }

    /// Keeps `buffer` (`len` bytes) and hands back what no longer fits, oldest first: the
    /// buffers to free. A buffer larger than the cap is handed back itself.
    fn give_buffer(&mut self, buffer: B, len: u64, len_of: impl Fn(&B) -> u64) -> Vec<B> {
        if len > self.cap || len == 0 {
            return vec![buffer];
        }
        let mut freed = Vec::new();
        while (self.buffer_bytes + len > self.cap || self.buffers.len() >= KEPT_BUFFERS)
            && !self.buffers.is_empty()
        {
            let old = self.buffers.remove(0);
            self.buffer_bytes -= len_of(&old);
            freed.push(old);
        }
        self.buffers.push(buffer);
        self.buffer_bytes += len;
        freed
    }
}

/// Keeps `item` in `list` unless it holds `KEPT_HANDLES` already (then it is handed back).
fn keep_handle<T>(list: &mut Vec<T>, item: T) -> Option<T> {
    if list.len() >= KEPT_HANDLES {
        return Some(item);
    }
    list.push(item);
    None
}

type ContextSpares = Spares<DeviceBuffer, GatedTimer, Stream>;

// SAFETY of sharing: the buffers, timers and streams are driver objects of one context, used
// only with that context current (the entry's key); nothing in them has thread affinity.
struct Entry(usize, ContextSpares);
// SAFETY: see above: driver handles, valid from any thread that makes their context current.
unsafe impl Send for Entry {}

static SPARES: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Runs `f` on the current context's spares (made empty on first use); `None` where the
/// current context cannot be told.
fn with_spares<R>(f: impl FnOnce(&mut ContextSpares) -> R) -> Option<R> {
    let ctx = ContextHandle::current().ok()?.id();
    let known = |all: &[Entry]| all.iter().position(|e| e.0 == ctx);
    let mut all = SPARES.lock().unwrap_or_else(|e| e.into_inner());
    let at = match known(&all) {
        Some(i) => i,
        None => {
            // The driver is asked with the lock let go (this lock is never held across a
            // driver call).
            drop(all);
            let cap = memory_info().map_or(0, |(_, total)| kept_cap(total));
            all = SPARES.lock().unwrap_or_else(|e| e.into_inner());
            match known(&all) {
                Some(i) => i,
                None => {
                    all.push(Entry(ctx, Spares::new(cap)));
                    all.len() - 1
                }
            }
        }
    };
    Some(f(&mut all[at].1))
}

fn buffer_len(b: &DeviceBuffer) -> u64 {
    b.len() as u64
}

/// A device buffer of exactly `len` bytes kept from an earlier dispatch of this context, if
/// there is one. Its bytes are whatever was left there.
pub(crate) fn spare_buffer(len: u64) -> Option<DeviceBuffer> {
    with_spares(|s| s.take_buffer(len, buffer_len)).flatten()
}

/// A device buffer of exactly `len` bytes: a spare when the context keeps one, else a new one.
pub(crate) fn device_buffer(len: u64) -> CuResult<DeviceBuffer> {
    match spare_buffer(len) {
        Some(b) => Ok(b),
        None => DeviceBuffer::new(len as usize),
    }
}

/// Keeps `buffers` for a later dispatch of the current context (or frees them, or older ones,
/// to stay within the cap): all of them only while device memory stays as free as scratch
/// must leave it, asked once. Call once nothing queued uses them any more.
pub(crate) fn return_buffers(buffers: Vec<DeviceBuffer>) {
    let total: u64 = buffers.iter().map(buffer_len).sum();
    if !crate::scratch_rule::scratch_allowed(total) {
        return; // device memory is getting short: freed now
    }
    // Freed after the lock is let go: `cuMemFree` waits for the context.
    let freed = with_spares(|s| {
        let mut freed = Vec::new();
        for b in buffers {
            let len = buffer_len(&b);
            freed.extend(s.give_buffer(b, len, buffer_len));
        }
        freed
    });
    drop(freed);
}

/// A pass timer: one kept from an earlier dispatch of this context, or a new one.
pub(crate) fn spare_timer() -> CuResult<GatedTimer> {
    match with_spares(|s| s.timers.pop()).flatten() {
        Some(t) => Ok(t),
        None => GatedTimer::new(),
    }
}

/// Keeps `timer` (its window finished) for a later dispatch of the current context.
pub(crate) fn return_timer(mut timer: GatedTimer) {
    timer.release();
    if !timer.is_gated() {
        return;
    }
    let extra = with_spares(|s| keep_handle(&mut s.timers, timer));
    drop(extra);
}

/// A stream of kreplay's own: one kept from an earlier dispatch of this context, or a new one.
pub(crate) fn spare_stream() -> CuResult<Stream> {
    match with_spares(|s| s.streams.pop()).flatten() {
        Some(s) => Ok(s),
        None => Stream::new(),
    }
}

/// Keeps `stream` (synchronised: nothing of it still queued) for a later dispatch.
pub(crate) fn return_stream(stream: Stream) {
    let extra = with_spares(|s| keep_handle(&mut s.streams, stream));
    drop(extra);
}

/// Frees what was kept for `context`, about to be destroyed.
pub(crate) fn forget_context(context: usize) {
    let gone: Vec<Entry> = {
        let mut all = SPARES.lock().unwrap_or_else(|e| e.into_inner());
        let (gone, kept) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|e| e.0 == context);
        *all = kept;
        gone
    };
    drop(gone);
}

#[cfg(test)]
mod tests {
    use super::*;

    type Plain = Spares<u64, (), ()>;

    fn pool(cap: u64) -> Plain {
        Spares::new(cap)
    }

    fn len(b: &u64) -> u64 {
        *b
    }

    // Catches: a buffer of another size handed out (a pristine copy then restores too few
    // bytes or writes past a region), or the byte count not following what was taken.
    #[test]
    fn only_a_buffer_of_the_exact_size_is_taken() {
        let mut p = pool(1000);
        assert!(p.give_buffer(100, 100, len).is_empty());
        assert!(p.give_buffer(200, 200, len).is_empty());
        assert_eq!(p.take_buffer(150, len), None);
        assert_eq!(p.take_buffer(200, len), Some(200));
        assert_eq!(p.buffer_bytes, 100);
        assert_eq!(p.take_buffer(200, len), None, "taken once");
    }

    // Catches: the cap not held (the pool growing with every new shape), the newest evicted
    // instead of the oldest, or a buffer larger than the cap kept.
    #[test]
    fn the_oldest_are_freed_to_stay_within_the_cap() {
        let mut p = pool(300);
        assert!(p.give_buffer(100, 100, len).is_empty());
        assert!(p.give_buffer(150, 150, len).is_empty());
        assert_eq!(p.give_buffer(120, 120, len), vec![100]);
        assert_eq!(p.buffers, vec![150, 120]);
        assert_eq!(p.buffer_bytes, 270);
        assert_eq!(
            p.give_buffer(400, 400, len),
            vec![400],
            "larger than the cap"
        );
        assert_eq!(p.buffer_bytes, 270);
        assert_eq!(
            pool(0).give_buffer(1, 1, len),
            vec![1],
            "nothing kept with no cap"
        );
        assert_eq!(
            pool(300).give_buffer(0, 0, len),
            vec![0],
            "an empty one is not kept"
        );
    }

    // Catches: thousands of small buffers kept (each later take searches them all).
    #[test]
    fn at_most_a_few_dozen_buffers_are_kept() {
        let mut p = pool(1 << 40);
        let mut freed = Vec::new();
        for i in 1..=(KEPT_BUFFERS as u64 + 10) {
            freed.extend(p.give_buffer(i, i, len));
        }
        assert_eq!(p.buffers.len(), KEPT_BUFFERS);
        assert_eq!(freed, (1..=10).collect::<Vec<u64>>(), "the oldest go");
        assert_eq!(p.buffer_bytes, p.buffers.iter().sum::<u64>());
    }

    #[test]
    fn handles_are_kept_up_to_a_few() {
        let mut list = Vec::new();
        for i in 0..KEPT_HANDLES {
            assert_eq!(keep_handle(&mut list, i), None);
        }
        assert_eq!(keep_handle(&mut list, 99), Some(99));
        assert_eq!(list.len(), KEPT_HANDLES);
    }

    #[test]
    fn the_cap_is_a_64th_of_the_device_up_to_256_mib() {
        assert_eq!(kept_cap(8 << 30), 128 << 20);
        assert_eq!(kept_cap(141 << 30), KEPT_BYTES_MAX);
        assert_eq!(kept_cap(0), 0);
    }
}
