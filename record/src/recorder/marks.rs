//! What the calling thread is doing for kreplay, in thread-local flags: the router reads them
//! to keep the recorder's own driver calls and launches out of the application's.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set in the child of a `fork`: the recorder's threads did not survive it and its locks may
/// be held by threads that no longer exist, so the child records nothing, joins nothing and
/// writes no report (an `exec` that follows loads a fresh recorder). Both front ends' entry
/// points read it.
pub(super) static FORKED: AtomicBool = AtomicBool::new(false);

/// Whether this process is the child of a `fork` (see `FORKED`).
pub(super) fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// Whether this thread's thread-locals that the router reads are gone or going: a callback
/// during the thread's exit, or the process's (the Sanitizer API calls back then, seen on the
/// H200 under JAX and Triton; libraries' exit handlers call the driver and NVTX after the main
/// thread's were destroyed). Only thread-locals with a destructor can be gone (a `Cell<bool>`
/// never is), and they go in no set order: each one is asked. The CUPTI front end drops a
/// driver call then, the Sanitizer front end any callback, and the NVTX follower its event.
pub(super) fn thread_locals_gone() -> bool {
    !(super::units::alive() && super::kernels::alive() && crate::nvtx::alive())
}

thread_local! {
    /// Inside the ENTER callback of a launch.
    pub(super) static IN_LAUNCH: Cell<bool> = const { Cell::new(false) };
    /// Set while the recorder itself calls the driver (its scratch allocations are not the
    /// application's).
    pub(super) static SELF_CALLS: Cell<bool> = const { Cell::new(false) };
    /// Set while the recorder loads, looks up or runs `profile --variant`'s code: a module
    /// loaded then (also lazily, at the variant's first launch) is the variant's, which defines
    /// the application's kernel name and must not be taken for its module.
    pub(super) static VARIANT_CODE: Cell<bool> = const { Cell::new(false) };
}

/// Whether a module loaded on this thread now is `profile --variant`'s.
pub(super) fn variant_code() -> bool {
    VARIANT_CODE.with(|f| f.get())
}

/// Whether this thread's driver calls are the recorder's now.
pub(super) fn self_calls() -> bool {
    SELF_CALLS.with(|f| f.get())
}

/// Sets a thread-local flag for its lifetime; put back as it was on drop, also when a panic
/// unwinds through (the callback catches it), so a flag can never stay stuck, and a nested
/// guard (a batch counted from a callback that marked the recorder's calls already) leaves the
/// outer one's flag set.
pub(super) struct FlagGuard(&'static std::thread::LocalKey<Cell<bool>>, bool);

impl FlagGuard {
    /// Sets the flag; `None` when it was set already (a re-entrant call).
    pub(super) fn set(flag: &'static std::thread::LocalKey<Cell<bool>>) -> Option<FlagGuard> {
        // No guard is built on re-entry: one built and dropped (`then_some` builds eagerly)
        // would clear the flag the outer call still holds.
        if flag.with(|f| f.replace(true)) {
            None
        } else {
            Some(FlagGuard(flag, false))
        }
    }

    /// Sets the flag whether or not it was set; put back on drop.
    pub(super) fn force(flag: &'static std::thread::LocalKey<Cell<bool>>) -> FlagGuard {
        FlagGuard(flag, flag.with(|f| f.replace(true)))
    }
}

impl Drop for FlagGuard {
    fn drop(&mut self) {
        let before = self.1;
        self.0.with(|f| f.set(before));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static FLAG: Cell<bool> = const { Cell::new(false) };
    }

    #[test]
    fn flags_are_cleared_even_when_a_panic_unwinds() {
        {
            let g = FlagGuard::set(&FLAG).expect("first entry");
            assert!(FLAG.with(|f| f.get()));
            assert!(FlagGuard::set(&FLAG).is_none(), "re-entry is refused");
            assert!(
                FLAG.with(|f| f.get()),
                "a refused re-entry leaves the outer call's flag set"
            );
            drop(g);
        }
        assert!(!FLAG.with(|f| f.get()));
        let r = std::panic::catch_unwind(|| {
            let _g = FlagGuard::force(&FLAG);
            panic!("inside the callback");
        });
        assert!(r.is_err());
        assert!(!FLAG.with(|f| f.get()), "the unwind cleared the flag");
        {
            let _outer = FlagGuard::force(&FLAG);
            {
                let _inner = FlagGuard::force(&FLAG);
            }
            assert!(
                FLAG.with(|f| f.get()),
                "a nested guard leaves the outer one's flag set"
            );
        }
        assert!(!FLAG.with(|f| f.get()));
    }
}
