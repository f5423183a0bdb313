//! Owner of the kernels seen: which the filter wants, how often each ran, and which
//! executions are to be captured.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use kreplay_protocol::config::{demangle, Config, Mode};
use kreplay_protocol::report::KernelStat;

use super::corpus::{Corpus, Pick, Shape};
use super::locking::lock;

/// Executions seen so far.
#[derive(Default)]
pub(super) struct Counters {
    pub launches: u64,
    pub matches: u64,
    /// One per kernel name, in the order first launched; `stat_of` finds a name's.
    pub stats: Vec<KernelStat>,
    pub stat_of: HashMap<String, usize>,
}

/// One kernel execution, as counted.
pub(super) struct Execution<'a> {
    pub name: &'a str,
    pub demangled: &'a str,
    /// The kernel filter selects it.
    pub wanted: bool,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub in_graph: bool,
    /// Size of the argument bytes, when each-kernel mode tells kernels apart by shape (0
    /// otherwise: not asked for).
    pub arg_bytes: u64,
}

/// What a thread's launches already told the recorder about a function handle: a launch of a
/// kernel the filter does not want then costs a lookup by handle and one counter, with no
/// allocation and no hashing of its name (the non-matching slowdown, issue 12).
struct KnownFunction {
    /// The symbol the handle launched (a handle reused for another kernel is looked up anew).
    name: Box<[u8]>,
    wanted: bool,
    stat: usize,
}

thread_local! {
    /// Function handle → what is known of it (see `KnownFunction`).
    static KNOWN: RefCell<HashMap<usize, KnownFunction>> = RefCell::new(HashMap::new());
}

/// This thread's known functions are still there (not during its thread-locals' destruction).
pub(super) fn alive() -> bool {
    KNOWN.try_with(|_| ()).is_ok()
}

/// The statistics index of an unwanted kernel this thread launched through `handle` before
/// under symbol `symbol`.
pub(super) fn known_unwanted(handle: usize, symbol: &[u8]) -> Option<usize> {
    KNOWN.with(|k| {
        k.borrow()
            .get(&handle)
            .filter(|f| !f.wanted && *f.name == *symbol)
            .map(|f| f.stat)
    })
}

/// Notes what a launch through `handle` told about its kernel (see `KnownFunction`).
pub(super) fn remember(handle: usize, symbol: &[u8], wanted: bool, stat: usize) {
    KNOWN.with(|k| {
        k.borrow_mut().insert(
            handle,
            KnownFunction {
                name: symbol.into(),
                wanted,
                stat,
            },
        )
    });
}

/// Counts and names, behind one lock.
#[derive(Default)]
pub(super) struct KernelBook {
    pub counts: Counters,
    /// Mangled name → (matches the filter, demangled).
    names: HashMap<String, (bool, String)>,
    /// Each-kernel mode: which executions the corpus takes.
    corpus: Option<Corpus>,
}

/// One launch's counts, folded: the executions (kernel nodes enabled), and per statistics
/// index how many of them are its kernel's. Counting a 20-node graph's launch node by node
/// was most of what recording it cost, for counts a sum gives (a node not wanted is never
/// captured, whatever the launch index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tally {
    pub executions: u64,
    pub per_stat: Vec<(usize, u64)>,
}

/// The owner (see the module comment).
#[derive(Default)]
pub(super) struct Kernels {
    book: Mutex<KernelBook>,
}

impl Kernels {
    /// The owner, with each-kernel mode's selection when it is on.
    pub(super) fn new(corpus: Option<Corpus>) -> Kernels {
        Kernels {
            book: Mutex::new(KernelBook {
                corpus,
                ..KernelBook::default()
            }),
        }
    }

    /// Whether the filter wants kernel `name` (mangled), and its demangled name.
    pub(super) fn matches(&self, config: &Config, name: &str) -> (bool, String) {
        lock(&self.book).matches(config, name)
    }

    /// Works on the book under its lock (a graph launch counts all its nodes at once).
    pub(super) fn with_book<R>(&self, f: impl FnOnce(&mut KernelBook) -> R) -> R {
        f(&mut lock(&self.book))
    }

    /// One more execution of a known kernel (statistics index `stat`) that is not wanted.
    pub(super) fn count_known(&self, stat: usize) {
        let mut book = lock(&self.book);
        book.counts.launches += 1;
        if let Some(s) = book.counts.stats.get_mut(stat) {
            s.count += 1;
        }
    }
}

