//! What a range replay decides before touching the GPU: which replay stream each recorded
//! stream becomes, which replay event each recorded event becomes, what ordering each step
//! adds after its work, and which steps are timed. Pure functions of the capture's steps.
//!
//! Streams: one replay stream per recorded stream, in order of first use, except that the
//! stream of the first *kernel* step is slot 0, the pass stream (restore, timing gate, timer
//! events). Every replay stream is created non-blocking with the recorded priority. The
//! recorded legacy default stream (handle 0) and per-thread default stream (handle 2) are
//! mapped to created streams like any other: their implicit synchronisation with the
//! application's blocking streams is not reproduced, only the recorded events order streams
//! (the player issues nothing on the legacy stream, so a blocking replay stream would only
//! have serialised with kreplay's own synchronous copies).

use kreplay_format::{Action, HostWait, Op, Step, StreamInfo};

/// The priority of a replay stream for a recorded stream with no `StreamInfo` (1.2 range
/// captures, or a stream the recorder could not query).
pub const DEFAULT_PRIORITY: i32 = 0;

/// One replay stream: the recorded stream it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSlot {
    pub handle: u64,
    pub priority: i32,
}

/// What a step adds after its own work, on its stream or on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordering {
    None,
    /// Record replay event `e` on the step's stream.
    Record(usize),
    /// The step's stream waits for replay event `e`.
    Wait(usize),
    /// The host waits for the step's stream.
    SyncStream,
    /// The host waits for every range stream (the recorded `cuCtxSynchronize`).
    SyncAll,
    /// The host waits for replay event `e`.
    SyncEvent(usize),
}

/// Where each step of a range runs and what it orders against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepPlan {
    /// Replay streams; slot 0 is the pass stream.
    pub streams: Vec<StreamSlot>,
    /// Per step: its replay stream slot.
    pub step_streams: Vec<usize>,
    /// Per step: what it orders after its work.
    pub orderings: Vec<Ordering>,
    /// Replay events to make (one per recorded event handle that a step records).
    pub events: usize,
}

impl StepPlan {
    /// The plan of `steps` with the recorded `streams` (empty: priorities unknown).
    pub fn new(steps: &[Step], streams: &[StreamInfo]) -> StepPlan {
        let handles = stream_order(steps);
        let slots = handles
            .iter()
            .map(|&handle| StreamSlot {
                handle,
                priority: streams
                    .iter()
                    .find(|s| s.handle == handle)
                    .map_or(DEFAULT_PRIORITY, |s| s.priority),
            })
            .collect();
        let step_streams = steps
            .iter()
            .map(|s| handles.iter().position(|&h| h == s.stream).unwrap_or(0))
            .collect();
        let (orderings, events) = orderings(steps);
        StepPlan {
            streams: slots,
            step_streams,
            orderings,
            events,
        }
    }

    /// Whether the range runs on more than the pass stream (then each pass forks the other
    /// streams from it after the gate and joins them back before the end timer).
    pub fn forks(&self) -> bool {
        self.streams.len() > 1
    }
}

/// Recorded stream handles in slot order: the first kernel step's first, then the others in
/// order of first use.
fn stream_order(steps: &[Step]) -> Vec<u64> {
    let mut order: Vec<u64> = Vec::new();
    if let Some(k) = steps.iter().find(|s| s.dispatch().is_some()) {
        order.push(k.stream);
    }
    for s in steps {
        if !order.contains(&s.stream) {
            order.push(s.stream);
        }
    }
    order
}

/// Per step, its ordering, and how many replay events they use. A wait (stream or host) on an
/// event no earlier step recorded is a no-op: the event had completed when the range began.
fn orderings(steps: &[Step]) -> (Vec<Ordering>, usize) {
    let mut recorded: Vec<u64> = Vec::new();
    let mut out = Vec::with_capacity(steps.len());
    for s in steps {
        let slot_of = |e: u64, recorded: &[u64]| recorded.iter().position(|&r| r == e);
        let o = match &s.action {
            Action::Kernel(_) => Ordering::None,
            Action::Op(Op::RecordEvent { event }) => {
                let slot = slot_of(*event, &recorded).unwrap_or_else(|| {
                    recorded.push(*event);
                    recorded.len() - 1
                });
                Ordering::Record(slot)
            }
            Action::Op(Op::WaitEvent { event }) => {
                slot_of(*event, &recorded).map_or(Ordering::None, Ordering::Wait)
            }
            Action::Op(Op::HostWait(HostWait::Stream)) => Ordering::SyncStream,
            Action::Op(Op::HostWait(HostWait::Context)) => Ordering::SyncAll,
            Action::Op(Op::HostWait(HostWait::Event(event))) => {
                slot_of(*event, &recorded).map_or(Ordering::None, Ordering::SyncEvent)
            }
            Action::Op(_) => Ordering::None,
        };
        out.push(o);
    }
    (out, recorded.len())
}

