//! Code: modules kreplay loads (`Module`, whose `Function`s keep it loaded) and the
//! application's functions and modules, seen from a launch callback (`ForeignFunction`,
//! `ForeignModule`, made only through `unsafe fn from_raw`).

use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::sync::Arc;

use crate::error::{check, CuResult, CudaError};
use crate::sys::{self, CUresult};

struct LoadedModule(sys::CUmodule);

// SAFETY: a module handle is an opaque token valid from any thread of its context.
unsafe impl Send for LoadedModule {}
// SAFETY: as above; the driver serialises its own state.
unsafe impl Sync for LoadedModule {}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        // SAFETY: unloads the module loaded in `Module::load`; no Function outlives it (each
        // holds this value through an Arc).
        unsafe {
            sys::cuModuleUnload(self.0);
        }
    }
}

/// A module loaded by kreplay.
pub struct Module {
    inner: Arc<LoadedModule>,
}

/// A kernel of a `Module`; the module stays loaded while any of its functions lives.
#[derive(Clone)]
pub struct Function {
    raw: sys::CUfunction,
    _module: Arc<LoadedModule>,
}

// SAFETY: see LoadedModule; a function handle is valid from any thread of its context.
unsafe impl Send for Function {}

fn c_name(name: &str, call: &'static str) -> CuResult<CString> {
    CString::new(name).map_err(|_| {
        CudaError::refused(
            call,
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "name contains NUL".into(),
        )
    })
}

impl Module {
    /// Loads a cubin, fatbin or PTX image, after checking that the image's own offsets stay
    /// inside it (the driver takes no length and would read past the buffer).
    pub fn load(image: &[u8]) -> CuResult<Module> {
        let kind = crate::image::check_image(image).map_err(|why| {
            CudaError::refused(
                "cuModuleLoadData",
                CUresult::CUDA_ERROR_INVALID_IMAGE,
                format!("the code image was refused before loading: {why}"),
            )
        })?;
        let mut owned;
        let data = if kind != crate::image::ImageKind::Ptx || image.last() == Some(&0) {
            image
        } else {
            // PTX must be NUL-terminated.
            owned = image.to_vec();
            owned.push(0);
            &owned[..]
        };
        let mut m = ptr::null_mut();
        check(
            // SAFETY: data is a complete image, checked above, that outlives the call.
            unsafe { sys::cuModuleLoadData(&mut m, data.as_ptr() as *const c_void) },
            "cuModuleLoadData",
        )?;
        Ok(Module {
            inner: Arc::new(LoadedModule(m)),
        })
    }

    pub fn function(&self, name: &str) -> CuResult<Function> {
        let c = c_name(name, "cuModuleGetFunction")?;
        let mut f = ptr::null_mut();
        check(
            // SAFETY: writes one function handle for a loaded module.
            unsafe { sys::cuModuleGetFunction(&mut f, self.inner.0, c.as_ptr()) },
            "cuModuleGetFunction",
        )?;
        Ok(Function {
            raw: f,
            _module: Arc::clone(&self.inner),
        })
    }

    /// A `__device__`/`__constant__` variable: its address and size.
    pub fn global(&self, name: &str) -> CuResult<(u64, u64)> {
        module_global(self.inner.0, name)
    }
}

fn module_global(module: sys::CUmodule, name: &str) -> CuResult<(u64, u64)> {
    let c = c_name(name, "cuModuleGetGlobal")?;
    let mut p = 0;
    let mut size = 0usize;
    check(
        // SAFETY: writes a pointer and a size; callers pass a live module handle.
        unsafe { sys::cuModuleGetGlobal_v2(&mut p, &mut size, module, c.as_ptr()) },
        "cuModuleGetGlobal",
    )?;
    Ok((p, size as u64))
}

mod sealed {
    pub trait Sealed {}
}

/// A function that can be launched: one of kreplay's modules, or the application's.
pub trait AsFunction: sealed::Sealed {
    #[doc(hidden)]
    fn raw_function(&self) -> sys::CUfunction;
}

impl sealed::Sealed for Function {}
impl AsFunction for Function {
    fn raw_function(&self) -> sys::CUfunction {
        self.raw
    }
}

impl sealed::Sealed for ForeignFunction {}
impl AsFunction for ForeignFunction {
    fn raw_function(&self) -> sys::CUfunction {
        self.0
    }
}

impl Function {
    /// Raises the dynamic shared memory limit to `bytes`.
    pub fn set_max_dynamic_shared(&self, bytes: u32) -> CuResult<()> {
        // SAFETY: a function of a module this value keeps loaded.
        check(
            unsafe {
                sys::cuFuncSetAttribute(
                    self.raw,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes as i32,
                )
            },
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
        )
    }

