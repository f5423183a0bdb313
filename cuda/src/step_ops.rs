//! The stream operations a range replay queues besides launches: asynchronous copies between
//! device memory and kreplay's pinned buffers, fills, and one stream waiting for an event.
//! Device addresses are raw numbers, so every function that reaches one is an `unsafe fn`
//! under `crate::memory`'s contracts (*readable*, *writable*).

use std::ffi::c_void;

use crate::error::{check, CuResult};
use crate::memory::PinnedBuffer;
use crate::stream::{AsStream, Event};
use crate::sys;

/// Host-to-device copy of all of `src` to `dst`, ordered on `stream`.
///
/// # Safety
/// `[dst, dst + src.len)` is *writable* until the copy completes on `stream`, and `src` is
/// neither written nor freed before then (pinned memory is read by the copy engine later).
pub unsafe fn copy_htod_async(
    dst: u64,
    src: &PinnedBuffer,
    stream: &impl AsStream,
) -> CuResult<()> {
    let bytes = src.as_slice();
    if bytes.is_empty() {
        return Ok(());
    }
    // SAFETY: `bytes` is pinned host memory owned by `src`, kept alive and unwritten by this
    // function's contract; the destination is writable by it too.
    check(
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dst,
                bytes.as_ptr() as *const c_void,
                bytes.len(),
                stream.raw_stream(),
            )
        },
        "cuMemcpyHtoDAsync",
    )
}

/// Device-to-host copy of `dst.len` bytes from `src` into `dst`, ordered on `stream`.
///
/// # Safety
/// `[src, src + dst.len)` is *readable* until the copy completes on `stream`, and `dst` is
/// neither read, written nor freed before then.
pub unsafe fn copy_dtoh_async(
    dst: &mut PinnedBuffer,
    src: u64,
    stream: &impl AsStream,
) -> CuResult<()> {
    let bytes = dst.as_mut_slice();
    if bytes.is_empty() {
        return Ok(());
    }
    // SAFETY: `bytes` is pinned host memory owned by `dst`, untouched until the copy
    // completes by this function's contract; the source is readable by it too.
    check(
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                bytes.as_mut_ptr() as *mut c_void,
                src,
                bytes.len(),
                stream.raw_stream(),
            )
        },
        "cuMemcpyDtoHAsync",
    )
}

/// Sets `count` elements of `element_bytes` (1, 2 or 4) at `dst` to `value` (truncated to
/// the element), ordered on `stream` (`cuMemsetD8/D16/D32Async`).
///
/// # Safety
/// `[dst, dst + count * element_bytes)` is *writable* until the fill completes on `stream`.
pub unsafe fn fill_async(
    dst: u64,
    value: u32,
    element_bytes: u8,
    count: usize,
    stream: &impl AsStream,
) -> CuResult<()> {
    if count == 0 {
        return Ok(());
    }
    let s = stream.raw_stream();
    // SAFETY: the range is writable by this function's contract; the stream is borrowed.
    let (r, name) = unsafe {
        match element_bytes {
            1 => (
                sys::cuMemsetD8Async(dst, value as u8, count, s),
                "cuMemsetD8Async",
            ),
            2 => (
                sys::cuMemsetD16Async(dst, value as u16, count, s),
                "cuMemsetD16Async",
            ),
            4 => (
                sys::cuMemsetD32Async(dst, value, count, s),
                "cuMemsetD32Async",
            ),
            _ => (sys::CUresult::CUDA_ERROR_INVALID_VALUE, "cuMemsetAsync"),
        }
    };
    check(r, name)
}

/// Makes `stream`'s later work wait for `event`'s latest record (`cuStreamWaitEvent`).
pub fn wait_event(stream: &impl AsStream, event: &Event) -> CuResult<()> {
    check(
        // SAFETY: a live event owned by `event` and a live stream (ours, or by
        // `ForeignStream`'s contract); flags 0.
        unsafe { sys::cuStreamWaitEvent(stream.raw_stream(), event.raw(), 0) },
        "cuStreamWaitEvent",
    )
}
