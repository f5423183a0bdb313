//! The range unit: a range of the application's work captured as one file (`crate::range`).
//! It lives in the process-wide unit map (a range spans calls, and its steps may come from
//! any thread). `--launch-range I:J` opens it at launch I's ENTER and closes it at launch J's
//! EXIT; a selection boundary opens it with `range_begin` and closes it with `range_end`.
//! While it is open, every kernel launch and every copy, fill, event record or wait and host
//! wait is a step (taken at its ENTER, finished at its EXIT); any other call that changes
//! memory or orders work abandons it, named, before the call runs. The application's calls
//! all run as they would without kreplay.

use kreplay_cuda::cupti_events::ApiCall;
use kreplay_protocol::config::{LaunchRange, MemoryScope};

use super::marks::{FlagGuard, SELF_CALLS};
use super::modules::Target;
use super::state::Recorder;
use super::units::{self, Unit, UnitKey};
use crate::capture::PreInput;
use crate::error::RecordError;
use crate::launch::{self, LaunchView};
use crate::range::{
    at_call, at_enter, closes, label, launch_range_origin, stream_info, AtCall, AtEnd, AtEnter,
    AwaitedKind, RangePending, StepInput,
};
use crate::range_calls::{classify, stream_key, CallClass};

/// The key of the range in the process-wide units (a process records one range).
const RANGE_KEY: UnitKey = 0;

/// What a launch's EXIT does to the range.
enum AtExit {
    /// Not the awaited step (or no range open).
    Nothing,
    /// A step finished; the range stays open.
    Stepped,
    /// The last step finished: the range closes.
    Close,
    Abandon(String),
}

impl Recorder {
    /// Whether this recording captures a range (by launch indices or between boundaries):
    /// every launch and driver call is then looked at.
    pub(super) fn records_range(&self) -> bool {
        self.config.launch_range.is_some() || self.config.boundary_range.is_some()
    }

    /// The ENTER of a launch the range may hold (its thread marked as the recorder's).
    pub(super) fn range_enter(
        &self,
        view: &LaunchView,
        name: String,
        launch_index: u64,
        correlation: u32,
    ) {
        if !self.records_range() {
            return;
        }
        if self.config.boundary_range.is_some() {
            self.time_launch(view);
        }
        let bounds = self.config.launch_range;
        let outcome = units::with_shared(RANGE_KEY, |unit| {
            let open = match unit.as_deref() {
                Some(Unit::Range(r)) => Some(r.view()),
                _ => None,
            };
            match (at_enter(bounds, launch_index, open), unit) {
                (AtEnter::Step, Some(Unit::Range(r))) => self
                    .kernel_step(r, view, name, (correlation, launch_index))
                    .map(|()| None)
                    .map_err(|e| format!("at launch {launch_index}: {e}")),
                (AtEnter::Refuse(why), _) => Err(format!("at launch {launch_index}: {why}")),
                (AtEnter::Open, _) => Ok(Some(name)),
                _ => Ok(None),
            }
        });
        match (outcome, bounds) {
            (Ok(Some(name)), Some(range)) => {
                let mut r = self.new_range(launch_range_origin(range), Some(range));
                match self.kernel_step(&mut r, view, name, (correlation, launch_index)) {
                    Ok(()) => units::open_shared(RANGE_KEY, Box::new(r)),
                    Err(e) => self.error(format!(
                        "{} failed at launch {launch_index}: {e}; the application continues",
                        r.label()
                    )),
                }
            }
            (Ok(_), _) => {}
            (Err(why), _) => self.abandon_range(&why),
        }
    }

    /// A range about to open: by touched pages under `--memory touched` (on the Sanitizer API).
    fn new_range(&self, origin: String, bounds: Option<LaunchRange>) -> RangePending {
        let r = RangePending::new(origin, bounds);
        if self.config.memory == MemoryScope::Touched && crate::touched_run::front().is_some() {
            r.by_touched_pages()
        } else {
            r
        }
    }

