//! The reachable-memory adapter: the walk (`walk`) run over this process's memory, through the
//! driver's allocation queries and a pinned staging buffer, from a launch's arguments, its
//! module's globals and its texture objects: what the first `Footprint` (see `footprint`)
//! reads.

// Fx-hashed, as in the walk: the looked-up map is asked once or twice per region found.
use rustc_hash::FxHashMap as HashMap;
use std::sync::Mutex;

use kreplay_cuda::chunks::TooManyHits;
use kreplay_cuda::texture::MAX_HANDLE;
use kreplay_cuda::{copy_dtoh, pointer, DeviceBuffer, ForeignFunction, PinnedBuffer, Stream};
use kreplay_format::MemoryKind;

use crate::device_resources::{scratch_allowed, with_chunk_kernels};
use crate::device_table::TableUse;
use crate::error::RecordError;
use crate::walk::{
    run_of, walk, AddressSpace, Allocation, LevelScan, Limits, RegionScan, Roots, ScanBounds, Walk,
    WalkError, HANDLE_TABLE_BYTES,
};

/// Regions larger than this are not read to the host to be scanned for pointers (where the GPU
/// scan cannot take them: not device memory, or the scan failed).
const POINTER_SCAN_LIMIT: u64 = 64 << 20;
/// Room for this many hits in a first GPU pointer scan of a region (16 bytes each); a region
/// with more is scanned again with room for all, up to the walk's candidate bound.
pub(crate) const FIRST_SCAN_HITS: u32 = 1 << 16;
/// Regions at most this large are scanned for pointers together, in one launch per level of
/// the walk (larger ones one by one, as their scan is long anyway).
pub(crate) const BATCH_REGION_BYTES: u64 = 1 << 20;
/// Most bytes one region grows to while joining contiguous VMM mappings.
pub(crate) const VMM_EXTENT_LIMIT: u64 = 64 << 30;

/// Page-locked buffer the pointer scan reads regions into (full PCIe speed, allocated once).
static STAGING: Mutex<Option<PinnedBuffer>> = Mutex::new(None);

/// Frees the staging buffer (page-locked memory dies with the context that allocated it; the
/// next walk makes a new one).
pub(crate) fn forget_staging() {
    *lock_staging() = None;
}

pub(crate) fn lock_staging() -> std::sync::MutexGuard<'static, Option<PinnedBuffer>> {
    STAGING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process's memory as the walk sees it: the driver's allocation queries, and reads
/// through the pinned staging buffer.
pub(crate) struct DeviceSpace<'a> {
    pub(crate) staging: &'a mut Option<PinnedBuffer>,
    /// The stream the GPU pointer scans run on (made at the first).
    pub(crate) stream: Option<Stream>,
    /// A GPU scan failed in this walk: the rest is scanned on the host.
    pub(crate) gpu_failed: bool,
    /// The allocations this walk asked the driver about: base -> (size, a kernel of this
    /// device may read it whole), for the questions a region's own flag does not answer
    /// (`FoundRegion::readable`; the table's answers are not kept here).
    pub(crate) looked_up: crate::looked_up::LookedUp,
    /// The current device's ordinal, asked once.
    pub(crate) ordinal: Option<Option<u32>>,
    /// Time in allocation lookups and in scans, and their counts (`KREPLAY_DEBUG_STALL`).
    pub(crate) spent: WalkTimes,
    /// Whether the lookups are timed (`KREPLAY_DEBUG_STALL`).
    pub(crate) timing: bool,
    /// Whether the GPU scan of a large region also copies it to device scratch (the capture's
    /// snapshot, see `WalkCopies`).
    pub(crate) copy_large: bool,
    pub(crate) copies: WalkCopies,
    /// Whether lookups ask the recorder's table of `cuMemAlloc` allocations first
    /// (`device_table`; `KREPLAY_DEBUG_TABLE`).
    pub(crate) table: TableUse,
    /// How the table is asked: live, then through a view of it (see `table_holding`).
    pub(crate) table_asked: TableAsked,
    /// kreplay's own allocations, asked about every answer (a view: no lock per answer).
    pub(crate) owned: kreplay_cuda::owned::OwnedView,
}

