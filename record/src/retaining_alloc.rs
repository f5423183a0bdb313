//! The recorder's allocator (the injected library's `#[global_allocator]`): the large host
//! blocks a capture makes while the application waits are kept when freed, and the first
//! capture's come from pages touched before it, on a thread of kreplay's own.
//!
//! Why: a first touch of a fresh 4 KiB page costs 2.7-3.0 us on the build machine
//! (`scripts/probes/page-faults`) and about 1.1 us on an H100 machine (both virtual machines),
//! also when the pages were the process's before (glibc unmaps a freed large block). A pointer
//! table's capture builds megabytes of tables and took 1,183 such faults on the H100 machine
//! (11 with this pool), about 1 ms of its stall (#34).
//!
//! What it keeps: blocks of `MIN_KEPT` to `MAX_KEPT` bytes (page-aligned at most) allocated on a
//! thread inside a capture (`CaptureScope`), carved from chunks of `CHUNK_BYTES` that the pool
//! maps itself, `MAX_CHUNKS` at most; freed, a block goes to its size class's list, whichever
//! thread frees it, and is taken again by the next capture. Everything else, and everything once
//! the chunks are spent, is the system allocator's, as before. The application's own `malloc`
//! is never involved. `prewarm_chunk` maps one chunk with its pages populated, off the
//! application's time, and puts it first in line.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The smallest block kept (smaller ones are glibc's, from its arenas, as before).
pub const MIN_KEPT: usize = 16 << 10;
/// The largest block kept (larger ones are mapped and unmapped by glibc, as before).
pub const MAX_KEPT: usize = 16 << 20;
/// What the pool maps at a time.
pub const CHUNK_BYTES: usize = 32 << 20;
/// Most chunks the pool holds (its memory is never given back: 128 MiB at most).
pub const MAX_CHUNKS: usize = 4;
const PAGE: usize = 4096;

/// Size classes: `MIN_KEPT` times 1, 1.5, 2, 3, 4, 6, ... up to `MAX_KEPT` (at most a third of a
/// block unused), each a multiple of the page.
const CLASS_COUNT: usize = 21;
const CLASSES: [usize; CLASS_COUNT] = class_sizes();

const fn class_sizes() -> [usize; CLASS_COUNT] {
    let mut out = [0; CLASS_COUNT];
    let (mut i, mut p) = (0, MIN_KEPT);
    while i < CLASS_COUNT {
        out[i] = p;
        if i + 1 < CLASS_COUNT {
            out[i + 1] = p + p / 2;
        }
        p *= 2;
        i += 2;
    }
    out
}

/// The class a block of `size` bytes is taken from: the smallest at least `size`; `None` outside
/// `MIN_KEPT..=MAX_KEPT`.
pub fn class_of(size: usize) -> Option<usize> {
    if size < MIN_KEPT {
        return None;
    }
    let k = CLASSES.partition_point(|&c| c < size);
    (k < CLASS_COUNT).then_some(k)
}

/// The largest class that fits in `len` bytes (a remainder cut into blocks).
fn largest_within(len: usize) -> Option<usize> {
    CLASSES.partition_point(|&c| c <= len).checked_sub(1)
}

/// Whether a layout is served by the pool (when in a capture and while chunks last).
fn kept(layout: &Layout) -> bool {
    class_of(layout.size()).is_some() && layout.align() <= PAGE
}

/// The pool's bookkeeping: free lists (the next block's address in each free block's first
/// word), the areas still to carve (a stack: the top first) and the chunks it owns. No I/O: the
/// caller maps a chunk when told it needs one (`NeedChunk`) and hands it over (`add_chunk`).
pub struct Pool {
    free: [usize; CLASS_COUNT],
    /// (next byte to carve, end) of each area, the last carved first.
    areas: [(usize, usize); MAX_CHUNKS],
    area_count: usize,
    /// (start, end) of each chunk mapped.
    chunks: [(usize, usize); MAX_CHUNKS],
    chunk_count: usize,
    /// Bytes carved from chunks so far (each class block counted once, when first made).
    pub carved: usize,
}

