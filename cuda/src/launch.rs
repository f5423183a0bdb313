//! Launching a kernel: the geometry and attributes (`LaunchConfig`) and the argument bytes
//! (`KernelArgs`), both owned, so `launch` takes no raw host pointers. The argument bytes
//! hold device addresses the kernel dereferences, so `launch` is an `unsafe fn`: the caller
//! answers for what the kernel reads and writes through them.

use std::ffi::c_void;
use std::ptr;

use crate::error::{check, CuResult, CudaError};
use crate::module::AsFunction;
use crate::stream::{AsStream, Event};
use crate::sys::{self, CUresult};

/// Launch attribute ids kreplay treats specially (`CUlaunchAttributeID`).
pub mod attr {
    pub const COOPERATIVE: u32 = 2;
    pub const CLUSTER_DIMENSION: u32 = 4;
    /// Value holds a `CUevent` (refused as raw bytes: see `LaunchConfig::attribute`).
    pub const PROGRAMMATIC_EVENT: u32 = 7;
    /// Value holds a `CUevent`.
    pub const LAUNCH_COMPLETION_EVENT: u32 = 12;
    /// Applies to graph kernel nodes only.
    pub const DEVICE_UPDATABLE_KERNEL_NODE: u32 = 13;
}

/// The driver's enum value for a launch attribute id, for the ids these bindings know; never
/// a transmute (an id from a newer CUDA or a damaged file would be an invalid enum value).
pub fn attribute_id(id: u32) -> Option<sys::CUlaunchAttributeID> {
    use sys::CUlaunchAttributeID as A;
    Some(match id {
        0 => A::CU_LAUNCH_ATTRIBUTE_IGNORE,
        1 => A::CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
        2 => A::CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
        3 => A::CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
        4 => A::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
        5 => A::CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
        6 => A::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        7 => A::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT,
        8 => A::CU_LAUNCH_ATTRIBUTE_PRIORITY,
        9 => A::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
        10 => A::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
        11 => A::CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION,
        12 => A::CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT,
        13 => A::CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE,
        14 => A::CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
        16 => A::CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING,
        _ => return None,
    })
}

/// Whether an attribute's value holds a driver handle (and so cannot be passed as bytes).
pub fn attribute_holds_handle(id: u32) -> bool {
    matches!(id, attr::PROGRAMMATIC_EVENT | attr::LAUNCH_COMPLETION_EVENT)
}

/// Geometry and attributes of a launch.
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    attributes: Vec<sys::CUlaunchAttribute>,
    /// Events named by attributes: they must outlive every launch made with this config.
    events: Vec<Event>,
}

// SAFETY: the attribute values are plain data; the event handles they name are owned here.
unsafe impl Send for LaunchConfig {}

fn unknown_attribute(id: u32) -> CudaError {
    CudaError::refused(
        "cuLaunchKernelEx",
        CUresult::CUDA_ERROR_INVALID_VALUE,
        format!("launch attribute id {id} is unknown to this build"),
    )
}

impl LaunchConfig {
    pub fn new(grid: [u32; 3], block: [u32; 3], shared_bytes: u32) -> LaunchConfig {
        LaunchConfig {
            grid,
            block,
            shared_bytes,
            attributes: Vec::new(),
            events: Vec::new(),
        }
    }

    fn push(&mut self, id: u32, value: &[u8; 64]) -> CuResult<()> {
        // SAFETY: CUlaunchAttribute is plain data; all-zero is a valid bit pattern and we
        // then fill the id and the value bytes.
        let mut a: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        a.id = attribute_id(id).ok_or_else(|| unknown_attribute(id))?;
        let n = 64.min(std::mem::size_of::<sys::CUlaunchAttributeValue>());
        // SAFETY: the union is at least `n` bytes of plain data.
        unsafe { ptr::copy_nonoverlapping(value.as_ptr(), &mut a.value as *mut _ as *mut u8, n) };
        self.attributes.push(a);
        Ok(())
    }

    /// Adds an attribute given as its 64 value bytes. Attributes whose value holds a handle
    /// are refused: bytes from a file or another process would name nothing valid here.
    pub fn attribute(&mut self, id: u32, value: &[u8; 64]) -> CuResult<()> {
        if attribute_holds_handle(id) {
            return Err(CudaError::refused(
                "cuLaunchKernelEx",
                CUresult::CUDA_ERROR_INVALID_VALUE,
                format!("launch attribute {id} holds an event handle: use event_attribute"),
            ));
        }
        self.push(id, value)
    }

    /// Adds an event attribute: `value`'s first 8 bytes are replaced by `event`'s handle,
    /// the rest (flags) kept; the event lives as long as this config.
    pub fn event_attribute(&mut self, id: u32, value: &[u8; 64], event: Event) -> CuResult<()> {
        if !attribute_holds_handle(id) {
            return self.attribute(id, value);
        }
        let mut v = *value;
        v[..8].copy_from_slice(&(event.raw() as usize as u64).to_le_bytes());
        self.push(id, &v)?;
        self.events.push(event);
        Ok(())
    }

