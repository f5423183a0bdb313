//! The chunk kernels over many pieces at once (`kreplay_copy_many`, `kreplay_scan_many`,
//! `kreplay_pointer_scan_many` in `kernels/chunks.cu`): a dispatch that reaches thousands of
//! small allocations (a pointer table, #34) is copied, compared and scanned for pointers in one
//! launch each, not one per allocation. The caller's ranges are cut into pieces of at most
//! `PIECE_BYTES` (`pieces`, a pure function), one per block at a time; the pieces' table goes
//! to the device in one copy.

use crate::chunks::{flags, memset_async, unsuitable, word, ChunkFlags, ChunkKernels, TooManyHits};
use crate::error::CuResult;
use crate::launch::{launch, KernelArgs, LaunchConfig};
use crate::memory::{copy_dtoh, DeviceBuffer};
use crate::stream::{AsStream, Stream};
use crate::sys;
use crate::Function;

/// The most bytes of one piece: a block's share. A scan's pieces are cut at its chunks too
/// (`scan_rows`), so a piece never straddles two chunks.
pub const PIECE_BYTES: u64 = 64 << 10;
/// The smallest chunk a scan of many pieces compares in: a 4 KiB page (a block of 256 threads
/// reads it in one 16-byte load each).
pub const MIN_SCAN_CHUNK: u64 = 4 << 10;
/// The pointer scan's mark of a hit inside the device heap (as `kreplay_pointer_scan`'s).
const HEAP_BIT: u64 = 1 << 63;

/// `[offset, offset + len)` pieces of a `size`-byte range, each at most `PIECE_BYTES` long and
/// starting at a multiple of it.
pub fn pieces(size: u64) -> impl Iterator<Item = (u64, u64)> {
    pieces_of(size, PIECE_BYTES)
}

/// `pieces` of at most `piece` bytes (not 0), each starting at a multiple of it.
fn pieces_of(size: u64, piece: u64) -> impl Iterator<Item = (u64, u64)> {
    let piece = piece.max(1);
    (0..size.div_ceil(piece)).map(move |k| {
        let offset = k * piece;
        (offset, piece.min(size - offset))
    })
}

/// One range to compare: `bytes` at `pre` against `post` (0: none), its chunks' flags from
/// `first_flag` on, chunks of `1 << chunk_shift` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManyScan {
    pub pre: u64,
    pub post: u64,
    pub bytes: u64,
    pub chunk_shift: u32,
    pub first_flag: usize,
}

/// The scan rows (pre, post, bytes, flag) of `scans`, one per piece, and the flag count.
pub fn scan_rows(scans: &[ManyScan]) -> (Vec<u64>, usize) {
    // At least a row each: room made once (a pointer table's 10,000 rows grown by doubling
    // touched twice the fresh pages while the application waited).
    let mut rows = Vec::with_capacity(scans.len() * 4);
    let mut flag_count = 0;
    for s in scans {
        // A chunk below a piece's size (a page) cuts the pieces too: one flag each.
        let piece = PIECE_BYTES.min(1u64 << s.chunk_shift.min(63));
        for (offset, len) in pieces_of(s.bytes, piece) {
            let flag = s.first_flag + (offset >> s.chunk_shift) as usize;
            flag_count = flag_count.max(flag + 1);
            let post = if s.post == 0 { 0 } else { s.post + offset };
            rows.extend_from_slice(&[s.pre + offset, post, len, flag as u64]);
        }
    }
    (rows, flag_count)
}

/// The copy rows (dst, src, bytes) of `copies` (dst, src, bytes), one per piece.
pub fn copy_rows(copies: &[(u64, u64, u64)]) -> Vec<u64> {
    let mut rows = Vec::with_capacity(copies.len() * 3);
    for &(dst, src, bytes) in copies {
        for (offset, len) in pieces(bytes) {
            rows.extend_from_slice(&[dst + offset, src + offset, len]);
        }
    }
    rows
}

/// The pointer-scan rows (words, word count, tag, first word) of `regions` (address, bytes),
/// the tag the region's index; and each piece's region, in row order. A region's trailing
/// bytes past its last whole word are not scanned (as the host scan).
pub fn pointer_rows(regions: &[(u64, u64)]) -> (Vec<u64>, Vec<usize>) {
    let mut rows = Vec::with_capacity(regions.len() * 4);
    let mut owner = Vec::with_capacity(regions.len());
    for (i, &(addr, bytes)) in regions.iter().enumerate() {
        for (offset, len) in pieces(bytes - bytes % 8) {
            rows.extend_from_slice(&[addr + offset, len / 8, i as u64, offset / 8]);
            owner.push(i);
        }
    }
    (rows, owner)
}

