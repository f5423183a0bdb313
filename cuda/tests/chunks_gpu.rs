//! The chunk kernels against the same facts computed on the host, on a GPU (an ignored test:
//! `--ignored` runs it, and without a GPU it fails). Shapes: a region ending mid-vector and
//! mid-chunk, zero and nonzero chunks, a single changed byte in the middle of a chunk and one in the tail bytes,
//! a chunk that changes to zeros.

use kreplay_cuda::chunks::ChunkKernels;
use kreplay_cuda::{copy_htod, Device, DeviceBuffer, PrimaryContext, Stream};

const CHUNK: u64 = 256 << 10;

/// Device 0 with its primary context current, the chunk kernels loaded and a stream: what each
/// test starts from. The tests share the device (the harness runs them on threads at once):
/// each holds the lock, so that one's allocations and VMM mappings cannot land where another
/// looks.
struct Gpu {
    kernels: ChunkKernels,
    stream: Stream,
    _ctx: PrimaryContext,
    device: Device,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

impl Gpu {
    fn open() -> Gpu {
        static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let lock = GPU.lock().unwrap_or_else(|e| e.into_inner());
        let device = Device::open(0).expect("a GPU (the CUDA driver or a device is missing)");
        let ctx = PrimaryContext::retain(&device).expect("primary context");
        ctx.handle().make_current().expect("current");
        let kernels = ChunkKernels::load(device.props().sm_count).expect("the PTX loads");
        let stream = Stream::new().expect("stream");
        Gpu {
            kernels,
            stream,
            _ctx: ctx,
            device,
            _one_at_a_time: lock,
        }
    }
}

/// A device buffer of this test's own holding `bytes`.
fn uploaded(bytes: &[u8]) -> DeviceBuffer {
    let b = DeviceBuffer::new(bytes.len()).expect("a test buffer");
    // SAFETY: `b` is a fresh allocation of `bytes.len()` bytes, ours alone.
    unsafe { copy_htod(b.ptr(), bytes).expect("upload") };
    // A copy from pageable memory may return before its DMA is done, and the kernels run on
    // non-blocking streams, which do not wait for it.
    kreplay_cuda::ctx_synchronize().expect("upload done");
    b
}

fn host_flags(pre: &[u8], post: &[u8]) -> (Vec<bool>, Vec<bool>) {
    let cs = CHUNK as usize;
    let nonzero = pre.chunks(cs).map(|c| c.iter().any(|&b| b != 0)).collect();
    let changed = pre
        .chunks(cs)
        .zip(post.chunks(cs))
        .map(|(a, b)| a != b)
        .collect();
    (nonzero, changed)
}

// Needs a GPU: ignored by `cargo test` (which would count an early return as a pass); the GPU
// suite runs the binary scripts/dist.sh builds with --ignored (tests/gpu, chunk-kernels).
#[test]
#[ignore = "needs a GPU: run with --ignored on a CUDA machine"]
fn scan_and_digest_agree_with_the_host() {
    // Held to the end: it keeps the context, and the device to this test.
    let gpu = Gpu::open();
    let (kernels, stream) = (&gpu.kernels, &gpu.stream);

    let size = 9 * CHUNK + 4099; // ends mid-chunk and mid-vector
    let n = size as usize;
    let mut pre = vec![0u8; n];
    for (i, b) in pre.iter_mut().enumerate() {
        let chunk = i / CHUNK as usize;
        if chunk % 3 != 1 {
            *b = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] | 1;
        }
    }
    let mut post = pre.clone();
    post[2 * CHUNK as usize + 12345] ^= 0x40; // one byte mid-chunk
    post[n - 1] ^= 1; // one tail byte (past the last 16-byte vector)
    post[5 * CHUNK as usize..6 * CHUNK as usize].fill(0); // a chunk cleared
                                                          // Every kernel below reads at most `size` (= n) bytes of `a` and `b`, which live to the
                                                          // end of the test.
    let (a, b) = (uploaded(&pre), uploaded(&post));

