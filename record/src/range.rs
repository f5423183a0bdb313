//! A range capture in flight: every kernel launch and op (copy, fill, event record or wait,
//! host wait) the application issues between the range's opening and its close, as steps in
//! issue order, on as many streams as it uses. `--launch-range I:J` opens it at launch I's
//! ENTER (that launch is taken like a single dispatch, `capture::before_launch`) and closes it
//! at launch J's EXIT; a boundary (an NVTX push, `cuProfilerStart`) opens it empty and closes
//! it at the matching pop or stop, so its first steps may be ops. Each step adds, at its
//! ENTER, the memory it reaches that the range does not hold yet (still at its range-start
//! state: no earlier step could reach it, see `range_held`); after each step (its EXIT,
//! synchronised) the held memory is digested (`range_digest`); the close takes the post-state
//! of everything held, which is the range's write set. The decisions are pure functions at
//! the end of this file.

use std::sync::Arc;
use std::time::Instant;

use kreplay_cuda::cupti_events::OpCall;
use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{ctx_synchronize, ContextHandle, ForeignStream, Stream};
use kreplay_format::{Op, RangeInfo, StateDigest, Step, StreamInfo, TimingConditions};
use kreplay_protocol::config::LaunchRange;

use crate::capture::{dispatch_of, CaptureData, CodeObject, Pending, PreInput};
use crate::error::RecordError;
use crate::footprint::{self, Reads};
use crate::range_calls::{fixed_stream_info, CallClass};
use crate::range_digest::digest_held;
use crate::range_held::{op_walk, Held, HeldMut};
use crate::range_ops::{op_stream, read_host, resolve, OpEnter};
use crate::range_touched::RangeTouched;
use crate::snapshot::{post_states, Snapshot};
use crate::touched_run::TouchedLaunch;

/// A range between its opening and its close.
pub struct RangePending {
    /// How the range was selected (`RangeInfo::origin`).
    pub origin: String,
    /// `--launch-range I:J`; none for a range opened by a boundary.
    pub bounds: Option<LaunchRange>,
    /// The capture as its first kernel step opened it; its snapshots grow with the range.
    pub pending: Option<Pending>,
    /// What the range holds before its first kernel step (the memory of its first ops).
    early: Held,
    pub steps: Vec<Step>,
    /// Code objects of the kernel steps, other than the capture's (`pending.data.module`).
    pub modules: Vec<CodeObject>,
    pub streams: Vec<StreamInfo>,
    /// Per finished step, the digest of the held memory after it.
    pub digests: Vec<Option<StateDigest>>,
    /// The step whose EXIT is awaited, if one is in flight.
    pub awaiting: Option<Awaited>,
    /// Launch indices of the first and latest kernel steps.
    pub first_launch: Option<u64>,
    pub last_launch: Option<u64>,
    /// Why the range cannot be captured, once something inside it said so; the unit is
    /// abandoned at the next point where that is safe (no step in flight).
    pub refusal: Option<String>,
    /// The application's time spent in the range's work outside kernel-step captures.
    stall_ns: u64,
    /// The CUDA context of its first step (`ContextHandle::id`): every step must be issued
    /// in it (a step on another GPU would be snapshotted and digested in the wrong context).
    context: Option<usize>,
    /// `--memory touched`: the pages its steps touch.
    touched: Option<RangeTouched>,
}

/// A step whose EXIT is awaited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Awaited {
    pub correlation: u32,
    pub kind: AwaitedKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AwaitedKind {
    /// A kernel step: its timer is armed on its stream.
    Kernel,
    /// An op step; a device-to-host copy's bytes are read at its EXIT (address, length).
    Op { receive: Option<(u64, u64)> },
}

/// One kernel step at its ENTER.
pub struct StepInput<'a> {
    pub pre: PreInput<'a>,
    /// The stream the step names, and its description.
    pub stream: StreamInfo,
    pub launch_index: u64,
    /// `--memory touched`: how to launch the step again for its instrumented run, or why it
    /// cannot be.
    pub touched: Option<Result<TouchedLaunch, String>>,
}