/// Which steps get events around them for per-step times: the kernel steps, with `per_step`.
pub fn timed_steps(steps: &[Step], per_step: bool) -> Vec<bool> {
    steps
        .iter()
        .map(|s| per_step && s.dispatch().is_some())
        .collect()
}

/// The median of each timed step's times over the passes (`None` for untimed steps).
pub fn step_medians(times: &[Vec<u64>], timed: &[bool]) -> Vec<Option<u64>> {
    timed
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let v = times.get(i).filter(|v| t && !v.is_empty())?;
            let mut s = v.clone();
            s.sort_unstable();
            s.get(s.len() / 2).copied()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    use kreplay_format::Dispatch;

    /// A real dispatch (which one does not matter to the plan).
    fn dispatch() -> Dispatch {
        static D: OnceLock<Dispatch> = OnceLock::new();
        D.get_or_init(|| {
            let mut d = None;
            crate::testdata::capture("cuda-saxpy", |c| d = Some(c.dispatch.clone()));
            d.expect("saxpy's dispatch")
        })
        .clone()
    }

    fn kernel(stream: u64) -> Step {
        Step::kernel(stream, dispatch())
    }

    fn op(stream: u64, op: Op) -> Step {
        Step::op(stream, op)
    }

    // Catches: slot 0 taken from the first step (an op) instead of the first kernel step,
    // or a stream given two slots.
    #[test]
    fn the_first_kernel_steps_stream_is_the_pass_stream() {
        let steps = [
            op(7, Op::RecordEvent { event: 1 }),
            kernel(9),
            kernel(7),
            kernel(9),
        ];
        let p = StepPlan::new(&steps, &[]);
        let handles: Vec<u64> = p.streams.iter().map(|s| s.handle).collect();
        assert_eq!(handles, vec![9, 7]);
        assert_eq!(p.step_streams, vec![1, 0, 1, 0]);
        assert!(p.forks());
    }

    // Catches: a single-stream range made to fork (added synchronisation), or priorities
    // not taken from the recorded stream.
    #[test]
    fn one_stream_adds_nothing_and_priorities_come_from_the_range() {
        let one = StepPlan::new(&[kernel(0), kernel(0)], &[]);
        assert!(!one.forks());
        assert_eq!(one.streams[0].priority, DEFAULT_PRIORITY);
        let info = [StreamInfo {
            handle: 5,
            flags: 1,
            priority: -2,
        }];
        let p = StepPlan::new(&[kernel(0), kernel(5)], &info);
        assert_eq!(
            p.streams[1],
            StreamSlot {
                handle: 5,
                priority: -2
            }
        );
        assert_eq!(p.streams[0].priority, DEFAULT_PRIORITY);
    }

    // Catches: a wait on an event recorded only later in the range made a real wait (it
    // would wait on the previous pass's record), a re-recorded event given a second slot,
    // or host waits mapped to the wrong synchronisation.
    #[test]
    fn events_get_one_slot_each_and_waits_before_any_record_are_no_ops() {
        let steps = [
            op(1, Op::WaitEvent { event: 40 }),
            op(1, Op::HostWait(HostWait::Event(40))),
            kernel(1),
            op(1, Op::RecordEvent { event: 40 }),
            op(2, Op::RecordEvent { event: 50 }),
            op(2, Op::WaitEvent { event: 40 }),
            op(1, Op::RecordEvent { event: 40 }),
            op(2, Op::HostWait(HostWait::Event(50))),
            op(2, Op::HostWait(HostWait::Stream)),
            op(1, Op::HostWait(HostWait::Context)),
        ];
        let p = StepPlan::new(&steps, &[]);
        assert_eq!(
            p.orderings,
            vec![
                Ordering::None,
                Ordering::None,
                Ordering::None,
                Ordering::Record(0),
                Ordering::Record(1),
                Ordering::Wait(0),
                Ordering::Record(0),
                Ordering::SyncEvent(1),
                Ordering::SyncStream,
                Ordering::SyncAll,
            ]
        );
        assert_eq!(p.events, 2);
    }

    // Catches: ops timed, or kernels timed without --per-step.
    #[test]
    fn only_kernel_steps_are_timed_and_only_when_asked() {
        let steps = [kernel(0), op(0, Op::RecordEvent { event: 1 }), kernel(0)];
        assert_eq!(timed_steps(&steps, true), vec![true, false, true]);
        assert_eq!(timed_steps(&steps, false), vec![false; 3]);
    }

    // Catches: a median over unsorted times, or one reported for an untimed step.
    #[test]
    fn step_medians_are_per_timed_step() {
        let times = vec![vec![30, 10, 20], vec![], vec![5, 1]];
        assert_eq!(
            step_medians(&times, &[true, false, true]),
            vec![Some(20), None, Some(5)]
        );
        assert_eq!(step_medians(&times, &[false, false, false]), vec![None; 3]);
    }
}
