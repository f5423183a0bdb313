//! The driver side of graph support: reading an application graph into a `GraphModel` when it
//! is instantiated, re-running the nodes a target kernel node waits for, and saving and putting
//! back the memory those nodes and the target can write, so the application's own graph launch
//! then runs on exactly the memory it would have found.

use kreplay_cuda::graph::{
    memcpy_async, memset_async, CopyDestination, ForeignGraph, ForeignNode, KernelNodeParams,
    NodeKind,
};
use kreplay_cuda::{
    copy_dtod_async, copy_htod, launch, pointer, ForeignFunction, ForeignStream, KernelArgs,
    LaunchConfig, Stream,
};
use kreplay_format::LaunchApi;

use crate::capture::{copy_region, device_copy, lock_staging, Bytes, DeviceSpace, Scratch};
use crate::error::RecordError;
use crate::graph::{GraphModel, KernelNode, NodeOp, RawNode};
use crate::launch::{argument_bytes, LaunchView};
use crate::walk::{walk, Limits, Roots};

/// Child graphs nested deeper than this are not read.
const MAX_DEPTH: u32 = 16;

/// Launch attributes read from kernel nodes: those whose values are plain data (no handles,
/// no pointers): cooperative, synchronization policy, cluster dimension, cluster scheduling,
/// priority, memory sync domain map and domain, shared memory carveout.
const NODE_ATTRIBUTES: [u32; 8] = [2, 3, 4, 5, 8, 9, 10, 14];

/// Reads one kernel node: its name always, its layout, argument bytes and launch attributes
/// when `keep_args` (`node` is absent for parameters passed to an update call: the node's
/// attributes are then kept by the caller).
fn kernel_node(p: &KernelNodeParams, keep_args: bool, node: Option<&ForeignNode>) -> KernelNode {
    // SAFETY: the node's function, read from a live graph in the instantiate callback.
    let f = unsafe { ForeignFunction::from_launch(p.function) };
    let name = f.name().unwrap_or_default();
    let (layout, args) = if keep_args {
        let layout = f.parameter_layout();
        let view = node_view(p, std::ptr::null_mut());
        // SAFETY: kernelParams/extra are the node's own, held by the driver while the graph
        // lives (it does during this callback); the layout is its function's.
        let args = unsafe { argument_bytes(&view, &layout) };
        (layout, args)
    } else {
        (Vec::new(), None)
    };
    KernelNode {
        name,
        function: p.function as usize,
        grid: p.grid,
        block: p.block,
        shared_bytes: p.shared_bytes,
        layout,
        args,
        attributes: match node {
            Some(n) if keep_args => n.kernel_attributes(&NODE_ATTRIBUTES),
            _ => Vec::new(),
        },
    }
}

/// A kernel node's launch as a `LaunchView` (the shape the capture takes).
fn node_view(p: &KernelNodeParams, stream: kreplay_cuda::sys::CUstream) -> LaunchView {
    LaunchView {
        api: LaunchApi::LaunchKernel,
        function: p.function,
        grid: p.grid,
        block: p.block,
        shared_bytes: p.shared_bytes,
        stream,
        kernel_params: p.kernel_params,
        extra: p.extra,
        attributes: Vec::new(),
    }
}

/// The launch of a modelled kernel node on `stream`, for the capture.
pub fn target_view(k: &KernelNode, stream: kreplay_cuda::sys::CUstream) -> LaunchView {
    let cooperative = k
        .attributes
        .iter()
        .any(|(id, v)| *id == kreplay_cuda::launch::attr::COOPERATIVE && v[..4] != [0; 4]);
    LaunchView {
        api: if cooperative {
            LaunchApi::LaunchCooperativeKernel
        } else if k.attributes.is_empty() {
            LaunchApi::LaunchKernel
        } else {
            LaunchApi::LaunchKernelEx
        },
        function: k.function as kreplay_cuda::sys::CUfunction,
        grid: k.grid,
        block: k.block,
        shared_bytes: k.shared_bytes,
        stream,
        kernel_params: std::ptr::null_mut(),
        extra: std::ptr::null_mut(),
        attributes: k.attributes.clone(),
    }
}

