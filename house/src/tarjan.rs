//! Strongly connected components (Tarjan): the sets of nodes that reach each other.

/// The components of more than one node of the graph `edges[node] = successors`, each sorted,
/// in order of their smallest node. A node alone is no cycle (self-edges are not looked for).
pub fn cycles(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut state = State {
        edges,
        index: vec![None; edges.len()],
        low: vec![0; edges.len()],
        on_stack: vec![false; edges.len()],
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in 0..edges.len() {
        if state.index[node].is_none() {
            state.connect(node);
        }
    }
    let mut found = state.found;
    for component in &mut found {
        component.sort_unstable();
    }
    found.sort();
    found
}

struct State<'a> {
    edges: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    found: Vec<Vec<usize>>,
}

impl State<'_> {
    // Recursive: a crate's files number in the tens, far from any stack limit.
    fn connect(&mut self, node: usize) {
        self.index[node] = Some(self.next);
        self.low[node] = self.next;
        self.next += 1;
        self.stack.push(node);
        self.on_stack[node] = true;
        for &succ in &self.edges[node] {
            match self.index[succ] {
                None => {
                    self.connect(succ);
                    self.low[node] = self.low[node].min(self.low[succ]);
                }
                Some(i) if self.on_stack[succ] => self.low[node] = self.low[node].min(i),
                Some(_) => {}
            }
        }
        if Some(self.low[node]) == self.index[node] {
            let mut component = Vec::new();
            while let Some(top) = self.stack.pop() {
                self.on_stack[top] = false;
                component.push(top);
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                self.found.push(component);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_through_three_nodes_is_one_cycle() {
        // 0 → 1 → 2 → 0, and 3 hangs off 2.
        let edges = vec![vec![1], vec![2], vec![0, 3], vec![]];
        assert_eq!(cycles(&edges), vec![vec![0, 1, 2]]);
    }

    #[test]
    fn a_diamond_has_no_cycle_and_two_loops_are_two_cycles() {
        let diamond = vec![vec![1, 2], vec![3], vec![3], vec![]];
        assert!(cycles(&diamond).is_empty());
        let two = vec![vec![1], vec![0], vec![3], vec![2]];
        assert_eq!(cycles(&two), vec![vec![0, 1], vec![2, 3]]);
    }
}