/// How a walk asks the recorder's table.
pub(crate) enum TableAsked {
    /// Under its lock, this many questions so far (a view is taken at `ASKS_BEFORE_A_VIEW`).
    Live(u32),
    /// Through the view taken then.
    View(crate::device_table::TableView),
    /// Under its lock for the rest of the walk: it changed since the view (or gave none).
    LiveFromNowOn,
}

/// Questions the live table answers before the walk takes a view of it: copying the whole
/// table costs more than a few questions (a walk of a few arguments asks a handful), less
/// than a pointer table's thousands.
const ASKS_BEFORE_A_VIEW: u32 = 32;

/// Regions past this size scanned on the GPU one by one are copied to device scratch by the
/// same pass when the capture asks (`DeviceSpace::copy_large`): the snapshot then costs no
/// second read of them (16 GiB: the walk's 5.3 ms).
const COPIED_BY_THE_SCAN: u64 = BATCH_REGION_BYTES;

/// Device scratch copies of regions the walk made while scanning them (base -> copy of the
/// whole region), for the snapshot to take instead of copying again.
#[derive(Default)]
pub struct WalkCopies(HashMap<u64, DeviceBuffer>);

impl WalkCopies {
    /// The copy of the region `[base, base + size)`, when the walk made one of exactly it.
    pub(crate) fn take(&mut self, base: u64, size: u64) -> Option<DeviceBuffer> {
        let copy = self.0.remove(&base)?;
        (copy.len() as u64 == size).then_some(copy)
    }

    /// Whether `take` would give a copy of `[base, base + size)`.
    pub(crate) fn holds(&self, base: u64, size: u64) -> bool {
        self.0.get(&base).is_some_and(|c| c.len() as u64 == size)
    }
}

/// Where a walk's time went: (count, nanoseconds) of lookups and of scan calls.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WalkTimes {
    pub lookups: (u64, u64),
    /// Whole `allocation` calls: the driver's lookup and this space's own note of it.
    pub answers: (u64, u64),
    pub scans: (u64, u64),
    /// Lookups the table answered, and (`KREPLAY_DEBUG_TABLE=check`) of those the driver
    /// answered otherwise.
    pub from_table: u64,
    pub table_disagreed: u64,
}

/// Runs `f`, adding one call and its time to `slot`.
fn timed<T>(slot: &mut (u64, u64), f: impl FnOnce() -> T) -> T {
    let t = std::time::Instant::now();
    let out = f();
    slot.0 += 1;
    slot.1 += t.elapsed().as_nanos() as u64;
    out
}