impl KernelBook {
    fn matches(&mut self, config: &Config, name: &str) -> (bool, String) {
        if let Some(v) = self.names.get(name) {
            return v.clone();
        }
        let demangled = demangle(name);
        // With only --launch-index or a range, any kernel may be the one: every module is
        // kept.
        let m = match &config.kernel {
            Some(f) => f.matches(name, &demangled),
            None => {
                config.launch_index.is_some()
                    || config.launch_range.is_some()
                    || config.boundary_range.is_some()
                    || config.each_kernel.is_some()
            }
        };
        self.names.insert(name.to_string(), (m, demangled.clone()));
        (m, demangled)
    }

    /// Counts one execution; returns (launch index, match index) when it is to be captured
    /// (the launches' path counts with the index in hand, `count_with_stat`; graph nodes keep
    /// theirs, `count_kept`).
    #[cfg(test)]
    pub(super) fn count(&mut self, config: &Config, e: &Execution<'_>) -> Option<(u64, u64)> {
        self.count_with_stat(config, e).1
    }

    /// `count`, and the index of the kernel's statistics in `counts.stats`.
    pub(super) fn count_with_stat(
        &mut self,
        config: &Config,
        e: &Execution<'_>,
    ) -> (usize, Option<(u64, u64)>) {
        let c = &mut self.counts;
        c.launches += 1;
        let launches = c.launches;
        let at = match c.stat_of.get(e.name) {
            Some(&i) => i,
            None => {
                c.stats.push(KernelStat {
                    name: e.name.to_string(),
                    demangled: e.demangled.to_string(),
                    count: 0,
                    in_graphs: 0,
                    grid: e.grid,
                    block: e.block,
                    first_launch: launches,
                    nvtx: crate::nvtx::innermost(),
                });
                c.stat_of.insert(e.name.to_string(), c.stats.len() - 1);
                c.stats.len() - 1
            }
        };
        (
            at,
            count_at(config, c, self.corpus.as_mut(), e, (at, launches)),
        )
    }

    /// `count` for a kernel whose statistics' index the caller keeps between counts (`known`,
    /// set on the first): a graph's kernel nodes are counted at each launch of the graph, and
    /// a lookup by name per node (hashing its mangled name) was most of what recording a
    /// graph launch cost. A kept index that names another kernel is looked up again.
    pub(super) fn count_kept(
        &mut self,
        config: &Config,
        e: &Execution<'_>,
        known: &mut Option<usize>,
    ) -> Option<(u64, u64)> {
        let c = &mut self.counts;
        match *known {
            Some(at) if c.stats.get(at).is_some_and(|s| s.name == e.name) => {
                c.launches += 1;
                let launches = c.launches;
                count_at(config, c, self.corpus.as_mut(), e, (at, launches))
            }
            _ => {
                let (at, counted) = self.count_with_stat(config, e);
                *known = Some(at);
                counted
            }
        }
    }

    /// Counts one graph launch as its `tally` says (`exec_graphs::tally_of`): what counting
    /// its nodes one by one with `count_kept` adds, none of them wanted.
    pub(super) fn count_tally(&mut self, tally: &Tally) {
        let c = &mut self.counts;
        c.launches += tally.executions;
        for &(at, n) in &tally.per_stat {
            // Statistics are only ever pushed: a tally's indices stay theirs.
            debug_assert!(at < c.stats.len(), "a tally's statistics index {at}");
            if let Some(s) = c.stats.get_mut(at) {
                s.count += n;
                s.in_graphs += n;
            }
        }
    }
}

