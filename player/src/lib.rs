//! `kreplay-player`: a `.krr` capture made live in this process. The engine plans the replay
//! from the capture; the session materialises the plan (primary context, memory mapped back
//! at the captured addresses or moved, module loaded, globals restored) and runs the engine's
//! pass loop and counters.

mod save;
mod session;

pub use kreplay_engine::counters::{
    list_metrics, MetricInfo, MetricRequest, MetricValue, MetricsReport,
};
pub use kreplay_engine::plan::fixed_ranges;
pub use kreplay_engine::repro::{Content as ReproContent, ReproError, Reproducer};
pub use kreplay_engine::tool::{CTool, PassTool, ToolError};
pub use kreplay_engine::verify::{Mismatch, VerifyOutcome};
pub use kreplay_engine::{
    AddressMode, CacheState, CodeChoice, CodeSource, MetricsError, OpenOptions, Placement,
    PlayError, PristineStore, RunOptions, Verification,
};
pub use save::SavedOutput;
pub use session::{PlayReport, Session, ToolRun, TOOL_MAX_PASSES};
#[cfg(test)]
mod testdata;