impl DeviceSpace<'_> {
    pub(crate) fn new(staging: &mut Option<PinnedBuffer>) -> DeviceSpace<'_> {
        DeviceSpace {
            staging,
            stream: None,
            gpu_failed: false,
            looked_up: crate::looked_up::LookedUp::default(),
            ordinal: None,
            spent: WalkTimes::default(),
            timing: std::env::var_os("KREPLAY_DEBUG_STALL").is_some(),
            copy_large: false,
            copies: WalkCopies::default(),
            table: TableUse::from_env(),
            table_asked: TableAsked::Live(0),
            owned: kreplay_cuda::owned::OwnedView::default(),
        }
    }

    fn current_ordinal(&mut self) -> Option<u32> {
        *self.ordinal.get_or_insert_with(|| {
            kreplay_cuda::Device::current()
                .ok()
                .and_then(|d| u32::try_from(d.ordinal()).ok())
        })
    }

    /// `AddressSpace::allocation`'s work: the driver's lookup, kreplay's own memory left out,
    /// and the answer kept for the scans.
    fn answer(&mut self, addr: u64) -> Option<Allocation> {
        if let Some(found) = self.answer_from_table(addr) {
            return Some(found);
        }
        let look = || pointer::allocation_facts(addr, VMM_EXTENT_LIMIT);
        // Timed only when asked: two clock reads per lookup, 10,000 of them for a pointer table.
        let facts = if self.timing {
            timed(&mut self.spent.lookups, look)
        } else {
            look()
        }?;
        // A word inside kreplay's own scratch (up to the driver's rounding of its length) is
        // data that looks like a pointer, not one. Asked after the lookup, once per lookup
        // (about 25 ns, a tenth of the driver call): such words are rare.
        if self.owned.contains(facts.base) {
            return None;
        }
        let ordinal = self.current_ordinal();
        // A joined VMM range is checked mapping by mapping where it is scanned.
        let readable = (!facts.vmm).then(|| ordinal.is_some_and(|o| facts.kernel_readable_on(o)));
        if let Some(readable) = readable {
            self.looked_up.insert(facts.base, facts.size, readable);
        }
        let kind = if facts.host {
            MemoryKind::HostMapped
        } else if facts.managed {
            MemoryKind::Managed
        } else {
            MemoryKind::Device
        };
        Some(Allocation {
            base: facts.base,
            size: facts.size,
            kind,
            readable,
        })
    }

    /// `answer` from the recorder's table (`device_table`), without the driver: `cuMemAlloc`
    /// memory of the process's one context, which its kernels (and the GPU scan) may read
    /// whole. `None`: not in the table, or the table does not answer; the driver is asked.
    fn answer_from_table(&mut self, addr: u64) -> Option<Allocation> {
        if self.table == TableUse::Off {
            return None;
        }
        let (base, size) = self.table_holding(addr)?;
        // The recorder's own allocations do not enter the table (their callbacks are marked
        // as its own), but one made unmarked would: a word there is data, as in `answer`.
        if self.owned.contains(base) {
            return None;
        }
        self.spent.from_table += 1;
        if self.table == TableUse::Check {
            let driver = pointer::allocation_facts(addr, VMM_EXTENT_LIMIT);
            let agrees = driver.is_some_and(|f| {
                (f.base, f.size) == (base, size) && !f.host && !f.managed && !f.vmm
            });
            if !agrees {
                // The driver's answer is taken: the check must not fault on what it finds.
                self.spent.table_disagreed += 1;
                return None;
            }
        }
        // Not kept in `looked_up`: the answer's flag goes with its region (`readable`), and a
        // table's allocations handed out in runs that each start below the last came out of
        // order there, two hash operations each; the rare later question (a region scanned
        // alone) asks the driver, a microsecond.
        Some(Allocation {
            base,
            size,
            kind: MemoryKind::Device,
            readable: Some(true),
        })
    }

    /// The table's entry holding `addr`: from the view taken after `ASKS_BEFORE_A_VIEW`
    /// questions while the table is unchanged, else from the live table.
    fn table_holding(&mut self, addr: u64) -> Option<(u64, u64)> {
        match &mut self.table_asked {
            TableAsked::Live(n) if *n < ASKS_BEFORE_A_VIEW => *n += 1,
            TableAsked::Live(_) => {
                self.table_asked = match crate::device_table::table().view() {
                    Some(view) => TableAsked::View(view),
                    None => TableAsked::LiveFromNowOn,
                };
                return self.table_holding(addr);
            }
            TableAsked::View(view) if view.current() => return view.holding(addr),
            TableAsked::View(_) => self.table_asked = TableAsked::LiveFromNowOn,
            TableAsked::LiveFromNowOn => {}
        }
        crate::device_table::table().holding(addr)
    }

    /// `known` (a region's flag from its answer, `FoundRegion::readable`), else
    /// `kernel_readable`.
    fn readable_as_known(&mut self, base: u64, size: u64, known: Option<bool>) -> bool {
        known.unwrap_or_else(|| self.kernel_readable(base, size))
    }

    /// Whether a kernel of this device may read `[base, base + size)`: from the walk's own
    /// lookup when it made one of exactly this allocation, else asked of the driver.
    pub(crate) fn kernel_readable(&mut self, base: u64, size: u64) -> bool {
        match self.looked_up.get(base) {
            Some((s, readable)) if s == size => readable,
            _ => gpu_readable(base, size),
        }
    }
}

impl Drop for DeviceSpace<'_> {
    /// The scan stream goes to the context's spares for the next walk, unless a scan failed
    /// (its stream may still hold work, or an error).
    fn drop(&mut self) {
        if let Some(s) = self.stream.take().filter(|_| !self.gpu_failed) {
            crate::spares::return_stream(s);
        }
    }
}

