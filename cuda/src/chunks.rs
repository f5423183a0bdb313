//! Per-chunk facts about device memory, computed on the GPU where the memory is: which chunks
//! hold a nonzero byte, which differ between two copies, and a 128-bit digest per chunk for
//! memory that has no copy to compare with (#13). The kernels are CUDA C in
//! `kernels/chunks.cu`, shipped as the PTX `scripts/gen-ptx.sh` makes of it (the driver
//! compiles it at load time, like the L2 sweep).
//!
//! The recorder uses them to find a dispatch's write set without bringing gigabytes to the
//! host, and to skip the device-to-host copy of chunks that are all zeros.

use crate::error::{CuResult, CudaError};
use crate::launch::{launch, KernelArgs, LaunchConfig};
use crate::memory::{copy_dtoh, DeviceBuffer};
use crate::module::{Function, Module};
use crate::stream::{AsStream, Stream};
use crate::sys;
use std::sync::Mutex;

const CHUNKS_PTX: &str = include_str!("../kernels/chunks.ptx");
/// Kernel names in the PTX (they show in profilers that list every kernel).
pub const SCAN_KERNEL: &str = "kreplay_chunk_scan";
pub const DIGEST_KERNEL: &str = "kreplay_chunk_digest";
pub const POINTER_KERNEL: &str = "kreplay_pointer_scan";
pub const COPY_MANY_KERNEL: &str = "kreplay_copy_many";
pub const SCAN_MANY_KERNEL: &str = "kreplay_scan_many";
pub const POINTER_MANY_KERNEL: &str = "kreplay_pointer_scan_many";
/// The pointer scan's mark of a hit inside the device heap (the high bit of its word index).
const HEAP_BIT: u64 = 1 << 63;
/// The digest kernel sums 64 KiB spans; a chunk must be a whole number of them.
const DIGEST_SPAN: u64 = 64 << 10;
/// Threads per block both kernels are built for (`__launch_bounds__`).
pub(crate) const THREADS: u32 = 256;
/// The largest output buffer kept for the next call. A `cuMemAlloc` and a `cuMemFree` (which
/// waits for the whole context) per scan were most of a small scan's cost, paid several times
/// per profiled dispatch; 16 MiB covers the flags of 2 TiB in 1 MiB chunks.
const SCRATCH_KEPT: usize = 16 << 20;
/// The smallest output buffer allocated, so that a few growing calls do not each allocate.
const SCRATCH_MIN: usize = 64 << 10;

/// What the scan found, one entry per chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkFlags {
    /// The chunk holds a nonzero byte (of `pre`).
    pub nonzero: Vec<bool>,
    /// The chunk differs between `pre` and `post` (all false without `post`).
    pub changed: Vec<bool>,
}

/// A 128-bit digest per chunk, and which chunks hold a nonzero byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkDigests {
    pub digests: Vec<[u64; 2]>,
    pub nonzero: Vec<bool>,
}

/// Why a range cannot be scanned on the GPU (the caller then works on the host).
pub(crate) fn unsuitable(why: String) -> CudaError {
    CudaError::refused(
        "kreplay_chunk_scan",
        sys::CUresult::CUDA_ERROR_INVALID_VALUE,
        why,
    )
}

/// The number of chunks of `chunk_size` in `bytes`, once the shapes are checked: chunk size a
/// power of two of at least 64 KiB, addresses 16-byte aligned.
pub fn chunk_count(addrs: &[u64], bytes: u64, chunk_size: u64) -> CuResult<usize> {
    if !chunk_size.is_power_of_two() || chunk_size < DIGEST_SPAN {
        return Err(unsuitable(format!(
            "chunk size {chunk_size} is not a power of two of at least {DIGEST_SPAN}"
        )));
    }
    if let Some(a) = addrs.iter().find(|&&a| a % 16 != 0) {
        return Err(unsuitable(format!("address {a:#x} is not 16-byte aligned")));
    }
    usize::try_from(bytes.div_ceil(chunk_size))
        .map_err(|_| unsuitable(format!("{bytes} bytes is too many chunks")))
}