    /// A kernel step: taken as a single dispatch when the range holds nothing yet, else the
    /// range grows by what it reaches.
    fn kernel_step(
        &self,
        r: &mut RangePending,
        view: &LaunchView,
        name: String,
        (correlation, launch_index): (u32, u64),
    ) -> Result<(), RecordError> {
        let key = stream_key(view.stream as u64);
        let stream = match r.streams.iter().find(|s| s.handle == key) {
            Some(s) => *s,
            // SAFETY: the launch in flight names this stream.
            None => unsafe { stream_info(key) }?,
        };
        if !r.holds_anything() {
            let p = self.begin(view, name, (1, launch_index, correlation), true)?;
            r.open_first(p, stream, launch_index);
            return Ok(());
        }
        // SAFETY: inside the launch callback that decoded the view.
        let function = unsafe { view.foreign_function() };
        let layout = function.parameter_layout();
        // SAFETY: the view was decoded in this very callback; the layout belongs to its function.
        let args =
            unsafe { launch::argument_bytes(view, &layout) }.ok_or(RecordError::NoArguments)?;
        let Target {
            module,
            objects,
            allocations,
            device,
        } = self.target(&name, Some(&function))?;
        let seeding = r.pending.is_none();
        let touched = self.touched_launch(view, (&function, &module.image), &args, &layout);
        r.kernel_step(StepInput {
            pre: PreInput {
                view,
                function,
                args,
                layout,
                kernel_name: name,
                module,
                module_objects: &objects,
                allocations,
                correlation,
                open_file: None,
                // A range's step: the range compares its steps itself.
                compare_later: false,
            },
            stream,
            launch_index,
            touched,
        })?;
        if let (true, Some(p)) = (seeding, r.pending.as_mut()) {
            self.describe(&mut p.data, 1, launch_index, device);
        }
        Ok(())
    }

    /// A launch's EXIT that no thread-local unit claimed: the range's awaited step, if it is.
    pub(super) fn range_exit(&self, correlation: u32) {
        if !units::any_shared() {
            return;
        }
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        let at_exit = units::with_shared(RANGE_KEY, |unit| {
            let Some(Unit::Range(r)) = unit else {
                return AtExit::Nothing;
            };
            let awaited = r
                .awaiting
                .is_some_and(|a| a.correlation == correlation && a.kind == AwaitedKind::Kernel);
            if !awaited {
                return AtExit::Nothing;
            }
            let launch_index = r.last_launch.unwrap_or(0);
            if closes(r.bounds, launch_index) {
                return AtExit::Close;
            }
            if let Err(e) = r.finish_kernel() {
                return AtExit::Abandon(format!("at launch {launch_index}: {e}"));
            }
            match &r.refusal {
                Some(why) => AtExit::Abandon(why.clone()),
                None => AtExit::Stepped,
            }
        });
        match at_exit {
            AtExit::Nothing | AtExit::Stepped => {}
            AtExit::Abandon(why) => self.abandon_range(&why),
            AtExit::Close => self.close_range("after its last launch"),
        }
    }

    /// A driver call of the application's (not a launch) at its ENTER, inside an open range:
    /// a step, or a refusal before it runs, or nothing (`range_calls::classify`).
    pub(super) fn on_call_in_range(&self, call: &ApiCall<'_>) {
        let timing = self.config.boundary_range.is_some();
        // Cheap first: every driver call of a range recording comes here.
        if !units::any_shared() && !timing {
            return;
        }
        let Some(function) = call.function_name().and_then(|n| n.to_str().ok()) else {
            return;
        };
        let class = classify(function);
        if timing {
            self.time_call(function, class == CallClass::Ignore);
        }
        if class == CallClass::Ignore || !units::any_shared() {
            return;
        }
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        let now = units::with_shared(RANGE_KEY, |unit| {
            let Some(Unit::Range(r)) = unit else {
                return None;
            };
            match at_call(class, function, r.view()) {
                AtCall::Ignore => None,
                AtCall::Refuse(why) => Some(why),
                // A step is in flight on another thread (its timer may gate a stream): the
                // unit goes at that step's EXIT.
                AtCall::Defer(why) => {
                    r.refusal.get_or_insert(why);
                    None
                }
                AtCall::Step => op_step(r, call, function),
            }
        });
        if let Some(why) = now {
            self.abandon_range(&why);
        }
    }