/// The description of the stream `key` names (`range_calls::stream_key`).
///
/// # Safety
/// Unless it is a default stream (0, `CU_STREAM_PER_THREAD`), `key` must be the handle of a
/// stream of the current context, live during the call (the application's call in flight
/// names it).
pub unsafe fn stream_info(key: u64) -> Result<StreamInfo, RecordError> {
    if let Some(fixed) = fixed_stream_info(key) {
        return Ok(fixed);
    }
    // SAFETY: by the caller's contract.
    let stream = unsafe { ForeignStream::from_raw(key as kreplay_cuda::sys::CUstream) };
    Ok(StreamInfo {
        handle: key,
        flags: stream
            .flags()
            .map_err(RecordError::cuda("asking a stream's flags"))?,
        priority: stream
            .priority()
            .map_err(RecordError::cuda("asking a stream's priority"))?,
    })
}

impl RangePending {
    pub fn new(origin: String, bounds: Option<LaunchRange>) -> RangePending {
        RangePending {
            origin,
            bounds,
            pending: None,
            early: Held::default(),
            steps: Vec::new(),
            modules: Vec::new(),
            streams: Vec::new(),
            digests: Vec::new(),
            awaiting: None,
            first_launch: None,
            last_launch: None,
            refusal: None,
            stall_ns: 0,
            context: None,
            touched: None,
        }
    }

    /// The range holds only the pages its steps touch (`--memory touched`).
    pub fn by_touched_pages(mut self) -> RangePending {
        self.touched = Some(RangeTouched::default());
        self
    }

    /// How messages name the range.
    pub fn label(&self) -> String {
        label(self.bounds, &self.origin)
    }

    /// Whether the range holds memory already (its first kernel step is then taken through
    /// `kernel_step`, not as a single dispatch: the memory it reaches is placed among what the
    /// range holds).
    pub fn holds_anything(&self) -> bool {
        self.pending.is_some() || !self.early.snapshots.is_empty()
    }

    /// Whether a kernel step opened the capture (a range without one cannot be written).
    pub fn has_kernel_step(&self) -> bool {
        self.pending.is_some()
    }

    /// Whether the stream `key` still needs its description (`note_stream`).
    pub fn knows_stream(&self, key: u64) -> bool {
        self.streams.iter().any(|s| s.handle == key)
    }

    /// A step's stream (and, at the first step, the range's context).
    fn note_stream(&mut self, info: StreamInfo) {
        if !self.knows_stream(info.handle) {
            self.streams.push(info);
        }
        if self.context.is_none() {
            self.context = ContextHandle::current().ok().map(|c| c.id());
        }
    }

