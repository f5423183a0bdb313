//! What a range capture does with each driver call the application makes while it is open
//! (kernel launches are steps through the launch callbacks and never come here): a step
//! (copies, fills, event records and waits, host waits), a refusal (anything else that
//! changes memory or orders work: the capture is abandoned, named, before the call runs), or
//! nothing (queries, getters, module loads). Pure decisions, tested below.

use kreplay_format::{StreamInfo, MAX_STEP_HOST_BYTES};

/// `CU_STREAM_LEGACY`: the legacy default stream by its explicit handle.
const STREAM_LEGACY: u64 = 0x1;
/// `CU_STREAM_PER_THREAD`.
const STREAM_PER_THREAD: u64 = 0x2;

/// What a range does with a driver call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallClass {
    Step,
    Refuse,
    Ignore,
}

/// The calls that are steps, by name without their per-thread suffix.
const STEPS: [&str; 21] = [
    "cuMemcpy",
    "cuMemcpyAsync",
    "cuMemcpyHtoD_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoD_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemsetD8_v2",
    "cuMemsetD16_v2",
    "cuMemsetD32_v2",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuEventRecord",
    "cuEventRecordWithFlags",
    "cuStreamWaitEvent",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuCtxSynchronize_v2",
    "cuEventSynchronize",
];

/// Calls (by name prefix) that change memory, make or destroy streams, or run or order work
/// a range cannot hold: 2D/3D, peer, array and batched copies and fills (the `cuMemcpy` and
/// `cuMemset` names that are not steps), allocation and free of every kind, VMM mapping,
/// host callbacks, graph launches, stream memory operations, IPC and interop.
const REFUSED: [&str; 44] = [
    "cuMemcpy",
    "cuMemset",
    "cuMemAlloc",
    "cuMemFree",
    "cuMemHostAlloc",
    "cuMemHostRegister",
    "cuMemHostUnregister",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    "cuMemPrefetch",
    "cuMemDiscard",
    "cuMemDecompress",
    "cuMemPoolTrimTo",
    "cuMemPoolImportPointer",
    "cuStreamAttachMemAsync",
    "cuLaunch",
    "cuStreamAddCallback",
    "cuGraphLaunch",
    "cuStreamWaitValue",
    "cuStreamWriteValue",
    "cuStreamBatchMemOp",
    "cuStreamCreate",
    "cuStreamDestroy",
    "cuStreamBeginCapture",
    "cuStreamEndCapture",
    "cuGreenCtxStreamCreate",
    "cuCtxWaitEvent",
    "cuCtxCreate",
    "cuCtxDestroy",
    "cuDevicePrimaryCtxReset",
    "cuDevicePrimaryCtxRelease",
    "cuIpcOpen",
    "cuIpcCloseMemHandle",
    "cuArrayCreate",
    "cuArray3DCreate",
    "cuArrayDestroy",
    "cuMipmappedArrayCreate",
    "cuMipmappedArrayDestroy",
    "cuGraphicsMapResources",
    "cuGraphicsUnmapResources",
    "cuImportExternal",
    "cuSignalExternal",
    "cuWaitExternal",
];

/// What a range does with the driver call `function` (CUPTI's name for it).
pub fn classify(function: &str) -> CallClass {
    let base = function
        .strip_suffix("_ptsz")
        .or_else(|| function.strip_suffix("_ptds"))
        .unwrap_or(function);
    if STEPS.contains(&base) {
        return CallClass::Step;
    }
    if REFUSED.iter().any(|p| base.starts_with(p)) {
        CallClass::Refuse
    } else {
        CallClass::Ignore
    }
}

/// The stream a step names: the legacy default stream is 0 however the application named it.
pub fn stream_key(raw: u64) -> u64 {
    if raw == STREAM_LEGACY {
        0
    } else {
        raw
    }
}

/// The default streams' description, which the driver is not asked for: they are not
/// non-blocking and have the default priority.
pub fn fixed_stream_info(key: u64) -> Option<StreamInfo> {
    matches!(key, 0 | STREAM_PER_THREAD).then_some(StreamInfo {
        handle: key,
        flags: 0,
        priority: 0,
    })
}

/// Which sides of a 1D copy are device memory (the range holds those as regions; a host
/// side's bytes live in the step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopySides {
    DeviceToDevice,
    HostToDevice,
    DeviceToHost,
    /// Touches no device memory: nothing for the range to hold or replay.
    HostToHost,
}

pub fn copy_sides(dst_is_device: bool, src_is_device: bool) -> CopySides {
    match (dst_is_device, src_is_device) {
        (true, true) => CopySides::DeviceToDevice,
        (true, false) => CopySides::HostToDevice,
        (false, true) => CopySides::DeviceToHost,
        (false, false) => CopySides::HostToHost,
    }
}

