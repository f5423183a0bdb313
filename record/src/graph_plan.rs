//! A whole graph launch as a range capture (`record -k K --graph-launch`): which nodes the
//! recorder runs itself, one at a time on the launch's stream, and what step each one is.
//! The model's order is topological (`GraphModel::flatten`), so the steps are a valid
//! linearisation of the graph's edges: the edges themselves are not kept, and independent
//! nodes, which the graph may run concurrently, run one after the other on replay. Every node
//! kind that cannot be such a step refuses the capture here, before anything runs. Pure.

use kreplay_cuda::graph::{memory_type, CopyShape, CopySide, MemcpyParams, MemsetParams, NodeKind};
use kreplay_format::Op;

use crate::graph::{uncapturable, GraphModel, KernelNode, NodeOp};
use crate::range_calls::host_bytes_problem;

/// A 1D copy of a memcpy node, its sides told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinearCopy {
    DeviceToDevice {
        dst: u64,
        src: u64,
        bytes: u64,
    },
    /// From the application's host memory at `host`.
    HostToDevice {
        dst: u64,
        host: u64,
        bytes: u64,
    },
    /// Into the application's host memory at `host` (the recorder copies into its own
    /// buffer instead, so the application's host memory is never written).
    DeviceToHost {
        host: u64,
        src: u64,
        bytes: u64,
    },
}

impl LinearCopy {
    /// The step, host bytes still to be filled in: a host-to-device copy's `host` when it is
    /// taken (before it runs), a device-to-host copy's `received` after it ran.
    pub fn op(self) -> Op {
        match self {
            LinearCopy::DeviceToDevice { dst, src, bytes } => {
                Op::CopyDeviceToDevice { dst, src, bytes }
            }
            LinearCopy::HostToDevice { dst, .. } => Op::CopyHostToDevice {
                dst,
                host: Vec::new(),
            },
            LinearCopy::DeviceToHost { src, .. } => Op::CopyDeviceToHost {
                src,
                received: Vec::new(),
            },
        }
    }
}

/// What the recorder does for one node of the launch.
#[derive(Debug, Clone)]
pub enum NodeRun<'a> {
    /// A kernel step: the node launched with its own configuration and arguments.
    Kernel { node: usize, kernel: &'a KernelNode },
    /// A fill step (`Op::Fill`): the node's memset run on the launch's stream.
    Fill {
        node: usize,
        params: &'a MemsetParams,
        op: Op,
    },
    /// A copy step (the node's own parameters run it, but for a device-to-host copy).
    Copy {
        node: usize,
        params: &'a MemcpyParams,
        copy: LinearCopy,
    },
}

impl NodeRun<'_> {
    /// The node's index in the model.
    pub fn node(&self) -> usize {
        match self {
            NodeRun::Kernel { node, .. }
            | NodeRun::Fill { node, .. }
            | NodeRun::Copy { node, .. } => *node,
        }
    }
}

/// What the recorder runs for the launch, in the model's (topological) order: every enabled
/// node but empty nodes, the joins of flattened child graphs and empty copies and fills; or
/// why the launch cannot be captured, naming the first node that cannot be a step.
/// `is_device` says whether a unified address is device memory.
pub fn plan_launch(
    model: &GraphModel,
    is_device: impl Fn(u64) -> bool,
) -> Result<Vec<NodeRun<'_>>, String> {
    if let Some(why) = uncapturable(model) {
        return Err(why);
    }
    let mut runs = Vec::new();
    for (i, n) in model.nodes.iter().enumerate() {
        if !n.enabled {
            continue;
        }
        let refuse = |what: String| {
            Err(format!(
                "node {i} of the graph is {what}; --graph-launch captures kernel, memset and 1D memcpy nodes"
            ))
        };
        match (&n.op, n.kind) {
            (NodeOp::Kernel(k), _) if k.args.is_none() => {
                return refuse(format!(
                    "kernel {} whose arguments were not recorded",
                    k.name
                ))
            }
            (NodeOp::Kernel(k), _) => runs.push(NodeRun::Kernel { node: i, kernel: k }),
            (NodeOp::Memset(p), _) => match fill_of(p) {
                Ok(Some(op)) => runs.push(NodeRun::Fill {
                    node: i,
                    params: p,
                    op,
                }),
                Ok(None) => {}
                Err(what) => return refuse(what),
            },
            (NodeOp::Memcpy(p), _) => match linear_copy(&p.shape(), &is_device) {
                Ok(Some(copy)) => runs.push(NodeRun::Copy {
                    node: i,
                    params: p,
                    copy,
                }),
                Ok(None) => {}
                Err(what) => return refuse(what),
            },
            (NodeOp::None, NodeKind::Empty | NodeKind::Graph) => {}
            (NodeOp::None, kind) => return refuse(format!("a {} node", kind.name())),
        }
    }
    if !runs.iter().any(|r| matches!(r, NodeRun::Kernel { .. })) {
        return Err("the graph launch runs no kernel node".into());
    }
    Ok(runs)
}