    fn held(&mut self) -> HeldMut<'_> {
        match &mut self.pending {
            Some(p) => HeldMut {
                snapshots: &mut p.data.snapshots,
                globals: &mut p.data.globals,
                pointer_slots: &mut p.data.pointer_slots,
            },
            None => self.early.as_mut(),
        }
    }

    fn snapshots(&self) -> &[Snapshot] {
        match &self.pending {
            Some(p) => &p.data.snapshots,
            None => &self.early.snapshots,
        }
    }

    /// The first kernel step of a range that holds nothing yet, taken as a single dispatch.
    pub fn open_first(&mut self, mut pending: Pending, stream: StreamInfo, launch_index: u64) {
        if let Some(t) = &mut self.touched {
            // Arrays are read through their texels, not an address: not the run's to track.
            let reached: Vec<(u64, u64)> = (pending.data.snapshots.iter())
                .filter(|s| s.array.is_none())
                .map(|s| (s.device_addr, s.region.size))
                .collect();
            t.view(pending.data.textures.linear_addresses());
            t.kernel_enter(pending.touched.take(), &reached, 0);
        }
        self.steps
            .push(Step::kernel(stream.handle, pending.data.dispatch.clone()));
        self.note_stream(stream);
        self.awaiting = Some(Awaited {
            correlation: pending.correlation,
            kind: AwaitedKind::Kernel,
        });
        self.first_launch.get_or_insert(launch_index);
        self.last_launch = Some(launch_index);
        self.pending = Some(pending);
    }

    /// A kernel step's ENTER (not the first of a range that held nothing): snapshots what it
    /// reaches that the range does not hold, adds its module and arms its timer (last: the
    /// stream stays gated until the launch is queued).
    pub fn kernel_step(&mut self, input: StepInput<'_>) -> Result<(), RecordError> {
        let began = Instant::now();
        ctx_synchronize().map_err(RecordError::cuda("synchronising before a range step"))?;
        if self.pending.is_none() {
            self.seed(&input.pre)?;
        }
        let pre = input.pre;
        let Some(p) = self.pending.as_ref() else {
            return Err(RecordError::NoContext);
        };
        let Reads { walk, textures, .. } = p.footprint.reads(&footprint::Step {
            args: &pre.args,
            layout: &pre.layout,
            function: &pre.function,
            module_objects: pre.module_objects,
            allocations: &pre.allocations,
            copy_regions: false,
        })?;
        if !textures.objects.is_empty() || !textures.arrays.is_empty() {
            return Err(RecordError::Range(format!(
                "step {} uses texture or surface objects, which range captures do not hold yet",
                self.steps.len()
            )));
        }
        let module_id = pre.module.module_id;
        self.held().add(&walk, module_id)?;
        let step = self.steps.len();
        if let Some(t) = &mut self.touched {
            let reached: Vec<(u64, u64)> = walk.regions.iter().map(|r| (r.base, r.size)).collect();
            t.kernel_enter(input.touched, &reached, step);
        }
        let Some(p) = self.pending.as_mut() else {
            return Err(RecordError::NoContext);
        };
        if module_id != p.data.module.module_id
            && !self.modules.iter().any(|m| m.module_id == module_id)
        {
            self.modules.push(pre.module);
        }
        p.data.notes.extend(walk.notes.iter().cloned());
        // SAFETY: inside the launch callback that decoded the view.
        let app_stream = unsafe { pre.view.foreign_stream() };
        let timer = GatedTimer::new().map_err(RecordError::cuda("creating the timer"))?;
        // The previous step's timer goes before the new one is armed: freeing its gate word
        // synchronises the context, which would wait behind a gate already armed (measured
        // on the H200: the application hung at launch 2 of a range).
        drop(std::mem::replace(&mut p.timer, timer));
        p.timer
            .arm(&app_stream)
            .map_err(RecordError::cuda("arming the timer"))?;
        p.stream = app_stream;
        p.correlation = pre.correlation;
        p.data.stall_ns += began.elapsed().as_nanos() as u64;
        self.awaiting = Some(Awaited {
            correlation: pre.correlation,
            kind: AwaitedKind::Kernel,
        });
        self.first_launch.get_or_insert(input.launch_index);
        self.last_launch = Some(input.launch_index);
        let dispatch = dispatch_of(
            pre.view,
            pre.kernel_name,
            module_id,
            &pre.layout,
            pre.args,
            walk.pointer_words,
        );
        self.steps.push(Step::kernel(input.stream.handle, dispatch));
        self.note_stream(input.stream);
        Ok(())
    }

    /// The capture of a range whose first kernel step comes after ops: made from what the
    /// ops hold and the step's code object (its dispatch is set at the close).
    fn seed(&mut self, pre: &PreInput<'_>) -> Result<(), RecordError> {
        // SAFETY: inside the launch callback that decoded the view.
        let stream = unsafe { pre.view.foreign_stream() };
        let timer = GatedTimer::new().map_err(RecordError::cuda("creating the timer"))?;
        let module = CodeObject {
            module_id: pre.module.module_id,
            arch: pre.module.arch,
            image: Arc::clone(&pre.module.image),
        };
        let dispatch = dispatch_of(
            pre.view,
            pre.kernel_name.clone(),
            module.module_id,
            &pre.layout,
            pre.args.clone(),
            Vec::new(),
        );
        let held = std::mem::take(&mut self.early);
        self.pending = Some(Pending {
            correlation: pre.correlation,
            stream,
            timer,
            measuring: None,
            footprint: footprint::for_capture(),
            touched: None,
            post_half: None,
            data: seeded_data(dispatch, module, held),
        });
        Ok(())
    }

    /// The awaited kernel step's EXIT: its in-app duration and the digest after it.
    pub fn finish_kernel(&mut self) -> Result<(), RecordError> {
        let Some(p) = self.pending.as_mut() else {
            return Err(RecordError::NoContext);
        };
        // The first step's window (`quiet`) ends with its kernel, on every way out.
        let _measuring = p.measuring.take();
        p.timer
            .finish(&p.stream)
            .map_err(RecordError::cuda("stopping the timer"))?;
        ctx_synchronize().map_err(RecordError::KernelFailed)?;
        let ns = p.timer.elapsed_ns().ok();
        if let Some(d) = self.steps.last_mut().and_then(Step::dispatch_mut) {
            d.original_duration_ns = ns;
        }
        self.awaiting = None;
        if let Some(t) = &mut self.touched {
            let began = Instant::now();
            t.kernel_exit(self.steps.len().saturating_sub(1));
            self.stall_ns += began.elapsed().as_nanos() as u64;
        }
        self.digest_step();
        Ok(())
    }

    fn digest_step(&mut self) {
        let began = Instant::now();
        let digest = digest_held(self.snapshots());
        self.digests.push(digest);
        self.stall_ns += began.elapsed().as_nanos() as u64;
    }

    /// An op step's ENTER (`function` is CUPTI's name for the call): the memory its device
    /// spans lie in is held from now, a host-to-device copy's bytes are taken. `stream_info`
    /// describes a stream the range has not seen yet.
    pub fn op_enter(
        &mut self,
        call: OpCall,
        function: &str,
        correlation: u32,
        stream_info: impl FnOnce(u64) -> Result<StreamInfo, RecordError>,
    ) -> Result<(), RecordError> {
        if into_stream_capture(&call) {
            // It runs when the graph is launched, which refuses the range; synchronising now
            // would break the application's capture.
            return Ok(());
        }
        let began = Instant::now();
        ctx_synchronize().map_err(RecordError::cuda("synchronising before a range step"))?;
        let previous = self.steps.last().map_or(0, |s| s.stream);
        let Some(enter) = resolve(call, function, previous)? else {
            return Ok(()); // no device memory involved: not a step
        };
        self.begin_op(enter, correlation, stream_info)?;
        self.stall_ns += began.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// An op step already made into the format's `Op` (from a CUPTI call by `op_enter`, or
    /// from a graph node's parameters), before it runs: the memory its device spans lie in is
    /// held from now (the one path by which an op's memory is held), and its EXIT is awaited
    /// (`op_exit` for the application's call, `finish_op` for one the recorder runs). Call
    /// with the context synchronised.
    pub fn begin_op(
        &mut self,
        enter: OpEnter,
        correlation: u32,
        stream_info: impl FnOnce(u64) -> Result<StreamInfo, RecordError>,
    ) -> Result<(), RecordError> {
        let spans = enter.op.device_spans();
        let walk = op_walk(&spans)?;
        self.held().add(&walk, 0)?;
        if let Some(t) = &mut self.touched {
            t.op(&spans);
        }
        if !self.knows_stream(enter.stream) {
            let info = stream_info(enter.stream)?;
            self.note_stream(info);
        }
        self.steps.push(Step::op(enter.stream, enter.op));
        self.awaiting = Some(Awaited {
            correlation,
            kind: AwaitedKind::Op {
                receive: enter.receive,
            },
        });
        Ok(())
    }

    /// The awaited op step ran (the context synchronised since): a device-to-host copy's
    /// `received` bytes are set, and the held memory is digested.
    pub fn finish_op(&mut self, received: Option<Vec<u8>>) {
        self.awaiting = None;
        if let (
            Some(got),
            Some(Step {
                action: kreplay_format::Action::Op(Op::CopyDeviceToHost { received, .. }),
                ..
            }),
        ) = (received, self.steps.last_mut())
        {
            *received = got;
        }
        self.digest_step();
    }

    /// The awaited op step's EXIT: the bytes a device-to-host copy delivered, and the digest
    /// after the step.
    pub fn op_exit(&mut self, succeeded: bool, function: &str) -> Result<(), RecordError> {
        let receive = match self.awaiting {
            Some(Awaited {
                kind: AwaitedKind::Op { receive },
                ..
            }) => receive,
            _ => return Ok(()),
        };
        self.awaiting = None;
        if !succeeded {
            return Err(RecordError::Range(format!(
                "{function} failed inside the range"
            )));
        }
        let began = Instant::now();
        ctx_synchronize().map_err(RecordError::cuda("synchronising after a range step"))?;
        let got = match receive {
            // SAFETY: the application's copy of `bytes` bytes into host memory at `addr`
            // succeeded and the context is synchronised: the bytes are there, and nothing
            // of the range writes them now.
            Some((addr, bytes)) => Some(unsafe { read_host(addr, bytes) }?),
            None => None,
        };
        self.stall_ns += began.elapsed().as_nanos() as u64;
        self.finish_op(got);
        Ok(())
    }

    /// The close (launch J's EXIT, or the boundary that ends the range): the awaited kernel
    /// step finishes, then the post-state of everything held; the capture to write.
    pub fn close(mut self) -> Result<CaptureData, RecordError> {
        if matches!(self.awaiting, Some(a) if a.kind == AwaitedKind::Kernel) {
            self.finish_kernel()?;
        }
        let began = Instant::now();
        let Some(mut p) = self.pending.take() else {
            return Err(RecordError::Range(
                "the range holds no kernel launch (a range capture needs one)".into(),
            ));
        };
        ctx_synchronize().map_err(RecordError::cuda("synchronising at the range's end"))?;
        if let Some(t) = &self.touched {
            match t.apply(&mut p.data.snapshots) {
                Ok(note) => p.data.notes.push(note),
                Err(why) => {
                    crate::diag!(
                        "kreplay: {}: --memory touched: {why}; this capture holds whole regions, as --memory reachable",
                        self.label()
                    );
                    p.data.notes.push(format!(
                        "--memory touched fell back to whole regions: {why}"
                    ));
                }
            }
        }
        let stream = Stream::new().map_err(RecordError::cuda("creating the snapshot stream"))?;
        p.data.post = post_states(
            &mut p.data.snapshots,
            &p.footprint,
            p.data.spill.as_mut(),
            &stream,
            false,
        )?;
        stream
            .synchronize()
            .map_err(RecordError::cuda("waiting for the post-state"))?;
        let mut data = p.data;
        // The capture's dispatch is its first kernel step (the format's rule).
        if let Some(d) = self.steps.iter().find_map(Step::dispatch) {
            data.dispatch = d.clone();
        }
        data.range = Some(summarise(
            &self.origin,
            &self.steps,
            (self.first_launch, self.last_launch),
            std::mem::take(&mut self.streams),
            std::mem::take(&mut self.digests),
        ));
        data.steps = self.steps;
        data.step_modules = self.modules;
        data.stall_ns += self.stall_ns + began.elapsed().as_nanos() as u64;
        Ok(data)
    }
}

