//! `kreplay-player`: turns a parsed `.krr` capture into a live replay session in this process:
//! primary context, memory mapped back at the captured addresses, module loaded, globals
//! restored; then runs timed, restored, optionally verified passes.

mod attributes;
mod metrics;
mod relocate;
mod save;
mod session;
mod verify;

pub use metrics::{
    list_metrics, MetricInfo, MetricRequest, MetricValue, MetricsError, MetricsReport,
};
pub use save::SavedOutput;
pub use session::{
    fixed_ranges, AddressMode, CacheState, CodeSource, PlayError, PlayOptions, PlayReport,
    PristineStore, Session,
};
pub use verify::{Mismatch, VerifyOutcome};