    /// Ids of the attributes set, in order.
    pub fn attribute_ids(&self) -> Vec<u32> {
        self.attributes.iter().map(|a| a.id as u32).collect()
    }
}

/// A kernel's argument bytes and where each parameter starts, checked to fit.
#[derive(Debug, Clone)]
pub struct KernelArgs {
    bytes: Vec<u8>,
    offsets: Vec<u32>,
}

impl KernelArgs {
    /// `layout` is (offset, size) per parameter; every parameter must lie inside `bytes`.
    pub fn new(bytes: Vec<u8>, layout: &[(u32, u32)]) -> Result<KernelArgs, String> {
        if let Some(&(o, s)) = layout
            .iter()
            .find(|&&(o, s)| o as u64 + s as u64 > bytes.len() as u64)
        {
            return Err(format!(
                "parameter at offset {o} ({s} bytes) lies outside the {} argument bytes",
                bytes.len()
            ));
        }
        Ok(KernelArgs {
            bytes,
            offsets: layout.iter().map(|&(o, _)| o).collect(),
        })
    }

    /// Parameters that are all 8-byte words (the flush kernels').
    pub fn words(words: &[u64]) -> KernelArgs {
        KernelArgs {
            bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
            offsets: (0..words.len() as u32).map(|i| i * 8).collect(),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// `cuLaunchKernelEx` on `stream`.
///
/// # Safety
/// Run with `args`, the kernel reads only memory that is *readable* and writes only memory
/// that is *writable* (`crate::memory`'s contracts) until it completes on `stream`: under
/// unified addressing an argument word can name this process's host memory.
pub unsafe fn launch(
    function: &impl AsFunction,
    cfg: &LaunchConfig,
    args: &mut KernelArgs,
    stream: &impl AsStream,
) -> CuResult<()> {
    let base = args.bytes.as_mut_ptr();
    let mut params: Vec<*mut c_void> = args
        .offsets
        .iter()
        // SAFETY: `KernelArgs::new` checked every parameter lies inside `bytes`.
        .map(|&o| unsafe { base.add(o as usize) } as *mut c_void)
        .collect();
    let attrs = &cfg.attributes;
    let raw = sys::CUlaunchConfig {
        gridDimX: cfg.grid[0],
        gridDimY: cfg.grid[1],
        gridDimZ: cfg.grid[2],
        blockDimX: cfg.block[0],
        blockDimY: cfg.block[1],
        blockDimZ: cfg.block[2],
        sharedMemBytes: cfg.shared_bytes,
        hStream: stream.raw_stream(),
        // The driver only reads the attributes (the field is not const in the C header).
        attrs: if attrs.is_empty() {
            ptr::null_mut()
        } else {
            attrs.as_ptr() as *mut sys::CUlaunchAttribute
        },
        numAttrs: attrs.len() as u32,
    };
    let params_ptr = if params.is_empty() {
        ptr::null_mut()
    } else {
        params.as_mut_ptr()
    };
    // SAFETY: raw and attrs live across the call; params point into args' bytes, which the
    // driver copies at launch; the function is live (ours keeps its module loaded; the
    // application's is live by `ForeignFunction::from_launch`'s contract); what the kernel
    // touches is this function's contract.
    check(
        unsafe {
            sys::cuLaunchKernelEx(&raw, function.raw_function(), params_ptr, ptr::null_mut())
        },
        "cuLaunchKernelEx",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_args_refuse_a_parameter_past_the_bytes() {
        assert!(KernelArgs::new(vec![0; 16], &[(0, 8), (8, 8)]).is_ok());
        let e = KernelArgs::new(vec![0; 12], &[(0, 8), (8, 8)]).unwrap_err();
        assert!(
            e.contains("offset 8") && e.contains("12 argument bytes"),
            "{e}"
        );
        assert!(KernelArgs::new(vec![], &[(u32::MAX, u32::MAX)]).is_err());
        assert_eq!(KernelArgs::words(&[1, 2]).bytes().len(), 16);
    }

    #[test]
    fn handle_attributes_are_not_taken_as_bytes() {
        let mut cfg = LaunchConfig::new([1; 3], [1; 3], 0);
        assert!(cfg
            .attribute(attr::LAUNCH_COMPLETION_EVENT, &[0; 64])
            .is_err());
        assert!(cfg.attribute(attr::PROGRAMMATIC_EVENT, &[0; 64]).is_err());
        assert!(cfg.attribute(attr::COOPERATIVE, &[0; 64]).is_ok());
        assert!(cfg.attribute(99, &[0; 64]).is_err());
        assert_eq!(cfg.attribute_ids(), vec![attr::COOPERATIVE]);
    }

    #[test]
    fn attribute_ids_map_without_transmute() {
        for id in [0u32, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16] {
            assert_eq!(attribute_id(id).map(|a| a as u32), Some(id));
        }
        assert!(attribute_id(15).is_none());
        assert!(attribute_id(u32::MAX).is_none());
    }
}