/// What the pointer scan found in a region: (byte offset, value) of its words, in offset order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PointerHits {
    /// Words inside the pointer window (zero excluded).
    pub words: Vec<(u64, u64)>,
    /// Words inside the device heap.
    pub heap: Vec<(u64, u64)>,
}

/// The pointer scan found more hits than it was given room for (its caller's bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyHits(pub u64);

/// The chunk kernels, loaded in one context.
pub struct ChunkKernels {
    scan: Function,
    digest: Function,
    pointer: Function,
    pub(crate) copy_many: Function,
    pub(crate) scan_many: Function,
    pub(crate) pointer_many: Function,
    pub(crate) grid: u32,
    /// The output buffer of the last call, kept for the next (at most `SCRATCH_KEPT` bytes;
    /// only ever touched by a stream that was synchronised after it).
    scratch: Mutex<Option<DeviceBuffer>>,
    /// The pieces' table of the last "many" call (see `many`), kept likewise.
    rows: Mutex<Option<DeviceBuffer>>,
    _module: Module,
}

// SAFETY: the module and functions are driver handles valid in the context they were loaded
// in, from any thread that makes it current; nothing here has thread affinity.
unsafe impl Send for ChunkKernels {}

impl ChunkKernels {
    /// Loads the kernels into the current context (a JIT compile: about a millisecond, so
    /// callers keep one per context).
    pub fn load(sm_count: u32) -> CuResult<ChunkKernels> {
        let module = Module::load(CHUNKS_PTX.as_bytes())?;
        Ok(ChunkKernels {
            scan: module.function(SCAN_KERNEL)?,
            digest: module.function(DIGEST_KERNEL)?,
            pointer: module.function(POINTER_KERNEL)?,
            copy_many: module.function(COPY_MANY_KERNEL)?,
            scan_many: module.function(SCAN_MANY_KERNEL)?,
            pointer_many: module.function(POINTER_MANY_KERNEL)?,
            grid: sm_count.max(1) * 8,
            scratch: Mutex::new(None),
            rows: Mutex::new(None),
            _module: module,
        })
    }

    /// Makes the kept buffers at least `scratch` (outputs) and `rows` (pieces' tables) bytes
    /// long now, so that the first calls that need that much allocate nothing (a `cuMemAlloc`,
    /// and a `cuMemFree` of the smaller buffer kept, which waits for the whole context).
    pub fn keep_room(&self, scratch: usize, rows: usize) -> CuResult<()> {
        let out = self.take_scratch(scratch)?;
        self.keep_scratch(out);
        let table = self.take_rows(rows)?;
        self.keep_rows(table);
        Ok(())
    }

    /// A device buffer of at least `len` bytes for one call's output: the kept one when it is
    /// large enough, else a new one.
    pub(crate) fn take_scratch(&self, len: usize) -> CuResult<DeviceBuffer> {
        take_kept(&self.scratch, len)
    }

    /// Keeps `buffer` for the next call. Call only once the stream that used it is
    /// synchronised.
    pub(crate) fn keep_scratch(&self, buffer: DeviceBuffer) {
        keep(&self.scratch, buffer)
    }

    /// A device buffer of at least `len` bytes for a pieces' table (see `take_scratch`).
    pub(crate) fn take_rows(&self, len: usize) -> CuResult<DeviceBuffer> {
        take_kept(&self.rows, len)
    }

    /// Keeps a pieces' table's buffer (see `keep_scratch`).
    pub(crate) fn keep_rows(&self, buffer: DeviceBuffer) {
        keep(&self.rows, buffer)
    }

    /// Runs `function` over the whole GPU with the word arguments `args(out)`, where `out` is a
    /// zeroed device buffer of `out_len` bytes the kernel fills; waits, and returns `out`.
    ///
    /// # Safety
    /// `function`, run with `args(out)`, writes at most `out_len` bytes at `out` and reads only
    /// *readable* memory (`crate::memory`'s contract).
    unsafe fn run_into(
        &self,
        function: &Function,
        out_len: usize,
        args: impl FnOnce(u64) -> Vec<u64>,
        stream: &Stream,
    ) -> CuResult<Vec<u8>> {
        // SAFETY: this function's contract.
        unsafe { self.run_into_grid(function, self.grid, out_len, args, stream) }
    }