/// The output bytes of `ChunkKernels::pointer_scan_many` over `pieces` pieces with room for
/// `cap` hits: the count (16 bytes keep what follows aligned), a shape word a piece, then
/// three words a hit.
pub fn pointer_scan_out_len(pieces: usize, cap: u32) -> usize {
    (16 + pieces * 4).next_multiple_of(16) + cap as usize * 24
}

/// What the pointer scan over many regions found, flat: a pointer table's 10,000 regions as a
/// `Vec` each (two lists of them, each sorted) took fresh pages and a pass per region while
/// the application waited, where most regions hold nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManyPointerHits {
    /// (region index, byte offset, value) of the words inside the pointer window, by region
    /// then offset.
    pub words: Vec<(u32, u64, u64)>,
    /// (region index, byte offset, value) of the words inside the device heap, likewise.
    pub heap: Vec<(u32, u64, u64)>,
    /// Per region: it may be a table of texture handles (every word at most the handle bound,
    /// one nonzero), for the host to read and decide.
    pub handle_like: Vec<bool>,
}

/// The hits (tag, key, value) of the many-region scan and the pieces' shape words, per region.
pub fn many_hits(raw: &[u8], shape: &[u8], owner: &[usize], regions: usize) -> ManyPointerHits {
    // Room for every hit at once (a pointer table's 10,000 grown by doubling were copied over
    // and over while the application waited).
    let mut hits = ManyPointerHits {
        words: Vec::with_capacity(raw.len() / 24),
        ..ManyPointerHits::default()
    };
    for triple in raw.chunks_exact(24) {
        let (tag, key, value) = (
            word(&triple[..8]),
            word(&triple[8..16]),
            word(&triple[16..]),
        );
        let Some(i) = u32::try_from(tag).ok().filter(|&i| (i as usize) < regions) else {
            continue;
        };
        let offset = (key & !HEAP_BIT) * 8;
        match key & HEAP_BIT {
            0 => hits.words.push((i, offset, value)),
            _ => hits.heap.push((i, offset, value)),
        }
    }
    order_hits(&mut hits.words, regions);
    order_hits(&mut hits.heap, regions);
    // A region is handle-like when no piece holds a word past the bound and one holds a
    // nonzero word: bit 0 a big word seen, bit 1 a nonzero one.
    let mut seen = vec![0u8; regions];
    for (s, &i) in shape.chunks_exact(4).zip(owner) {
        let v = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        if let Some(r) = seen.get_mut(i) {
            *r |= (v & 3) as u8;
        }
    }
    hits.handle_like = seen.into_iter().map(|r| r == 2).collect();
    hits
}

/// Sorts hits `(region, offset, value)` (regions below `regions`) by region then offset, as
/// `sort_unstable` would, without comparing them: they are counted into their regions, and a
/// region's run, which the kernel wrote a warp's ascending words at a time in no order, is put
/// in place by its offsets where they are dense (a pointer table's 10,000 words, one region,
/// took a third of a millisecond to sort). Offsets are unique within a region (each word is
/// scanned once); a run where they are not, or are sparse, is sorted.
pub fn order_hits(hits: &mut Vec<(u32, u64, u64)>, regions: usize) {
    // One pass for what decides the path: already in order, one region, all regions counted.
    let (mut sorted, mut one_region, mut counted) = (true, true, true);
    for (k, h) in hits.iter().enumerate() {
        if k > 0 {
            sorted &= hits[k - 1] <= *h;
            one_region &= h.0 == hits[0].0;
        }
        counted &= (h.0 as usize) < regions;
    }
    if sorted {
        return;
    }
    if one_region {
        // A pointer table's level: no counting, and the placed run replaces the list.
        if let Some(placed) = placed_by_offset(hits) {
            *hits = placed;
        } else {
            hits.sort_unstable();
        }
        return;
    }
    let by_region = if counted {
        // Counted into regions, stable (each run keeps the kernel's order).
        let mut start = vec![0usize; regions + 1];
        for h in hits.iter() {
            start[h.0 as usize + 1] += 1;
        }
        for i in 0..regions {
            start[i + 1] += start[i];
        }
        let mut out = vec![(0u32, 0u64, 0u64); hits.len()];
        for &h in hits.iter() {
            let at = &mut start[h.0 as usize];
            out[*at] = h;
            *at += 1;
        }
        out
    } else {
        let mut all = std::mem::take(hits);
        all.sort_unstable();
        all
    };
    *hits = by_region;
    let mut at = 0;
    while at < hits.len() {
        let region = hits[at].0;
        let len = hits[at..].iter().take_while(|h| h.0 == region).count();
        let run = &mut hits[at..at + len];
        if !run.is_sorted_by_key(|h| h.1) {
            match placed_by_offset(run) {
                Some(placed) => run.copy_from_slice(&placed),
                None => run.sort_unstable(),
            }
        }
        at += len;
    }
}

