//! The CUDA driver API, wrapped once: every raw call goes through `check`, which turns a
//! `CUresult` into a `CudaError` naming the call. cudarc loads `libcuda` lazily and panics when
//! it is missing, so `ensure_driver` must succeed before any other function here is used.

// CUDA handles (CUfunction, CUstream, CUmodule, ...) are opaque tokens the driver validates;
// this crate passes them through and never dereferences them.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::{c_void, CStr, CString};
use std::ptr;

pub use cudarc::driver::sys;
use sys::CUresult;

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
pub fn check(code: CUresult, call: &'static str) -> CuResult<()> {
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
}

/// Loads libcuda and calls `cuInit`. Safe to call many times.
pub fn ensure_driver() -> Result<(), DriverUnavailable> {
    // SAFETY: probing for the library only dlopens it.
    if !unsafe { sys::is_culib_present() } {
        return Err(DriverUnavailable::NoLibrary);
    }
    // SAFETY: cuInit has no preconditions.
    check(unsafe { sys::cuInit(0) }, "cuInit").map_err(DriverUnavailable::Init)?;
    if device_count().map_err(DriverUnavailable::Init)? == 0 {
        return Err(DriverUnavailable::NoDevice);
    }
    Ok(())
}

pub fn device_count() -> CuResult<i32> {
    let mut n = 0;
    // SAFETY: writes one int.
    check(unsafe { sys::cuDeviceGetCount(&mut n) }, "cuDeviceGetCount")?;
    Ok(n)
}

pub fn driver_version() -> CuResult<u32> {
    let mut v = 0;
    // SAFETY: writes one int.
    check(
        unsafe { sys::cuDriverGetVersion(&mut v) },
        "cuDriverGetVersion",
    )?;
    Ok(v as u32)
}

/// Static facts about one device.
#[derive(Debug, Clone)]
pub struct DeviceProps {
    pub ordinal: i32,
    pub name: String,
    pub cc_major: u32,
    pub cc_minor: u32,
    pub uuid: [u8; 16],
    pub total_memory: u64,
    pub sm_count: u32,
}

fn attribute(dev: sys::CUdevice, attr: sys::CUdevice_attribute) -> CuResult<i32> {
    let mut v = 0;
    // SAFETY: writes one int for a valid device handle.
    check(
        unsafe { sys::cuDeviceGetAttribute(&mut v, attr, dev) },
        "cuDeviceGetAttribute",
    )?;
    Ok(v)
}

pub fn device(ordinal: i32) -> CuResult<sys::CUdevice> {
    let mut d = 0;
    // SAFETY: writes one device handle.
    check(unsafe { sys::cuDeviceGet(&mut d, ordinal) }, "cuDeviceGet")?;
    Ok(d)
}

pub fn device_props(ordinal: i32) -> CuResult<DeviceProps> {
    use sys::CUdevice_attribute::*;
    let dev = device(ordinal)?;
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer holds 256 bytes and the driver NUL-terminates within that length.
    check(
        unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev) },
        "cuDeviceGetName",
    )?;
    // SAFETY: NUL-terminated by the driver (buffer zeroed beforehand as a backstop).
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: writes one CUuuid.
    check(
        unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, dev) },
        "cuDeviceGetUuid",
    )?;
    let mut total = 0usize;
    // SAFETY: writes one size_t.
    check(
        unsafe { sys::cuDeviceTotalMem_v2(&mut total, dev) },
        "cuDeviceTotalMem",
    )?;
    Ok(DeviceProps {
        ordinal,
        name,
        cc_major: attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
        cc_minor: attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
        uuid: uuid.bytes.map(|b| b as u8),
        total_memory: total as u64,
        sm_count: attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
    })
}

/// The device of the calling thread's current context.
pub fn current_device() -> CuResult<i32> {
    let mut d = 0;
    // SAFETY: writes one device handle.
    check(unsafe { sys::cuCtxGetDevice(&mut d) }, "cuCtxGetDevice")?;
    Ok(d)
}

pub fn ctx_synchronize() -> CuResult<()> {
    // SAFETY: no arguments.
    check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
}

/// The primary context of a device, retained for the owner's lifetime and made current.
pub struct PrimaryContext {
    dev: sys::CUdevice,
    pub ctx: sys::CUcontext,
}

