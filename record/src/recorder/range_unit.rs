//! The range unit: launches I..J of the process captured as one file (`crate::range`). It
//! lives in the process-wide unit map (a range spans launches, and a launch of the range may
//! come from any thread that issues on its stream): it opens at launch I's ENTER, grows at
//! each later launch's ENTER, times each step at its EXIT and closes at launch J's EXIT. Any
//! other memory or stream operation the application makes while it is open refuses it; the
//! application's calls all run as they would without kreplay.

use kreplay_cuda::cupti_events::ApiCall;
use kreplay_protocol::config::LaunchRange;

use super::marks::{FlagGuard, SELF_CALLS};
use super::state::Recorder;
use super::units::{self, Unit, UnitKey};
use crate::capture::PreInput;
use crate::error::RecordError;
use crate::launch::{self, LaunchView};
use crate::range::{at_enter, closes, refuses_range, AtEnter, RangePending, StepInput};

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

fn describe(range: LaunchRange) -> String {
    format!("range capture of launches {}:{}", range.first, range.last)
}

impl Recorder {
    /// The ENTER of a launch inside the range's indices (its thread marked as the recorder's).
    pub(super) fn range_enter(
        &self,
        view: &LaunchView,
        name: String,
        launch_index: u64,
        correlation: u32,
    ) {
        let Some(range) = self.config.launch_range else {
            return;
        };
        let stream = view.stream as u64;
        let outcome = units::with_shared(RANGE_KEY, |unit| {
            let open = match unit.as_deref() {
                Some(Unit::Range(r)) => Some(r.view()),
                _ => None,
            };
            match (at_enter(range, launch_index, stream, open), unit) {
                (AtEnter::Grow, Some(Unit::Range(r))) => self
                    .grow(r, view, name, (correlation, launch_index), stream)
                    .map(|()| None)
                    .map_err(|e| format!("at launch {launch_index}: {e}")),
                (AtEnter::Refuse(why), _) => Err(format!("at launch {launch_index}: {why}")),
                (AtEnter::Open, _) => Ok(Some(name)),
                _ => Ok(None),
            }
        });
        match outcome {
            Ok(Some(name)) => self.open_range(view, name, range, launch_index, correlation),
            Ok(None) => {}
            Err(why) => self.abandon_range(range, &why),
        }
    }

    fn open_range(
        &self,
        view: &LaunchView,
        name: String,
        range: LaunchRange,
        launch_index: u64,
        correlation: u32,
    ) {
        match self.begin(view, name, 1, launch_index, correlation) {
            Ok(p) => units::open_shared(
                RANGE_KEY,
                Box::new(RangePending::open(p, range, view.stream as u64)),
            ),
            Err(e) => self.error(format!(
                "{} failed at launch {launch_index}: {e}; the application continues",
                describe(range)
            )),
        }
    }

    /// A later step: its arguments and module, then the range grows by what it reaches.
    fn grow(
        &self,
        r: &mut RangePending,
        view: &LaunchView,
        name: String,
        (correlation, launch_index): (u32, u64),
        stream: u64,
    ) -> Result<(), RecordError> {
        // SAFETY: inside the launch callback that decoded the view.
        let function = unsafe { view.foreign_function() };
        let layout = function.parameter_layout();
        // SAFETY: the view was decoded in this very callback; the layout belongs to its function.
        let args =
            unsafe { launch::argument_bytes(view, &layout) }.ok_or(RecordError::NoArguments)?;
        let target = self.target(&name)?;
        r.grow(StepInput {
            pre: PreInput {
                view,
                function,
                args,
                layout,
                kernel_name: name,
                module: target.module,
                module_objects: &target.objects,
                allocations: target.allocations,
                correlation,
                open_file: None,
            },
            stream,
            launch_index,
        })
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
            if r.awaiting != Some(correlation) {
                return AtExit::Nothing;
            }
            let launch_index = r.last_launch;
            if closes(r.range, launch_index) {
                return AtExit::Close;
            }
            if let Err(e) = r.finish_step() {
                return AtExit::Abandon(format!("at launch {launch_index}: {e}"));
            }
            match &r.refusal {
                Some(why) => AtExit::Abandon(why.clone()),
                None => AtExit::Stepped,
            }
        });
        let Some(range) = self.config.launch_range else {
            return;
        };
        match at_exit {
            AtExit::Nothing | AtExit::Stepped => {}
            AtExit::Abandon(why) => self.abandon_range(range, &why),
            AtExit::Close => {
                let Some(Unit::Range(r)) = units::close_shared(RANGE_KEY) else {
                    return;
                };
                match r.close() {
                    Ok(data) => self.sink.write(data),
                    Err(e) => self.error(format!(
                        "{} failed after its last launch: {e}",
                        describe(range)
                    )),
                }
            }
        }
    }

    /// A driver call of the application's (not a launch) at its ENTER: inside an open range,
    /// one that changes memory or orders streams refuses the range, before it runs.
    pub(super) fn on_call_in_range(&self, call: &ApiCall<'_>) {
        // Cheap first: every driver call of a range recording comes here.
        if !units::any_shared() {
            return;
        }
        let Some(function) = call.function_name().and_then(|n| n.to_str().ok()) else {
            return;
        };
        if !refuses_range(function) {
            return;
        }
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        let now = units::with_shared(RANGE_KEY, |unit| {
            let Some(Unit::Range(r)) = unit else {
                return None;
            };
            let after = r.last_launch;
            let why = format!(
                "{function} was called inside the range (after launch {after}); range captures hold kernel launches only yet"
            );
            if r.awaiting.is_none() {
                return Some(why);
            }
            // A step is in flight on another thread: its timer is armed on the stream, so the
            // unit goes at that step's EXIT.
            r.refusal.get_or_insert(why);
            None
        });
        if let (Some(why), Some(range)) = (now, self.config.launch_range) {
            self.abandon_range(range, &why);
        }
    }

    /// Drops the range unit (its device scratch freed as the recorder's calls) and says why.
    fn abandon_range(&self, range: LaunchRange, why: &str) {
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        drop(units::close_shared(RANGE_KEY));
        self.error(format!(
            "{} abandoned: {why}; the application continues",
            describe(range)
        ));
    }

    /// A selection boundary opened the range (an NVTX push, `cuProfilerStart`): every launch
    /// and op from here is a step, until `range_end`. (The seam between the selection and the
    /// unit; the unit's boundary mode is being built: until then the capture is refused.)
    #[allow(dead_code)] // called by the boundary selection (rec-select), landing beside it
    pub(super) fn range_begin(&self, origin: String) {
        self.error(format!(
            "range capture of {origin}: ranges opened by a boundary are not captured by this build; the application continues"
        ));
    }

    /// A selection boundary closed the range (the matching pop, `cuProfilerStop`).
    #[allow(dead_code)]
    pub(super) fn range_end(&self) {}

    /// At the process's exit: a range still open never reached its last launch.
    pub(super) fn range_at_exit(&self) {
        let (Some(range), true) = (self.config.launch_range, units::any_shared()) else {
            return;
        };
        if let Some(Unit::Range(r)) = units::close_shared(RANGE_KEY) {
            let last = r.last_launch;
            // The contexts may be torn down already: the unit's device memory goes with the
            // process rather than through a driver that may be gone.
            std::mem::forget(r);
            self.error(format!(
                "{} is incomplete: the process ended after launch {last}",
                describe(range)
            ));
        }
    }
}
