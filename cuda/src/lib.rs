//! `kreplay-cuda`: the CUDA layer, the only crate that calls CUDA. Following cudarc's
//! layering: raw driver and CUPTI calls are wrapped once into `Result`-returning functions;
//! handle-owning types keep their handles private; a handle that comes from the application
//! (a launch's function or stream) enters only through an `unsafe fn from_raw`/`from_launch`
//! whose contract says it is live. libcuda and libcupti load lazily: `ensure_driver` /
//! `Device::open` (and `cupti::cupti_present`) come first.
//!
//! Device addresses are raw numbers: every function that takes one and reaches the memory
//! behind it (copies, memsets, launches, the chunk kernels, texture objects over linear memory)
//! is an `unsafe fn` with a `# Safety` section (the contracts are in `memory`), because under
//! unified addressing a device address can be this process's own host memory. Queries that
//! only ask the driver about an address (`pointer`) are safe.
//!
//! This crate depends on no other kreplay crate: it has its own types for what the driver
//! describes (`texture::ArrayDesc` and friends), and the crates that also read captures
//! convert at the seam.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cache;
pub mod callbacks;
pub mod chunks;
pub mod context;
pub mod cupti;
pub mod cupti_events;
pub mod device;
pub mod error;
pub mod graph;
pub mod heap;
pub mod hostmap;
pub mod image;
pub mod launch;
pub mod many;
pub mod memory;
pub mod module;
pub mod owned;
pub mod pointer;
pub mod profiler;
#[cfg(test)]
mod ptx_entries;
pub mod sanitizer;
pub mod step_ops;
pub mod steps;
pub mod stream;
pub mod texture;
pub mod timing;
pub mod touched_patch;
pub mod vmm;

/// The raw driver bindings (types and constants; calls go through this crate's wrappers).
pub use cudarc::driver::sys;

pub use context::{ctx_synchronize, ContextHandle, PrimaryContext};
pub use device::{device_count, driver_version, ensure_driver, memory_info, Device, DeviceProps};
pub use error::{CuResult, CudaError, DriverUnavailable};
pub use launch::{launch, KernelArgs, LaunchConfig};
pub use memory::{
    copy_dtod_async, copy_dtoh, copy_htod, DeviceBuffer, DownloadRing, PinnedBuffer, UploadRing,
};
pub use module::{AsFunction, ForeignFunction, ForeignModule, Function, Module};
pub use stream::{AsStream, Event, ForeignStream, Stream};
