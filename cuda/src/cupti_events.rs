//! CUPTI callback payloads decoded into typed values. A callback hands a domain, an id and an
//! untyped pointer; what it points at (and what its parameter block holds) depends on both.
//! Decoding is done once, here, by [`decode`], whose contract carries the callback's promise;
//! the recorder then sees launches, allocations, code images, graph calls and resource events
//! as plain Rust values. Raw pointers and handles inside them are the application's, valid
//! during the callback only.

use std::ffi::{c_void, CStr};

use crate::cupti::sys as csys;

mod allocation;
mod graph;
mod launch;
mod ops;
mod site;

pub use allocation::{AllocationChange, AllocationKind, AllocationRequest};
pub use graph::GraphCall;
pub use launch::{Launch, LaunchEntry};
pub use ops::{OpCall, STREAM_PER_THREAD};
pub use site::Site;

/// One driver-API call as its callback shows it.
#[derive(Clone, Copy)]
pub struct ApiCall<'a> {
    /// The callback id (`callbacks::cbid`).
    pub id: u32,
    pub site: Site,
    /// The same at the call's ENTER and EXIT, and distinct between calls of a process: what
    /// ties the two sites of one launch together.
    pub correlation: u32,
    payload: Payload<'a>,
}

/// What an API callback's payload holds besides its id, site and correlation, whoever passed
/// it: CUPTI's `CUpti_CallbackData` or the Sanitizer API's `Sanitizer_CallbackData` (the same
/// callback ids and `*_params` structs; see `sanitizer`).
#[derive(Clone, Copy)]
struct Payload<'a> {
    symbol: *const std::ffi::c_char,
    function: *const std::ffi::c_char,
    return_value: *const c_void,
    params: *const c_void,
    _callback: std::marker::PhantomData<&'a ()>,
}

/// A resource callback kreplay follows.
#[derive(Debug, Clone, Copy)]
pub enum ResourceEvent<'a> {
    /// A module was loaded; its cubin ELF when CUPTI handed one (also for JIT-compiled PTX).
    ModuleLoaded { cubin: Option<&'a [u8]> },
    /// A context was created (its handle is live during the callback).
    ContextCreated { context: usize },
    /// A context is about to be destroyed (its handle is still live during the callback).
    ContextDestroying { context: usize },
    /// A module of `context` is about to be unloaded.
    ModuleUnloading { context: usize },
}

/// A decoded callback.
#[derive(Clone, Copy)]
pub enum CallbackEvent<'a> {
    Api(ApiCall<'a>),
    Resource(ResourceEvent<'a>),
}

/// Decodes the payload of a CUPTI callback: driver-API calls and the resource callbacks
/// kreplay enables; `None` for anything else (and for a null payload).
///
/// # Safety
/// `domain`, `id` and `data` must be what CUPTI passed to the subscriber's callback, and the
/// result must not outlive that callback (`'a`).
pub unsafe fn decode<'a>(
    domain: csys::CUpti_CallbackDomain,
    id: u32,
    data: *const c_void,
) -> Option<CallbackEvent<'a>> {
    use csys::CUpti_CallbackIdResource as R;
    if data.is_null() {
        return None;
    }
    match domain {
        csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API => {
            // SAFETY: driver-API callbacks pass CUpti_CallbackData, live during the callback.
            let data = unsafe { &*(data as *const csys::CUpti_CallbackData) };
            let site = if data.callbackSite == csys::CUpti_ApiCallbackSite::CUPTI_API_ENTER {
                Site::Enter
            } else {
                Site::Exit
            };
            Some(CallbackEvent::Api(ApiCall {
                id,
                site,
                correlation: data.correlationId,
                payload: Payload {
                    symbol: data.symbolName,
                    function: data.functionName,
                    return_value: data.functionReturnValue,
                    params: data.functionParams,
                    _callback: std::marker::PhantomData,
                },
            }))
        }
        csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE => {
            // SAFETY: resource callbacks pass CUpti_ResourceData, live during the callback.
            let data = unsafe { &*(data as *const csys::CUpti_ResourceData) };
            let context = data.context as usize;
            let event = if id == R::CUPTI_CBID_RESOURCE_MODULE_LOADED as u32 {
                ResourceEvent::ModuleLoaded {
                    // SAFETY: for MODULE_LOADED the descriptor is a CUpti_ModuleResourceData (or
                    // null), whose cubin is valid during the callback.
                    cubin: unsafe { loaded_cubin(data) },
                }
            } else if id == R::CUPTI_CBID_RESOURCE_CONTEXT_CREATED as u32 {
                ResourceEvent::ContextCreated { context }
            } else if id == R::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING as u32 {
                ResourceEvent::ContextDestroying { context }
            } else if id == R::CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING as u32 {
                ResourceEvent::ModuleUnloading { context }
            } else {
                return None;
            };
            Some(CallbackEvent::Resource(event))
        }
        _ => None,
    }
}

