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

/// An executable graph of the application. Its model and kernel nodes change only through
/// `changing` and `replace`, which drop the tally that stood for them (a tally kept after a
/// node became wanted would count that node's launches and never capture it).
#[derive(Debug, Clone)]
pub(super) struct ExecState {
    model: GraphModel,
    kernels: Vec<ExecKernel>,
    pub launches: u64,
    /// Why the parameters in force may differ from the model (an update kreplay does not
    /// follow): its nodes are counted, not captured.
    pub stale: Option<String>,
    /// Argument bytes were kept (the graph may hold a wanted kernel).
    pub keep_args: bool,
    /// What one launch adds to the kernel book while no enabled kernel node is wanted
    /// (`tally_of`), once every node's statistics are known; `None` until then, and again
    /// after the model changes (a node set, enabled or disabled, an update).
    tally: Option<Tally>,
}

impl ExecState {
    pub fn new(model: GraphModel, kernels: Vec<ExecKernel>, keep_args: bool) -> ExecState {
        ExecState {
            model,
            kernels,
            launches: 0,
            stale: None,
            keep_args,
            tally: None,
        }
    }

    pub fn model(&self) -> &GraphModel {
        &self.model
    }

    pub fn kernels(&self) -> &[ExecKernel] {
        &self.kernels
    }

    /// The model and its kernel nodes, to change in place; the tally is dropped.
    pub fn changing(&mut self) -> (&mut GraphModel, &mut Vec<ExecKernel>) {
        self.tally = None;
        (&mut self.model, &mut self.kernels)
    }

    /// The model and its kernel nodes replaced (an update); the tally is dropped.
    pub fn replace(&mut self, model: GraphModel, kernels: Vec<ExecKernel>) {
        self.tally = None;
        (self.model, self.kernels) = (model, kernels);
    }

    /// Counts one launch in `book` (`count_launch`): the executions to capture, (index in
    /// `kernels()`, launch index, match index).
    pub fn count(&mut self, book: &mut KernelBook, config: &Config) -> Vec<(usize, u64, u64)> {
        count_launch(
            book,
            config,
            &self.model,
            &mut self.kernels,
            &mut self.tally,
        )
    }

    /// The demangled name of kernel node `node` (empty when it is not one).
    pub fn node_name(&self, node: usize) -> String {
        self.kernels
            .iter()
            .find(|k| k.node == node)
            .map(|k| k.demangled.clone())
            .unwrap_or_default()
    }
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
    use super::super::kernels::tests::{book_counts, config, execution};
    use super::*;
    use crate::graph::{KernelNode, ModelNode};
    use kreplay_cuda::graph::NodeKind;
    use kreplay_protocol::config::env;

    fn kernel(name: &str, enabled: bool) -> ModelNode {
        ModelNode {
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
        }
    }

    /// Kernel nodes a, b (disabled), a and `last`, an empty node among them.
    fn graph(last: &str) -> GraphModel {
        let empty = ModelNode {
            kind: NodeKind::Empty,
            deps: Vec::new(),
            handle: 0,
            enabled: true,
            op: NodeOp::None,
        };
        GraphModel {
            nodes: vec![
                kernel("a", true),
                empty,
                kernel("b", false),
                kernel("a", true),
                kernel(last, true),
            ],
        }
    }

    /// `graph`'s kernel nodes, those named "wanted" wanted.
    fn kernels_of(model: &GraphModel) -> Vec<ExecKernel> {
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
    }

    // Catches: a tally kept after the model changed through `changing` (a node set or
    // enabled) or `replace` (an update): the node that became wanted would be counted by the
    // old tally and never captured.
    #[test]
    fn a_changed_graph_counts_its_nodes_again_and_captures_a_node_now_wanted() {
        let c = config(&[
            (env::MODE, "record"),
            (env::KERNEL, "wanted"),
            (env::COUNT, "3"),
        ]);
        let model = graph("c");
        let mut book = KernelBook::default();
        let mut state = ExecState::new(model.clone(), kernels_of(&model), true);
        for _ in 0..3 {
            assert!(state.count(&mut book, &c).is_empty(), "nothing wanted yet");
        }
        assert!(state.tally.is_some(), "a tally stands for the graph by now");
        // The last node's kernel set to the wanted one (as `on_kernel_set` does).
        let (model, kernels) = state.changing();
        model.nodes[4] = kernel("wanted", true);
        kernels[3].wanted = true;
        assert!(state.tally.is_none());
        let captured = state.count(&mut book, &c);
        assert_eq!(captured.len(), 1, "the node now wanted is captured");
        assert_eq!(captured[0].0, 3);
        assert_eq!(state.node_name(0), "a");
        assert_eq!(state.node_name(1), "", "not a kernel node");
        // Replaced by an update to a graph with nothing wanted: counted node by node again,
        // then tallied.
        let plain = graph("d");
        state.replace(plain.clone(), kernels_of(&plain));
        assert!(state.tally.is_none());
        assert!(state.count(&mut book, &c).is_empty());
        assert!(state.tally.is_some());
    }

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
                    book_counts(&tallied),
                    book_counts(&one_by_one),
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