impl PrimaryContext {
    pub fn retain(ordinal: i32) -> CuResult<PrimaryContext> {
        let dev = device(ordinal)?;
        let mut ctx = ptr::null_mut();
        // SAFETY: writes one context handle for a valid device.
        check(
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, dev) },
            "cuDevicePrimaryCtxRetain",
        )?;
        // SAFETY: ctx was just retained.
        check(unsafe { sys::cuCtxSetCurrent(ctx) }, "cuCtxSetCurrent")?;
        Ok(PrimaryContext { dev, ctx })
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `retain`.
        unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(self.dev);
        }
    }
}

/// `cuMemGetAddressRange`: the allocation containing `ptr`, if `ptr` is device memory.
pub fn address_range(ptr: u64) -> Option<(u64, u64)> {
    let mut base = 0;
    let mut size = 0usize;
    // SAFETY: writes a base and a size; fails for non-device addresses.
    let r = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
    (r == CUresult::CUDA_SUCCESS && size > 0).then_some((base, size as u64))
}

/// Queries one 8-byte-or-smaller pointer attribute.
pub fn pointer_attribute_u64(ptr: u64, attr: sys::CUpointer_attribute) -> Option<u64> {
    let mut v: u64 = 0;
    // SAFETY: every attribute queried through this helper fits in 8 bytes.
    let r = unsafe { sys::cuPointerGetAttribute(&mut v as *mut u64 as *mut c_void, attr, ptr) };
    (r == CUresult::CUDA_SUCCESS).then_some(v)
}

/// Copies device memory into a host slice (synchronous).
pub fn copy_dtoh(dst: &mut [u8], src: u64) -> CuResult<()> {
    if dst.is_empty() {
        return Ok(());
    }
    // SAFETY: dst is a valid writable host range of dst.len() bytes.
    check(
        unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, src, dst.len()) },
        "cuMemcpyDtoH",
    )
}

/// Copies a host slice into device memory (synchronous).
pub fn copy_htod(dst: u64, src: &[u8]) -> CuResult<()> {
    if src.is_empty() {
        return Ok(());
    }
    // SAFETY: src is a valid readable host range of src.len() bytes.
    check(
        unsafe { sys::cuMemcpyHtoD_v2(dst, src.as_ptr() as *const c_void, src.len()) },
        "cuMemcpyHtoD",
    )
}

/// Device-to-device copy ordered on `stream`.
pub fn copy_dtod_async(dst: u64, src: u64, len: usize, stream: &Stream) -> CuResult<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: the caller owns both device ranges; the driver checks them.
    check(
        unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len, stream.raw) },
        "cuMemcpyDtoDAsync",
    )
}

/// A non-blocking stream owned by the caller.
pub struct Stream {
    pub raw: sys::CUstream,
}

impl Stream {
    pub fn new() -> CuResult<Stream> {
        let mut s = ptr::null_mut();
        // SAFETY: writes one stream handle; flag 1 = CU_STREAM_NON_BLOCKING.
        check(unsafe { sys::cuStreamCreate(&mut s, 1) }, "cuStreamCreate")?;
        Ok(Stream { raw: s })
    }

    pub fn synchronize(&self) -> CuResult<()> {
        // SAFETY: a valid stream owned by self.
        check(
            unsafe { sys::cuStreamSynchronize(self.raw) },
            "cuStreamSynchronize",
        )
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: destroys the stream created in `new`.
        unsafe {
            sys::cuStreamDestroy_v2(self.raw);
        }
    }
}