impl Pool {
    pub const fn new() -> Pool {
        Pool {
            free: [0; CLASS_COUNT],
            areas: [(0, 0); MAX_CHUNKS],
            area_count: 0,
            chunks: [(0, 0); MAX_CHUNKS],
            chunk_count: 0,
            carved: 0,
        }
    }

    /// Whether `ptr` lies in one of the pool's chunks.
    pub fn owns(&self, ptr: usize) -> bool {
        self.chunks[..self.chunk_count]
            .iter()
            .any(|&(s, e)| ptr >= s && ptr < e)
    }

    /// Bytes of chunks the pool holds.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.chunks[..self.chunk_count]
            .iter()
            .map(|&(s, e)| e - s)
            .sum()
    }

    /// A block of class `k` from the free lists or the areas: (address, never handed out
    /// before); `Ok(None)` when the chunks are spent; `NeedChunk` when a new chunk would give
    /// one (the library maps it outside its lock, see `RetainingAllocator::pooled_block`).
    ///
    /// # Safety
    /// Every address on the free lists is a block of at least its class's size that nobody
    /// uses, in memory the caller may write (the pool's own blocks, as `give` leaves them).
    pub unsafe fn take_or_need(&mut self, k: usize) -> Result<Option<(usize, bool)>, NeedChunk> {
        let head = self.free[k];
        if head != 0 {
            // SAFETY: `head` is a free block of ours (the caller's contract), its first word
            // written by `give`.
            self.free[k] = unsafe { (head as *const usize).read() };
            return Ok(Some((head, false)));
        }
        let size = CLASSES[k];
        while let Some(top) = self.area_count.checked_sub(1) {
            let (at, end) = self.areas[top];
            if end - at >= size {
                self.areas[top].0 = at + size;
                self.carved += size;
                return Ok(Some((at, true)));
            }
            self.area_count = top;
            // SAFETY: the remainder of an area is carved by nobody else; its blocks are free.
            unsafe { self.cut_into_blocks(at, end) };
        }
        if self.chunk_count == MAX_CHUNKS {
            return Ok(None);
        }
        Err(NeedChunk)
    }

    /// Takes the chunk `[start, start + len)` (page-aligned, its bytes zero) and carves it
    /// before any other area; false (the chunk not taken) when the pool holds `MAX_CHUNKS`.
    pub fn add_chunk(&mut self, start: usize, len: usize) -> bool {
        if self.chunk_count == MAX_CHUNKS || self.area_count == MAX_CHUNKS {
            return false;
        }
        self.chunks[self.chunk_count] = (start, start + len);
        self.chunk_count += 1;
        self.areas[self.area_count] = (start, start + len);
        self.area_count += 1;
        true
    }

    /// Gives back a block of at least class `k`'s size.
    ///
    /// # Safety
    /// `ptr` is a block of the pool's, of at least `CLASSES[k]` bytes, that nobody uses now.
    pub unsafe fn give(&mut self, ptr: usize, k: usize) {
        // SAFETY: the block is ours and unused (the caller's contract); its first word is the
        // list's link.
        unsafe { (ptr as *mut usize).write(self.free[k]) };
        self.free[k] = ptr;
    }

    /// The rest of an area, as free blocks of the largest classes that fit.
    ///
    /// # Safety
    /// `[at, end)` is pool memory nobody uses.
    unsafe fn cut_into_blocks(&mut self, mut at: usize, end: usize) {
        while let Some(k) = largest_within(end - at) {
            // SAFETY: `[at, at + CLASSES[k])` lies in the unused rest (the caller's contract).
            unsafe { self.give(at, k) };
            at += CLASSES[k];
        }
    }
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new()
    }
}

/// No area has room for the class asked and the pool may map another chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeedChunk;

/// `len` bytes of fresh anonymous memory (lazily populated, not reserved against swap).
fn map_chunk(len: usize) -> Option<usize> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: an anonymous mapping at an address of the kernel's choosing: nothing of anyone's
    // is replaced.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as usize)
}