    // SAFETY: as for the uploads.
    let flags = unsafe { kernels.scan(a.ptr(), Some(b.ptr()), size, CHUNK, stream) }.expect("scan");
    let (nonzero, changed) = host_flags(&pre, &post);
    assert_eq!(flags.nonzero, nonzero);
    assert_eq!(flags.changed, changed);
    assert_eq!(
        changed.iter().filter(|&&c| c).count(),
        3,
        "the test's own changes"
    );
    // SAFETY: as for the uploads.
    let alone = unsafe { kernels.scan(a.ptr(), None, size, CHUNK, stream) }.expect("scan");
    assert_eq!(alone.nonzero, nonzero);
    assert!(alone.changed.iter().all(|&c| !c));

    // SAFETY: as for the uploads.
    let (da, db) = unsafe {
        (
            kernels
                .digest(a.ptr(), size, CHUNK, stream)
                .expect("digest"),
            kernels
                .digest(b.ptr(), size, CHUNK, stream)
                .expect("digest"),
        )
    };
    assert_eq!(da.nonzero, nonzero);
    let differ: Vec<bool> = da
        .digests
        .iter()
        .zip(&db.digests)
        .map(|(x, y)| x != y)
        .collect();
    assert_eq!(differ, changed, "digests differ exactly where the bytes do");
    // SAFETY: as for the uploads.
    let again = unsafe { kernels.digest(a.ptr(), size, CHUNK, stream) }.expect("digest");
    assert_eq!(again, da, "the digest is deterministic");

    assert!(
        // SAFETY: CHUNK bytes from 8 into `a` lie inside it (n > CHUNK + 8).
        unsafe { kernels.scan(a.ptr() + 8, None, CHUNK, CHUNK, stream) }.is_err(),
        "an unaligned address is refused"
    );
}

/// (byte offset, value) of words a scan found.
type Hits = Vec<(u64, u64)>;

/// The host's answer to the pointer scan: (offset, value) of the words in the heap, or else
/// nonzero and in the window (the walk's `scan_region`).
fn host_pointer_scan(bytes: &[u8], window: (u64, u64), heap: (u64, u64)) -> (Hits, Hits) {
    let (mut words, mut in_heap) = (Vec::new(), Vec::new());
    for (k, c) in bytes.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        let v = u64::from_le_bytes(b);
        if v >= heap.0 && v < heap.1 {
            in_heap.push((k as u64 * 8, v));
        } else if v != 0 && v >= window.0 && v < window.1 {
            words.push((k as u64 * 8, v));
        }
    }
    (words, in_heap)
}

// Catches: a hit lost or invented (a warp's slots miscounted, the tail words past the last
// full round missed), the heap not told apart, a region ending mid-word read past its end, an
// overflow reported as a complete answer.
#[test]
#[ignore = "needs a GPU: run with --ignored on a CUDA machine"]
fn the_pointer_scan_agrees_with_the_host_and_reports_overflow() {
    // Held to the end: it keeps the context, and the device to this test.
    let gpu = Gpu::open();
    let (kernels, stream) = (&gpu.kernels, &gpu.stream);
    let n = (3 << 20) + 13; // ends mid-word
    let mut bytes = vec![0u8; n];
    let (window, heap) = (
        (0x7f00_0000_0000u64, 0x7f10_0000_0000u64),
        (0x5000_0000u64, 0x6000_0000u64),
    );
    let mut x = 0x243f_6a88_85a3_08d3u64;
    for (k, c) in bytes.chunks_exact_mut(8).enumerate() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = match k % 97 {
            0 => window.0 + (x % (window.1 - window.0)), // a pointer
            1 => heap.0 + (x % (heap.1 - heap.0)),       // into the heap
            2 => window.1 + (x & 0xffff),                // just past the window
            3..=40 => 0,
            _ => x,
        };
        c.copy_from_slice(&v.to_le_bytes());
    }
    let buf = uploaded(&bytes);
    let (words, in_heap) = host_pointer_scan(&bytes, window, heap);
    assert!(
        words.len() > 1000 && in_heap.len() > 1000,
        "the test plants hits"
    );
    // SAFETY: as for the upload.
    let hits = unsafe {
        kernels.pointer_scan(
            buf.ptr(),
            n as u64,
            window,
            Some(heap),
            1 << 20,
            None,
            stream,
        )
    }
    .expect("scan")
    .expect("room for every hit");
    assert_eq!(hits.words, words);
    assert_eq!(hits.heap, in_heap);
    // SAFETY: as for the upload.
    let short =
        unsafe { kernels.pointer_scan(buf.ptr(), n as u64, window, Some(heap), 100, None, stream) }
            .expect("scan");
    assert_eq!(
        short.err().map(|t| t.0),
        Some((words.len() + in_heap.len()) as u64)
    );
    // The same scan copying the words as it reads them (the walk's copy of a large region),
    // the copy whole also when the hits overflow.
    for cap in [1 << 20, 100] {
        let copy = DeviceBuffer::new(n).expect("copy");
        copy.fill(0xab).expect("fill");
        // The fill runs on the legacy stream, which the scan's non-blocking stream does not
        // wait for: done before the scan (a GPU shared with other work showed the race).
        kreplay_cuda::ctx_synchronize().expect("fill done");
        // SAFETY: as for the upload; `copy` is this test's own allocation of `n` bytes.
        let hits = unsafe {
            kernels.pointer_scan(
                buf.ptr(),
                n as u64,
                window,
                Some(heap),
                cap,
                Some(copy.ptr()),
                stream,
            )
        }
        .expect("scan");
        if cap > 100 {
            assert_eq!(hits.expect("room").words, words);
        }
        let mut back = vec![0u8; n];
        // SAFETY: `copy` is ours, the scan waited for.
        unsafe { kreplay_cuda::copy_dtoh(&mut back, copy.ptr()) }.expect("download");
        let whole = n / 8 * 8;
        assert_eq!(
            &back[..whole],
            &bytes[..whole],
            "the words copied (cap {cap})"
        );
        assert!(
            back[whole..].iter().all(|&b| b == 0xab),
            "nothing past the last word"
        );
    }
}

