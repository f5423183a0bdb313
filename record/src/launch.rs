//! Reading a kernel launch out of a CUPTI driver-API callback: which function, geometry,
//! stream, arguments, launch attributes, for every launch entry point.

use std::ffi::c_void;

use kreplay_cuda::callbacks::cbid as cb;
use kreplay_cuda::cupti::sys as csys;
use kreplay_cuda::launch::attr::{
    CLUSTER_DIMENSION as ATTR_CLUSTER_DIMENSION, COOPERATIVE as ATTR_COOPERATIVE,
};
use kreplay_cuda::sys;
use kreplay_cuda::{ForeignFunction, ForeignStream};
use kreplay_format::LaunchApi;
/// `CU_STREAM_PER_THREAD`.
const STREAM_PER_THREAD: usize = 0x2;

/// A launch as the application made it. Raw pointers are valid during the callback only.
pub struct LaunchView {
    pub api: LaunchApi,
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

impl LaunchView {
    /// The launched function, made usable (see `ForeignFunction::from_launch`).
    ///
    /// # Safety
    /// Only during the callback that decoded this view.
    pub unsafe fn foreign_function(&self) -> ForeignFunction {
        // SAFETY: the launch is being made now, in the current context.
        unsafe { ForeignFunction::from_launch(self.function) }
    }

    /// The launch stream.
    ///
    /// # Safety
    /// Only during the callback that decoded this view.
    pub unsafe fn foreign_stream(&self) -> ForeignStream {
        // SAFETY: the application is launching on this stream now.
        unsafe { ForeignStream::from_raw(self.stream) }
    }

    pub fn cluster(&self) -> [u32; 3] {
        for (id, v) in &self.attributes {
            if *id == ATTR_CLUSTER_DIMENSION {
                let d = |i: usize| u32::from_le_bytes([v[i], v[i + 1], v[i + 2], v[i + 3]]);
                return [d(0), d(4), d(8)];
            }
        }
        [0, 0, 0]
    }
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
pub unsafe fn decode(cbid: u32, params: *const c_void) -> Option<LaunchView> {
    if params.is_null() {
        return None;
    }
    match cbid {
        cb::LAUNCH_KERNEL | cb::LAUNCH_KERNEL_PTSZ => {
            // SAFETY: for these ids CUPTI passes cuLaunchKernel_params (the ptsz struct has the
            // same layout).
            let p = unsafe { &*(params as *const csys::cuLaunchKernel_params) };
            Some(LaunchView {
                api: LaunchApi::LaunchKernel,
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
            Some(LaunchView {
                api: LaunchApi::LaunchCooperativeKernel,
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
            let mut attributes = Vec::new();
            if !c.attrs.is_null() {
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
            }
            let cooperative = attributes
                .iter()
                .any(|(id, v)| *id == ATTR_COOPERATIVE && v[..4] != [0, 0, 0, 0]);
            Some(LaunchView {
                api: if cooperative {
                    LaunchApi::LaunchCooperativeKernel
                } else {
                    LaunchApi::LaunchKernelEx
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

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`.
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;

/// Flattens the kernel arguments into one buffer laid out at the parameter offsets.
///
/// # Safety
/// `view` must come from `decode` during the same callback; `layout` from `cuFuncGetParamInfo`
/// for the launched function.
pub unsafe fn argument_bytes(view: &LaunchView, layout: &[(u32, u32)]) -> Option<Vec<u8>> {
    let total = layout
        .iter()
        .map(|(o, s)| (o + s) as usize)
        .max()
        .unwrap_or(0);
    let mut out = vec![0u8; total];
    if !view.kernel_params.is_null() {
        for (i, &(off, size)) in layout.iter().enumerate() {
            // SAFETY: kernelParams has one pointer per parameter, each to `size` bytes.
            let src = unsafe { *view.kernel_params.add(i) } as *const u8;
            if src.is_null() {
                return None;
            }
            // SAFETY: as above; destination range is inside `out` by construction.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src,
                    out.as_mut_ptr().add(off as usize),
                    size as usize,
                )
            };
        }
        return Some(out);
    }
    if view.extra.is_null() {
        return if total == 0 { Some(out) } else { None };
    }
    let mut buf: *const u8 = std::ptr::null();
    let mut size: usize = 0;
    for i in 0..16 {
        // SAFETY: `extra` is a key/value list terminated by CU_LAUNCH_PARAM_END.
        let key = unsafe { *view.extra.add(2 * i) } as usize;
        if key == PARAM_END {
            break;
        }
        // SAFETY: each non-END key is followed by its value.
        let value = unsafe { *view.extra.add(2 * i + 1) };
        match key {
            PARAM_BUFFER_POINTER => buf = value as *const u8,
            // SAFETY: the size value points at a size_t.
            PARAM_BUFFER_SIZE if !value.is_null() => size = unsafe { *(value as *const usize) },
            _ => {}
        }
    }
    if buf.is_null() {
        return None;
    }
    // The buffer may be padded past the last parameter: keep all of it.
    out.resize(total.max(size), 0);
    // SAFETY: the application promised `size` readable bytes at `buf`; `out` holds at least
    // `size` bytes.
    unsafe { std::ptr::copy_nonoverlapping(buf, out.as_mut_ptr(), size) };
    Some(out)
}
