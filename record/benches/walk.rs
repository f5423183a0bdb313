//! The pointer walk's own host bookkeeping on a pointer table (#34: a dispatch whose argument
//! points at a table of N allocations of 4 KiB), next to a baseline measured in the same run:
//! the time the address space alone takes to answer the walk's questions (the same lookups and
//! scans, asked in a plain loop). On the H200 the recorder's walk spent 4.3-5.0 ms of a
//! 10,000-entry table's 13-15 ms stall outside its lookups and GPU scans; the stall's limit is
//! about 5 ms in all, so the bookkeeping's target is at most 1 ms.
//!
//!   cargo bench -p kreplay-record --bench walk
//!
//! The space is a fake (allocations in a B-tree, scans precomputed as the GPU returns them),
//! so the figures are the walk's CPU work, not the driver's.

use std::collections::BTreeMap;
use std::time::Instant;

use kreplay_format::MemoryKind;
use kreplay_record::walk::{
    scan_region, walk, AddressSpace, Allocation, LevelScan, Limits, RegionScan, Roots, ScanBounds,
    WalkError,
};

const TABLE: u64 = 0x7f00_0000_0000;
const FIRST: u64 = 0x7f10_0000_0000;
const ROUNDS: usize = 50;

/// The order of a table's allocations along it.
#[derive(Clone, Copy)]
enum Order {
    Ascending,
    Descending,
    /// Ascending runs of 512 (4 KiB allocations carved from a 2 MiB chunk in order), each
    /// chunk below the one before (an allocator that maps its chunks downwards).
    Sawtooth,
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::Ascending => "ascending",
            Order::Descending => "descending",
            Order::Sawtooth => "ascending runs of 512, each run below the last",
        }
    }
}

/// A pointer table of `n` words, each to an allocation of 4 KiB, their addresses along the
/// table in `Order`.
struct PointerTable {
    allocs: BTreeMap<u64, u64>,
    table: Vec<u8>,
}

impl PointerTable {
    fn new(n: u64, order: Order) -> PointerTable {
        let mut allocs = BTreeMap::new();
        allocs.insert(TABLE, n * 8);
        let mut table = Vec::with_capacity(n as usize * 8);
        let chunks = n.div_ceil(512);
        for i in 0..n {
            let slot = match order {
                Order::Ascending => i,
                Order::Descending => n - 1 - i,
                Order::Sawtooth => (chunks - 1 - i / 512) * 512 + i % 512,
            };
            let a = FIRST + slot * 0x2000;
            allocs.insert(a, 4096);
            table.extend_from_slice(&a.to_le_bytes());
        }
        PointerTable { allocs, table }
    }

    fn lookup(&self, addr: u64) -> Option<Allocation> {
        let (&base, &size) = self.allocs.range(..=addr).next_back()?;
        (addr < base + size).then_some(Allocation {
            base,
            size,
            kind: MemoryKind::Device,
            readable: Some(true),
        })
    }

    fn scan_of(&self, base: u64, bounds: &ScanBounds) -> RegionScan {
        if base == TABLE {
            scan_region(&self.table, bounds)
        } else {
            RegionScan::default()
        }
    }
}

impl AddressSpace for PointerTable {
    fn allocation(&mut self, addr: u64) -> Option<Allocation> {
        self.lookup(addr)
    }
    fn read(&mut self, base: u64, size: u64) -> Result<&[u8], WalkError> {
        Err(WalkError {
            base,
            size,
            why: "scanned where it lies".into(),
        })
    }
    fn scan_many(
        &mut self,
        regions: &[(u64, u64)],
        _: &[Option<bool>],
        bounds: &ScanBounds,
        _: &Limits,
    ) -> Result<LevelScan, WalkError> {
        Ok(regions
            .iter()
            .map(|&(b, _)| Some(self.scan_of(b, bounds)))
            .collect())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    for (n, order) in [
        (1_000u64, Order::Ascending),
        (10_000, Order::Ascending),
        (10_000, Order::Descending),
        (10_000, Order::Sawtooth),
    ] {
        let mut space = PointerTable::new(n, order);
        let order = order.name();
        let args = TABLE.to_le_bytes();
        let layout = [(0u32, 8u32)];
        let roots = Roots {
            args: &args,
            layout: &layout,
            ..Default::default()
        };
        let limits = Limits::default();
        let (mut walks, mut floors) = (Vec::new(), Vec::new());
        let mut regions = 0;
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let w = walk(&roots, &mut space, &limits).expect("the fake space answers");
            walks.push(t.elapsed().as_secs_f64() * 1e3);
            regions = w.regions.len();
            assert_eq!(
                w.pointer_slots.len() as u64,
                n,
                "every table word is a slot"
            );
            // The baseline: the same questions, asked in a plain loop.
            let bounds = ScanBounds {
                lo: TABLE.saturating_sub(limits.window),
                hi: FIRST + n * 0x2000 + limits.window,
                heap: None,
            };
            let t = Instant::now();
            let mut found = 0usize;
            let table = space.scan_of(TABLE, &bounds);
            for &(_, v) in &table.words {
                found += usize::from(space.lookup(v).is_some());
                found += space.scan_of(v, &bounds).words.len();
            }
            floors.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(found as u64, n);
        }
        // The first walk builds its tables in pages the process never touched, as a capture's
        // walk does (the recorder's first in a process, or one larger than any before it).
        let first = walks.first().copied().unwrap_or(0.0);
        let (w, f) = (median(walks), median(floors));
        println!(
            "walk of a {n}-entry pointer table, {order} ({regions} regions): {w:.2} ms, median of {ROUNDS} \
             (the first {first:.2} ms); baseline (the space's answers alone) {f:.2} ms; bookkeeping {:.2} ms, \
             {:.0} ns per region{}",
            w - f,
            (w - f) * 1e6 / regions as f64,
            if n == 10_000 { " (target <= 1 ms)" } else { "" }
        );
    }
}
