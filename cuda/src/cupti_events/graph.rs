//! Graph callbacks: executable graphs made, launched, updated and destroyed, each read from
//! its own parameter struct.

use std::ffi::c_void;

use super::site::Site;
use crate::callbacks::cbid;
use crate::cupti::sys as csys;
use crate::graph::KernelNodeParams;
use crate::sys;

/// A graph call kreplay follows. Handles are the application's, live during the callback.
#[derive(Debug, Clone)]
pub enum GraphCall {
    /// At ENTER: `exec` is about to be launched on `stream`.
    Launch { exec: usize, stream: sys::CUstream },
    /// At ENTER: `exec` is about to be destroyed.
    ExecDestroyed { exec: usize },
    /// At EXIT: `exec` was instantiated from `graph`.
    Instantiated { exec: usize, graph: sys::CUgraph },
    /// At EXIT: a kernel node of `exec` was given new parameters.
    KernelSet {
        exec: usize,
        node: usize,
        params: KernelNodeParams,
    },
    /// At EXIT: `exec` was updated from `graph`.
    Updated { exec: usize, graph: sys::CUgraph },
    /// At EXIT: a node of `exec` was enabled or disabled.
    NodeEnabled {
        exec: usize,
        node: usize,
        enabled: bool,
    },
    /// At EXIT: a node of `exec` was given parameters kreplay does not follow (generic node
    /// parameters, memcpy, memset or child graph).
    NodeParamsSet { exec: usize },
}

/// Decodes a graph callback.
///
/// # Safety
/// `params` must be the `functionParams` of a CUPTI driver callback with id `id`, at `site`;
/// `succeeded` whether the call returned success (at EXIT).
pub(super) unsafe fn decode(
    id: u32,
    params: *const c_void,
    site: Site,
    succeeded: bool,
) -> Option<GraphCall> {
    if params.is_null() {
        return None;
    }
    let enter = site == Site::Enter;
    // SAFETY: each arm reads the parameter struct CUPTI passes for its callback id.
    unsafe {
        match id {
            cbid::GRAPH_LAUNCH if enter => {
                let p = &*(params as *const csys::cuGraphLaunch_params);
                Some(GraphCall::Launch {
                    exec: p.hGraph as usize,
                    stream: p.hStream as sys::CUstream,
                })
            }
            cbid::GRAPH_LAUNCH_PTSZ if enter => {
                let p = &*(params as *const csys::cuGraphLaunch_ptsz_params);
                Some(GraphCall::Launch {
                    exec: p.hGraphExec as usize,
                    stream: p.hStream as sys::CUstream,
                })
            }
            cbid::GRAPH_EXEC_DESTROY if enter => {
                let p = &*(params as *const csys::cuGraphExecDestroy_params);
                Some(GraphCall::ExecDestroyed {
                    exec: p.hGraphExec as usize,
                })
            }
            _ if !succeeded => None,
            _ => decode_changed(id, params),
        }
    }
}

/// Decodes an instantiation (at EXIT, succeeded); `None` for other ids.
///
/// # Safety
/// As for `decode`, at EXIT of a successful call.
unsafe fn decode_instantiate(id: u32, params: *const c_void) -> Option<GraphCall> {
    // The variants' structs differ after their first two fields: where the new executable
    // graph is written, and the graph it is made from.
    let instantiated = |out: *mut sys::CUgraphExec, graph: sys::CUgraph| {
        (!out.is_null()).then(|| GraphCall::Instantiated {
            // SAFETY: the call succeeded, so *out holds the new executable graph.
            exec: unsafe { *out } as usize,
            graph,
        })
    };
    // SAFETY: each arm reads the parameter struct CUPTI passes for its callback id.
    unsafe {
        match id {
            cbid::GRAPH_INSTANTIATE => {
                let p = &*(params as *const csys::cuGraphInstantiate_params);
                instantiated(p.phGraphExec, p.hGraph)
            }
            cbid::GRAPH_INSTANTIATE_V2 => {
                let p = &*(params as *const csys::cuGraphInstantiate_v2_params);
                instantiated(p.phGraphExec, p.hGraph)
            }
            cbid::GRAPH_INSTANTIATE_WITH_FLAGS => {
                let p = &*(params as *const csys::cuGraphInstantiateWithFlags_params);
                instantiated(p.phGraphExec, p.hGraph)
            }
            cbid::GRAPH_INSTANTIATE_WITH_PARAMS => {
                let p = &*(params as *const csys::cuGraphInstantiateWithParams_params);
                instantiated(p.phGraphExec, p.hGraph)
            }
            cbid::GRAPH_INSTANTIATE_WITH_PARAMS_PTSZ => {
                let p = &*(params as *const csys::cuGraphInstantiateWithParams_ptsz_params);
                instantiated(p.phGraphExec, p.hGraph)
            }
            _ => None,
        }
    }
}