/// Gives a chunk mapped by `map_chunk` back to the kernel.
fn unmap_chunk(start: usize, len: usize) {
    // SAFETY: our own mapping of `len` bytes, which no block was carved from.
    unsafe { libc::munmap(start as *mut libc::c_void, len) };
}

/// Makes every page of the unpublished chunk `[start, start + len)` present, a slice at a time
/// (the process's memory map is held only per slice, not for the whole chunk).
fn populate(start: usize, len: usize) {
    const SLICE: usize = 2 << 20;
    for at in (start..start + len).step_by(SLICE) {
        let n = SLICE.min(start + len - at);
        // SAFETY: a range of our own mapping; populating changes no byte.
        let r = unsafe { libc::madvise(at as *mut libc::c_void, n, libc::MADV_POPULATE_WRITE) };
        if r != 0 {
            // Kernels before 5.14: a write to each page, which nobody else sees yet (the chunk
            // is not published), so its zeros stay zeros.
            for page in (at..at + n).step_by(PAGE) {
                // SAFETY: a page of our own unpublished mapping.
                unsafe { (page as *mut u8).write_volatile(0) };
            }
        }
    }
}

/// The pool behind a spin lock: allocations come from any thread, and a lock that never
/// allocates nor parks is what an allocator can hold (critical sections are a few list
/// operations, or one `mmap`).
struct Locked {
    busy: AtomicBool,
    pool: UnsafeCell<Pool>,
}

// SAFETY: `pool` is reached only through `with`, which holds `busy`.
unsafe impl Sync for Locked {}

impl Locked {
    fn with<R>(&self, f: impl FnOnce(&mut Pool) -> R) -> R {
        let mut spins = 0u32;
        while self
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // SAFETY: `busy` is ours until the store below: nobody else reaches the pool.
        let out = f(unsafe { &mut *self.pool.get() });
        self.busy.store(false, Ordering::Release);
        out
    }
}

static POOL: Locked = Locked {
    busy: AtomicBool::new(false),
    pool: UnsafeCell::new(Pool::new()),
};

/// Set in a forked child (`after_fork_in_child`): another thread of the parent may have held
/// the lock at the fork, so the child never takes it (its blocks go to the system allocator;
/// the pool's freed in it are left).
static FORKED: AtomicBool = AtomicBool::new(false);
/// (start, end) of the pool's chunks, readable without the lock (every `dealloc` asks): slots
/// below `CHUNKS_PUBLISHED` are written once, before the count that covers them is released,
/// and never again.
static CHUNK_SPANS: [(AtomicUsize, AtomicUsize); MAX_CHUNKS] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_CHUNKS];
static CHUNKS_PUBLISHED: AtomicUsize = AtomicUsize::new(0);
static PREWARMED: AtomicBool = AtomicBool::new(false);
/// `turn_off`.
static OFF: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Captures open on this thread (`CaptureScope`).
    static IN_CAPTURE: Cell<u32> = const { Cell::new(0) };
}

/// While alive, this thread's large blocks come from the pool (a capture's stall). Not `Send`:
/// dropped on another thread, it would leave this thread's count raised.
pub struct CaptureScope(std::marker::PhantomData<*const ()>);

impl CaptureScope {
    pub fn enter() -> CaptureScope {
        let _ = IN_CAPTURE.try_with(|n| n.set(n.get() + 1));
        CaptureScope(std::marker::PhantomData)
    }
}

impl Drop for CaptureScope {
    fn drop(&mut self) {
        let _ = IN_CAPTURE.try_with(|n| n.set(n.get().saturating_sub(1)));
    }
}

fn in_capture() -> bool {
    IN_CAPTURE.try_with(|n| n.get() > 0).unwrap_or(false)
}

/// In the child of a `fork` (its handler): the pool is left alone from now on.
pub fn after_fork_in_child() {
    FORKED.store(true, Ordering::SeqCst);
}

