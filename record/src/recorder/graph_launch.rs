//! `record -k K --graph-launch`: the whole launch of the executable graph that holds the Nth
//! execution of K, captured as one range. At the graph launch's ENTER the recorder saves what
//! every node can write, runs every enabled node itself on the launch's stream, one at a time
//! in the model's topological order (`crate::graph_plan`: the steps are a valid linearisation
//! of the graph's edges; independent nodes lose their concurrency), each as a step of a
//! `RangePending`, takes the range's post-state, puts the memory back whatever happened, and
//! lets the application's own launch run as it would have: the application's results are
//! unchanged, and only that launch pays.

use kreplay_cuda::graph::{memcpy_async, memset_async};
use kreplay_cuda::{
    copy_dtoh, copy_htod, ctx_synchronize, launch, pointer, sys, AsStream, ForeignFunction,
    ForeignStream, KernelArgs,
};
use kreplay_format::{Op, StreamInfo};
use kreplay_protocol::config::short_kernel_name;

use super::locking::lock;
use super::state::Recorder;
use crate::capture::{before_launch, resolve_globals, CaptureData, PreInput};
use crate::error::RecordError;
use crate::graph::{GraphModel, KernelNode};
use crate::graph_plan::{
    first_kernel_launch, graph_launch_origin, plan_launch, LinearCopy, NodeRun,
};
use crate::graph_track::{node_config, target_view, writable_ranges, Saved};
use crate::range::{stream_info, RangePending, StepInput};
use crate::range_calls::stream_key;
use crate::range_ops::{read_host, OpEnter};

/// The execution that selects the launch: its kernel node, process launch index, match
/// index (`--nth`) and the launch of its executable graph.
#[derive(Debug, Clone, Copy)]
pub(super) struct GraphTarget {
    pub node: usize,
    pub launch_index: u64,
    pub index: u64,
    pub graph_launch: u64,
}

/// What every step of the launch runs with.
struct LaunchSite<'a> {
    stream: &'a ForeignStream,
    info: StreamInfo,
    /// The match index the capture is described with.
    index: u64,
}

impl Recorder {
    /// Captures the launch of `exec` that holds `target`; a failure is said, and the
    /// application's launch runs as it would have.
    pub(super) fn take_graph_launch(
        &self,
        exec: usize,
        target: GraphTarget,
        stream: &ForeignStream,
    ) {
        if let Err(e) = self.capture_graph_launch(exec, target, stream) {
            let name = self.node_name(exec, target.node);
            self.error(format!(
                "capture of the graph launch holding {} (match {}, graph launch {}) failed: {e}; the application continues",
                short_kernel_name(&name),
                target.index,
                target.graph_launch
            ));
        }
    }

    pub(super) fn node_name(&self, exec: usize, node: usize) -> String {
        lock(&self.graphs)
            .get(&exec)
            .map(|s| s.node_name(node))
            .unwrap_or_default()
    }

    fn capture_graph_launch(
        &self,
        exec: usize,
        target: GraphTarget,
        stream: &ForeignStream,
    ) -> Result<(), RecordError> {
        let state = self.live_graph(exec)?;
        let model = state.model();
        // Every node is judged before anything runs on the GPU.
        let runs = plan_launch(model, pointer::is_device_memory).map_err(RecordError::GraphNode)?;
        let position = runs
            .iter()
            .filter(|r| matches!(r, NodeRun::Kernel { .. }))
            .position(|r| r.node() == target.node)
            .ok_or_else(|| RecordError::GraphNode("the matching node is not enabled".into()))?;
        let name = self.node_name(exec, target.node);
        let origin =
            graph_launch_origin(&short_kernel_name(&name), target.index, target.graph_launch);
        ctx_synchronize().map_err(RecordError::cuda("synchronising before the graph launch"))?;
        let key = stream_key(stream.raw_stream() as u64);
        // SAFETY: the stream the application is launching the graph on, live during the call.
        let info = unsafe { stream_info(key) }?;
        let saved = Saved::take(&self.launch_writable(model, &runs)?)?;
        let site = LaunchSite {
            stream,
            info,
            index: target.index,
        };
        let first = first_kernel_launch(target.launch_index, position);
        let taken = self.run_launch(RangePending::new(origin, None), &runs, &site, first);
        // Whatever happened, the application's launch must find the memory as it was.
        // A failed put-back is said first, whatever the capture did: it is the one failure
        // that may change what the application computes.
        saved
            .put_back()
            .map_err(crate::graph_track::put_back_failed)?;
        let data = taken?;
        self.sink.write(data);
        Ok(())
    }