/// Whether `stream` (of the application) is being captured into a graph.
pub fn stream_is_capturing(stream: sys::CUstream) -> CuResult<bool> {
    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: writes one status for a stream handle the application passed to a launch.
    check(
        unsafe { sys::cuStreamIsCapturing(stream, &mut st) },
        "cuStreamIsCapturing",
    )?;
    Ok(st != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// A CUDA event (timing enabled).
pub struct Event {
    pub raw: sys::CUevent,
}

impl Event {
    pub fn new() -> CuResult<Event> {
        let mut e = ptr::null_mut();
        // SAFETY: writes one event handle; flags 0 = default (timing enabled).
        check(unsafe { sys::cuEventCreate(&mut e, 0) }, "cuEventCreate")?;
        Ok(Event { raw: e })
    }

    /// Records on a raw stream handle (an application's stream, or ours).
    pub fn record_raw(&self, stream: sys::CUstream) -> CuResult<()> {
        // SAFETY: valid event; the stream handle came from the driver.
        check(
            unsafe { sys::cuEventRecord(self.raw, stream) },
            "cuEventRecord",
        )
    }

    pub fn synchronize(&self) -> CuResult<()> {
        // SAFETY: valid event.
        check(
            unsafe { sys::cuEventSynchronize(self.raw) },
            "cuEventSynchronize",
        )
    }

    /// Nanoseconds from `start` to `self` (both recorded and complete).
    pub fn elapsed_ns_since(&self, start: &Event) -> CuResult<u64> {
        let mut ms = 0f32;
        // SAFETY: both events are valid and recorded.
        check(
            unsafe { sys::cuEventElapsedTime_v2(&mut ms, start.raw, self.raw) },
            "cuEventElapsedTime",
        )?;
        Ok((ms as f64 * 1e6).round() as u64)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: destroys the event created in `new`.
        unsafe {
            sys::cuEventDestroy_v2(self.raw);
        }
    }
}

/// Plain device memory (`cuMemAlloc`).
pub struct DeviceBuffer {
    pub ptr: u64,
    pub len: usize,
}

impl DeviceBuffer {
    pub fn new(len: usize) -> CuResult<DeviceBuffer> {
        let mut p = 0;
        // SAFETY: writes one device pointer.
        check(
            unsafe { sys::cuMemAlloc_v2(&mut p, len.max(1)) },
            "cuMemAlloc",
        )?;
        Ok(DeviceBuffer { ptr: p, len })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: frees the allocation made in `new`.
        unsafe {
            sys::cuMemFree_v2(self.ptr);
        }
    }
}

/// Page-locked host memory (`cuMemHostAlloc`): full-speed DMA in both directions.
pub struct PinnedBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain bytes owned by this value; the driver does not retain it
// beyond the synchronous copies made through it.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    pub fn new(len: usize) -> CuResult<PinnedBuffer> {
        let mut p = ptr::null_mut();
        // SAFETY: writes one host pointer to len bytes (portable flag 1).
        check(
            unsafe { sys::cuMemHostAlloc(&mut p, len.max(1), 1) },
            "cuMemHostAlloc",
        )?;
        Ok(PinnedBuffer {
            ptr: p as *mut u8,
            len,
        })
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to len bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr points to len bytes owned exclusively by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: frees the allocation made in `new`.
        unsafe {
            sys::cuMemFreeHost(self.ptr as *mut c_void);
        }
    }
}

/// A loaded module.
pub struct Module {
    pub raw: sys::CUmodule,
}