/// Most mappings of one region the GPU scan's check walks (VMM regions join mappings).
const MAX_MAPPINGS_CHECKED: usize = 1 << 16;

/// Whether a kernel of the current device may read `[base, base + size)`: every mapping of it
/// (joined VMM mappings included) is device memory of this device, not managed. Anything else
/// takes the host path, whose copies fail cleanly where a kernel's fault would end the
/// application's context.
fn gpu_readable(base: u64, size: u64) -> bool {
    let Ok(device) = kreplay_cuda::Device::current() else {
        return false;
    };
    let Ok(ordinal) = u32::try_from(device.ordinal()) else {
        return false;
    };
    let end = base.saturating_add(size);
    let mut at = base;
    for _ in 0..MAX_MAPPINGS_CHECKED {
        if at >= end {
            return true;
        }
        let Some((b, s)) = pointer::address_range(at) else {
            return false;
        };
        let mapped_to = b.saturating_add(s);
        // Device memory that is not managed is of memory type DEVICE (not HOST).
        let this_device = pointer::is_device_memory(at)
            && !pointer::is_managed(at)
            && pointer::device_ordinal(at) == Some(ordinal);
        if !this_device || mapped_to <= at {
            return false;
        }
        at = mapped_to;
    }
    false
}

impl DeviceSpace<'_> {
    /// The stream the GPU scans run on, made at the first (`None`: none could be made).
    fn scan_stream(&mut self) -> Option<&Stream> {
        if self.stream.is_none() {
            self.stream = crate::spares::spare_stream().ok();
        }
        self.stream.as_ref()
    }

    /// `[base, base + size)` scanned on the GPU: `None` where it cannot be (the kernels do not
    /// load, more hits than the walk keeps, device scratch short, a launch refused: then no
    /// more GPU scans in this walk), and the host scans instead. The hit buffer is allocated
    /// with the chunk kernels' lock held: callers run with the recorder's own driver calls
    /// marked (`SELF_CALLS`, as every walk does), so the allocation's callback does not come
    /// back into the recorder.
    fn gpu_scan(
        &mut self,
        base: u64,
        size: u64,
        bounds: &ScanBounds,
        limits: &Limits,
    ) -> Option<RegionScan> {
        self.scan_stream()?;
        let stream = self.stream.as_ref()?;
        let most = u32::try_from(limits.candidates).unwrap_or(u32::MAX);
        let mut cap = FIRST_SCAN_HITS.min(most);
        // The snapshot's copy, made by the first pass (complete also when the hits overflow).
        let mut copy = (self.copy_large
            && size > COPIED_BY_THE_SCAN
            && size.is_multiple_of(8)
            && !self.copies.0.contains_key(&base)
            && scratch_allowed(size + 16 + u64::from(cap) * 16))
        .then(|| DeviceBuffer::new(usize::try_from(size).ok()?).ok())
        .flatten();
        loop {
            // The hit buffer is device scratch like a snapshot's: never the application's last
            // free memory. The snapshot's copy gives its room back to the scan first.
            if !scratch_allowed(16 + u64::from(cap) * 16) {
                if copy.take().is_some() {
                    continue;
                }
                return None;
            }
            let window = (bounds.lo, bounds.hi);
            let copy_to = copy.as_ref().map(DeviceBuffer::ptr);
            // SAFETY: the walk scans an allocation the driver reported (`base`, `size`), device
            // memory, with the context synchronised; the scan only reads it, and writes only
            // our own copy of `size` bytes.
            let scanned = with_chunk_kernels(|k| unsafe {
                k.pointer_scan(base, size, window, bounds.heap, cap, copy_to, stream)
            });
            if let (Ok(_), Some(c)) = (&scanned, copy.take()) {
                self.copies.0.insert(base, c);
            }
            match scanned {
                Ok(Ok(hits)) => {
                    return Some(RegionScan {
                        words: hits.words,
                        heap: hits.heap,
                        handle_table: None,
                    })
                }
                Ok(Err(TooManyHits(n))) if n <= most as u64 && cap < most => cap = n as u32,
                Ok(Err(_)) => return None,
                Err(_) => {
                    self.gpu_failed = true;
                    return None;
                }
            }
        }
    }
}

