//! Capture units: what the recorder has under way for the application between one callback
//! and a later one. A unit opens at a launch's ENTER and closes at a later callback, keyed by
//! what ties the two together (the CUPTI correlation id, the same at a launch's ENTER and
//! EXIT), so several can be in flight at once. The units of one launch live on the thread
//! that makes it (ENTER and EXIT of a call come on its thread), which also frees a unit
//! whose thread ends before its close.
//!
//! Kinds today, each one dispatch: a capture written to a file, and a dispatch profiled in
//! place. A unit that spans several launches (a range, a graph launch) opens the same way and
//! grows at the launches inside it before it closes.

use std::cell::RefCell;

use crate::capture::Pending;
use crate::profile::ProfilePending;

/// What ties a unit's open and close together.
pub(super) type UnitKey = u32;

/// A capture unit in flight.
pub(super) enum Unit {
    /// One dispatch captured to a file (`record_unit`): its pre-state is taken, its
    /// post-state follows at EXIT.
    Record(Box<Pending>),
    /// One dispatch profiled in place (`profile_unit`): its passes run at EXIT.
    Profile(Box<ProfilePending>),
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
