//! An op step (a copy, fill, event record or wait, host wait) of a range at its ENTER: the
//! decoded call made into the format's `Op`, with the host bytes a host-to-device copy reads
//! taken now. A device-to-host copy's received bytes are read at its EXIT (`receive`).

use kreplay_cuda::cupti_events::OpCall;
use kreplay_cuda::pointer;
use kreplay_format::{HostWait, Op};

use crate::error::RecordError;
use crate::range_calls::{copy_sides, host_bytes_problem, stream_key, CopySides};

/// An op step as its ENTER makes it.
#[derive(Debug)]
pub struct OpEnter {
    /// The stream the step names (`range_calls::stream_key`).
    pub stream: u64,
    pub op: Op,
    /// A device-to-host copy: where the application receives its bytes (address, length),
    /// read at the EXIT into the op's `received`.
    pub receive: Option<(u64, u64)>,
}

/// The step the call makes; `None` when it touches no device memory (a host-to-host or empty
/// copy, an empty fill). Host waits that name no stream are named on `previous_stream` (the
/// latest step's), so that they add no stream. Call with the context synchronised: a host
/// buffer read here holds what the copy will read.
pub fn resolve(
    call: OpCall,
    function: &str,
    previous_stream: u64,
) -> Result<Option<OpEnter>, RecordError> {
    let enter = |stream: u64, op: Op| {
        Some(OpEnter {
            stream: stream_key(stream),
            op,
            receive: None,
        })
    };
    Ok(match call {
        OpCall::Copy {
            dst,
            src,
            bytes,
            stream,
        } => copy(function, (dst, src, bytes), stream)?,
        OpCall::Fill { count: 0, .. } => None,
        OpCall::Fill {
            dst,
            value,
            element_bytes,
            count,
            stream,
        } => enter(
            stream,
            Op::Fill {
                dst,
                value,
                element_bytes,
                count,
            },
        ),
        OpCall::RecordEvent { event, stream } => enter(stream, Op::RecordEvent { event }),
        OpCall::WaitEvent { event, stream } => enter(stream, Op::WaitEvent { event }),
        OpCall::StreamSync { stream } => enter(stream, Op::HostWait(HostWait::Stream)),
        OpCall::ContextSync => enter(previous_stream, Op::HostWait(HostWait::Context)),
        OpCall::EventSync { event } => enter(previous_stream, Op::HostWait(HostWait::Event(event))),
    })
}

/// The stream an op is issued on (as the call names it), for the calls that queue work.
pub fn op_stream(call: &OpCall) -> Option<u64> {
    match *call {
        OpCall::Copy { stream, .. }
        | OpCall::Fill { stream, .. }
        | OpCall::RecordEvent { stream, .. }
        | OpCall::WaitEvent { stream, .. } => Some(stream),
        OpCall::StreamSync { .. } | OpCall::ContextSync | OpCall::EventSync { .. } => None,
    }
}

/// A 1D copy, its sides told apart by what the driver says each address is.
fn copy(
    function: &str,
    (dst, src, bytes): (u64, u64, u64),
    stream: u64,
) -> Result<Option<OpEnter>, RecordError> {
    if bytes == 0 {
        return Ok(None);
    }
    let sides = copy_sides(
        pointer::is_device_memory(dst),
        pointer::is_device_memory(src),
    );
    if matches!(sides, CopySides::HostToDevice | CopySides::DeviceToHost) {
        if let Some(why) = host_bytes_problem(function, bytes) {
            return Err(RecordError::Range(why));
        }
    }
    let (op, receive) = match sides {
        CopySides::HostToHost => return Ok(None),
        CopySides::DeviceToDevice => (Op::CopyDeviceToDevice { dst, src, bytes }, None),
        CopySides::HostToDevice => {
            // SAFETY: the application hands the driver `bytes` readable bytes at `src` for
            // this copy; the context is synchronised, so nothing queued writes them now.
            let host = unsafe { read_host(src, bytes) }?;
            (Op::CopyHostToDevice { dst, host }, None)
        }
        CopySides::DeviceToHost => (
            Op::CopyDeviceToHost {
                src,
                received: Vec::new(),
            },
            Some((dst, bytes)),
        ),
    };
    Ok(Some(OpEnter {
        stream: stream_key(stream),
        op,
        receive,
    }))
}

/// A copy of `bytes` host bytes at `addr`.
///
/// # Safety
/// `addr` must point at `bytes` readable bytes of host memory that nothing writes meanwhile.
pub unsafe fn read_host(addr: u64, bytes: u64) -> Result<Vec<u8>, RecordError> {
    let n = usize::try_from(bytes).map_err(|_| RecordError::RegionTooLarge(bytes))?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if addr == 0 {
        return Err(RecordError::Range(format!(
            "a copy of {bytes} bytes names a null host pointer"
        )));
    }
    // SAFETY: by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(addr as *const u8, n) }.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_ops_name_their_stream_and_host_waits_none() {
        let fill = OpCall::Fill {
            dst: 0x1000,
            value: 0,
            element_bytes: 4,
            count: 4,
            stream: 0x77,
        };
        assert_eq!(op_stream(&fill), Some(0x77));
        assert_eq!(op_stream(&OpCall::StreamSync { stream: 0x77 }), None);
        assert_eq!(op_stream(&OpCall::ContextSync), None);
    }

    #[test]
    fn ordering_ops_and_host_waits_become_steps_on_their_streams() {
        let at = |call| {
            resolve(call, "cu", 0x33)
                .expect("resolved")
                .expect("a step")
        };
        let wait = at(OpCall::WaitEvent {
            event: 0x9,
            stream: 0x1,
        });
        assert_eq!(
            (wait.stream, wait.op),
            (0, Op::WaitEvent { event: 0x9 }),
            "the legacy stream by its handle is stream 0"
        );
        let ctx = at(OpCall::ContextSync);
        assert_eq!(
            (ctx.stream, ctx.op),
            (0x33, Op::HostWait(HostWait::Context)),
            "named on the latest step's stream"
        );
        let empty = OpCall::Fill {
            dst: 0x1000,
            value: 0,
            element_bytes: 1,
            count: 0,
            stream: 0,
        };
        assert!(resolve(empty, "cuMemsetD8_v2", 0)
            .expect("resolved")
            .is_none());
    }

    #[test]
    fn host_bytes_are_copied_and_a_null_host_pointer_is_refused() {
        let bytes = [1u8, 2, 3];
        // SAFETY: three readable bytes of this test's own.
        let got = unsafe { read_host(bytes.as_ptr() as u64, 3) }.expect("read");
        assert_eq!(got, bytes);
        // SAFETY: nothing is read for an empty copy or a null pointer.
        assert!(unsafe { read_host(0, 0) }.expect("empty").is_empty());
        // SAFETY: as above.
        assert!(unsafe { read_host(0, 8) }.is_err());
    }
}
