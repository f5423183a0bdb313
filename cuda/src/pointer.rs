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

/// What the driver says of one allocation, from one `cuPointerGetAttributes` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocationFacts {
    pub base: u64,
    pub size: u64,
    /// Page-locked host memory reached through a device pointer.
    pub host: bool,
    /// Of memory type DEVICE (managed memory may say so too).
    pub device: bool,
    pub managed: bool,
    /// The device whose memory it is.
    pub ordinal: Option<u32>,
    /// Mapped through the virtual memory management API (joined with the mappings after it,
    /// as `allocation_range`).
    pub vmm: bool,
}

impl AllocationFacts {
    /// Whether a kernel on device `ordinal` may read the whole allocation: device memory of
    /// that device, not managed, and one allocation (a joined VMM range may mix mappings).
    pub fn kernel_readable_on(&self, ordinal: u32) -> bool {
        self.device && !self.managed && !self.vmm && self.ordinal == Some(ordinal)
    }
}

/// `allocation_range` with the facts the recorder asks of each allocation, in one driver call
/// for `cuMemAlloc`'s memory (a pointer table's thousands of allocations are looked up while
/// the application waits) instead of four; memory of other allocators (which may be VMM, whose
/// range the attributes give as the whole reservation) also asks `cuMemGetAddressRange`.
pub fn allocation_facts(ptr: u64, limit: u64) -> Option<AllocationFacts> {
    let mut memory_type: u64 = 0;
    let mut managed: u64 = 0;
    let mut ordinal: u64 = u64::MAX;
    let mut ipc: u64 = 0;
    let mut start: u64 = 0;
    let mut length: u64 = 0;
    let mut attributes = [
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let mut data: [*mut c_void; 6] = [
        (&mut memory_type as *mut u64).cast(),
        (&mut managed as *mut u64).cast(),
        (&mut ordinal as *mut u64).cast(),
        (&mut ipc as *mut u64).cast(),
        (&mut start as *mut u64).cast(),
        (&mut length as *mut u64).cast(),
    ];
    // SAFETY: six attributes, each written into its own zeroed (or marked) 8-byte local, as
    // large as any of them needs; the call only asks the driver about a number (an address it
    // does not know gets default values, not an error).
    let r = unsafe {
        sys::cuPointerGetAttributes(
            attributes.len() as u32,
            attributes.as_mut_ptr(),
            data.as_mut_ptr(),
            ptr,
        )
    };
    if r != CUresult::CUDA_SUCCESS {
        // A driver that refuses one of the attributes still answers the questions one by one.
        return facts_one_by_one(ptr, limit);
    }
    // 4-byte enums and ints, 1- or 4-byte bools: the low bytes of each little-endian word.
    let legacy_ipc = ipc as u8 != 0;
    // `cuMemAlloc`'s memory (the only legacy-IPC capable kind) is its own range; the others
    // ask the range of the mapping.
    let (base, size) = if legacy_ipc && length > 0 && ptr >= start && ptr - start < length {
        (start, length)
    } else {
        address_range(ptr)?
    };
    let host = memory_type as u32 == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32;
    let device = memory_type as u32 == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32;
    let managed = managed as u8 != 0;
    // An address the driver does not know gets default values (memory type 0).
    let ordinal = (memory_type as u32 != 0 && ordinal as u32 != u32::MAX).then_some(ordinal as u32);
    let vmm = !legacy_ipc && is_vmm(base);
    let size = if vmm {
        joined_vmm_size(base, size, limit)
    } else {
        size
    };
    Some(AllocationFacts {
        base,
        size,
        host,
        device,
        managed,
        ordinal,
        vmm,
    })
}

/// `allocation_facts` asked with the single-attribute helpers (four calls and more).
fn facts_one_by_one(ptr: u64, limit: u64) -> Option<AllocationFacts> {
    let (base, size) = allocation_range(ptr, limit)?;
    let memory_type = pointer_attribute_u64(
        base,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
    )
    .map(|t| t as u32);
    Some(AllocationFacts {
        base,
        size,
        host: memory_type == Some(sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32),
        device: memory_type == Some(sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32),
        managed: is_managed(base),
        ordinal: device_ordinal(base),
        vmm: is_vmm(base),
    })
}

/// The size of a VMM mapping at `base` joined with the VMM mappings that follow it without a
/// gap, up to `limit` bytes.
fn joined_vmm_size(base: u64, mut size: u64, limit: u64) -> u64 {
    while size < limit {
        match address_range(base + size) {
            Some((b, s)) if b == base + size && is_vmm(b) => size += s,
            _ => break,
        }
    }
    size
}

/// The device allocation containing `ptr`. VMM mappings are extended over the mappings that
/// follow them without a gap (up to `limit` bytes): an allocator that maps memory in pieces
/// (PyTorch's expandable segments) places one tensor across several of them.
pub fn allocation_range(ptr: u64, limit: u64) -> Option<(u64, u64)> {
    let (base, size) = address_range(ptr)?;
    if is_vmm(base) {
        return Some((base, joined_vmm_size(base, size, limit)));
    }
    Some((base, size))
}
