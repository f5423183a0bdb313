//! `kreplay-record`: the library the CUDA driver injects into the application
//! (`CUDA_INJECTION64_PATH`). It subscribes to CUPTI callbacks, counts launches, snapshots the
//! matching dispatch and writes it as a `.krr` in the background.
//!
//! Nothing here may disturb the application: every entry point catches panics, every failure is
//! reported on stderr and in the process report, and the application runs on.

#![deny(clippy::undocumented_unsafe_blocks)]

/// Prints one diagnostic line on stderr, ignoring failure: a full disk or a closed pipe on
/// the application's stderr must never become a panic inside the application.
macro_rules! diag {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
pub(crate) use diag;

pub mod allocations;
pub mod capture;
pub mod compare_later;
pub mod counter_batch;
pub mod device_resources;
pub mod device_table;
pub mod error;
pub mod footprint;
pub mod graph;
pub mod graph_plan;
pub mod graph_track;
pub mod in_place;
pub mod inflight;
pub mod interval_union;
pub mod known_regions;
pub mod launch;
pub mod looked_up;
pub mod nvtx;
pub mod nvtx_events;
pub mod pass_timeline;
pub mod profile;
pub mod ptx;
pub mod quiet;
pub mod range;
pub mod range_calls;
pub mod range_digest;
pub mod range_held;
pub mod range_ops;
pub mod range_select;
pub mod range_spans;
pub mod range_timing;
pub mod range_touched;
pub mod reachable;
pub mod readback;
mod recorder;
pub mod retaining_alloc;
pub mod scratch_rule;
pub mod settle;
pub mod snapshot;
mod spans;
pub mod spares;
pub mod spill;
mod staging_rings;
pub mod textures;
pub mod touched_debug;
pub mod touched_run;
pub mod trace;
pub mod variant;
pub mod variant_check;
pub mod walk;

/// The library's Rust allocations: a capture's large blocks kept between captures, in pages
/// touched off the application's time (see `retaining_alloc`); the rest glibc's, as before.
#[global_allocator]
static ALLOCATOR: retaining_alloc::RetainingAllocator = retaining_alloc::RetainingAllocator;

pub use nvtx::InitializeInjectionNvtx2;
pub use recorder::InitializeInjection;
