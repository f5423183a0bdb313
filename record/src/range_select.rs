//! `record --nvtx-range` / `--profiler-range`: when the selected range opens and closes, fed
//! with the application's NVTX pushes and pops and its `cuProfilerStart` / `cuProfilerStop`
//! calls. Decisions only; the recorder opens and closes the range unit on them.
//!
//! - NVTX: each push that opens an instance of the range (`NvtxFilter::opened_by_push`: the
//!   rules of `--nvtx-include`) counts, on any thread; the Nth opens the capture, and the pop
//!   of that very range (same thread, same depth) closes it. Pops of ranges below it on its
//!   thread (another domain's, popped out of order) move it down a level.
//! - Profiler: a start while started and a stop while stopped change nothing (the driver
//!   treats them so); the Nth start..stop pair is the range.
//! - The instances after the captured one (N+1 .. N+`TIMED_INSTANCES`), when the application
//!   makes them, give the range's in-app time: the recorder stalls between the captured
//!   instance's steps, so that one cannot be timed honestly; the next ones run undisturbed
//!   (`TimeBegin` / `TimeEnd` for each).

use kreplay_protocol::config::BoundaryRange;
use kreplay_protocol::nvtx::{NvtxFilter, OpenRange};

/// A boundary the application marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary<'a> {
    /// A push on `thread`: its stack of open ranges after the push (the pushed one last).
    Push {
        thread: u64,
        stack: &'a [OpenRange],
    },
    /// The range at `index` of `thread`'s stack (0 = outermost) popped.
    Pop {
        thread: u64,
        index: usize,
    },
    ProfilerStart,
    ProfilerStop,
}

/// What the recorder does at a boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Nothing,
    /// The selected range opened: the capture begins, named by its origin.
    Begin(String),
    /// The selected range closed: the capture ends.
    End,
    /// The instance after the captured one opened: it is timed.
    TimeBegin,
    /// That instance closed.
    TimeEnd,
}

#[derive(Debug, Clone)]
enum Boundaries {
    Nvtx(NvtxFilter),
    Profiler { started: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Fewer than N instances opened yet.
    Waiting,
    /// The Nth is open: on `thread` at `depth` for NVTX (unused for the profiler).
    Open { thread: u64, depth: usize },
    /// The Nth closed: the next instance is awaited, to be timed.
    Captured,
    /// The next instance is open (as `Open`), being timed.
    Timing { thread: u64, depth: usize },
    /// It was timed, or given up: nothing more happens.
    Done,
}

/// How the selection ended, at the process's exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtExit {
    /// The range opened and closed, or was given up: said already.
    Settled,
    /// The range opened and never closed.
    NeverClosed(String),
    /// Fewer than N instances opened: `seen` did.
    NeverOpened { origin: String, seen: u64 },
}

/// The selection's state (see the module comment).
#[derive(Debug, Clone)]
pub struct RangeSelect {
    boundaries: Boundaries,
    nth: u64,
    origin: String,
    /// Instances opened so far.
    seen: u64,
    /// Instances after the captured one that were timed.
    timed: u32,
    phase: Phase,
}

impl RangeSelect {
    pub fn new(range: &BoundaryRange) -> RangeSelect {
        let boundaries = match range.nvtx_filter() {
            Some(filter) => Boundaries::Nvtx(filter),
            None => Boundaries::Profiler { started: false },
        };
        RangeSelect {
            boundaries,
            nth: range.nth(),
            origin: range.origin(),
            seen: 0,
            timed: 0,
            phase: Phase::Waiting,
        }
    }

