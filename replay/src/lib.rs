//! `kreplay-replay`: the only crate that touches CUDA. Raw driver and CUPTI calls are wrapped
//! once (`driver`, `cupti`, `vmm`) into `Result`-returning functions and owning types.

pub mod cache;
pub mod cupti;
pub mod driver;
pub mod image;
pub mod profiler;
pub mod timing;
pub mod vmm;

pub use driver::{ensure_driver, CudaError, DriverUnavailable};