    /// Allows clusters larger than the portable 8 blocks.
    pub fn allow_non_portable_cluster(&self) -> CuResult<()> {
        // SAFETY: a function of a module this value keeps loaded.
        check(
            unsafe {
                sys::cuFuncSetAttribute(
                    self.raw,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                    1,
                )
            },
            "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)",
        )
    }

    /// Offset and size of every kernel parameter, in order (asks the driver until it says
    /// there are no more: one failing call).
    pub fn parameter_layout(&self) -> Vec<(u32, u32)> {
        // SAFETY: a live function handle.
        unsafe { parameter_layout(self.raw) }
    }

    /// The most threads a block of this function may have (its `.maxntid`, or what its
    /// registers allow).
    pub fn max_threads_per_block(&self) -> CuResult<u32> {
        let mut v = 0i32;
        check(
            // SAFETY: writes one int for a function of a module this value keeps loaded.
            unsafe {
                sys::cuFuncGetAttribute(
                    &mut v,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                    self.raw,
                )
            },
            "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)",
        )?;
        Ok(v.max(0) as u32)
    }
}

/// # Safety
/// `f` must be a live function handle of the current context.
unsafe fn parameter_layout(f: sys::CUfunction) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for i in 0..4096usize {
        let mut off = 0usize;
        let mut size = 0usize;
        // SAFETY: writes two size_t; an index past the last parameter returns an error.
        let r = unsafe { sys::cuFuncGetParamInfo(f, i, &mut off, &mut size) };
        if r != CUresult::CUDA_SUCCESS {
            break;
        }
        out.push((off as u32, size as u32));
    }
    out
}

/// A function of the application, as a launch callback names it.
#[derive(Clone, Copy)]
pub struct ForeignFunction(sys::CUfunction);

/// A module of the application.
#[derive(Clone, Copy)]
pub struct ForeignModule(sys::CUmodule);

impl ForeignFunction {
    /// The handle of a launch made usable: a `CUkernel` disguised as a `CUfunction` (runtime
    /// `<<<>>>` launches pass one) becomes the function of the current context.
    ///
    /// # Safety
    /// `raw` must be the function (or kernel) handle of a launch being made in the current
    /// context, used only while the application keeps its module loaded (during the callback).
    pub unsafe fn from_launch(raw: sys::CUfunction) -> ForeignFunction {
        let mut m = ptr::null_mut();
        // SAFETY: the driver validates f and fails with INVALID_HANDLE for a CUkernel.
        if unsafe { sys::cuFuncGetModule(&mut m, raw) } == CUresult::CUDA_SUCCESS {
            return ForeignFunction(raw);
        }
        let mut f = ptr::null_mut();
        // SAFETY: writes one function handle; the driver validates the kernel handle.
        match unsafe { sys::cuKernelGetFunction(&mut f, raw as sys::CUkernel) } {
            CUresult::CUDA_SUCCESS => ForeignFunction(f),
            _ => ForeignFunction(raw),
        }
    }

    /// The module the function belongs to.
    pub fn module(&self) -> CuResult<ForeignModule> {
        let mut m = ptr::null_mut();
        check(
            // SAFETY: writes one module handle; live by `from_launch`'s contract.
            unsafe { sys::cuFuncGetModule(&mut m, self.0) },
            "cuFuncGetModule",
        )?;
        Ok(ForeignModule(m))
    }

    /// The mangled name.
    pub fn name(&self) -> CuResult<String> {
        let mut p: *const std::ffi::c_char = ptr::null();
        check(
            // SAFETY: writes a pointer to a driver-owned NUL-terminated string.
            unsafe { sys::cuFuncGetName(&mut p, self.0) },
            "cuFuncGetName",
        )?;
        if p.is_null() {
            return Ok(String::new());
        }
        // SAFETY: non-null, NUL-terminated, owned by the driver for the function's life.
        Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// Offset and size of every kernel parameter, in order.
    pub fn parameter_layout(&self) -> Vec<(u32, u32)> {
        // SAFETY: live by `from_launch`'s contract.
        unsafe { parameter_layout(self.0) }
    }
}

impl ForeignModule {
    /// The handle as an identity to compare (never dereferenced by the caller).
    pub fn handle(&self) -> usize {
        self.0 as usize
    }

    /// A `__device__`/`__constant__` variable of the application's module.
    pub fn global(&self, name: &str) -> CuResult<(u64, u64)> {
        module_global(self.0, name)
    }
}
