//! Kernels inside CUDA graphs. Each executable graph is modelled when it is instantiated (and
//! kept current through updates); each launch of it counts its enabled kernel nodes as
//! executions. When an execution is to be captured, the recorder saves the memory that the
//! node and the nodes it waits for can write, runs those nodes itself on the launch's stream,
//! captures the node like an ordinary launch, puts the memory back, and lets the
//! application's graph launch run as it would have: only that launch pays, and the
//! application's results are unchanged. With `--graph-launch` the whole launch holding the
//! execution is captured instead, as one range (`graph_launch`).

use std::sync::atomic::{AtomicBool, Ordering};

use kreplay_cuda::cupti_events::{ApiCall, GraphCall};
use kreplay_cuda::graph::{ForeignGraph, KernelNodeParams};
use kreplay_cuda::{
    ctx_synchronize, launch, sys, AsStream, ForeignFunction, ForeignStream, KernelArgs,
};
use kreplay_format::GraphOrigin;
use kreplay_protocol::config::{short_kernel_name, Mode};

use super::exec_graphs::{ExecKernel, ExecState};
use super::graph_launch::GraphTarget;
use super::locking::lock;
use super::marks::{FlagGuard, IN_LAUNCH, SELF_CALLS};
use super::state::Recorder;
use crate::capture::{after_launch, before_launch, resolve_globals, PreInput};
use crate::error::RecordError;
use crate::graph::{conditional_nodes, uncapturable, unreplayable, GraphModel, NodeOp};
use crate::graph_track::{
    node_config, read_graph, run_nodes, target_view, updated_kernel, writable_ranges, Saved,
};

/// Said once per process: conditional nodes' bodies are not counted.
static CONDITIONALS_NOTED: AtomicBool = AtomicBool::new(false);

/// The executions of one graph launch to be captured (node, launch index, match index, graph
/// launch) and, in profile mode, skipped (name, demangled, indices, geometry).
#[derive(Default)]
struct Counted {
    targets: Vec<(usize, u64, u64, u64)>,
    #[allow(clippy::type_complexity)]
    skipped: Vec<(String, String, (u64, u64), ([u32; 3], [u32; 3]))>,
}

impl Recorder {
    pub(super) fn on_graph(&self, call: &ApiCall<'_>) {
        let Some(g) = call.graph() else {
            return;
        };
        match g {
            GraphCall::Launch { exec, stream } => self.on_graph_launch(exec, stream),
            GraphCall::ExecDestroyed { exec } => {
                lock(&self.graphs).remove(&exec);
            }
            GraphCall::Instantiated { exec, graph } => {
                // SAFETY: the graph it was instantiated from, live during the call.
                let graph = unsafe { ForeignGraph::from_raw(graph) };
                self.on_instantiate(exec, graph);
            }
            GraphCall::KernelSet { exec, node, params } => self.on_kernel_set(exec, node, &params),
            GraphCall::Updated { exec, graph } => {
                // SAFETY: the graph the executable graph was updated from, live during the call.
                let graph = unsafe { ForeignGraph::from_raw(graph) };
                self.on_update(exec, graph);
            }
            GraphCall::NodeEnabled {
                exec,
                node,
                enabled,
            } => {
                if let Some(s) = lock(&self.graphs).get_mut(&exec) {
                    let (model, _) = s.changing();
                    match model.by_handle(node) {
                        Some(i) => model.nodes[i].enabled = enabled,
                        None => s.stale = Some("a node inside a child graph was disabled".into()),
                    }
                }
            }
            GraphCall::NodeParamsSet { exec } => {
                if let Some(s) = lock(&self.graphs).get_mut(&exec) {
                    // The parameters in force changed: the tally no longer stands for them.
                    s.changing();
                    s.stale = Some("the executable graph's nodes were updated in a way kreplay does not follow yet (cuGraphExecNodeSetParams, memcpy, memset or child-graph parameters)".into());
                }
            }
        }
    }

    fn on_instantiate(&self, exec: usize, graph: ForeignGraph) {
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        let names = match read_graph(graph, false) {
            Ok(m) => m,
            Err(e) => {
                self.error(format!(
                    "cannot read an instantiated CUDA graph ({e}); its kernels are not counted"
                ));
                return;
            }
        };
        let conditionals = conditional_nodes(&names);
        if conditionals > 0 && !CONDITIONALS_NOTED.swap(true, Ordering::Relaxed) {
            crate::diag!(
                "kreplay: a CUDA graph holds {conditionals} conditional node{} (if/while/switch): the kernels in their bodies run a data-dependent number of times and are not counted, listed or captured, and no node of such a graph is captured",
                if conditionals == 1 { "" } else { "s" }
            );
        }
        let kernels = self.exec_kernels(&names);
        let keep_args = self.config.mode == Mode::Record
            && (self.config.launch_index.is_some() || kernels.iter().any(|k| k.wanted));
        let model = if keep_args {
            match read_graph(graph, true) {
                Ok(m) => m,
                Err(e) => {
                    self.error(format!("cannot read an instantiated CUDA graph ({e})"));
                    names
                }
            }
        } else {
            names
        };
        lock(&self.graphs).insert(exec, ExecState::new(model, kernels, keep_args));
    }

