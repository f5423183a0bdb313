//! Launch callbacks: which function, geometry, stream, arguments and launch attributes, for
//! every launch entry point.

use std::ffi::c_void;

use crate::callbacks::cbid as cb;
use crate::cupti::sys as csys;
use crate::launch::attr::COOPERATIVE as ATTR_COOPERATIVE;
use crate::sys;

/// `CU_STREAM_PER_THREAD`.
const STREAM_PER_THREAD: usize = 0x2;

/// Which launch entry point, as a replay must repeat it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchEntry {
    /// `cuLaunchKernel`.
    Kernel,
    /// `cuLaunchCooperativeKernel`, or `cuLaunchKernelEx` with the cooperative attribute.
    Cooperative,
    /// `cuLaunchKernelEx`.
    KernelEx,
}

/// A launch as the application made it. Raw pointers are valid during the callback only.
#[derive(Debug, Clone)]
pub struct Launch {
    pub entry: LaunchEntry,
    pub function: sys::CUfunction,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub stream: sys::CUstream,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    /// Launch attributes: id and the 64 raw value bytes.
    pub attributes: Vec<(u32, [u8; 64])>,
}

fn per_thread(stream: sys::CUstream, ptsz: bool) -> sys::CUstream {
    if ptsz && stream.is_null() {
        STREAM_PER_THREAD as sys::CUstream
    } else {
        stream
    }
}

/// Decodes the parameter block of a launch callback.
///
/// # Safety
/// `params` must be the `functionParams` of a CUPTI driver callback with id `cbid`.
pub(super) unsafe fn decode(cbid: u32, params: *const c_void) -> Option<Launch> {
    if params.is_null() {
        return None;
    }
    match cbid {
        cb::LAUNCH_KERNEL | cb::LAUNCH_KERNEL_PTSZ => {
            // SAFETY: for these ids CUPTI passes cuLaunchKernel_params (the ptsz struct has the
            // same layout).
            let p = unsafe { &*(params as *const csys::cuLaunchKernel_params) };
            Some(Launch {
                entry: LaunchEntry::Kernel,
                function: p.f as sys::CUfunction,
                grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
                block: [p.blockDimX, p.blockDimY, p.blockDimZ],
                shared_bytes: p.sharedMemBytes,
                stream: per_thread(p.hStream as sys::CUstream, cbid == cb::LAUNCH_KERNEL_PTSZ),
                kernel_params: p.kernelParams,
                extra: p.extra,
                attributes: Vec::new(),
            })
        }
        cb::LAUNCH_COOPERATIVE | cb::LAUNCH_COOPERATIVE_PTSZ => {
            // SAFETY: CUPTI passes cuLaunchCooperativeKernel_params for these ids.
            let p = unsafe { &*(params as *const csys::cuLaunchCooperativeKernel_params) };
            Some(Launch {
                entry: LaunchEntry::Cooperative,
                function: p.f as sys::CUfunction,
                grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
                block: [p.blockDimX, p.blockDimY, p.blockDimZ],
                shared_bytes: p.sharedMemBytes,
                stream: per_thread(
                    p.hStream as sys::CUstream,
                    cbid == cb::LAUNCH_COOPERATIVE_PTSZ,
                ),
                kernel_params: p.kernelParams,
                extra: std::ptr::null_mut(),
                attributes: Vec::new(),
            })
        }
        cb::LAUNCH_KERNEL_EX | cb::LAUNCH_KERNEL_EX_PTSZ => {
            // SAFETY: CUPTI passes cuLaunchKernelEx_params for these ids.
            let p = unsafe { &*(params as *const csys::cuLaunchKernelEx_params) };
            if p.config.is_null() {
                return None;
            }
            // SAFETY: the config pointer is the application's, valid during the call.
            let c = unsafe { &*(p.config as *const sys::CUlaunchConfig) };
            // SAFETY: `c` is the launch's config, valid during the call.
            let attributes = unsafe { attributes_of(c) };
            let cooperative = attributes
                .iter()
                .any(|(id, v)| *id == ATTR_COOPERATIVE && v[..4] != [0, 0, 0, 0]);
            Some(Launch {
                entry: if cooperative {
                    LaunchEntry::Cooperative
                } else {
                    LaunchEntry::KernelEx
                },
                function: p.f as sys::CUfunction,
                grid: [c.gridDimX, c.gridDimY, c.gridDimZ],
                block: [c.blockDimX, c.blockDimY, c.blockDimZ],
                shared_bytes: c.sharedMemBytes,
                stream: per_thread(c.hStream, cbid == cb::LAUNCH_KERNEL_EX_PTSZ),
                kernel_params: p.kernelParams,
                extra: p.extra,
                attributes,
            })
        }
        _ => None,
    }
}

/// The launch attributes of a `cuLaunchKernelEx` config (at most 64).
///
/// # Safety
/// `c` must be the application's launch config, during the launch call.
unsafe fn attributes_of(c: &sys::CUlaunchConfig) -> Vec<(u32, [u8; 64])> {
    let mut attributes = Vec::new();
    if c.attrs.is_null() {
        return attributes;
    }
    for i in 0..c.numAttrs.min(64) as usize {
        // SAFETY: attrs points to numAttrs attributes supplied by the application.
        // No reference to the struct is made: its id field has an enum type, and an
        // id from a newer CUDA than these bindings would be an invalid value of it;
        // it is read as the u32 it is (`#[repr(u32)]`).
        let a = unsafe { c.attrs.add(i) };
        // SAFETY: `a` points at a readable attribute; the id is a 4-byte integer.
        let id = unsafe { std::ptr::addr_of!((*a).id).cast::<u32>().read_unaligned() };
        let mut v = [0u8; 64];
        // SAFETY: the value union is at least 64 bytes of plain data.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::addr_of!((*a).value).cast::<u8>(),
                v.as_mut_ptr(),
                64.min(std::mem::size_of::<sys::CUlaunchAttributeValue>()),
            )
        };
        attributes.push((id, v));
    }
    attributes
}
