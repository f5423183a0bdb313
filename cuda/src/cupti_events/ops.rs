//! Driver calls a range capture makes steps of, other than kernel launches: 1D copies, fills,
//! event records and waits, host waits. Read at ENTER (inputs only). The per-thread variants
//! (`_ptsz`, `_ptds`) have the same parameter blocks as the plain ones; they differ in what
//! the null stream means (the per-thread default stream) and, for the synchronous calls,
//! which stream they are ordered on.

use std::ffi::c_void;

use crate::cupti::sys as csys;
use csys::CUpti_driver_api_trace_cbid_enum as C;

/// `CU_STREAM_PER_THREAD`.
pub const STREAM_PER_THREAD: u64 = 0x2;

/// A call an open range makes a step of, as its ENTER shows it. Streams and events are the
/// application's handle values; a stream the call names by default is 0 (the legacy default
/// stream) or `STREAM_PER_THREAD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpCall {
    /// A 1D copy of `bytes` bytes. Under unified addressing either side may be host or device
    /// memory whatever the call's name says: the caller asks the driver what each side is.
    Copy {
        dst: u64,
        src: u64,
        bytes: u64,
        stream: u64,
    },
    /// `count` elements of `element_bytes` (1, 2 or 4) set to `value`.
    Fill {
        dst: u64,
        value: u32,
        element_bytes: u8,
        count: u64,
        stream: u64,
    },
    RecordEvent {
        event: u64,
        stream: u64,
    },
    WaitEvent {
        event: u64,
        stream: u64,
    },
    StreamSync {
        stream: u64,
    },
    ContextSync,
    EventSync {
        event: u64,
    },
}

/// The stream an asynchronous call names: the null stream of a per-thread variant is the
/// per-thread default stream.
fn async_stream(raw: crate::sys::CUstream, per_thread: bool) -> u64 {
    match raw as u64 {
        0 if per_thread => STREAM_PER_THREAD,
        s => s,
    }
}

/// The stream a synchronous call is ordered on.
fn sync_stream(per_thread: bool) -> u64 {
    if per_thread {
        STREAM_PER_THREAD
    } else {
        0
    }
}

const fn id(c: C) -> u32 {
    c as u32
}

/// Reads an op call's ENTER.
///
/// # Safety
/// `params` must be null or the `functionParams` of a CUPTI driver callback with id `id`,
/// during the callback.
pub(super) unsafe fn decode(id: u32, params: *const c_void) -> Option<OpCall> {
    if params.is_null() && !is_context_sync(id) {
        return None;
    }
    // SAFETY: the caller's contract is each reader's.
    unsafe {
        copy(id, params)
            .or_else(|| fill(id, params))
            .or_else(|| ordering(id, params))
    }
}

fn is_context_sync(i: u32) -> bool {
    i == id(C::CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize)
        || i == id(C::CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2)
}

/// # Safety
/// As `decode`'s, with `params` non-null.
unsafe fn copy(i: u32, params: *const c_void) -> Option<OpCall> {
    let call = |dst: u64, src: u64, bytes: usize, stream: u64| OpCall::Copy {
        dst,
        src,
        bytes: bytes as u64,
        stream,
    };
    // SAFETY: in every arm CUPTI passes the parameter struct of the callback id (the
    // per-thread variants' structs have the same fields in the same order); inputs only.
    unsafe {
        Some(match i {
            _ if i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpy)
                || i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds) =>
            {
                let p = &*(params as *const csys::cuMemcpy_params);
                let ptds = i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds);
                call(p.dst, p.src, p.ByteCount, sync_stream(ptds))
            }
            _ if i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync)
                || i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz) =>
            {
                let p = &*(params as *const csys::cuMemcpyAsync_params);
                let ptsz = i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz);
                call(p.dst, p.src, p.ByteCount, async_stream(p.hStream, ptsz))
            }
            _ if i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2)
                || i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds) =>
            {
                let p = &*(params as *const csys::cuMemcpyHtoD_v2_params);
                let ptds = i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds);
                call(
                    p.dstDevice,
                    p.srcHost as u64,
                    p.ByteCount,
                    sync_stream(ptds),
                )
            }
            _ if i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2)
                || i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz) =>
            {
                let p = &*(params as *const csys::cuMemcpyHtoDAsync_v2_params);
                let ptsz = i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz);
                let stream = async_stream(p.hStream, ptsz);
                call(p.dstDevice, p.srcHost as u64, p.ByteCount, stream)
            }
            _ if i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2)
                || i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds) =>
            {
                let p = &*(params as *const csys::cuMemcpyDtoH_v2_params);
                let ptds = i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds);
                call(
                    p.dstHost as u64,
                    p.srcDevice,
                    p.ByteCount,
                    sync_stream(ptds),
                )
            }
            _ if i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2)
                || i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz) =>
            {
                let p = &*(params as *const csys::cuMemcpyDtoHAsync_v2_params);
                let ptsz = i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz);
                let stream = async_stream(p.hStream, ptsz);
                call(p.dstHost as u64, p.srcDevice, p.ByteCount, stream)
            }
            _ if i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2)
                || i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds) =>
            {
                let p = &*(params as *const csys::cuMemcpyDtoD_v2_params);
                let ptds = i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds);
                call(p.dstDevice, p.srcDevice, p.ByteCount, sync_stream(ptds))
            }
            _ if i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2)
                || i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz) =>
            {
                let p = &*(params as *const csys::cuMemcpyDtoDAsync_v2_params);
                let ptsz = i == id(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz);
                let stream = async_stream(p.hStream, ptsz);
                call(p.dstDevice, p.srcDevice, p.ByteCount, stream)
            }
            _ => return None,
        })
    }
}

