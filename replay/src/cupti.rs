//! CUPTI callback API, wrapped once. Used by the recorder (injected into the application) to
//! see kernel launches and module loads. Like libcuda, libcupti is loaded lazily: check
//! `cupti_present` first.

use std::ffi::{c_void, CStr};
use std::ptr;

pub use cudarc::cupti::sys;
use sys::CUptiResult;

/// A failed CUPTI call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{call} failed: {name} ({code})")]
pub struct CuptiError {
    pub call: &'static str,
    pub code: u32,
    pub name: String,
}

impl CuptiError {
    /// Another tool (a profiler, a tracer) already holds the one CUPTI subscriber slot.
    pub fn is_multiple_subscribers(&self) -> bool {
        self.code == CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED as u32
    }

    pub fn is(&self, code: CUptiResult) -> bool {
        self.code == code as u32
    }
}

pub(crate) fn check(code: CUptiResult, call: &'static str) -> Result<(), CuptiError> {
    if code == CUptiResult::CUPTI_SUCCESS {
        return Ok(());
    }
    let mut p: *const std::ffi::c_char = ptr::null();
    // SAFETY: writes a pointer to a static string or leaves it null.
    let r = unsafe { sys::cuptiGetResultString(code, &mut p) };
    let name = if r == CUptiResult::CUPTI_SUCCESS && !p.is_null() {
        // SAFETY: static NUL-terminated string from CUPTI.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        format!("{code:?}")
    };
    Err(CuptiError {
        call,
        code: code as u32,
        name,
    })
}

/// Whether libcupti can be loaded.
pub fn cupti_present() -> bool {
    // SAFETY: only dlopens the library.
    unsafe { sys::is_culib_present() }
}

/// The callback signature CUPTI calls.
pub type RawCallback = unsafe extern "C" fn(
    userdata: *mut c_void,
    domain: sys::CUpti_CallbackDomain,
    cbid: sys::CUpti_CallbackId,
    cbdata: *const c_void,
);

/// A CUPTI subscriber. Kept for the life of the process (the recorder never unsubscribes:
/// callbacks may be in flight on other threads at exit).
pub struct Subscriber {
    raw: sys::CUpti_SubscriberHandle,
}

// SAFETY: the handle is an opaque token CUPTI accepts from any thread.
unsafe impl Send for Subscriber {}
// SAFETY: as above; CUPTI serialises its own state.
unsafe impl Sync for Subscriber {}

impl Subscriber {
    pub fn subscribe(callback: RawCallback) -> Result<Subscriber, CuptiError> {
        let mut raw = ptr::null_mut();
        // SAFETY: callback is a valid function for the life of the process; no userdata.
        check(
            unsafe { sys::cuptiSubscribe(&mut raw, Some(callback), ptr::null_mut()) },
            "cuptiSubscribe",
        )?;
        Ok(Subscriber { raw })
    }

    pub fn enable_callback(
        &self,
        domain: sys::CUpti_CallbackDomain,
        cbid: u32,
    ) -> Result<(), CuptiError> {
        // SAFETY: valid subscriber handle.
        check(
            unsafe { sys::cuptiEnableCallback(1, self.raw, domain, cbid) },
            "cuptiEnableCallback",
        )
    }
}

/// Driver-API callback ids of every kernel launch entry point kreplay understands.
pub mod launch_cbid {
    use super::sys::CUpti_driver_api_trace_cbid_enum as C;
    pub const LAUNCH_KERNEL: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel as u32;
    pub const LAUNCH_KERNEL_PTSZ: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz as u32;
    pub const LAUNCH_KERNEL_EX: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx as u32;
    pub const LAUNCH_KERNEL_EX_PTSZ: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz as u32;
    pub const LAUNCH_COOPERATIVE: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel as u32;
    pub const LAUNCH_COOPERATIVE_PTSZ: u32 =
        C::CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz as u32;
    pub const ALL: [u32; 6] = [
        LAUNCH_KERNEL,
        LAUNCH_KERNEL_PTSZ,
        LAUNCH_KERNEL_EX,
        LAUNCH_KERNEL_EX_PTSZ,
        LAUNCH_COOPERATIVE,
        LAUNCH_COOPERATIVE_PTSZ,
    ];
}