    /// `run_into` with `grid` blocks.
    ///
    /// # Safety
    /// As `run_into`'s.
    pub(crate) unsafe fn run_into_grid(
        &self,
        function: &Function,
        grid: u32,
        out_len: usize,
        args: impl FnOnce(u64) -> Vec<u64>,
        stream: &Stream,
    ) -> CuResult<Vec<u8>> {
        let out = self.take_scratch(out_len)?;
        // SAFETY: `out` is this function's own buffer of at least `out_len` bytes, freed or
        // kept only after the stream is synchronised below.
        unsafe { memset_async(out.ptr(), out_len, stream)? };
        let cfg = LaunchConfig::new([grid, 1, 1], [THREADS, 1, 1], 0);
        // A 32-bit parameter (`chunk_shift`) reads the low half of its little-endian word.
        // SAFETY: the kernel writes at most `out_len` bytes at `out` and reads readable memory
        // (this function's contract); `out` outlives the launch (synchronised below).
        unsafe {
            launch(
                function,
                &cfg,
                &mut KernelArgs::words(&args(out.ptr())),
                stream,
            )?
        };
        crate::steps::step("chunk kernel: launched");
        stream.synchronize()?;
        crate::steps::step("chunk kernel: waited for");
        let mut host = vec![0u8; out_len];
        // SAFETY: `out` is this function's own buffer of at least `out_len` bytes, and the
        // stream that wrote it was synchronised above.
        unsafe { copy_dtoh(&mut host, out.ptr())? };
        crate::steps::step("chunk kernel: read back");
        self.keep_scratch(out);
        Ok(host)
    }

    /// Queues a scan of `bytes` at `pre` against `post` that writes its flags at `out`: a
    /// 32-bit word per chunk saying it is nonzero, then one per chunk saying it differs
    /// (`8 x chunks` bytes of the caller's device memory, zeroed here first). Waits for
    /// nothing; returns the chunk count.
    ///
    /// # Safety
    /// `[pre, pre + bytes)` and `[post, post + bytes)` are *readable*, and `[out, out + 8 x
    /// chunks)` is *writable* (`crate::memory`'s contracts), until the scan completes on
    /// `stream`.
    pub unsafe fn scan_queued(
        &self,
        pre: u64,
        post: u64,
        bytes: u64,
        chunk_size: u64,
        out: u64,
        stream: &Stream,
    ) -> CuResult<usize> {
        let chunks = chunk_count(&[pre, post], bytes, chunk_size)?;
        let shift = chunk_size.trailing_zeros() as u64;
        // SAFETY: `out` is writable for `8 x chunks` bytes by this function's contract.
        unsafe { memset_async(out, chunks * 8, stream)? };
        let cfg = LaunchConfig::new([self.grid, 1, 1], [THREADS, 1, 1], 0);
        // SAFETY: the scan kernel reads `bytes` at `pre` and `post` and writes `8 x chunks`
        // bytes at `out`, all of which this function's contract covers.
        unsafe {
            launch(
                &self.scan,
                &cfg,
                &mut KernelArgs::words(&[pre, post, bytes, shift, out, out + chunks as u64 * 4]),
                stream,
            )?
        };
        Ok(chunks)
    }