/// The cubin of a MODULE_LOADED callback, when it has one.
///
/// # Safety
/// `data` must be a MODULE_LOADED callback's payload, during the callback.
unsafe fn loaded_cubin(data: &csys::CUpti_ResourceData) -> Option<&[u8]> {
    if data.resourceDescriptor.is_null() {
        return None;
    }
    // SAFETY: for MODULE_LOADED the descriptor is a CUpti_ModuleResourceData.
    let m = unsafe { &*(data.resourceDescriptor as *const csys::CUpti_ModuleResourceData) };
    if m.pCubin.is_null() || m.cubinSize == 0 {
        return None;
    }
    // SAFETY: CUPTI hands cubinSize readable bytes, valid during the callback.
    Some(unsafe { std::slice::from_raw_parts(m.pCubin as *const u8, m.cubinSize) })
}

/// Decodes a launch callback's parameter block (what [`ApiCall::launch`] reads).
///
/// # Safety
/// `params` must be null or the `functionParams` of a CUPTI driver callback with id `id`,
/// during the callback.
pub unsafe fn decode_launch(id: u32, params: *const c_void) -> Option<Launch> {
    // SAFETY: the caller's contract is the decoder's.
    unsafe { launch::decode(id, params) }
}

/// What a code-image load returned: a `CUmodule` or a `CUlibrary` handle (as integers: an
/// identity to compare, never dereferenced here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadedHandle {
    Module(usize),
    Library(usize),
}

impl LoadedHandle {
    pub fn raw(self) -> usize {
        match self {
            LoadedHandle::Module(h) | LoadedHandle::Library(h) => h,
        }
    }
}

/// The kernel name the Sanitizer API passes with a launch, where it is the kernel's: for
/// `cuLaunchKernel` it is (the CUDA 13.0 H200 showed the mangled names), for `cuLaunchKernelEx`
/// it is not (every launch of Triton and XLA came as "h"), so for every launch entry point but
/// `cuLaunchKernel` the recorder asks the function handle instead.
fn sanitizer_symbol(id: u32, symbol: *const std::ffi::c_char) -> *const std::ffi::c_char {
    use crate::callbacks::{cbid, group, Group};
    let named = id == cbid::LAUNCH_KERNEL || id == cbid::LAUNCH_KERNEL_PTSZ;
    if group(id) == Some(Group::Launch) && !named {
        std::ptr::null()
    } else {
        symbol
    }
}

