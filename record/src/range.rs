//! A range capture in flight: launches I..J of the process captured as one file. The first
//! step is taken like a single dispatch (`capture::before_launch`); each later step adds the
//! memory it reaches that the range does not hold yet (still at its range-start state: no
//! earlier step could reach it) and is timed on its own; the last step's EXIT takes the
//! post-state of everything held (`capture::after_launch`), which is the range's write set.
//! The decisions are pure functions at the end of this file.

use std::time::Instant;

use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{ctx_synchronize, Stream};
use kreplay_format::{MemoryKind, Step};
use kreplay_protocol::config::LaunchRange;

use crate::capture::{dispatch_of, CodeObject, Pending, PreInput};
use crate::error::RecordError;
use crate::footprint::{self, Reads};
use crate::snapshot::{take_snapshots, Snapshot};
use crate::walk::Walk;

/// A range between its first launch's ENTER and its last launch's EXIT.
pub struct RangePending {
    /// The capture as the first step opened it; its snapshots grow with the range.
    pub pending: Pending,
    pub range: LaunchRange,
    /// The stream every step must be issued on (its handle value); the range's first launch
    /// index is `range.first`.
    pub stream: u64,
    /// The steps so far; the last one's duration is known at its EXIT.
    pub steps: Vec<Step>,
    /// Code objects of the steps, other than the first step's (`pending.data.module`).
    pub modules: Vec<CodeObject>,
    /// The launch whose EXIT is awaited (its correlation id), if one is in flight.
    pub awaiting: Option<u32>,
    /// The launch index of the latest step.
    pub last_launch: u64,
    /// Why the range cannot be captured, once something inside it said so; the unit is
    /// abandoned at the next point where that is safe (no timer armed on the stream).
    pub refusal: Option<String>,
}

/// One later step at its ENTER.
pub struct StepInput<'a> {
    pub pre: PreInput<'a>,
    pub stream: u64,
    pub launch_index: u64,
}

impl RangePending {
    /// Opens the range with its first step, taken as a single dispatch.
    pub fn open(pending: Pending, range: LaunchRange, stream: u64) -> RangePending {
        let last_launch = range.first;
        let first = Step::kernel(stream, pending.data.dispatch.clone());
        RangePending {
            awaiting: Some(pending.correlation),
            last_launch,
            pending,
            range,
            stream,
            steps: vec![first],
            modules: Vec::new(),
            refusal: None,
        }
    }

