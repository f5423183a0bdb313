//! `kreplay-engine`: what replays a dispatch. A pure plan computed from a capture and the
//! options (`plan`, `restore::WriteSet` over the ranges `write_set` decides), then the parts
//! that run on the GPU and are shared by the player (a capture made live in a fresh process)
//! and the in-process replay service: the one pass loop and the tool API (`tool`), the
//! player's timed passes (`passes`), restore (`restore`), counters (`counters`), verification
//! (`verify`).

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod arrays;
pub mod attributes;
pub mod compare;
pub mod counters;
pub mod error;
pub mod kernel;
pub mod options;
pub mod pass_trace;
pub mod passes;
pub mod plan;
pub mod range_counters;
pub mod relocate;
pub mod repro;
pub mod restore;
pub mod step_plan;
pub mod steps;
pub mod texture_desc;
pub mod tool;
pub mod verify;
pub mod write_set;

#[cfg(test)]
mod testdata;

pub use error::{MetricsError, PlayError};
pub use kernel::Kernel;
pub use options::{
    AddressMode, CacheState, CodeChoice, CodeSource, OpenOptions, Placement, PristineStore,
    RunOptions, Verification,
};
pub use passes::{PassStats, PassTiming, Replayer};
pub use plan::{CodePlan, LaunchPlan, MemoryPlan, PlanError, ReplayPlan, Target};
pub use restore::{RegionPlacement, Restorer, WriteSet};
