//! The recorder's locks are taken through `lock`.

use std::sync::{Mutex, MutexGuard};

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock was caught already; the data is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