    /// A later step's ENTER: snapshots what it reaches that the range does not hold, adds its
    /// module and arms its timer (last: the stream stays gated until the launch is queued).
    pub fn grow(&mut self, input: StepInput<'_>) -> Result<(), RecordError> {
        let began = Instant::now();
        let pre = input.pre;
        ctx_synchronize().map_err(RecordError::cuda("synchronising before a range step"))?;
        let Reads { walk, textures } = self.pending.footprint.reads(&footprint::Step {
            args: &pre.args,
            layout: &pre.layout,
            function: &pre.function,
            module_objects: pre.module_objects,
            allocations: &pre.allocations,
        })?;
        if !textures.objects.is_empty() || !textures.arrays.is_empty() {
            return Err(RecordError::Range(format!(
                "step {} uses texture or surface objects, which range captures do not hold yet",
                self.steps.len()
            )));
        }
        let module_id = pre.module.module_id;
        self.add_memory(&walk, module_id)?;
        if module_id != self.pending.data.module.module_id
            && !self.modules.iter().any(|m| m.module_id == module_id)
        {
            self.modules.push(pre.module);
        }
        self.pending.data.notes.extend(walk.notes.iter().cloned());
        // SAFETY: inside the launch callback that decoded the view.
        let app_stream = unsafe { pre.view.foreign_stream() };
        let timer = GatedTimer::new().map_err(RecordError::cuda("creating the timer"))?;
        // The previous step's timer goes before the new one is armed: freeing its gate word
        // synchronises the context, which would wait forever behind a gate already armed
        // (measured on the H200: the application hung at launch 2 of a range).
        drop(std::mem::replace(&mut self.pending.timer, timer));
        self.pending
            .timer
            .arm(&app_stream)
            .map_err(RecordError::cuda("arming the timer"))?;
        self.pending.stream = app_stream;
        self.pending.correlation = pre.correlation;
        self.awaiting = Some(pre.correlation);
        self.last_launch = input.launch_index;
        let dispatch = dispatch_of(
            pre.view,
            pre.kernel_name,
            module_id,
            &pre.layout,
            pre.args,
            walk.pointer_words,
        );
        self.steps.push(Step::kernel(input.stream, dispatch));
        self.pending.data.stall_ns += began.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// Snapshots the regions of `walk` the range does not hold and adds the pointer slots.
    fn add_memory(&mut self, walk: &Walk, module_id: u32) -> Result<(), RecordError> {
        let data = &mut self.pending.data;
        let held = held_spans(&data.snapshots);
        let reached: Vec<(u64, u64)> = walk.regions.iter().map(|r| (r.base, r.size)).collect();
        let places = place_regions(&held, &reached).map_err(RecordError::Range)?;
        let fresh = Walk {
            regions: walk
                .regions
                .iter()
                .zip(&places)
                .filter(|(_, p)| matches!(p, Place::New(_)))
                .map(|(r, _)| r.clone())
                .collect(),
            ..Walk::default()
        };
        let stream = Stream::new().map_err(RecordError::cuda("creating the snapshot stream"))?;
        let (mut snapshots, mut globals) =
            take_snapshots(&fresh, module_id, &stream, None, &mut None)?;
        stream
            .synchronize()
            .map_err(RecordError::cuda("waiting for the snapshot copies"))?;
        let first_new = data.snapshots.len() as u32;
        for s in &mut snapshots {
            s.region.region_id += first_new;
        }
        for g in &mut globals {
            g.region_id += first_new;
        }
        data.snapshots.extend(snapshots);
        data.globals.extend(globals);
        data.pointer_slots
            .extend(remap_slots(&walk.pointer_slots, &places, first_new));
        data.pointer_slots.sort_unstable();
        data.pointer_slots.dedup();
        Ok(())
    }

    /// The awaited step's EXIT, for every step but the last: its in-app duration.
    pub fn finish_step(&mut self) -> Result<(), RecordError> {
        let p = &mut self.pending;
        p.timer
            .finish(&p.stream)
            .map_err(RecordError::cuda("stopping the timer"))?;
        let done = ctx_synchronize().map_err(RecordError::KernelFailed);
        p.measuring = None;
        done?;
        let ns = p.timer.elapsed_ns().ok();
        if let Some(d) = self.steps.last_mut().and_then(Step::dispatch_mut) {
            d.original_duration_ns = ns;
        }
        self.awaiting = None;
        Ok(())
    }

    /// The last step's EXIT: the post-state of everything held; the capture to write.
    pub fn close(mut self) -> Result<crate::capture::CaptureData, RecordError> {
        crate::capture::after_launch(&mut self.pending)?;
        let last_ns = self.pending.data.dispatch.original_duration_ns;
        if let Some(d) = self.steps.last_mut().and_then(Step::dispatch_mut) {
            d.original_duration_ns = last_ns;
        }
        let mut data = self.pending.data;
        // The capture's dispatch is its first step (the format's rule).
        if let Some(d) = self.steps.iter().find_map(Step::dispatch) {
            data.dispatch = d.clone();
        }
        data.steps = self.steps;
        data.step_modules = self.modules;
        Ok(data)
    }
}

/// (address, size) of the regions the range holds, by region id (a snapshot's position is
/// its region id); a CUDA array has no address, so it holds nothing a step can reach: (0, 0).
fn held_spans(snapshots: &[Snapshot]) -> Vec<(u64, u64)> {
    snapshots
        .iter()
        .map(|s| match s.region.kind {
            MemoryKind::CudaArray => (0, 0),
            _ => (s.device_addr, s.region.size),
        })
        .collect()
}

/// What a range does at a launch's ENTER inside its launch indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtEnter {
    /// The range's first launch: the unit opens.
    Open,
    /// A later launch of an open range: the unit grows.
    Grow,
    /// The range cannot be captured (the message says why); the unit is abandoned.
    Refuse(String),
    /// The range is not open (it was abandoned, or began before the recorder saw it).
    Skip,
}

/// What the decision at a launch's ENTER needs to know of the open range.
#[derive(Debug, Clone, Copy)]
pub struct OpenRange<'a> {
    /// The range's stream (handle value).
    pub stream: u64,
    /// Why it cannot be captured, if something already said so.
    pub refusal: Option<&'a str>,
    /// A step's EXIT is still awaited.
    pub in_flight: bool,
    /// The launch index of its latest step.
    pub last_launch: u64,
}

