//! Allocation callbacks: what a call changes in the process's live device allocations (at
//! EXIT), and what it is about to free or ask for (at ENTER).

use std::ffi::c_void;

use crate::callbacks::cbid;
use crate::cupti::sys as csys;

/// Which allocator made an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocationKind {
    /// `cuMemAlloc`, `cuMemAllocPitch`.
    Device,
    /// `cuMemAllocManaged`.
    Managed,
    /// The stream-ordered allocator (`cuMemAllocAsync`, from a pool).
    Async,
    /// Virtual memory management (`cuMemMap`).
    Vmm,
}

/// One change to the set of live allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocationChange {
    Alloc {
        addr: u64,
        size: u64,
        kind: AllocationKind,
    },
    Free {
        addr: u64,
    },
    Unmap {
        addr: u64,
        size: u64,
    },
}

/// Reads an allocation callback at its EXIT site (output pointers are written by then).
///
/// # Safety
/// `params` must be the `functionParams` of a CUPTI driver callback with id `id`, at EXIT.
pub(super) unsafe fn decode(id: u32, params: *const c_void) -> Option<AllocationChange> {
    if params.is_null() {
        return None;
    }
    // SAFETY (every arm): CUPTI passes the parameter struct matching the callback id; output
    // pointers point at values the driver has written when the call succeeded.
    unsafe {
        let out = |p: *mut u64| if p.is_null() { None } else { Some(*p) };
        match id {
            cbid::ALLOC => {
                let p = &*(params as *const csys::cuMemAlloc_v2_params);
                Some(AllocationChange::Alloc {
                    addr: out(p.dptr)?,
                    size: p.bytesize as u64,
                    kind: AllocationKind::Device,
                })
            }
            cbid::ALLOC_PITCH => {
                let p = &*(params as *const csys::cuMemAllocPitch_v2_params);
                let pitch = if p.pPitch.is_null() { 0 } else { *p.pPitch };
                Some(AllocationChange::Alloc {
                    addr: out(p.dptr)?,
                    size: (pitch as u64).saturating_mul(p.Height as u64),
                    kind: AllocationKind::Device,
                })
            }
            cbid::ALLOC_MANAGED => {
                let p = &*(params as *const csys::cuMemAllocManaged_params);
                Some(AllocationChange::Alloc {
                    addr: out(p.dptr)?,
                    size: p.bytesize as u64,
                    kind: AllocationKind::Managed,
                })
            }
            cbid::ALLOC_ASYNC | cbid::ALLOC_ASYNC_PTSZ => {
                let p = &*(params as *const csys::cuMemAllocAsync_params);
                Some(AllocationChange::Alloc {
                    addr: out(p.dptr)?,
                    size: p.bytesize as u64,
                    kind: AllocationKind::Async,
                })
            }
            cbid::ALLOC_POOL | cbid::ALLOC_POOL_PTSZ => {
                let p = &*(params as *const csys::cuMemAllocFromPoolAsync_params);
                Some(AllocationChange::Alloc {
                    addr: out(p.dptr)?,
                    size: p.bytesize as u64,
                    kind: AllocationKind::Async,
                })
            }
            cbid::FREE => {
                let p = &*(params as *const csys::cuMemFree_v2_params);
                Some(AllocationChange::Free { addr: p.dptr })
            }
            cbid::FREE_ASYNC | cbid::FREE_ASYNC_PTSZ => {
                let p = &*(params as *const csys::cuMemFreeAsync_params);
                Some(AllocationChange::Free { addr: p.dptr })
            }
            cbid::MAP => {
                let p = &*(params as *const csys::cuMemMap_params);
                Some(AllocationChange::Alloc {
                    addr: p.ptr,
                    size: p.size as u64,
                    kind: AllocationKind::Vmm,
                })
            }
            cbid::UNMAP => {
                let p = &*(params as *const csys::cuMemUnmap_params);
                Some(AllocationChange::Unmap {
                    addr: p.ptr,
                    size: p.size as u64,
                })
            }
            _ => None,
        }
    }
}

/// An allocation call about to run, as its ENTER site shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocationRequest {
    /// Memory at `[addr, addr + len)` is about to be freed or unmapped (`len` 1 where the
    /// call does not say: a free names its allocation's base).
    Release { addr: u64, len: u64 },
    /// The application asks for `bytes` of device memory.
    Request { bytes: u64 },
}

/// Reads an allocation callback at its ENTER site (inputs only).
///
/// # Safety
/// `params` must be the `functionParams` of a CUPTI driver callback with id `id`.
pub(super) unsafe fn entering(id: u32, params: *const c_void) -> Option<AllocationRequest> {
    if params.is_null() {
        return None;
    }
    // SAFETY (every arm): CUPTI passes the parameter struct matching the callback id; only its
    // input fields are read.
    unsafe {
        match id {
            cbid::FREE => {
                let p = &*(params as *const csys::cuMemFree_v2_params);
                Some(AllocationRequest::Release {
                    addr: p.dptr,
                    len: 1,
                })
            }
            cbid::FREE_ASYNC | cbid::FREE_ASYNC_PTSZ => {
                let p = &*(params as *const csys::cuMemFreeAsync_params);
                Some(AllocationRequest::Release {
                    addr: p.dptr,
                    len: 1,
                })
            }
            cbid::UNMAP => {
                let p = &*(params as *const csys::cuMemUnmap_params);
                Some(AllocationRequest::Release {
                    addr: p.ptr,
                    len: p.size as u64,
                })
            }
            cbid::ALLOC => Some(AllocationRequest::Request {
                bytes: (*(params as *const csys::cuMemAlloc_v2_params)).bytesize as u64,
            }),
            cbid::ALLOC_MANAGED => Some(AllocationRequest::Request {
                bytes: (*(params as *const csys::cuMemAllocManaged_params)).bytesize as u64,
            }),
            cbid::ALLOC_ASYNC | cbid::ALLOC_ASYNC_PTSZ => Some(AllocationRequest::Request {
                bytes: (*(params as *const csys::cuMemAllocAsync_params)).bytesize as u64,
            }),
            cbid::ALLOC_POOL | cbid::ALLOC_POOL_PTSZ => Some(AllocationRequest::Request {
                bytes: (*(params as *const csys::cuMemAllocFromPoolAsync_params)).bytesize as u64,
            }),
            cbid::ALLOC_PITCH => {
                let p = &*(params as *const csys::cuMemAllocPitch_v2_params);
                Some(AllocationRequest::Request {
                    bytes: (p.WidthInBytes as u64).saturating_mul(p.Height as u64),
                })
            }
            _ => None,
        }
    }
}