// Catches, for the kernels over many pieces (the walk and snapshots of a pointer table's
// thousands of allocations): a piece copied short or past its end (a region ending mid-vector,
// one shorter than a vector, one crossing a piece boundary, an unaligned source), a change or a
// nonzero byte put under the wrong region's flag, a hit given to the wrong region or offset,
// and a region of handle-sized words not told apart from one holding a larger word.
#[test]
#[ignore = "needs a GPU: run with --ignored on a CUDA machine"]
fn the_kernels_over_many_pieces_agree_with_the_host() {
    use kreplay_cuda::many::{ManyScan, PIECE_BYTES};
    // Held to the end: it keeps the context, and the device to this test.
    let gpu = Gpu::open();
    let (kernels, stream) = (&gpu.kernels, &gpu.stream);
    let (window, heap) = (
        (0x7f00_0000_0000u64, 0x7f10_0000_0000u64),
        (0x5000_0000u64, 0x6000_0000u64),
    );
    // Region sizes: tiny, mid-vector, a piece and a tail (mid-word), many 4 KiB, two chunks.
    let mut sizes = vec![5usize, 100, PIECE_BYTES as usize + 13];
    sizes.extend(std::iter::repeat_n(4096, 300));
    sizes.push(2 * CHUNK as usize + 24);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let regions: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut v = vec![0u8; n];
            match i % 5 {
                0 => {} // all zero
                1 => {
                    // handle-sized words only
                    for c in v.chunks_exact_mut(8).step_by(3) {
                        c.copy_from_slice(&(next() & 0xffff).to_le_bytes());
                    }
                }
                _ => {
                    for (k, c) in v.chunks_exact_mut(8).enumerate() {
                        let w = match (k + i) % 31 {
                            0 => window.0 + next() % (window.1 - window.0),
                            1 => heap.0 + next() % (heap.1 - heap.0),
                            2..=20 => 0,
                            _ => next(),
                        };
                        c.copy_from_slice(&w.to_le_bytes());
                    }
                    if let Some(b) = v.last_mut() {
                        *b |= 1; // a nonzero tail byte
                    }
                }
            }
            v
        })
        .collect();
    let bufs: Vec<DeviceBuffer> = regions.iter().map(|r| uploaded(r)).collect();

    // Copy every region into one slab, at 256-byte stretches, and one at an odd address.
    let at: Vec<u64> = sizes
        .iter()
        .scan(0u64, |t, &n| {
            let a = *t;
            *t += (n as u64).next_multiple_of(256);
            Some(a)
        })
        .collect();
    let total = at.last().copied().unwrap_or(0)
        + (*sizes.last().unwrap_or(&0) as u64).next_multiple_of(256);
    let slab = DeviceBuffer::new(total as usize + 256).expect("slab");
    slab.fill(0xab).expect("sentinel");
    // Done before the copies: the legacy stream's fill and the kernels' stream do not order.
    kreplay_cuda::ctx_synchronize().expect("sentinel done");
    let mut copies: Vec<(u64, u64, u64)> = bufs
        .iter()
        .zip(&at)
        .map(|(b, &a)| (slab.ptr() + a, b.ptr(), b.len() as u64))
        .collect();
    // An unaligned source and destination: the last region's bytes from 3 on, at the end.
    let odd = (slab.ptr() + total + 1, bufs[2].ptr() + 3, 200);
    copies.push(odd);
    // SAFETY: every destination is a stretch of `slab` sized for its source, every source a
    // region of this test; nothing overlaps.
    unsafe { kernels.copy_many(&copies, stream) }.expect("copy_many");
    let mut back = vec![0u8; total as usize + 256];
    // SAFETY: `slab` is ours, its copies waited for.
    unsafe { kreplay_cuda::copy_dtoh(&mut back, slab.ptr()) }.expect("download");
    for (i, r) in regions.iter().enumerate() {
        let a = at[i] as usize;
        assert_eq!(&back[a..a + r.len()], &r[..], "region {i} copied");
        // The padding after it holds the sentinel still: no piece was copied long.
        let pad = (r.len() as u64).next_multiple_of(256) as usize;
        assert!(
            back[a + r.len()..a + pad].iter().all(|&b| b == 0xab),
            "region {i} copied past its end"
        );
    }
    assert_eq!(
        back[total as usize], 0xab,
        "nothing before the unaligned copy"
    );
    assert_eq!(
        back[total as usize + 201],
        0xab,
        "nothing after the unaligned copy"
    );
    assert_eq!(
        &back[total as usize + 1..total as usize + 201],
        &regions[2][3..203]
    );

    // Change some regions after the copy, then compare slab (pre) against the regions (post).
    let mut post = regions.clone();
    for i in [1usize, 4, 150, 303] {
        let n = post[i].len();
        post[i][n / 2] ^= 0x10;
        // SAFETY: this test's own region, `n` bytes.
        unsafe { copy_htod(bufs[i].ptr(), &post[i]).expect("change") };
    }
    let shift = CHUNK.trailing_zeros();
    let mut first = 0;
    let scans: Vec<ManyScan> = bufs
        .iter()
        .zip(&at)
        .map(|(b, &a)| {
            let s = ManyScan {
                pre: slab.ptr() + a,
                post: b.ptr(),
                bytes: b.len() as u64,
                chunk_shift: shift,
                first_flag: first,
            };
            first += (b.len() as u64).div_ceil(CHUNK) as usize;
            s
        })
        .collect();
    // Two unaligned scans (the bytewise path): the unaligned copy against its unchanged source,
    // and a changed region against its own pre bytes, both a byte in.
    let mut scans = scans;
    scans.push(ManyScan {
        pre: slab.ptr() + total + 1,
        post: bufs[2].ptr() + 3,
        bytes: 200,
        chunk_shift: shift,
        first_flag: first,
    });
    scans.push(ManyScan {
        pre: slab.ptr() + at[4] + 1,
        post: bufs[4].ptr() + 1,
        bytes: regions[4].len() as u64 - 1,
        chunk_shift: shift,
        first_flag: first + 1,
    });
    // SAFETY: the slab's stretches and this test's regions, all of the scans' sizes.
    let flags = unsafe { kernels.scan_many(&scans, stream) }.expect("scan_many");
    assert_eq!(
        &flags.nonzero[first..],
        &[true, true],
        "the unaligned scans' nonzero flags"
    );
    assert_eq!(
        &flags.changed[first..],
        &[false, true],
        "the unaligned scans' changed flags"
    );
    let flags = kreplay_cuda::chunks::ChunkFlags {
        nonzero: flags.nonzero[..first].to_vec(),
        changed: flags.changed[..first].to_vec(),
    };
    let (mut nonzero, mut changed) = (Vec::new(), Vec::new());
    for (pre, post) in regions.iter().zip(&post) {
        let (nz, ch) = host_flags(pre, post);
        nonzero.extend(nz);
        changed.extend(ch);
    }
    assert_eq!(flags.nonzero, nonzero);
    assert_eq!(flags.changed, changed);
    assert_eq!(
        changed.iter().filter(|&&c| c).count(),
        4,
        "the test's own changes"
    );

    // The pointer scan of every region, against the host's, region by region.
    let ranges: Vec<(u64, u64)> = bufs.iter().map(|b| (b.ptr(), b.len() as u64)).collect();
    // SAFETY: this test's regions.
    let hits = unsafe {
        kernels.pointer_scan_many(&ranges, window, Some(heap), 0xffff_ffff, 1 << 20, stream)
    }
    .expect("pointer_scan_many")
    .expect("room for every hit");
    let sorted = |l: &[(u32, u64, u64)]| l.windows(2).all(|w| w[0] <= w[1]);
    assert!(
        sorted(&hits.words) && sorted(&hits.heap),
        "by region, then offset"
    );
    let mut planted = 0;
    for (i, r) in post.iter().enumerate() {
        let (words, in_heap) = host_pointer_scan(r, window, heap);
        planted += words.len() + in_heap.len();
        let of = |list: &[(u32, u64, u64)]| -> Vec<(u64, u64)> {
            list.iter()
                .filter(|h| h.0 as usize == i)
                .map(|&(_, off, v)| (off, v))
                .collect()
        };
        assert_eq!(of(&hits.words), words, "region {i}'s words");
        assert_eq!(of(&hits.heap), in_heap, "region {i}'s heap words");
        let handle_like = r.chunks_exact(8).any(|c| c != [0; 8])
            && r.chunks_exact(8).all(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                u64::from_le_bytes(b) <= 0xffff_ffff
            });
        assert_eq!(hits.handle_like[i], handle_like, "region {i}'s shape");
    }
    assert!(planted > 1000, "the test plants hits");
    assert!(hits.handle_like.iter().filter(|&&h| h).count() > 10);
    // SAFETY: as above.
    let short =
        unsafe { kernels.pointer_scan_many(&ranges, window, Some(heap), 0xffff_ffff, 10, stream) }
            .expect("pointer_scan_many");
    assert_eq!(short.err().map(|t| t.0), Some(planted as u64));
}