/// Whether the op is made into a stream being captured into a graph (a host wait, which names
/// no stream or one that cannot be capturing, never is).
fn into_stream_capture(call: &OpCall) -> bool {
    let Some(raw) = op_stream(call) else {
        return false;
    };
    // SAFETY: the application's call in flight names this stream.
    let stream = unsafe { ForeignStream::from_raw(raw as kreplay_cuda::sys::CUstream) };
    matches!(stream.is_capturing(), Ok(true))
}

/// The capture data of a range whose first kernel step followed ops: what they hold, the
/// step's code object, and nothing measured yet.
fn seeded_data(dispatch: kreplay_format::Dispatch, module: CodeObject, held: Held) -> CaptureData {
    CaptureData {
        nvtx: None,
        dispatch,
        steps: Vec::new(),
        step_modules: Vec::new(),
        snapshots: held.snapshots,
        globals: held.globals,
        module,
        ptx_sources: Vec::new(),
        pointer_slots: held.pointer_slots,
        context: ContextHandle::current().ok(),
        post: Vec::new(),
        compare_later: None,
        notes: Vec::new(),
        textures: Default::default(),
        device_heap: None,
        timing: TimingConditions {
            skipped: Some(
                "the range began with other steps than a kernel launch: no settling before its first kernel step".into(),
            ),
            ..Default::default()
        },
        graph: None,
        match_index: 0,
        launch_index: 0,
        device: None,
        spill: None,
        range: None,
        began: Instant::now(),
        stall_ns: 0,
        stall_phases: Vec::new(),
    }
}