/// No block is taken from the pool from now on, and nothing is prewarmed
/// (`KREPLAY_DEBUG_POOL=0`, the baseline of the stall benchmark): blocks already taken are
/// still given back to it.
pub fn turn_off() {
    OFF.store(true, Ordering::SeqCst);
}

/// Whether `ptr` is in one of the pool's published chunks (without the lock).
fn in_chunks(ptr: usize) -> bool {
    let n = CHUNKS_PUBLISHED.load(Ordering::Acquire).min(MAX_CHUNKS);
    CHUNK_SPANS[..n].iter().any(|(s, e)| {
        let (s, e) = (s.load(Ordering::Relaxed), e.load(Ordering::Relaxed));
        ptr >= s && ptr < e
    })
}

/// Publishes the pool's chunks for `in_chunks` (under the lock, after a chunk was added): the
/// new slots' bounds first, then the count that covers them.
fn publish(pool: &Pool) {
    let before = CHUNKS_PUBLISHED.load(Ordering::Relaxed);
    for (i, &(s, e)) in pool.chunks[..pool.chunk_count]
        .iter()
        .enumerate()
        .skip(before)
    {
        CHUNK_SPANS[i].0.store(s, Ordering::Relaxed);
        CHUNK_SPANS[i].1.store(e, Ordering::Relaxed);
    }
    CHUNKS_PUBLISHED.store(pool.chunk_count, Ordering::Release);
}

/// Adds an unpublished chunk to the pool and publishes it, or gives it back when the pool is
/// full; whether it was taken.
fn add_and_publish(start: usize) -> bool {
    let taken = POOL.with(|pool| {
        let taken = pool.add_chunk(start, CHUNK_BYTES);
        if taken {
            publish(pool);
        }
        taken
    });
    if !taken {
        unmap_chunk(start, CHUNK_BYTES);
    }
    taken
}

/// Whether `prewarm_chunk` would still do something (once per process; not in a forked
/// child): a caller spawns no thread for nothing.
pub fn prewarm_wanted() -> bool {
    !FORKED.load(Ordering::Relaxed)
        && !PREWARMED.load(Ordering::Relaxed)
        && !OFF.load(Ordering::Relaxed)
}

/// Maps one chunk, makes its pages present and puts it first in line for the next capture,
/// once per process: call on a thread of kreplay's own (8.8 ms for a chunk on an H100
/// machine, about 25 ms at 3 us a page). Returns the bytes populated (0 when done before, or when the pool
/// is full or the mapping was refused).
pub fn prewarm_chunk() -> usize {
    if !prewarm_wanted() || PREWARMED.swap(true, Ordering::SeqCst) {
        return 0;
    }
    let Some(start) = map_chunk(CHUNK_BYTES) else {
        return 0;
    };
    populate(start, CHUNK_BYTES);
    if add_and_publish(start) {
        CHUNK_BYTES
    } else {
        0
    }
}

/// Bytes carved from the pool's chunks so far, for the diagnosis traces.
pub fn carved() -> usize {
    if FORKED.load(Ordering::Relaxed) {
        return 0;
    }
    POOL.with(|p| p.carved)
}

/// The injected library's allocator (see the module's comment).
pub struct RetainingAllocator;

impl RetainingAllocator {
    /// A pool block for `layout` when it is one to keep on this thread now: (address, its bytes
    /// are zero).
    fn pooled_block(&self, layout: &Layout) -> Option<(*mut u8, bool)> {
        if !kept(layout)
            || FORKED.load(Ordering::Relaxed)
            || OFF.load(Ordering::Relaxed)
            || !in_capture()
        {
            return None;
        }
        let k = class_of(layout.size())?;
        loop {
            // SAFETY: the free lists hold only unused blocks of ours (`dealloc` gives back only
            // blocks of our chunks, at their class or a smaller one).
            match POOL.with(|pool| unsafe { pool.take_or_need(k) }) {
                Ok(got) => return got.map(|(p, fresh)| (p as *mut u8, fresh)),
                // Mapped outside the lock (nothing foreign runs under it); another thread may
                // add one meanwhile, and a chunk that finds the pool full goes back.
                Err(NeedChunk) => {
                    add_and_publish(map_chunk(CHUNK_BYTES)?);
                }
            }
        }
    }