/// The launch configuration of a modelled kernel node.
pub fn node_config(k: &KernelNode) -> Result<LaunchConfig, RecordError> {
    let mut cfg = LaunchConfig::new(k.grid, k.block, k.shared_bytes);
    for (id, v) in &k.attributes {
        cfg.attribute(*id, v)
            .map_err(RecordError::cuda("setting a graph node's launch attribute"))?;
    }
    Ok(cfg)
}

/// Re-reads a kernel node's parameters from a set-params call (attributes are not among them).
pub fn updated_kernel(p: &KernelNodeParams, keep_args: bool) -> KernelNode {
    kernel_node(p, keep_args, None)
}

fn read_level(g: ForeignGraph, keep_args: bool, depth: u32) -> Result<Vec<RawNode>, String> {
    if depth > MAX_DEPTH {
        return Err(format!("child graphs nested more than {MAX_DEPTH} deep"));
    }
    let e = |e: kreplay_cuda::CudaError| e.to_string();
    let nodes = g.nodes().map_err(e)?;
    let mut out = Vec::with_capacity(nodes.len());
    for n in &nodes {
        let kind = n.kind().map_err(e)?;
        let deps = n
            .dependencies()
            .map_err(e)?
            .iter()
            .map(|d| {
                nodes
                    .iter()
                    .position(|x| x == d)
                    .ok_or("a dependency outside the graph")
            })
            .collect::<Result<Vec<usize>, _>>()?;
        let (op, child) = match kind {
            NodeKind::Kernel => (
                NodeOp::Kernel(kernel_node(
                    &n.kernel_params().map_err(e)?,
                    keep_args,
                    Some(n),
                )),
                None,
            ),
            NodeKind::Memset => (NodeOp::Memset(n.memset_params().map_err(e)?), None),
            NodeKind::Memcpy => (NodeOp::Memcpy(n.memcpy_params().map_err(e)?), None),
            NodeKind::Graph => (
                NodeOp::None,
                Some(read_level(
                    n.child_graph().map_err(e)?,
                    keep_args,
                    depth + 1,
                )?),
            ),
            _ => (NodeOp::None, None),
        };
        out.push(RawNode {
            kind,
            deps,
            handle: n.id(),
            op,
            child,
        });
    }
    Ok(out)
}

/// Reads an application graph (and its child graphs).
pub fn read_graph(g: ForeignGraph, keep_args: bool) -> Result<GraphModel, String> {
    let level = read_level(g, keep_args, 0)?;
    GraphModel::flatten(&level).ok_or_else(|| "the graph has a cycle".to_string())
}

/// Runs nodes of a model on `stream`, in the order given.
pub fn run_nodes(
    model: &GraphModel,
    nodes: &[usize],
    stream: &ForeignStream,
) -> Result<(), RecordError> {
    let e = RecordError::cuda("re-running the graph nodes before the target");
    for &i in nodes {
        let n = &model.nodes[i];
        if !n.enabled {
            continue;
        }
        match &n.op {
            NodeOp::Kernel(k) => {
                let Some(args) = &k.args else {
                    return Err(RecordError::GraphNode(format!(
                        "kernel node {} has no recorded arguments",
                        k.name
                    )));
                };
                // SAFETY: the function of a node of a live executable graph.
                let f = unsafe {
                    ForeignFunction::from_launch(k.function as kreplay_cuda::sys::CUfunction)
                };
                let mut a =
                    KernelArgs::new(args.clone(), &k.layout).map_err(RecordError::GraphNode)?;
                // SAFETY: the application's kernel node, run with its own arguments where its
                // graph would run it (an ancestor of the node being captured).
                unsafe { launch(&f, &node_config(k)?, &mut a, stream) }.map_err(e)?;
            }
            // SAFETY: the application's own node's parameters, read from the live graph and
            // run where its graph would run them.
            NodeOp::Memset(p) => unsafe { memset_async(p, stream) }.map_err(e)?,
            // SAFETY: as for memsets.
            NodeOp::Memcpy(p) => unsafe { memcpy_async(p, stream) }.map_err(e)?,
            NodeOp::None => {}
        }
    }
    Ok(())
}