    fn exec_kernels(&self, model: &GraphModel) -> Vec<ExecKernel> {
        model
            .kernels()
            .into_iter()
            .filter_map(|i| match &model.nodes[i].op {
                NodeOp::Kernel(k) => {
                    let (wanted, demangled) = self.kernels.matches(&self.config, &k.name);
                    Some(ExecKernel {
                        node: i,
                        demangled,
                        wanted,
                        stat: None,
                    })
                }
                _ => None,
            })
            .collect()
    }

    fn on_kernel_set(&self, exec: usize, node: usize, p: &KernelNodeParams) {
        let keep = match lock(&self.graphs).get(&exec) {
            Some(s) => s.keep_args,
            None => return,
        };
        let k = {
            let _self_calls = FlagGuard::force(&SELF_CALLS);
            updated_kernel(p, keep)
        };
        let (wanted, demangled) = self.kernels.matches(&self.config, &k.name);
        let mut graphs = lock(&self.graphs);
        let Some(s) = graphs.get_mut(&exec) else {
            return;
        };
        let (model, kernels) = s.changing();
        match model.by_handle(node) {
            Some(i) => {
                if let Some(e) = kernels.iter_mut().find(|e| e.node == i) {
                    e.demangled = demangled;
                    e.wanted = wanted;
                }
                // The node's launch attributes are not among the parameters: they stay.
                let mut k = k;
                if let NodeOp::Kernel(old) = &model.nodes[i].op {
                    k.attributes = old.attributes.clone();
                }
                model.nodes[i].op = NodeOp::Kernel(k);
            }
            None => s.stale = Some("a kernel node inside a child graph was updated".into()),
        }
    }

    fn on_update(&self, exec: usize, graph: ForeignGraph) {
        let keep = match lock(&self.graphs).get(&exec) {
            Some(s) => s.keep_args,
            None => return,
        };
        let read = {
            let _self_calls = FlagGuard::force(&SELF_CALLS);
            read_graph(graph, keep)
        };
        let paired = {
            let mut graphs = lock(&self.graphs);
            let Some(s) = graphs.get_mut(&exec) else {
                return;
            };
            let mut read = read.ok();
            let paired = read.as_mut().is_some_and(|m| m.keep_handles_of(s.model()));
            if !paired {
                s.stale = Some(
                    "the executable graph was updated from a graph kreplay could not pair with it"
                        .into(),
                );
            }
            read.filter(|_| paired)
        };
        if let Some(model) = paired {
            let kernels = self.exec_kernels(&model);
            if let Some(s) = lock(&self.graphs).get_mut(&exec) {
                s.replace(model, kernels);
            }
        }
    }

    /// Counts the enabled kernel nodes of one launch of `exec` as executions; `None` when
    /// the executable graph is not known.
    fn count_graph_launch(&self, exec: usize) -> Option<Counted> {
        let mut counted = Counted::default();
        // Graphs before kernels (the recorder's lock order); a launch's nodes are counted
        // under one lock of the kernels, one after the other.
        let mut graphs = lock(&self.graphs);
        let state = graphs.get_mut(&exec)?;
        state.launches += 1;
        let captured = self
            .kernels
            .with_book(|book| state.count(book, &self.config));
        let (model, kernels) = (state.model(), state.kernels());
        for (at, launch_index, index) in captured {
            let k = &kernels[at];
            if let NodeOp::Kernel(kn) = &model.nodes[k.node].op {
                if self.config.mode == Mode::Profile {
                    counted.skipped.push((
                        kn.name.clone(),
                        k.demangled.clone(),
                        (index, launch_index),
                        (kn.grid, kn.block),
                    ));
                } else {
                    counted
                        .targets
                        .push((k.node, launch_index, index, state.launches));
                }
            }
        }
        Some(counted)
    }

