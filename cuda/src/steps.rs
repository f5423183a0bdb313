//! A hook the recorder sets for its profile trace (`KREPLAY_DEBUG_PROFILE`): the chunk kernels'
//! calls name their steps (upload, launch, wait, read-back), so that a trace says which driver
//! call of a capture took its time. Unset, a step costs one atomic load.

use std::sync::OnceLock;

static HOOK: OnceLock<fn(&'static str)> = OnceLock::new();

/// Sets the function each step is handed to (the first call wins).
pub fn set_hook(hook: fn(&'static str)) {
    let _ = HOOK.set(hook);
}

/// Names a step to the hook, if one is set.
pub(crate) fn step(what: &'static str) {
    if let Some(hook) = HOOK.get() {
        hook(what);
    }
}
