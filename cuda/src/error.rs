//! Driver errors: every raw call goes through `check`, which turns a `CUresult` into a
//! `CudaError` naming the call.

use std::ffi::CStr;
use std::ptr;

use crate::sys::{self, CUresult};

/// A failed driver call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{call} failed: {name} ({code})")]
pub struct CudaError {
    pub call: &'static str,
    pub code: u32,
    pub name: String,
}

impl CudaError {
    pub fn is(&self, code: CUresult) -> bool {
        self.code == code as u32
    }

    /// An error the driver would return, raised by this layer before calling it.
    pub(crate) fn refused(call: &'static str, code: CUresult, why: String) -> CudaError {
        CudaError {
            call,
            code: code as u32,
            name: why,
        }
    }

    /// Whether this is a fault of a kernel (sticky: every later call fails the same way).
    pub fn is_kernel_fault(&self) -> bool {
        use CUresult as R;
        [
            R::CUDA_ERROR_ILLEGAL_ADDRESS,
            R::CUDA_ERROR_MISALIGNED_ADDRESS,
            R::CUDA_ERROR_ILLEGAL_INSTRUCTION,
            R::CUDA_ERROR_HARDWARE_STACK_ERROR,
            R::CUDA_ERROR_INVALID_ADDRESS_SPACE,
            R::CUDA_ERROR_INVALID_PC,
            R::CUDA_ERROR_LAUNCH_FAILED,
        ]
        .iter()
        .any(|&c| self.is(c))
    }
}

pub type CuResult<T> = Result<T, CudaError>;

fn error_name(code: CUresult) -> String {
    let mut p: *const std::ffi::c_char = ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string or leaves it null.
    let r = unsafe { sys::cuGetErrorName(code, &mut p) };
    if r != CUresult::CUDA_SUCCESS || p.is_null() {
        return format!("{code:?}");
    }
    // SAFETY: non-null pointers from cuGetErrorName are static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Turns a raw result into `Result`.
pub(crate) fn check(code: CUresult, call: &'static str) -> CuResult<()> {
    if code == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError {
            call,
            code: code as u32,
            name: error_name(code),
        })
    }
}

/// Why the driver cannot be used at all.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DriverUnavailable {
    #[error("no CUDA driver: libcuda.so could not be loaded (is the NVIDIA driver installed, and is this a GPU machine?)")]
    NoLibrary,
    #[error("the CUDA driver did not initialise: {0} (no GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES)")]
    Init(CudaError),
    #[error("no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)")]
    NoDevice,
    #[error("device {requested} does not exist: this machine has {count} CUDA device(s)")]
    NoSuchDevice { requested: i32, count: i32 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_faults_are_told_apart_from_other_errors() {
        let e = |c: CUresult| CudaError::refused("x", c, String::new());
        assert!(e(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS).is_kernel_fault());
        assert!(e(CUresult::CUDA_ERROR_LAUNCH_FAILED).is_kernel_fault());
        assert!(!e(CUresult::CUDA_ERROR_OUT_OF_MEMORY).is_kernel_fault());
        assert!(!e(CUresult::CUDA_ERROR_INVALID_VALUE).is_kernel_fault());
    }
}