/// The fill step of a memset node; `None` when it sets nothing; why not, for a 2D memset or
/// an element size other than 1, 2 or 4 bytes.
pub fn fill_of(p: &MemsetParams) -> Result<Option<Op>, String> {
    if p.height > 1 {
        return Err(format!("a 2D memset ({} rows)", p.height));
    }
    let element_bytes = match p.element_size {
        1 => 1u8,
        2 => 2,
        4 => 4,
        other => return Err(format!("a memset of {other}-byte elements")),
    };
    if p.width == 0 || p.height == 0 {
        return Ok(None);
    }
    Ok(Some(Op::Fill {
        dst: p.dst,
        value: p.value,
        element_bytes,
        count: p.width,
    }))
}

/// Where one side of a copy is, and whether in device memory; why not, for a CUDA array.
fn side(s: &CopySide, is_device: &impl Fn(u64) -> bool) -> Result<(u64, bool), String> {
    match s.memory_type {
        memory_type::DEVICE => Ok((s.device.wrapping_add(s.x), true)),
        memory_type::HOST => Ok((s.host.wrapping_add(s.x), false)),
        memory_type::UNIFIED => {
            let at = s.device.wrapping_add(s.x);
            Ok((at, is_device(at)))
        }
        memory_type::ARRAY => Err("a memcpy to or from a CUDA array".into()),
        other => Err(format!("a memcpy of memory type {other}")),
    }
}

/// The 1D copy of a memcpy node; `None` when it copies nothing or only host memory; why not,
/// for a 2D/3D copy, a CUDA array side or more host bytes than a step holds.
pub fn linear_copy(
    c: &CopyShape,
    is_device: &impl Fn(u64) -> bool,
) -> Result<Option<LinearCopy>, String> {
    let offsets = [c.src.y, c.src.z, c.dst.y, c.dst.z, c.src.lod, c.dst.lod];
    if c.height > 1 || c.depth > 1 || offsets.iter().any(|&o| o != 0) {
        return Err(format!(
            "a 2D/3D memcpy ({} bytes x {} rows x {} slices)",
            c.width, c.height, c.depth
        ));
    }
    let (src, src_device) = side(&c.src, is_device)?;
    let (dst, dst_device) = side(&c.dst, is_device)?;
    let bytes = c.width;
    if bytes == 0 || c.height == 0 || c.depth == 0 {
        return Ok(None);
    }
    if src_device != dst_device {
        if let Some(why) = host_bytes_problem("a memcpy node", bytes) {
            return Err(why);
        }
    }
    Ok(match (dst_device, src_device) {
        (true, true) => Some(LinearCopy::DeviceToDevice { dst, src, bytes }),
        (true, false) => Some(LinearCopy::HostToDevice {
            dst,
            host: src,
            bytes,
        }),
        (false, true) => Some(LinearCopy::DeviceToHost {
            host: dst,
            src,
            bytes,
        }),
        (false, false) => None,
    })
}

/// `RangeInfo::origin` of a graph launch captured whole: the kernel's short name, the match
/// (`--nth`) and the launch of its executable graph (1-based, counted by the recorder).
pub fn graph_launch_origin(short_kernel: &str, nth: u64, graph_launch: u64) -> String {
    format!("graph-launch {short_kernel} #{nth} (graph launch {graph_launch})")
}

/// The error line for a `--graph-launch` match outside any graph launch (a launch on a
/// stream, not a graph's node): nothing is captured of it, and counting goes on.
pub fn not_in_graph(short_kernel: &str, nth: u64, launch_index: u64) -> String {
    format!(
        "capture of {short_kernel} (match {nth}, launch {launch_index}) not taken: that match was not inside a graph launch (--graph-launch needs a kernel that runs in a CUDA graph); the application continues"
    )
}