// Catches: the one-call lookup (`allocation_facts`, the walk's) giving another base, size or
// kind than the four calls it replaces, for cuMemAlloc's memory at interior addresses, for
// page-locked host memory seen through its device pointer, for VMM mappings, and for an
// address no allocation holds.
#[test]
#[ignore = "needs a GPU: run with --ignored on a CUDA machine"]
fn the_one_call_lookup_agrees_with_the_four_it_replaces() {
    use kreplay_cuda::pointer;
    let gpu = Gpu::open();
    let device = &gpu.device;
    let ordinal = device.ordinal() as u32;
    let limit = 64u64 << 30;
    let four = |p: u64| {
        pointer::allocation_range(p, limit).map(|(base, size)| {
            (
                base,
                size,
                pointer::is_host_memory(base),
                pointer::is_managed(base),
                pointer::is_vmm(base),
            )
        })
    };
    let one = |p: u64| {
        pointer::allocation_facts(p, limit).map(|f| (f.base, f.size, f.host, f.managed, f.vmm))
    };
    let bufs: Vec<DeviceBuffer> = [4096usize, 1 << 20, (3 << 20) + 13, 256]
        .iter()
        .map(|&n| DeviceBuffer::new(n).expect("buffer"))
        .collect();
    for b in &bufs {
        for p in [
            b.ptr(),
            b.ptr() + b.len() as u64 / 2,
            b.ptr() + b.len() as u64 - 1,
        ] {
            assert_eq!(one(p), four(p), "cuMemAlloc memory at {p:#x}");
            let f = pointer::allocation_facts(p, limit).expect("facts");
            assert!(f.kernel_readable_on(ordinal), "{f:?}");
        }
    }
    let pinned = kreplay_cuda::PinnedBuffer::mapped(1 << 20).expect("mapped host memory");
    let dp = pinned.device_ptr().expect("its device pointer");
    assert_eq!(one(dp + 100), four(dp + 100), "mapped host memory");
    let f = pointer::allocation_facts(dp, limit).expect("facts");
    assert!(f.host && !f.kernel_readable_on(ordinal), "{f:?}");
    let g = kreplay_cuda::vmm::granularity(device).expect("granularity");
    // Far from anything allocated here; the address space there may be taken (one run in twelve
    // found +64 GiB so on the H200), so a few places are tried, below as well as above: the
    // driver may place cuMemAlloc's memory just under the top of the 47-bit user space (seen on
    // the H200 at 0x7ff7_8680_0000), where every place above lies outside it.
    let tried: Vec<u64> = [64u64, 256, 1024, 4096]
        .iter()
        .flat_map(|gib| {
            let p = bufs[2].ptr();
            [p.checked_add(gib << 30), p.checked_sub(gib << 30)]
        })
        .flatten()
        .map(|va| va.next_multiple_of(g))
        .collect();
    let mut errors = Vec::new();
    let mapped = tried.iter().find_map(|&va| {
        match kreplay_cuda::vmm::FixedMapping::map(&[(va, 2 * g), (va + 2 * g, g)], device) {
            Ok(m) => Some((va, m)),
            Err(e) => {
                errors.push(format!("{va:#x}: {e}"));
                None
            }
        }
    });
    let Some((va, _mapping)) = mapped else {
        panic!("no VMM mapping at any of {errors:#?}");
    };
    assert_eq!(one(va + 8), four(va + 8), "VMM mappings");
    let f = pointer::allocation_facts(va, limit).expect("facts");
    assert!(f.vmm && !f.kernel_readable_on(ordinal), "{f:?}");
    let mut managed = 0u64;
    // SAFETY: one managed allocation of 1 MiB into a local, freed below; nothing reads it.
    let r = unsafe {
        kreplay_cuda::sys::cuMemAllocManaged(
            &mut managed,
            1 << 20,
            kreplay_cuda::sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32,
        )
    };
    assert_eq!(
        r,
        kreplay_cuda::sys::CUresult::CUDA_SUCCESS,
        "managed memory"
    );
    assert_eq!(one(managed + 64), four(managed + 64), "managed memory");
    let f = pointer::allocation_facts(managed, limit).expect("facts");
    assert!(
        f.managed && !f.kernel_readable_on(ordinal),
        "managed memory is not read in place: {f:?}"
    );
    // SAFETY: frees the allocation made above.
    unsafe { kreplay_cuda::sys::cuMemFree_v2(managed) };
    assert_eq!(one(0x10), None);
    assert_eq!(four(0x10), None);
}

