//! The chunk kernels against the same facts computed on the host, on a GPU (an ignored test:
//! `--ignored` runs it, and without a GPU it fails). Shapes: a region ending mid-vector and
//! mid-chunk, zero and nonzero chunks, a single changed byte in the middle of a chunk and one in the tail bytes,
//! a chunk that changes to zeros.

use kreplay_cuda::chunks::ChunkKernels;
use kreplay_cuda::{copy_htod, Device, DeviceBuffer, PrimaryContext, Stream};

const CHUNK: u64 = 256 << 10;

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
    let device = Device::open(0).expect("a GPU (the CUDA driver or a device is missing)");
    let ctx = PrimaryContext::retain(&device).expect("primary context");
    ctx.handle().make_current().expect("current");
    let kernels = ChunkKernels::load(device.props().sm_count).expect("the PTX loads");
    let stream = Stream::new().expect("stream");

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
    let (a, b) = (
        DeviceBuffer::new(n).expect("a"),
        DeviceBuffer::new(n).expect("b"),
    );
    // SAFETY: `a` and `b` are this test's own allocations of `n` bytes; every kernel below
    // reads at most `size` (= n) bytes of them, and they live to the end of the test.
    unsafe {
        copy_htod(a.ptr(), &pre).expect("upload");
        copy_htod(b.ptr(), &post).expect("upload");
    }

    // SAFETY: as for the uploads.
    let flags =
        unsafe { kernels.scan(a.ptr(), Some(b.ptr()), size, CHUNK, &stream) }.expect("scan");
    let (nonzero, changed) = host_flags(&pre, &post);
    assert_eq!(flags.nonzero, nonzero);
    assert_eq!(flags.changed, changed);
    assert_eq!(
        changed.iter().filter(|&&c| c).count(),
        3,
        "the test's own changes"
    );
    // SAFETY: as for the uploads.
    let alone = unsafe { kernels.scan(a.ptr(), None, size, CHUNK, &stream) }.expect("scan");
    assert_eq!(alone.nonzero, nonzero);
    assert!(alone.changed.iter().all(|&c| !c));

    // SAFETY: as for the uploads.
    let (da, db) = unsafe {
        (
            kernels
                .digest(a.ptr(), size, CHUNK, &stream)
                .expect("digest"),
            kernels
                .digest(b.ptr(), size, CHUNK, &stream)
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
    let again = unsafe { kernels.digest(a.ptr(), size, CHUNK, &stream) }.expect("digest");
    assert_eq!(again, da, "the digest is deterministic");

    assert!(
        // SAFETY: CHUNK bytes from 8 into `a` lie inside it (n > CHUNK + 8).
        unsafe { kernels.scan(a.ptr() + 8, None, CHUNK, CHUNK, &stream) }.is_err(),
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
    let device = Device::open(0).expect("a GPU (the CUDA driver or a device is missing)");
    let ctx = PrimaryContext::retain(&device).expect("primary context");
    ctx.handle().make_current().expect("current");
    let kernels = ChunkKernels::load(device.props().sm_count).expect("the PTX loads");
    let stream = Stream::new().expect("stream");
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
    let buf = DeviceBuffer::new(n).expect("buffer");
    // SAFETY: `buf` is this test's own allocation of `n` bytes, read by the scans below only.
    unsafe { copy_htod(buf.ptr(), &bytes).expect("upload") };
    let (words, in_heap) = host_pointer_scan(&bytes, window, heap);
    assert!(
        words.len() > 1000 && in_heap.len() > 1000,
        "the test plants hits"
    );
    // SAFETY: as for the upload.
    let hits =
        unsafe { kernels.pointer_scan(buf.ptr(), n as u64, window, Some(heap), 1 << 20, &stream) }
            .expect("scan")
            .expect("room for every hit");
    assert_eq!(hits.words, words);
    assert_eq!(hits.heap, in_heap);
    // SAFETY: as for the upload.
    let short =
        unsafe { kernels.pointer_scan(buf.ptr(), n as u64, window, Some(heap), 100, &stream) }
            .expect("scan");
    assert_eq!(
        short.err().map(|t| t.0),
        Some((words.len() + in_heap.len()) as u64)
    );
}