    /// Which chunks of `bytes` at `pre` hold a nonzero byte and, with `post`, which differ
    /// from `post`. Queued on `stream` and waited for.
    ///
    /// # Safety
    /// `[pre, pre + bytes)` and, when given, `[post, post + bytes)` are *readable*
    /// (`crate::memory`'s contract) until this returns.
    pub unsafe fn scan(
        &self,
        pre: u64,
        post: Option<u64>,
        bytes: u64,
        chunk_size: u64,
        stream: &Stream,
    ) -> CuResult<ChunkFlags> {
        let chunks = chunk_count(&[pre, post.unwrap_or(0)], bytes, chunk_size)?;
        let shift = chunk_size.trailing_zeros() as u64;
        // SAFETY: the scan kernel writes `8 x chunks` bytes at `out` and reads `bytes` at `pre`
        // and `post`, readable by this function's contract.
        let host = unsafe {
            self.run_into(
                &self.scan,
                chunks * 8,
                |out| {
                    vec![
                        pre,
                        post.unwrap_or(0),
                        bytes,
                        shift,
                        out,
                        out + chunks as u64 * 4,
                    ]
                },
                stream,
            )?
        };
        Ok(ChunkFlags {
            nonzero: flags(&host[..chunks * 4]),
            changed: flags(&host[chunks * 4..]),
        })
    }

    /// A 128-bit digest of each chunk of `bytes` at `addr`, and which chunks are nonzero.
    /// Queued on `stream` and waited for.
    ///
    /// # Safety
    /// `[addr, addr + bytes)` is *readable* (`crate::memory`'s contract) until this returns.
    pub unsafe fn digest(
        &self,
        addr: u64,
        bytes: u64,
        chunk_size: u64,
        stream: &Stream,
    ) -> CuResult<ChunkDigests> {
        let chunks = chunk_count(&[addr], bytes, chunk_size)?;
        let shift = chunk_size.trailing_zeros() as u64;
        // SAFETY: the digest kernel writes `20 x chunks` bytes at `out` and reads `bytes` at
        // `addr`, readable by this function's contract.
        let host = unsafe {
            self.run_into(
                &self.digest,
                chunks * 20,
                |out| vec![addr, bytes, shift, out, out + chunks as u64 * 16],
                stream,
            )?
        };
        let (sums, nonzero) = host.split_at(chunks * 16);
        Ok(ChunkDigests {
            digests: sums
                .chunks_exact(16)
                .map(|d| [word(&d[..8]), word(&d[8..])])
                .collect(),
            nonzero: flags(nonzero),
        })
    }
}

impl ChunkKernels {
    /// The words of `bytes` at `addr` (8-byte aligned) that lie in `heap` (`[low, high)`), or
    /// else are nonzero and inside `window`, found on the GPU with room for `cap` hits; only
    /// the hits come back to the host. `Ok(Err(TooManyHits(n)))`: there were `n` (more than
    /// `cap`). With `copy_to`, the same pass also copies the words (every whole word of
    /// `bytes`, also when the hits overflow) there. Queued on `stream` and waited for.
    ///
    /// # Safety
    /// `[addr, addr + bytes)` is *readable*, and with `copy_to` `[copy_to, copy_to + bytes)` is
    /// *writable* and apart from it (`crate::memory`'s contracts), until this returns.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn pointer_scan(
        &self,
        addr: u64,
        bytes: u64,
        window: (u64, u64),
        heap: Option<(u64, u64)>,
        cap: u32,
        copy_to: Option<u64>,
        stream: &Stream,
    ) -> CuResult<Result<PointerHits, TooManyHits>> {
        if copy_to.is_some_and(|c| !c.is_multiple_of(8)) {
            return Err(unsuitable(
                "the copy's address is not 8-byte aligned".into(),
            ));
        }
        if !addr.is_multiple_of(8) {
            return Err(unsuitable(format!(
                "address {addr:#x} is not 8-byte aligned"
            )));
        }
        // The kernel counts hits in 32 bits: no more words than that may hit.
        if bytes / 8 > u64::from(u32::MAX) {
            return Err(unsuitable(format!(
                "{bytes} bytes is more words than the scan counts"
            )));
        }
        let (heap_lo, heap_hi) = heap.unwrap_or((0, 0));
        // The count first (16 bytes keep the hits aligned), then two words per hit.
        let out = self.take_scratch(16 + cap as usize * 16)?;
        // SAFETY: the count word of `out`, this function's own buffer.
        unsafe { memset_async(out.ptr(), 4, stream)? };
        let cfg = LaunchConfig::new([self.grid, 1, 1], [THREADS, 1, 1], 0);
        let args = [
            addr,
            bytes / 8,
            window.0,
            window.1,
            heap_lo,
            heap_hi,
            out.ptr() + 16,
            cap as u64,
            out.ptr(),
            copy_to.unwrap_or(0),
        ];
        // SAFETY: the kernel reads `bytes / 8` words at `addr` (readable by this function's
        // contract), writes them at `copy_to` when given (writable by the same), and writes the
        // count and at most `cap` hits into `out`, sized for them, which outlives the launch
        // (synchronised below). `cap` is a 32-bit parameter: the low
        // half of its little-endian word.
        unsafe { launch(&self.pointer, &cfg, &mut KernelArgs::words(&args), stream)? };
        stream.synchronize()?;
        let mut count = [0u8; 4];
        // SAFETY: `out` is ours, its stream synchronised above.
        unsafe { copy_dtoh(&mut count, out.ptr())? };
        let n = u32::from_le_bytes(count);
        if n > cap {
            self.keep_scratch(out);
            return Ok(Err(TooManyHits(n as u64)));
        }
        let mut host = vec![0u8; n as usize * 16];
        // SAFETY: the first `n` hits of `out` (`n <= cap`), written before the synchronisation.
        unsafe { copy_dtoh(&mut host, out.ptr() + 16)? };
        self.keep_scratch(out);
        Ok(Ok(pointer_hits(&host)))
    }
}