/// One region's hits in offset order, placed by offset, when the offsets are 8-byte words
/// spanning at most four times the run's length and none repeats; `None` otherwise (the caller
/// sorts).
fn placed_by_offset(run: &[(u32, u64, u64)]) -> Option<Vec<(u32, u64, u64)>> {
    let first = run.first()?.1;
    let (mut lo, mut hi, mut aligned) = (first, first, true);
    for h in run {
        lo = lo.min(h.1);
        hi = hi.max(h.1);
        aligned &= h.1 % 8 == first % 8;
    }
    let span = (hi - lo) / 8 + 1;
    if !aligned || span > 4 * run.len() as u64 {
        return None;
    }
    let mut slot = vec![u32::MAX; span as usize];
    for (k, h) in run.iter().enumerate() {
        let s = &mut slot[((h.1 - lo) / 8) as usize];
        if *s != u32::MAX {
            return None;
        }
        *s = k as u32;
    }
    Some(
        slot.iter()
            .filter(|&&k| k != u32::MAX)
            .map(|&k| run[k as usize])
            .collect(),
    )
}

/// Refuses a scan whose chunk is below `MIN_SCAN_CHUNK` (or not a shift at all).
fn refuse_small_chunks(scans: &[ManyScan]) -> CuResult<()> {
    match scans
        .iter()
        .find(|s| s.chunk_shift >= 64 || (1u64 << s.chunk_shift) < MIN_SCAN_CHUNK)
    {
        Some(s) => Err(unsuitable(format!(
            "chunk shift {} is not a chunk of at least {MIN_SCAN_CHUNK} bytes",
            s.chunk_shift
        ))),
        None => Ok(()),
    }
}

/// The table of a copy queued by `ChunkKernels::queue_copy_many`, alive until its stream has
/// run it (dropped before then, its buffer's free waits for the device).
#[must_use = "give it back with `copies_done` once the stream is synchronised"]
pub struct QueuedCopies {
    table: Option<DeviceBuffer>,
    /// The rows' host memory, kept until the copy has run: a pageable upload has staged them
    /// when its call returns, but memory the application registered is read by the DMA later.
    _rows: Vec<u64>,
    /// The rows uploaded in the same table for `copy_later`: (first row, row count).
    later: (u64, u64),
}

/// A table of copies kept on the device: the same copies queued again and again (profile's
/// restores between passes) cost one launch each, and neither a copy call per range (about
/// 5 us of GPU time each on the H200, measured: 32 restores of 16 KiB took 167 us against
/// 36 us for one of 64 MiB) nor an upload per launch.
pub struct CopyTable(KeptRows);

/// Rows of a many-pieces kernel uploaded once into a buffer of their own (never the shared
/// row buffer `upload_rows` hands out, which the next launch would overwrite), with the grid
/// that runs them.
struct KeptRows {
    rows: DeviceBuffer,
    n: u64,
    grid: u32,
}

impl KeptRows {
    /// Queues `function` over the rows: its arguments the rows, their count, then `extra`.
    ///
    /// # Safety
    /// What `function` reads and writes through the rows and `extra` is readable and writable
    /// (`crate::memory`'s contracts), and `self` lives, until the launch has run.
    unsafe fn launch(&self, function: &Function, extra: &[u64], stream: &Stream) -> CuResult<()> {
        if self.n == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig::new([self.grid, 1, 1], [crate::chunks::THREADS, 1, 1], 0);
        let mut words = vec![self.rows.ptr(), self.n];
        words.extend_from_slice(extra);
        // SAFETY: the rows are ours, `n` of them; the memory they and `extra` name is covered
        // by this function's contract.
        unsafe { launch(function, &cfg, &mut KernelArgs::words(&words), stream) }
    }
}

/// The rows as the kernels read them: little-endian words. On a little-endian host that is
/// the words' own memory, uploaded without a copy (a pointer table's tables of 10,000 rows,
/// copied into fresh pages, cost about 80 page faults each, 2 us apiece on the H200 machine).
#[cfg(target_endian = "little")]
fn row_bytes(rows: &[u64]) -> std::borrow::Cow<'_, [u8]> {
    // SAFETY: the bytes of `rows`' own initialised memory, `size_of_val(rows)` of them; `u8`
    // has no alignment or validity requirement, and the borrow keeps `rows` alive and
    // unchanged for as long as the byte view.
    std::borrow::Cow::Borrowed(unsafe {
        std::slice::from_raw_parts(rows.as_ptr().cast::<u8>(), std::mem::size_of_val(rows))
    })
}