// Catches: the many-pieces scan in 4 KiB chunks (profile --memory touched) flagging a change
// in page 5 of a 64 KiB span as page 0's, or missing a change in a region's short last page,
// or flagging pages that did not change.
#[test]
#[ignore = "needs a GPU: run with --ignored on a CUDA machine"]
fn the_many_pieces_scan_in_pages_flags_each_changed_page() {
    use kreplay_cuda::many::{ManyScan, MIN_SCAN_CHUNK};
    let gpu = Gpu::open();
    let (kernels, stream) = (&gpu.kernels, &gpu.stream);
    let page = MIN_SCAN_CHUNK as usize;
    let size = 40 * page + 100; // a short last page
    let pre: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    let mut post = pre.clone();
    for at in [
        5 * page + 1234,
        21 * page,
        39 * page + page - 1,
        40 * page + 99,
    ] {
        post[at] ^= 0x40;
    }
    let (a, b) = (uploaded(&pre), uploaded(&post));
    let scan = ManyScan {
        pre: a.ptr(),
        post: b.ptr(),
        bytes: size as u64,
        chunk_shift: MIN_SCAN_CHUNK.trailing_zeros(),
        first_flag: 0,
    };
    // SAFETY: both ranges are our own buffers of `size` bytes, alive to the end of the test.
    let flags = unsafe { kernels.scan_many(&[scan], stream) }.expect("scan_many in pages");
    let changed: Vec<usize> = (0..flags.changed.len())
        .filter(|&k| flags.changed[k])
        .collect();
    assert_eq!(flags.changed.len(), 41);
    assert_eq!(changed, vec![5, 21, 39, 40]);
    assert!(
        flags.nonzero.iter().all(|&nz| nz),
        "every page holds nonzero bytes"
    );
}

