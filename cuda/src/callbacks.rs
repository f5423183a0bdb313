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
    pub const GRAPH_INSTANTIATE: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate as u32;
    pub const GRAPH_INSTANTIATE_V2: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2 as u32;
    pub const GRAPH_INSTANTIATE_WITH_FLAGS: u32 =
        C::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags as u32;
    pub const GRAPH_INSTANTIATE_WITH_PARAMS: u32 =
        C::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams as u32;
    pub const GRAPH_INSTANTIATE_WITH_PARAMS_PTSZ: u32 =
        C::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz as u32;
    pub const GRAPH_LAUNCH: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch as u32;
    pub const GRAPH_LAUNCH_PTSZ: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz as u32;
    pub const GRAPH_EXEC_DESTROY: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy as u32;
    pub const GRAPH_EXEC_KERNEL_SET: u32 =
        C::CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams as u32;
    pub const GRAPH_EXEC_KERNEL_SET_V2: u32 =
        C::CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams_v2 as u32;
    pub const GRAPH_EXEC_UPDATE: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate as u32;
    pub const GRAPH_EXEC_UPDATE_V2: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2 as u32;
    pub const GRAPH_NODE_SET_ENABLED: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuGraphNodeSetEnabled as u32;
    pub const GRAPH_EXEC_NODE_SET: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuGraphExecNodeSetParams as u32;
    pub const GRAPH_EXEC_MEMCPY_SET: u32 =
        C::CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemcpyNodeSetParams as u32;
    pub const GRAPH_EXEC_MEMSET_SET: u32 =
        C::CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemsetNodeSetParams as u32;
    pub const GRAPH_EXEC_CHILD_SET: u32 =
        C::CUPTI_DRIVER_TRACE_CBID_cuGraphExecChildGraphNodeSetParams as u32;
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
    /// An executable graph made, launched, updated or destroyed.
    Graph,
}

/// Every driver callback kreplay understands.
pub const TABLE: [(u32, Group); 39] = {
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
        (GRAPH_INSTANTIATE, Graph),
        (GRAPH_INSTANTIATE_V2, Graph),
        (GRAPH_INSTANTIATE_WITH_FLAGS, Graph),
        (GRAPH_INSTANTIATE_WITH_PARAMS, Graph),
        (GRAPH_INSTANTIATE_WITH_PARAMS_PTSZ, Graph),
        (GRAPH_LAUNCH, Graph),
        (GRAPH_LAUNCH_PTSZ, Graph),
        (GRAPH_EXEC_DESTROY, Graph),
        (GRAPH_EXEC_KERNEL_SET, Graph),
        (GRAPH_EXEC_KERNEL_SET_V2, Graph),
        (GRAPH_EXEC_UPDATE, Graph),
        (GRAPH_EXEC_UPDATE_V2, Graph),
        (GRAPH_NODE_SET_ENABLED, Graph),
        (GRAPH_EXEC_NODE_SET, Graph),
        (GRAPH_EXEC_MEMCPY_SET, Graph),
        (GRAPH_EXEC_MEMSET_SET, Graph),
        (GRAPH_EXEC_CHILD_SET, Graph),
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
        assert_eq!(super::ids(Group::Graph).count(), 17);
        assert_eq!(group(cbid::LAUNCH_KERNEL_EX), Some(Group::Launch));
        assert_eq!(group(cbid::UNMAP), Some(Group::Allocation));
        assert_eq!(group(0), None);
    }
}
