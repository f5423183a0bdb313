//! Writer and verifying-reader throughput on 1 GiB of float-like data and 1 GiB of zeros,
//! next to a baseline measured in the same run: bare zstd bulk compression / decompression
//! plus crc32fast over the same chunks, on the same number of threads.
//!
//!   cargo bench -p kreplay-format
//!
//! KREPLAY_BENCH_MIB=256 for a quicker run; KREPLAY_BENCH_SINK=1 writes to a sink that
//! discards instead of a file, to separate the file system's share.
//!
//! Then the streaming line: a child process writes a 4 GiB capture of float-like data window
//! by window (never holding it whole) and verifies it through its mapping, once dropping each
//! checked stretch of the file (`file::verify_mapped`, what `kreplay verify` does) and, as the
//! baseline, once keeping the mapping resident (plain `verify`); each run's peak RSS, as the
//! child measures it itself (`support/peak_rss.rs` says why not `getrusage`), is printed on a
//! line of its own. KREPLAY_BENCH_STREAM_MIB sets the size (0 skips it).

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::time::Instant;

use kreplay_format::*;
use rayon::prelude::*;

#[path = "support/peak_rss.rs"]
mod peak_rss;

const CHUNK: usize = DEFAULT_CHUNK_SIZE as usize;

fn float_like(bytes: usize) -> Vec<u8> {
    // A smooth field with noise in the low mantissa bits, like simulation or activation data.
    let n = bytes / 4;
    let mut out = Vec::with_capacity(bytes);
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let x = i as f32 * 1e-4;
        let v = (x.sin() * 3.0 + (x * 0.37).cos()) * (1.0 + (s & 0xff) as f32 * 1e-6);
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// `float_like` bytes starting at float index `first`, generated on all threads.
fn float_like_at(first: u64, bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes];
    out.par_chunks_mut(1 << 20)
        .enumerate()
        .for_each(|(ci, piece)| {
            let base = first + (ci as u64) * (1 << 18);
            let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ base;
            for (j, v) in piece.chunks_exact_mut(4).enumerate() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let x = (base + j as u64) as f32 * 1e-4;
                let f = (x.sin() * 3.0 + (x * 0.37).cos()) * (1.0 + (s & 0xff) as f32 * 1e-6);
                v.copy_from_slice(&f.to_le_bytes());
            }
        });
    out
}

/// The child of the streaming line: writes `bytes` of float-like data as one region, 64 MiB
/// at a time, to `path`, then verifies it (`release`: dropping checked pages).
fn stream_child(path: &std::path::Path, bytes: u64, release: bool) {
    const WINDOW: u64 = 64 << 20;
    let f = File::create(path).expect("create");
    let mut w = CaptureWriter::new(
        BufWriter::with_capacity(1 << 20, f),
        [0; 16],
        WriterOptions::default(),
    )
    .expect("writer");
    w.dispatch(&dispatch()).expect("dispatch");
    w.region(&Region {
        region_id: 0,
        address: 0x7f00_0000_0000,
        size: bytes,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size: CHUNK as u64,
    })
    .expect("region");
    let mut at = 0u64;
    while at < bytes {
        let n = WINDOW.min(bytes - at);
        let data = float_like_at(at / 4, n as usize);
        w.memory(0, MemoryState::Pre, at, &data).expect("memory");
        at += n;
    }
    let out = w.finish().expect("finish");
    out.into_inner().expect("flush").sync_all().expect("sync");
    let file = file::MappedFile::open(path).expect("open");
    let report = if release {
        file::verify_mapped(&file, &mut |_, _, _| {}).expect("verify")
    } else {
        verify(file.bytes()).expect("verify")
    };
    assert_eq!(report.raw_bytes, bytes);
    // Its own high-water mark, read last: the peak of the whole write and verify.
    let kib = peak_rss::own_peak_kib().expect("own peak RSS");
    println!("{}", peak_rss::report_line(kib));
}

