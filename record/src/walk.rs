//! The reachable-memory walk: which device memory a dispatch can read, decided as a pure
//! function over an `AddressSpace` (the driver in the recorder, a fake in the tests).
//!
//! Roots are the argument words that point into device allocations and the module's globals
//! (a library may keep its tables behind a pointer in a global, as cuFFT's `lut_sp`); every
//! region found is scanned for 8-byte words that point into further allocations, transitively;
//! `--memory all` adds every other live allocation. The words of captured memory that point
//! into captured memory are the pointer slots a relocating replay rewrites.

// Addresses are hashed with rustc-hash's Fx hash: SipHash took a quarter of a 10,000-entry
// pointer table's walk, and no key here comes from outside the process's own address space.
use rustc_hash::FxHashSet as HashSet;

use kreplay_cuda::texture::MAX_HANDLE;
use kreplay_format::{MemoryKind, RegionRole};

use crate::known_regions::KnownRegions;

/// A device allocation, as the address space reports it (page-locked host memory reachable
/// through a device pointer has kind `HostMapped`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub base: u64,
    pub size: u64,
    pub kind: MemoryKind,
    /// Whether a kernel of the current device may read it whole, when the space knew it from
    /// its answer (`None`: asked where it matters). Carried into the region found, so that
    /// neither the level's GPU scan nor the snapshots ask again for each of a pointer table's
    /// 10,000 regions.
    pub readable: Option<bool>,
}

/// What the walk may ask of the process's memory.
pub trait AddressSpace {
    /// The allocation containing `addr`, if any.
    fn allocation(&mut self, addr: u64) -> Option<Allocation>;
    /// The bytes of `[base, base + size)`, to scan for pointers.
    fn read(&mut self, base: u64, size: u64) -> Result<&[u8], WalkError>;
    /// `[base, base + size)` scanned against `bounds`; `None`: not scanned (too large for
    /// this space to scan). By default its bytes are read and scanned here (`scan_region`), up
    /// to `limits.scan_bytes`; the recorder scans device memory on the GPU instead, whatever
    /// its size, and reads back only the words found.
    fn scan(
        &mut self,
        base: u64,
        size: u64,
        bounds: &ScanBounds,
        limits: &Limits,
    ) -> Result<Option<RegionScan>, WalkError> {
        host_scan(self, (base, size), bounds, limits)
    }
    /// `scan` of each of `regions` (base, size), in order: what the walk asks at each level, so
    /// that a space may scan many regions in one go (the recorder's GPU scans a pointer table's
    /// thousands of allocations in one launch). `readable`: each region's `FoundRegion::readable`
    /// (empty: none known). By default one `scan` each.
    fn scan_many(
        &mut self,
        regions: &[(u64, u64)],
        _readable: &[Option<bool>],
        bounds: &ScanBounds,
        limits: &Limits,
    ) -> Result<LevelScan, WalkError> {
        regions
            .iter()
            .map(|&(base, size)| self.scan(base, size, bounds, limits))
            .collect()
    }
    /// Says that up to `additional` more allocations may be asked for next (one region's words
    /// about to be followed), so that a space keeping its answers can make room once: a
    /// pointer table's 10,000 answers grown one doubling at a time spent most of their time in
    /// first touches of fresh pages.
    fn expect_lookups(&mut self, _additional: usize) {}
}

/// `AddressSpace::scan` on the host: the region's bytes read (`space.read`) and scanned here,
/// up to `limits.scan_bytes` (`None` past it). What a space that scans elsewhere falls back to.
pub fn host_scan<S: AddressSpace + ?Sized>(
    space: &mut S,
    (base, size): (u64, u64),
    bounds: &ScanBounds,
    limits: &Limits,
) -> Result<Option<RegionScan>, WalkError> {
    if size > limits.scan_bytes {
        return Ok(None);
    }
    Ok(Some(scan_region(space.read(base, size)?, bounds)))
}

/// The bounds a region's scan depends on besides its bytes: the pointer window `[lo, hi)` and
/// the device heap's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScanBounds {
    pub lo: u64,
    pub hi: u64,
    pub heap: Option<(u64, u64)>,
}

/// What scanning one region's bytes found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegionScan {
    /// (offset, value) of the words inside the pointer window (zero excluded).
    pub words: Vec<(u64, u64)>,
    /// (offset, value) of the words inside the device heap.
    pub heap: Vec<(u64, u64)>,
    /// The region read as a table of texture or surface handles (small regions only).
    pub handle_table: Option<Vec<(u64, u64)>>,
}

/// What the scan of a level's regions found, flat: a pointer table's 10,000 regions as 10,000
/// `RegionScan`s took 720 KiB of fresh pages and a pass over them to follow (1 ms of the
/// stall on the H200), where most of them hold nothing. Regions are named by their index in
/// the level (the slice `scan_many` was asked), and their words come in index order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelScan {
    /// Per region: scanned (`false`: too large for the space to scan, not followed).
    pub scanned: Vec<bool>,
    /// (region index, offset, value) of the words inside the pointer window, by region then
    /// offset.
    pub words: Vec<(u32, u64, u64)>,
    /// (region index, offset, value) of the words inside the device heap, likewise.
    pub heap: Vec<(u32, u64, u64)>,
    /// (region index, table) of the regions read as texture handle tables, by region.
    pub handle_tables: Vec<(u32, Vec<(u64, u64)>)>,
}

impl LevelScan {
    /// A level of `regions` regions, none scanned yet.
    pub fn unscanned(regions: usize) -> LevelScan {
        LevelScan {
            scanned: vec![false; regions],
            ..LevelScan::default()
        }
    }

    /// Region `i`'s scan (`None`: not scanned). Regions come in ascending index order, each
    /// once, with their words in offset order (`from_iter`).
    pub fn put(&mut self, i: usize, found: Option<RegionScan>) {
        let Some(found) = found else { return };
        let Some(k) = self.put_words(i, found.words, found.heap) else {
            return;
        };
        if let Some(t) = found.handle_table {
            self.handle_tables.push((k, t));
        }
    }