impl Module {
    /// Loads a cubin, fatbin or NUL-terminated PTX image.
    pub fn load(image: &[u8]) -> CuResult<Module> {
        // The driver takes no length: an image whose own offsets run past its end would make
        // it read beyond the buffer.
        let kind = crate::image::check_image(image).map_err(|why| CudaError {
            call: "cuModuleLoadData",
            code: CUresult::CUDA_ERROR_INVALID_IMAGE as u32,
            name: format!("the code image was refused before loading: {why}"),
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
        // SAFETY: data is a complete image that outlives the call.
        check(
            unsafe { sys::cuModuleLoadData(&mut m, data.as_ptr() as *const c_void) },
            "cuModuleLoadData",
        )?;
        Ok(Module { raw: m })
    }

    pub fn function(&self, name: &str) -> CuResult<sys::CUfunction> {
        let c = CString::new(name).map_err(|_| CudaError {
            call: "cuModuleGetFunction",
            code: CUresult::CUDA_ERROR_INVALID_VALUE as u32,
            name: "kernel name contains NUL".into(),
        })?;
        let mut f = ptr::null_mut();
        // SAFETY: writes one function handle for a valid module.
        check(
            unsafe { sys::cuModuleGetFunction(&mut f, self.raw, c.as_ptr()) },
            "cuModuleGetFunction",
        )?;
        Ok(f)
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: unloads the module loaded in `load`.
        unsafe {
            sys::cuModuleUnload(self.raw);
        }
    }
}

/// `cuModuleGetGlobal` on any module handle (ours or the application's).
pub fn module_global(module: sys::CUmodule, name: &str) -> CuResult<(u64, u64)> {
    let c = CString::new(name).map_err(|_| CudaError {
        call: "cuModuleGetGlobal",
        code: CUresult::CUDA_ERROR_INVALID_VALUE as u32,
        name: "symbol contains NUL".into(),
    })?;
    let mut p = 0;
    let mut size = 0usize;
    // SAFETY: writes a pointer and a size for a valid module handle.
    check(
        unsafe { sys::cuModuleGetGlobal_v2(&mut p, &mut size, module, c.as_ptr()) },
        "cuModuleGetGlobal",
    )?;
    Ok((p, size as u64))
}

pub fn set_max_dynamic_shared(f: sys::CUfunction, bytes: u32) -> CuResult<()> {
    // SAFETY: valid function handle.
    check(
        unsafe {
            sys::cuFuncSetAttribute(
                f,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
        },
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
    )
}

pub fn set_non_portable_cluster(f: sys::CUfunction) -> CuResult<()> {
    // SAFETY: valid function handle.
    check(
        unsafe {
            sys::cuFuncSetAttribute(
                f,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                1,
            )
        },
        "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)",
    )
}

/// A launch described in plain values.
pub struct Launch<'a> {
    pub function: sys::CUfunction,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    /// Raw `CUlaunchAttribute` values: (id, 64 value bytes).
    pub attributes: &'a [(u32, [u8; 64])],
    /// Pointers to each parameter's bytes.
    pub params: &'a mut [*mut c_void],
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

/// `cuLaunchKernelEx` on `stream`.
pub fn launch(l: &mut Launch<'_>, stream: &Stream) -> CuResult<()> {
    let mut attrs: Vec<sys::CUlaunchAttribute> = l
        .attributes
        .iter()
        .map(|(id, value)| -> CuResult<sys::CUlaunchAttribute> {
            // SAFETY: CUlaunchAttribute is plain data; all-zero is a valid bit pattern and we
            // then fill the id and the 64 value bytes the application passed originally.
            let mut a: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            a.id = attribute_id(*id).ok_or(CudaError {
                call: "cuLaunchKernelEx",
                code: CUresult::CUDA_ERROR_INVALID_VALUE as u32,
                name: format!("launch attribute id {id} is unknown to this build"),
            })?;
            // SAFETY: the union is 64 bytes of plain data.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    value.as_ptr(),
                    &mut a.value as *mut _ as *mut u8,
                    64.min(std::mem::size_of::<sys::CUlaunchAttributeValue>()),
                )
            };
            Ok(a)
        })
        .collect::<CuResult<_>>()?;
    let cfg = sys::CUlaunchConfig {
        gridDimX: l.grid[0],
        gridDimY: l.grid[1],
        gridDimZ: l.grid[2],
        blockDimX: l.block[0],
        blockDimY: l.block[1],
        blockDimZ: l.block[2],
        sharedMemBytes: l.shared_bytes,
        hStream: stream.raw,
        attrs: if attrs.is_empty() {
            ptr::null_mut()
        } else {
            attrs.as_mut_ptr()
        },
        numAttrs: attrs.len() as u32,
    };
    let params = if l.params.is_empty() {
        ptr::null_mut()
    } else {
        l.params.as_mut_ptr()
    };
    // SAFETY: cfg and attrs live across the call; params point at argument bytes the caller
    // keeps alive; the driver copies arguments at launch.
    check(
        unsafe { sys::cuLaunchKernelEx(&cfg, l.function, params, ptr::null_mut()) },
        "cuLaunchKernelEx",
    )
}

/// The module a function belongs to. Fails with `CUDA_ERROR_INVALID_HANDLE` for a `CUkernel`
/// passed where a `CUfunction` is expected (runtime `<<<>>>` launches do that).
pub fn function_module(f: sys::CUfunction) -> CuResult<sys::CUmodule> {
    let mut m = ptr::null_mut();
    // SAFETY: writes one module handle; the driver validates f.
    check(
        unsafe { sys::cuFuncGetModule(&mut m, f) },
        "cuFuncGetModule",
    )?;
    Ok(m)
}

/// The context-specific function of a library kernel.
pub fn kernel_function(k: sys::CUkernel) -> CuResult<sys::CUfunction> {
    let mut f = ptr::null_mut();
    // SAFETY: writes one function handle; the driver validates k.
    check(
        unsafe { sys::cuKernelGetFunction(&mut f, k) },
        "cuKernelGetFunction",
    )?;
    Ok(f)
}

/// A launch handle made usable: a `CUkernel` disguised as a `CUfunction` becomes the
/// function of the current context.
pub fn resolve_function(f: sys::CUfunction) -> sys::CUfunction {
    if function_module(f).is_ok() {
        return f;
    }
    kernel_function(f as sys::CUkernel).unwrap_or(f)
}

/// The mangled name of a function.
pub fn function_name(f: sys::CUfunction) -> CuResult<String> {
    let mut p: *const std::ffi::c_char = ptr::null();
    // SAFETY: writes a pointer to a driver-owned NUL-terminated string.
    check(unsafe { sys::cuFuncGetName(&mut p, f) }, "cuFuncGetName")?;
    if p.is_null() {
        return Ok(String::new());
    }
    // SAFETY: non-null, NUL-terminated, owned by the driver for the function's life.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Offset and size of every kernel parameter, in order.
pub fn parameter_layout(f: sys::CUfunction) -> Vec<(u32, u32)> {
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

/// Whether a pointer is host memory (pinned or mapped) rather than device memory.
pub fn is_host_memory(p: u64) -> bool {
    pointer_attribute_u64(
        p,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
    )
    .map(|t| t as u32 == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32)
    .unwrap_or(false)
}

/// Whether a pointer is managed memory.
pub fn is_managed(p: u64) -> bool {
    // The attribute is a 4-byte bool: read into a zeroed u64 and test the low bytes.
    pointer_attribute_u64(p, sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED)
        .map(|v| v as u32 != 0)
        .unwrap_or(false)
}

/// Device-to-device copy bandwidth (bytes copied per second), best of `reps` copies of
/// `bytes` between two fresh buffers. For benchmarks that compare against the hardware.
pub fn measure_dtod_bandwidth(bytes: usize, reps: u32) -> CuResult<f64> {
    let a = DeviceBuffer::new(bytes)?;
    let b = DeviceBuffer::new(bytes)?;
    let stream = Stream::new()?;
    let start = Event::new()?;
    let stop = Event::new()?;
    copy_dtod_async(b.ptr, a.ptr, bytes, &stream)?;
    stream.synchronize()?;
    let mut best = f64::MAX;
    for _ in 0..reps.max(1) {
        start.record_raw(stream.raw)?;
        copy_dtod_async(b.ptr, a.ptr, bytes, &stream)?;
        stop.record_raw(stream.raw)?;
        stop.synchronize()?;
        best = best.min(stop.elapsed_ns_since(&start)? as f64);
    }
    Ok(bytes as f64 / (best.max(1.0) * 1e-9))
}

/// Free and total device memory of the current context's device.
pub fn memory_info() -> CuResult<(u64, u64)> {
    let mut free = 0usize;
    let mut total = 0usize;
    // SAFETY: writes two size_t.
    check(
        unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
        "cuMemGetInfo",
    )?;
    Ok((free as u64, total as u64))
}

/// A context handle that may be handed to another thread (to make it current there).
#[derive(Clone, Copy)]
pub struct ContextHandle(sys::CUcontext);

// SAFETY: a CUcontext is an opaque token the driver accepts from any thread.
unsafe impl Send for ContextHandle {}

impl ContextHandle {
    /// The calling thread's current context.
    pub fn current() -> CuResult<ContextHandle> {
        let mut c = ptr::null_mut();
        // SAFETY: writes one context handle.
        check(unsafe { sys::cuCtxGetCurrent(&mut c) }, "cuCtxGetCurrent")?;
        Ok(ContextHandle(c))
    }

    /// The handle as a number, to key per-context state by.
    pub fn id(&self) -> usize {
        self.0 as usize
    }

    /// Makes this context current on the calling thread.
    pub fn make_current(self) -> CuResult<()> {
        // SAFETY: the handle came from the driver; a destroyed context yields an error.
        check(unsafe { sys::cuCtxSetCurrent(self.0) }, "cuCtxSetCurrent")
    }
}

/// Whether `addr` lies in memory mapped through the virtual memory management API
/// (`cuMemMap`), e.g. PyTorch's expandable segments.
pub fn is_vmm(addr: u64) -> bool {
    let mut h: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: writes one handle; fails for memory not mapped with cuMemMap.
    let r = unsafe { sys::cuMemRetainAllocationHandle(&mut h, addr as *mut c_void) };
    if r != CUresult::CUDA_SUCCESS {
        return false;
    }
    // SAFETY: releases the reference retained above.
    unsafe { sys::cuMemRelease(h) };
    true
}

/// The device allocation containing `ptr`. VMM mappings are extended over the mappings that
/// follow them without a gap (up to `limit` bytes): an allocator that maps memory in pieces
/// (PyTorch's expandable segments) places one tensor across several of them.
pub fn allocation_range(ptr: u64, limit: u64) -> Option<(u64, u64)> {
    let (base, mut size) = address_range(ptr)?;
    if is_vmm(base) {
        while size < limit {
            match address_range(base + size) {
                Some((b, s)) if b == base + size && is_vmm(b) => size += s,
                _ => break,
            }
        }
    }
    Some((base, size))
}
