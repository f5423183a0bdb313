//! The device heap (`malloc` inside kernels). The driver gives no query for it: its pointers
//! belong to no allocation (`cuMemGetAddressRange` and every pointer attribute fail on them)
//! and copies from it fail (measured on an H200, driver 580). What can be learnt without
//! changing the application's state: whether the heap exists (the heap size limit can no
//! longer be set once it does; setting it to its current value is refused then and changes
//! nothing before), and one address inside it (a probe kernel allocates 16 bytes and frees
//! them). The heap is one range of the limit's size, so its pointers lie within a limit of
//! that address.

use crate::error::{check, CuResult};
use crate::launch::{launch, KernelArgs, LaunchConfig};
use crate::memory::{copy_dtoh, DeviceBuffer};
use crate::module::Module;
use crate::stream::Stream;
use crate::sys;

const PROBE_PTX: &str = r#".version 7.0
.target sm_70
.address_size 64
.extern .func (.param .b64 func_retval0) malloc (.param .b64 malloc_param_0);
.extern .func free (.param .b64 free_param_0);
.visible .entry kreplay_heap_probe(.param .u64 p_out)
{
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [p_out];
    cvta.to.global.u64 %rd1, %rd1;
    {
    .param .b64 param0;
    st.param.b64 [param0], 16;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd2, [retval0];
    }
    st.global.u64 [%rd1], %rd2;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd2;
    call.uni free, (param0);
    }
    ret;
}
"#;

/// Where the current context's device heap is, as closely as can be learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapWindow {
    /// An address inside the heap.
    pub inside: u64,
    /// The heap's size (the context's heap size limit).
    pub size: u64,
}

impl HeapWindow {
    /// Every address the heap can hold lies in `[low, high)`.
    pub fn bounds(&self) -> (u64, u64) {
        (
            self.inside.saturating_sub(self.size),
            self.inside.saturating_add(self.size),
        )
    }
}

fn heap_limit() -> CuResult<usize> {
    let mut v = 0usize;
    check(
        // SAFETY: the only pointer is to a local `usize` (size_t), the one value the driver writes.
        unsafe { sys::cuCtxGetLimit(&mut v, sys::CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE) },
        "cuCtxGetLimit",
    )?;
    Ok(v)
}

/// Whether the current context has made its device heap (a kernel that calls `malloc` ran).
pub fn exists() -> CuResult<bool> {
    let limit = heap_limit()?;
    // SAFETY: sets the limit to the value it has: no change when the heap does not exist yet,
    // refused when it does.
    let r = unsafe { sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE, limit) };
    Ok(r != sys::CUresult::CUDA_SUCCESS)
}

/// The heap's window in the current context, `None` when there is no heap. Runs a probe
/// kernel (16 bytes allocated and freed) on a stream of its own, only when the heap exists.
pub fn probe() -> CuResult<Option<HeapWindow>> {
    if !exists()? {
        return Ok(None);
    }
    let module = Module::load(PROBE_PTX.as_bytes())?;
    let function = module.function("kreplay_heap_probe")?;
    let out = DeviceBuffer::new(8)?;
    let stream = Stream::new()?;
    let cfg = LaunchConfig::new([1, 1, 1], [1, 1, 1], 0);
    // SAFETY: the probe writes 8 bytes at `out`, an 8-byte allocation of this function that
    // outlives the launch (the stream is synchronised before it drops).
    unsafe {
        launch(
            &function,
            &cfg,
            &mut KernelArgs::words(&[out.ptr()]),
            &stream,
        )?
    };
    stream.synchronize()?;
    let mut b = [0u8; 8];
    // SAFETY: `out` is this function's 8-byte allocation, written by the finished probe.
    unsafe { copy_dtoh(&mut b, out.ptr())? };
    let inside = u64::from_le_bytes(b);
    Ok((inside != 0).then_some(HeapWindow {
        inside,
        size: heap_limit()? as u64,
    }))
}