// Catches: the kept tables (profile's page restores and output check) copying or comparing
// other bytes than their rows name, an unaligned run mishandled, a table queued twice not
// doing the same again, or the check's flags not cleared between two queues (a change seen
// once would then be reported forever, or one flag's change put under another's).
#[test]
#[ignore = "needs a GPU: run with --ignored on a CUDA machine"]
fn kept_copy_and_scan_tables_do_what_their_rows_say_each_time() {
    use kreplay_cuda::many::ManyScan;
    let gpu = Gpu::open();
    let (kernels, stream) = (&gpu.kernels, &gpu.stream);
    let size = (256 << 10) + 100;
    let live: Vec<u8> = (0..size).map(|i| (i * 13 + 1) as u8).collect();
    let pristine: Vec<u8> = (0..size).map(|i| (i * 5 + 7) as u8).collect();
    let (a, p) = (uploaded(&live), uploaded(&pristine));
    let runs: [(u64, u64); 3] = [(4096, 8192), ((64 << 10) + 3, 100), (200_000, 60_000)];
    let copies: Vec<(u64, u64, u64)> = runs
        .iter()
        .map(|&(off, len)| (a.ptr() + off, p.ptr() + off, len))
        .collect();
    let table = kernels.copy_table(&copies).expect("copy table");
    for _ in 0..2 {
        // SAFETY: every copy lies in our two buffers, which do not overlap; the stream is
        // synchronised below, before anything is dropped.
        unsafe { kernels.queue_copies(&table, stream) }.expect("queue copies");
    }
    stream.synchronize().expect("copies done");
    let mut got = vec![0u8; size];
    // SAFETY: reads our own buffer of `size` bytes, written by the synchronised stream.
    unsafe { kreplay_cuda::copy_dtoh(&mut got, a.ptr()) }.expect("read back");
    let mut want = live.clone();
    for &(off, len) in &runs {
        let (o, n) = (off as usize, len as usize);
        want[o..o + n].copy_from_slice(&pristine[o..o + n]);
    }
    assert!(
        got == want,
        "the copy table wrote other bytes than its runs"
    );

    let scans: Vec<ManyScan> = runs
        .iter()
        .enumerate()
        .map(|(i, &(off, len))| ManyScan {
            pre: p.ptr() + off,
            post: a.ptr() + off,
            bytes: len,
            chunk_shift: 62,
            first_flag: i,
        })
        .collect();
    let check = kernels.scan_table(&scans).expect("scan table");
    assert_eq!(check.flags(), 3);
    let out = DeviceBuffer::new(check.flags() * 8).expect("flags");
    let changed = |poke: Option<(usize, u8)>| {
        if let Some((at, v)) = poke {
            // SAFETY: one byte inside our own buffer.
            unsafe { copy_htod(a.ptr() + at as u64, &[v]) }.expect("poke");
        }
        // SAFETY: the scans read our two buffers; `out` is ours, 8 bytes a flag; the stream
        // is synchronised before the flags are read.
        unsafe { kernels.queue_scan(&check, out.ptr(), stream) }.expect("queue scan");
        stream.synchronize().expect("scan done");
        let mut flags = vec![0u8; check.flags() * 8];
        // SAFETY: reads our own flags buffer, written by the synchronised stream.
        unsafe { kreplay_cuda::copy_dtoh(&mut flags, out.ptr()) }.expect("flags back");
        flags[check.flags() * 4..]
            .chunks(4)
            .map(|w| w.iter().any(|&b| b != 0))
            .collect::<Vec<bool>>()
    };
    assert_eq!(
        changed(None),
        vec![false; 3],
        "restored runs equal the pristine bytes"
    );
    let at = (64 << 10) + 50; // inside the unaligned run
    assert_eq!(changed(Some((at, !pristine[at]))), vec![false, true, false]);
    assert_eq!(
        changed(Some((at, pristine[at]))),
        vec![false; 3],
        "the flags are cleared each time"
    );
    assert_eq!(
        changed(Some((259_999, !pristine[259_999]))),
        vec![false, false, true]
    );
}