impl<'a> ApiCall<'a> {
    /// A driver-API call as the Sanitizer API's callback shows it (it has no correlation id:
    /// the caller gives one that ties the call's ENTER and EXIT together).
    ///
    /// # Safety
    /// `data` is the payload the Sanitizer API passed with callback id `id` in its driver-API
    /// domain, and the result does not outlive that callback (`'a`).
    pub unsafe fn from_sanitizer(
        id: u32,
        correlation: u32,
        data: &'a crate::sanitizer::CallbackData,
    ) -> ApiCall<'a> {
        ApiCall {
            id,
            site: if data.callback_site == crate::sanitizer::API_ENTER {
                Site::Enter
            } else {
                Site::Exit
            },
            correlation,
            payload: Payload {
                symbol: sanitizer_symbol(id, data.symbol_name),
                function: data.function_name,
                return_value: data.function_return_value,
                params: data.function_params,
                _callback: std::marker::PhantomData,
            },
        }
    }

    /// The launched kernel's symbol, for launch callbacks (CUPTI may pass none).
    pub fn symbol(&self) -> Option<&'a CStr> {
        // SAFETY: the callback passes a NUL-terminated symbol name for launch callbacks, or
        // null, valid during the callback (`'a`).
        (!self.payload.symbol.is_null()).then(|| unsafe { CStr::from_ptr(self.payload.symbol) })
    }

    /// The driver function's name (`cuMemcpyAsync`, ...), as the callback passes it.
    pub fn function_name(&self) -> Option<&'a CStr> {
        // SAFETY: the callback passes a NUL-terminated function name for driver callbacks, or
        // null, valid during the callback (`'a`).
        (!self.payload.function.is_null()).then(|| unsafe { CStr::from_ptr(self.payload.function) })
    }

    /// At EXIT: the call returned `CUDA_SUCCESS`.
    pub fn succeeded(&self) -> bool {
        self.site == Site::Exit
            && !self.payload.return_value.is_null()
            // SAFETY: at EXIT the return value points at the call's CUresult.
            && unsafe { *(self.payload.return_value as *const u32) } == 0
    }

    /// The call's parameter block, null where the callback passed none.
    fn params(&self) -> *const c_void {
        self.payload.params
    }

    /// The launch this call makes, for the launch entry points.
    pub fn launch(&self) -> Option<Launch> {
        // SAFETY: the parameter block belongs to this callback id (`decode`'s contract).
        unsafe { decode_launch(self.id, self.params()) }
    }

    /// The code image handed to a module or library load, for the image-load entry points.
    pub fn image(&self) -> Option<*const u8> {
        use crate::callbacks::cbid;
        let params = self.params();
        if params.is_null() {
            return None;
        }
        // SAFETY: functionParams is the parameter struct of this callback id.
        let image = unsafe {
            match self.id {
                cbid::MODULE_LOAD_DATA => (*(params as *const csys::cuModuleLoadData_params)).image,
                cbid::MODULE_LOAD_DATA_EX => {
                    (*(params as *const csys::cuModuleLoadDataEx_params)).image
                }
                cbid::MODULE_LOAD_FAT_BINARY => {
                    (*(params as *const csys::cuModuleLoadFatBinary_params)).fatCubin
                }
                cbid::LIBRARY_LOAD_DATA => {
                    (*(params as *const csys::cuLibraryLoadData_params)).code
                }
                _ => return None,
            }
        };
        Some(image as *const u8)
    }

    /// At EXIT of a successful code-image load: the handle the driver returned, as a module
    /// (`cuModuleLoadData*`, `cuModuleLoadFatBinary`) or as a library (`cuLibraryLoadData`).
    pub fn loaded_handle(&self) -> Option<LoadedHandle> {
        use crate::callbacks::cbid;
        let params = self.params();
        if !self.succeeded() || params.is_null() {
            return None;
        }
        // SAFETY: functionParams is the parameter struct of this callback id; at EXIT of a
        // successful call its out-pointer holds the handle the driver wrote.
        let handle = unsafe {
            let out = |p: *mut *mut c_void| (!p.is_null()).then(|| *p as usize);
            match self.id {
                cbid::MODULE_LOAD_DATA => out((*(params as *const csys::cuModuleLoadData_params))
                    .module
                    .cast())
                .map(LoadedHandle::Module),
                cbid::MODULE_LOAD_DATA_EX => out((*(params
                    as *const csys::cuModuleLoadDataEx_params))
                    .module
                    .cast())
                .map(LoadedHandle::Module),
                cbid::MODULE_LOAD_FAT_BINARY => out((*(params
                    as *const csys::cuModuleLoadFatBinary_params))
                    .module
                    .cast())
                .map(LoadedHandle::Module),
                cbid::LIBRARY_LOAD_DATA => out((*(params
                    as *const csys::cuLibraryLoadData_params))
                    .library
                    .cast())
                .map(LoadedHandle::Library),
                _ => None,
            }
        };
        handle.filter(|h| h.raw() != 0)
    }

    /// At EXIT of a successful allocation call: what changed in the live allocations.
    pub fn allocation(&self) -> Option<AllocationChange> {
        if !self.succeeded() {
            return None;
        }
        // SAFETY: the parameter block of this callback id, at EXIT of a successful call.
        unsafe { allocation::decode(self.id, self.params()) }
    }

    /// At ENTER of an allocation call: the memory about to go, or the memory asked for.
    pub fn allocation_request(&self) -> Option<AllocationRequest> {
        if self.site != Site::Enter {
            return None;
        }
        // SAFETY: the parameter block of this callback id; only inputs are read.
        unsafe { allocation::entering(self.id, self.params()) }
    }

    /// At ENTER, the copy, fill, event or wait this call is, for the calls a range capture
    /// makes steps of (`ops`).
    pub fn op(&self) -> Option<OpCall> {
        if self.site != Site::Enter {
            return None;
        }
        // SAFETY: the parameter block of this callback id; only inputs are read.
        unsafe { ops::decode(self.id, self.params()) }
    }

    /// The graph call this is, for the graph entry points kreplay follows: launches and
    /// destructions at ENTER, the rest at EXIT of a successful call.
    pub fn graph(&self) -> Option<GraphCall> {
        // SAFETY: the parameter block of this callback id.
        unsafe { graph::decode(self.id, self.params(), self.site, self.succeeded()) }
    }
}

