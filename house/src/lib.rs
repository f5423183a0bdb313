//! The house rules that CI checks on the source tree (issue #30): no import cycle between the
//! files of any crate, and no function over 100 lines outside tests (save an allowlist that must
//! shrink to empty). `cargo run -q -p kreplay-house -- check` from the repository root.
//!
//! Everything but `workspace` works on a [`sources::Sources`], so the tests run on small
//! in-memory trees.

pub mod allowlist;
pub mod attrs;
pub mod check;
pub mod error;
pub mod imports;
pub mod length;
pub mod modtree;
pub mod refs;
pub mod sources;
pub mod tarjan;
pub mod workspace;

pub use check::{check, Report};
pub use error::HouseError;