    /// Counts the executions of one launch of `exec`, and captures those asked for.
    fn on_graph_launch(&self, exec: usize, stream: sys::CUstream) {
        // SAFETY: the stream the application is launching the graph on, now.
        let stream = unsafe { ForeignStream::from_raw(stream) };
        // A graph launched into a stream capture becomes part of that graph: it runs later.
        if matches!(stream.is_capturing(), Ok(true)) {
            return;
        }
        let Some(Counted { targets, skipped }) = self.count_graph_launch(exec) else {
            return;
        };
        // (The lock on the recorder's state is released by now.)
        for (name, demangled, indices, geometry) in skipped {
            self.profile_skipped(
                &name,
                &demangled,
                indices,
                geometry,
                "a kernel node of a CUDA graph: not replayed in place yet (it ran once, unprofiled; `kreplay record` captures graph nodes)",
            );
        }
        for (node, launch_index, index, launch) in targets {
            let _self_calls = FlagGuard::force(&SELF_CALLS);
            let _in_launch = FlagGuard::force(&IN_LAUNCH);
            if self.config.graph_launch {
                let target = GraphTarget {
                    node,
                    launch_index,
                    index,
                    graph_launch: launch,
                };
                self.take_graph_launch(exec, target, &stream);
                continue;
            }
            if let Err(e) = self.capture_node(exec, node, &stream, launch_index, index, launch) {
                let name = self.node_name(exec, node);
                self.error(format!(
                    "capture of {} (match {index}, a node of a CUDA graph) failed: {e}; the application continues",
                    short_kernel_name(&name)
                ));
            }
        }
    }

    /// The model of executable graph `exec` as the recorder follows it, unless it was
    /// destroyed or changed in a way the model does not follow.
    pub(super) fn live_graph(&self, exec: usize) -> Result<ExecState, RecordError> {
        let state = lock(&self.graphs)
            .get(&exec)
            .cloned()
            .ok_or_else(|| RecordError::GraphNode("the executable graph was destroyed".into()))?;
        match &state.stale {
            Some(why) => Err(RecordError::GraphNode(why.clone())),
            None => Ok(state),
        }
    }

    /// Captures kernel node `node` of this launch of `exec` (see the module comment).
    fn capture_node(
        &self,
        exec: usize,
        node: usize,
        stream: &ForeignStream,
        launch_index: u64,
        index: u64,
        graph_launch: u64,
    ) -> Result<(), RecordError> {
        let state = self.live_graph(exec)?;
        let model = state.model();
        if let Some(why) = uncapturable(model) {
            return Err(RecordError::GraphNode(why));
        }
        let before: Vec<usize> = model
            .ancestors(node)
            .into_iter()
            .filter(|&i| model.nodes[i].enabled)
            .collect();
        if let Some(why) = unreplayable(model, &before) {
            return Err(RecordError::GraphNode(why));
        }
        let NodeOp::Kernel(k) = &model.nodes[node].op else {
            return Err(RecordError::GraphNode("not a kernel node".into()));
        };
        let Some(args) = k.args.clone() else {
            return Err(RecordError::GraphNode(
                "its arguments were not recorded".into(),
            ));
        };
        // SAFETY: the function of a node of a live executable graph.
        let function = unsafe { ForeignFunction::from_launch(k.function as sys::CUfunction) };
        let target = self.target(&k.name, Some(&function))?;
        ctx_synchronize().map_err(RecordError::cuda("synchronising before the graph launch"))?;
        let globals = resolve_globals(&function, &target.objects);
        let open_file = self.outputs.opener(index, &k.name);
        let saved = Saved::take(&writable_ranges(model, &before, &globals, node)?)?;
        let captured = (|| {
            run_nodes(model, &before, stream)?;
            ctx_synchronize().map_err(RecordError::cuda("running the nodes before the target"))?;
            let view = target_view(k, stream.raw_stream());
            let mut p = before_launch(PreInput {
                view: &view,
                function,
                args: args.clone(),
                layout: k.layout.clone(),
                kernel_name: k.name.clone(),
                module: target.module,
                module_objects: &target.objects,
                allocations: target.allocations,
                correlation: 0,
                open_file: Some(&open_file),
                compare_later: true,
            })?;
            let mut a = KernelArgs::new(args, &k.layout).map_err(RecordError::GraphNode)?;
            // SAFETY: the application's kernel node, run with its own arguments where its
            // graph would run it.
            unsafe { launch(&function, &node_config(k)?, &mut a, stream) }
                .map_err(RecordError::cuda("launching the graph node"))?;
            after_launch(&mut p)?;
            Ok::<_, RecordError>(p)
        })();
        // Whatever happened, the application's launch must find the memory as it was.
        // A failed put-back is said first, whatever the capture did (`put_back_failed`).
        saved
            .put_back()
            .map_err(crate::graph_track::put_back_failed)?;
        let mut p = captured?;
        self.describe(&mut p.data, index, launch_index, target.device);
        p.data.graph = Some(GraphOrigin {
            graph_launch,
            graph_exec: exec as u64,
            kernel_node: state
                .kernels()
                .iter()
                .position(|e| e.node == node)
                .map_or(0, |i| i as u32 + 1),
            kernel_nodes: state.kernels().len() as u32,
            nodes: model.nodes.len() as u32,
            ancestors_run: before.len() as u32,
        });
        self.sink.write(p.data);
        Ok(())
    }
}