/// The rows as the kernels read them: little-endian words.
#[cfg(not(target_endian = "little"))]
fn row_bytes(rows: &[u64]) -> std::borrow::Cow<'_, [u8]> {
    let mut bytes = Vec::with_capacity(rows.len() * 8);
    for w in rows {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    std::borrow::Cow::Owned(bytes)
}

impl ChunkKernels {
    /// `rows` (`width` words each) in a device buffer of their own, uploaded and waited for.
    fn kept_rows(&self, rows: &[u64], width: usize) -> CuResult<KeptRows> {
        let bytes = row_bytes(rows);
        let buf = DeviceBuffer::new(bytes.len().max(8))?;
        // SAFETY: `buf` is our own buffer of at least `bytes.len()` bytes.
        unsafe { crate::memory::copy_htod(buf.ptr(), &bytes)? };
        let n = (rows.len() / width) as u64;
        Ok(KeptRows {
            rows: buf,
            n,
            grid: self.grid_for(n),
        })
    }

    /// The table of `copies` (dst, src, bytes) on the device, uploaded (and waited for).
    pub fn copy_table(&self, copies: &[(u64, u64, u64)]) -> CuResult<CopyTable> {
        self.kept_rows(&copy_rows(copies), 3).map(CopyTable)
    }

    /// Queues every copy of `table` on `stream`, not waited for.
    ///
    /// # Safety
    /// Each copy's source is *readable* and its destination *writable* (`crate::memory`'s
    /// contracts), no destination overlaps a source, and `table` lives, until the launch has
    /// run.
    pub unsafe fn queue_copies(&self, table: &CopyTable, stream: &Stream) -> CuResult<()> {
        // SAFETY: the kernel copies the table's pieces, each inside a caller's copy, which this
        // function's contract covers; the caller keeps the table alive until it ran.
        unsafe { table.0.launch(&self.copy_many, &[], stream) }
    }
}

/// A table of scans kept on the device (profile's output check after every pass, page by
/// page): one memset and one launch each time, no upload.
pub struct ScanTable {
    rows: KeptRows,
    flags: usize,
}

impl ScanTable {
    /// The flags one run writes: `flags()` words saying nonzero, then as many saying changed.
    pub fn flags(&self) -> usize {
        self.flags
    }
}

impl ChunkKernels {
    /// The table of `scans` on the device, uploaded (and waited for); refused as `scan_many`
    /// refuses a chunk below `MIN_SCAN_CHUNK`.
    pub fn scan_table(&self, scans: &[ManyScan]) -> CuResult<ScanTable> {
        refuse_small_chunks(scans)?;
        let (rows, flags) = scan_rows(scans);
        Ok(ScanTable {
            rows: self.kept_rows(&rows, 4)?,
            flags,
        })
    }

    /// Queues the table's scans on `stream`, their flags written at `out` (zeroed first:
    /// `8 x table.flags()` bytes, the nonzero words then the changed ones); not waited for.
    ///
    /// # Safety
    /// Every scan's ranges are *readable*, `[out, out + 8 x flags)` is *writable*
    /// (`crate::memory`'s contracts), and `table` lives, until the launch has run.
    pub unsafe fn queue_scan(&self, table: &ScanTable, out: u64, stream: &Stream) -> CuResult<()> {
        if table.rows.n == 0 {
            return Ok(());
        }
        // SAFETY: `out` is writable for `8 x flags` bytes by this function's contract.
        unsafe { memset_async(out, table.flags * 8, stream)? };
        let changed = out + table.flags as u64 * 4;
        // SAFETY: the kernel reads the table's pieces (inside the caller's readable ranges) and
        // writes the flags at `out`, both covered by this function's contract.
        unsafe { table.rows.launch(&self.scan_many, &[out, changed], stream) }
    }
}

