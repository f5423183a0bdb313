//! `kreplay-format`: the `.krr` capture log.
//!
//! A log is a fixed header, a stream of typed, checksummed events, an index, an END event and
//! a trailer (`docs/FORMAT.md`). [`CaptureWriter`] streams one out; [`Capture::parse`] reads one
//! from bytes without I/O; [`verify`] checks everything; [`salvage`] rescues an incomplete one.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod absent;
pub mod chunk;
pub mod codec;
pub mod cubin;
pub mod error;
pub mod events;
pub mod extents;
pub mod fatbin;
pub mod file;
pub mod layout;
pub mod observe;
pub mod pack;
pub mod pack_range;
pub mod ptx;
pub mod range;
pub mod range_rules;
pub mod reader;
pub mod redact_values;
pub mod rules;
pub mod salvage;
pub mod salvage_extents;
pub mod salvage_into;
pub mod salvage_range;
pub mod steps;
pub mod units;
pub mod verdict;
pub mod writer;

pub use chunk::{DEFAULT_CHUNK_SIZE, DEFAULT_LEVEL};
pub use error::{FormatError, Result};
pub use events::*;
pub use extents::{RegionExtents, MIN_EXTENT_PAGE};
pub use layout::{ChunkEncoding, MemoryState, VERSION_MAJOR, VERSION_MINOR};
pub use observe::{Observer, Phase};
pub use pack::{pack, pack_observed, Element, PackOptions, PackReport, ParamShape, ParamType};
pub use reader::{
    scan, scan_observed, verify, verify_observed, Capture, ChunkRef, ScanReport, VerifyReport,
};
pub use salvage::{replay_blockers, salvage, salvage_verified, SalvageReport};
pub use salvage_into::{salvage_into, SalvageRefused};
pub use steps::*;
pub use verdict::Verdict;
pub use writer::{CaptureHead, CaptureTail, CaptureWriter, WriterOptions};