impl AddressSpace for DeviceSpace<'_> {
    fn expect_lookups(&mut self, additional: usize) {
        self.looked_up.reserve(additional);
    }

    fn allocation(&mut self, addr: u64) -> Option<Allocation> {
        if self.timing {
            let t = std::time::Instant::now();
            let out = self.answer(addr);
            self.spent.answers.0 += 1;
            self.spent.answers.1 += t.elapsed().as_nanos() as u64;
            out
        } else {
            self.answer(addr)
        }
    }

    fn read(&mut self, base: u64, size: u64) -> Result<&[u8], WalkError> {
        let fail = |why: String| WalkError { base, size, why };
        let n = usize::try_from(size).map_err(|_| fail("too large".into()))?;
        // Sized to what is needed (pinning costs time while the application waits).
        if self
            .staging
            .as_ref()
            .is_none_or(|st| st.as_slice().len() < n)
        {
            let cap = n.next_power_of_two().max(1 << 20);
            *self.staging = None;
            *self.staging = Some(PinnedBuffer::new(cap).map_err(|e| fail(e.to_string()))?);
        }
        let Some(st) = self.staging.as_mut() else {
            return Err(fail("no staging buffer".into()));
        };
        let view = &mut st.as_mut_slice()[..n];
        crate::trace::trace("region to read for the pointer scan");
        // SAFETY: the walk reads an allocation the driver reported (`base`, `size`), with the
        // context synchronised; no Rust value of kreplay's lives there.
        unsafe { copy_dtoh(view, base) }.map_err(|e| fail(e.to_string()))?;
        crate::trace::trace("region read (the scan follows)");
        Ok(view)
    }

    /// Device memory of this device beyond the size of a texture-handle table is scanned on
    /// the GPU (only the words found come back); the rest, and anything the GPU scan cannot
    /// take, is read and scanned on the host as before: page-locked and managed memory (a
    /// kernel reading managed memory would migrate the application's pages), another
    /// device's memory, a region some mapping of which is not this device's.
    fn scan(
        &mut self,
        base: u64,
        size: u64,
        bounds: &ScanBounds,
        limits: &Limits,
    ) -> Result<Option<RegionScan>, WalkError> {
        if size > HANDLE_TABLE_BYTES
            && base.is_multiple_of(8)
            && !self.gpu_failed
            && self.kernel_readable(base, size)
        {
            crate::trace::trace("region to scan for pointers on the GPU");
            if let Some(found) = self.gpu_scan(base, size, bounds, limits) {
                crate::trace::trace_with(|| {
                    format!(
                        "region scanned on the GPU: {} words found",
                        found.words.len()
                    )
                });
                return Ok(Some(found));
            }
        }
        crate::walk::host_scan(self, (base, size), bounds, limits)
    }

    /// The small regions a kernel may read are scanned on the GPU together (one launch, only
    /// the words found and each region's shape come back); a small region whose words could
    /// all be texture handles is read and scanned on the host, as before, to be taken for a
    /// handle table. The others, and all of them when the GPU scan cannot run, one by one.
    fn scan_many(
        &mut self,
        regions: &[(u64, u64)],
        readable: &[Option<bool>],
        bounds: &ScanBounds,
        limits: &Limits,
    ) -> Result<LevelScan, WalkError> {
        let t = std::time::Instant::now();
        let out = self.scan_level(regions, readable, bounds, limits);
        self.spent.scans.0 += regions.len() as u64;
        self.spent.scans.1 += t.elapsed().as_nanos() as u64;
        out
    }
}