impl ChunkKernels {
    /// The rows' table on the device (the kept row buffer when large enough), copied there
    /// before the launch that reads it is queued on `stream`.
    fn upload_rows(&self, rows: &[u64], stream: &Stream) -> CuResult<DeviceBuffer> {
        let bytes = row_bytes(rows);
        let buf = self.take_rows(bytes.len().max(8))?;
        crate::error::check(
            // SAFETY: `buf` is our own buffer of at least `bytes.len()` bytes; the copy is
            // queued on `stream` before the kernel that reads it, and `buf` is kept or freed
            // only after the stream is synchronised. The host bytes are pageable: the driver
            // has staged them when the call returns.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    buf.ptr(),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    stream.raw_stream(),
                )
            },
            "cuMemcpyHtoDAsync",
        )?;
        Ok(buf)
    }

    /// Queues the copy kernel over `n` rows of `table` (`copy_rows`) on `stream`.
    ///
    /// # Safety
    /// Each row's source is *readable* and its destination *writable* (`crate::memory`'s
    /// contracts), no destination overlaps a source, and `table` lives, until the launch has
    /// run.
    unsafe fn launch_copies(&self, table: u64, n: u64, stream: &Stream) -> CuResult<()> {
        let cfg = LaunchConfig::new([self.grid_for(n), 1, 1], [crate::chunks::THREADS, 1, 1], 0);
        // SAFETY: the kernel copies the rows' pieces, each inside a row's range, which this
        // function's contract covers.
        unsafe {
            launch(
                &self.copy_many,
                &cfg,
                &mut KernelArgs::words(&[table, n]),
                stream,
            )
        }
    }

    /// Copies each `(dst, src, bytes)`. Queued on `stream` and waited for.
    ///
    /// # Safety
    /// Each `[src, src + bytes)` is *readable* and each `[dst, dst + bytes)` *writable*
    /// (`crate::memory`'s contracts), and no destination overlaps a source, until this returns.
    pub unsafe fn copy_many(&self, copies: &[(u64, u64, u64)], stream: &Stream) -> CuResult<()> {
        let rows = copy_rows(copies);
        let n = (rows.len() / 3) as u64;
        if n == 0 {
            return Ok(());
        }
        let table = self.upload_rows(&rows, stream)?;
        crate::steps::step("copy: rows uploaded");
        // SAFETY: the rows' copies are the caller's, which this function's contract covers;
        // the table outlives the launch (synchronised below).
        unsafe { self.launch_copies(table.ptr(), n, stream)? };
        stream.synchronize()?;
        crate::steps::step("copy: waited for");
        self.keep_rows(table);
        Ok(())
    }

    /// `copy_many`, queued on `stream` and not waited for: the table goes up on `upload`, an
    /// idle stream of the caller's (a pageable upload may wait for its stream's earlier work,
    /// and `stream` may hold the settle's sweeps), and `stream` waits for it. Give the returned
    /// table back with `copies_done` once `stream` is synchronised.
    ///
    /// # Safety
    /// Each `[src, src + bytes)` is *readable* and each `[dst, dst + bytes)` *writable*
    /// (`crate::memory`'s contracts), and no destination overlaps a source, until `stream` has
    /// run the copy.
    pub unsafe fn queue_copy_many(
        &self,
        copies: &[(u64, u64, u64)],
        stream: &Stream,
        upload: &Stream,
    ) -> CuResult<QueuedCopies> {
        // SAFETY: this function's contract, with nothing kept for later.
        unsafe { self.queue_copies_keeping(copies, &[], stream, upload) }
    }

    /// `queue_copy_many` of `now`, with the rows of `later` uploaded in the same table and not
    /// launched: `copy_later` queues them, one launch and no upload (the post-dispatch copy of
    /// the regions whose pre bytes `now` copies, when the application waits).
    ///
    /// # Safety
    /// As `queue_copy_many` for `now`; `later`'s copies are `copy_later`'s to vouch for.
    pub unsafe fn queue_copies_keeping(
        &self,
        now: &[(u64, u64, u64)],
        later: &[(u64, u64, u64)],
        stream: &Stream,
        upload: &Stream,
    ) -> CuResult<QueuedCopies> {
        let mut rows = copy_rows(now);
        let n = (rows.len() / 3) as u64;
        rows.extend(copy_rows(later));
        let kept = (rows.len() / 3) as u64 - n;
        if rows.is_empty() {
            return Ok(QueuedCopies {
                table: None,
                _rows: rows,
                later: (0, 0),
            });
        }
        let table = self.upload_rows(&rows, upload)?;
        crate::steps::step("queued copy: rows uploaded");
        let uploaded = crate::stream::Event::untimed()?;
        uploaded.record(upload)?;
        crate::step_ops::wait_event(stream, &uploaded)?;
        if n > 0 {
            // SAFETY: the rows' copies are the caller's, which this function's contract
            // covers; the launch runs after the table's upload (the event), and the table
            // lives in the returned value until the caller saw `stream` synchronised.
            unsafe { self.launch_copies(table.ptr(), n, stream)? };
        }
        Ok(QueuedCopies {
            table: Some(table),
            _rows: rows,
            later: (n, kept),
        })
    }

    /// Queues on `stream` (not waited for) the copies `queue_copies_keeping` kept for later.
    ///
    /// # Safety
    /// The stream `queued` was queued on has been synchronised (it waited for the table's
    /// upload); each later copy's source is *readable* and its destination *writable*
    /// (`crate::memory`'s contracts), no destination overlapping a source, and `queued` lives,
    /// until `stream` has run the launch.
    pub unsafe fn copy_later(&self, queued: &QueuedCopies, stream: &Stream) -> CuResult<()> {
        let (first, n) = queued.later;
        let Some(table) = queued.table.as_ref().filter(|_| n > 0) else {
            return Ok(());
        };
        // SAFETY: rows `first..first + n` of the table (three words each), uploaded and
        // complete (the contract); their copies are the caller's, which the contract covers.
        unsafe { self.launch_copies(table.ptr() + first * 3 * 8, n, stream) }
    }

    /// Takes back the table of a `queue_copy_many` whose stream is synchronised (kept for the
    /// next call, as `copy_many` keeps its own).
    pub fn copies_done(&self, queued: QueuedCopies) {
        if let Some(table) = queued.table {
            self.keep_rows(table);
        }
    }

    /// Which chunks of each scan's `pre` hold a nonzero byte and which differ from its `post`:
    /// flags indexed from each scan's `first_flag`. Queued on `stream` and waited for.
    ///
    /// # Safety
    /// Each scan's `[pre, pre + bytes)` and (when not 0) `[post, post + bytes)` are *readable*
    /// (`crate::memory`'s contract) until this returns.
    pub unsafe fn scan_many(&self, scans: &[ManyScan], stream: &Stream) -> CuResult<ChunkFlags> {
        refuse_small_chunks(scans)?;
        let (rows, flag_count) = scan_rows(scans);
        let n = (rows.len() / 4) as u64;
        if n == 0 {
            return Ok(ChunkFlags {
                nonzero: vec![false; flag_count],
                changed: vec![false; flag_count],
            });
        }
        let table = self.upload_rows(&rows, stream)?;
        crate::steps::step("compare: rows uploaded");
        let out_len = flag_count * 8;
        let grid = self.grid_for(n);
        // SAFETY: the kernel reads the pieces (inside the caller's ranges, readable by this
        // function's contract) and the table, and writes `8 x flag_count` bytes at `out`.
        let host = unsafe {
            self.run_into_grid(
                &self.scan_many,
                grid,
                out_len,
                |out| vec![table.ptr(), n, out, out + flag_count as u64 * 4],
                stream,
            )
        };
        // Kept only once its stream is known synchronised (a failed call may leave the upload
        // queued: the next call must not write the buffer under it).
        let host = host?;
        self.keep_rows(table);
        Ok(ChunkFlags {
            nonzero: flags(&host[..flag_count * 4]),
            changed: flags(&host[flag_count * 4..]),
        })
    }

    /// `pointer_scan` over each of `regions` (address 8-byte aligned, bytes), with room for
    /// `cap` hits in all; also which regions may be handle tables (`max_handle` the largest
    /// handle). Queued on `stream` and waited for.
    ///
    /// # Safety
    /// Each `[addr, addr + bytes)` is *readable* (`crate::memory`'s contract) until this
    /// returns.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn pointer_scan_many(
        &self,
        regions: &[(u64, u64)],
        window: (u64, u64),
        heap: Option<(u64, u64)>,
        max_handle: u64,
        cap: u32,
        stream: &Stream,
    ) -> CuResult<Result<ManyPointerHits, TooManyHits>> {
        if let Some(&(a, _)) = regions.iter().find(|(a, _)| !a.is_multiple_of(8)) {
            return Err(unsuitable(format!("address {a:#x} is not 8-byte aligned")));
        }
        // The kernel counts hits in 32 bits: no more words than that may hit.
        let words: u64 = regions.iter().map(|&(_, b)| b / 8).sum();
        if words > u64::from(u32::MAX) {
            return Err(unsuitable(format!(
                "{words} words is more than the scan counts"
            )));
        }
        let (rows, owner) = pointer_rows(regions);
        let n = owner.len();
        if n == 0 {
            return Ok(Ok(many_hits(&[], &[], &[], regions.len())));
        }
        let table = self.upload_rows(&rows, stream)?;
        crate::steps::step("pointer scan: rows uploaded");
        let (heap_lo, heap_hi) = heap.unwrap_or((0, 0));
        // The count first (16 bytes keep what follows aligned), the pieces' shape words, then
        // three words per hit.
        let shape_at = 16u64;
        let hits_at = (shape_at + n as u64 * 4).next_multiple_of(16);
        let out_len = pointer_scan_out_len(n, cap);
        let out = self.take_scratch(out_len)?;
        // SAFETY: the count and shape words of `out`, this function's own buffer.
        unsafe { memset_async(out.ptr(), hits_at as usize, stream)? };
        let cfg = LaunchConfig::new(
            [self.grid_for(n as u64), 1, 1],
            [crate::chunks::THREADS, 1, 1],
            0,
        );
        let args = [
            table.ptr(),
            n as u64,
            window.0,
            window.1,
            heap_lo,
            heap_hi,
            max_handle,
            out.ptr() + hits_at,
            cap as u64,
            out.ptr(),
            out.ptr() + shape_at,
        ];
        // SAFETY: the kernel reads the pieces (inside the caller's regions, readable by this
        // function's contract) and the table, and writes the count, `n` shape words and at
        // most `cap` hits into `out`, sized for them; both outlive the launch (synchronised
        // below). `cap` is a 32-bit parameter: the low half of its little-endian word.
        let launched = unsafe {
            launch(
                &self.pointer_many,
                &cfg,
                &mut KernelArgs::words(&args),
                stream,
            )
        }
        .and_then(|()| {
            crate::steps::step("pointer scan: launched");
            stream.synchronize()
        });
        launched?;
        crate::steps::step("pointer scan: waited for");
        self.keep_rows(table);
        let mut head = vec![0u8; hits_at as usize];
        // SAFETY: `out` is ours, its stream synchronised above.
        unsafe { copy_dtoh(&mut head, out.ptr())? };
        crate::steps::step("pointer scan: count and shapes read");
        let count = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if count > cap {
            self.keep_scratch(out);
            return Ok(Err(TooManyHits(u64::from(count))));
        }
        let mut raw = vec![0u8; count as usize * 24];
        // SAFETY: the first `count` hits of `out` (`count <= cap`), written before the
        // synchronisation.
        unsafe { copy_dtoh(&mut raw, out.ptr() + hits_at)? };
        crate::steps::step("pointer scan: hits read");
        self.keep_scratch(out);
        let shape = &head[shape_at as usize..shape_at as usize + n * 4];
        let hits = many_hits(&raw, shape, &owner, regions.len());
        crate::steps::step("pointer scan: hits ordered");
        Ok(Ok(hits))
    }

    /// Blocks for `n` pieces: no more than the pieces, no more than the whole-GPU grid.
    fn grid_for(&self, n: u64) -> u32 {
        u32::try_from(n).unwrap_or(u32::MAX).clamp(1, self.grid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: the output's size formula drifting from the layout the scan writes (count in
    // 16 bytes, a shape word a piece, hits 16-byte aligned, 24 bytes each).
    #[test]
    fn the_pointer_scans_output_holds_count_shapes_and_hits_aligned() {
        assert_eq!(pointer_scan_out_len(0, 0), 16);
        assert_eq!(pointer_scan_out_len(1, 0), 32);
        assert_eq!(pointer_scan_out_len(4, 0), 32);
        assert_eq!(pointer_scan_out_len(5, 2), 48 + 48);
    }

    #[test]
    fn pieces_cover_a_range_in_order_at_most_a_piece_each() {
        assert_eq!(pieces(0).count(), 0);
        assert_eq!(pieces(10).collect::<Vec<_>>(), vec![(0, 10)]);
        let p: Vec<_> = pieces(2 * PIECE_BYTES + 3).collect();
        assert_eq!(
            p,
            vec![
                (0, PIECE_BYTES),
                (PIECE_BYTES, PIECE_BYTES),
                (2 * PIECE_BYTES, 3)
            ]
        );
    }

    #[test]
    fn scan_rows_put_each_piece_under_its_chunk_flag() {
        let scans = [
            ManyScan {
                pre: 0x1000,
                post: 0x9000,
                bytes: 3 * PIECE_BYTES,
                chunk_shift: 17, // two pieces a chunk
                first_flag: 0,
            },
            ManyScan {
                pre: 0x100000,
                post: 0,
                bytes: 5,
                chunk_shift: 22,
                first_flag: 2,
            },
        ];
        let (rows, flags) = scan_rows(&scans);
        assert_eq!(flags, 3);
        let r: Vec<&[u64]> = rows.chunks(4).collect();
        assert_eq!(r.len(), 4);
        assert_eq!(r[0], &[0x1000, 0x9000, PIECE_BYTES, 0]);
        assert_eq!(
            r[1],
            &[0x1000 + PIECE_BYTES, 0x9000 + PIECE_BYTES, PIECE_BYTES, 0]
        );
        assert_eq!(r[2][3], 1);
        assert_eq!(r[3], &[0x100000, 0, 5, 2], "no post stays no post");
    }

    // Catches: a page chunk (profile --memory touched) scanned in 64 KiB pieces under one
    // flag, so that a change in page 5 of a span set page 0's flag and the other 15 pages of
    // the span were never restored.
    #[test]
    fn a_page_chunk_cuts_the_pieces_at_every_page() {
        let page = MIN_SCAN_CHUNK;
        let scans = [ManyScan {
            pre: 0x10_0000,
            post: 0x90_0000,
            bytes: PIECE_BYTES + 100,
            chunk_shift: page.trailing_zeros(),
            first_flag: 0,
        }];
        let (rows, flags) = scan_rows(&scans);
        let r: Vec<&[u64]> = rows.chunks(4).collect();
        assert_eq!(flags, 17);
        assert_eq!(r.len(), 17);
        for (k, row) in r.iter().enumerate() {
            let k = k as u64;
            let len = if k == 16 { 100 } else { page };
            assert_eq!(*row, &[0x10_0000 + k * page, 0x90_0000 + k * page, len, k]);
        }
    }

    #[test]
    fn pointer_rows_scan_whole_words_and_name_their_region() {
        let (rows, owner) = pointer_rows(&[(0x1000, 20), (0x2000, 7), (0x3000, PIECE_BYTES + 8)]);
        assert_eq!(owner, vec![0, 2, 2]);
        let r: Vec<&[u64]> = rows.chunks(4).collect();
        assert_eq!(r[0], &[0x1000, 2, 0, 0], "20 bytes: two whole words");
        assert_eq!(r[1], &[0x3000, PIECE_BYTES / 8, 2, 0]);
        assert_eq!(r[2], &[0x3000 + PIECE_BYTES, 1, 2, PIECE_BYTES / 8]);
    }

    fn triple(tag: u64, key: u64, value: u64) -> Vec<u8> {
        [tag, key, value]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    proptest::proptest! {
        // Catches: hits placed out of region or offset order, a hit lost or doubled by the
        // placement, a region index past the count mishandled, or duplicate offsets (which
        // the placement cannot hold) dropped instead of sorted.
        #[test]
        fn ordered_hits_are_what_a_sort_gives(
            hits in proptest::collection::vec((0u32..6, 0u64..400, proptest::prelude::any::<u64>()), 0..300),
            words in proptest::prelude::any::<bool>(),
            regions in 0usize..8,
        ) {
            // Word offsets (as the scan writes) or any offsets.
            let mut hits: Vec<(u32, u64, u64)> =
                hits.into_iter().map(|(r, o, v)| (r, if words { o * 8 } else { o }, v)).collect();
            let mut sorted = hits.clone();
            sorted.sort_unstable();
            order_hits(&mut hits, regions);
            // Equal (region, offset) keys may come in either order, as with sort_unstable.
            let key = |v: &[(u32, u64, u64)]| v.iter().map(|h| (h.0, h.1)).collect::<Vec<_>>();
            proptest::prop_assert_eq!(key(&hits), key(&sorted));
            let mut a = hits.clone();
            a.sort_unstable();
            proptest::prop_assert_eq!(a, sorted);
        }
    }

    // Catches: a pointer table's dense run (a warp's ascending words at a time, in no order)
    // left unordered or reordered across regions.
    #[test]
    fn a_dense_run_in_warp_order_is_placed_by_offset() {
        let mut hits: Vec<(u32, u64, u64)> = Vec::new();
        for warp in [3u64, 0, 2, 1] {
            for lane in 0..32 {
                let word = warp * 32 + lane;
                hits.push((1, word * 8, 0x7000 + word));
            }
        }
        hits.push((0, 16, 5));
        order_hits(&mut hits, 2);
        assert_eq!(hits[0], (0, 16, 5));
        assert!(hits[1..]
            .iter()
            .enumerate()
            .all(|(k, h)| *h == (1, k as u64 * 8, 0x7000 + k as u64)));
    }

    #[test]
    fn many_hits_sort_each_regions_words_and_read_the_shapes() {
        let mut raw = triple(1, 5, 0xb0);
        raw.extend(triple(1, 2, 0xa0));
        raw.extend(triple(0, 3 | HEAP_BIT, 0xc0));
        raw.extend(triple(9, 1, 0xd0)); // no such region: dropped
                                        // Region 0 one piece: a big word; region 1 two pieces: nonzero, and zero; region 2:
                                        // nothing nonzero.
        let shape: Vec<u8> = [3u32, 2, 0, 0]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let h = many_hits(&raw, &shape, &[0, 1, 1, 2], 3);
        assert_eq!(h.words, vec![(1, 16, 0xa0), (1, 40, 0xb0)]);
        assert_eq!(h.heap, vec![(0, 24, 0xc0)]);
        assert_eq!(h.handle_like, vec![false, true, false]);
        assert_eq!(
            many_hits(&[], &[], &[], 2),
            ManyPointerHits {
                handle_like: vec![false, false],
                ..Default::default()
            }
        );
    }
}
