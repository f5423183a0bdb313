//! The boundaries the application marks (NVTX pushes and pops, `cuProfilerStart` /
//! `cuProfilerStop`) handed to what follows them: the range selection of `record
//! --nvtx-range` / `--profiler-range` (`crate::range_select`, which decides; the range unit
//! opens and closes on its decisions) and the instance spans of `list --ranges`
//! (`crate::range_spans`).

use std::sync::Mutex;

use kreplay_cuda::cupti::sys::CUpti_driver_api_trace_cbid_enum as C;
use kreplay_protocol::config::{BoundaryRange, Config};
use kreplay_protocol::report::ProcessReport;

use super::locking::lock;
use super::marks::{FlagGuard, SELF_CALLS};
use super::state::Recorder;
use super::units;
use crate::nvtx_events::{self, Delivery, NvtxEvent, Observer};
use crate::range_select::{AtExit, Boundary, Decision, RangeSelect};
use crate::range_spans::RangeSpans;

const PROFILER_START: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuProfilerStart as u32;
const PROFILER_STOP: u32 = C::CUPTI_DRIVER_TRACE_CBID_cuProfilerStop as u32;

/// The profiler boundary a driver call is (`cudaProfilerStart` calls `cuProfilerStart`).
fn profiler_boundary(callback_id: u32) -> Option<Boundary<'static>> {
    match callback_id {
        PROFILER_START => Some(Boundary::ProfilerStart),
        PROFILER_STOP => Some(Boundary::ProfilerStop),
        _ => None,
    }
}

/// The selection `config` asks for (record mode with a boundary range).
pub(super) fn selection_of(config: &Config) -> Option<Mutex<RangeSelect>> {
    config
        .boundary_range
        .as_ref()
        .map(|r| Mutex::new(RangeSelect::new(r)))
}

/// The spans `config` asks for (`list --ranges`).
pub(super) fn spans_of(config: &Config) -> Option<Mutex<RangeSpans>> {
    config.list_ranges.then(|| Mutex::new(RangeSpans::new()))
}

/// Whether NVTX's pushes and pops matter to `config`.
fn follows_nvtx(config: &Config) -> bool {
    config.list_ranges || matches!(config.boundary_range, Some(BoundaryRange::Nvtx { .. }))
}

/// Why a selected range that opened before CUDA was up is not captured.
fn opened_too_early(origin: &str) -> String {
    format!(
        "range capture of {origin}: the range opened before the application initialised CUDA, so it is not captured; the application continues"
    )
}

/// What the exit says of a selection that never captured; `unit_open`: the range unit is
/// still open, and says itself at exit that it is incomplete (with its steps).
fn exit_message(at_exit: AtExit, unit_open: bool) -> Option<String> {
    match at_exit {
        AtExit::Settled => None,
        AtExit::NeverClosed(_) if unit_open => None,
        AtExit::NeverClosed(origin) => Some(format!(
            "range capture of {origin} is incomplete: the range was still open when the process ended"
        )),
        AtExit::NeverOpened { origin, seen } => Some(format!(
            "range capture of {origin}: nothing captured, the application opened that range {seen} time(s)"
        )),
    }
}

impl Recorder {
    /// At start-up: NVTX's events reach `observer` when this recording needs them (those from
    /// before CUDA was up first); otherwise NVTX makes none.
    pub(super) fn follow_nvtx(&self, observer: Observer) {
        if !follows_nvtx(&self.config) {
            return nvtx_events::ignore();
        }
        let left_out = nvtx_events::observe(observer);
        if left_out > 0 {
            self.error(format!(
                "{left_out} NVTX pushes and pops made before the application initialised CUDA were not followed: range instance numbers may be off"
            ));
        }
    }

    /// An NVTX push or pop of the application.
    pub(super) fn on_nvtx(&self, event: &NvtxEvent, delivery: Delivery) {
        if let Some(spans) = &self.spans {
            let launches = self.kernels.with_book(|b| b.counts.launches);
            let mut spans = lock(spans);
            match event {
                NvtxEvent::Push { thread, stack } => {
                    if let Some(pushed) = stack.last() {
                        spans.push(*thread, pushed, launches);
                    }
                }
                NvtxEvent::Pop { thread, index } => spans.pop(*thread, *index, launches),
            }
        }
        let boundary = match event {
            NvtxEvent::Push { thread, stack } => Boundary::Push {
                thread: *thread,
                stack,
            },
            NvtxEvent::Pop { thread, index } => Boundary::Pop {
                thread: *thread,
                index: *index,
            },
        };
        self.at_boundary(boundary, delivery);
    }

