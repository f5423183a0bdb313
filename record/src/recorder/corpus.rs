//! Which executions a corpus captures (`record --each-kernel`): the first `--per-kernel` of
//! every distinct kernel, told apart by mangled name or, `--by shape`, also by grid, block and
//! argument size; none once the `--max-bytes` budget has stopped capturing.

use std::collections::HashMap;
use std::sync::Arc;

use kreplay_protocol::config::{demangle, short_kernel_name};
use kreplay_protocol::each_kernel::{CorpusSlot, KeyBy};

use super::corpus_ledger::CorpusLedger;

/// What tells two kernels of one name apart: grid, block and argument bytes, `--by shape`
/// only.
type ShapeKey = Option<([u32; 3], [u32; 3], u64)>;

/// One execution, as the corpus sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape<'a> {
    pub name: &'a str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Size of the kernel's argument bytes (asked only `--by shape`).
    pub arg_bytes: u64,
}

/// A distinct kernel seen.
#[derive(Debug)]
struct Seen {
    index: u64,
    taken: u64,
    left_out: bool,
}

/// What to do with one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pick {
    Capture(CorpusSlot),
    /// Its kernel has its captures already.
    Enough,
    /// Its kernel wants more, but capturing has stopped.
    Stopped,
}

/// The selection (see the module comment), with the ledger it notes slots and left-out
/// kernels in.
#[derive(Debug)]
pub(super) struct Corpus {
    ledger: Arc<CorpusLedger>,
    /// By mangled name, then shape: looked up without allocating (every execution of a
    /// wanted kernel comes here).
    seen: HashMap<String, HashMap<ShapeKey, Seen>>,
    /// Distinct kernels seen.
    distinct: u64,
}

impl Corpus {
    pub(super) fn new(ledger: Arc<CorpusLedger>) -> Corpus {
        Corpus {
            ledger,
            seen: HashMap::new(),
            distinct: 0,
        }
    }

    /// Decides execution `e`, match `match_index` of the process.
    pub(super) fn pick(&mut self, e: &Shape<'_>, match_index: u64) -> Pick {
        let shape: ShapeKey =
            (self.ledger.each.by == KeyBy::Shape).then_some((e.grid, e.block, e.arg_bytes));
        if !self.seen.contains_key(e.name) {
            self.seen.insert(e.name.to_string(), HashMap::new());
        }
        // Present: inserted just above when it was not (looked up by &str, so that a
        // kernel already seen costs no String).
        let Some(shapes) = self.seen.get_mut(e.name) else {
            return Pick::Enough;
        };
        let seen = shapes.entry(shape).or_insert_with(|| {
            self.distinct += 1;
            Seen {
                index: self.distinct,
                taken: 0,
                left_out: false,
            }
        });
        if seen.taken >= self.ledger.each.per_kernel {
            return Pick::Enough;
        }
        if self.ledger.is_full() {
            if !std::mem::replace(&mut seen.left_out, true) {
                let why = format!(
                    "--max-bytes {} was reached before its capture {} of {}",
                    self.ledger.each.max_bytes.unwrap_or(0),
                    seen.taken + 1,
                    self.ledger.each.per_kernel
                );
                let short = short_kernel_name(&demangle(e.name));
                self.ledger.leave_out(short, e.name, why);
            }
            return Pick::Stopped;
        }
        seen.taken += 1;
        let slot = CorpusSlot {
            kernel_index: seen.index,
            execution: seen.taken,
        };
        self.ledger.assign(match_index, slot);
        Pick::Capture(slot)
    }
}

/// The size of a kernel's argument bytes from its parameter layout ((offset, size) each).
pub(super) fn layout_bytes(layout: &[(u32, u32)]) -> u64 {
    layout
        .iter()
        .map(|&(offset, size)| u64::from(offset) + u64::from(size))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_protocol::each_kernel::EachKernel;

    fn corpus(per_kernel: u64, by: KeyBy, max_bytes: Option<u64>) -> Corpus {
        Corpus::new(Arc::new(CorpusLedger::new(
            EachKernel {
                per_kernel,
                by,
                max_bytes,
            },
            None,
        )))
    }

    fn run(name: &str, grid: u32, arg_bytes: u64) -> Shape<'_> {
        Shape {
            name,
            grid: [grid, 1, 1],
            block: [128, 1, 1],
            arg_bytes,
        }
    }

    fn slot(kernel_index: u64, execution: u64) -> Pick {
        Pick::Capture(CorpusSlot {
            kernel_index,
            execution,
        })
    }

    #[test]
    fn the_first_n_of_each_name_in_order_first_seen() {
        let mut c = corpus(2, KeyBy::Name, None);
        let picks: Vec<Pick> = [("a", 1), ("b", 1), ("a", 2), ("a", 3), ("b", 9), ("b", 1)]
            .iter()
            .enumerate()
            .map(|(i, (n, g))| c.pick(&run(n, *g, 8), i as u64 + 1))
            .collect();
        assert_eq!(
            picks,
            [
                slot(1, 1),
                slot(2, 1),
                slot(1, 2),
                Pick::Enough,
                slot(2, 2),
                Pick::Enough
            ]
        );
        assert_eq!(
            c.ledger.slot(5),
            Some(CorpusSlot {
                kernel_index: 2,
                execution: 2
            })
        );
        assert_eq!(c.ledger.slot(4), None);
    }

    #[test]
    fn by_shape_grid_block_and_argument_size_tell_kernels_apart() {
        let mut c = corpus(1, KeyBy::Shape, None);
        assert_eq!(c.pick(&run("a", 1, 8), 1), slot(1, 1));
        assert_eq!(c.pick(&run("a", 1, 8), 2), Pick::Enough);
        assert_eq!(c.pick(&run("a", 2, 8), 3), slot(2, 1));
        assert_eq!(c.pick(&run("a", 1, 16), 4), slot(3, 1));
        let mut block = run("a", 1, 8);
        block.block = [64, 1, 1];
        assert_eq!(c.pick(&block, 5), slot(4, 1));
        // By name, those are all one kernel.
        let mut by_name = corpus(1, KeyBy::Name, None);
        assert_eq!(by_name.pick(&run("a", 1, 8), 1), slot(1, 1));
        assert_eq!(by_name.pick(&run("a", 2, 16), 2), Pick::Enough);
    }

    #[test]
    fn once_the_budget_stops_capturing_wanting_kernels_are_left_out_once() {
        let mut c = corpus(2, KeyBy::Name, Some(100));
        assert_eq!(c.pick(&run("_Z1av", 1, 8), 1), slot(1, 1));
        assert!(
            !c.ledger.charge(200),
            "the first capture alone passes the bound"
        );
        assert_eq!(c.pick(&run("_Z1av", 1, 8), 2), Pick::Stopped);
        assert_eq!(c.pick(&run("_Z1av", 1, 8), 3), Pick::Stopped);
        assert_eq!(c.pick(&run("_Z1bv", 1, 8), 4), Pick::Stopped);
        let left: Vec<(String, String)> = c
            .ledger
            .left_out()
            .into_iter()
            .map(|l| (l.kernel, l.mangled))
            .collect();
        assert_eq!(
            left,
            [("a".into(), "_Z1av".into()), ("b".into(), "_Z1bv".into())]
        );
    }

    #[test]
    fn argument_size_is_where_the_last_parameter_ends() {
        assert_eq!(layout_bytes(&[]), 0);
        assert_eq!(layout_bytes(&[(0, 8), (8, 4), (16, 8)]), 24);
        assert_eq!(layout_bytes(&[(16, 8), (0, 4)]), 24);
    }
}