impl RangePending {
    pub fn view(&self) -> OpenRange<'_> {
        OpenRange {
            stream: self.stream,
            refusal: self.refusal.as_deref(),
            in_flight: self.awaiting.is_some(),
            last_launch: self.last_launch,
        }
    }
}

/// The decision at the ENTER of launch `launch_index` (inside `range`) on `stream`.
pub fn at_enter(
    range: LaunchRange,
    launch_index: u64,
    stream: u64,
    open: Option<OpenRange<'_>>,
) -> AtEnter {
    let Some(o) = open else {
        return if launch_index == range.first {
            AtEnter::Open
        } else {
            AtEnter::Skip
        };
    };
    if let Some(why) = o.refusal {
        return AtEnter::Refuse(why.to_string());
    }
    if o.in_flight {
        // Its timer gates the stream until its EXIT: two steps at once cannot be told apart.
        return AtEnter::Refuse(format!(
            "launch {launch_index} began while launch {} was still being issued (another thread); range captures take one launch at a time yet",
            o.last_launch
        ));
    }
    if launch_index != o.last_launch + 1 {
        return AtEnter::Refuse(format!(
            "launch {} of the range is not a kernel launch it can hold (a graph node?)",
            o.last_launch + 1
        ));
    }
    if o.stream != stream {
        return AtEnter::Refuse(format!(
            "launch {launch_index} is on another stream ({stream:#x}) than the range's ({:#x}); range captures hold one stream yet",
            o.stream
        ));
    }
    AtEnter::Grow
}

/// Whether the launch at `launch_index` is the range's last (its EXIT closes the unit).
pub fn closes(range: LaunchRange, launch_index: u64) -> bool {
    launch_index == range.last
}

/// Driver calls (by name) that change memory, order streams, allocate, or launch work other
/// than through the launch entry points the recorder captures (those never come here):
/// inside a range they would be steps, which this version captures only for kernel launches,
/// so they refuse it.
pub fn refuses_range(function: &str) -> bool {
    const PREFIXES: [&str; 14] = [
        "cuMemcpy",
        "cuMemset",
        "cuEventRecord",
        "cuStreamWaitEvent",
        "cuStreamWaitValue",
        "cuStreamWriteValue",
        "cuStreamBatchMemOp",
        "cuLaunch",
        "cuStreamAddCallback",
        "cuGraphLaunch",
        "cuMemAlloc",
        "cuMemFree",
        "cuMemMap",
        "cuMemUnmap",
    ];
    PREFIXES.iter().any(|p| function.starts_with(p)) || function.starts_with("cuMemPrefetch")
}

/// Where a region a step reaches goes in the range's regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Inside held region `id`, at `delta` bytes from its start.
    Held { id: u32, delta: u64 },
    /// Not held yet: the `n`th new region of this step.
    New(u32),
}

/// Places each reached (address, size) among the held ones (held index = region id). A
/// reached region that overlaps a held one without lying inside it is refused: its bytes
/// would be held twice with different range-start states.
pub fn place_regions(held: &[(u64, u64)], reached: &[(u64, u64)]) -> Result<Vec<Place>, String> {
    let mut fresh = 0u32;
    let mut fresh_spans: Vec<(u64, u64)> = Vec::new();
    let mut places = Vec::with_capacity(reached.len());
    for &(base, size) in reached {
        let end = base.saturating_add(size);
        let inside = held
            .iter()
            .position(|&(b, s)| base >= b && end <= b.saturating_add(s));
        if let Some(id) = inside {
            places.push(Place::Held {
                id: id as u32,
                delta: base - held[id].0,
            });
            continue;
        }
        let overlaps = |&(b, s): &(u64, u64)| base < b.saturating_add(s) && b < end;
        if held.iter().chain(&fresh_spans).any(overlaps) {
            return Err(format!(
                "a step reaches {size} bytes at {base:#x}, which overlap memory an earlier step reached with other bounds; not supported in range captures yet"
            ));
        }
        fresh_spans.push((base, size));
        places.push(Place::New(fresh));
        fresh += 1;
    }
    Ok(places)
}

