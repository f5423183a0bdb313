//! The Compute Sanitizer API (`libsanitizer-public.so`), loaded at run time: what
//! `record --memory touched` (issue 35) will run the recorder on. On the 13.x drivers it
//! cannot share a process with CUPTI's callbacks (the probe in `scripts/probes/sanitizer-cupti`
//! measured it), so that mode takes the driver-API, resource and launch callbacks from here
//! instead, and patches the one kernel it captures to learn which pages it touches.
//!
//! This module is the FFI layer only: the library found and its entry points resolved once
//! (`SanitizerApi::load`), results turned into errors, and the callback payloads the recorder
//! needs (`decode`) read as typed values. The layouts are those of the 13.0 headers
//! (`sanitizer_callbacks.h`), checked by the tests against sizes and offsets measured from
//! those headers with a C compiler. The recorder's front end on it is
//! `kreplay_record`'s `recorder::sanitizer_hook`; its instrumented run is `touched_run`.

use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};

/// The library's name, as the toolkit ships it (`compute-sanitizer/`) and the
/// `nvidia-cuda-sanitizer-api` wheel (`nvidia/cu13/lib/`).
pub const LIBRARY: &str = "libsanitizer-public.so";
/// Names the library to load, ahead of the places searched.
pub const LIBRARY_ENV: &str = "KREPLAY_SANITIZER_LIB";

/// `SanitizerResult`: 0 is success.
pub type SanitizerResult = u32;
pub const SANITIZER_SUCCESS: SanitizerResult = 0;

/// Callback domains (`Sanitizer_CallbackDomain`).
pub mod domain {
    pub const DRIVER_API: u32 = 1;
    pub const RUNTIME_API: u32 = 2;
    pub const RESOURCE: u32 = 3;
    pub const SYNCHRONIZE: u32 = 4;
    pub const LAUNCH: u32 = 5;
}

/// Resource callback ids (`Sanitizer_CallbackIdResource`) the recorder follows.
pub mod resource {
    pub const CONTEXT_CREATION_FINISHED: u32 = 3;
    pub const CONTEXT_DESTROY_STARTING: u32 = 4;
    pub const MODULE_LOADED: u32 = 9;
    pub const MODULE_UNLOAD_STARTING: u32 = 10;
    pub const DEVICE_MEMORY_ALLOC: u32 = 11;
    pub const DEVICE_MEMORY_FREE: u32 = 12;
    pub const MEMORY_ALLOC_ASYNC: u32 = 15;
    pub const MEMORY_FREE_ASYNC: u32 = 16;
}

/// Launch callback ids (`Sanitizer_CallbackIdLaunch`).
pub mod launch {
    pub const BEGIN: u32 = 1;
    pub const AFTER_SYSCALL_SETUP: u32 = 2;
    pub const END: u32 = 3;
}

/// Instruction kinds a patch may hook (`Sanitizer_InstructionId`) that move global memory:
/// what a touched-pages patch hooks (13.0; the tensor-memory-accelerator loads and stores,
/// 43 and 44, exist from 13.3 only).
pub mod instruction {
    pub const GLOBAL_MEMORY_ACCESS: u32 = 3;
    pub const MEMCPY_ASYNC: u32 = 14;
    pub const MATRIX_MEMORY_ACCESS: u32 = 19;
    pub const ASYNC_STORE: u32 = 26;
    pub const ASYNC_REDUCTION: u32 = 27;
    pub const BULK_COPY_GLOBAL_TO_SHARED: u32 = 30;
    pub const BULK_COPY_SHARED_TO_GLOBAL: u32 = 35;
    pub const BULK_REDUCTION_SHARED_TO_GLOBAL: u32 = 37;
}

/// `Sanitizer_ApiCallbackSite`.
pub const API_ENTER: u32 = 0;
pub const API_EXIT: u32 = 1;

/// `Sanitizer_CallbackData`: the payload of the driver- and runtime-API domains.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CallbackData {
    pub callback_site: u32,
    pub function_name: *const c_char,
    /// The call's `*_params` struct, as CUPTI's (the same callback ids and structs).
    pub function_params: *const c_void,
    pub function_return_value: *const c_void,
    pub symbol_name: *const c_char,
    pub context: *mut c_void,
}

