//! The recorder's model of an executable graph of the application: its nodes, its kernel
//! nodes as counted, and whether its parameters still match the model.

use kreplay_protocol::config::Config;

use super::kernels::{Execution, KernelBook, Tally};
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

/// Counts one launch of `model`, whose kernel nodes are `kernels`, in `book`: by its `tally`
/// when it has one, else node by node, each enabled kernel node an execution (and the tally
/// made for the next launch when it can stand for that). Returns the executions to capture:
/// (index in `kernels`, launch index, match index).
pub(super) fn count_launch(
    book: &mut KernelBook,
    config: &Config,
    model: &GraphModel,
    kernels: &mut [ExecKernel],
    tally: &mut Option<Tally>,
) -> Vec<(usize, u64, u64)> {
    if let Some(t) = tally.as_ref() {
        book.count_tally(t);
        return Vec::new();
    }
    let mut captured = Vec::new();
    for (at, k) in kernels.iter_mut().enumerate() {
        let Some(node) = model.nodes.get(k.node) else {
            continue;
        };
        let NodeOp::Kernel(kn) = &node.op else {
            continue;
        };
        if !node.enabled {
            continue;
        }
        let e = Execution {
            name: &kn.name,
            demangled: &k.demangled,
            wanted: k.wanted,
            grid: kn.grid,
            block: kn.block,
            in_graph: true,
            arg_bytes: super::corpus::layout_bytes(&kn.layout),
        };
        if let Some((launch_index, index)) = book.count_kept(config, &e, &mut k.stat) {
            captured.push((at, launch_index, index));
        }
    }
    *tally = tally_of(model, kernels);
    captured
}

#[cfg(test)]
mod tests {
    use super::super::kernels::tests::{config, execution};
    use super::*;
    use crate::graph::{KernelNode, ModelNode};
    use kreplay_cuda::graph::NodeKind;
    use kreplay_protocol::config::env;

    // Catches: a graph launch counted by its tally differing from counting its nodes one by
    // one (launch and match indices of the launches after it, per-kernel and graph counts, a
    // disabled node counted), or a tally standing in while a node is wanted (its capture
    // then lost).
    #[test]
    fn a_graph_launch_counted_by_its_tally_equals_counting_its_nodes() {
        let c = config(&[
            (env::MODE, "record"),
            (env::KERNEL, "wanted"),
            (env::COUNT, "3"),
        ]);
        let kernel = |name: &str, enabled: bool| ModelNode {
            kind: NodeKind::Kernel,
            deps: Vec::new(),
            handle: 0,
            enabled,
            op: NodeOp::Kernel(KernelNode {
                name: name.into(),
                function: 0,
                grid: [1, 1, 1],
                block: [32, 1, 1],
                shared_bytes: 0,
                layout: Vec::new(),
                args: None,
                attributes: Vec::new(),
            }),
        };
        let empty = ModelNode {
            kind: NodeKind::Empty,
            deps: Vec::new(),
            handle: 0,
            enabled: true,
            op: NodeOp::None,
        };
        let graph = |last: &str| GraphModel {
            nodes: vec![
                kernel("a", true),
                empty.clone(),
                kernel("b", false),
                kernel("a", true),
                kernel(last, true),
            ],
        };
        let kernels_of = |model: &GraphModel| -> Vec<ExecKernel> {
            [0, 2, 3, 4]
                .into_iter()
                .map(|node| {
                    let NodeOp::Kernel(kn) = &model.nodes[node].op else {
                        unreachable!("a kernel node")
                    };
                    ExecKernel {
                        node,
                        demangled: kn.name.clone(),
                        wanted: kn.name == "wanted",
                        stat: None,
                    }
                })
                .collect()
        };
        let counts = |b: &KernelBook| {
            let c = &b.counts;
            let stats: Vec<_> = c
                .stats
                .iter()
                .map(|s| (s.name.clone(), s.count, s.in_graphs, s.first_launch))
                .collect();
            (c.launches, c.matches, stats)
        };
        for last in ["c", "wanted"] {
            let model = graph(last);
            let (mut one_by_one, mut tallied) = (KernelBook::default(), KernelBook::default());
            let mut k1 = kernels_of(&model);
            let mut k2 = kernels_of(&model);
            let mut tally = None;
            for launch in 0..5 {
                // An ordinary launch of a wanted kernel between graph launches: captured at
                // the same launch and match indices both ways.
                let plain = execution("wanted", true);
                let captured = one_by_one.count(&c, &plain);
                assert_eq!(
                    tallied.count(&c, &plain),
                    captured,
                    "{last}: launch {launch}"
                );
                assert_eq!(
                    count_launch(&mut tallied, &c, &model, &mut k2, &mut tally),
                    count_launch(&mut one_by_one, &c, &model, &mut k1, &mut None),
                    "{last}: graph launch {launch}"
                );
                assert_eq!(
                    counts(&tallied),
                    counts(&one_by_one),
                    "{last}: launch {launch}"
                );
            }
            match last {
                "c" => {
                    let t = tally.expect("a tally once the statistics are known");
                    assert_eq!(t.executions, 3, "the disabled node is not an execution");
                }
                _ => {
                    assert!(tally.is_none(), "a wanted node: no tally");
                    assert!(
                        one_by_one.counts.matches >= 3,
                        "the wanted node was counted"
                    );
                }
            }
        }
        let model = graph("c");
        assert_eq!(
            tally_of(&model, &kernels_of(&model)),
            None,
            "statistics not known yet"
        );
    }
}
