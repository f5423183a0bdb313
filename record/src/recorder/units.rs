//! Capture units: what the recorder has under way for the application between one callback
//! and a later one. A unit opens at a launch's ENTER and closes at a later callback, keyed by
//! what ties the two together (the CUPTI correlation id, the same at a launch's ENTER and
//! EXIT), so several can be in flight at once. The units of one launch live on the thread
//! that makes it (ENTER and EXIT of a call come on its thread), which also frees a unit
//! whose thread ends before its close.
//!
//! Kinds: a capture of one dispatch written to a file, a dispatch profiled in place, and a
//! range of launches captured as one file. A range spans launches (and may span threads that
//! launch on its stream), so it lives in the process-wide map (`shared`), keyed by the
//! range's first launch index; it opens at its first launch's ENTER, grows at each later
//! launch's ENTER and closes at its last launch's EXIT (`range_unit`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::locking::lock;
use crate::capture::Pending;
use crate::profile::ProfilePending;
use crate::range::RangePending;

/// What ties a unit's open and close together.
pub(super) type UnitKey = u32;

/// A capture unit in flight.
pub(super) enum Unit {
    /// One dispatch captured to a file (`record_unit`): its pre-state is taken, its
    /// post-state follows at EXIT.
    Record(Box<Pending>),
    /// One dispatch profiled in place (`profile_unit`): its passes run at EXIT.
    Profile(Box<ProfilePending>),
    /// Launches I..J captured as one range capture (`range_unit`).
    Range(Box<RangePending>),
}

/// Units in flight, by key (a handful at most: a linear search beats hashing).
pub(super) struct Units<U> {
    open: Vec<(UnitKey, U)>,
}

impl<U> Units<U> {
    pub(super) const fn new() -> Units<U> {
        Units { open: Vec::new() }
    }

    /// Opens a unit under `key`; a unit left under the same key (its close never came) is
    /// given back to be dropped.
    pub(super) fn open(&mut self, key: UnitKey, unit: U) -> Option<U> {
        let left = self.close(key);
        self.open.push((key, unit));
        left
    }

    /// The unit under `key`, to grow.
    #[cfg(test)]
    pub(super) fn get_mut(&mut self, key: UnitKey) -> Option<&mut U> {
        self.open
            .iter_mut()
            .find(|(k, _)| *k == key)
            .map(|(_, u)| u)
    }

    /// Takes the unit under `key` out of flight.
    pub(super) fn close(&mut self, key: UnitKey) -> Option<U> {
        let at = self.open.iter().position(|(k, _)| *k == key)?;
        Some(self.open.swap_remove(at).1)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.open.len()
    }
}

thread_local! {
    static UNITS: RefCell<Units<Unit>> = const { RefCell::new(Units::new()) };
}

/// This thread's units are still there (not during its thread-locals' destruction).
pub(super) fn alive() -> bool {
    UNITS.try_with(|_| ()).is_ok()
}

/// Opens a unit of this thread.
pub(super) fn open(key: UnitKey, unit: Unit) {
    let left = UNITS.with(|u| u.borrow_mut().open(key, unit));
    // Dropped outside the borrow: a unit's drop frees device memory, and nothing it calls may
    // find the map borrowed.
    drop(left);
}

/// Closes this thread's unit under `key`, if one is open.
pub(super) fn close(key: UnitKey) -> Option<Unit> {
    UNITS.with(|u| u.borrow_mut().close(key))
}

/// The process-wide units. Only range units enter it (`open_shared`).
struct Shared(Units<Unit>);

// SAFETY: only `Unit::Range` enters the map (`open_shared`). A range unit holds driver
// handles of the application's context (its stream, events, device scratch), which CUDA lets
// any thread of the process use with that context current; the range is used from the
// callbacks of the application's threads that launch on its stream (the context is current
// there), one at a time under the map's lock.
unsafe impl Send for Shared {}

static SHARED: Mutex<Shared> = Mutex::new(Shared(Units::new()));
/// Whether `SHARED` holds a unit: a launch's EXIT looks there only then.
static SHARED_OPEN: AtomicBool = AtomicBool::new(false);

/// Opens a process-wide range unit.
pub(super) fn open_shared(key: UnitKey, unit: Box<RangePending>) {
    let left = {
        let mut units = lock(&SHARED);
        let left = units.0.open(key, Unit::Range(unit));
        SHARED_OPEN.store(true, Ordering::SeqCst);
        left
    };
    drop(left);
}

/// Whether a process-wide unit is open (cheap: no lock).
pub(super) fn any_shared() -> bool {
    SHARED_OPEN.load(Ordering::SeqCst)
}

/// Runs `f` on the process-wide unit under `key` (none when it is not open), under the map's
/// lock: a range's steps and the calls that refuse it are serialised.
pub(super) fn with_shared<R>(key: UnitKey, f: impl FnOnce(Option<&mut Unit>) -> R) -> R {
    let mut units = lock(&SHARED);
    let unit = units
        .0
        .open
        .iter_mut()
        .find(|(k, _)| *k == key)
        .map(|(_, u)| u);
    f(unit)
}

/// Takes the process-wide unit under `key` out of flight.
pub(super) fn close_shared(key: UnitKey) -> Option<Unit> {
    let mut units = lock(&SHARED);
    let unit = units.0.close(key);
    SHARED_OPEN.store(!units.0.open.is_empty(), Ordering::SeqCst);
    unit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_units_in_flight_close_by_their_own_keys() {
        let mut units = Units::new();
        assert!(units.open(7, "first").is_none());
        assert!(units.open(9, "second").is_none());
        assert_eq!(units.len(), 2);
        assert_eq!(units.close(9), Some("second"));
        assert_eq!(units.close(9), None, "a closed unit is gone");
        assert_eq!(units.close(7), Some("first"));
        assert_eq!(units.len(), 0);
    }

    #[test]
    fn a_close_for_another_key_leaves_the_unit_open() {
        let mut units = Units::new();
        units.open(3, 30);
        assert_eq!(units.close(4), None);
        assert_eq!(units.len(), 1);
        *units.get_mut(3).expect("open") += 1;
        assert_eq!(units.close(3), Some(31), "it grew in flight");
    }

    #[test]
    fn a_unit_reopened_under_its_key_gives_back_the_one_left() {
        let mut units = Units::new();
        units.open(5, "stale");
        assert_eq!(units.open(5, "fresh"), Some("stale"));
        assert_eq!(units.len(), 1);
        assert_eq!(units.close(5), Some("fresh"));
    }
}