/// The kept buffer of `slot` when it holds at least `len` bytes, else a new one.
fn take_kept(slot: &Mutex<Option<DeviceBuffer>>, len: usize) -> CuResult<DeviceBuffer> {
    let kept = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    match kept {
        Some(b) if b.len() >= len => Ok(b),
        _ => DeviceBuffer::new(scratch_len(len)),
    }
}

/// Keeps `buffer` in `slot` for the next call, up to `SCRATCH_KEPT` bytes.
fn keep(slot: &Mutex<Option<DeviceBuffer>>, buffer: DeviceBuffer) {
    if buffer.len() <= SCRATCH_KEPT {
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(buffer);
    }
}

/// How many bytes to allocate for an output of `len`: a power of two, at least `SCRATCH_MIN`,
/// so that the buffer kept serves calls a little larger too.
fn scratch_len(len: usize) -> usize {
    len.checked_next_power_of_two()
        .unwrap_or(len)
        .max(SCRATCH_MIN)
}

/// The scan's hits (index with its heap mark, value), as little-endian word pairs, sorted into
/// byte offsets.
fn pointer_hits(raw: &[u8]) -> PointerHits {
    let mut hits = PointerHits::default();
    for pair in raw.chunks_exact(16) {
        let (key, value) = (word(&pair[..8]), word(&pair[8..]));
        let offset = (key & !HEAP_BIT) * 8;
        match key & HEAP_BIT {
            0 => hits.words.push((offset, value)),
            _ => hits.heap.push((offset, value)),
        }
    }
    hits.words.sort_unstable();
    hits.heap.sort_unstable();
    hits
}

/// The little-endian u64 of 8 bytes the kernels wrote (callers slice exactly 8).
pub(crate) fn word(w: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(w);
    u64::from_le_bytes(b)
}

/// One flag per little-endian u32 word: set when nonzero.
pub(crate) fn flags(words: &[u8]) -> Vec<bool> {
    words.chunks_exact(4).map(|w| w != [0, 0, 0, 0]).collect()
}

/// # Safety
/// `[dst, dst + len)` is *writable* (`crate::memory`'s contract) until the stream gets there.
pub(crate) unsafe fn memset_async(dst: u64, len: usize, stream: &impl AsStream) -> CuResult<()> {
    // SAFETY: the range is writable by this function's contract; the stream is borrowed.
    crate::error::check(
        unsafe { sys::cuMemsetD8Async(dst, 0, len, stream.raw_stream()) },
        "cuMemsetD8Async",
    )
}