/// How messages name a range: by its launches for `--launch-range` (as the user gave them),
/// else by its origin.
pub fn label(bounds: Option<LaunchRange>, origin: &str) -> String {
    match bounds {
        Some(r) => format!("range capture of launches {}:{}", r.first, r.last),
        None => format!("range capture of {origin}"),
    }
}

/// The RANGE event of a finished range. Its in-app duration is the sum of the kernel steps'
/// (each timed without launch overhead); op steps and the gaps between steps are not in it,
/// since the recorder synchronises around every step and the range as a whole never runs
/// undisturbed. `None` when no kernel step has a time.
pub fn summarise(
    origin: &str,
    steps: &[Step],
    launches: (Option<u64>, Option<u64>),
    streams: Vec<StreamInfo>,
    digests: Vec<Option<StateDigest>>,
) -> RangeInfo {
    let times: Vec<u64> = steps
        .iter()
        .filter_map(Step::dispatch)
        .filter_map(|d| d.original_duration_ns)
        .collect();
    RangeInfo {
        origin: origin.to_string(),
        launches: launches.0.zip(launches.1),
        streams,
        original_duration_ns: (!times.is_empty()).then(|| times.iter().sum()),
        digests,
    }
}

/// The origin string of `--launch-range I:J`.
pub fn launch_range_origin(r: LaunchRange) -> String {
    format!("launch-range {}:{}", r.first, r.last)
}