/// Decodes a graph call that changed an executable graph (at EXIT, succeeded).
///
/// # Safety
/// As for `decode`, at EXIT of a successful call.
unsafe fn decode_changed(id: u32, params: *const c_void) -> Option<GraphCall> {
    // SAFETY: as for this function.
    if let Some(made) = unsafe { decode_instantiate(id, params) } {
        return Some(made);
    }
    // SAFETY: each arm reads the parameter struct CUPTI passes for its callback id.
    unsafe {
        match id {
            cbid::GRAPH_EXEC_KERNEL_SET => {
                let p = &*(params as *const csys::cuGraphExecKernelNodeSetParams_params);
                p.nodeParams.as_ref().map(|n| GraphCall::KernelSet {
                    exec: p.hGraphExec as usize,
                    node: p.hNode as usize,
                    params: KernelNodeParams::from_v1(n),
                })
            }
            cbid::GRAPH_EXEC_KERNEL_SET_V2 => {
                let p = &*(params as *const csys::cuGraphExecKernelNodeSetParams_v2_params);
                p.nodeParams.as_ref().map(|n| GraphCall::KernelSet {
                    exec: p.hGraphExec as usize,
                    node: p.hNode as usize,
                    params: KernelNodeParams::from_raw(n),
                })
            }
            cbid::GRAPH_EXEC_UPDATE => {
                let p = &*(params as *const csys::cuGraphExecUpdate_params);
                Some(GraphCall::Updated {
                    exec: p.hGraphExec as usize,
                    graph: p.hGraph as sys::CUgraph,
                })
            }
            cbid::GRAPH_EXEC_UPDATE_V2 => {
                let p = &*(params as *const csys::cuGraphExecUpdate_v2_params);
                Some(GraphCall::Updated {
                    exec: p.hGraphExec as usize,
                    graph: p.hGraph as sys::CUgraph,
                })
            }
            cbid::GRAPH_NODE_SET_ENABLED => {
                let p = &*(params as *const csys::cuGraphNodeSetEnabled_params);
                Some(GraphCall::NodeEnabled {
                    exec: p.hGraphExec as usize,
                    node: p.hNode as usize,
                    enabled: p.isEnabled != 0,
                })
            }
            cbid::GRAPH_EXEC_NODE_SET => {
                let p = &*(params as *const csys::cuGraphExecNodeSetParams_params);
                Some(GraphCall::NodeParamsSet {
                    exec: p.hGraphExec as usize,
                })
            }
            cbid::GRAPH_EXEC_MEMCPY_SET => {
                let p = &*(params as *const csys::cuGraphExecMemcpyNodeSetParams_params);
                Some(GraphCall::NodeParamsSet {
                    exec: p.hGraphExec as usize,
                })
            }
            cbid::GRAPH_EXEC_MEMSET_SET => {
                let p = &*(params as *const csys::cuGraphExecMemsetNodeSetParams_params);
                Some(GraphCall::NodeParamsSet {
                    exec: p.hGraphExec as usize,
                })
            }
            cbid::GRAPH_EXEC_CHILD_SET => {
                let p = &*(params as *const csys::cuGraphExecChildGraphNodeSetParams_params);
                Some(GraphCall::NodeParamsSet {
                    exec: p.hGraphExec as usize,
                })
            }
            _ => None,
        }
    }
}