/// Runs of consecutive chunks whose flag is `want`, as (first chunk, chunk count), each at
/// most `max_chunks` long: the pieces one copy moves.
pub fn runs(flags: &[bool], want: bool, max_chunks: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < flags.len() {
        if flags[i] != want {
            i += 1;
            continue;
        }
        let start = i;
        while i < flags.len() && flags[i] == want && i - start < max_chunks.max(1) {
            i += 1;
        }
        out.push((start, i - start));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx_entries::entry_names;

    #[test]
    fn the_ptx_defines_every_kernel_and_loads_on_old_drivers() {
        let mut names = entry_names(CHUNKS_PTX);
        names.sort();
        let mut want = vec![
            DIGEST_KERNEL,
            SCAN_KERNEL,
            POINTER_KERNEL,
            COPY_MANY_KERNEL,
            SCAN_MANY_KERNEL,
            POINTER_MANY_KERNEL,
        ];
        want.sort();
        assert_eq!(names, want);
        assert!(CHUNKS_PTX.contains(".version 7.0"));
    }

    // Catches: a kept buffer sized to the first call only (every slightly larger call then
    // allocates again), or an exact-size power of two rounded past itself.
    #[test]
    fn scratch_is_a_power_of_two_of_at_least_64_kib() {
        assert_eq!(scratch_len(1), SCRATCH_MIN);
        assert_eq!(scratch_len(SCRATCH_MIN), SCRATCH_MIN);
        assert_eq!(scratch_len(SCRATCH_MIN + 1), 2 * SCRATCH_MIN);
        assert_eq!(scratch_len(3 << 20), 4 << 20);
        assert_eq!(
            scratch_len(usize::MAX),
            usize::MAX,
            "no overflow: the size asked for"
        );
    }

    // Catches: hits left in the GPU's order (the walk then finds regions in another order
    // each run), the heap mark kept in the offset, or an index not turned into bytes.
    #[test]
    fn pointer_hits_are_sorted_offsets_split_by_the_heap_mark() {
        let mut raw = Vec::new();
        for (key, value) in [(9u64, 0x7000u64), (3 | HEAP_BIT, 0x9000), (1, 0x7100)] {
            raw.extend_from_slice(&key.to_le_bytes());
            raw.extend_from_slice(&value.to_le_bytes());
        }
        let hits = pointer_hits(&raw);
        assert_eq!(hits.words, vec![(8, 0x7100), (72, 0x7000)]);
        assert_eq!(hits.heap, vec![(24, 0x9000)]);
    }

    #[test]
    fn shapes_the_kernels_cannot_take_are_refused() {
        assert_eq!(chunk_count(&[0, 256], 10 << 20, 4 << 20).ok(), Some(3));
        assert_eq!(chunk_count(&[0], 0, 4 << 20).ok(), Some(0));
        assert!(chunk_count(&[8], 1 << 20, 4 << 20).is_err());
        assert!(chunk_count(&[0], 1 << 20, 3 << 20).is_err());
        assert!(chunk_count(&[0], 1 << 20, 4096).is_err());
    }

    #[test]
    fn flag_words_read_as_little_endian_u32s() {
        assert_eq!(
            flags(&[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x80]),
            vec![false, true, true]
        );
        assert!(flags(&[]).is_empty());
    }

    #[test]
    fn runs_split_at_flag_changes_and_at_the_cap() {
        let f = [true, true, false, true, true, true, true, true, false];
        assert_eq!(runs(&f, true, 3), vec![(0, 2), (3, 3), (6, 2)]);
        assert_eq!(runs(&f, false, 3), vec![(2, 1), (8, 1)]);
        assert_eq!(runs(&[], true, 3), vec![]);
        // Every chunk lands in exactly one run of its own flag.
        let all: usize = runs(&f, true, 2).iter().map(|r| r.1).sum::<usize>()
            + runs(&f, false, 2).iter().map(|r| r.1).sum::<usize>();
        assert_eq!(all, f.len());
    }
}
