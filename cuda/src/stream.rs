//! Streams and events. kreplay's own streams are `Stream`s; a stream handle the application
//! passed to a launch becomes a `ForeignStream` only through `unsafe fn from_raw`, whose
//! contract says it is live. Everything that queues work takes either through `AsStream`.

use std::ptr;

use crate::error::{check, CuResult};
use crate::sys;

mod sealed {
    pub trait Sealed {}
}

/// A stream work can be queued on: ours, or the application's.
pub trait AsStream: sealed::Sealed {
    #[doc(hidden)]
    fn raw_stream(&self) -> sys::CUstream;
}

/// A non-blocking stream owned by kreplay.
pub struct Stream {
    raw: sys::CUstream,
}

impl Stream {
    pub fn new() -> CuResult<Stream> {
        let mut s = ptr::null_mut();
        // SAFETY: writes one stream handle; flag 1 = CU_STREAM_NON_BLOCKING.
        check(unsafe { sys::cuStreamCreate(&mut s, 1) }, "cuStreamCreate")?;
        Ok(Stream { raw: s })
    }

    /// A non-blocking stream of `priority` (`cuStreamCreateWithPriority`; the driver clamps
    /// it to the device's range), for a replay of an application's stream.
    pub fn with_priority(priority: i32) -> CuResult<Stream> {
        let mut s = ptr::null_mut();
        check(
            // SAFETY: writes one stream handle; flag 1 = CU_STREAM_NON_BLOCKING.
            unsafe { sys::cuStreamCreateWithPriority(&mut s, 1, priority) },
            "cuStreamCreateWithPriority",
        )?;
        Ok(Stream { raw: s })
    }

    pub fn synchronize(&self) -> CuResult<()> {
        // SAFETY: a valid stream owned by self.
        check(
            unsafe { sys::cuStreamSynchronize(self.raw) },
            "cuStreamSynchronize",
        )
    }
}

impl sealed::Sealed for Stream {}
impl AsStream for Stream {
    fn raw_stream(&self) -> sys::CUstream {
        self.raw
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: destroys the stream created in `new`.
        unsafe {
            sys::cuStreamDestroy_v2(self.raw);
        }
    }
}

/// A stream of the application (borrowed, never destroyed).
#[derive(Clone, Copy)]
pub struct ForeignStream(sys::CUstream);

impl ForeignStream {
    /// # Safety
    /// `raw` must be a stream handle the application is using in the current context (or one
    /// of the special handles: null, `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`), live for as
    /// long as this value is used.
    pub unsafe fn from_raw(raw: sys::CUstream) -> ForeignStream {
        ForeignStream(raw)
    }

    /// Whether the stream is being captured into a graph.
    pub fn is_capturing(&self) -> CuResult<bool> {
        let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        check(
            // SAFETY: writes one status; the handle is live by `from_raw`'s contract.
            unsafe { sys::cuStreamIsCapturing(self.0, &mut st) },
            "cuStreamIsCapturing",
        )?;
        Ok(st != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// `cuStreamGetFlags` (1: non-blocking).
    pub fn flags(&self) -> CuResult<u32> {
        let mut flags = 0u32;
        check(
            // SAFETY: writes one word; the handle is live by `from_raw`'s contract.
            unsafe { sys::cuStreamGetFlags(self.0, &mut flags) },
            "cuStreamGetFlags",
        )?;
        Ok(flags)
    }

    /// `cuStreamGetPriority`.
    pub fn priority(&self) -> CuResult<i32> {
        let mut priority = 0i32;
        check(
            // SAFETY: writes one word; the handle is live by `from_raw`'s contract.
            unsafe { sys::cuStreamGetPriority(self.0, &mut priority) },
            "cuStreamGetPriority",
        )?;
        Ok(priority)
    }
}

impl sealed::Sealed for ForeignStream {}
impl AsStream for ForeignStream {
    fn raw_stream(&self) -> sys::CUstream {
        self.0
    }
}

/// A CUDA event (timing enabled).
pub struct Event {
    raw: sys::CUevent,
}

// SAFETY: an event is an opaque token the driver accepts from any thread.
unsafe impl Send for Event {}

impl Event {
    pub fn new() -> CuResult<Event> {
        let mut e = ptr::null_mut();
        // SAFETY: writes one event handle; flags 0 = default (timing enabled).
        check(unsafe { sys::cuEventCreate(&mut e, 0) }, "cuEventCreate")?;
        Ok(Event { raw: e })
    }

    /// An event for ordering only (`CU_EVENT_DISABLE_TIMING`: cheaper to record and wait on).
    pub fn untimed() -> CuResult<Event> {
        let mut e = ptr::null_mut();
        // SAFETY: writes one event handle; flag 2 = CU_EVENT_DISABLE_TIMING.
        check(unsafe { sys::cuEventCreate(&mut e, 2) }, "cuEventCreate")?;
        Ok(Event { raw: e })
    }

    /// Records on a stream (ours or the application's).
    pub fn record(&self, stream: &impl AsStream) -> CuResult<()> {
        // SAFETY: valid event; the stream is live (ours, or by ForeignStream's contract).
        check(
            unsafe { sys::cuEventRecord(self.raw, stream.raw_stream()) },
            "cuEventRecord",
        )
    }

    pub fn synchronize(&self) -> CuResult<()> {
        // SAFETY: valid event.
        check(
            unsafe { sys::cuEventSynchronize(self.raw) },
            "cuEventSynchronize",
        )
    }

    /// Nanoseconds from `start` to `self` (both recorded and complete).
    pub fn elapsed_ns_since(&self, start: &Event) -> CuResult<u64> {
        let mut ms = 0f32;
        check(
            // SAFETY: both events are valid and recorded.
            unsafe { sys::cuEventElapsedTime_v2(&mut ms, start.raw, self.raw) },
            "cuEventElapsedTime",
        )?;
        Ok((ms as f64 * 1e6).round() as u64)
    }

    pub(crate) fn raw(&self) -> sys::CUevent {
        self.raw
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: destroys the event created in `new`.
        unsafe {
            sys::cuEventDestroy_v2(self.raw);
        }
    }
}