/// The process launch index of the first kernel node of the launch, from the target's: a
/// launch's enabled kernel nodes are counted one after the other, in the model's order, under
/// one lock (`count_graph_launch`), so their indices are consecutive.
pub fn first_kernel_launch(target_launch: u64, target_position: usize) -> u64 {
    target_launch.saturating_sub(target_position as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::RawNode;

    fn kernel(name: &str, args: bool) -> NodeOp {
        NodeOp::Kernel(KernelNode {
            name: name.into(),
            function: 1,
            grid: [1; 3],
            block: [1; 3],
            shared_bytes: 0,
            layout: vec![],
            args: args.then(Vec::new),
            attributes: vec![],
        })
    }

    fn memset(width: u64, height: u64, element_size: u32) -> MemsetParams {
        MemsetParams {
            dst: 0x7000,
            pitch: 0,
            value: 0xab,
            element_size,
            width,
            height,
        }
    }

    fn raw(kind: NodeKind, deps: &[usize], op: NodeOp) -> RawNode {
        RawNode {
            kind,
            deps: deps.to_vec(),
            handle: 0,
            op,
            child: None,
        }
    }

    fn model(nodes: Vec<RawNode>) -> GraphModel {
        GraphModel::flatten(&nodes).expect("no cycle")
    }

    fn device(addr: u64, x: u64) -> CopySide {
        CopySide {
            memory_type: memory_type::DEVICE,
            device: addr,
            x,
            ..Default::default()
        }
    }

    fn host(addr: u64) -> CopySide {
        CopySide {
            memory_type: memory_type::HOST,
            host: addr,
            ..Default::default()
        }
    }

    fn copy(src: CopySide, dst: CopySide, width: u64) -> CopyShape {
        CopyShape {
            src,
            dst,
            width,
            height: 1,
            depth: 1,
        }
    }

    const NOT_DEVICE: fn(u64) -> bool = |_| false;

    #[test]
    fn memset_nodes_become_fills_and_2d_or_odd_ones_are_refused() {
        assert_eq!(
            fill_of(&memset(16, 1, 4)),
            Ok(Some(Op::Fill {
                dst: 0x7000,
                value: 0xab,
                element_bytes: 4,
                count: 16
            }))
        );
        assert_eq!(fill_of(&memset(0, 1, 1)), Ok(None), "sets nothing");
        assert!(fill_of(&memset(16, 4, 1))
            .unwrap_err()
            .contains("2D memset"));
        assert!(fill_of(&memset(16, 1, 8)).unwrap_err().contains("8-byte"));
    }

    #[test]
    fn memcpy_nodes_become_copies_by_their_sides() {
        let d2d = copy(device(0x1000, 8), device(0x2000, 0), 64);
        assert_eq!(
            linear_copy(&d2d, &NOT_DEVICE),
            Ok(Some(LinearCopy::DeviceToDevice {
                dst: 0x2000,
                src: 0x1008,
                bytes: 64
            })),
            "the row offset is part of the address"
        );
        let h2d = copy(host(0x55), device(0x2000, 0), 4);
        assert_eq!(
            linear_copy(&h2d, &NOT_DEVICE).unwrap().map(LinearCopy::op),
            Some(Op::CopyHostToDevice {
                dst: 0x2000,
                host: Vec::new()
            })
        );
        let d2h = copy(device(0x1000, 0), host(0x66), 4);
        assert_eq!(
            linear_copy(&d2h, &NOT_DEVICE),
            Ok(Some(LinearCopy::DeviceToHost {
                host: 0x66,
                src: 0x1000,
                bytes: 4
            }))
        );
        // A unified side is device memory when the driver says so.
        let unified = CopySide {
            memory_type: memory_type::UNIFIED,
            device: 0x9000,
            ..Default::default()
        };
        let u = copy(unified, device(0x2000, 0), 4);
        assert!(matches!(
            linear_copy(&u, &|a| a == 0x9000),
            Ok(Some(LinearCopy::DeviceToDevice { .. }))
        ));
        assert!(matches!(
            linear_copy(&u, &NOT_DEVICE),
            Ok(Some(LinearCopy::HostToDevice { host: 0x9000, .. }))
        ));
        assert_eq!(
            linear_copy(&copy(host(1), host(2), 4), &NOT_DEVICE),
            Ok(None)
        );
        assert_eq!(
            linear_copy(&copy(device(1, 0), device(2, 0), 0), &NOT_DEVICE),
            Ok(None)
        );
    }

    #[test]
    fn copies_that_are_not_one_row_of_plain_memory_are_refused() {
        let mut rows = copy(device(0x1000, 0), device(0x2000, 0), 64);
        rows.height = 4;
        assert!(linear_copy(&rows, &NOT_DEVICE)
            .unwrap_err()
            .contains("2D/3D memcpy"));
        let mut offset = copy(device(0x1000, 0), device(0x2000, 0), 64);
        offset.dst.y = 1;
        assert!(linear_copy(&offset, &NOT_DEVICE).is_err());
        let array = CopySide {
            memory_type: memory_type::ARRAY,
            ..Default::default()
        };
        assert!(linear_copy(&copy(array, device(1, 0), 4), &NOT_DEVICE)
            .unwrap_err()
            .contains("CUDA array"));
        let big = copy(
            host(1),
            device(2, 0),
            kreplay_format::MAX_STEP_HOST_BYTES + 1,
        );
        assert!(linear_copy(&big, &NOT_DEVICE).is_err());
    }

    #[test]
    fn a_launch_runs_every_enabled_node_in_order_and_skips_joins_and_empties() {
        // a -> [child: x] -> memset, and b independent; an empty node; a disabled kernel.
        let child = vec![raw(NodeKind::Kernel, &[], kernel("x", true))];
        let mut m = model(vec![
            raw(NodeKind::Kernel, &[], kernel("a", true)),
            RawNode {
                kind: NodeKind::Graph,
                deps: vec![0],
                handle: 0,
                op: NodeOp::None,
                child: Some(child),
            },
            raw(NodeKind::Memset, &[1], NodeOp::Memset(memset(4, 1, 1))),
            raw(NodeKind::Empty, &[], NodeOp::None),
            raw(NodeKind::Kernel, &[], kernel("b", true)),
            raw(NodeKind::Kernel, &[], kernel("off", true)),
        ]);
        let off = m.kernels()[3];
        m.nodes[off].enabled = false;
        let runs = plan_launch(&m, NOT_DEVICE).expect("capturable");
        let what: Vec<String> = runs
            .iter()
            .map(|r| match r {
                NodeRun::Kernel { kernel, .. } => kernel.name.clone(),
                NodeRun::Fill { .. } => "fill".into(),
                NodeRun::Copy { .. } => "copy".into(),
            })
            .collect();
        assert_eq!(what, ["a", "x", "fill", "b"]);
        // Each step comes after every node it waits for.
        let order: Vec<usize> = runs.iter().map(NodeRun::node).collect();
        for (at, &i) in order.iter().enumerate() {
            for a in m.ancestors(i) {
                if let Some(p) = order.iter().position(|&o| o == a) {
                    assert!(p < at, "node {i} before its ancestor {a}");
                }
            }
        }
    }

    #[test]
    fn nodes_that_cannot_be_steps_refuse_the_launch_naming_their_kind() {
        for (kind, name) in [
            (NodeKind::Host, "host function"),
            (NodeKind::EventRecord, "event record"),
            (NodeKind::WaitEvent, "event wait"),
            (NodeKind::MemAlloc, "memory allocation"),
            (NodeKind::MemFree, "memory free"),
            (NodeKind::BatchMemOp, "batch memory operation"),
            (NodeKind::SemaphoreSignal, "external semaphore signal"),
        ] {
            let m = model(vec![
                raw(NodeKind::Kernel, &[], kernel("a", true)),
                raw(kind, &[0], NodeOp::None),
            ]);
            let why = plan_launch(&m, NOT_DEVICE).unwrap_err();
            assert!(
                why.contains(&format!("node 1 of the graph is a {name} node")),
                "{why}"
            );
        }
        let m = model(vec![
            raw(NodeKind::Kernel, &[], kernel("set", true)),
            raw(NodeKind::Conditional, &[0], NodeOp::None),
        ]);
        assert!(plan_launch(&m, NOT_DEVICE)
            .unwrap_err()
            .contains("conditional"));
        let m = model(vec![raw(NodeKind::Kernel, &[], kernel("k", false))]);
        assert!(plan_launch(&m, NOT_DEVICE)
            .unwrap_err()
            .contains("arguments were not recorded"));
        let m = model(vec![raw(
            NodeKind::Memset,
            &[],
            NodeOp::Memset(memset(4, 2, 1)),
        )]);
        assert!(plan_launch(&m, NOT_DEVICE)
            .unwrap_err()
            .contains("2D memset"));
        let m = model(vec![raw(
            NodeKind::Memset,
            &[],
            NodeOp::Memset(memset(4, 1, 1)),
        )]);
        assert!(plan_launch(&m, NOT_DEVICE)
            .unwrap_err()
            .contains("no kernel"));
    }

    #[test]
    fn the_origin_names_kernel_match_and_graph_launch() {
        assert_eq!(
            graph_launch_origin("flash_fwd", 2, 7),
            "graph-launch flash_fwd #2 (graph launch 7)"
        );
        let why = not_in_graph("saxpy", 1, 12);
        assert!(
            why.contains("match 1") && why.contains("not inside a graph launch"),
            "{why}"
        );
        assert!(why.contains("--graph-launch needs a kernel that runs in a CUDA graph"));
        assert_eq!(first_kernel_launch(40, 3), 37);
        assert_eq!(first_kernel_launch(2, 5), 0, "never below zero");
    }
}