impl DeviceSpace<'_> {
    /// `scan_many`'s work (see there): `readable` the regions' flags from their answers, where
    /// known (the others are asked).
    fn scan_level(
        &mut self,
        regions: &[(u64, u64)],
        readable: &[Option<bool>],
        bounds: &ScanBounds,
        limits: &Limits,
    ) -> Result<LevelScan, WalkError> {
        crate::trace::trace_with(|| format!("walk level: {} regions to scan", regions.len()));
        let batch: Vec<usize> = (0..regions.len())
            .filter(|&i| {
                let (base, size) = regions[i];
                size > 0
                    && size <= BATCH_REGION_BYTES
                    && base.is_multiple_of(8)
                    && !self.gpu_failed
                    && self.readable_as_known(base, size, readable.get(i).copied().flatten())
            })
            .collect();
        crate::trace::trace_with(|| {
            format!("walk level: {} regions for one GPU scan", batch.len())
        });
        let mut hits = None;
        if batch.len() > 1 {
            let ranges: Vec<(u64, u64)> = batch.iter().map(|&i| regions[i]).collect();
            hits = self.gpu_scan_many(&ranges, bounds, limits);
            crate::trace::trace("walk level: GPU scan back");
        }
        // Region by region in order: the GPU's answer where it scanned the region (and the
        // region is not a small one of handle-like words, read on the host as a handle table),
        // else one scan of its own. The GPU's lists are by batch index: each region's run is
        // found by moving a cursor along them.
        let mut level = LevelScan::unscanned(regions.len());
        let (mut w, mut h) = (0, 0);
        let mut in_batch = batch.iter().copied().enumerate().peekable();
        for (i, &(base, size)) in regions.iter().enumerate() {
            let j = in_batch.next_if(|&(_, b)| b == i).map(|(j, _)| j);
            let gpu = hits.as_ref().zip(j).and_then(|(hits, j)| {
                // Every batch index is asked, in order (`run_of`'s contract).
                let key = u32::try_from(j).ok()?;
                let words = run_of(&hits.words, &mut w, key, |x| x.0);
                let heap = run_of(&hits.heap, &mut h, key, |x| x.0);
                let like = hits.handle_like.get(j).copied().unwrap_or(false);
                (!(like && size <= HANDLE_TABLE_BYTES)).then_some((words, heap))
            });
            match gpu {
                Some((words, heap)) => {
                    level.put_words(
                        i,
                        words.iter().map(|&(_, off, v)| (off, v)),
                        heap.iter().map(|&(_, off, v)| (off, v)),
                    );
                }
                None => {
                    let found = self.scan(base, size, bounds, limits)?;
                    level.put(i, found);
                }
            }
        }
        crate::trace::trace("walk level: scanned");
        Ok(level)
    }
}

impl DeviceSpace<'_> {
    /// `gpu_scan` of many small regions in one launch (see `ChunkKernels::pointer_scan_many`);
    /// `None` where it cannot run, as `gpu_scan`.
    fn gpu_scan_many(
        &mut self,
        ranges: &[(u64, u64)],
        bounds: &ScanBounds,
        limits: &Limits,
    ) -> Option<kreplay_cuda::many::ManyPointerHits> {
        self.scan_stream()?;
        let stream = self.stream.as_ref()?;
        let most = u32::try_from(limits.candidates).unwrap_or(u32::MAX);
        let mut cap = FIRST_SCAN_HITS.min(most);
        loop {
            let pieces = ranges
                .iter()
                .map(|&(_, size)| size.div_ceil(kreplay_cuda::many::PIECE_BYTES))
                .sum::<u64>();
            if !scratch_allowed(32 + pieces * 36 + u64::from(cap) * 24) {
                return None;
            }
            let window = (bounds.lo, bounds.hi);
            // SAFETY: every range is an allocation the driver reported, device memory of this
            // device that a kernel may read (`kernel_readable`), with the context synchronised;
            // the scan only reads it.
            let scanned = with_chunk_kernels(|k| unsafe {
                k.pointer_scan_many(ranges, window, bounds.heap, MAX_HANDLE, cap, stream)
            });
            match scanned {
                Ok(Ok(hits)) => return Some(hits),
                Ok(Err(TooManyHits(n))) if n <= most as u64 && cap < most => cap = n as u32,
                Ok(Err(_)) => return None,
                Err(_) => {
                    self.gpu_failed = true;
                    return None;
                }
            }
        }
    }
}

/// The module's `__device__`/`__constant__` variables as the application's module holds them:
/// (name, address, size); those the driver does not resolve are left out.
pub(crate) fn resolve_globals(
    function: &ForeignFunction,
    objects: &[(String, u64)],
) -> Vec<(String, u64, u64)> {
    let Ok(module) = function.module() else {
        return Vec::new();
    };
    objects
        .iter()
        .filter_map(|(name, _)| module.global(name).ok().map(|(a, s)| (name.clone(), a, s)))
        .collect()
}