    /// A driver call of the application's at its ENTER: a profiler boundary, maybe.
    pub(super) fn on_boundary_call(&self, callback_id: u32) {
        if let Some(boundary) = profiler_boundary(callback_id) {
            self.at_boundary(boundary, Delivery::Now);
        }
    }

    fn at_boundary(&self, boundary: Boundary<'_>, delivery: Delivery) {
        let Some(selection) = &self.selection else {
            return;
        };
        // Decided under the selection's lock, acted on outside it: the unit synchronises.
        let decision = lock(selection).on(boundary);
        // What the range unit calls on the driver is the recorder's, not the application's.
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        match (decision, delivery) {
            (Decision::Nothing, _) => {}
            (Decision::Begin(origin), Delivery::BeforeStart) => {
                lock(selection).give_up();
                self.error(opened_too_early(&origin));
            }
            (Decision::Begin(origin), Delivery::Now) => self.range_begin(origin),
            (Decision::End, _) => self.range_end(),
            (Decision::TimeBegin, _) => self.range_time_begin(),
            (Decision::TimeEnd, _) => self.range_time_end(),
        }
    }

    /// At the process's exit: a selected range that never opened, or never closed.
    pub(super) fn selection_at_exit(&self) {
        let Some(selection) = &self.selection else {
            return;
        };
        let at_exit = lock(selection).at_exit();
        if let Some(msg) = exit_message(at_exit, units::any_shared()) {
            self.error(msg);
        }
    }

    /// `list --ranges`: the instances into the process report, those still open with the
    /// launches up to the last.
    pub(super) fn add_range_spans(&self, report: &mut ProcessReport) {
        let Some(spans) = &self.spans else {
            return;
        };
        let spans = std::mem::take(&mut *lock(spans));
        (report.ranges, report.ranges_left_out) = spans.finish(report.launches);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_protocol::config::env;

    fn config(vars: &[(&str, &str)]) -> Config {
        Config::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .expect("valid settings")
        .expect("a mode is set")
    }

    #[test]
    fn profiler_calls_are_boundaries_and_nothing_else_is() {
        assert_eq!(
            profiler_boundary(PROFILER_START),
            Some(Boundary::ProfilerStart)
        );
        assert_eq!(
            profiler_boundary(PROFILER_STOP),
            Some(Boundary::ProfilerStop)
        );
        let launch = kreplay_cuda::callbacks::cbid::LAUNCH_KERNEL;
        assert_eq!(profiler_boundary(launch), None);
    }

    #[test]
    fn nvtx_is_followed_for_nvtx_ranges_and_listed_ranges_only() {
        let record = |extra: (&str, &str)| config(&[(env::MODE, "record"), extra]);
        assert!(follows_nvtx(&record((env::NVTX_RANGE, "layer"))));
        assert!(!follows_nvtx(&record((env::PROFILER_RANGE, "1"))));
        assert!(!follows_nvtx(&record((env::KERNEL, "saxpy"))));
        assert!(follows_nvtx(&config(&[
            (env::MODE, "list"),
            (env::LIST_RANGES, "1")
        ])));
        assert!(!follows_nvtx(&config(&[(env::MODE, "list")])));
        assert!(selection_of(&record((env::PROFILER_RANGE, "1"))).is_some());
        assert!(selection_of(&record((env::KERNEL, "saxpy"))).is_none());
        assert!(spans_of(&config(&[(env::MODE, "list")])).is_none());
    }

    #[test]
    fn the_exit_names_the_range_and_what_became_of_it() {
        assert_eq!(exit_message(AtExit::Settled, false), None);
        let never_closed = AtExit::NeverClosed("nvtx-range layer #1".into());
        let open = exit_message(never_closed.clone(), false).unwrap();
        assert!(open.contains("nvtx-range layer #1 is incomplete"), "{open}");
        // The open range unit says it itself, with its steps: said once.
        assert_eq!(exit_message(never_closed, true), None);
        let never = exit_message(
            AtExit::NeverOpened {
                origin: "profiler-range #2".into(),
                seen: 1,
            },
            false,
        )
        .unwrap();
        assert!(never.contains("profiler-range #2"), "{never}");
        assert!(never.contains("1 time(s)"), "{never}");
        assert!(
            opened_too_early("nvtx-range x #1").contains("before the application initialised CUDA")
        );
    }
}
