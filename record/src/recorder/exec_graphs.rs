//! The recorder's model of an executable graph of the application: its nodes, its kernel
//! nodes as counted, and whether its parameters still match the model.

use crate::graph::GraphModel;

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
}