#[cfg(test)]
mod tests {
    // Catches: the Sanitizer API's "h" taken as the name of every cuLaunchKernelEx launch
    // (Triton's and XLA's kernels never matched -k under --memory touched), or the right name
    // of a cuLaunchKernel dropped.
    #[test]
    fn a_sanitizer_launch_names_its_kernel_only_where_the_name_is_the_kernels() {
        use crate::callbacks::cbid;
        let name = c"h";
        let data = |site| crate::sanitizer::CallbackData {
            callback_site: site,
            function_name: std::ptr::null(),
            function_params: std::ptr::null(),
            function_return_value: std::ptr::null(),
            symbol_name: name.as_ptr(),
            context: std::ptr::null_mut(),
        };
        let d = data(crate::sanitizer::API_ENTER);
        for (id, kept) in [
            (cbid::LAUNCH_KERNEL, true),
            (cbid::LAUNCH_KERNEL_PTSZ, true),
            (cbid::LAUNCH_KERNEL_EX, false),
            (cbid::LAUNCH_KERNEL_EX_PTSZ, false),
            (cbid::LAUNCH_COOPERATIVE, false),
        ] {
            // SAFETY: a payload of ours with no parameter block, read by `symbol` only.
            let call = unsafe { ApiCall::from_sanitizer(id, 1, &d) };
            assert_eq!(call.symbol().is_some(), kept, "callback id {id}");
        }
    }

    use super::*;
    use crate::callbacks::cbid;
    use crate::sys;
    use csys::CUpti_CallbackDomain as Domain;

    fn call_data(
        site: csys::CUpti_ApiCallbackSite,
        params: *const c_void,
        result: *mut u32,
        correlation: u32,
    ) -> csys::CUpti_CallbackData {
        csys::CUpti_CallbackData {
            callbackSite: site,
            functionName: std::ptr::null(),
            functionParams: params,
            functionReturnValue: result.cast(),
            symbolName: c"_Z5saxpyifPKfPf".as_ptr(),
            context: std::ptr::null_mut(),
            contextUid: 0,
            correlationData: std::ptr::null_mut(),
            correlationId: correlation,
        }
    }

