//! The logic behind the `kreplay` command that is not printing: the `profile` report's forms,
//! and the figures every text table prints the same way (`figures`).
//! What other front ends share (the description of a capture, the replay and its report)
//! lives in the player crate.

#![forbid(unsafe_code)]

pub mod figures;
pub mod profile;
pub mod profile_trace;
pub mod profile_variant;