    /// What a kernel node's capture needs, an error naming the node's kernel.
    fn node_target(
        &self,
        name: &str,
        function: &ForeignFunction,
    ) -> Result<super::modules::Target, RecordError> {
        self.target(name, Some(function)).map_err(|e| {
            RecordError::GraphNode(format!(
                "kernel node {}: {e}",
                kreplay_protocol::config::short_kernel_name(&kreplay_protocol::config::demangle(
                    name
                ))
            ))
        })
    }

    /// Every allocation a node of the launch can write, each kernel's module globals among
    /// them (`graph_track::writable_ranges`, node by node).
    fn launch_writable(
        &self,
        model: &GraphModel,
        runs: &[NodeRun<'_>],
    ) -> Result<Vec<(u64, u64)>, RecordError> {
        let mut ranges = Vec::new();
        for run in runs {
            let globals = match run {
                NodeRun::Kernel { kernel, .. } => {
                    let function = node_function(kernel);
                    let objects = self.node_target(&kernel.name, &function)?.objects;
                    resolve_globals(&function, &objects)
                }
                _ => Vec::new(),
            };
            ranges.extend(writable_ranges(model, &[], &globals, run.node())?);
        }
        ranges.sort_unstable();
        ranges.dedup();
        Ok(ranges)
    }

    /// Runs the launch's nodes as the range's steps, kernel nodes numbered with consecutive
    /// launch indices from `first_launch`, and takes the range's post-state.
    fn run_launch(
        &self,
        mut r: RangePending,
        runs: &[NodeRun<'_>],
        site: &LaunchSite<'_>,
        first_launch: u64,
    ) -> Result<CaptureData, RecordError> {
        let mut launch_index = first_launch;
        for run in runs {
            match run {
                NodeRun::Kernel { kernel, .. } => {
                    self.kernel_node_step(&mut r, kernel, site, launch_index)?;
                    launch_index += 1;
                }
                NodeRun::Fill { params, op, .. } => {
                    op_node_step(&mut r, op.clone(), site, |stream| {
                        // SAFETY: the application's own memset node, its destination inside
                        // the memory saved before the launch, run where its graph runs it.
                        unsafe { memset_async(params, stream) }
                            .map_err(RecordError::cuda("running a memset node"))?;
                        Ok(None)
                    })?;
                }
                NodeRun::Copy { params, copy, .. } => copy_node_step(&mut r, params, *copy, site)?,
            }
        }
        r.close()
    }

    /// One kernel node as a kernel step: the range's first through `before_launch` (a single
    /// dispatch's capture, `open_first`), later ones through `kernel_step`; launched by the
    /// recorder with the node's own configuration and arguments, then finished (digested).
    fn kernel_node_step(
        &self,
        r: &mut RangePending,
        k: &KernelNode,
        site: &LaunchSite<'_>,
        launch_index: u64,
    ) -> Result<(), RecordError> {
        let args = k
            .args
            .clone()
            .ok_or_else(|| RecordError::GraphNode("its arguments were not recorded".into()))?;
        let function = node_function(k);
        let target = self.node_target(&k.name, &function)?;
        let view = target_view(k, site.stream.raw_stream());
        let open_file = self.outputs.opener(site.index, &k.name);
        let pre = PreInput {
            view: &view,
            function,
            args: args.clone(),
            layout: k.layout.clone(),
            kernel_name: k.name.clone(),
            module: target.module,
            module_objects: &target.objects,
            allocations: target.allocations,
            correlation: 0,
            open_file: None,
            // A range's step: the range compares its steps itself.
            compare_later: false,
        };
        if r.holds_anything() {
            let seeding = r.pending.is_none();
            r.kernel_step(StepInput {
                pre,
                stream: site.info,
                launch_index,
                // A whole graph launch holds whole regions under --memory touched too.
                touched: None,
            })?;
            if let (true, Some(p)) = (seeding, r.pending.as_mut()) {
                self.describe(&mut p.data, site.index, launch_index, target.device);
            }
        } else {
            let mut p = before_launch(PreInput {
                open_file: Some(&open_file),
                ..pre
            })?;
            self.describe(&mut p.data, site.index, launch_index, target.device);
            r.open_first(p, site.info, launch_index);
        }
        let mut a = KernelArgs::new(args, &k.layout).map_err(RecordError::GraphNode)?;
        // SAFETY: the application's kernel node, run with its own arguments where its graph
        // would run it; what it writes was saved before the launch.
        unsafe { launch(&function, &node_config(k)?, &mut a, site.stream) }
            .map_err(RecordError::cuda("launching a graph node"))?;
        r.finish_kernel()
    }
}

/// The function of a modelled kernel node.
fn node_function(k: &KernelNode) -> ForeignFunction {
    // SAFETY: the function of a node of a live executable graph (the application is
    // launching it now).
    unsafe { ForeignFunction::from_launch(k.function as sys::CUfunction) }
}

/// One memcpy node as a copy step. A host-to-device copy's bytes are taken before it runs
/// and copied from there (the step holds what ran); a device-to-host copy goes into the
/// recorder's own buffer, so the application's host memory is never written.
fn copy_node_step(
    r: &mut RangePending,
    params: &kreplay_cuda::graph::MemcpyParams,
    copy: LinearCopy,
    site: &LaunchSite<'_>,
) -> Result<(), RecordError> {
    ctx_synchronize().map_err(RecordError::cuda("synchronising before a copy node"))?;
    let op = match copy {
        LinearCopy::HostToDevice { dst, host, bytes } => Op::CopyHostToDevice {
            dst,
            // SAFETY: the node's host source, `bytes` readable bytes the application keeps
            // for its graph; nothing of the GPU writes it (the context is synchronised).
            host: unsafe { read_host(host, bytes) }?,
        },
        other => other.op(),
    };
    let host_bytes = match &op {
        Op::CopyHostToDevice { host, .. } => Some(host.clone()),
        _ => None,
    };
    op_node_step(r, op, site, |stream| match (copy, host_bytes) {
        (LinearCopy::HostToDevice { dst, .. }, Some(bytes)) => {
            // SAFETY: the node's device destination, inside the memory saved before the
            // launch (the context is synchronised, so the copy is in the stream's order).
            unsafe { copy_htod(dst, &bytes) }
                .map_err(RecordError::cuda("running a memcpy node"))?;
            // From pageable memory the call returns with its DMA maybe still running on the
            // legacy stream, which `stream` need not follow: the next node must see the bytes.
            ctx_synchronize().map_err(RecordError::cuda("running a memcpy node"))?;
            Ok(None)
        }
        (LinearCopy::DeviceToHost { src, bytes, .. }, _) => {
            let n = usize::try_from(bytes).map_err(|_| RecordError::RegionTooLarge(bytes))?;
            let mut got = vec![0u8; n];
            // SAFETY: the node's device source, readable (its graph reads it here).
            unsafe { copy_dtoh(&mut got, src) }
                .map_err(RecordError::cuda("running a memcpy node"))?;
            Ok(Some(got))
        }
        _ => {
            // SAFETY: the application's own device-to-device memcpy node, its destination
            // inside the memory saved before the launch, run where its graph runs it.
            unsafe { memcpy_async(params, stream) }
                .map_err(RecordError::cuda("running a memcpy node"))?;
            Ok(None)
        }
    })
}

/// One op step the recorder runs itself: held before (`begin_op`, the one path by which an
/// op's memory is held), run by `run` on the launch's stream (the bytes a device-to-host copy
/// received), finished after (`finish_op`).
fn op_node_step(
    r: &mut RangePending,
    op: Op,
    site: &LaunchSite<'_>,
    run: impl FnOnce(&ForeignStream) -> Result<Option<Vec<u8>>, RecordError>,
) -> Result<(), RecordError> {
    ctx_synchronize().map_err(RecordError::cuda("synchronising before a graph node"))?;
    let enter = OpEnter {
        stream: site.info.handle,
        op,
        receive: None,
    };
    r.begin_op(enter, 0, |_| Ok(site.info))?;
    let received = run(site.stream)?;
    ctx_synchronize().map_err(RecordError::cuda("running a graph node"))?;
    r.finish_op(received);
    Ok(())
}
