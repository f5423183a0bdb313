//! A CUDA graph as the recorder models it: every node of an executable graph, child graphs
//! flattened in, in an order where each node comes after the nodes it depends on, with the
//! parameters in force (as instantiated, then as updated). Pure: built by `graph_track` from
//! the driver, tested here on fakes.

use kreplay_cuda::graph::{MemcpyParams, MemsetParams, NodeKind};

/// A kernel node's launch, with its argument bytes when the recorder kept them.
#[derive(Debug, Clone)]
pub struct KernelNode {
    /// Mangled name.
    pub name: String,
    /// The driver's function handle, as a number (used only while the graph is live).
    pub function: usize,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    /// (offset, size) of each parameter.
    pub layout: Vec<(u32, u32)>,
    /// Argument bytes (kept only for graphs that may hold a wanted kernel).
    pub args: Option<Vec<u8>>,
    /// Launch attributes set on the node (cluster dimensions, cooperative, priority, ...):
    /// (id, 64 value bytes).
    pub attributes: Vec<(u32, [u8; 64])>,
}

/// What running a node means.
#[derive(Debug, Clone)]
pub enum NodeOp {
    Kernel(KernelNode),
    Memset(MemsetParams),
    Memcpy(MemcpyParams),
    /// Nothing to run (empty nodes, the end of a flattened child graph) or not modelled.
    None,
}

#[derive(Debug, Clone)]
pub struct ModelNode {
    pub kind: NodeKind,
    /// Indices of the nodes it waits for (all earlier in the order).
    pub deps: Vec<usize>,
    /// The node's handle in the graph the executable graph was instantiated from, for
    /// top-level nodes (0 for nodes inside child graphs): what updates name.
    pub handle: usize,
    pub enabled: bool,
    pub op: NodeOp,
}

/// An executable graph's nodes.
#[derive(Debug, Clone, Default)]
pub struct GraphModel {
    pub nodes: Vec<ModelNode>,
}

/// One graph level, as read from the driver, before flattening.
#[derive(Debug, Clone)]
pub struct RawNode {
    pub kind: NodeKind,
    /// Indices into the same level's list.
    pub deps: Vec<usize>,
    pub handle: usize,
    pub op: NodeOp,
    /// For child-graph nodes: the child's nodes.
    pub child: Option<Vec<RawNode>>,
}

/// Kahn's order of one level (ties in listing order); `None` for a cycle.
pub fn order(nodes: &[RawNode]) -> Option<Vec<usize>> {
    let n = nodes.len();
    let mut indegree: Vec<usize> = nodes.iter().map(|x| x.deps.len()).collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, x) in nodes.iter().enumerate() {
        for &d in &x.deps {
            users.get_mut(d)?.push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut out = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        out.push(i);
        for &u in &users[i] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.insert(u);
            }
        }
    }
    (out.len() == n).then_some(out)
}

impl GraphModel {
    /// Flattens a graph: each child graph's nodes take the child node's place (its roots wait
    /// for what the child node waited for), and a join node (the child node itself) waits for
    /// all of them. `None` when a level has a cycle.
    pub fn flatten(top: &[RawNode]) -> Option<GraphModel> {
        let mut m = GraphModel::default();
        m.add_level(top, &[], true)?;
        Some(m)
    }

    fn add_level(&mut self, level: &[RawNode], entry: &[usize], top: bool) -> Option<Vec<usize>> {
        let mut placed: Vec<usize> = vec![usize::MAX; level.len()];
        for i in order(level)? {
            let x = &level[i];
            let mut deps: Vec<usize> = x.deps.iter().map(|&d| placed[d]).collect();
            if x.deps.is_empty() {
                deps.extend_from_slice(entry);
            }
            let at = match &x.child {
                Some(child) => {
                    let inner = self.add_level(child, &deps, false)?;
                    let mut join = inner;
                    if join.is_empty() {
                        join = deps;
                    }
                    self.push(x.kind, join, if top { x.handle } else { 0 }, NodeOp::None)
                }
                None => self.push(x.kind, deps, if top { x.handle } else { 0 }, x.op.clone()),
            };
            placed[i] = at;
        }
        Some(placed)
    }

    fn push(&mut self, kind: NodeKind, mut deps: Vec<usize>, handle: usize, op: NodeOp) -> usize {
        deps.sort_unstable();
        deps.dedup();
        self.nodes.push(ModelNode {
            kind,
            deps,
            handle,
            enabled: true,
            op,
        });
        self.nodes.len() - 1
    }