/// A step's pointer slots (region = index into its walk) in the range's region ids, new
/// regions numbered from `first_new`.
pub fn remap_slots(slots: &[(u32, u64)], places: &[Place], first_new: u32) -> Vec<(u32, u64)> {
    slots
        .iter()
        .filter_map(|&(r, off)| match places.get(r as usize)? {
            Place::Held { id, delta } => Some((*id, off + delta)),
            Place::New(n) => Some((first_new + n, off)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: LaunchRange = LaunchRange { first: 3, last: 5 };

    const OPEN_AT_3: OpenRange<'static> = OpenRange {
        stream: 0,
        refusal: None,
        in_flight: false,
        last_launch: 3,
    };

    fn refusal(d: AtEnter) -> String {
        match d {
            AtEnter::Refuse(why) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_range_opens_at_its_first_launch_and_grows_on_its_stream() {
        assert_eq!(at_enter(R, 3, 0, None), AtEnter::Open);
        assert_eq!(at_enter(R, 4, 0, Some(OPEN_AT_3)), AtEnter::Grow);
        assert_eq!(at_enter(R, 4, 0, None), AtEnter::Skip, "abandoned");
        assert!(closes(R, 5) && !closes(R, 4));
    }

    #[test]
    fn a_second_stream_or_an_earlier_refusal_refuses_the_range() {
        let why = refusal(at_enter(R, 4, 0x77, Some(OPEN_AT_3)));
        assert!(why.contains("another stream"), "{why}");
        let refused = OpenRange {
            refusal: Some("cuMemcpy_v2"),
            ..OPEN_AT_3
        };
        assert_eq!(refusal(at_enter(R, 4, 0, Some(refused))), "cuMemcpy_v2");
    }

    #[test]
    fn a_launch_while_a_step_is_in_flight_or_a_skipped_index_refuses_the_range() {
        let busy = OpenRange {
            in_flight: true,
            ..OPEN_AT_3
        };
        assert!(refusal(at_enter(R, 4, 0, Some(busy))).contains("one launch at a time"));
        // Launch 4 was counted but was not a step (a graph node): 5 does not follow 3.
        assert!(refusal(at_enter(R, 5, 0, Some(OPEN_AT_3))).contains("launch 4"));
    }

    #[test]
    fn memory_and_stream_operations_refuse_a_range() {
        for f in [
            "cuMemcpyHtoD_v2",
            "cuMemcpyAsync",
            "cuMemsetD32_v2",
            "cuEventRecord",
            "cuStreamWaitEvent",
            "cuMemAlloc_v2",
            "cuMemFreeAsync",
            "cuGraphLaunch",
            "cuLaunchHostFunc",
            "cuLaunchGrid",
        ] {
            assert!(refuses_range(f), "{f}");
        }
        // Launches through the captured entry points are steps and never asked about.
        for f in [
            "cuCtxSynchronize",
            "cuStreamSynchronize",
            "cuCtxGetCurrent",
            "cuModuleGetFunction",
            "cuLibraryLoadData",
        ] {
            assert!(!refuses_range(f), "{f}");
        }
    }

    #[test]
    fn reached_regions_are_placed_inside_held_ones_or_new() {
        let held = [(0x1000, 0x100), (0x4000, 0x1000)];
        let reached = [(0x4010, 0x10), (0x8000, 0x40), (0x1000, 0x100), (0x9000, 8)];
        let places = place_regions(&held, &reached).expect("placed");
        assert_eq!(
            places,
            vec![
                Place::Held { id: 1, delta: 0x10 },
                Place::New(0),
                Place::Held { id: 0, delta: 0 },
                Place::New(1)
            ]
        );
        let slots = remap_slots(&[(0, 8), (1, 16), (3, 0)], &places, 2);
        assert_eq!(slots, vec![(1, 0x18), (2, 16), (3, 0)]);
    }

    #[test]
    fn an_empty_held_span_holds_nothing() {
        // A CUDA array's slot among the held regions: ids stay positions, nothing lands there.
        let places =
            place_regions(&[(0, 0), (0x1000, 0x100)], &[(0x1000, 8), (0, 8)]).expect("placed");
        assert_eq!(places, vec![Place::Held { id: 1, delta: 0 }, Place::New(0)]);
    }

    #[test]
    fn a_region_straddling_a_held_one_is_refused() {
        let err = place_regions(&[(0x1000, 0x100)], &[(0x10f0, 0x20)]).unwrap_err();
        assert!(err.contains("overlap"), "{err}");
        // Two new regions of one step that overlap each other too.
        assert!(place_regions(&[], &[(0, 16), (8, 16)]).is_err());
    }
}