/// Counts execution `e` of kernel statistics `at`, launch `launches` of the process, and
/// says whether it is captured (see `KernelBook::count`).
fn count_at(
    config: &Config,
    c: &mut Counters,
    corpus: Option<&mut Corpus>,
    e: &Execution<'_>,
    (at, launches): (usize, u64),
) -> Option<(u64, u64)> {
    let stat = &mut c.stats[at];
    stat.count += 1;
    stat.in_graphs += u64::from(e.in_graph);
    let is_match = e.wanted
        && config.launch_index.is_none_or(|i| i == launches)
        // A graph node inside a range is not a step: the graph launch refuses the range.
        && config
            .launch_range
            .is_none_or(|r| r.contains(launches) && !e.in_graph)
        // Whether a launch is inside a boundary range is the range unit's to say (open or not).
        && (config.boundary_range.is_none() || !e.in_graph)
        && config
            .nvtx
            .as_ref()
            .is_none_or(|f| f.matches(&crate::nvtx::open_ranges()));
    if config.mode == Mode::List || !is_match {
        return None;
    }
    c.matches += 1;
    let index = c.matches;
    if config.launch_range.is_some() || config.boundary_range.is_some() {
        // Every launch of the range is one of its steps (a boundary range: every launch may
        // be; the range unit knows whether one is open).
        return Some((launches, index));
    }
    if let Some(corpus) = corpus {
        let shape = Shape {
            name: e.name,
            grid: e.grid,
            block: e.block,
            arg_bytes: e.arg_bytes,
        };
        return matches!(corpus.pick(&shape, index), Pick::Capture(_)).then_some((launches, index));
    }
    let first = config.nth;
    (index >= first && index < first.saturating_add(config.count)).then_some((launches, index))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use kreplay_protocol::config::env;

    /// A configuration from `KREPLAY_*` settings (shared with `exec_graphs`' tests).
    pub(in crate::recorder) fn config(vars: &[(&str, &str)]) -> Config {
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        Config::from_lookup(get)
            .expect("valid settings")
            .expect("a mode is set")
    }

    /// A kernel's name, count, count in graphs and first launch.
    type KernelCounts = (String, u64, u64, u64);

    /// What a book has counted, to compare two books: launches, matches, and per kernel its
    /// name, count, count in graphs and first launch (shared with `exec_graphs`' tests).
    pub(in crate::recorder) fn book_counts(b: &KernelBook) -> (u64, u64, Vec<KernelCounts>) {
        let c = &b.counts;
        let stats = c
            .stats
            .iter()
            .map(|s| (s.name.clone(), s.count, s.in_graphs, s.first_launch))
            .collect();
        (c.launches, c.matches, stats)
    }

    /// An execution of kernel `name` outside graphs (shared with `exec_graphs`' tests).
    pub(in crate::recorder) fn execution(name: &str, wanted: bool) -> Execution<'_> {
        Execution {
            name,
            demangled: name,
            wanted,
            grid: [1, 1, 1],
            block: [32, 1, 1],
            in_graph: false,
            arg_bytes: 8,
        }
    }

    #[test]
    fn the_nth_to_the_nth_plus_count_matches_are_captured() {
        let c = config(&[
            (env::MODE, "record"),
            (env::KERNEL, "saxpy"),
            (env::NTH, "2"),
            (env::COUNT, "2"),
        ]);
        let mut book = KernelBook::default();
        let (wanted, _) = book.matches(&c, "saxpy");
        assert!(wanted);
        assert!(!book.matches(&c, "other").0);
        let picked: Vec<_> = (0..4)
            .map(|_| book.count(&c, &execution("saxpy", wanted)))
            .collect();
        assert_eq!(picked, vec![None, Some((2, 2)), Some((3, 3)), None]);
        assert_eq!(book.count(&c, &execution("other", false)), None);
        assert_eq!(book.counts.launches, 5);
        assert_eq!(book.counts.matches, 4);
        assert_eq!(book.counts.stats.len(), 2);
        assert_eq!(book.counts.stats[0].count, 4);
    }

    // Catches: a kept statistics index counting another kernel's launches, or counting
    // differently from a lookup by name (launch and match indices, per-kernel counts).
    #[test]
    fn counts_with_a_kept_index_equal_counts_by_name() {
        let c = config(&[
            (env::MODE, "record"),
            (env::KERNEL, "regex:^[ab]$"),
            (env::NTH, "3"),
            (env::COUNT, "4"),
        ]);
        let names = ["a", "b", "x", "a", "b", "a", "x", "b", "a", "a"];
        let mut by_name = KernelBook::default();
        let mut kept = KernelBook::default();
        let mut known: Vec<Option<usize>> = vec![None; 3];
        for (round, n) in names.iter().cycle().take(40).enumerate() {
            let wanted = by_name.matches(&c, n).0;
            assert_eq!(kept.matches(&c, n).0, wanted);
            let mut e = execution(n, wanted);
            e.in_graph = true;
            let slot = match *n {
                "a" => 0,
                "b" => 1,
                _ => 2,
            };
            // Now and then a kept index that is another kernel's: looked up again.
            if round % 7 == 6 {
                known[slot] = Some((slot + 1) % 3);
            }
            assert_eq!(
                kept.count_kept(&c, &e, &mut known[slot]),
                by_name.count(&c, &e),
                "execution {round} ({n})"
            );
        }
        assert_eq!(book_counts(&kept), book_counts(&by_name));
    }

    #[test]
    fn listing_counts_without_capturing() {
        let c = config(&[(env::MODE, "list")]);
        let mut book = KernelBook::default();
        let mut e = execution("k", true);
        e.in_graph = true;
        assert_eq!(book.count(&c, &e), None);
        assert_eq!(book.counts.matches, 0);
        assert_eq!(book.counts.stats[0].in_graphs, 1);
    }

    #[test]
    fn a_launch_index_picks_that_launch_of_any_kernel() {
        let c = config(&[(env::MODE, "record"), (env::LAUNCH_INDEX, "2")]);
        let mut book = KernelBook::default();
        let wanted = book.matches(&c, "anything").0;
        assert!(
            wanted,
            "with only a launch index every kernel may be the one"
        );
        assert_eq!(book.count(&c, &execution("a", wanted)), None);
        assert_eq!(book.count(&c, &execution("b", wanted)), Some((2, 1)));
    }

    #[test]
    fn every_launch_of_a_range_is_a_step_and_graph_nodes_are_not() {
        let c = config(&[(env::MODE, "record"), (env::LAUNCH_RANGE, "2:4")]);
        let mut book = KernelBook::default();
        let wanted = book.matches(&c, "anything").0;
        assert!(wanted, "with a launch range every kernel may be a step");
        let mut node = execution("n", wanted);
        node.in_graph = true;
        let picked = [
            book.count(&c, &execution("a", wanted)),
            book.count(&c, &execution("b", wanted)),
            book.count(&c, &node),
            book.count(&c, &execution("c", wanted)),
            book.count(&c, &execution("d", wanted)),
        ];
        assert_eq!(picked, [None, Some((2, 1)), None, Some((4, 2)), None]);
    }

    #[test]
    fn with_a_boundary_range_every_launch_goes_to_the_range_unit_but_graph_nodes() {
        for range in [(env::NVTX_RANGE, "layer"), (env::PROFILER_RANGE, "1")] {
            let c = config(&[(env::MODE, "record"), range]);
            let mut book = KernelBook::default();
            let wanted = book.matches(&c, "anything").0;
            assert!(wanted, "with a boundary range every kernel may be a step");
            let mut node = execution("n", wanted);
            node.in_graph = true;
            let picked = [
                book.count(&c, &execution("a", wanted)),
                book.count(&c, &node),
                book.count(&c, &execution("b", wanted)),
            ];
            assert_eq!(picked, [Some((1, 1)), None, Some((3, 2))], "{range:?}");
        }
    }

    #[test]
    fn each_kernel_mode_captures_the_first_of_every_wanted_kernel() {
        use super::super::corpus_ledger::CorpusLedger;
        use std::sync::Arc;
        let c = config(&[
            (env::MODE, "record"),
            (env::EACH_KERNEL, "1"),
            (env::KERNEL, "regex:^k"),
        ]);
        let each = c.each_kernel.expect("each-kernel mode");
        let ledger = Arc::new(CorpusLedger::new(each, None));
        let mut book = KernelBook {
            corpus: Some(Corpus::new(ledger.clone())),
            ..KernelBook::default()
        };
        let mut run = |name: &str| {
            let wanted = book.matches(&c, name).0;
            book.count(&c, &execution(name, wanted))
        };
        let picked = [run("k1"), run("other"), run("k1"), run("k2"), run("k2")];
        assert_eq!(picked, [Some((1, 1)), None, None, Some((4, 3)), None]);
        // The file names come from the slots the corpus noted under the match index.
        assert_eq!(ledger.slot(3).map(|s| s.kernel_index), Some(2));
        let without_filter = config(&[(env::MODE, "record"), (env::EACH_KERNEL, "1")]);
        assert!(KernelBook::default().matches(&without_filter, "any").0);
    }
}