    /// Indices of the kernel nodes, in order.
    pub fn kernels(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| matches!(self.nodes[i].op, NodeOp::Kernel(_)))
            .collect()
    }

    /// Every node `target` waits for, directly or not, in order.
    pub fn ancestors(&self, target: usize) -> Vec<usize> {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack: Vec<usize> = self
            .nodes
            .get(target)
            .map_or(Vec::new(), |n| n.deps.clone());
        while let Some(i) = stack.pop() {
            if i < seen.len() && !seen[i] {
                seen[i] = true;
                stack.extend(self.nodes[i].deps.iter().copied());
            }
        }
        (0..self.nodes.len()).filter(|&i| seen[i]).collect()
    }

    /// The top-level node a handle names.
    pub fn by_handle(&self, handle: usize) -> Option<usize> {
        (handle != 0)
            .then(|| self.nodes.iter().position(|n| n.handle == handle))
            .flatten()
    }

    /// Keeps the handles of `old` (the nodes an executable graph was instantiated from) on a
    /// model rebuilt from the graph it was updated from; `false` when the shapes differ.
    pub fn keep_handles_of(&mut self, old: &GraphModel) -> bool {
        if old.nodes.len() != self.nodes.len()
            || old
                .nodes
                .iter()
                .zip(&self.nodes)
                .any(|(a, b)| a.kind != b.kind || a.deps != b.deps)
        {
            return false;
        }
        for (new, old) in self.nodes.iter_mut().zip(&old.nodes) {
            new.handle = old.handle;
            new.enabled = old.enabled;
        }
        true
    }
}

/// Why the nodes before a target cannot be run again by the recorder (and so the target not
/// captured), if they cannot: only kernels, memsets, copies into device memory, empty nodes
/// and child graphs of those are run.
pub fn unreplayable(model: &GraphModel, nodes: &[usize]) -> Option<String> {
    use kreplay_cuda::graph::CopyDestination;
    for &i in nodes {
        let n = &model.nodes[i];
        let ok = match (&n.op, n.kind) {
            (NodeOp::Kernel(k), _) => k.args.is_some(),
            (NodeOp::Memset(_), _) => true,
            (NodeOp::Memcpy(c), _) => matches!(c.destination(), CopyDestination::Device(_)),
            (NodeOp::None, NodeKind::Empty | NodeKind::Graph) => true,
            (NodeOp::None, _) => false,
        };
        if !ok {
            return Some(match &n.op {
                NodeOp::Kernel(k) => {
                    format!("kernel node {} before it has no recorded arguments", k.name)
                }
                NodeOp::Memcpy(_) => {
                    "a memcpy node before it copies to host memory or an array".into()
                }
                _ => format!("a {} node runs before it", n.kind.name()),
            });
        }
    }
    None
}

/// Conditional nodes (if, while, switch) anywhere in a graph, child graphs included.
pub fn conditional_nodes(model: &GraphModel) -> usize {
    model
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Conditional)
        .count()
}