/// Which words point into the device heap, in words, when some do.
pub(crate) fn heap_note(found: &Walk) -> Option<String> {
    if found.heap_word_count == 0 {
        return None;
    }
    let shown: Vec<String> = found
        .heap_words
        .iter()
        .take(4)
        .map(|h| match h.region {
            None => format!("argument offset {} = {:#x}", h.offset, h.value),
            Some(r) => format!("region {r} offset {:#x} = {:#x}", h.offset, h.value),
        })
        .collect();
    let more = found.heap_word_count - shown.len() as u64;
    Some(format!(
        "{} word(s) point into the device heap (malloc inside kernels): {}{}. The heap cannot be read outside a kernel (the driver resolves none of its addresses), so it is not captured: a replay that follows these pointers reads memory that is not there",
        found.heap_word_count,
        shown.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    ))
}

/// Everything a dispatch can reach: the regions (walked from its arguments, module globals and
/// texture objects, following pointers in the memory read), and the texture objects found.
/// Call with the context synchronised.
pub(crate) fn reach(
    args: &[u8],
    layout: &[(u32, u32)],
    function: &ForeignFunction,
    module_objects: &[(String, u64)],
    allocations: &[(u64, u64, MemoryKind)],
    copy_large: bool,
) -> Result<(Walk, crate::textures::Found, WalkCopies), RecordError> {
    let globals = resolve_globals(function, module_objects);
    crate::trace::trace_with(|| {
        format!(
            "globals resolved ({} of {})",
            globals.len(),
            module_objects.len()
        )
    });
    let textures = crate::textures::find(args, layout);
    // Only where a kernel that calls malloc has run (the probe changes nothing otherwise).
    let heap = kreplay_cuda::heap::probe().ok().flatten();
    crate::trace::trace("heap probed");
    let mut staging = lock_staging();
    let mut space = DeviceSpace::new(&mut staging);
    space.copy_large = copy_large;
    let walked = std::time::Instant::now();
    let faults = if space.timing {
        crate::trace::minor_faults()
    } else {
        0
    };
    let found = walk(
        &Roots {
            args,
            layout,
            globals: &globals,
            allocations,
            addresses: &textures.addresses,
            heap: heap.map(|h| h.bounds()),
        },
        &mut space,
        &Limits {
            scan_bytes: POINTER_SCAN_LIMIT,
            ..Limits::default()
        },
    )?;
    if space.timing {
        let WalkTimes {
            lookups,
            answers,
            scans,
            ..
        } = space.spent;
        let all = walked.elapsed().as_nanos() as u64;
        crate::diag!(
            "kreplay: walk: {} regions in {:.1} ms: {} answered by the table{}; {} lookups {:.1} ms (answered in {:.1} ms); {} regions scanned {:.1} ms; the rest {:.1} ms; {} minor page faults",
            found.regions.len(),
            all as f64 / 1e6,
            space.spent.from_table,
            match space.table {
                TableUse::Check => format!(" ({} of them answered otherwise by the driver)", space.spent.table_disagreed),
                TableUse::Off => " (off)".into(),
                TableUse::On => String::new(),
            },
            lookups.0,
            lookups.1 as f64 / 1e6,
            answers.1 as f64 / 1e6,
            scans.0,
            scans.1 as f64 / 1e6,
            all.saturating_sub(answers.1 + scans.1) as f64 / 1e6,
            crate::trace::minor_faults().saturating_sub(faults)
        );
    }
    crate::trace::trace("walk done");
    let mut found = found;
    // From each region's own answer where it came with one (a pointer table's 10,000 regions
    // asked again cost a third of a millisecond on the H100 machine).
    found.kernel_readable = found
        .regions
        .iter()
        .map(|r| r.base.is_multiple_of(16) && space.readable_as_known(r.base, r.size, r.readable))
        .collect();
    let copies = std::mem::take(&mut space.copies);
    crate::trace::trace("walk: readable regions known");
    Ok((found, textures, copies))
}
