//! A launch of the application: counted at ENTER, where a capture unit opens when it is to be
//! captured; the unit closes at the same launch's EXIT.

use std::ffi::CStr;

use kreplay_cuda::cupti_events::ApiCall;
use kreplay_protocol::config::{short_kernel_name, KeyBy, Mode};

use super::corpus::layout_bytes;
use super::kernels::{self, Execution};
use super::marks::{FlagGuard, SELF_CALLS};
use super::state::Recorder;
use super::units::{self, Unit};
use crate::graph_plan::not_in_graph;
use crate::launch::LaunchView;

/// Whether a launch is made into a stream being captured into a graph: it does not run now,
/// but (and is counted) each time the graph is launched.
fn into_stream_capture(view: &LaunchView) -> bool {
    // SAFETY: inside the launch callback that decoded the view.
    matches!(unsafe { view.foreign_stream() }.is_capturing(), Ok(true))
}

impl Recorder {
    pub(super) fn on_launch_enter(&self, call: &ApiCall<'_>) {
        let Some(view) = call.launch().map(LaunchView::from) else {
            return;
        };
        let symbol = call.symbol().map(CStr::to_bytes);
        let handle = view.function as usize;
        let _loads = super::modules::LaunchLoadSite::enter(self, handle, call.correlation);
        if let Some(stat) = symbol.and_then(|sym| kernels::known_unwanted(handle, sym)) {
            if !into_stream_capture(&view) {
                self.kernels.count_known(stat);
            }
            return;
        }
        let name = match call.symbol() {
            // SAFETY: inside the launch callback that decoded the view.
            None => unsafe { view.foreign_function() }
                .name()
                .unwrap_or_default(),
            Some(s) => s.to_string_lossy().into_owned(),
        };
        if into_stream_capture(&view) {
            return;
        }
        let (is_match, demangled) = self.kernels.matches(&self.config, &name);
        let by_shape = self
            .config
            .each_kernel
            .is_some_and(|e| e.by == KeyBy::Shape);
        let arg_bytes = if is_match && by_shape {
            let _self_calls = FlagGuard::force(&SELF_CALLS);
            // SAFETY: inside the launch callback that decoded the view.
            layout_bytes(&unsafe { view.foreign_function() }.parameter_layout())
        } else {
            0
        };
        let execution = Execution {
            name: &name,
            demangled: &demangled,
            wanted: is_match,
            grid: view.grid,
            block: view.block,
            in_graph: false,
            arg_bytes,
        };
        let (stat, counted) = self
            .kernels
            .with_book(|b| b.count_with_stat(&self.config, &execution));
        if let Some(sym) = symbol {
            kernels::remember(handle, sym, is_match, stat);
        }
        if let Some((launch_index, index)) = counted {
            self.open_unit(
                &view,
                name,
                &demangled,
                (index, launch_index),
                call.correlation,
            );
        }
    }

    /// Opens the capture unit of a launch to be captured (profiled in profile mode).
    fn open_unit(
        &self,
        view: &LaunchView,
        name: String,
        demangled: &str,
        (index, launch_index): (u64, u64),
        correlation: u32,
    ) {
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        if self.records_range() {
            return self.range_enter(view, name, launch_index, correlation);
        }
        if self.config.graph_launch {
            // Only a graph launch's nodes can be captured whole; this match is consumed.
            return self.error(not_in_graph(
                &short_kernel_name(demangled),
                index,
                launch_index,
            ));
        }
        if self.config.mode == Mode::Profile {
            if let Some(p) =
                self.profile_enter(view, name, demangled, (index, launch_index), correlation)
            {
                units::open(correlation, Unit::Profile(p));
            }
            return;
        }
        match self.begin(view, name, (index, launch_index, correlation), false) {
            Ok(p) => units::open(correlation, Unit::Record(Box::new(p))),
            Err(e) => self.error(format!(
                "capture of {} (match {index}) failed: {e}; the application continues",
                short_kernel_name(demangled)
            )),
        }
    }

    /// A launch's EXIT: its unit, if it has one, closes.
    pub(super) fn on_launch_exit(&self, correlation: u32) {
        match units::close(correlation) {
            Some(Unit::Record(p)) => {
                let _self_calls = FlagGuard::force(&SELF_CALLS);
                self.finish(*p);
            }
            Some(Unit::Profile(p)) => self.profile_exit(p),
            // Range units are process-wide, never in this thread's map.
            Some(Unit::Range(_)) => {}
            None if self.records_range() => self.range_exit(correlation),
            None => {}
        }
    }
}