/// # Safety
/// As `decode`'s, with `params` non-null.
unsafe fn fill(i: u32, params: *const c_void) -> Option<OpCall> {
    let call = |dst: u64, value: u32, element_bytes: u8, count: usize, stream: u64| OpCall::Fill {
        dst,
        value,
        element_bytes,
        count: count as u64,
        stream,
    };
    let is = |a: C, b: C| i == id(a) || i == id(b);
    let per_thread = [
        C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds,
        C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2_ptds,
        C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds,
        C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz,
        C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz,
        C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz,
    ]
    .into_iter()
    .any(|c| i == id(c));
    use C::*;
    // SAFETY: in every arm CUPTI passes the parameter struct of the callback id (the
    // per-thread variants' structs have the same fields in the same order); inputs only.
    unsafe {
        Some(
            if is(
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2,
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds,
            ) {
                let p = &*(params as *const csys::cuMemsetD8_v2_params);
                call(p.dstDevice, p.uc as u32, 1, p.N, sync_stream(per_thread))
            } else if is(
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2,
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2_ptds,
            ) {
                let p = &*(params as *const csys::cuMemsetD16_v2_params);
                call(p.dstDevice, p.us as u32, 2, p.N, sync_stream(per_thread))
            } else if is(
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2,
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds,
            ) {
                let p = &*(params as *const csys::cuMemsetD32_v2_params);
                call(p.dstDevice, p.ui, 4, p.N, sync_stream(per_thread))
            } else if is(
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz,
            ) {
                let p = &*(params as *const csys::cuMemsetD8Async_params);
                call(
                    p.dstDevice,
                    p.uc as u32,
                    1,
                    p.N,
                    async_stream(p.hStream, per_thread),
                )
            } else if is(
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async,
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz,
            ) {
                let p = &*(params as *const csys::cuMemsetD16Async_params);
                call(
                    p.dstDevice,
                    p.us as u32,
                    2,
                    p.N,
                    async_stream(p.hStream, per_thread),
                )
            } else if is(
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
                CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz,
            ) {
                let p = &*(params as *const csys::cuMemsetD32Async_params);
                call(
                    p.dstDevice,
                    p.ui,
                    4,
                    p.N,
                    async_stream(p.hStream, per_thread),
                )
            } else {
                return None;
            },
        )
    }
}