    fn api<'a>(id: u32, data: &'a csys::CUpti_CallbackData) -> ApiCall<'a> {
        // SAFETY: a callback payload built by the test, alive for 'a.
        match unsafe {
            decode(
                Domain::CUPTI_CB_DOMAIN_DRIVER_API,
                id,
                (data as *const csys::CUpti_CallbackData).cast(),
            )
        } {
            Some(CallbackEvent::Api(call)) => call,
            _ => panic!("a driver-API call"),
        }
    }

    /// A cuMemAlloc of 4096 bytes at 0x7000_0000 as three callbacks show it: the EXIT of a
    /// call that succeeded (correlation 11), the EXIT of one that failed, an ENTER.
    fn assert_reads_the_allocation(ok: ApiCall<'_>, failed: ApiCall<'_>, enter: ApiCall<'_>) {
        assert_eq!((ok.site, ok.correlation), (Site::Exit, 11));
        assert!(ok.succeeded());
        assert_eq!(
            ok.allocation(),
            Some(AllocationChange::Alloc {
                addr: 0x7000_0000,
                size: 4096,
                kind: AllocationKind::Device
            })
        );
        assert_eq!(ok.allocation_request(), None, "a request is read at ENTER");
        assert_eq!(failed.allocation(), None);
        assert_eq!(enter.site, Site::Enter);
        assert!(!enter.succeeded());
        assert_eq!(
            enter.allocation_request(),
            Some(AllocationRequest::Request { bytes: 4096 })
        );
        assert_eq!(
            enter.symbol().map(CStr::to_bytes),
            Some(&b"_Z5saxpyifPKfPf"[..])
        );
    }

    #[test]
    fn an_allocation_is_read_at_the_exit_of_a_successful_call_only() {
        let mut dptr: sys::CUdeviceptr = 0x7000_0000;
        let params = csys::cuMemAlloc_v2_params {
            dptr: &mut dptr,
            bytesize: 4096,
        };
        let p = (&params as *const csys::cuMemAlloc_v2_params).cast();
        let (mut ok, mut failed) = (0u32, 2u32);
        use csys::CUpti_ApiCallbackSite::{CUPTI_API_ENTER, CUPTI_API_EXIT};
        let exit = call_data(CUPTI_API_EXIT, p, &mut ok, 11);
        let bad = call_data(CUPTI_API_EXIT, p, &mut failed, 12);
        let enter = call_data(CUPTI_API_ENTER, p, std::ptr::null_mut(), 13);
        assert_reads_the_allocation(
            api(cbid::ALLOC, &exit),
            api(cbid::ALLOC, &bad),
            api(cbid::ALLOC, &enter),
        );
    }

    // Catches: a Sanitizer API payload read with another field order than CUPTI's (the two
    // structs differ), its site inverted, or its return value not consulted: the recorder on
    // the Sanitizer API (`--memory touched`) must decode a call as the one on CUPTI does.
    #[test]
    fn a_call_reads_the_same_from_the_sanitizer_apis_payload() {
        let mut dptr: sys::CUdeviceptr = 0x7000_0000;
        let params = csys::cuMemAlloc_v2_params {
            dptr: &mut dptr,
            bytesize: 4096,
        };
        let p = (&params as *const csys::cuMemAlloc_v2_params).cast();
        let (mut ok, mut failed) = (0u32, 2u32);
        let data = |site, rv: *mut u32| crate::sanitizer::CallbackData {
            callback_site: site,
            function_name: c"cuMemAlloc_v2".as_ptr(),
            function_params: p,
            function_return_value: rv.cast(),
            symbol_name: c"_Z5saxpyifPKfPf".as_ptr(),
            context: std::ptr::null_mut(),
        };
        let exit = data(crate::sanitizer::API_EXIT, &mut ok);
        let bad = data(crate::sanitizer::API_EXIT, &mut failed);
        let enter = data(crate::sanitizer::API_ENTER, std::ptr::null_mut());
        // SAFETY: payloads built by the test, alive for the calls below.
        let (a, b, c) = unsafe {
            (
                ApiCall::from_sanitizer(cbid::ALLOC, 11, &exit),
                ApiCall::from_sanitizer(cbid::ALLOC, 12, &bad),
                ApiCall::from_sanitizer(cbid::ALLOC, 13, &enter),
            )
        };
        assert_eq!(
            a.function_name().map(CStr::to_bytes),
            Some(&b"cuMemAlloc_v2"[..])
        );
        assert_reads_the_allocation(a, b, c);
    }

    #[test]
    fn a_graph_launch_is_read_at_enter_and_an_update_at_a_successful_exit() {
        let params = csys::cuGraphLaunch_params {
            hGraph: 0x1234 as sys::CUgraphExec,
            hStream: 0x5678 as sys::CUstream,
        };
        let p = (&params as *const csys::cuGraphLaunch_params).cast();
        let enter = call_data(
            csys::CUpti_ApiCallbackSite::CUPTI_API_ENTER,
            p,
            std::ptr::null_mut(),
            1,
        );
        match api(cbid::GRAPH_LAUNCH, &enter).graph() {
            Some(GraphCall::Launch { exec, stream }) => {
                assert_eq!((exec, stream as usize), (0x1234, 0x5678))
            }
            other => panic!("a launch, not {other:?}"),
        }
        let mut ok = 0u32;
        let exit = call_data(csys::CUpti_ApiCallbackSite::CUPTI_API_EXIT, p, &mut ok, 1);
        assert!(
            api(cbid::GRAPH_LAUNCH, &exit).graph().is_none(),
            "a launch is followed at ENTER only"
        );
        let enabled = csys::cuGraphNodeSetEnabled_params {
            hGraphExec: 0x1234 as sys::CUgraphExec,
            hNode: 0x99 as sys::CUgraphNode,
            isEnabled: 0,
        };
        let p = (&enabled as *const csys::cuGraphNodeSetEnabled_params).cast();
        let exit = call_data(csys::CUpti_ApiCallbackSite::CUPTI_API_EXIT, p, &mut ok, 2);
        match api(cbid::GRAPH_NODE_SET_ENABLED, &exit).graph() {
            Some(GraphCall::NodeEnabled {
                exec,
                node,
                enabled,
            }) => assert_eq!((exec, node, enabled), (0x1234, 0x99, false)),
            other => panic!("a node enabled, not {other:?}"),
        }
        let mut failed = 1u32;
        let exit = call_data(
            csys::CUpti_ApiCallbackSite::CUPTI_API_EXIT,
            p,
            &mut failed,
            3,
        );
        assert!(api(cbid::GRAPH_NODE_SET_ENABLED, &exit).graph().is_none());
    }

    #[test]
    fn resource_callbacks_name_their_context_and_cubin() {
        let cubin = [0x7fu8, b'E', b'L', b'F'];
        let mut module = csys::CUpti_ModuleResourceData {
            moduleId: 1,
            cubinSize: cubin.len(),
            pCubin: cubin.as_ptr().cast(),
        };
        // SAFETY: an all-zero resource payload is a valid value of this plain C struct.
        let mut data: csys::CUpti_ResourceData = unsafe { std::mem::zeroed() };
        data.context = 0x42 as sys::CUcontext;
        data.resourceDescriptor = (&mut module as *mut csys::CUpti_ModuleResourceData).cast();
        let resource = |id: csys::CUpti_CallbackIdResource| {
            // SAFETY: a resource payload built by the test, alive for the call.
            unsafe {
                decode(
                    Domain::CUPTI_CB_DOMAIN_RESOURCE,
                    id as u32,
                    (&data as *const csys::CUpti_ResourceData).cast(),
                )
            }
        };
        use csys::CUpti_CallbackIdResource as R;
        match resource(R::CUPTI_CBID_RESOURCE_MODULE_LOADED) {
            Some(CallbackEvent::Resource(ResourceEvent::ModuleLoaded { cubin: Some(b) })) => {
                assert_eq!(b, &cubin[..])
            }
            _ => panic!("a module with its cubin"),
        }
        assert!(matches!(
            resource(R::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING),
            Some(CallbackEvent::Resource(ResourceEvent::ContextDestroying {
                context: 0x42
            }))
        ));
        assert!(matches!(
            resource(R::CUPTI_CBID_RESOURCE_CONTEXT_CREATED),
            Some(CallbackEvent::Resource(ResourceEvent::ContextCreated {
                context: 0x42
            }))
        ));
        assert!(resource(R::CUPTI_CBID_RESOURCE_STREAM_CREATED).is_none());
        // SAFETY: a null payload is refused before it is read.
        assert!(unsafe { decode(Domain::CUPTI_CB_DOMAIN_RESOURCE, 0, std::ptr::null()) }.is_none());
    }
}
