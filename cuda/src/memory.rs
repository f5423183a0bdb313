//! Device and pinned host memory, and copies between them.
//!
//! Device addresses are plain `u64` numbers, and the functions that take one are `unsafe fn`:
//! under unified addressing a device address can be this process's own host memory (pinned,
//! registered or managed), so a copy to a wrong address can overwrite Rust-owned memory, and a
//! copy from one can race with a thread writing it. The driver checks only that the range is
//! mapped for the device. The contracts, referred to by the functions below:
//!
//! - *writable*: `[addr, addr + len)` is memory the caller may overwrite: device memory, or
//!   host memory mapped for the device that no Rust reference in this process borrows and no
//!   other thread reads or writes until the copy completes.
//! - *readable*: `[addr, addr + len)` is device memory, or host memory mapped for the device
//!   that nothing writes until the copy completes.
//!
//! Addresses of this crate's own allocations (`DeviceBuffer::ptr`, `PinnedBuffer::device_ptr`)
//! meet both for the allocation's length.

use std::ffi::c_void;
use std::ptr;

use crate::error::{check, CuResult};
use crate::stream::{AsStream, Event, Stream};
use crate::sys;

/// Plain device memory (`cuMemAlloc`).
pub struct DeviceBuffer {
    ptr: u64,
    len: usize,
}

impl DeviceBuffer {
    pub fn new(len: usize) -> CuResult<DeviceBuffer> {
        let mut p = 0;
        check(
            // SAFETY: the only pointer is to a local u64 (CUdeviceptr); the allocation it names
            // is owned by the returned buffer.
            unsafe { sys::cuMemAlloc_v2(&mut p, len.max(1)) },
            "cuMemAlloc",
        )?;
        crate::owned::note_alloc(p, len);
        Ok(DeviceBuffer { ptr: p, len })
    }

    /// Gives the allocation up without freeing it (a kernel may still write there): it stays
    /// allocated for the process's life, or until its context is destroyed, and leaves the
    /// table of kreplay's own memory, whose entry would outlive a destroyed context and hide
    /// an application allocation made later at the same address (`owned`).
    pub fn leak(self) {
        crate::owned::note_free(self.ptr);
        std::mem::forget(self);
    }

    /// Device address of the first byte.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets every byte to `value`, on the legacy default stream (asynchronous to the host
    /// like `cuMemsetD8`: a stream that does not synchronise with the legacy one must be
    /// ordered after it by the caller).
    pub fn fill(&self, value: u8) -> CuResult<()> {
        // SAFETY: our own allocation of `len` bytes.
        check(
            unsafe { sys::cuMemsetD8_v2(self.ptr, value, self.len) },
            "cuMemsetD8",
        )
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        crate::owned::note_free(self.ptr);
        // SAFETY: frees the allocation made in `new`.
        unsafe {
            sys::cuMemFree_v2(self.ptr);
        }
    }
}

/// Page-locked host memory (`cuMemHostAlloc`): full-speed DMA in both directions.
pub struct PinnedBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain bytes owned by this value; the driver does not retain it
// beyond the synchronous copies made through it.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    pub fn new(len: usize) -> CuResult<PinnedBuffer> {
        let mut p = ptr::null_mut();
        check(
            // SAFETY: writes one host pointer to len bytes (portable flag 1).
            unsafe { sys::cuMemHostAlloc(&mut p, len.max(1), 1) },
            "cuMemHostAlloc",
        )?;
        // Under unified addressing the host address is also the device's.
        crate::owned::note_alloc(p as u64, len);
        Ok(PinnedBuffer {
            ptr: p as *mut u8,
            len,
        })
    }

    /// Page-locked memory kernels can reach (zero-copy): for host-mapped regions moved by
    /// a replay. Its device address is `device_ptr`.
    pub fn mapped(len: usize) -> CuResult<PinnedBuffer> {
        let mut p = ptr::null_mut();
        check(
            // SAFETY: writes one host pointer to len bytes (portable | device-mapped).
            unsafe {
                sys::cuMemHostAlloc(
                    &mut p,
                    len.max(1),
                    sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP,
                )
            },
            "cuMemHostAlloc",
        )?;
        crate::owned::note_alloc(p as u64, len);
        Ok(PinnedBuffer {
            ptr: p as *mut u8,
            len,
        })
    }

    /// The device address of memory made by `mapped`.
    pub fn device_ptr(&self) -> CuResult<u64> {
        let mut d = 0;
        check(
            // SAFETY: writes one device pointer; fails for memory not mapped for the device.
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, self.ptr as *mut c_void, 0) },
            "cuMemHostGetDevicePointer",
        )?;
        Ok(d)
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to len bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr points to len bytes owned exclusively by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        crate::owned::note_free(self.ptr as u64);
        // SAFETY: frees the allocation made in `new`.
        unsafe {
            sys::cuMemFreeHost(self.ptr as *mut c_void);
        }
    }
}