/// What a range does at a launch's ENTER.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtEnter {
    /// `--launch-range`'s first launch: the unit opens with it.
    Open,
    /// A launch inside an open range: a step.
    Step,
    /// The range cannot be captured (the message says why); the unit is abandoned.
    Refuse(String),
    /// No range is open (not yet, abandoned, or begun before the recorder saw it).
    Skip,
}

/// What the decisions need to know of the open range.
#[derive(Debug, Clone, Copy)]
pub struct OpenRange<'a> {
    /// Why it cannot be captured, if something already said so.
    pub refusal: Option<&'a str>,
    /// A step's EXIT is still awaited.
    pub in_flight: bool,
    /// The launch index of its latest kernel step.
    pub last_launch: Option<u64>,
    /// Steps so far.
    pub steps: usize,
    /// The calling thread's context is not the range's.
    pub other_context: bool,
}

impl RangePending {
    pub fn view(&self) -> OpenRange<'_> {
        let current = ContextHandle::current().ok().map(|c| c.id());
        OpenRange {
            refusal: self.refusal.as_deref(),
            in_flight: self.awaiting.is_some(),
            last_launch: self.last_launch,
            steps: self.steps.len(),
            other_context: self.context.is_some() && current != self.context,
        }
    }
}

/// The decision at the ENTER of launch `launch_index` (`bounds`: `--launch-range`'s).
pub fn at_enter(
    bounds: Option<LaunchRange>,
    launch_index: u64,
    open: Option<OpenRange<'_>>,
) -> AtEnter {
    let Some(o) = open else {
        return match bounds {
            Some(r) if launch_index == r.first => AtEnter::Open,
            _ => AtEnter::Skip,
        };
    };
    if let Some(why) = o.refusal {
        return AtEnter::Refuse(why.to_string());
    }
    if o.other_context {
        return AtEnter::Refuse(other_context(&format!("launch {launch_index}")));
    }
    if o.in_flight {
        // A step in flight (its timer gates a stream until its EXIT): two at once cannot be
        // told apart.
        return AtEnter::Refuse(format!(
            "launch {launch_index} began while step {} was still being issued (another thread); range captures take one step at a time",
            o.steps
        ));
    }
    match o.last_launch {
        Some(last) if launch_index != last + 1 => AtEnter::Refuse(format!(
            "launch {} of the range is not a kernel launch it can hold (a graph node?)",
            last + 1
        )),
        _ => AtEnter::Step,
    }
}

/// Whether the launch at `launch_index` is `--launch-range`'s last (its EXIT closes the unit).
pub fn closes(bounds: Option<LaunchRange>, launch_index: u64) -> bool {
    bounds.is_some_and(|r| launch_index == r.last)
}

/// Why a step issued on another context than the range's refuses it.
fn other_context(what: &str) -> String {
    format!(
        "{what} was issued on another CUDA context than the range's (another GPU?); range captures hold one context"
    )
}

/// What an open range does with a driver call other than a launch, at its ENTER.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtCall {
    /// It becomes a step.
    Step,
    /// The range is abandoned now, for this reason.
    Refuse(String),
    /// The range is abandoned when the step in flight (on another thread) finishes.
    Defer(String),
    Ignore,
}

