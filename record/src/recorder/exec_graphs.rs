//! The recorder's model of an executable graph of the application: its nodes, its kernel
//! nodes as counted, and whether its parameters still match the model.

use crate::graph::{GraphModel, NodeOp};

/// A kernel node as counted at each launch.
#[derive(Debug, Clone)]
pub(super) struct ExecKernel {
    /// Index of the node in the model (its name and geometry live there).
    pub node: usize,
    pub demangled: String,
    pub wanted: bool,
    /// Its kernel's statistics in the kernel book, once counted (`KernelBook::count_kept`).
    pub stat: Option<usize>,
}

/// An executable graph of the application.
#[derive(Debug, Clone)]
pub(super) struct ExecState {
    pub model: GraphModel,
    pub kernels: Vec<ExecKernel>,
    pub launches: u64,
    /// Why the parameters in force may differ from the model (an update kreplay does not
    /// follow): its nodes are counted, not captured.
    pub stale: Option<String>,
    /// Argument bytes were kept (the graph may hold a wanted kernel).
    pub keep_args: bool,
    /// What one launch adds to the kernel book while no enabled kernel node is wanted
    /// (`tally_of`), once every node's statistics are known; `None` until then, and again
    /// after the model changes (a node set, enabled or disabled, an update).
    pub tally: Option<Tally>,
}

/// One launch's counts, folded: the executions (kernel nodes enabled), and per statistics
/// index how many of them are its kernel's. Counting a 20-node graph's launch node by node
/// was most of what recording it cost, for counts a sum gives (a node not wanted is never
/// captured, whatever the launch index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tally {
    pub executions: u64,
    pub per_stat: Vec<(usize, u64)>,
}

/// The tally of one launch of `model` counted as `kernels`, when it can stand for counting
/// node by node: no enabled kernel node wanted, and each one's statistics index known.
pub(super) fn tally_of(model: &GraphModel, kernels: &[ExecKernel]) -> Option<Tally> {
    let mut per_stat: Vec<(usize, u64)> = Vec::new();
    let mut executions = 0;
    for k in kernels {
        let node = model.nodes.get(k.node)?;
        if !matches!(node.op, NodeOp::Kernel(_)) || !node.enabled {
            continue;
        }
        if k.wanted {
            return None;
        }
        let at = k.stat?;
        executions += 1;
        match per_stat.iter_mut().find(|(i, _)| *i == at) {
            Some((_, n)) => *n += 1,
            None => per_stat.push((at, 1)),
        }
    }
    Some(Tally {
        executions,
        per_stat,
    })
}