/// Host-to-device uploads through a ring of page-locked buffers: the caller fills one buffer
/// (decoding, say) while the copy engine drains the others, so decoding and the bus overlap.
/// A buffer is handed out again only after its last copy completed: its bytes never change
/// under a copy in flight.
pub struct UploadRing {
    // Field order is drop order: `Drop` waits for the stream before the buffers go.
    stream: Stream,
    slots: Vec<(PinnedBuffer, Event, bool)>,
    next: usize,
}

impl UploadRing {
    /// `count` buffers of `bytes` each.
    pub fn new(count: usize, bytes: usize) -> CuResult<UploadRing> {
        let mut slots = Vec::with_capacity(count.max(1));
        for _ in 0..count.max(1) {
            slots.push((PinnedBuffer::new(bytes.max(1))?, Event::new()?, false));
        }
        Ok(UploadRing {
            stream: Stream::new()?,
            slots,
            next: 0,
        })
    }

    /// Bytes one upload can carry.
    pub fn capacity(&self) -> usize {
        self.slots.first().map_or(0, |s| s.0.len)
    }

    /// Fills the next free buffer's first `len` bytes with `fill`, then copies them to `dst`
    /// asynchronously. `len` is at most `capacity()`.
    ///
    /// # Safety
    /// `[dst, dst + len)` is *writable* (module docs) until `finish` returns or the ring drops.
    pub unsafe fn upload<E: From<crate::error::CudaError>>(
        &mut self,
        dst: u64,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let cap = self.capacity();
        let i = self.next;
        self.next = (self.next + 1) % self.slots.len();
        let (buf, done, in_flight) = &mut self.slots[i];
        if *in_flight {
            done.synchronize()?;
            *in_flight = false;
        }
        let len = len.min(cap);
        fill(&mut buf.as_mut_slice()[..len])?;
        if len == 0 {
            return Ok(());
        }
        check(
            // SAFETY: the source is `len` bytes of page-locked memory owned by this ring, which is
            // not handed out again (nor freed: Drop waits for the stream) until `done` fires
            // after this copy; the destination is writable by this function's contract.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    dst,
                    buf.as_slice().as_ptr() as *const c_void,
                    len,
                    self.stream.raw_stream(),
                )
            },
            "cuMemcpyHtoDAsync",
        )?;
        done.record(&self.stream)?;
        *in_flight = true;
        Ok(())
    }

    /// Zeroes `len` bytes of device memory at `dst`, in order with the uploads (nothing
    /// crosses the bus: chunks stored as zeros need no staging).
    ///
    /// # Safety
    /// `[dst, dst + len)` is *writable* (module docs) until `finish` returns or the ring drops.
    pub unsafe fn zero(&mut self, dst: u64, len: usize) -> CuResult<()> {
        // SAFETY: this function's contract is `fill`'s.
        unsafe { self.fill(dst, len, 0) }
    }

    /// Sets `len` bytes of device memory at `dst` to `value`, in order with the uploads.
    ///
    /// # Safety
    /// `[dst, dst + len)` is *writable* (module docs) until `finish` returns or the ring drops.
    pub unsafe fn fill(&mut self, dst: u64, len: usize, value: u8) -> CuResult<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the range is writable by this function's contract; the stream is ours.
        check(
            unsafe { sys::cuMemsetD8Async(dst, value, len, self.stream.raw_stream()) },
            "cuMemsetD8Async",
        )
    }

    /// Waits until every upload has landed.
    pub fn finish(&mut self) -> CuResult<()> {
        self.stream.synchronize()?;
        for s in &mut self.slots {
            s.2 = false;
        }
        Ok(())
    }
}

impl Drop for UploadRing {
    fn drop(&mut self) {
        // The buffers are freed after this: no copy may still read them.
        let _ = self.stream.synchronize();
    }
}

/// Device-to-host copies into a ring of page-locked buffers, at full bus speed, for callers
/// that consume one buffer (compressing it, say) while the copy engine fills the others.
/// A slot's bytes are read only after its copy completed (`wait`), and a slot is refilled
/// only by the caller, after it is done with it.
pub struct DownloadRing {
    // Field order is drop order: `Drop` waits for the stream before the buffers go.
    stream: Stream,
    slots: Vec<(PinnedBuffer, Event)>,
}

// SAFETY: the stream and events are driver handles usable from any thread that makes their
// context current, and the buffers are plain page-locked memory owned by the ring; a ring
// moves between threads (a capture's callback and its writer) but is used by one at a time.
unsafe impl Send for DownloadRing {}

impl DownloadRing {
    /// `count` buffers of `bytes` each.
    pub fn new(count: usize, bytes: usize) -> CuResult<DownloadRing> {
        let mut slots = Vec::with_capacity(count.max(1));
        for _ in 0..count.max(1) {
            slots.push((PinnedBuffer::new(bytes.max(1))?, Event::new()?));
        }
        Ok(DownloadRing {
            stream: Stream::new()?,
            slots,
        })
    }