    /// Region `i` scanned, its words and heap words (offset, value) in offset order, as
    /// `put` takes them (a scan of many regions hands its flat lists over without a
    /// `RegionScan` each); its index as the lists hold it (`None`: no such region).
    pub fn put_words(
        &mut self,
        i: usize,
        words: impl IntoIterator<Item = (u64, u64)>,
        heap: impl IntoIterator<Item = (u64, u64)>,
    ) -> Option<u32> {
        let k = self.mark(i)?;
        self.words
            .extend(words.into_iter().map(|(off, v)| (k, off, v)));
        self.heap
            .extend(heap.into_iter().map(|(off, v)| (k, off, v)));
        Some(k)
    }

    /// Marks region `i` scanned; its index as the lists hold it (`None`: no such region).
    fn mark(&mut self, i: usize) -> Option<u32> {
        let (Some(flag), Ok(k)) = (self.scanned.get_mut(i), u32::try_from(i)) else {
            return None;
        };
        *flag = true;
        debug_assert!(
            self.words.last().is_none_or(|w| w.0 <= k)
                && self.heap.last().is_none_or(|w| w.0 <= k)
                && self.handle_tables.last().is_none_or(|t| t.0 < k),
            "regions put out of order"
        );
        Some(k)
    }

    /// Region `i`'s scan as a `RegionScan` (the walk reads the flat lists).
    #[cfg(test)]
    fn region(&self, i: usize) -> Option<RegionScan> {
        if !self.scanned.get(i).copied().unwrap_or(false) {
            return None;
        }
        let of = |list: &[(u32, u64, u64)]| {
            list.iter()
                .filter(|w| w.0 as usize == i)
                .map(|&(_, off, v)| (off, v))
                .collect()
        };
        Some(RegionScan {
            words: of(&self.words),
            heap: of(&self.heap),
            handle_table: self
                .handle_tables
                .iter()
                .find(|t| t.0 as usize == i)
                .map(|t| t.1.clone()),
        })
    }
}

/// Each region's scan in turn, from the level's first (`None`: not scanned), as
/// `scan_many` collects them.
impl FromIterator<Option<RegionScan>> for LevelScan {
    fn from_iter<I: IntoIterator<Item = Option<RegionScan>>>(scans: I) -> LevelScan {
        let mut level = LevelScan::default();
        for (i, found) in scans.into_iter().enumerate() {
            level.scanned.push(false);
            level.put(i, found);
        }
        level
    }
}

/// The run of `list` (sorted by its first field) whose first field is `k`, from `*at` on;
/// `*at` moves past it. Keys are asked in ascending order; a key may be skipped only when
/// the list holds none of it (its cursor then already points at a later key).
pub(crate) fn run_of<'a, T>(
    list: &'a [T],
    at: &mut usize,
    k: u32,
    key: impl Fn(&T) -> u32,
) -> &'a [T] {
    let start = (*at).min(list.len());
    let len = list[start..].iter().take_while(|t| key(t) == k).count();
    *at = start + len;
    &list[start..start + len]
}

/// Scans a region's bytes (the pure part of the pointer walk).
pub fn scan_region(bytes: &[u8], bounds: &ScanBounds) -> RegionScan {
    let mut r = RegionScan::default();
    if bytes.len() as u64 <= HANDLE_TABLE_BYTES {
        r.handle_table = handle_table(bytes);
    }
    let in_heap = |v: u64| bounds.heap.is_some_and(|(a, b)| v >= a && v < b);
    for (k, c) in bytes.chunks_exact(8).enumerate() {
        let v = word_at(c, 0);
        if in_heap(v) {
            r.heap.push(((k * 8) as u64, v));
        } else if v >= bounds.lo && v < bounds.hi && v != 0 {
            r.words.push(((k * 8) as u64, v));
        }
    }
    r
}

/// The walk could not read memory it needed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reading {size} bytes at {base:#x} for the pointer scan: {why}")]
pub struct WalkError {
    pub base: u64,
    pub size: u64,
    pub why: String,
}

/// Bounds that keep the walk's cost proportionate.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Regions larger than this are not read to be scanned on the host (an address space
    /// that scans on the device, as the recorder's, scans them all).
    pub scan_bytes: u64,
    /// Most address lookups while following stored pointers.
    pub lookups: usize,
    /// Most candidate words kept for the pointer slots (past it, regions are read again).
    pub candidates: usize,
    /// Stored pointers must lie within this distance of a root region.
    pub window: u64,
    /// A region past `scan_bytes` (scanned where it lies) is followed only when it has at most
    /// this many words that could be pointers: more are data whose words fall in the window
    /// (a pointer table is small), kept for the pointer slots but not looked up.
    pub follow_in_large: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            scan_bytes: 64 << 20,
            lookups: 1 << 14,
            candidates: 1 << 22,
            window: 1 << 40,
            follow_in_large: 4096,
        }
    }
}

/// What the walk starts from.
#[derive(Debug, Clone, Default)]
pub struct Roots<'a> {
    /// The kernel's argument bytes and (offset, size) of each parameter.
    pub args: &'a [u8],
    pub layout: &'a [(u32, u32)],
    /// Module globals resolved in the application: (name, address, size).
    pub globals: &'a [(String, u64, u64)],
    /// Every live allocation, for `--memory all` (empty otherwise).
    pub allocations: &'a [(u64, u64, MemoryKind)],
    /// Device addresses the dispatch reads other than through its pointer arguments (the
    /// linear memory behind its texture objects).
    pub addresses: &'a [u64],
    /// `[low, high)` holding the device heap (`malloc` in kernels), when the context has one.
    pub heap: Option<(u64, u64)>,
}

/// One region to capture; its index in `Walk::regions` is its region id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundRegion {
    pub base: u64,
    pub size: u64,
    pub role: RegionRole,
    pub kind: MemoryKind,
    /// The module global it holds, for `RegionRole::Global`.
    pub global: Option<String>,
    /// `Allocation::readable` of the answer it came from (`None` for globals and for the
    /// allocations `--memory all` adds).
    pub readable: Option<bool>,
}

