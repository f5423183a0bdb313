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
