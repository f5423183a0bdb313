//! The CUPTI driver-API callbacks kreplay subscribes to: one table, one group per callback id
//! (a launch, a code image handed to the driver, a change to the live allocations).

use crate::cupti::sys::CUpti_driver_api_trace_cbid_enum as C;

/// Callback ids by name, for the decoders that match on them.
pub mod cbid {
    use super::C;
    pub const LAUNCH_KERNEL: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel as u32;
    pub const LAUNCH_KERNEL_PTSZ: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz as u32;
    pub const LAUNCH_KERNEL_EX: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx as u32;
    pub const LAUNCH_KERNEL_EX_PTSZ: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz as u32;
    pub const LAUNCH_COOPERATIVE: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel as u32;
    pub const LAUNCH_COOPERATIVE_PTSZ: u32 =
        C::CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz as u32;
    pub const MODULE_LOAD_DATA: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData as u32;
    pub const MODULE_LOAD_DATA_EX: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx as u32;
    pub const MODULE_LOAD_FAT_BINARY: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary as u32;
    pub const LIBRARY_LOAD_DATA: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData as u32;
    pub const ALLOC: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2 as u32;
    pub const ALLOC_PITCH: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2 as u32;
    pub const ALLOC_MANAGED: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged as u32;
    pub const ALLOC_ASYNC: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync as u32;
    pub const ALLOC_ASYNC_PTSZ: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz as u32;
    pub const ALLOC_POOL: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync as u32;
    pub const ALLOC_POOL_PTSZ: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz as u32;
    pub const FREE: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2 as u32;
    pub const FREE_ASYNC: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync as u32;
    pub const FREE_ASYNC_PTSZ: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz as u32;
    pub const MAP: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemMap as u32;
    pub const UNMAP: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuMemUnmap as u32;
}

/// What a driver callback is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// A kernel launch entry point.
    Launch,
    /// A call that hands the driver a code image (which may carry PTX).
    ImageLoad,
    /// An allocation or free (tracked for `--memory all`).
    Allocation,
}

/// Every driver callback kreplay understands.
pub const TABLE: [(u32, Group); 22] = {
    use cbid::*;
    use Group::*;
    [
        (LAUNCH_KERNEL, Launch),
        (LAUNCH_KERNEL_PTSZ, Launch),
        (LAUNCH_KERNEL_EX, Launch),
        (LAUNCH_KERNEL_EX_PTSZ, Launch),
        (LAUNCH_COOPERATIVE, Launch),
        (LAUNCH_COOPERATIVE_PTSZ, Launch),
        (MODULE_LOAD_DATA, ImageLoad),
        (MODULE_LOAD_DATA_EX, ImageLoad),
        (MODULE_LOAD_FAT_BINARY, ImageLoad),
        (LIBRARY_LOAD_DATA, ImageLoad),
        (ALLOC, Allocation),
        (ALLOC_PITCH, Allocation),
        (ALLOC_MANAGED, Allocation),
        (ALLOC_ASYNC, Allocation),
        (ALLOC_ASYNC_PTSZ, Allocation),
        (ALLOC_POOL, Allocation),
        (ALLOC_POOL_PTSZ, Allocation),
        (FREE, Allocation),
        (FREE_ASYNC, Allocation),
        (FREE_ASYNC_PTSZ, Allocation),
        (MAP, Allocation),
        (UNMAP, Allocation),
    ]
};

/// The group of a driver callback id.
pub fn group(id: u32) -> Option<Group> {
    TABLE.iter().find(|(i, _)| *i == id).map(|&(_, g)| g)
}

/// The callback ids of a group.
pub fn ids(g: Group) -> impl Iterator<Item = u32> {
    TABLE
        .iter()
        .filter(move |(_, x)| *x == g)
        .map(|&(id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_is_in_one_group_only() {
        let mut ids: Vec<u32> = TABLE.iter().map(|t| t.0).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), TABLE.len());
        assert_eq!(super::ids(Group::Launch).count(), 6);
        assert_eq!(super::ids(Group::ImageLoad).count(), 4);
        assert_eq!(super::ids(Group::Allocation).count(), 12);
        assert_eq!(group(cbid::LAUNCH_KERNEL_EX), Some(Group::Launch));
        assert_eq!(group(cbid::UNMAP), Some(Group::Allocation));
        assert_eq!(group(0), None);
    }
}