// Catches: `copy_later` launching from the wrong row (the first copies again, or rows past the
// kept ones), the first launch running the kept rows too, or a later copy that reads the source
// as it was at the first (the point is the bytes as they are later).
#[test]
#[ignore = "needs a GPU: run with --ignored on a CUDA machine"]
fn copies_kept_for_later_run_only_when_asked_and_read_the_source_then() {
    let gpu = Gpu::open();
    let (kernels, stream) = (&gpu.kernels, &gpu.stream);
    let upload = Stream::new().expect("upload stream");
    // Two regions of odd lengths (one of several pieces), a slab twice their placed length.
    let sizes = [5000usize, (3 << 20) + 17];
    let regions: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(r, &n)| (0..n).map(|i| (i * 7 + r * 31 + 1) as u8).collect())
        .collect();
    let bufs: Vec<DeviceBuffer> = regions.iter().map(|r| uploaded(r)).collect();
    let at = [0u64, 5120];
    let half = at[1] + sizes[1] as u64 + 111;
    let slab = uploaded(&vec![0u8; 2 * half as usize]);
    let now: Vec<(u64, u64, u64)> = (0..2)
        .map(|i| (slab.ptr() + at[i], bufs[i].ptr(), sizes[i] as u64))
        .collect();
    let later: Vec<(u64, u64, u64)> = now.iter().map(|&(d, s, n)| (d + half, s, n)).collect();
    // SAFETY: every copy lies in our own buffers, none overlapping another; `stream` is
    // synchronised below before the table is given back or anything is dropped.
    let queued = unsafe { kernels.queue_copies_keeping(&now, &later, stream, &upload) }
        .expect("queue the first copies");
    stream.synchronize().expect("first copies done");
    let read = || {
        let mut got = vec![0u8; 2 * half as usize];
        // SAFETY: reads our own slab, its writers synchronised.
        unsafe { kreplay_cuda::copy_dtoh(&mut got, slab.ptr()) }.expect("read back");
        got
    };
    // Each region's bytes in the slab's first half and in its second.
    let halves = |got: &[u8], i: usize| {
        let (a, h) = (at[i] as usize, (at[i] + half) as usize);
        (got[a..a + sizes[i]].to_vec(), got[h..h + sizes[i]].to_vec())
    };
    let first = read();
    for (i, region) in regions.iter().enumerate() {
        let (now, later) = halves(&first, i);
        assert!(now == *region, "region {i} in the first half");
        assert!(
            later.iter().all(|&b| b == 0),
            "region {i}'s later copy ran with the first"
        );
    }
    // The sources change before the later copies: those must see the new bytes.
    let changed: Vec<Vec<u8>> = regions
        .iter()
        .map(|r| r.iter().map(|b| !b).collect())
        .collect();
    for (b, c) in bufs.iter().zip(&changed) {
        // SAFETY: our own buffer of `c.len()` bytes; nothing of the GPU uses it now.
        unsafe { copy_htod(b.ptr(), c) }.expect("change the source");
    }
    // The pageable copies above may still be in flight (see `uploaded`).
    kreplay_cuda::ctx_synchronize().expect("sources changed");
    // SAFETY: `stream` (queued on above) is synchronised; the later copies lie in our buffers.
    unsafe { kernels.copy_later(&queued, stream) }.expect("queue the later copies");
    stream.synchronize().expect("later copies done");
    kernels.copies_done(queued);
    let second = read();
    for (i, (region, changed)) in regions.iter().zip(&changed).enumerate() {
        let (now, later) = halves(&second, i);
        assert!(now == *region, "region {i}'s first copy kept");
        assert!(later == *changed, "region {i}'s later copy");
    }
    assert!(
        second[at[0] as usize + sizes[0]..at[1] as usize]
            .iter()
            .all(|&b| b == 0)
            && second[(half + at[0]) as usize + sizes[0]..(half + at[1]) as usize]
                .iter()
                .all(|&b| b == 0),
        "bytes between the regions were written"
    );
}