/// Why a copy of `bytes` host bytes cannot be a step, if it cannot: the bytes live inline in
/// the step's event.
pub fn host_bytes_problem(function: &str, bytes: u64) -> Option<String> {
    (bytes > MAX_STEP_HOST_BYTES).then(|| {
        format!(
            "{function} copies {bytes} bytes between host and device inside the range; a range step holds at most {MAX_STEP_HOST_BYTES} host bytes"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_fills_events_and_waits_are_steps_in_every_variant() {
        for f in [
            "cuMemcpy",
            "cuMemcpy_ptds",
            "cuMemcpyAsync_ptsz",
            "cuMemcpyHtoD_v2",
            "cuMemcpyDtoHAsync_v2_ptsz",
            "cuMemcpyDtoD_v2_ptds",
            "cuMemsetD8_v2",
            "cuMemsetD32Async_ptsz",
            "cuEventRecord",
            "cuEventRecordWithFlags_ptsz",
            "cuStreamWaitEvent",
            "cuStreamSynchronize_ptsz",
            "cuCtxSynchronize",
            "cuEventSynchronize",
        ] {
            assert_eq!(classify(f), CallClass::Step, "{f}");
        }
    }

    #[test]
    fn what_changes_memory_or_streams_otherwise_refuses() {
        for f in [
            "cuMemcpy2D_v2",
            "cuMemcpy3DAsync_v2_ptsz",
            "cuMemcpyPeerAsync",
            "cuMemcpyHtoA_v2",
            "cuMemcpyBatchAsync",
            "cuMemcpyHtoD",
            "cuMemsetD2D32_v2",
            "cuMemAlloc_v2",
            "cuMemAllocAsync_ptsz",
            "cuMemFreeAsync",
            "cuMemFreeHost",
            "cuMemMap",
            "cuMemUnmap",
            "cuLaunchHostFunc",
            "cuStreamAddCallback",
            "cuGraphLaunch_ptsz",
            "cuStreamWaitValue32_v2",
            "cuStreamBatchMemOp_v2",
            "cuStreamCreateWithPriority",
            "cuStreamDestroy_v2",
            "cuIpcOpenMemHandle_v2",
            "cuImportExternalMemory",
            "cuMemPrefetchAsync_v2",
        ] {
            assert_eq!(classify(f), CallClass::Refuse, "{f}");
        }
    }

    #[test]
    fn queries_and_module_loads_are_ignored() {
        for f in [
            "cuCtxGetCurrent",
            "cuStreamQuery",
            "cuEventQuery",
            "cuEventCreate",
            "cuEventElapsedTime",
            "cuPointerGetAttribute",
            "cuMemGetInfo_v2",
            "cuMemGetAddressRange_v2",
            "cuModuleGetFunction",
            "cuLibraryLoadData",
            "cuStreamGetFlags",
            "cuProfilerStart",
            "cuFuncSetAttribute",
            "cuArrayGetDescriptor_v2",
            "cuIpcGetMemHandle",
            "cuDevicePrimaryCtxRetain",
        ] {
            assert_eq!(classify(f), CallClass::Ignore, "{f}");
        }
    }

    #[test]
    fn the_legacy_stream_has_one_name_and_default_streams_fixed_values() {
        assert_eq!(stream_key(STREAM_LEGACY), 0);
        assert_eq!(stream_key(0), 0);
        assert_eq!(stream_key(STREAM_PER_THREAD), STREAM_PER_THREAD);
        assert_eq!(stream_key(0x5550), 0x5550);
        let per_thread = fixed_stream_info(STREAM_PER_THREAD).expect("fixed");
        assert_eq!((per_thread.flags, per_thread.priority), (0, 0));
        assert!(fixed_stream_info(0).is_some());
        assert_eq!(fixed_stream_info(0x5550), None, "asked of the driver");
    }

    #[test]
    fn copy_sides_follow_the_memory_and_host_bytes_are_bounded() {
        assert_eq!(copy_sides(true, true), CopySides::DeviceToDevice);
        assert_eq!(copy_sides(true, false), CopySides::HostToDevice);
        assert_eq!(copy_sides(false, true), CopySides::DeviceToHost);
        assert_eq!(copy_sides(false, false), CopySides::HostToHost);
        assert_eq!(host_bytes_problem("cuMemcpy", MAX_STEP_HOST_BYTES), None);
        let why = host_bytes_problem("cuMemcpyHtoD_v2", MAX_STEP_HOST_BYTES + 1).expect("refused");
        assert!(why.starts_with("cuMemcpyHtoD_v2 copies"), "{why}");
    }
}
