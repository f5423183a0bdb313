//! Contexts: the primary context the player retains, and a handle to the application's
//! current context that the recorder's writer thread makes current.

use std::ptr;

use crate::device::Device;
use crate::error::{check, CuResult};
use crate::sys;

/// The primary context of a device, retained for the owner's lifetime and made current.
pub struct PrimaryContext {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
}

impl PrimaryContext {
    pub fn retain(device: &Device) -> CuResult<PrimaryContext> {
        let dev = device.raw();
        let mut ctx = ptr::null_mut();
        check(
            // SAFETY: writes one context handle for a device the driver resolved.
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, dev) },
            "cuDevicePrimaryCtxRetain",
        )?;
        // SAFETY: ctx was just retained.
        check(unsafe { sys::cuCtxSetCurrent(ctx) }, "cuCtxSetCurrent")?;
        Ok(PrimaryContext { dev, ctx })
    }

    /// A handle to this context (valid while `self` lives).
    pub fn handle(&self) -> ContextHandle {
        ContextHandle(self.ctx)
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

/// A context handle that may be handed to another thread (to make it current there).
#[derive(Clone, Copy)]
pub struct ContextHandle(sys::CUcontext);

// SAFETY: a CUcontext is an opaque token the driver accepts from any thread.
unsafe impl Send for ContextHandle {}

impl ContextHandle {
    /// The calling thread's current context.
    pub fn current() -> CuResult<ContextHandle> {
        let mut c = ptr::null_mut();
        // SAFETY: the only pointer is to a local handle, the one value the driver writes.
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

    /// A context handle the driver passed to a callback.
    ///
    /// # Safety
    /// `raw` must be a context handle the driver gave out (it may since have been destroyed:
    /// calls then fail with an error).
    pub unsafe fn from_raw(raw: usize) -> ContextHandle {
        ContextHandle(raw as sys::CUcontext)
    }

    /// Makes this context current on the calling thread until the guard is dropped (the
    /// previous one is current again then).
    pub fn push(self) -> CuResult<PushedContext> {
        check(
            // SAFETY: the handle came from the driver; a destroyed context yields an error.
            unsafe { sys::cuCtxPushCurrent_v2(self.0) },
            "cuCtxPushCurrent",
        )?;
        Ok(PushedContext(()))
    }

    pub(crate) fn raw(self) -> sys::CUcontext {
        self.0
    }
}

/// A context pushed by `ContextHandle::push`, popped on drop.
pub struct PushedContext(());

impl Drop for PushedContext {
    fn drop(&mut self) {
        let mut c = ptr::null_mut();
        // SAFETY: pops the context this guard pushed.
        unsafe { sys::cuCtxPopCurrent_v2(&mut c) };
    }
}

/// Waits for all work of the current context.
pub fn ctx_synchronize() -> CuResult<()> {
    // SAFETY: no arguments.
    check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
}
