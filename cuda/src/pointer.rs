//! What the driver knows about an address: which allocation holds it, what kind of memory it
//! is. Used by the recorder to tell pointers from other words. These functions only ask the
//! driver about a number and never reach the memory behind it (the driver answers an error for
//! an address it does not know), so unlike copies they are safe to call with any address.

use std::ffi::c_void;

use crate::sys::{self, CUresult};

/// `cuMemGetAddressRange`: the allocation containing `ptr`, if `ptr` is device memory.
pub fn address_range(ptr: u64) -> Option<(u64, u64)> {
    let mut base = 0;
    let mut size = 0usize;
    // SAFETY: writes a base and a size; fails for non-device addresses.
    let r = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
    (r == CUresult::CUDA_SUCCESS && size > 0).then_some((base, size as u64))
}

/// Queries one 8-byte-or-smaller pointer attribute.
fn pointer_attribute_u64(ptr: u64, attr: sys::CUpointer_attribute) -> Option<u64> {
    let mut v: u64 = 0;
    // SAFETY: every attribute queried through this helper fits in 8 bytes.
    let r = unsafe { sys::cuPointerGetAttribute(&mut v as *mut u64 as *mut c_void, attr, ptr) };
    (r == CUresult::CUDA_SUCCESS).then_some(v)
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

/// Whether a pointer is device memory (allocated on the GPU, managed memory included): the
/// side of a unified-addressing copy a range capture holds as a region. Host memory, pinned
/// or not, answers false.
pub fn is_device_memory(p: u64) -> bool {
    pointer_attribute_u64(
        p,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
    )
    .is_some_and(|t| t as u32 == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32)
        || is_managed(p)
}

/// The ordinal of the device whose memory `p` is (as the calling process counts devices).
pub fn device_ordinal(p: u64) -> Option<u32> {
    // A 4-byte int: read into a zeroed u64 and keep the low half.
    pointer_attribute_u64(
        p,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    )
    .map(|v| v as u32)
}

/// Whether a pointer is managed memory.
pub fn is_managed(p: u64) -> bool {
    // The attribute is a 4-byte bool: read into a zeroed u64 and test the low bytes.
    pointer_attribute_u64(p, sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED)
        .map(|v| v as u32 != 0)
        .unwrap_or(false)
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