/// Runs this bench as a child doing `stream_child`; (the child's own peak RSS in KiB, seconds).
fn stream_run(path: &std::path::Path, bytes: u64, release: bool) -> (u64, f64) {
    let exe = std::env::current_exe().expect("own path");
    let t = Instant::now();
    let out = std::process::Command::new(exe)
        .arg("--stream-child")
        .arg(path)
        .arg(bytes.to_string())
        .arg(if release { "release" } else { "keep" })
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run the child");
    let secs = t.elapsed().as_secs_f64();
    assert!(out.status.success(), "stream child failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let kib = peak_rss::parse_report(&stdout).unwrap_or_else(|e| panic!("stream child: {e}"));
    (kib, secs)
}

fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

fn best_of<F: FnMut() -> f64>(runs: usize, mut f: F) -> f64 {
    (0..runs).map(|_| f()).fold(f64::INFINITY, f64::min)
}

/// Discards what is written; seeks succeed.
struct Sink(u64);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        std::hint::black_box(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Seek for Sink {
    fn seek(&mut self, _: SeekFrom) -> std::io::Result<u64> {
        Ok(self.0)
    }
}

fn dispatch() -> Dispatch {
    Dispatch {
        kernel_name: "bench".into(),
        module_id: 0,
        api: LaunchApi::LaunchKernel,
        grid: [1; 3],
        block: [1; 3],
        cluster: [0; 3],
        dynamic_shared_bytes: 0,
        attributes: vec![],
        params: vec![],
        arg_bytes: vec![],
        pointer_words: vec![],
        original_duration_ns: None,
    }
}

/// A complete capture with one region holding `data`.
fn write_capture<W: Write + Seek>(out: W, data: &[u8]) {
    let mut w = CaptureWriter::new(out, [0; 16], WriterOptions::default()).expect("writer");
    w.dispatch(&dispatch()).expect("dispatch");
    w.region(&Region {
        region_id: 0,
        address: 0x7f00_0000_0000,
        size: data.len() as u64,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size: CHUNK as u64,
    })
    .expect("region");
    w.memory(0, MemoryState::Pre, 0, data).expect("memory");
    w.finish().expect("finish");
}

fn bench(name: &str, data: &[u8], path: &std::path::Path, to_sink: bool) {
    let size = data.len();
    // Baseline: what the writer fundamentally does, with nothing else.
    let mut compressed: Vec<Vec<u8>> = Vec::new();
    let base_write = best_of(2, || {
        let t = Instant::now();
        compressed = data
            .par_chunks(CHUNK)
            .map(|c| {
                let z = zstd::bulk::compress(c, DEFAULT_LEVEL).expect("zstd");
                std::hint::black_box(crc32fast::hash(c));
                z
            })
            .collect();
        t.elapsed().as_secs_f64()
    });
    let mut out = vec![0u8; size];
    out.fill(1); // fault the pages in before timing
    let base_read = best_of(2, || {
        let t = Instant::now();
        out.par_chunks_mut(CHUNK)
            .zip(compressed.par_iter())
            .for_each(|(dst, z)| {
                zstd::bulk::decompress_to_buffer(z, dst).expect("zstd");
                std::hint::black_box(crc32fast::hash(dst));
            });
        t.elapsed().as_secs_f64()
    });
    if to_sink {
        let write = best_of(2, || {
            let t = Instant::now();
            write_capture(Sink(0), data);
            t.elapsed().as_secs_f64()
        });
        let (w, bw) = (gbps(size, write), gbps(size, base_write));
        println!("bench: write {w:.2} GB/s baseline {bw:.2} GB/s ratio {:.2} ({name}, to a discarding sink)", w / bw);
    }
    let write = best_of(2, || {
        // A new file each time: truncating the previous one makes ext4 flush it on close
        // (auto_da_alloc), which would time the disk, not the writer.
        let _ = std::fs::remove_file(path);
        let t = Instant::now();
        let f = File::create(path).expect("create");
        write_capture(BufWriter::with_capacity(1 << 20, f), data);
        t.elapsed().as_secs_f64()
    });
    let stored = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let file = file::MappedFile::open(path).expect("open");
    let read = best_of(2, || {
        let t = Instant::now();
        let cap = Capture::parse(file.bytes()).expect("parse");
        cap.read_region_into(0, &mut out).expect("read");
        t.elapsed().as_secs_f64()
    });
    assert!(out == data, "read back differs");
    let threads = rayon::current_num_threads();
    println!(
        "{name}: {} MiB, stored {} MiB, {threads} threads",
        size >> 20,
        stored >> 20
    );
    let (w, bw) = (gbps(size, write), gbps(size, base_write));
    let (r, br) = (gbps(size, read), gbps(size, base_read));
    println!(
        "bench: write {w:.2} GB/s baseline {bw:.2} GB/s ratio {:.2} ({name})",
        w / bw
    );
    println!(
        "bench: read {r:.2} GB/s baseline {br:.2} GB/s ratio {:.2} ({name})",
        r / br
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--stream-child") {
        let path = std::path::PathBuf::from(&args[i + 1]);
        let bytes: u64 = args[i + 2].parse().expect("bytes");
        stream_child(&path, bytes, args[i + 3] == "release");
        return;
    }
    let stream_mib: u64 = std::env::var("KREPLAY_BENCH_STREAM_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    let mib: usize = std::env::var("KREPLAY_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let to_sink = std::env::var_os("KREPLAY_BENCH_SINK").is_some();
    let size = mib << 20;
    let path = std::env::temp_dir().join(format!("kreplay-bench-{}.krr", std::process::id()));
    let floats = float_like(size);
    bench("float-like", &floats, &path, to_sink);
    drop(floats);
    let zeros = vec![0u8; size];
    bench("zeros", &zeros, &path, to_sink);
    drop(zeros);
    let _ = std::fs::remove_file(&path);
    if stream_mib > 0 {
        let bytes = stream_mib << 20;
        let (rss, secs) = stream_run(&path, bytes, true);
        let stored = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let _ = std::fs::remove_file(&path);
        let (base_rss, base_secs) = stream_run(&path, bytes, false);
        let _ = std::fs::remove_file(&path);
        let size = if stream_mib.is_multiple_of(1024) {
            format!("{} GiB", stream_mib / 1024)
        } else {
            format!("{stream_mib} MiB")
        };
        let mib = |kib: u64| kib as f64 / 1024.0;
        println!(
            "bench: stream {size} write+verify peak RSS {:.0} MiB (the child's own VmHWM; checked pages released, as `kreplay verify`); {secs:.1} s; stored {} MiB",
            mib(rss),
            stored >> 20
        );
        println!(
            "bench: stream {size} write+verify peak RSS {:.0} MiB baseline (the child's own VmHWM; mapping kept resident); {base_secs:.1} s",
            mib(base_rss)
        );
    }
}
