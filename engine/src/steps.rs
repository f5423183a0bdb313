//! A range capture's steps, ready to run again and again on restored memory: kernels, copies,
//! fills, event records and waits, host waits, on one replay stream per recorded stream. What
//! runs where and in which order is decided once (`step_plan::StepPlan`, then `pass_commands`:
//! pure, tested on the CPU); `RangeSteps` only carries the commands out.

use kreplay_cuda::step_ops::{copy_dtoh_async, copy_htod_async, fill_async, wait_event};
use kreplay_cuda::{AsFunction, Event, PinnedBuffer, Stream};

use crate::error::PlayError;
use crate::kernel::Kernel;
use crate::step_plan::{Ordering, StepPlan};

/// What one step does on its stream.
pub enum StepAction<F: AsFunction> {
    /// The replayer's own kernel (the range's first kernel step, which single-dispatch code
    /// such as counters and tools knows as "the kernel").
    Primary,
    Kernel(Kernel<F>),
    CopyDeviceToDevice {
        dst: u64,
        src: u64,
        bytes: usize,
    },
    /// From a pinned buffer made once holding the recorded bytes.
    CopyHostToDevice {
        dst: u64,
        host: PinnedBuffer,
    },
    /// Into a pinned buffer; `received` is what the application received (checked with
    /// `--verify`).
    CopyDeviceToHost {
        src: u64,
        into: PinnedBuffer,
        received: Vec<u8>,
    },
    Fill {
        dst: u64,
        value: u32,
        element_bytes: u8,
        count: usize,
    },
    /// Ordering only (an event record or wait, a host wait): the plan's `Ordering` says what.
    Order,
}

/// An event a command names: the pass's fork, a stream's join, or a recorded event's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventRef {
    Fork,
    /// The join event of stream slot `s` (1..).
    Join(usize),
    Recorded(usize),
}

/// One thing a pass queues or waits for, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Step `step`'s own work on stream slot `slot` (with its timer events when timed).
    Work {
        step: usize,
        slot: usize,
    },
    Record {
        event: EventRef,
        slot: usize,
    },
    Wait {
        slot: usize,
        event: EventRef,
    },
    /// The host waits: for a stream, every range stream, or a recorded event.
    SyncStream(usize),
    SyncAll,
    SyncEvent(usize),
}

impl Command {
    /// Whether the host blocks here (the timing gate must be open first).
    pub fn is_host_wait(&self) -> bool {
        matches!(
            self,
            Command::SyncStream(_) | Command::SyncAll | Command::SyncEvent(_)
        )
    }
}

/// Step `i`'s commands: its work, then what it orders.
pub fn step_commands(plan: &StepPlan, i: usize) -> Vec<Command> {
    let slot = plan.step_streams.get(i).copied().unwrap_or(0);
    let mut out = vec![Command::Work { step: i, slot }];
    match plan.orderings.get(i).copied().unwrap_or(Ordering::None) {
        Ordering::None => {}
        Ordering::Record(e) => out.push(Command::Record {
            event: EventRef::Recorded(e),
            slot,
        }),
        Ordering::Wait(e) => out.push(Command::Wait {
            slot,
            event: EventRef::Recorded(e),
        }),
        Ordering::SyncStream => out.push(Command::SyncStream(slot)),
        Ordering::SyncAll => out.push(Command::SyncAll),
        Ordering::SyncEvent(e) => out.push(Command::SyncEvent(e)),
    }
    out
}

/// A whole pass: the other streams forked from the pass stream (after the gate, which the
/// caller queued before), every step in order, the other streams joined back (before the end
/// timer). A single-stream range adds nothing around its steps.
pub fn pass_commands(plan: &StepPlan) -> Vec<Command> {
    let others = 1..plan.streams.len();
    let mut out = Vec::new();
    if plan.forks() {
        out.push(Command::Record {
            event: EventRef::Fork,
            slot: 0,
        });
        out.extend(others.clone().map(|slot| Command::Wait {
            slot,
            event: EventRef::Fork,
        }));
    }
    for i in 0..plan.step_streams.len() {
        out.extend(step_commands(plan, i));
    }
    for slot in others {
        out.push(Command::Record {
            event: EventRef::Join(slot),
            slot,
        });
        out.push(Command::Wait {
            slot: 0,
            event: EventRef::Join(slot),
        });
    }
    out
}