/// The decision at the ENTER of the driver call `function`, of class `class`.
pub fn at_call(class: CallClass, function: &str, open: OpenRange<'_>) -> AtCall {
    let n = open.steps;
    match class {
        CallClass::Ignore => AtCall::Ignore,
        _ if open.other_context && open.in_flight => AtCall::Defer(other_context(function)),
        _ if open.other_context => AtCall::Refuse(other_context(function)),
        CallClass::Refuse => {
            let why = format!(
                "{function} was called inside the range (after {n} steps); range captures cannot hold it"
            );
            if open.in_flight {
                AtCall::Defer(why)
            } else {
                AtCall::Refuse(why)
            }
        }
        CallClass::Step => match (open.refusal, open.in_flight) {
            (Some(why), false) => AtCall::Refuse(why.to_string()),
            (Some(_), true) => AtCall::Ignore,
            (None, true) => AtCall::Defer(format!(
                "{function} was called while step {n} was still being issued (another thread); range captures take one step at a time"
            )),
            (None, false) => AtCall::Step,
        },
    }
}

/// What a selection boundary's close (`range_end`) does to the open range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtEnd {
    /// No range opened by a boundary is open (a `--launch-range` closes at its last launch).
    Nothing,
    /// The capture is taken and written.
    Close,
    /// The range cannot be written (the message says why).
    Abandon(&'static str),
}

impl RangePending {
    /// What `range_end` does to this range.
    pub fn at_end(&self) -> AtEnd {
        at_end(
            self.bounds.is_some(),
            self.awaiting.is_some(),
            self.has_kernel_step(),
        )
    }
}

