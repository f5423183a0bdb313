//! NVTX pushes and pops handed to the recorder (`record --nvtx-range`, `list --ranges`).
//! NVTX may call its hooks before the application initialises CUDA, that is before the
//! recorder exists (it starts in `cuInit`): those events wait here, a bounded number of them,
//! and are handed over in order when the recorder registers; a recorder that needs none says
//! so, and from then on no event is even made.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

use kreplay_protocol::nvtx::OpenRange;

/// A change to one thread's stack of open NVTX ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvtxEvent {
    /// A range was pushed: `stack` is the thread's open ranges after the push, outermost
    /// first, the pushed one last.
    Push { thread: u64, stack: Vec<OpenRange> },
    /// The range at `index` (0 = outermost) of the thread's stack was popped.
    Pop { thread: u64, index: usize },
}

/// When an event reaches the observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// As it happens, on the thread that made it.
    Now,
    /// Held from before the recorder started (no CUDA call had been made yet).
    BeforeStart,
}

/// What the recorder does with each event.
pub type Observer = fn(&NvtxEvent, Delivery);

/// The most events kept from before the recorder starts.
const EARLY_LIMIT: usize = 10_000;

/// Events from before the recorder started, in order, and how many did not fit.
#[derive(Debug, Default)]
struct Early {
    events: Vec<NvtxEvent>,
    left_out: u64,
}

impl Early {
    fn keep(&mut self, event: NvtxEvent, limit: usize) {
        if self.events.len() < limit {
            self.events.push(event);
        } else {
            self.left_out += 1;
        }
    }
}

const HOLDING: u8 = 0;
const OBSERVED: u8 = 1;
const OFF: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(HOLDING);
static OBSERVER: OnceLock<Observer> = OnceLock::new();
static EARLY: Mutex<Early> = Mutex::new(Early {
    events: Vec::new(),
    left_out: 0,
});

fn early() -> std::sync::MutexGuard<'static, Early> {
    EARLY.lock().unwrap_or_else(|p| p.into_inner())
}

/// A small number naming the calling thread (its NVTX stack is its own).
pub fn this_thread() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ID.with(|id| *id)
}

/// Hands an event to the recorder, or keeps it until the recorder starts; `make` runs only
/// when someone wants the event.
pub fn emit(make: impl FnOnce() -> NvtxEvent) {
    if STATE.load(Ordering::Acquire) == HOLDING {
        let mut held = early();
        // Checked again under the lock: `observe` hands the held events over under it.
        if STATE.load(Ordering::Acquire) == HOLDING {
            held.keep(make(), EARLY_LIMIT);
            return;
        }
    }
    if STATE.load(Ordering::Acquire) == OBSERVED {
        if let Some(observer) = OBSERVER.get() {
            observer(&make(), Delivery::Now);
        }
    }
}

/// The recorder wants the events: those held are handed over first, in order (later ones
/// wait for that). Returns how many were left out for lack of room.
pub fn observe(observer: Observer) -> u64 {
    let mut held = early();
    if OBSERVER.set(observer).is_err() {
        return 0;
    }
    for event in held.events.drain(..) {
        observer(&event, Delivery::BeforeStart);
    }
    STATE.store(OBSERVED, Ordering::Release);
    std::mem::take(&mut held.left_out)
}

/// The recorder wants no events: those held are dropped and none are made any more.
pub fn ignore() {
    let mut held = early();
    STATE.store(OFF, Ordering::Release);
    *held = Early::default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_events_are_kept_in_order_up_to_a_limit() {
        let mut e = Early::default();
        for i in 0..5 {
            e.keep(
                NvtxEvent::Pop {
                    thread: 1,
                    index: i,
                },
                3,
            );
        }
        let kept: Vec<usize> = e
            .events
            .iter()
            .map(|ev| match ev {
                NvtxEvent::Pop { index, .. } => *index,
                NvtxEvent::Push { .. } => usize::MAX,
            })
            .collect();
        assert_eq!(kept, [0, 1, 2]);
        assert_eq!(e.left_out, 2);
    }

    static SEEN: Mutex<Vec<(NvtxEvent, Delivery)>> = Mutex::new(Vec::new());

    fn note(e: &NvtxEvent, d: Delivery) {
        SEEN.lock().unwrap().push((e.clone(), d));
    }

    // The only test that registers the observer (it is once per process); other tests' pushes
    // may reach it too, told apart by their thread.
    #[test]
    fn held_events_reach_the_observer_first_then_new_ones_as_they_happen() {
        let thread = this_thread();
        let pop = |index| NvtxEvent::Pop { thread, index };
        emit(|| pop(0));
        emit(|| pop(1));
        assert_eq!(observe(note), 0);
        emit(|| pop(2));
        let mine: Vec<_> = SEEN
            .lock()
            .unwrap()
            .iter()
            .filter(|(e, _)| matches!(e, NvtxEvent::Pop { thread: t, .. } if *t == thread))
            .cloned()
            .collect();
        assert_eq!(
            mine,
            [
                (pop(0), Delivery::BeforeStart),
                (pop(1), Delivery::BeforeStart),
                (pop(2), Delivery::Now)
            ]
        );
    }

    #[test]
    fn threads_have_names_of_their_own() {
        let here = this_thread();
        assert_eq!(here, this_thread());
        let there = std::thread::spawn(this_thread).join().expect("thread ran");
        assert_ne!(here, there);
    }
}