/// What the dispatch reaches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walk {
    pub regions: Vec<FoundRegion>,
    /// Offsets of argument words that hold device pointers.
    pub pointer_words: Vec<u32>,
    /// (region id, offset) of words in captured memory that point into captured memory.
    pub pointer_slots: Vec<(u32, u64)>,
    /// Words that point into the device heap, which cannot be captured (the first
    /// `HEAP_WORDS_KEPT`; `heap_word_count` counts them all).
    pub heap_words: Vec<HeapWord>,
    pub heap_word_count: u64,
    /// Small regions holding nothing but zeros and words that could be texture handles:
    /// (region id, (offset, value) of each nonzero word), for the driver to confirm.
    pub handle_tables: Vec<(u32, Vec<(u64, u64)>)>,
    pub notes: Vec<String>,
    /// Per region, whether a kernel of the current device may read it whole (the snapshot
    /// then copies and compares many small regions in one launch); filled by the recorder's
    /// adapter after the walk, empty where unknown (nothing taken for readable).
    pub kernel_readable: Vec<bool>,
}

/// A word holding a device-heap address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapWord {
    /// The region holding the word; `None` for an argument word.
    pub region: Option<u32>,
    pub offset: u64,
    pub value: u64,
}

/// How many heap words a walk keeps (they are reported, not followed).
pub const HEAP_WORDS_KEPT: usize = 16;

/// Regions larger than this are not taken for handle tables.
pub const HANDLE_TABLE_BYTES: u64 = 64 << 10;

/// The (offset, value) of every nonzero word of `bytes` when all its aligned 8-byte words are
/// zero or could be handles, and at least one is not zero; otherwise `None`.
pub fn handle_table(bytes: &[u8]) -> Option<Vec<(u64, u64)>> {
    if !bytes.len().is_multiple_of(8) {
        return None;
    }
    let mut out = Vec::new();
    for (k, c) in bytes.chunks_exact(8).enumerate() {
        match word_at(c, 0) {
            0 => {}
            v @ 1..=MAX_HANDLE => out.push(((k * 8) as u64, v)),
            _ => return None,
        }
    }
    (!out.is_empty()).then_some(out)
}

fn word_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|w| w.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn inside(known: &KnownRegions, v: u64) -> bool {
    known.contains(v)
}

struct State {
    walk: Walk,
    known: KnownRegions,
    heap: Option<(u64, u64)>,
    /// Bases of the regions the roots added (argument words and texture addresses come
    /// first, before anything else is known).
    root_bases: HashSet<u64>,
    /// Where the last followed word was answered in `known` (`KnownRegions::contains_near`).
    finger: usize,
}

impl State {
    /// Notes `value` when it points into the heap window (and no captured region).
    fn heap_word(&mut self, region: Option<u32>, offset: u64, value: u64) {
        let Some((lo, hi)) = self.heap else { return };
        if value < lo || value >= hi || inside(&self.known, value) {
            return;
        }
        self.walk.heap_word_count += 1;
        if self.walk.heap_words.len() < HEAP_WORDS_KEPT {
            self.walk.heap_words.push(HeapWord {
                region,
                offset,
                value,
            });
        }
    }

    fn add(&mut self, r: FoundRegion) {
        self.known.push(r.base, r.size);
        self.walk.regions.push(r);
    }

    /// Adds the allocation an argument reaches, unless it is already known.
    fn add_argument(&mut self, a: Allocation) {
        if self.root_bases.insert(a.base) {
            self.add(FoundRegion {
                base: a.base,
                size: a.size,
                role: RegionRole::Argument,
                kind: a.kind,
                global: None,
                readable: a.readable,
            });
        }
    }
}

/// Finds every region the dispatch can reach.
pub fn walk(
    roots: &Roots<'_>,
    space: &mut dyn AddressSpace,
    limits: &Limits,
) -> Result<Walk, WalkError> {
    let mut s = State {
        walk: Walk::default(),
        known: KnownRegions::default(),
        heap: roots.heap,
        root_bases: HashSet::default(),
        finger: 0,
    };
    argument_regions(roots, space, &mut s);
    for &addr in roots.addresses {
        match space.allocation(addr) {
            Some(a) => s.add_argument(a),
            None => s.walk.notes.push(format!(
                "a texture object views {addr:#x}, which is in no allocation kreplay can read; not captured"
            )),
        }
    }
    for (name, addr, size) in roots.globals {
        if *size == 0 {
            continue;
        }
        s.add(FoundRegion {
            base: *addr,
            size: *size,
            role: RegionRole::Global,
            kind: MemoryKind::ModuleGlobal,
            global: Some(name.clone()),
            readable: None,
        });
    }
    let scan = follow_stored_pointers(space, limits, &mut s)?;
    for &(base, size, kind) in roots.allocations {
        if s.known.overlaps(base, size) {
            continue;
        }
        s.add(FoundRegion {
            base,
            size,
            role: RegionRole::Allocation,
            kind,
            global: None,
            readable: None,
        });
    }
    s.walk.pointer_slots = pointer_slots(space, limits, &s, scan)?;
    Ok(s.walk)
}

/// Every aligned 8-byte word inside a parameter of 8 bytes or more that lands in device memory.
fn argument_regions(roots: &Roots<'_>, space: &mut dyn AddressSpace, s: &mut State) {
    for &(off, size) in roots.layout {
        if size < 8 {
            continue;
        }
        let mut w = off.div_ceil(8) * 8;
        while w + 8 <= off + size {
            let word = word_at(roots.args, w as usize);
            if let Some(a) = (word != 0).then(|| space.allocation(word)).flatten() {
                s.walk.pointer_words.push(w);
                s.add_argument(a);
            } else if word != 0 {
                s.heap_word(None, w as u64, word);
            }
            w += 8;
        }
    }
}