/// `Sanitizer_ResourceModuleData` (MODULE_LOADED, MODULE_UNLOAD_STARTING).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ResourceModuleData {
    pub context: *mut c_void,
    pub module: *mut c_void,
    pub cubin_size: usize,
    pub cubin: *const c_char,
    pub library: *mut c_void,
}

/// `Sanitizer_ResourceContextData` (CONTEXT_*).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ResourceContextData {
    pub context: *mut c_void,
    pub device: i32,
}

/// `Sanitizer_ResourceMemoryData` (the memory allocation and free callbacks).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ResourceMemoryData {
    pub address: u64,
    pub size: u64,
    pub context: *mut c_void,
    pub device: i32,
    pub stream: *mut c_void,
    pub h_stream: *mut c_void,
    pub memory_pool: *mut c_void,
    pub flags: u32,
    pub permissions: u32,
    pub visibility: u32,
    pub source_device: i32,
}

/// `Sanitizer_LaunchData` (the launch domain).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LaunchData {
    pub context: *mut c_void,
    pub stream: *mut c_void,
    pub h_stream: *mut c_void,
    pub module: *mut c_void,
    pub function: *mut c_void,
    pub function_name: *const c_char,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub cluster: [u32; 3],
    pub grid_id: u64,
    pub h_launch: *mut c_void,
    pub device: i32,
    pub api_context: *mut c_void,
    pub api_stream: *mut c_void,
    pub h_api_stream: *mut c_void,
}

/// `Sanitizer_CallbackFunc`.
pub type Callback =
    unsafe extern "C" fn(userdata: *mut c_void, domain: u32, cbid: u32, cbdata: *const c_void);

