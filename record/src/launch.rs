//! A kernel launch as the capture sees it (decoded from its callback by
//! `kreplay_cuda::cupti_events`), and its argument bytes.

use std::ffi::c_void;

use kreplay_cuda::cupti_events::{Launch, LaunchEntry};
use kreplay_cuda::launch::attr::CLUSTER_DIMENSION as ATTR_CLUSTER_DIMENSION;
use kreplay_cuda::sys;
use kreplay_cuda::{ForeignFunction, ForeignStream};
use kreplay_format::LaunchApi;

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

impl From<Launch> for LaunchView {
    fn from(l: Launch) -> LaunchView {
        LaunchView {
            api: launch_api(l.entry),
            function: l.function,
            grid: l.grid,
            block: l.block,
            shared_bytes: l.shared_bytes,
            stream: l.stream,
            kernel_params: l.kernel_params,
            extra: l.extra,
            attributes: l.attributes,
        }
    }
}

/// Decodes the parameter block of a launch callback.
///
/// # Safety
/// `params` must be the `functionParams` of a CUPTI driver callback with id `cbid`.
pub unsafe fn decode(cbid: u32, params: *const c_void) -> Option<LaunchView> {
    // SAFETY: the caller's contract is the decoder's.
    unsafe { kreplay_cuda::cupti_events::decode_launch(cbid, params) }.map(LaunchView::from)
}

/// The capture format's name for a launch entry point.
fn launch_api(e: LaunchEntry) -> LaunchApi {
    match e {
        LaunchEntry::Kernel => LaunchApi::LaunchKernel,
        LaunchEntry::Cooperative => LaunchApi::LaunchCooperativeKernel,
        LaunchEntry::KernelEx => LaunchApi::LaunchKernelEx,
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