/// What the pointer walk read, for the pointer slots.
struct Scan {
    /// (low, high) bounds of the words considered.
    window: Option<(u64, u64)>,
    /// Regions whose candidate words are all in `candidates`.
    /// Indexed by region id (ids are dense: a flag each is cheaper than hashing each of a
    /// pointer table's 10,000 ids).
    scanned: Vec<bool>,
    /// (region, offset, value) of words inside the window.
    candidates: Vec<(u32, u64, u64)>,
}

impl Scan {
    /// `take_candidates` of no words for each region from `first_id` on whose flag is set (a
    /// run of scanned regions that hold nothing), in one pass.
    fn take_empty(&mut self, first_id: usize, scanned: &[bool], limits: &Limits) {
        if scanned.is_empty() || self.candidates.len() > limits.candidates {
            return;
        }
        let end = first_id + scanned.len();
        if self.scanned.len() < end {
            self.scanned.resize(end, false);
        }
        for (kept, &flag) in self.scanned[first_id..end].iter_mut().zip(scanned) {
            *kept |= flag;
        }
    }

    /// Keeps region `region_id`'s candidate words `(_, offset, value)` and counts it among the
    /// regions whose candidates are all kept, while they stay within `limits.candidates`.
    fn take_candidates(&mut self, region_id: u32, words: &[(u32, u64, u64)], limits: &Limits) {
        if self.candidates.len() + words.len() > limits.candidates {
            return;
        }
        let i = region_id as usize;
        if self.scanned.len() <= i {
            self.scanned.resize(i + 1, false);
        }
        self.scanned[i] = true;
        self.candidates
            .extend(words.iter().map(|&(_, off, v)| (region_id, off, v)));
    }
}

fn follow_stored_pointers(
    space: &mut dyn AddressSpace,
    limits: &Limits,
    s: &mut State,
) -> Result<Scan, WalkError> {
    let mut scan = Scan {
        window: None,
        scanned: Vec::new(),
        candidates: Vec::new(),
    };
    let Some((lo, hi)) = s.known.span() else {
        return Ok(scan);
    };
    let lo = lo.saturating_sub(limits.window);
    let hi = hi.saturating_add(limits.window);
    scan.window = Some((lo, hi));
    let mut failed: HashSet<u64> = HashSet::default();
    let mut lookups = 0usize;
    let bounds = ScanBounds {
        lo,
        hi,
        heap: s.heap,
    };
    // Level by level: the regions found so far are scanned together, then followed in order
    // (the regions they reach are the next level).
    let mut level = 0;
    while level < s.walk.regions.len() {
        let (batch, readable): (Vec<(u64, u64)>, Vec<Option<bool>>) = s.walk.regions[level..]
            .iter()
            .map(|r| ((r.base, r.size), r.readable))
            .unzip();
        let first = level;
        level = s.walk.regions.len();
        let found = space.scan_many(&batch, &readable, &bounds, limits)?;
        if follow_level(
            &found,
            &batch,
            first,
            s,
            &mut scan,
            limits,
            space,
            &mut failed,
            &mut lookups,
        ) {
            return Ok(scan);
        }
    }
    Ok(scan)
}

/// Follows a level's scan (`found`, of `batch`, the regions from id `first` on), in region
/// order. Only the regions the scan found something in are visited one by one; the runs of
/// scanned regions between them that hold nothing (most of a pointer table's allocations) are
/// only counted among the regions whose candidates are all known, in bulk, as `follow_region`
/// would count each. True when the lookups ran out (the walk stops following).
#[allow(clippy::too_many_arguments)]
fn follow_level(
    found: &LevelScan,
    batch: &[(u64, u64)],
    first: usize,
    s: &mut State,
    scan: &mut Scan,
    limits: &Limits,
    space: &mut dyn AddressSpace,
    failed: &mut HashSet<u64>,
    lookups: &mut usize,
) -> bool {
    let (mut w, mut h, mut t) = (0, 0, 0);
    let mut next = 0;
    loop {
        // The next region any list names: the lists are by region, their cursors past the
        // regions done.
        let k = [
            found.words.get(w).map(|x| x.0),
            found.heap.get(h).map(|x| x.0),
            found.handle_tables.get(t).map(|x| x.0),
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(batch.len(), |k| (k as usize).min(batch.len()));
        let flags = found.scanned.get(next..k.min(found.scanned.len()));
        scan.take_empty(first + next, flags.unwrap_or(&[]), limits);
        if k >= batch.len() {
            return false;
        }
        let key = k as u32;
        let words = run_of(&found.words, &mut w, key, |x| x.0);
        let heap = run_of(&found.heap, &mut h, key, |x| x.0);
        let table = run_of(&found.handle_tables, &mut t, key, |x| x.0).first();
        next = k + 1;
        if !found.scanned.get(k).copied().unwrap_or(false) {
            continue;
        }
        let region = Followed {
            id: (first + k) as u32,
            size: batch[k].1,
            words,
            heap,
            handle_table: table.map(|x| &x.1),
        };
        if follow_region(s, scan, region, limits, space, failed, lookups) {
            return true;
        }
    }
}

/// One region of a level as `follow_region` takes it: its id in the walk, size, and what its
/// scan found (the level's runs of it).
struct Followed<'a> {
    id: u32,
    size: u64,
    words: &'a [(u32, u64, u64)],
    heap: &'a [(u32, u64, u64)],
    handle_table: Option<&'a Vec<(u64, u64)>>,
}

