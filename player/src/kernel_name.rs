//! A kernel as the reports name it (`info --json`, `play --json`): both `describe` and the
//! range report use it, so it lives apart from either.

use serde::Serialize;

use kreplay_protocol::config::demangle;

/// A kernel as `info --json` and `play --json` name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kernel {
    /// Demangled.
    pub name: String,
    pub mangled: String,
}

impl Kernel {
    pub fn of(mangled: &str) -> Kernel {
        Kernel {
            name: demangle(mangled),
            mangled: mangled.to_string(),
        }
    }
}