    /// A driver call's EXIT inside an open range: the awaited op step finishes.
    pub(super) fn on_call_exit_in_range(&self, call: &ApiCall<'_>) {
        if !units::any_shared() {
            return;
        }
        let Some(function) = call.function_name().and_then(|n| n.to_str().ok()) else {
            return;
        };
        if classify(function) != CallClass::Step {
            return;
        }
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        let now = units::with_shared(RANGE_KEY, |unit| {
            let Some(Unit::Range(r)) = unit else {
                return None;
            };
            if r.awaiting.is_none_or(|a| a.correlation != call.correlation) {
                return None;
            }
            if let Err(e) = r.op_exit(call.succeeded(), function) {
                return Some(format!("at {function}: {e}"));
            }
            r.refusal.clone()
        });
        if let Some(why) = now {
            self.abandon_range(&why);
        }
    }

    /// Takes the range unit out and writes its capture (the unit's close takes the
    /// post-state); `when` says where, in a failure's message.
    fn close_range(&self, when: &str) {
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        let Some(Unit::Range(r)) = units::close_shared(RANGE_KEY) else {
            return;
        };
        let name = r.label();
        match r.close() {
            // A boundary range's in-app time is its next instance's (`range_timing`).
            Ok(data) if self.config.boundary_range.is_some() => self.hold_for_timing(data),
            Ok(data) => self.sink.write(data),
            Err(e) => self.error(format!("{name} failed {when}: {e}")),
        }
    }

    /// Drops the range unit (its device scratch freed as the recorder's calls) and says why.
    fn abandon_range(&self, why: &str) {
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        let unit = units::close_shared(RANGE_KEY);
        let name = match &unit {
            Some(Unit::Range(r)) => r.label(),
            _ => label(self.config.launch_range, "a range"),
        };
        drop(unit);
        self.error(format!(
            "{name} abandoned: {why}; the application continues"
        ));
    }

    /// A selection boundary opened the range (an NVTX push, `cuProfilerStart`): every launch
    /// and op from here is a step, until `range_end`.
    pub(super) fn range_begin(&self, origin: String) {
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        if units::with_shared(RANGE_KEY, |unit| unit.is_some()) {
            self.error(format!(
                "range capture of {origin} not taken: another range is still open; the application continues"
            ));
            return;
        }
        units::open_shared(RANGE_KEY, Box::new(self.new_range(origin, None)));
    }

    /// A selection boundary closed the range (the matching pop, `cuProfilerStop`): the
    /// capture is taken from the state now (after synchronising) and written.
    pub(super) fn range_end(&self) {
        if !units::any_shared() {
            return;
        }
        let at_end = units::with_shared(RANGE_KEY, |unit| match unit {
            Some(Unit::Range(r)) => r.at_end(),
            _ => AtEnd::Nothing,
        });
        match at_end {
            AtEnd::Nothing => {}
            AtEnd::Abandon(why) => self.abandon_range(why),
            AtEnd::Close => self.close_range("at its end"),
        }
    }

    /// At the process's exit: a range still open never reached its close.
    pub(super) fn range_at_exit(&self) {
        if !self.records_range() || !units::any_shared() {
            return;
        }
        if let Some(Unit::Range(r)) = units::close_shared(RANGE_KEY) {
            let (name, steps) = (r.label(), r.steps.len());
            let after = r.last_launch.map_or(String::new(), |l| {
                format!(", the last kernel step launch {l}")
            });
            // The contexts may be torn down already: the unit's device memory goes with the
            // process rather than through a driver that may be gone. Its first step's window
            // (`quiet`) ends here, or the writers joined next would wait for it forever.
            let mut r = r;
            if let Some(p) = r.pending.as_mut() {
                p.measuring = None;
            }
            std::mem::forget(r);
            self.error(format!(
                "{name} is incomplete: the process ended after {steps} steps{after}"
            ));
        }
    }
}

/// An op step's ENTER; why the range is abandoned, if it is.
fn op_step(r: &mut RangePending, call: &ApiCall<'_>, function: &str) -> Option<String> {
    let Some(op) = call.op() else {
        return Some(format!(
            "{function} was called inside the range and its parameters could not be read"
        ));
    };
    // SAFETY: a stream the range has not seen is the one the application's call in flight
    // names.
    let described = |key| unsafe { stream_info(key) };
    r.op_enter(op, function, call.correlation, described)
        .err()
        .map(|e| format!("at {function}: {e}"))
}
