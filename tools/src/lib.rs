//! The logic behind the `kreplay` command that other front ends share (the Python package):
//! the description of a capture (`info`) and the replay report (`play --json`).

#![forbid(unsafe_code)]

pub mod describe;
pub mod params;
pub mod profile;
pub mod report;