/// The error of a failed put-back: unlike any other failure of a graph capture, the
/// application's own launch may then compute from memory the recorder's runs changed.
pub fn put_back_failed(e: RecordError) -> RecordError {
    RecordError::GraphNode(format!(
        "the memory the recorder's runs of the graph's nodes changed could not be put back ({e}): the application's graph launch may compute from changed memory"
    ))
}

/// Memory saved before the recorder re-runs nodes, put back afterwards.
pub struct Saved {
    copies: Vec<(u64, Bytes)>,
}

/// Every allocation the nodes can write: what their kernels reach (the capture's walk), and
/// the allocations memset and memcpy nodes write into.
pub fn writable_ranges(
    model: &GraphModel,
    nodes: &[usize],
    target_globals: &[(String, u64, u64)],
    target: usize,
) -> Result<Vec<(u64, u64)>, RecordError> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut staging = lock_staging();
    let mut add = |base: u64, size: u64| {
        if !out.iter().any(|&(b, s)| b == base && s >= size) {
            out.push((base, size));
        }
    };
    for &i in nodes.iter().chain(std::iter::once(&target)) {
        match &model.nodes[i].op {
            NodeOp::Kernel(k) => {
                let Some(args) = &k.args else { continue };
                let found = walk(
                    &Roots {
                        args,
                        layout: &k.layout,
                        globals: if i == target { target_globals } else { &[] },
                        allocations: &[],
                        addresses: &[],
                        heap: None,
                    },
                    &mut DeviceSpace::new(&mut staging),
                    &Limits::default(),
                )?;
                for r in found.regions {
                    add(r.base, r.size);
                }
            }
            NodeOp::Memset(p) => {
                if let Some((b, s)) = pointer::allocation_range(p.dst, 64 << 30) {
                    add(b, s);
                }
            }
            NodeOp::Memcpy(p) => {
                if let CopyDestination::Device(d) = p.destination() {
                    if let Some((b, s)) = pointer::allocation_range(d, 64 << 30) {
                        add(b, s);
                    }
                }
            }
            NodeOp::None => {}
        }
    }
    Ok(out)
}

impl Saved {
    /// Copies the ranges aside (device scratch when memory allows, host otherwise).
    pub fn take(ranges: &[(u64, u64)]) -> Result<Saved, RecordError> {
        let stream = Stream::new().map_err(RecordError::cuda("creating the save stream"))?;
        let mut copies = Vec::with_capacity(ranges.len());
        for &(base, size) in ranges {
            let b = match device_copy(base, size, &stream) {
                Some(b) => Bytes::Device(Scratch::own(b)),
                None => Bytes::Host(copy_region(base, size)?),
            };
            copies.push((base, b));
        }
        stream.synchronize().map_err(RecordError::cuda(
            "saving memory before re-running graph nodes",
        ))?;
        Ok(Saved { copies })
    }

    /// Puts every saved range back (synchronously).
    pub fn put_back(self) -> Result<(), RecordError> {
        let e = RecordError::cuda("putting memory back after re-running graph nodes");
        let stream = Stream::new().map_err(e)?;
        for (base, b) in &self.copies {
            match b {
                Bytes::Device(buf) => {
                    // SAFETY: the range's own bytes, set aside before the ancestors ran, put
                    // back.
                    unsafe { copy_dtod_async(*base, buf.ptr(), buf.len(), &stream) }
                        .map_err(RecordError::cuda("putting memory back"))?
                }
                Bytes::Host(v) => {
                    // SAFETY: as above, from a host copy.
                    unsafe { copy_htod(*base, v) }
                        .map_err(RecordError::cuda("putting memory back"))?
                }
            }
        }
        stream.synchronize().map_err(RecordError::cuda(
            "putting memory back after re-running graph nodes",
        ))?;
        // A synchronous copy from pageable memory returns once its bytes are staged, its DMA
        // maybe still running on the legacy stream, which the application's own stream need
        // not follow: the whole context is waited for before its launch goes on.
        if self.copies.iter().any(|(_, b)| matches!(b, Bytes::Host(_))) {
            kreplay_cuda::ctx_synchronize().map_err(RecordError::cuda(
                "putting memory back after re-running graph nodes",
            ))?;
        }
        Ok(())
    }
}