/// The decision at a boundary's close, for a range opened by `--launch-range` (`bounded`),
/// with a step in flight on another thread, holding a kernel step.
pub fn at_end(bounded: bool, in_flight: bool, has_kernel_step: bool) -> AtEnd {
    match (bounded, in_flight, has_kernel_step) {
        (true, _, _) => AtEnd::Nothing,
        (false, true, _) => AtEnd::Abandon(
            "the range ended while one of its steps was still being issued (another thread)",
        ),
        (false, false, false) => {
            AtEnd::Abandon("the range holds no kernel launch (a range capture needs one)")
        }
        (false, false, true) => AtEnd::Close,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_format::{Dispatch, HostWait};

    const R: LaunchRange = LaunchRange { first: 3, last: 5 };

    const OPEN_AT_3: OpenRange<'static> = OpenRange {
        refusal: None,
        in_flight: false,
        last_launch: Some(3),
        steps: 1,
        other_context: false,
    };

    #[test]
    fn a_step_on_another_context_refuses_the_range() {
        let elsewhere = OpenRange {
            other_context: true,
            ..OPEN_AT_3
        };
        assert!(refusal(at_enter(Some(R), 4, Some(elsewhere))).contains("another CUDA context"));
        let AtCall::Refuse(why) = at_call(CallClass::Step, "cuMemcpyAsync", elsewhere) else {
            panic!("refused")
        };
        assert!(why.contains("cuMemcpyAsync") && why.contains("another CUDA context"));
        assert_eq!(
            at_call(CallClass::Ignore, "cuCtxGetCurrent", elsewhere),
            AtCall::Ignore
        );
    }

    fn refusal(d: AtEnter) -> String {
        match d {
            AtEnter::Refuse(why) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_launch_range_opens_at_its_first_launch_and_steps_on_any_stream() {
        assert_eq!(at_enter(Some(R), 3, None), AtEnter::Open);
        assert_eq!(at_enter(Some(R), 4, Some(OPEN_AT_3)), AtEnter::Step);
        assert_eq!(at_enter(Some(R), 4, None), AtEnter::Skip, "abandoned");
        assert!(closes(Some(R), 5) && !closes(Some(R), 4));
        let refused = OpenRange {
            refusal: Some("cuMemAlloc_v2"),
            ..OPEN_AT_3
        };
        assert_eq!(
            refusal(at_enter(Some(R), 4, Some(refused))),
            "cuMemAlloc_v2"
        );
    }

    #[test]
    fn a_boundary_range_takes_any_launch_while_open_and_never_closes_at_one() {
        assert_eq!(at_enter(None, 17, None), AtEnter::Skip, "not open");
        let fresh = OpenRange {
            refusal: None,
            in_flight: false,
            last_launch: None,
            steps: 2,
            other_context: false,
        };
        assert_eq!(
            at_enter(None, 17, Some(fresh)),
            AtEnter::Step,
            "a first kernel step after ops"
        );
        assert!(!closes(None, 17));
    }

    #[test]
    fn a_launch_while_a_step_is_in_flight_or_a_skipped_index_refuses_the_range() {
        let busy = OpenRange {
            in_flight: true,
            ..OPEN_AT_3
        };
        assert!(refusal(at_enter(Some(R), 4, Some(busy))).contains("one step at a time"));
        // Launch 4 was counted but was not a step (a graph node): 5 does not follow 3.
        assert!(refusal(at_enter(Some(R), 5, Some(OPEN_AT_3))).contains("launch 4"));
    }

    #[test]
    fn calls_inside_a_range_step_refuse_now_or_after_the_step_in_flight() {
        assert_eq!(
            at_call(CallClass::Step, "cuMemcpyAsync", OPEN_AT_3),
            AtCall::Step
        );
        assert_eq!(
            at_call(CallClass::Ignore, "cuStreamQuery", OPEN_AT_3),
            AtCall::Ignore
        );
        let AtCall::Refuse(why) = at_call(CallClass::Refuse, "cuMemAlloc_v2", OPEN_AT_3) else {
            panic!("refused now");
        };
        assert!(
            why.starts_with("cuMemAlloc_v2 was called inside the range"),
            "{why}"
        );
        let busy = OpenRange {
            in_flight: true,
            ..OPEN_AT_3
        };
        assert!(matches!(
            at_call(CallClass::Refuse, "cuMemFree_v2", busy),
            AtCall::Defer(_)
        ));
        let AtCall::Defer(why) = at_call(CallClass::Step, "cuMemsetD32_v2", busy) else {
            panic!("deferred");
        };
        assert!(why.contains("one step at a time"), "{why}");
        let refused = OpenRange {
            refusal: Some("earlier"),
            ..OPEN_AT_3
        };
        assert_eq!(
            at_call(CallClass::Step, "cuMemcpy", refused),
            AtCall::Refuse("earlier".into())
        );
    }

    #[test]
    fn a_boundary_closes_its_own_range_when_it_holds_a_kernel_and_nothing_is_in_flight() {
        assert_eq!(at_end(false, false, true), AtEnd::Close);
        let AtEnd::Abandon(why) = at_end(false, false, false) else {
            panic!("abandoned");
        };
        assert!(why.contains("no kernel launch"), "{why}");
        let AtEnd::Abandon(why) = at_end(false, true, true) else {
            panic!("abandoned");
        };
        assert!(why.contains("still being issued"), "{why}");
        assert_eq!(
            at_end(true, false, true),
            AtEnd::Nothing,
            "--launch-range closes at launch J"
        );
    }

    fn kernel(ns: Option<u64>) -> Step {
        Step::kernel(
            7,
            Dispatch {
                kernel_name: "k".into(),
                module_id: 0,
                api: kreplay_format::LaunchApi::LaunchKernel,
                grid: [1, 1, 1],
                block: [1, 1, 1],
                cluster: [0; 3],
                dynamic_shared_bytes: 0,
                attributes: Vec::new(),
                params: Vec::new(),
                arg_bytes: Vec::new(),
                pointer_words: Vec::new(),
                original_duration_ns: ns,
            },
        )
    }

    #[test]
    fn a_ranges_time_is_its_kernel_steps_and_its_launches_their_indices() {
        let steps = [
            Step::op(0, Op::HostWait(HostWait::Context)),
            kernel(Some(1_000)),
            kernel(None),
            kernel(Some(250)),
        ];
        let digests = vec![None; 4];
        let info = summarise(
            "nvtx-range layer.2 #1",
            &steps,
            (Some(10), Some(12)),
            Vec::new(),
            digests.clone(),
        );
        assert_eq!(info.origin, "nvtx-range layer.2 #1");
        assert_eq!(info.launches, Some((10, 12)));
        assert_eq!(info.original_duration_ns, Some(1_250));
        assert_eq!(info.digests, digests);
        let untimed = summarise("x", &[kernel(None)], (None, None), Vec::new(), Vec::new());
        assert_eq!(untimed.original_duration_ns, None);
        assert_eq!(untimed.launches, None);
        assert_eq!(launch_range_origin(R), "launch-range 3:5");
        assert_eq!(
            label(Some(R), "launch-range 3:5"),
            "range capture of launches 3:5"
        );
        assert_eq!(
            label(None, "profiler-range #1"),
            "range capture of profiler-range #1"
        );
    }
}