/// A range's steps made live: their actions, the replay streams but the pass stream (which
/// the `Replayer` owns), the replay events, and per-step timer events.
pub struct RangeSteps<F: AsFunction> {
    // Field order is drop order: the actions (kernels, pinned buffers) before the streams.
    actions: Vec<StepAction<F>>,
    plan: StepPlan,
    commands: Vec<Command>,
    /// Streams of slots 1.. (slot 0 is the pass stream).
    streams: Vec<Stream>,
    events: Vec<Event>,
    fork: Event,
    /// Per stream slot 1..: its join event.
    joins: Vec<Event>,
    /// Per step: start and stop events when it can be timed.
    timers: Vec<Option<(Event, Event)>>,
    /// Whether passes record the timer events (`--per-step`).
    timing: bool,
}

impl<F: AsFunction> RangeSteps<F> {
    /// `actions` and `timed` have one entry per step of `plan`.
    ///
    /// # Safety
    /// Each action, run any number of times after the steps before it (and after a restore),
    /// touches only memory it may: kernels as `Replayer::new` requires; the device addresses
    /// of copies and fills lie in memory the replay placed for the range, *readable* and
    /// *writable* (`kreplay_cuda::memory`) while these steps live.
    pub unsafe fn new(
        actions: Vec<StepAction<F>>,
        plan: StepPlan,
        timed: &[bool],
    ) -> Result<RangeSteps<F>, PlayError> {
        let streams = plan.streams[1.min(plan.streams.len())..]
            .iter()
            .map(|s| Stream::with_priority(s.priority))
            .collect::<Result<Vec<_>, _>>()?;
        let events = (0..plan.events)
            .map(|_| Event::untimed())
            .collect::<Result<Vec<_>, _>>()?;
        let joins = (0..streams.len())
            .map(|_| Event::untimed())
            .collect::<Result<Vec<_>, _>>()?;
        let timers = (0..actions.len())
            .map(|i| match timed.get(i) {
                Some(true) => Ok(Some((Event::new()?, Event::new()?))),
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>, PlayError>>()?;
        Ok(RangeSteps {
            commands: pass_commands(&plan),
            actions,
            plan,
            streams,
            events,
            fork: Event::untimed()?,
            joins,
            timers,
            timing: false,
        })
    }

    /// Whether later passes record per-step times (steps given timers at `new`).
    pub fn time_steps(&mut self, on: bool) {
        self.timing = on;
    }

    /// Per step, whether a pass times it.
    pub fn timed(&self) -> Vec<bool> {
        self.timers
            .iter()
            .map(|t| self.timing && t.is_some())
            .collect()
    }

    /// The recorded priority of the pass stream (slot 0), which the replayer's stream takes.
    pub fn pass_priority(&self) -> i32 {
        self.plan.streams.first().map_or(0, |s| s.priority)
    }

    pub fn len(&self) -> usize {
        self.actions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// Queues a whole pass after whatever `pass` holds (the gate, the start event);
    /// `before_host_wait` is called before the host blocks on a host-wait step.
    pub fn run_pass(
        &mut self,
        primary: &mut Kernel<F>,
        pass: &Stream,
        before_host_wait: &mut dyn FnMut(),
    ) -> Result<(), PlayError> {
        let commands = std::mem::take(&mut self.commands);
        let ran = commands
            .iter()
            .try_for_each(|c| self.execute(*c, primary, pass, before_host_wait));
        self.commands = commands;
        ran
    }

    /// Runs step `i` alone (its work and its ordering) and waits for every range stream.
    pub fn run_step_and_wait(
        &mut self,
        i: usize,
        primary: &mut Kernel<F>,
        pass: &Stream,
    ) -> Result<(), PlayError> {
        for c in step_commands(&self.plan, i) {
            self.execute(c, primary, pass, &mut || {})?;
        }
        self.synchronize_all(pass)
    }

    /// Waits for every range stream.
    pub fn synchronize_all(&self, pass: &Stream) -> Result<(), PlayError> {
        pass.synchronize()?;
        for s in &self.streams {
            s.synchronize()?;
        }
        Ok(())
    }

    fn stream<'a>(&'a self, slot: usize, pass: &'a Stream) -> &'a Stream {
        match slot.checked_sub(1).and_then(|i| self.streams.get(i)) {
            Some(s) => s,
            None => pass,
        }
    }

    fn event(&self, e: EventRef) -> Option<&Event> {
        match e {
            EventRef::Fork => Some(&self.fork),
            EventRef::Join(slot) => slot.checked_sub(1).and_then(|i| self.joins.get(i)),
            EventRef::Recorded(i) => self.events.get(i),
        }
    }

    fn execute(
        &mut self,
        c: Command,
        primary: &mut Kernel<F>,
        pass: &Stream,
        before_host_wait: &mut dyn FnMut(),
    ) -> Result<(), PlayError> {
        if c.is_host_wait() {
            before_host_wait();
        }
        match c {
            Command::Work { step, slot } => self.work(step, slot, primary, pass)?,
            Command::Record { event, slot } => {
                if let Some(e) = self.event(event) {
                    e.record(self.stream(slot, pass))?;
                }
            }
            Command::Wait { slot, event } => {
                if let Some(e) = self.event(event) {
                    wait_event(self.stream(slot, pass), e)?;
                }
            }
            Command::SyncStream(slot) => self.stream(slot, pass).synchronize()?,
            Command::SyncAll => self.synchronize_all(pass)?,
            Command::SyncEvent(i) => {
                if let Some(e) = self.events.get(i) {
                    e.synchronize()?;
                }
            }
        }
        Ok(())
    }

    /// Step `step`'s own work on its stream, between its timer events when timed.
    fn work(
        &mut self,
        step: usize,
        slot: usize,
        primary: &mut Kernel<F>,
        pass: &Stream,
    ) -> Result<(), PlayError> {
        let stream = match slot.checked_sub(1).and_then(|i| self.streams.get(i)) {
            Some(s) => s,
            None => pass,
        };
        let timer = self
            .timers
            .get(step)
            .and_then(|t| t.as_ref())
            .filter(|_| self.timing);
        if let Some((start, _)) = timer {
            start.record(stream)?;
        }
        if let Some(action) = self.actions.get_mut(step) {
            // SAFETY: what each action touches was vouched for at `RangeSteps::new` (and the
            // primary kernel at `Replayer::new`).
            unsafe { run_action(action, primary, stream)? };
        }
        if let Some((_, stop)) = timer {
            stop.record(stream)?;
        }
        Ok(())
    }

    /// Per step, its time in the pass that last completed (`None`: untimed).
    pub fn step_times(&self) -> Result<Vec<Option<u64>>, PlayError> {
        self.timers
            .iter()
            .map(|t| match t {
                Some((start, stop)) if self.timing => {
                    stop.synchronize()?;
                    Ok(Some(stop.elapsed_ns_since(start)?))
                }
                _ => Ok(None),
            })
            .collect()
    }

    /// Per timed step of the pass that last completed: its index, start event and time
    /// (for a trace's spans; empty unless passes time their steps).
    pub fn step_starts(&self) -> Result<Vec<(usize, &Event, u64)>, PlayError> {
        let mut out = Vec::new();
        for (i, t) in self.timers.iter().enumerate() {
            if let Some((start, stop)) = t.as_ref().filter(|_| self.timing) {
                stop.synchronize()?;
                out.push((i, start, stop.elapsed_ns_since(start)?));
            }
        }
        Ok(out)
    }

    /// The device-to-host copy steps whose bytes differ from what the application received,
    /// after a pass completed.
    pub fn copy_mismatches(&self) -> Vec<usize> {
        self.actions
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match a {
                StepAction::CopyDeviceToHost { into, received, .. } => {
                    (into.as_slice() != received.as_slice()).then_some(i)
                }
                _ => None,
            })
            .collect()
    }
}

/// Queues one action on `stream`.
///
/// # Safety
/// The action's memory meets `RangeSteps::new`'s contract (the primary kernel,
/// `Replayer::new`'s), and no buffer of the action is touched by the host until `stream`
/// completes the work queued here.
unsafe fn run_action<F: AsFunction>(
    action: &mut StepAction<F>,
    primary: &mut Kernel<F>,
    stream: &Stream,
) -> Result<(), PlayError> {
    // SAFETY: every arm queues work under this function's contract.
    unsafe {
        match action {
            StepAction::Primary => launch(primary, stream)?,
            StepAction::Kernel(k) => launch(k, stream)?,
            StepAction::CopyDeviceToDevice { dst, src, bytes } => {
                kreplay_cuda::copy_dtod_async(*dst, *src, *bytes, stream)?
            }
            StepAction::CopyHostToDevice { dst, host } => copy_htod_async(*dst, host, stream)?,
            StepAction::CopyDeviceToHost { src, into, .. } => copy_dtoh_async(into, *src, stream)?,
            StepAction::Fill {
                dst,
                value,
                element_bytes,
                count,
            } => fill_async(*dst, *value, *element_bytes, *count, stream)?,
            StepAction::Order => {}
        }
    }
    Ok(())
}

/// # Safety
/// As `kreplay_cuda::launch`: the kernel touches only memory it may.
unsafe fn launch<F: AsFunction>(k: &mut Kernel<F>, stream: &Stream) -> Result<(), PlayError> {
    // SAFETY: this function's contract.
    unsafe { kreplay_cuda::launch(&k.function, &k.config, &mut k.args, stream)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step_plan::StreamSlot;

    fn plan(step_streams: Vec<usize>, orderings: Vec<Ordering>, streams: usize) -> StepPlan {
        StepPlan {
            streams: (0..streams as u64)
                .map(|handle| StreamSlot {
                    handle,
                    priority: 0,
                })
                .collect(),
            step_streams,
            orderings,
            events: 1,
        }
    }

    // Catches: a single-stream range given a fork or join (synchronisation added around the
    // pass), or a step's ordering queued before its work.
    #[test]
    fn a_single_stream_pass_is_its_steps_alone() {
        let p = plan(vec![0, 0], vec![Ordering::None, Ordering::Record(0)], 1);
        assert_eq!(
            pass_commands(&p),
            vec![
                Command::Work { step: 0, slot: 0 },
                Command::Work { step: 1, slot: 0 },
                Command::Record {
                    event: EventRef::Recorded(0),
                    slot: 0
                },
            ]
        );
    }

    // Catches: the other streams not forked from the pass stream (they would run before the
    // restore), not joined back before the end timer, or joined into the wrong stream; and
    // synchronisation added between steps.
    #[test]
    fn other_streams_fork_after_the_gate_and_join_before_the_timer() {
        let p = plan(
            vec![0, 1, 0],
            vec![Ordering::Record(0), Ordering::Wait(0), Ordering::SyncAll],
            2,
        );
        let c = pass_commands(&p);
        assert_eq!(
            c,
            vec![
                Command::Record {
                    event: EventRef::Fork,
                    slot: 0
                },
                Command::Wait {
                    slot: 1,
                    event: EventRef::Fork
                },
                Command::Work { step: 0, slot: 0 },
                Command::Record {
                    event: EventRef::Recorded(0),
                    slot: 0
                },
                Command::Work { step: 1, slot: 1 },
                Command::Wait {
                    slot: 1,
                    event: EventRef::Recorded(0)
                },
                Command::Work { step: 2, slot: 0 },
                Command::SyncAll,
                Command::Record {
                    event: EventRef::Join(1),
                    slot: 1
                },
                Command::Wait {
                    slot: 0,
                    event: EventRef::Join(1)
                },
            ]
        );
        assert_eq!(c.iter().filter(|c| c.is_host_wait()).count(), 1);
    }

    // Catches: a step run alone losing its ordering (a later step-by-step digest taken
    // before the wait it needs), or the wrong stream.
    #[test]
    fn a_step_alone_keeps_its_ordering() {
        let p = plan(vec![0, 1], vec![Ordering::None, Ordering::SyncStream], 2);
        assert_eq!(
            step_commands(&p, 1),
            vec![Command::Work { step: 1, slot: 1 }, Command::SyncStream(1)]
        );
        assert_eq!(
            step_commands(&p, 0),
            vec![Command::Work { step: 0, slot: 0 }]
        );
    }
}