/// Takes one region's scan into the walk: its handle table, heap words and candidates, and
/// the allocations its words point into (the next level). True when the lookups ran out (the
/// walk stops following).
fn follow_region(
    s: &mut State,
    scan: &mut Scan,
    region: Followed<'_>,
    limits: &Limits,
    space: &mut dyn AddressSpace,
    failed: &mut HashSet<u64>,
    lookups: &mut usize,
) -> bool {
    {
        let Followed {
            id: region_id,
            size,
            words,
            heap,
            handle_table,
        } = region;
        if let Some(t) = handle_table {
            s.walk.handle_tables.push((region_id, t.clone()));
        }
        for &(_, off, v) in heap {
            s.heap_word(Some(region_id), off, v);
        }
        scan.take_candidates(region_id, words, limits);
        if size > limits.scan_bytes && words.len() > limits.follow_in_large {
            s.walk.notes.push(format!(
                "region {region_id} ({size} bytes) holds {} words that could be pointers, too \
                 many for a pointer table: not followed",
                words.len()
            ));
            return false;
        }
        // Room made once for what this region's words may add (see `expect_lookups`).
        let most = words.len().min(limits.lookups.saturating_sub(*lookups));
        s.walk.regions.reserve(most);
        s.known.reserve(most);
        space.expect_lookups(most);
        for &(_, _, v) in words {
            if s.known.contains_near(v, &mut s.finger) || failed.contains(&v) {
                continue;
            }
            *lookups += 1;
            if *lookups > limits.lookups {
                s.walk.notes.push(format!(
                    "stopped following stored pointers after {} lookups",
                    limits.lookups
                ));
                return true;
            }
            match space.allocation(v) {
                Some(a) => s.add(FoundRegion {
                    base: a.base,
                    size: a.size,
                    role: RegionRole::Indirect,
                    kind: a.kind,
                    global: None,
                    readable: a.readable,
                }),
                _ => {
                    failed.insert(v);
                }
            }
        }
    }
    false
}

/// Words in captured memory that point into captured memory. Regions the pointer walk read
/// are settled from its candidates (exact when every captured region lies inside its window);
/// only the others are read again.
fn pointer_slots(
    space: &mut dyn AddressSpace,
    limits: &Limits,
    s: &State,
    mut scan: Scan,
) -> Result<Vec<(u32, u64)>, WalkError> {
    let covered = scan
        .window
        .is_some_and(|(lo, hi)| s.known.iter().all(|&(b, n)| b >= lo && b + n <= hi));
    let mut slots = if covered {
        slots_from_candidates(&scan.candidates, &s.known)
    } else {
        scan.scanned.clear();
        Vec::new()
    };
    if let Some((lo, hi)) = s.known.span() {
        let unscanned: Vec<u32> = (0..s.walk.regions.len() as u32)
            .filter(|&id| !scan.scanned.get(id as usize).copied().unwrap_or(false))
            .collect();
        let (ranges, readable): (Vec<(u64, u64)>, Vec<Option<bool>>) = unscanned
            .iter()
            .map(|&id| {
                let r = &s.walk.regions[id as usize];
                ((r.base, r.size), r.readable)
            })
            .unzip();
        let ids = unscanned;
        let bounds = ScanBounds { lo, hi, heap: None };
        let found = space.scan_many(&ranges, &readable, &bounds, limits)?;
        for &(k, off, v) in &found.words {
            let scanned = found.scanned.get(k as usize).copied().unwrap_or(false);
            if let Some(&id) = ids.get(k as usize).filter(|_| scanned) {
                if inside(&s.known, v) {
                    slots.push((id, off));
                }
            }
        }
    }
    slots.sort_unstable();
    Ok(slots)
}