    /// Whether a live block of `layout` at `ptr` is the pool's.
    fn is_pooled(ptr: *mut u8, layout: &Layout) -> bool {
        kept(layout) && in_chunks(ptr as usize)
    }
}

// SAFETY: pool blocks are page-aligned (every class and chunk is a multiple of the page, and
// only layouts aligned to at most a page are served), at least the layout's size, and handed out
// once until given back; everything else is `System`'s.
unsafe impl GlobalAlloc for RetainingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.pooled_block(&layout) {
            Some((p, _)) => p,
            // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match self.pooled_block(&layout) {
            Some((p, true)) => p,
            Some((p, false)) => {
                // SAFETY: `p` is a block of at least `layout.size()` bytes, ours until freed.
                unsafe { p.write_bytes(0, layout.size()) };
                p
            }
            // SAFETY: as in `alloc`.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if Self::is_pooled(ptr, &layout) {
            if FORKED.load(Ordering::Relaxed) {
                return; // left: the lock may be held by a thread the fork did not copy
            }
            if let Some(k) = class_of(layout.size()) {
                let given = POOL.with(|pool| {
                    let ours = pool.owns(ptr as usize);
                    if ours {
                        // SAFETY: a block of ours (in our chunks, asked again under the lock)
                        // freed by its owner, at least its layout's size, so at least class
                        // `k`'s.
                        unsafe { pool.give(ptr as usize, k) };
                    }
                    ours
                });
                if given {
                    return;
                }
            }
        }
        // SAFETY: not the pool's, so `System`'s, with the layout it was allocated with.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let pooled = Self::is_pooled(ptr, &layout);
        // SAFETY: `GlobalAlloc::realloc`'s contract: `new_size` rounded up to the alignment
        // does not overflow.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if pooled && kept(&new) && class_of(new_size) == class_of(layout.size()) {
            // Within its class: the block's room. A shrink to a smaller class moves (in place,
            // the block would be filed under the smaller class when freed, its rest lost).
            return ptr;
        }
        if !(pooled || kept(&new) && in_capture()) {
            // SAFETY: `System`'s block, with its layout (the caller's contract).
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: `new` has a non-zero size (`new_size` > 0 by the caller's contract).
        let moved = unsafe { self.alloc(new) };
        if !moved.is_null() {
            // SAFETY: both blocks hold at least the bytes copied, and are distinct (one is
            // freshly allocated while the other is live).
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks from a test's own buffers.
    struct Buffers(Vec<Vec<u64>>);

    impl Buffers {
        fn map(&mut self, len: usize) -> Option<usize> {
            // Page-aligned: one page more than asked, the start rounded up.
            let mut v = vec![0u64; (len + PAGE) / 8];
            let at = (v.as_mut_ptr() as usize).next_multiple_of(PAGE);
            self.0.push(v);
            Some(at)
        }
    }

    // Catches: a class smaller than the size asked, a size past MAX_KEPT given a class, or a
    // class that is not a whole number of pages (blocks would lose their alignment).
    #[test]
    fn classes_hold_their_sizes_in_whole_pages() {
        assert_eq!(class_of(MIN_KEPT - 1), None);
        assert_eq!(class_of(MAX_KEPT + 1), None);
        assert_eq!(CLASSES[CLASS_COUNT - 1], MAX_KEPT);
        for size in (MIN_KEPT..=MAX_KEPT).step_by(4093) {
            let k = class_of(size).expect("kept");
            assert!(CLASSES[k] >= size);
            assert!(
                k == 0 || CLASSES[k - 1] < size,
                "the smallest class that holds it"
            );
            assert!(CLASSES[k] < size.saturating_mul(2), "at most half unused");
        }
        assert!(CLASSES.iter().all(|c| c % PAGE == 0));
        assert!(CLASSES.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(largest_within(MIN_KEPT - 1), None);
        assert_eq!(largest_within(MIN_KEPT * 5), class_of(MIN_KEPT * 4));
    }

    // Catches: a freed block not taken again (the next capture would touch fresh pages), a
    // reused block reported as zero, two live blocks overlapping, or a block outside the chunk.
    #[test]
    fn freed_blocks_are_taken_again_and_live_ones_never_overlap() {
        let mut pool = Pool::new();
        let mut src = Buffers(Vec::new());
        let mut live: Vec<(usize, usize)> = Vec::new();
        for size in [MIN_KEPT, 100 << 10, 3 << 20, MIN_KEPT, MAX_KEPT] {
            let k = class_of(size).expect("kept");
            let (p, fresh) = take(&mut pool, k, &mut src).expect("room");
            assert!(fresh, "nothing was freed yet");
            assert_eq!(p % PAGE, 0);
            assert!(pool.owns(p) && pool.owns(p + CLASSES[k] - 1));
            for &(q, n) in &live {
                assert!(p + CLASSES[k] <= q || q + n <= p, "overlap");
            }
            live.push((p, CLASSES[k]));
        }
        let (p, n) = live[2];
        let k = class_of(n).expect("kept");
        // SAFETY: `p` is a block the pool gave and nobody uses.
        unsafe { pool.give(p, k) };
        let again = take(&mut pool, k, &mut src).expect("room");
        assert_eq!(again, (p, false), "the freed block, not zero");
        assert!(!pool.owns(src.0[0].as_ptr() as usize + CHUNK_BYTES + PAGE + 8));
    }

    /// A block of class `k`, a chunk of `src` added when the pool needs one, as the library's
    /// allocator does with its mappings (`RetainingAllocator::pooled_block`).
    fn take(pool: &mut Pool, k: usize, src: &mut Buffers) -> Option<(usize, bool)> {
        loop {
            // SAFETY: the pool's free lists hold only its own unused blocks (the tests give
            // back only blocks they took and no longer use).
            match unsafe { pool.take_or_need(k) } {
                Ok(got) => return got,
                Err(NeedChunk) => {
                    let start = src.map(CHUNK_BYTES)?;
                    if !pool.add_chunk(start, CHUNK_BYTES) {
                        return None;
                    }
                }
            }
        }
    }

    // Catches: an area's rest lost when a larger block does not fit (the chunks would run out
    // early), a pool holding more than MAX_CHUNKS chunks, or a prewarmed chunk carved after the
    // older areas rather than before.
    #[test]
    fn rests_become_blocks_chunks_are_bounded_and_a_new_chunk_is_carved_first() {
        let mut pool = Pool::new();
        let mut src = Buffers(Vec::new());
        let big = class_of(MAX_KEPT).expect("kept");
        let first = take(&mut pool, big, &mut src).expect("room").0;
        let second = take(&mut pool, big, &mut src).expect("room").0;
        assert_eq!(second, first + MAX_KEPT, "carved in order");
        let third = take(
            &mut pool,
            class_of(MAX_KEPT - PAGE).expect("kept"),
            &mut src,
        )
        .expect("room")
        .0;
        assert!(
            !(first..first + CHUNK_BYTES).contains(&third),
            "a second chunk"
        );
        let extra = Buffers(Vec::new()).map(CHUNK_BYTES).expect("memory");
        let mut keep = Buffers(Vec::new());
        let start = keep.map(CHUNK_BYTES).expect("memory");
        assert!(pool.add_chunk(start, CHUNK_BYTES));
        let small = take(&mut pool, 0, &mut src).expect("room").0;
        assert_eq!(small, start, "the newest chunk first");
        // Spend every chunk: past MAX_CHUNKS, no block (the system allocator's then).
        let mut n = 0;
        while take(&mut pool, big, &mut src).is_some() {
            n += 1;
            assert!(n < 64, "the pool never runs out");
        }
        assert_eq!(pool.held(), MAX_CHUNKS * CHUNK_BYTES);
        assert!(!pool.add_chunk(extra, CHUNK_BYTES));
        // The rests of the areas left behind were cut into blocks (16 MiB less 16 KiB: 12 MiB,
        // 3 MiB, ...): such a class still has one.
        let twelve = class_of(12 << 20).expect("kept");
        assert!(take(&mut pool, twelve, &mut src).is_some());
        drop(keep);
    }

    // Catches: a prewarmed chunk whose pages are not present (the first capture would still
    // pay a fault a page), or one whose bytes are not zero (fresh blocks are handed out as
    // zeroed).
    #[test]
    fn a_populated_chunk_is_present_and_zero() {
        let len = 4 << 20;
        let start = map_chunk(len).expect("memory");
        populate(start, len);
        let before = crate::trace::minor_faults();
        let mut sum = 0u64;
        for page in (start..start + len).step_by(PAGE) {
            // SAFETY: a page of our own mapping, alive until unmapped below.
            unsafe {
                sum += u64::from((page as *const u8).read_volatile());
                (page as *mut u8).write_volatile(1);
            }
        }
        let faults = crate::trace::minor_faults() - before;
        unmap_chunk(start, len);
        assert_eq!(sum, 0);
        assert!(
            faults < 16,
            "{faults} faults over {} populated pages",
            len / PAGE
        );
    }

    // Catches: the library's allocator not keeping a capture's large blocks (a second capture
    // would touch fresh pages again), keeping them outside a capture, or a block moved by a
    // reallocation losing its bytes.
    #[test]
    fn a_capture_s_large_blocks_are_kept_and_others_are_the_system_s() {
        let a = RetainingAllocator;
        let layout = Layout::from_size_align(200 << 10, 8).expect("layout");
        let outside = {
            // SAFETY: a non-zero layout; freed below with the same.
            let p = unsafe { a.alloc(layout) };
            assert!(!p.is_null());
            let pooled = RetainingAllocator::is_pooled(p, &layout);
            // SAFETY: allocated above with `layout`.
            unsafe { a.dealloc(p, layout) };
            pooled
        };
        assert!(!outside, "outside a capture: the system's");
        let _scope = CaptureScope::enter();
        // SAFETY: as above.
        let p = unsafe { a.alloc(layout) };
        assert!(RetainingAllocator::is_pooled(p, &layout));
        // SAFETY: `p` holds 200 KiB; it grows within its class, then past it, then leaves the
        // pool for a size below MIN_KEPT, its bytes kept each time.
        unsafe {
            p.write_bytes(7, 200 << 10);
            let q = a.realloc(p, layout, 210 << 10);
            assert_eq!(q, p, "within its class (256 KiB): in place");
            let grown = Layout::from_size_align(210 << 10, 8).expect("layout");
            let r = a.realloc(q, grown, 1 << 20);
            assert_ne!(r, q);
            assert_eq!(r.add((200 << 10) - 1).read(), 7);
            let big = Layout::from_size_align(1 << 20, 8).expect("layout");
            let s = a.realloc(r, big, 20 << 10);
            assert_ne!(
                s, r,
                "a shrink to a smaller class moves (its rest is not lost)"
            );
            let small = Layout::from_size_align(20 << 10, 8).expect("layout");
            assert!(RetainingAllocator::is_pooled(s, &small));
            assert_eq!(s.add((20 << 10) - 1).read(), 7);
            let t = a.realloc(s, small, 1024);
            let tiny = Layout::from_size_align(1024, 8).expect("layout");
            assert!(!RetainingAllocator::is_pooled(t, &tiny));
            assert_eq!(t.add(1023).read(), 7);
            a.dealloc(t, tiny);
            // The block freed by the move is taken again, and zeroed when asked.
            let z = a.alloc_zeroed(big);
            assert_eq!(z, r, "the freed 1 MiB block again");
            assert!((0..1 << 20).step_by(4096).all(|i| z.add(i).read() == 0));
            a.dealloc(z, big);
        }
    }
}