    /// Bytes one copy can carry.
    pub fn capacity(&self) -> usize {
        self.slots.first().map_or(0, |s| s.0.len)
    }

    /// How many buffers the ring has.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Queues a copy of `len` bytes (at most `capacity()`) from device address `src` into
    /// buffer `slot`. The caller must not start another copy into `slot` before it has waited
    /// for this one.
    ///
    /// # Safety
    /// `[src, src + len)` is *readable* (module docs) until `wait` for `slot` returns.
    pub unsafe fn start(&mut self, slot: usize, src: u64, len: usize) -> CuResult<()> {
        let cap = self.capacity();
        let Some((buf, done)) = self.slots.get_mut(slot) else {
            return Err(crate::error::CudaError::refused(
                "cuMemcpyDtoHAsync",
                sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                format!("no ring slot {slot}"),
            ));
        };
        let len = len.min(cap);
        if len > 0 {
            check(
                // SAFETY: the destination is `len` bytes of page-locked memory owned by this ring;
                // it is neither read (`wait` synchronises first) nor freed (Drop waits for the
                // stream) before the copy completes; the source is readable by this function's
                // contract.
                unsafe {
                    sys::cuMemcpyDtoHAsync_v2(
                        buf.as_mut_slice().as_mut_ptr() as *mut c_void,
                        src,
                        len,
                        self.stream.raw_stream(),
                    )
                },
                "cuMemcpyDtoHAsync",
            )?;
        }
        done.record(&self.stream)
    }

    /// Waits for the last copy into `slot`, then lends its first `len` bytes.
    pub fn wait(&self, slot: usize, len: usize) -> CuResult<&[u8]> {
        let Some((buf, done)) = self.slots.get(slot) else {
            return Ok(&[]);
        };
        done.synchronize()?;
        Ok(&buf.as_slice()[..len.min(buf.len)])
    }

    /// Waits for every copy queued so far.
    pub fn quiesce(&self) -> CuResult<()> {
        self.stream.synchronize()
    }
}

impl Drop for DownloadRing {
    fn drop(&mut self) {
        // The buffers are freed after this: no copy may still write them.
        let _ = self.stream.synchronize();
    }
}

/// Copies device memory into a host slice (synchronous).
///
/// # Safety
/// `[src, src + dst.len())` is *readable* (module docs).
pub unsafe fn copy_dtoh(dst: &mut [u8], src: u64) -> CuResult<()> {
    if dst.is_empty() {
        return Ok(());
    }
    // SAFETY: dst is a writable host slice of dst.len() bytes borrowed exclusively here; the
    // source is readable by this function's contract.
    check(
        unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, src, dst.len()) },
        "cuMemcpyDtoH",
    )
}

/// Copies a host slice into device memory (synchronous).
///
/// # Safety
/// `[dst, dst + src.len())` is *writable* (module docs).
pub unsafe fn copy_htod(dst: u64, src: &[u8]) -> CuResult<()> {
    if src.is_empty() {
        return Ok(());
    }
    // SAFETY: src is a readable host slice of src.len() bytes; the destination is writable by
    // this function's contract.
    check(
        unsafe { sys::cuMemcpyHtoD_v2(dst, src.as_ptr() as *const c_void, src.len()) },
        "cuMemcpyHtoD",
    )
}

/// Device-to-device copy ordered on `stream`.
///
/// # Safety
/// `[dst, dst + len)` is *writable* and `[src, src + len)` *readable* (module docs) until the
/// copy completes on `stream`.
pub unsafe fn copy_dtod_async(dst: u64, src: u64, len: usize, stream: &Stream) -> CuResult<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: both ranges meet this function's contract; the stream is borrowed, so alive.
    check(
        unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len, stream.raw_stream()) },
        "cuMemcpyDtoDAsync",
    )
}

/// Device-to-device copy bandwidth (bytes copied per second), best of `reps` copies of
/// `bytes` between two fresh buffers. For benchmarks that compare against the hardware.
pub fn measure_dtod_bandwidth(bytes: usize, reps: u32) -> CuResult<f64> {
    let a = DeviceBuffer::new(bytes)?;
    let b = DeviceBuffer::new(bytes)?;
    let stream = Stream::new()?;
    let start = Event::new()?;
    let stop = Event::new()?;
    // SAFETY: both are this function's own allocations of `bytes`, alive until it returns,
    // which is after the stream is synchronised.
    unsafe { copy_dtod_async(b.ptr, a.ptr, bytes, &stream)? };
    stream.synchronize()?;
    let mut best = f64::MAX;
    for _ in 0..reps.max(1) {
        start.record(&stream)?;
        // SAFETY: as above; `stop.synchronize` waits for the copy.
        unsafe { copy_dtod_async(b.ptr, a.ptr, bytes, &stream)? };
        stop.record(&stream)?;
        stop.synchronize()?;
        best = best.min(stop.elapsed_ns_since(&start)? as f64);
    }
    Ok(bytes as f64 / (best.max(1.0) * 1e-9))
}