/// A callback's payload, read as what the recorder needs of it.
#[derive(Debug, Clone, Copy)]
pub enum SanitizerEvent<'a> {
    /// A driver- or runtime-API call (`domain`), at its ENTER or EXIT.
    Api {
        domain: u32,
        cbid: u32,
        enter: bool,
        params: *const c_void,
        context: usize,
    },
    ContextCreated {
        context: usize,
    },
    ContextDestroying {
        context: usize,
    },
    /// A module was loaded; its cubin when the payload holds one.
    ModuleLoaded {
        module: usize,
        cubin: Option<&'a [u8]>,
    },
    ModuleUnloading {
        context: usize,
        module: usize,
    },
    /// Device memory allocated (`freed` false) or freed.
    Memory {
        address: u64,
        size: u64,
        freed: bool,
    },
    LaunchBegin(&'a LaunchData),
    LaunchEnd(&'a LaunchData),
    /// Anything else (not followed).
    Other {
        domain: u32,
        cbid: u32,
    },
}

/// Reads a callback's payload.
///
/// # Safety
/// `cbdata` is the payload the Sanitizer API passed for `(domain, cbid)`, read during the
/// callback (the payloads live only that long): a struct of the type the headers give for that
/// pair, or null.
pub unsafe fn decode<'a>(domain: u32, cbid: u32, cbdata: *const c_void) -> SanitizerEvent<'a> {
    if cbdata.is_null() {
        return SanitizerEvent::Other { domain, cbid };
    }
    match (domain, cbid) {
        (domain::DRIVER_API | domain::RUNTIME_API, _) => {
            // SAFETY: the API domains pass a `Sanitizer_CallbackData` (this function's
            // contract).
            let d = unsafe { &*cbdata.cast::<CallbackData>() };
            SanitizerEvent::Api {
                domain,
                cbid,
                enter: d.callback_site == API_ENTER,
                params: d.function_params,
                context: d.context as usize,
            }
        }
        (
            domain::RESOURCE,
            resource::CONTEXT_CREATION_FINISHED | resource::CONTEXT_DESTROY_STARTING,
        ) => {
            // SAFETY: the context callbacks pass a `Sanitizer_ResourceContextData`.
            let d = unsafe { &*cbdata.cast::<ResourceContextData>() };
            let context = d.context as usize;
            if cbid == resource::CONTEXT_CREATION_FINISHED {
                SanitizerEvent::ContextCreated { context }
            } else {
                SanitizerEvent::ContextDestroying { context }
            }
        }
        (domain::RESOURCE, resource::MODULE_LOADED | resource::MODULE_UNLOAD_STARTING) => {
            // SAFETY: the module callbacks pass a `Sanitizer_ResourceModuleData`.
            let d = unsafe { &*cbdata.cast::<ResourceModuleData>() };
            let module = d.module as usize;
            if cbid == resource::MODULE_UNLOAD_STARTING {
                let context = d.context as usize;
                return SanitizerEvent::ModuleUnloading { context, module };
            }
            let cubin = (!d.cubin.is_null() && d.cubin_size > 0).then(|| {
                // SAFETY: the payload's cubin is `cubin_size` bytes, alive during the callback.
                unsafe { std::slice::from_raw_parts(d.cubin.cast::<u8>(), d.cubin_size) }
            });
            SanitizerEvent::ModuleLoaded { module, cubin }
        }
        (
            domain::RESOURCE,
            resource::DEVICE_MEMORY_ALLOC
            | resource::DEVICE_MEMORY_FREE
            | resource::MEMORY_ALLOC_ASYNC
            | resource::MEMORY_FREE_ASYNC,
        ) => {
            // SAFETY: the memory callbacks pass a `Sanitizer_ResourceMemoryData`.
            let d = unsafe { &*cbdata.cast::<ResourceMemoryData>() };
            SanitizerEvent::Memory {
                address: d.address,
                size: d.size,
                freed: matches!(
                    cbid,
                    resource::DEVICE_MEMORY_FREE | resource::MEMORY_FREE_ASYNC
                ),
            }
        }
        (domain::LAUNCH, launch::BEGIN | launch::END) => {
            // SAFETY: the launch callbacks pass a `Sanitizer_LaunchData`.
            let d = unsafe { &*cbdata.cast::<LaunchData>() };
            if cbid == launch::BEGIN {
                SanitizerEvent::LaunchBegin(d)
            } else {
                SanitizerEvent::LaunchEnd(d)
            }
        }
        _ => SanitizerEvent::Other { domain, cbid },
    }
}

/// The Sanitizer API could not be loaded: where it was looked for, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Compute Sanitizer API ({LIBRARY}) could not be loaded: {why}. Tried: {tried}. It ships with the CUDA toolkit (compute-sanitizer/) and in the nvidia-cuda-sanitizer-api wheel; set {LIBRARY_ENV} to its path")]
pub struct SanitizerUnavailable {
    pub why: String,
    pub tried: String,
}

/// A Sanitizer API call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {name} ({code})")]
pub struct SanitizerError {
    pub call: &'static str,
    pub code: SanitizerResult,
    pub name: String,
}

/// Where to look for the library, in order: the toolkit named by `CUDA_HOME` (or `CUDA_PATH`),
/// the default toolkit, then the loader's own search (the bare name: `LD_LIBRARY_PATH`, a
/// wheel's folder put there). `KREPLAY_SANITIZER_LIB`, when set, is the only place: the library
/// a person names is the one used, or none.
pub fn candidates(env_lib: Option<&str>, cuda_home: Option<&str>) -> Vec<PathBuf> {
    if let Some(p) = env_lib.filter(|p| !p.is_empty()) {
        return vec![PathBuf::from(p)];
    }
    let mut out = Vec::new();
    for home in cuda_home.into_iter().chain(["/usr/local/cuda"]) {
        let p = Path::new(home).join("compute-sanitizer").join(LIBRARY);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out.push(PathBuf::from(LIBRARY));
    out
}

macro_rules! entry_points {
    ($($field:ident: $symbol:literal fn($($arg:ty),*);)*) => {
        /// The entry points the recorder uses, resolved once.
        pub struct SanitizerApi {
            $(pub $field: unsafe extern "C" fn($($arg),*) -> SanitizerResult,)*
            get_result_string: unsafe extern "C" fn(SanitizerResult, *mut *const c_char) -> SanitizerResult,
            /// Where it was loaded from.
            pub path: PathBuf,
            _library: libloading::Library,
        }

        impl SanitizerApi {
            /// Resolves every entry point of `library` (loaded from `path`).
            fn resolve(library: libloading::Library, path: PathBuf) -> Result<SanitizerApi, String> {
                // SAFETY: each symbol is the Sanitizer API function of that name, whose C
                // signature (sanitizer.h, 13.0) the field's type repeats; the library stays
                // loaded as long as the pointers (it is kept in the same value).
                unsafe {
                    $(let $field = *library
                        .get::<unsafe extern "C" fn($($arg),*) -> SanitizerResult>($symbol)
                        .map_err(|e| format!("{}: {e}", String::from_utf8_lossy(&$symbol[..$symbol.len() - 1])))?;)*
                    let get_result_string = *library
                        .get::<unsafe extern "C" fn(SanitizerResult, *mut *const c_char) -> SanitizerResult>(
                            b"sanitizerGetResultString\0",
                        )
                        .map_err(|e| format!("sanitizerGetResultString: {e}"))?;
                    Ok(SanitizerApi { $($field,)* get_result_string, path, _library: library })
                }
            }
        }
    };
}

entry_points! {
    subscribe: b"sanitizerSubscribe\0" fn(*mut *mut c_void, Callback, *mut c_void);
    unsubscribe: b"sanitizerUnsubscribe\0" fn(*mut c_void);
    enable_domain: b"sanitizerEnableDomain\0" fn(u32, *mut c_void, u32);
    enable_callback: b"sanitizerEnableCallback\0" fn(u32, *mut c_void, u32, u32);
    add_patches_from_file: b"sanitizerAddPatchesFromFile\0" fn(*const c_char, *mut c_void);
    patch_instructions: b"sanitizerPatchInstructions\0" fn(u32, *mut c_void, *const c_char);
    patch_module: b"sanitizerPatchModule\0" fn(*mut c_void);
    unpatch_module: b"sanitizerUnpatchModule\0" fn(*mut c_void);
    set_launch_callback_data: b"sanitizerSetLaunchCallbackData\0" fn(*mut c_void, *mut c_void, *mut c_void, *const c_void);
    set_callback_data: b"sanitizerSetCallbackData\0" fn(*mut c_void, *const c_void);
    alloc: b"sanitizerAlloc\0" fn(*mut c_void, *mut *mut c_void, usize);
    free: b"sanitizerFree\0" fn(*mut c_void, *mut c_void);
    memset: b"sanitizerMemset\0" fn(*mut c_void, i32, usize, *mut c_void);
    memcpy_device_to_host: b"sanitizerMemcpyDeviceToHost\0" fn(*mut c_void, *mut c_void, usize, *mut c_void);
    stream_synchronize: b"sanitizerStreamSynchronize\0" fn(*mut c_void);
}

impl SanitizerApi {
    /// Loads the library from the first of `candidates` that loads and resolves.
    pub fn load(candidates: &[PathBuf]) -> Result<SanitizerApi, SanitizerUnavailable> {
        let mut why = Vec::new();
        for path in candidates {
            // Only a path that is there, or the bare name for the loader's own search.
            if path.components().count() > 1 && !path.is_file() {
                why.push(format!("{}: no such file", path.display()));
                continue;
            }
            // SAFETY: loading NVIDIA's Sanitizer library runs its initialisers, as
            // compute-sanitizer's own injection does.
            match unsafe { libloading::Library::new(path) } {
                Ok(lib) => match SanitizerApi::resolve(lib, path.clone()) {
                    Ok(api) => return Ok(api),
                    Err(e) => why.push(format!("{}: {e}", path.display())),
                },
                Err(e) => why.push(format!("{}: {e}", path.display())),
            }
        }
        Err(SanitizerUnavailable {
            why: why
                .last()
                .cloned()
                .unwrap_or_else(|| "nothing to try".into()),
            tried: why.join("; "),
        })
    }

    /// `Ok` for success, else the call's error with the library's name for the code.
    pub fn check(&self, code: SanitizerResult, call: &'static str) -> Result<(), SanitizerError> {
        if code == SANITIZER_SUCCESS {
            return Ok(());
        }
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: writes one pointer to a static string of the library's.
        let named = unsafe { (self.get_result_string)(code, &mut s) } == SANITIZER_SUCCESS;
        let name = if named && !s.is_null() {
            // SAFETY: a NUL-terminated static string, by the API's contract.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        } else {
            "unknown result".into()
        };
        Err(SanitizerError { call, code, name })
    }
}

/// A subscription to the Sanitizer API's callbacks (at most one per process).
#[derive(Debug, Clone, Copy)]
pub struct Subscription(usize);

impl SanitizerApi {
    /// Subscribes `callback` (it is called on the thread of the call it reports).
    pub fn subscribe(&self, callback: Callback) -> Result<Subscription, SanitizerError> {
        let mut h: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one subscriber handle; the callback is a plain function that lives as
        // long as the process.
        let r = unsafe { (self.subscribe)(&mut h, callback, std::ptr::null_mut()) };
        self.check(r, "sanitizerSubscribe")?;
        Ok(Subscription(h as usize))
    }

    /// Ends the subscription (another tool, or CUPTI, may subscribe afterwards).
    pub fn unsubscribe(&self, sub: Subscription) -> Result<(), SanitizerError> {
        // SAFETY: a handle `subscribe` returned.
        let r = unsafe { (self.unsubscribe)(sub.0 as *mut c_void) };
        self.check(r, "sanitizerUnsubscribe")
    }

    /// Enables the callback `cbid` of `domain` for `sub`.
    pub fn enable_callback(
        &self,
        sub: Subscription,
        domain: u32,
        cbid: u32,
    ) -> Result<(), SanitizerError> {
        // SAFETY: a handle `subscribe` returned; the ids are plain numbers the library checks.
        let r = unsafe { (self.enable_callback)(1, sub.0 as *mut c_void, domain, cbid) };
        self.check(r, "sanitizerEnableCallback")
    }

    /// Enables every callback of `domain` for `sub`.
    pub fn enable_domain(&self, sub: Subscription, domain: u32) -> Result<(), SanitizerError> {
        // SAFETY: as `enable_callback`.
        let r = unsafe { (self.enable_domain)(1, sub.0 as *mut c_void, domain) };
        self.check(r, "sanitizerEnableDomain")
    }

    /// Loads the patch module at `file` into `context` (once per context, before a module of
    /// it is patched).
    pub fn add_patches(
        &self,
        file: &CStr,
        context: &crate::ContextHandle,
    ) -> Result<(), SanitizerError> {
        // SAFETY: a NUL-terminated path; the context handle is the driver's, current here.
        let r = unsafe { (self.add_patches_from_file)(file.as_ptr(), context.id() as *mut c_void) };
        self.check(r, "sanitizerAddPatchesFromFile")
    }

    /// Selects each `(instruction kind, device callback)` of `patches` in `module` and patches
    /// it; how many kinds were accepted (a kind the module or the library does not have is
    /// passed over; none accepted is an error).
    pub fn patch(
        &self,
        module: &crate::ForeignModule,
        patches: &[(u32, &str)],
    ) -> Result<usize, SanitizerError> {
        let m = module.handle() as *mut c_void;
        let mut accepted = 0;
        let mut last = SANITIZER_SUCCESS;
        for &(kind, callback) in patches {
            let Ok(name) = std::ffi::CString::new(callback) else {
                continue;
            };
            // SAFETY: the application's module, live during the callback that names it; a
            // NUL-terminated name of a device function of the patch module.
            let r = unsafe { (self.patch_instructions)(kind, m, name.as_ptr()) };
            if r == SANITIZER_SUCCESS {
                accepted += 1;
            } else {
                last = r;
            }
        }
        if accepted == 0 {
            self.check(last.max(1), "sanitizerPatchInstructions")?;
        }
        // SAFETY: as above.
        self.check(unsafe { (self.patch_module)(m) }, "sanitizerPatchModule")?;
        Ok(accepted)
    }

    /// Gives `module` its original code back.
    pub fn unpatch(&self, module: &crate::ForeignModule) -> Result<(), SanitizerError> {
        // SAFETY: the application's module, live during the callback that names it.
        let r = unsafe { (self.unpatch_module)(module.handle() as *mut c_void) };
        self.check(r, "sanitizerUnpatchModule")
    }

    /// Makes `state` (0: none) the device callbacks' `userdata` for the launches of `function`
    /// from now on.
    ///
    /// # Safety
    /// `state` is 0 or a device address of this context holding what the patch module's
    /// callbacks read, alive until the launches that see it have completed and it is unset.
    pub unsafe fn set_function_data(
        &self,
        function: &crate::ForeignFunction,
        state: u64,
    ) -> Result<(), SanitizerError> {
        use crate::AsFunction;
        // SAFETY: the application's function, live during the callback; `state` by this
        // function's contract.
        let r = unsafe {
            (self.set_callback_data)(function.raw_function().cast(), state as *const c_void)
        };
        self.check(r, "sanitizerSetCallbackData")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    // Catches: a field out of place in a payload the recorder reads through a raw pointer
    // (figures: `sizeof`/`offsetof` of the 13.0 headers, compiled by gcc for x86-64).
    #[test]
    fn the_payloads_are_laid_out_as_the_headers_say() {
        assert_eq!(size_of::<CallbackData>(), 48);
        assert_eq!(offset_of!(CallbackData, function_name), 8);
        assert_eq!(offset_of!(CallbackData, function_params), 16);
        assert_eq!(offset_of!(CallbackData, symbol_name), 32);
        assert_eq!(offset_of!(CallbackData, context), 40);
        assert_eq!(size_of::<ResourceModuleData>(), 40);
        assert_eq!(offset_of!(ResourceModuleData, cubin_size), 16);
        assert_eq!(offset_of!(ResourceModuleData, cubin), 24);
        assert_eq!(offset_of!(ResourceModuleData, library), 32);
        assert_eq!(size_of::<ResourceContextData>(), 16);
        assert_eq!(offset_of!(ResourceContextData, device), 8);
        assert_eq!(size_of::<ResourceMemoryData>(), 72);
        assert_eq!(offset_of!(ResourceMemoryData, context), 16);
        assert_eq!(offset_of!(ResourceMemoryData, device), 24);
        assert_eq!(offset_of!(ResourceMemoryData, stream), 32);
        assert_eq!(offset_of!(ResourceMemoryData, memory_pool), 48);
        assert_eq!(offset_of!(ResourceMemoryData, flags), 56);
        assert_eq!(offset_of!(ResourceMemoryData, visibility), 64);
        assert_eq!(offset_of!(ResourceMemoryData, source_device), 68);
        assert_eq!(size_of::<LaunchData>(), 136);
        assert_eq!(offset_of!(LaunchData, function), 32);
        assert_eq!(offset_of!(LaunchData, function_name), 40);
        assert_eq!(offset_of!(LaunchData, grid), 48);
        assert_eq!(offset_of!(LaunchData, block), 60);
        assert_eq!(offset_of!(LaunchData, cluster), 72);
        assert_eq!(offset_of!(LaunchData, grid_id), 88);
        assert_eq!(offset_of!(LaunchData, h_launch), 96);
        assert_eq!(offset_of!(LaunchData, device), 104);
        assert_eq!(offset_of!(LaunchData, api_context), 112);
        assert_eq!(offset_of!(LaunchData, h_api_stream), 128);
    }

    // Catches: a payload read as another domain's type, a module's cubin taken from a null
    // pointer, a free taken for an allocation, an API call's site inverted.
    #[test]
    fn payloads_decode_into_what_the_recorder_follows() {
        let cubin = [0x7fu8, b'E', b'L', b'F'];
        let module = ResourceModuleData {
            context: 0x10 as *mut c_void,
            module: 0x20 as *mut c_void,
            cubin_size: cubin.len(),
            cubin: cubin.as_ptr().cast(),
            library: std::ptr::null_mut(),
        };
        let p = (&module as *const ResourceModuleData).cast();
        // SAFETY: each payload below is the type its (domain, cbid) passes, alive here.
        unsafe {
            match decode(domain::RESOURCE, resource::MODULE_LOADED, p) {
                SanitizerEvent::ModuleLoaded {
                    module: 0x20,
                    cubin: Some(c),
                } => assert_eq!(c, &cubin),
                e => panic!("{e:?}"),
            }
            assert!(matches!(
                decode(domain::RESOURCE, resource::MODULE_UNLOAD_STARTING, p),
                SanitizerEvent::ModuleUnloading {
                    context: 0x10,
                    module: 0x20
                }
            ));
            let empty = ResourceModuleData {
                cubin: std::ptr::null(),
                ..module
            };
            assert!(matches!(
                decode(
                    domain::RESOURCE,
                    resource::MODULE_LOADED,
                    (&empty as *const ResourceModuleData).cast()
                ),
                SanitizerEvent::ModuleLoaded { cubin: None, .. }
            ));
            let call = CallbackData {
                callback_site: API_EXIT,
                function_name: std::ptr::null(),
                function_params: 0x30 as *const c_void,
                function_return_value: std::ptr::null(),
                symbol_name: std::ptr::null(),
                context: 0x40 as *mut c_void,
            };
            match decode(
                domain::DRIVER_API,
                307,
                (&call as *const CallbackData).cast(),
            ) {
                SanitizerEvent::Api {
                    cbid: 307,
                    enter: false,
                    params,
                    context: 0x40,
                    ..
                } => {
                    assert_eq!(params as usize, 0x30)
                }
                e => panic!("{e:?}"),
            }
            let freed = ResourceMemoryData {
                address: 0x7000,
                size: 64,
                context: std::ptr::null_mut(),
                device: 0,
                stream: std::ptr::null_mut(),
                h_stream: std::ptr::null_mut(),
                memory_pool: std::ptr::null_mut(),
                flags: 0,
                permissions: 0,
                visibility: 0,
                source_device: 0,
            };
            let fp = (&freed as *const ResourceMemoryData).cast();
            assert!(matches!(
                decode(domain::RESOURCE, resource::DEVICE_MEMORY_FREE, fp),
                SanitizerEvent::Memory {
                    address: 0x7000,
                    size: 64,
                    freed: true
                }
            ));
            assert!(matches!(
                decode(domain::RESOURCE, resource::DEVICE_MEMORY_ALLOC, fp),
                SanitizerEvent::Memory { freed: false, .. }
            ));
            assert!(matches!(
                decode(domain::LAUNCH, launch::BEGIN, std::ptr::null()),
                SanitizerEvent::Other { .. }
            ));
            assert!(matches!(
                decode(domain::SYNCHRONIZE, 1, fp),
                SanitizerEvent::Other {
                    domain: domain::SYNCHRONIZE,
                    cbid: 1
                }
            ));
        }
    }

    #[test]
    fn the_library_is_looked_for_where_it_ships_and_its_absence_says_what_to_do() {
        assert_eq!(
            candidates(Some("/opt/x/libsanitizer-public.so"), Some("/cuda")),
            vec![PathBuf::from("/opt/x/libsanitizer-public.so")],
            "the library named is the only one tried"
        );
        let c = candidates(None, Some("/cuda"));
        assert_eq!(
            c,
            vec![
                PathBuf::from("/cuda/compute-sanitizer/libsanitizer-public.so"),
                PathBuf::from("/usr/local/cuda/compute-sanitizer/libsanitizer-public.so"),
                PathBuf::from(LIBRARY),
            ]
        );
        assert_eq!(candidates(None, None).len(), 2);
        let e = SanitizerApi::load(&[PathBuf::from("/nonexistent/libsanitizer-public.so")])
            .err()
            .expect("nothing to load");
        let text = e.to_string();
        assert!(
            text.contains("/nonexistent/libsanitizer-public.so: no such file"),
            "{text}"
        );
        assert!(text.contains(LIBRARY_ENV), "{text}");
    }

    // Needs the library (KREPLAY_SANITIZER_LIB, or a toolkit's compute-sanitizer/): ignored by
    // `cargo test`; no GPU is needed to load it and resolve its entry points.
    #[test]
    #[ignore = "needs libsanitizer-public.so (KREPLAY_SANITIZER_LIB)"]
    fn the_real_library_loads_and_names_its_results() {
        let env = std::env::var(LIBRARY_ENV).ok();
        let home = std::env::var("CUDA_HOME").ok();
        let api = SanitizerApi::load(&candidates(env.as_deref(), home.as_deref())).expect("loads");
        assert!(api.check(SANITIZER_SUCCESS, "none").is_ok());
        let e = api
            .check(13, "sanitizerSubscribe")
            .expect_err("13 is an error");
        assert!(e.name.to_lowercase().contains("initial"), "{e}");
    }
}