    /// Where the capture comes from (`nvtx-range layer.2 #1`).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Whether the selected range is open now.
    pub fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open { .. })
    }

    /// Follows one boundary.
    pub fn on(&mut self, boundary: Boundary<'_>) -> Decision {
        let opened_at = match (&mut self.boundaries, boundary) {
            (Boundaries::Nvtx(filter), Boundary::Push { thread, stack }) => {
                if !filter.opened_by_push(stack) {
                    return Decision::Nothing;
                }
                Phase::Open {
                    thread,
                    depth: stack.len() - 1,
                }
            }
            (Boundaries::Nvtx(_), Boundary::Pop { thread, index }) => {
                return self.nvtx_pop(thread, index)
            }
            (Boundaries::Profiler { started }, Boundary::ProfilerStart) => {
                if std::mem::replace(started, true) {
                    return Decision::Nothing;
                }
                Phase::Open {
                    thread: 0,
                    depth: 0,
                }
            }
            (Boundaries::Profiler { started }, Boundary::ProfilerStop) => {
                let was_started = std::mem::replace(started, false);
                return self.close_if(was_started && self.open_at().is_some());
            }
            _ => return Decision::Nothing,
        };
        self.seen += 1;
        if self.phase == Phase::Waiting && self.seen == self.nth {
            self.phase = opened_at;
            return Decision::Begin(self.origin.clone());
        }
        if let (Phase::Captured, Phase::Open { thread, depth }) = (self.phase, opened_at) {
            self.phase = Phase::Timing { thread, depth };
            return Decision::TimeBegin;
        }
        Decision::Nothing
    }

    /// The open instance (captured or timed) on `thread`, at `depth`.
    fn open_at(&self) -> Option<(u64, usize, bool)> {
        match self.phase {
            Phase::Open { thread, depth } => Some((thread, depth, false)),
            Phase::Timing { thread, depth } => Some((thread, depth, true)),
            _ => None,
        }
    }

    fn nvtx_pop(&mut self, thread: u64, index: usize) -> Decision {
        let Some((open_thread, depth, timing)) = self.open_at() else {
            return Decision::Nothing;
        };
        if thread != open_thread {
            return Decision::Nothing;
        }
        if index < depth {
            self.phase = match timing {
                false => Phase::Open {
                    thread,
                    depth: depth - 1,
                },
                true => Phase::Timing {
                    thread,
                    depth: depth - 1,
                },
            };
        }
        self.close_if(index == depth)
    }

    fn close_if(&mut self, closes: bool) -> Decision {
        if !closes {
            return Decision::Nothing;
        }
        match self.phase {
            Phase::Open { .. } => {
                self.phase = Phase::Captured;
                Decision::End
            }
            Phase::Timing { .. } => {
                self.timed += 1;
                self.phase = match self.timed >= crate::range_timing::TIMED_INSTANCES {
                    true => Phase::Done,
                    false => Phase::Captured,
                };
                Decision::TimeEnd
            }
            _ => Decision::Nothing,
        }
    }

    /// The capture could not be made (it opened before CUDA was up, or the unit refused):
    /// nothing more is decided, and the exit says nothing more.
    pub fn give_up(&mut self) {
        self.phase = Phase::Done;
    }

    /// How the selection stands at the process's exit.
    pub fn at_exit(&self) -> AtExit {
        match self.phase {
            Phase::Done | Phase::Captured | Phase::Timing { .. } => AtExit::Settled,
            Phase::Open { .. } => AtExit::NeverClosed(self.origin.clone()),
            Phase::Waiting => AtExit::NeverOpened {
                origin: self.origin.clone(),
                seen: self.seen,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvtx(text: &str, nth: u64) -> RangeSelect {
        RangeSelect::new(&BoundaryRange::nvtx("--nvtx-range", text, nth).expect("valid range"))
    }

    fn r(name: &str) -> OpenRange {
        OpenRange::new(None, name)
    }

    /// Feeds pushes and pops on one thread like NVTX's stack does, returning the decisions.
    struct Thread {
        id: u64,
        stack: Vec<OpenRange>,
    }

    impl Thread {
        fn new(id: u64) -> Thread {
            Thread {
                id,
                stack: Vec::new(),
            }
        }

        fn push(&mut self, s: &mut RangeSelect, range: OpenRange) -> Decision {
            self.stack.push(range);
            s.on(Boundary::Push {
                thread: self.id,
                stack: &self.stack,
            })
        }

        /// Pops the innermost range of `domain`, as `nvtxDomainRangePop` does.
        fn pop(&mut self, s: &mut RangeSelect, domain: Option<&str>) -> Decision {
            let index = self
                .stack
                .iter()
                .rposition(|x| x.domain.as_deref() == domain)
                .expect("a range of that domain is open");
            self.stack.remove(index);
            s.on(Boundary::Pop {
                thread: self.id,
                index,
            })
        }
    }

    #[test]
    fn the_nth_instance_opens_and_its_own_pop_closes() {
        let mut s = nvtx("layer", 2);
        let mut t = Thread::new(1);
        assert_eq!(t.push(&mut s, r("model")), Decision::Nothing);
        assert_eq!(t.push(&mut s, r("layer")), Decision::Nothing);
        assert_eq!(t.pop(&mut s, None), Decision::Nothing);
        assert_eq!(
            t.push(&mut s, r("layer")),
            Decision::Begin("nvtx-range layer #2".into())
        );
        assert!(s.is_open());
        // Nested ranges inside open and close nothing.
        assert_eq!(t.push(&mut s, r("attn")), Decision::Nothing);
        assert_eq!(t.pop(&mut s, None), Decision::Nothing);
        assert_eq!(t.pop(&mut s, None), Decision::End);
        assert!(!s.is_open());
        // The next instances are timed (nested ranges inside them change nothing), then
        // nothing more happens: one capture per process.
        assert_eq!(t.push(&mut s, r("layer")), Decision::TimeBegin);
        assert_eq!(t.push(&mut s, r("attn")), Decision::Nothing);
        assert_eq!(t.pop(&mut s, None), Decision::Nothing);
        assert_eq!(t.pop(&mut s, None), Decision::TimeEnd);
        for _ in 1..crate::range_timing::TIMED_INSTANCES {
            assert_eq!(t.push(&mut s, r("layer")), Decision::TimeBegin);
            assert_eq!(t.pop(&mut s, None), Decision::TimeEnd);
        }
        assert_eq!(t.push(&mut s, r("layer")), Decision::Nothing);
        assert_eq!(t.pop(&mut s, None), Decision::Nothing);
        assert_eq!(s.at_exit(), AtExit::Settled);
    }

    #[test]
    fn a_range_nested_in_itself_closes_at_its_own_depth() {
        // The second push of `layer` is the second instance, inside the first.
        let mut s = nvtx("layer", 1);
        let mut t = Thread::new(1);
        assert!(matches!(t.push(&mut s, r("layer")), Decision::Begin(_)));
        assert_eq!(t.push(&mut s, r("layer")), Decision::Nothing);
        assert_eq!(t.pop(&mut s, None), Decision::Nothing, "the inner one");
        assert_eq!(t.pop(&mut s, None), Decision::End, "the outer one");

        let mut s = nvtx("layer", 2);
        let mut t = Thread::new(1);
        t.push(&mut s, r("layer"));
        assert!(matches!(t.push(&mut s, r("layer")), Decision::Begin(_)));
        assert_eq!(t.pop(&mut s, None), Decision::End, "the inner one is #2");
        assert_eq!(t.pop(&mut s, None), Decision::Nothing);
    }

    #[test]
    fn paths_and_domains_match_as_nvtx_include_does() {
        let mut s = nvtx("model/layer", 1);
        let mut t = Thread::new(1);
        assert_eq!(
            t.push(&mut s, r("layer")),
            Decision::Nothing,
            "not in model"
        );
        t.pop(&mut s, None);
        t.push(&mut s, r("model"));
        assert_eq!(
            t.push(&mut s, r("layer")),
            Decision::Begin("nvtx-range model/layer #1".into())
        );
        assert_eq!(t.pop(&mut s, None), Decision::End);

        let mut s = nvtx("mydomain@layer", 1);
        let mut t = Thread::new(1);
        assert_eq!(
            t.push(&mut s, r("layer")),
            Decision::Nothing,
            "default domain"
        );
        assert_eq!(
            t.push(&mut s, OpenRange::new(Some("mydomain"), "layer")),
            Decision::Begin("nvtx-range mydomain@layer #1".into())
        );
        // The default domain's pop removes the range below it: it moves down a level and
        // still closes at its own pop.
        assert_eq!(t.pop(&mut s, None), Decision::Nothing);
        assert_eq!(t.pop(&mut s, Some("mydomain")), Decision::End);
    }

    #[test]
    fn instances_count_on_every_thread_and_only_the_opening_thread_closes() {
        let mut s = nvtx("layer", 2);
        let (mut a, mut b) = (Thread::new(1), Thread::new(2));
        a.push(&mut s, r("layer"));
        assert!(matches!(b.push(&mut s, r("layer")), Decision::Begin(_)));
        assert_eq!(a.pop(&mut s, None), Decision::Nothing, "thread 1's is #1");
        assert_eq!(b.pop(&mut s, None), Decision::End);
    }

    #[test]
    fn an_instance_that_never_closes_or_never_comes_is_told_at_exit() {
        let mut s = nvtx("layer", 1);
        let mut t = Thread::new(1);
        t.push(&mut s, r("layer"));
        assert_eq!(
            s.at_exit(),
            AtExit::NeverClosed("nvtx-range layer #1".into())
        );
        let mut s = nvtx("layer", 3);
        t.push(&mut s, r("layer"));
        assert_eq!(
            s.at_exit(),
            AtExit::NeverOpened {
                origin: "nvtx-range layer #3".into(),
                seen: 1
            }
        );
        // Given up (refused): nothing more is said or decided.
        let mut s = nvtx("layer", 1);
        let mut t = Thread::new(1);
        t.push(&mut s, r("layer"));
        s.give_up();
        assert_eq!(t.pop(&mut s, None), Decision::Nothing);
        assert_eq!(s.at_exit(), AtExit::Settled);
    }

    #[test]
    fn profiler_pairs_ignore_repeated_starts_and_stray_stops() {
        let mut s = RangeSelect::new(&BoundaryRange::Profiler { nth: 2 });
        assert_eq!(
            s.on(Boundary::ProfilerStop),
            Decision::Nothing,
            "stray stop"
        );
        assert_eq!(s.on(Boundary::ProfilerStart), Decision::Nothing, "#1");
        assert_eq!(s.on(Boundary::ProfilerStart), Decision::Nothing, "#1 again");
        assert_eq!(s.on(Boundary::ProfilerStop), Decision::Nothing);
        assert_eq!(
            s.on(Boundary::ProfilerStart),
            Decision::Begin("profiler-range #2".into())
        );
        assert_eq!(s.on(Boundary::ProfilerStart), Decision::Nothing, "still #2");
        assert_eq!(s.on(Boundary::ProfilerStop), Decision::End);
        // The next pairs are timed, up to TIMED_INSTANCES of them.
        for _ in 0..crate::range_timing::TIMED_INSTANCES {
            assert_eq!(s.on(Boundary::ProfilerStart), Decision::TimeBegin);
            assert_eq!(s.on(Boundary::ProfilerStop), Decision::TimeEnd);
        }
        assert_eq!(s.on(Boundary::ProfilerStart), Decision::Nothing);
        assert_eq!(s.on(Boundary::ProfilerStop), Decision::Nothing);
        assert_eq!(s.at_exit(), AtExit::Settled);
        // NVTX events mean nothing to a profiler range, and the other way round.
        let mut s = RangeSelect::new(&BoundaryRange::Profiler { nth: 1 });
        let stack = [r("layer")];
        let push = Boundary::Push {
            thread: 1,
            stack: &stack,
        };
        assert_eq!(s.on(push), Decision::Nothing);
        assert_eq!(
            s.at_exit(),
            AtExit::NeverOpened {
                origin: "profiler-range #1".into(),
                seen: 0
            }
        );
        let mut n = nvtx("layer", 1);
        assert_eq!(n.on(Boundary::ProfilerStart), Decision::Nothing);
        assert!(matches!(n.on(push), Decision::Begin(_)));
        assert_eq!(n.on(Boundary::ProfilerStop), Decision::Nothing);
    }
}
