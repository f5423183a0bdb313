//! `kreplay-protocol`: the contract between the `kreplay` CLI and the injected recorder. The
//! CLI sets environment variables (`config::env`) that the recorder parses (`config::Config`);
//! the recorder leaves report files (`report`) that the CLI reads. Both sides link this crate,
//! so the CLI never links the injected library.

#![forbid(unsafe_code)]

pub mod boundary;
pub mod config;
pub mod corpus;
pub mod each_kernel;
mod env_word;
pub mod nvtx;
mod placeholders;
pub mod progress;
pub mod report;
pub mod variant;