/// Pointer slots from the pointer walk's candidate words `(region, offset, value)`: those whose
/// value lies inside a captured region `(base, size)`, in region then offset order.
fn slots_from_candidates(candidates: &[(u32, u64, u64)], known: &KnownRegions) -> Vec<(u32, u64)> {
    let mut finger = 0;
    candidates
        .iter()
        .filter(|&&(_, _, v)| known.contains_near(v, &mut finger))
        .map(|&(region, offset, _)| (region, offset))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Allocations with contents and kinds.
    #[derive(Default)]
    struct FakeSpace {
        allocs: BTreeMap<u64, (Vec<u8>, MemoryKind)>,
        lookups: usize,
        reads: Vec<u64>,
    }

    impl FakeSpace {
        fn alloc(&mut self, base: u64, size: usize) -> &mut Self {
            self.allocs
                .insert(base, (vec![0; size], MemoryKind::Device));
            self
        }
        fn host(&mut self, base: u64, size: usize) -> &mut Self {
            self.allocs
                .insert(base, (vec![0; size], MemoryKind::HostMapped));
            self
        }
        fn store(&mut self, base: u64, off: usize, v: u64) -> &mut Self {
            let a = self.allocs.get_mut(&base).expect("allocation");
            a.0[off..off + 8].copy_from_slice(&v.to_le_bytes());
            self
        }
    }

    impl AddressSpace for FakeSpace {
        fn allocation(&mut self, addr: u64) -> Option<Allocation> {
            self.lookups += 1;
            let (&base, (bytes, kind)) = self.allocs.range(..=addr).next_back()?;
            // Device memory says it is readable, host memory says nothing (asked later).
            (addr < base + bytes.len() as u64).then_some(Allocation {
                base,
                size: bytes.len() as u64,
                kind: *kind,
                readable: (*kind == MemoryKind::Device).then_some(true),
            })
        }
        fn read(&mut self, base: u64, size: u64) -> Result<&[u8], WalkError> {
            self.reads.push(base);
            match self.allocs.get(&base) {
                Some((b, ..)) if b.len() as u64 == size => Ok(b),
                _ => Err(WalkError {
                    base,
                    size,
                    why: "not an allocation".into(),
                }),
            }
        }
    }

    fn args(words: &[u64]) -> (Vec<u8>, Vec<(u32, u32)>) {
        let bytes = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let layout = (0..words.len() as u32).map(|i| (i * 8, 8)).collect();
        (bytes, layout)
    }

    /// Roots of the argument words alone.
    fn arg_roots<'a>(args: &'a [u8], layout: &'a [(u32, u32)]) -> Roots<'a> {
        Roots {
            args,
            layout,
            ..Default::default()
        }
    }

    fn run(space: &mut FakeSpace, words: &[u64], globals: &[(String, u64, u64)]) -> Walk {
        let (bytes, layout) = args(words);
        let roots = Roots {
            args: &bytes,
            layout: &layout,
            globals,
            allocations: &[],
            addresses: &[],
            heap: None,
        };
        walk(&roots, space, &Limits::default()).expect("walk")
    }

    fn bases(w: &Walk) -> Vec<(u64, RegionRole)> {
        w.regions.iter().map(|r| (r.base, r.role)).collect()
    }

    #[test]
    fn arguments_inside_allocations_become_regions_once() {
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 256).alloc(0x20_0000, 64);
        // Two words into the same allocation (one at an interior address), a scalar, null.
        let w = run(&mut s, &[0x10_0000, 0x10_0040, 42, 0, 0x20_0000], &[]);
        assert_eq!(
            bases(&w),
            vec![
                (0x10_0000, RegionRole::Argument),
                (0x20_0000, RegionRole::Argument)
            ]
        );
        assert_eq!(w.pointer_words, vec![0, 8, 32]);
        assert!(w.pointer_slots.is_empty());
    }

    #[test]
    fn pointer_tables_are_followed_transitively_and_cycles_end() {
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 64) // table of two pointers
            .alloc(0x20_0000, 64) // points back at the table (a cycle) and on to 0x30_0000
            .alloc(0x30_0000, 32)
            .alloc(0x40_0000, 32); // unreachable
        s.store(0x10_0000, 0, 0x20_0000)
            .store(0x10_0000, 8, 0x20_0010)
            .store(0x20_0000, 16, 0x10_0000)
            .store(0x20_0000, 24, 0x30_0008);
        let w = run(&mut s, &[0x10_0000], &[]);
        assert_eq!(
            bases(&w),
            vec![
                (0x10_0000, RegionRole::Argument),
                (0x20_0000, RegionRole::Indirect),
                (0x30_0000, RegionRole::Indirect)
            ]
        );
        assert_eq!(w.pointer_slots, vec![(0, 0), (0, 8), (1, 16), (1, 24)]);
        // Each region read once: the slots came from the walk's candidates.
        assert_eq!(s.reads, vec![0x10_0000, 0x20_0000, 0x30_0000]);
    }

    #[test]
    fn globals_are_roots_of_the_walk() {
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 16) // the global's storage
            .alloc(0x50_0000, 128); // a lookup table only the global points to
        s.store(0x10_0000, 8, 0x50_0000);
        let globals = vec![("lut_sp".to_string(), 0x10_0000, 16)];
        let w = run(&mut s, &[7], &globals);
        assert_eq!(
            bases(&w),
            vec![
                (0x10_0000, RegionRole::Global),
                (0x50_0000, RegionRole::Indirect)
            ]
        );
        assert_eq!(w.regions[0].global.as_deref(), Some("lut_sp"));
        assert_eq!(w.regions[0].kind, MemoryKind::ModuleGlobal);
        assert_eq!(w.pointer_slots, vec![(0, 8)]);
        assert!(w.pointer_words.is_empty());
    }

    #[test]
    fn host_mapped_memory_is_captured_like_device_memory() {
        let mut s = FakeSpace::default();
        s.host(0x7000_0000, 64).alloc(0x10_0000, 64);
        s.store(0x10_0000, 0, 0x7000_0008);
        let w = run(&mut s, &[0x10_0000, 0x7000_0000], &[]);
        assert_eq!(
            bases(&w),
            vec![
                (0x10_0000, RegionRole::Argument),
                (0x7000_0000, RegionRole::Argument)
            ]
        );
        assert_eq!(w.regions[1].kind, MemoryKind::HostMapped);
        assert_eq!(w.pointer_words, vec![0, 8]);
        // The device buffer's word pointing into the host buffer is a pointer slot.
        assert_eq!(w.pointer_slots, vec![(0, 0)]);
        assert!(w.notes.is_empty(), "{:?}", w.notes);
    }

    #[test]
    fn texture_memory_is_a_root_without_a_pointer_word() {
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 64).alloc(0x20_0000, 256);
        let (bytes, layout) = args(&[0x10_0000, 3]);
        let roots = Roots {
            args: &bytes,
            layout: &layout,
            addresses: &[0x20_0010, 0x10_0000, 0x99_0000],
            ..Roots::default()
        };
        let w = walk(&roots, &mut s, &Limits::default()).expect("walk");
        assert_eq!(
            bases(&w),
            vec![
                (0x10_0000, RegionRole::Argument),
                (0x20_0000, RegionRole::Argument)
            ]
        );
        assert_eq!(w.pointer_words, vec![0], "the handle word is not a pointer");
        assert_eq!(w.notes.len(), 1, "{:?}", w.notes);
        assert!(w.notes[0].contains("0x990000"), "{:?}", w.notes);
    }

    #[test]
    fn handle_tables_hold_nothing_but_small_words() {
        let table: Vec<u8> = [2u64, 0, 3, 4]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(handle_table(&table), Some(vec![(0, 2), (16, 3), (24, 4)]));
        // A pointer or a float pair among them: not a table.
        let mixed: Vec<u8> = [2u64, 0x7f00_0000_0000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(handle_table(&mixed), None);
        assert_eq!(handle_table(&[0u8; 64]), None, "all zero");
        assert_eq!(handle_table(&[1u8; 12]), None, "not whole words");
    }

    #[test]
    fn small_regions_of_handle_like_words_are_offered_as_handle_tables() {
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 24).alloc(0x20_0000, 16);
        s.store(0x10_0000, 0, 4)
            .store(0x10_0000, 8, 5)
            .store(0x10_0000, 16, 6);
        s.store(0x20_0000, 0, 7)
            .store(0x20_0000, 8, 0x7f00_0000_0000); // not a table
        let w = run(&mut s, &[0x10_0000, 0x20_0000], &[]);
        assert_eq!(w.handle_tables, vec![(0, vec![(0, 4), (8, 5), (16, 6)])]);
    }

    #[test]
    fn device_heap_words_are_reported_not_followed() {
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 64);
        // A table of heap pointers, and an argument word pointing into the heap.
        s.store(0x10_0000, 0, 0x2054_0320)
            .store(0x10_0000, 8, 0x2054_0420)
            .store(0x10_0000, 16, 0x10_0008); // a pointer into the table itself
        let (bytes, layout) = args(&[0x10_0000, 0x2054_0600]);
        let roots = Roots {
            args: &bytes,
            layout: &layout,
            heap: Some((0x2000_0000, 0x2200_0000)),
            ..Roots::default()
        };
        let w = walk(&roots, &mut s, &Limits::default()).expect("walk");
        assert_eq!(bases(&w), vec![(0x10_0000, RegionRole::Argument)]);
        assert_eq!(w.pointer_words, vec![0]);
        assert_eq!(w.heap_word_count, 3);
        assert_eq!(
            w.heap_words,
            vec![
                HeapWord {
                    region: None,
                    offset: 8,
                    value: 0x2054_0600
                },
                HeapWord {
                    region: Some(0),
                    offset: 0,
                    value: 0x2054_0320
                },
                HeapWord {
                    region: Some(0),
                    offset: 8,
                    value: 0x2054_0420
                },
            ]
        );
        assert_eq!(w.pointer_slots, vec![(0, 16)]);
        // Without a heap, the same words are plain values.
        let w = run(&mut s, &[0x10_0000, 0x2054_0600], &[]);
        assert_eq!(w.heap_word_count, 0);
    }

    #[test]
    fn memory_all_adds_the_allocations_not_reached() {
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 64);
        let (bytes, layout) = args(&[0x10_0000]);
        let all = [
            (0x10_0000, 64, MemoryKind::Device),    // reached already
            (0x10_0020, 8, MemoryKind::Device),     // overlaps a reached region
            (0x90_0000, 4096, MemoryKind::Managed), // new
        ];
        let roots = Roots {
            args: &bytes,
            layout: &layout,
            globals: &[],
            allocations: &all,
            addresses: &[],
            heap: None,
        };
        s.alloc(0x90_0000, 4096);
        let w = walk(&roots, &mut s, &Limits::default()).expect("walk");
        assert_eq!(
            bases(&w),
            vec![
                (0x10_0000, RegionRole::Argument),
                (0x90_0000, RegionRole::Allocation)
            ]
        );
        assert_eq!(w.regions[1].kind, MemoryKind::Managed);
    }

    #[test]
    fn large_regions_are_not_scanned_and_lookups_are_bounded() {
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 1024).alloc(0x20_0000, 64);
        s.store(0x10_0000, 0, 0x20_0000);
        let (bytes, layout) = args(&[0x10_0000]);
        let roots = arg_roots(&bytes, &layout);
        let small = Limits {
            scan_bytes: 512,
            ..Limits::default()
        };
        let w = walk(&roots, &mut s, &small).expect("walk");
        assert_eq!(
            w.regions.len(),
            1,
            "a 1 KiB region is past a 512-byte scan limit"
        );
        assert!(s.reads.is_empty());

        // Many distinct non-pointer words near the roots: the lookups stop at the limit.
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 8 * 100);
        for i in 0..100 {
            s.store(0x10_0000, i * 8, 0x10_0000 + 0x10_0000 * (i as u64 + 1));
        }
        let few = Limits {
            lookups: 10,
            ..Limits::default()
        };
        let w = walk(&roots, &mut s, &few).expect("walk");
        assert!(
            w.notes.iter().any(|n| n.contains("after 10 lookups")),
            "{:?}",
            w.notes
        );
        assert!(s.lookups <= 1 + 10, "{} lookups", s.lookups);
    }

    /// A space that scans regions itself, whatever their size (as the recorder's GPU scan),
    /// and never hands out bytes.
    struct DeviceScans(FakeSpace);

    impl AddressSpace for DeviceScans {
        fn allocation(&mut self, addr: u64) -> Option<Allocation> {
            self.0.allocation(addr)
        }
        fn read(&mut self, base: u64, size: u64) -> Result<&[u8], WalkError> {
            Err(WalkError {
                base,
                size,
                why: "this space scans on the device".into(),
            })
        }
        fn scan(
            &mut self,
            base: u64,
            _size: u64,
            bounds: &ScanBounds,
            _limits: &Limits,
        ) -> Result<Option<RegionScan>, WalkError> {
            let bytes = &self.0.allocs[&base].0;
            let mut found = scan_region(bytes, bounds);
            found.handle_table = None;
            Ok(Some(found))
        }
    }

    // Catches: the walk still cutting regions at the host-scan limit (or reading them to the
    // host) when the space scans them where they are, and the pointer slots not taken from the
    // space's scan.
    #[test]
    fn a_space_that_scans_on_the_device_follows_regions_past_the_host_limit() {
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 1024).alloc(0x20_0000, 64);
        s.store(0x10_0000, 512, 0x20_0000);
        let (bytes, layout) = args(&[0x10_0000]);
        let roots = arg_roots(&bytes, &layout);
        let small = Limits {
            scan_bytes: 512,
            ..Limits::default()
        };
        let w = walk(&roots, &mut DeviceScans(s), &small).expect("walk");
        assert_eq!(
            bases(&w),
            vec![
                (0x10_0000, RegionRole::Argument),
                (0x20_0000, RegionRole::Indirect)
            ]
        );
        assert_eq!(w.pointer_slots, vec![(0, 512)]);
    }

    // Catches: a large region full of words that fall in the pointer window (integers, say)
    // followed word by word, each lookup a chance to pull a whole other allocation in; or such
    // a region dropped from the pointer slots, or skipped without a note.
    #[test]
    fn a_large_region_dense_with_pointer_like_words_is_not_followed() {
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 1024).alloc(0x20_0000, 64);
        for i in 0..100 {
            s.store(0x10_0000, i * 8, 0x20_0000 + (i as u64 % 8) * 8);
        }
        let (bytes, layout) = args(&[0x10_0000]);
        let roots = arg_roots(&bytes, &layout);
        let dense = Limits {
            scan_bytes: 512,
            follow_in_large: 10,
            ..Limits::default()
        };
        let w = walk(&roots, &mut DeviceScans(s), &dense).expect("walk");
        assert_eq!(w.regions.len(), 1, "not followed: {:?}", bases(&w));
        assert!(
            w.notes
                .iter()
                .any(|n| n.contains("100 words that could be pointers")),
            "{:?}",
            w.notes
        );
    }

    // Catches: a level's flat lists giving one region's words to its neighbour (the walk
    // would follow pointers from the wrong region and name the wrong pointer slots), a region
    // not scanned taken for one scanned empty, or a handle table lost.
    #[test]
    fn a_level_gives_each_region_back_its_own_scan() {
        let scan = |words: &[(u64, u64)], heap: &[(u64, u64)], table: bool| RegionScan {
            words: words.to_vec(),
            heap: heap.to_vec(),
            handle_table: table.then(|| vec![(0, 7)]),
        };
        let regions = [
            Some(scan(&[(0, 0x10), (8, 0x20)], &[], false)),
            None,
            Some(scan(&[], &[], false)),
            Some(scan(&[(16, 0x30)], &[(24, 0x99)], true)),
        ];
        let level: LevelScan = regions.iter().cloned().collect();
        for (i, r) in regions.iter().enumerate() {
            assert_eq!(&level.region(i), r, "region {i}");
        }
        assert_eq!(level.region(9), None, "past the level");
        let (mut at, mut got) = (0, Vec::new());
        for k in 0..4 {
            got.push(run_of(&level.words, &mut at, k, |w| w.0).len());
        }
        assert_eq!(got, [2, 0, 0, 1], "each region's run of words, in order");
    }

    /// A space that scans as `FakeSpace` but answers each level in one `scan_many`, recording
    /// how many regions each call held and the readable flags it was given with them.
    struct Batches(FakeSpace, Vec<usize>, Vec<Option<bool>>);

    impl AddressSpace for Batches {
        fn allocation(&mut self, addr: u64) -> Option<Allocation> {
            self.0.allocation(addr)
        }
        fn read(&mut self, base: u64, size: u64) -> Result<&[u8], WalkError> {
            self.0.read(base, size)
        }
        fn scan_many(
            &mut self,
            regions: &[(u64, u64)],
            readable: &[Option<bool>],
            bounds: &ScanBounds,
            limits: &Limits,
        ) -> Result<LevelScan, WalkError> {
            assert_eq!(readable.len(), regions.len(), "a flag per region");
            self.1.push(regions.len());
            self.2.extend_from_slice(readable);
            regions
                .iter()
                .map(|&(b, n)| self.0.scan(b, n, bounds, limits))
                .collect()
        }
    }

    // Catches: the walk asking the space for one region at a time (a pointer table's
    // thousands of allocations then cost a GPU launch each), or a level's regions scanned
    // together but followed out of order (the region ids, and so the capture, would change).
    #[test]
    fn each_level_of_the_walk_is_scanned_in_one_call_with_the_same_result() {
        let table = 0x10_0000u64;
        let mut s = FakeSpace::default();
        s.alloc(table, 50 * 8);
        for i in 0..50u64 {
            let a = 0x100_0000 + i * 0x1000;
            s.alloc(a, 64).store(table, (i * 8) as usize, a);
        }
        // The 7th allocation points on to one more (a third level).
        s.alloc(0x900_0000, 32)
            .store(0x100_0000 + 6 * 0x1000, 8, 0x900_0000);
        let (bytes, layout) = args(&[table]);
        let roots = arg_roots(&bytes, &layout);
        let one_by_one = walk(&roots, &mut s, &Limits::default()).expect("walk");
        let mut b = Batches(s, Vec::new(), Vec::new());
        let batched = walk(&roots, &mut b, &Limits::default()).expect("walk");
        assert_eq!(batched, one_by_one);
        assert_eq!(batched.regions.len(), 52);
        assert_eq!(batched.regions[7].base, 0x100_0000 + 6 * 0x1000);
        assert_eq!(batched.regions[51].base, 0x900_0000);
        // The table, its 50 allocations, the one after; the slots came from the candidates.
        assert_eq!(b.1, vec![1, 50, 1, 0]);
        // Catches: a region's readable flag from its answer lost on the way to the level's
        // scan (the space would ask again for each of a pointer table's regions).
        assert_eq!(
            b.2,
            vec![Some(true); 52],
            "each answer's flag, with its region"
        );
        assert!(batched.regions.iter().all(|r| r.readable == Some(true)));
    }

    #[test]
    fn slots_are_found_again_when_candidates_overflow() {
        let mut s = FakeSpace::default();
        s.alloc(0x10_0000, 64).alloc(0x20_0000, 64);
        s.store(0x10_0000, 0, 0x20_0000)
            .store(0x20_0000, 8, 0x10_0000);
        let (bytes, layout) = args(&[0x10_0000]);
        let roots = arg_roots(&bytes, &layout);
        let none = Limits {
            candidates: 0,
            ..Limits::default()
        };
        let w = walk(&roots, &mut s, &none).expect("walk");
        assert_eq!(w.pointer_slots, vec![(0, 0), (1, 8)]);
        // The walk read each region, then the slots read them again.
        assert_eq!(s.reads, vec![0x10_0000, 0x20_0000, 0x10_0000, 0x20_0000]);
    }

    #[test]
    fn a_read_failure_is_an_error_not_a_silent_gap() {
        struct Broken;
        impl AddressSpace for Broken {
            fn allocation(&mut self, addr: u64) -> Option<Allocation> {
                Some(Allocation {
                    base: addr,
                    size: 64,
                    kind: MemoryKind::Device,
                    readable: None,
                })
            }
            fn read(&mut self, base: u64, size: u64) -> Result<&[u8], WalkError> {
                Err(WalkError {
                    base,
                    size,
                    why: "gone".into(),
                })
            }
        }
        let (bytes, layout) = args(&[0x10_0000]);
        let roots = arg_roots(&bytes, &layout);
        let e = walk(&roots, &mut Broken, &Limits::default()).unwrap_err();
        assert!(
            e.to_string().contains("0x100000") && e.to_string().contains("gone"),
            "{e}"
        );
    }
}