/// Why no node of a graph may be captured, if none may. A conditional node's condition is set
/// by kernels of its graph (`cudaGraphSetConditional` on the graph's handle); such a kernel run
/// by the recorder outside the graph's launch faults the context (measured on the H200:
/// CUDA_ERROR_ILLEGAL_ADDRESS, and the application died at its next graph launch), and which
/// kernels do it cannot be told from their arguments. So a graph holding one is refused
/// before anything runs on the GPU.
pub fn uncapturable(model: &GraphModel) -> Option<String> {
    match conditional_nodes(model) {
        0 => None,
        n => Some(format!(
            "the graph holds {n} conditional node{} (if/while/switch): a kernel of such a graph may set a condition (cudaGraphSetConditional), which faults the context when run outside the graph's launch, so kreplay captures no node of it",
            if n == 1 { "" } else { "s" }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: &str) -> NodeOp {
        NodeOp::Kernel(KernelNode {
            name: name.into(),
            function: 1,
            grid: [1; 3],
            block: [1; 3],
            shared_bytes: 0,
            layout: vec![],
            args: Some(vec![]),
            attributes: vec![],
        })
    }

    fn raw(kind: NodeKind, deps: &[usize], handle: usize, op: NodeOp) -> RawNode {
        RawNode {
            kind,
            deps: deps.to_vec(),
            handle,
            op,
            child: None,
        }
    }

    fn names(m: &GraphModel, idx: &[usize]) -> Vec<String> {
        idx.iter()
            .map(|&i| match &m.nodes[i].op {
                NodeOp::Kernel(k) => k.name.clone(),
                _ => format!("{:?}", m.nodes[i].kind),
            })
            .collect()
    }

    #[test]
    fn nodes_are_ordered_after_what_they_wait_for() {
        // Listed out of order: c waits for b, b for a.
        let g = vec![
            raw(NodeKind::Kernel, &[1], 30, kernel("c")),
            raw(NodeKind::Kernel, &[2], 20, kernel("b")),
            raw(NodeKind::Kernel, &[], 10, kernel("a")),
            raw(NodeKind::Kernel, &[], 40, kernel("d")),
        ];
        let m = GraphModel::flatten(&g).unwrap();
        assert_eq!(names(&m, &m.kernels()), vec!["a", "b", "c", "d"]);
        let c = m.by_handle(30).unwrap();
        assert_eq!(names(&m, &m.ancestors(c)), vec!["a", "b"]);
        assert!(m.ancestors(m.by_handle(40).unwrap()).is_empty());
        assert_eq!(m.by_handle(0), None);
    }

    #[test]
    fn cycles_are_refused() {
        let g = vec![
            raw(NodeKind::Kernel, &[1], 1, kernel("a")),
            raw(NodeKind::Kernel, &[0], 2, kernel("b")),
        ];
        assert!(GraphModel::flatten(&g).is_none());
        let bad = vec![raw(NodeKind::Kernel, &[7], 1, kernel("a"))];
        assert!(GraphModel::flatten(&bad).is_none());
    }

    #[test]
    fn child_graphs_are_flattened_between_their_neighbours() {
        // a -> [child: x -> y] -> z, and w independent.
        let child = vec![
            raw(NodeKind::Kernel, &[], 0, kernel("x")),
            raw(NodeKind::Kernel, &[0], 0, kernel("y")),
        ];
        let g = vec![
            raw(NodeKind::Kernel, &[], 1, kernel("a")),
            RawNode {
                kind: NodeKind::Graph,
                deps: vec![0],
                handle: 2,
                op: NodeOp::None,
                child: Some(child),
            },
            raw(NodeKind::Kernel, &[1], 3, kernel("z")),
            raw(NodeKind::Kernel, &[], 4, kernel("w")),
        ];
        let m = GraphModel::flatten(&g).unwrap();
        assert_eq!(names(&m, &m.kernels()), vec!["a", "x", "y", "z", "w"]);
        let z = m.by_handle(3).unwrap();
        assert_eq!(names(&m, &m.ancestors(z)), vec!["a", "x", "y", "Graph"]);
        // Nodes inside the child graph have no handle of their own; y waits for x and a.
        let y = m.kernels()[2];
        assert_eq!(m.nodes[y].handle, 0);
        assert_eq!(names(&m, &m.ancestors(y)), vec!["a", "x"]);
        assert_eq!(unreplayable(&m, &m.ancestors(z)), None);
    }

    #[test]
    fn nodes_the_recorder_cannot_rerun_are_named() {
        let g = vec![
            raw(NodeKind::Host, &[], 1, NodeOp::None),
            raw(NodeKind::Kernel, &[0], 2, kernel("k")),
            raw(NodeKind::Empty, &[], 3, NodeOp::None),
            raw(NodeKind::Kernel, &[2], 4, kernel("j")),
        ];
        let m = GraphModel::flatten(&g).unwrap();
        let k = m.by_handle(2).unwrap();
        let why = unreplayable(&m, &m.ancestors(k)).unwrap();
        assert!(why.contains("host function"), "{why}");
        let j = m.by_handle(4).unwrap();
        assert_eq!(unreplayable(&m, &m.ancestors(j)), None);
    }

    #[test]
    fn an_update_keeps_the_instantiated_handles_when_the_shape_matches() {
        let g = vec![
            raw(NodeKind::Kernel, &[], 1, kernel("a")),
            raw(NodeKind::Kernel, &[0], 2, kernel("b")),
        ];
        let old = GraphModel::flatten(&g).unwrap();
        let g2 = vec![
            raw(NodeKind::Kernel, &[], 91, kernel("a2")),
            raw(NodeKind::Kernel, &[0], 92, kernel("b2")),
        ];
        let mut new = GraphModel::flatten(&g2).unwrap();
        assert!(new.keep_handles_of(&old));
        assert_eq!(new.by_handle(2), Some(1));
        assert_eq!(names(&new, &[1]), vec!["b2"]);
        let g3 = vec![raw(NodeKind::Kernel, &[], 91, kernel("a2"))];
        let mut other = GraphModel::flatten(&g3).unwrap();
        assert!(!other.keep_handles_of(&old));
    }

    #[test]
    fn a_graph_with_a_conditional_node_is_refused_whole() {
        // set_cond -> [conditional] -> finish, and an unrelated kernel w: even w, which does
        // not wait for the conditional node, may be the kernel that sets its condition.
        let g = vec![
            raw(NodeKind::Kernel, &[], 1, kernel("set_cond")),
            raw(NodeKind::Conditional, &[0], 2, NodeOp::None),
            raw(NodeKind::Kernel, &[1], 3, kernel("finish")),
            raw(NodeKind::Kernel, &[], 4, kernel("w")),
        ];
        let m = GraphModel::flatten(&g).unwrap();
        assert_eq!(conditional_nodes(&m), 1);
        let why = uncapturable(&m).expect("refused");
        assert!(why.contains("1 conditional node ("), "{why}");
        // Inside a child graph too.
        let nested = vec![RawNode {
            kind: NodeKind::Graph,
            deps: vec![],
            handle: 9,
            op: NodeOp::None,
            child: Some(g.clone()),
        }];
        let m = GraphModel::flatten(&nested).unwrap();
        assert!(uncapturable(&m).is_some());
        let plain = vec![raw(NodeKind::Kernel, &[], 1, kernel("a"))];
        assert_eq!(uncapturable(&GraphModel::flatten(&plain).unwrap()), None);
    }
}
