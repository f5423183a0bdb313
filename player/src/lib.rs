//! `kreplay-player`: a `.krr` capture made live in this process. The engine plans the replay
//! from the capture; the session materialises the plan (primary context, memory mapped back
//! at the captured addresses or moved, module loaded, globals restored) and runs the engine's
//! pass loop and counters. `play` is the whole replay as the CLI and the Python package run
//! it; `describe` is what `kreplay info --json` and Python's `info` print.

#![deny(clippy::undocumented_unsafe_blocks)]

/// Moved to the engine (the recorder compares a variant's output with it too); the path stays.
pub use kreplay_engine::compare;
pub mod describe;
pub mod diff;
mod divergence;
pub mod extract;
pub mod farm;
pub mod html_report;
pub mod kernel_name;
mod kernels;
pub mod pack;
pub mod params;
mod play;
mod play_options;
pub mod range;
mod range_metrics;
mod range_steps;
mod report;
pub mod run_record;
pub mod runs_compare;
mod save;
mod save_step;
mod session;
pub mod step_diff;
mod trace;
pub mod trace_build;
pub mod trace_check;
pub mod trace_events;
pub mod units;

pub use kreplay_engine::counters::{
    list_metrics, MetricInfo, MetricRequest, MetricValue, MetricsReport, StepMetrics,
};
pub use kreplay_engine::pass_trace::GpuSpan;
pub use kreplay_engine::plan::fixed_ranges;
pub use kreplay_engine::repro::{Content as ReproContent, ReproError, Reproducer};
pub use kreplay_engine::tool::{CTool, PassTool, ToolError};
pub use kreplay_engine::verify::{Mismatch, VerifyOutcome};
pub use kreplay_engine::{
    AddressMode, CacheState, CodeChoice, CodeSource, MetricsError, OpenOptions, Placement,
    PlayError, PristineStore, RunOptions, Verification,
};
pub use play::{
    device_heap_note, play, verification_failed, PlayFailure, PlayObserver, PlayOutcome,
};
pub use play_options::{PlayOptions, SaveOutput, SaveStep};
pub use report::PlayJson;
pub use save::SavedOutput;
pub use save_step::{save_step_problem, SavedStep};
pub use session::{FilePages, PlayReport, Session, ToolRun, TOOL_MAX_PASSES};
pub use trace::trace_of;
#[cfg(test)]
mod testdata;
