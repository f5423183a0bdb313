//! The manifest's checksums, checked on a thread of their own a few captures ahead of the
//! dispatcher: hashing a multi-GiB capture takes seconds, during which the dispatcher must
//! still collect finished children and kill overdue ones. The thread checks the entries in
//! order and stays at most `ahead` entries in front of what the dispatcher has taken, so a
//! run never reads much more than it is about to replay.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use crate::farm::Entry;
use crate::run_record::RunRecord;

/// What decides whether an entry may be replayed: its refusal record, or None to go ahead
/// (`checksum::refusal`; tests give a slow one).
pub type Check = fn(&Entry) -> Option<RunRecord>;

/// Entry `index`, checked: its refusal, or None when it may be replayed.
#[derive(Debug)]
pub struct Checked {
    pub index: usize,
    pub refusal: Option<RunRecord>,
}

/// The dispatcher's side: it hands back one credit per checked entry it has taken, which lets
/// the thread check one more. Dropped, the thread stops after the entry it is on.
pub struct Credits(SyncSender<()>);

impl Credits {
    /// One checked entry was taken (replayed, or its refusal reported).
    pub fn taken(&self) {
        // Never full: at most `ahead` credits and checked entries exist at once. Gone: the
        // thread has checked every entry.
        let _ = self.0.try_send(());
    }
}

/// Starts the thread checking `entries` with `check` in order, at most `ahead` (at least 1)
/// entries before the dispatcher; each result goes to `deliver`, which answers false once
/// nobody listens (the thread then stops).
pub fn start(
    entries: Vec<Entry>,
    check: Check,
    ahead: usize,
    deliver: impl Fn(Checked) -> bool + Send + 'static,
) -> Credits {
    let ahead = ahead.max(1);
    let (credits, credit) = sync_channel(ahead);
    for _ in 0..ahead {
        // The channel holds exactly `ahead`: none of these can find it full.
        let _ = credits.try_send(());
    }
    // Not joined: on an early end of the run (a record that cannot be written) the run
    // returns at once, and this thread stops after the file it is hashing.
    std::thread::spawn(move || check_in_order(&entries, check, &credit, &deliver));
    Credits(credits)
}

fn check_in_order(
    entries: &[Entry],
    check: Check,
    credit: &Receiver<()>,
    deliver: &dyn Fn(Checked) -> bool,
) {
    for (index, e) in entries.iter().enumerate() {
        if credit.recv().is_err() {
            return;
        }
        // A check that panics (a bug) refuses its entry rather than stalling the run, whose
        // dispatcher would wait for an entry that never comes.
        let refusal = std::panic::catch_unwind(|| check(e)).unwrap_or_else(|_| {
            let why = format!(
                "kreplay: checking {} failed (a bug: please report it)",
                e.shown
            );
            Some(super::checksum::unreadable(e, why))
        });
        if !deliver(Checked { index, refusal }) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_record::Verdict;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    fn entries(n: usize) -> Vec<Entry> {
        (0..n)
            .map(|i| Entry {
                shown: format!("{i}.krr"),
                key: format!("{i}.krr"),
                path: format!("{i}.krr").into(),
                sha256: None,
            })
            .collect()
    }

    fn refuse_odd(e: &Entry) -> Option<RunRecord> {
        e.shown
            .starts_with(['1', '3'])
            .then(|| RunRecord::new(e.shown.clone(), Verdict::Damaged))
    }

    // Catches: a checker that runs ahead without bound (reading the whole corpus while the
    // GPUs are busy) or out of order, or that stalls once credits come back.
    #[test]
    fn entries_are_checked_in_order_and_never_more_than_ahead() {
        let (tx, rx) = channel();
        let credits = start(entries(5), refuse_odd, 2, move |c| tx.send(c).is_ok());
        let first: Vec<Checked> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).expect("checked"))
            .collect();
        assert_eq!(first.iter().map(|c| c.index).collect::<Vec<_>>(), [0, 1]);
        assert!(first[0].refusal.is_none());
        assert_eq!(
            first[1].refusal.as_ref().map(|r| r.verdict),
            Some(Verdict::Damaged)
        );
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "a third entry checked before any was taken"
        );
        let next = |taken: usize| -> Vec<usize> {
            for _ in 0..taken {
                credits.taken();
            }
            (0..taken)
                .map(|_| {
                    rx.recv_timeout(Duration::from_secs(5))
                        .expect("checked")
                        .index
                })
                .collect()
        };
        assert_eq!(next(2), [2, 3]);
        assert_eq!(next(1), [4]);
    }

    #[test]
    fn the_thread_stops_when_the_dispatcher_goes_away() {
        let (tx, rx) = channel();
        let credits = start(entries(5), refuse_odd, 1, move |c| tx.send(c).is_ok());
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).expect("0").index, 0);
        drop(credits);
        // Its sender, held by the thread, is dropped once the thread ends.
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(5)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
        ));
    }
}