/// # Safety
/// As `decode`'s (`params` may be null for the context synchronisations only).
unsafe fn ordering(i: u32, params: *const c_void) -> Option<OpCall> {
    use C::*;
    if is_context_sync(i) {
        return Some(OpCall::ContextSync);
    }
    let is = |a: C, b: C| i == id(a) || i == id(b);
    // SAFETY: in every arm CUPTI passes the parameter struct of the callback id (the
    // per-thread variants' structs have the same fields in the same order); inputs only.
    unsafe {
        Some(
            if is(
                CUPTI_DRIVER_TRACE_CBID_cuEventRecord,
                CUPTI_DRIVER_TRACE_CBID_cuEventRecord_ptsz,
            ) {
                let p = &*(params as *const csys::cuEventRecord_params);
                let ptsz = i == id(CUPTI_DRIVER_TRACE_CBID_cuEventRecord_ptsz);
                OpCall::RecordEvent {
                    event: p.hEvent as u64,
                    stream: async_stream(p.hStream, ptsz),
                }
            } else if is(
                CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags,
                CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags_ptsz,
            ) {
                let p = &*(params as *const csys::cuEventRecordWithFlags_params);
                let ptsz = i == id(CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags_ptsz);
                OpCall::RecordEvent {
                    event: p.hEvent as u64,
                    stream: async_stream(p.hStream, ptsz),
                }
            } else if is(
                CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent,
                CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz,
            ) {
                let p = &*(params as *const csys::cuStreamWaitEvent_params);
                let ptsz = i == id(CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz);
                OpCall::WaitEvent {
                    event: p.hEvent as u64,
                    stream: async_stream(p.hStream, ptsz),
                }
            } else if is(
                CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
                CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz,
            ) {
                let p = &*(params as *const csys::cuStreamSynchronize_params);
                let ptsz = i == id(CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz);
                OpCall::StreamSync {
                    stream: async_stream(p.hStream, ptsz),
                }
            } else if i == id(CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize) {
                let p = &*(params as *const csys::cuEventSynchronize_params);
                OpCall::EventSync {
                    event: p.hEvent as u64,
                }
            } else {
                return None;
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

    fn read<T>(c: C, params: &T) -> Option<OpCall> {
        // SAFETY: a parameter block of the id's type, built by the test, alive for the call.
        unsafe { decode(id(c), (params as *const T).cast()) }
    }

    #[test]
    fn copies_name_both_sides_and_their_stream() {
        let host = [0u8; 4];
        let sync = csys::cuMemcpyHtoD_v2_params {
            dstDevice: 0x7000,
            srcHost: host.as_ptr().cast(),
            ByteCount: 4,
        };
        let want = |stream| OpCall::Copy {
            dst: 0x7000,
            src: host.as_ptr() as u64,
            bytes: 4,
            stream,
        };
        assert_eq!(
            read(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2, &sync),
            Some(want(0))
        );
        assert_eq!(
            read(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds, &sync),
            Some(want(STREAM_PER_THREAD)),
            "a per-thread synchronous copy is ordered on the per-thread stream"
        );
        let on = |s: usize| csys::cuMemcpyAsync_params {
            dst: 0x9000,
            src: 0x8000,
            ByteCount: 64,
            hStream: s as sys::CUstream,
        };
        let async_copy = |stream| OpCall::Copy {
            dst: 0x9000,
            src: 0x8000,
            bytes: 64,
            stream,
        };
        assert_eq!(
            read(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz, &on(0)),
            Some(async_copy(STREAM_PER_THREAD))
        );
        assert_eq!(
            read(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, &on(0)),
            Some(async_copy(0))
        );
        assert_eq!(
            read(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz, &on(0x55)),
            Some(async_copy(0x55)),
            "a named stream stays itself"
        );
        let dtoh = csys::cuMemcpyDtoHAsync_v2_params {
            dstHost: 0x4000 as *mut c_void,
            srcDevice: 0x7000,
            ByteCount: 8,
            hStream: 0x66 as sys::CUstream,
        };
        assert_eq!(
            read(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2, &dtoh),
            Some(OpCall::Copy {
                dst: 0x4000,
                src: 0x7000,
                bytes: 8,
                stream: 0x66
            })
        );
    }

    #[test]
    fn fills_keep_their_element_size() {
        let d16 = csys::cuMemsetD16Async_params {
            dstDevice: 0x7000,
            us: 0xbeef,
            N: 10,
            hStream: std::ptr::null_mut(),
        };
        assert_eq!(
            read(C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz, &d16),
            Some(OpCall::Fill {
                dst: 0x7000,
                value: 0xbeef,
                element_bytes: 2,
                count: 10,
                stream: STREAM_PER_THREAD
            })
        );
        let d32 = csys::cuMemsetD32_v2_params {
            dstDevice: 0x7000,
            ui: 7,
            N: 3,
        };
        assert_eq!(
            read(C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2, &d32),
            Some(OpCall::Fill {
                dst: 0x7000,
                value: 7,
                element_bytes: 4,
                count: 3,
                stream: 0
            })
        );
    }

    #[test]
    fn events_and_waits_name_their_handles() {
        let rec = csys::cuEventRecord_params {
            hEvent: 0x11 as sys::CUevent,
            hStream: 0x22 as sys::CUstream,
        };
        assert_eq!(
            read(C::CUPTI_DRIVER_TRACE_CBID_cuEventRecord, &rec),
            Some(OpCall::RecordEvent {
                event: 0x11,
                stream: 0x22
            })
        );
        let wait = csys::cuStreamWaitEvent_params {
            hStream: std::ptr::null_mut(),
            hEvent: 0x11 as sys::CUevent,
            Flags: 0,
        };
        assert_eq!(
            read(C::CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz, &wait),
            Some(OpCall::WaitEvent {
                event: 0x11,
                stream: STREAM_PER_THREAD
            })
        );
        // SAFETY: the context synchronisation reads no parameter block.
        let ctx = unsafe {
            decode(
                id(C::CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize),
                std::ptr::null(),
            )
        };
        assert_eq!(ctx, Some(OpCall::ContextSync));
        let other = csys::cuStreamSynchronize_params {
            hStream: 0x22 as sys::CUstream,
        };
        assert_eq!(
            read(C::CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2, &other),
            None,
            "a 2D copy is no op step"
        );
        // SAFETY: a null block is refused before it is read.
        assert!(unsafe {
            decode(
                id(C::CUPTI_DRIVER_TRACE_CBID_cuEventRecord),
                std::ptr::null(),
            )
        }
        .is_none());
    }
}
