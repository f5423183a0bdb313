//! `kreplay verify` of a manifest's captures (issue 33), printed in one run next to its
//! baseline: the old way, which read each file twice (its SHA-256 from a read of the file,
//! then the verification of a fresh mapping), against `farm::verify_many`, which hashes
//! the mapping it verifies, on a thread beside the verification. A third line hashes the
//! same mapping first and verifies after (one mapping, no overlap), to tell apart what the
//! single read and the overlap each bring; and the hash alone, for scale. Best of three wall
//! times, the benches taking turns, warm page cache (the files were just written), or with `--cold` each file's pages
//! dropped from the page cache before every run (posix_fadvise DONTNEED: no root needed).
//!
//!   cargo run -p kreplay-player --example verify_many_bench [TOTAL_MIB] [FILES] [--cold]
//!
//! Defaults: 256 MiB in 8 files, verified with 1 job and with every core.
use std::io::BufWriter;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use kreplay_format::file::{verify_mapped, MappedFile};
use kreplay_format::*;
use kreplay_player::farm::{verify_many, Entry};
use kreplay_protocol::corpus::{sha256_file, sha256_pieces};

type Bench = Box<dyn Fn() -> Result<(), Box<dyn std::error::Error>>>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().filter(|a| a != "--cold").collect();
    let cold = std::env::args().any(|a| a == "--cold");
    let total_mib: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(256);
    let files: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(8).max(1);
    let dir = tempfile::tempdir()?;
    let each = (total_mib << 20) / files;
    let mut entries = Vec::new();
    let mut stored = 0u64;
    for i in 0..files {
        let path = dir.path().join(format!("{i}.krr"));
        write_capture(&path, i as u64, each)?;
        stored += std::fs::metadata(&path)?.len();
        entries.push(Entry {
            shown: format!("{i}.krr"),
            key: format!("{i}.krr"),
            sha256: Some(sha256_file(&path)?),
            path,
        });
    }
    let mib = stored as f64 / (1 << 20) as f64;
    println!(
        "{files} captures, {total_mib} MiB of memory, {mib:.0} MiB stored; debug build, {} cache",
        if cold { "cold" } else { "warm" }
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for jobs in [1, cores] {
        let old: Bench = {
            let e = entries.clone();
            Box::new(move || on_jobs(&e, jobs, old_verify))
        };
        let sequential: Bench = {
            let e = entries.clone();
            Box::new(move || on_jobs(&e, jobs, hash_then_verify))
        };
        let new: Bench = {
            let e = entries.clone();
            Box::new(move || {
                let v = verify_many(&e, jobs, &mut |_| Ok(()))?;
                check(
                    v.iter()
                        .all(|v| *v == kreplay_player::run_record::Verdict::Verified),
                )
            })
        };
        let hash_alone: Bench = {
            let e = entries.clone();
            Box::new(move || {
                on_jobs(&e, jobs, |e| {
                    sha256_file(&e.path).map(|_| ()).map_err(Into::into)
                })
            })
        };
        let [o, s, n, h] = best_of_3(&[old, sequential, new, hash_alone], &entries, cold)?;
        println!("--jobs {jobs}:");
        println!(
            "  baseline, read twice (sha256_file, then map and verify): {o:7.3} s  {:6.1} MiB/s",
            mib / o
        );
        println!(
            "  one mapping, hash then verify:                           {s:7.3} s  {:6.1} MiB/s",
            mib / s
        );
        println!(
            "  (the hash alone, sha256_file:                          {h:7.3} s  {:6.1} MiB/s)",
            mib / h
        );
        println!("  verify_many, hash beside the verification:               {n:7.3} s  {:6.1} MiB/s  ({:.2}x the baseline)", mib / n, o / n);
    }
    Ok(())
}

fn check(ok: bool) -> Result<(), Box<dyn std::error::Error>> {
    if ok {
        Ok(())
    } else {
        Err("a capture did not verify".into())
    }
}

/// What `verify_one` did before: the manifest's checksum from a read of the file, then the
/// verification of a mapping of it.
fn old_verify(e: &Entry) -> Result<(), Box<dyn std::error::Error>> {
    check(e.sha256.as_deref() == Some(sha256_file(&e.path)?.as_str()))?;
    let file = MappedFile::open(&e.path)?;
    verify_mapped(&file, &mut |_, _, _| {})?;
    Ok(())
}

fn hash_then_verify(e: &Entry) -> Result<(), Box<dyn std::error::Error>> {
    let file = MappedFile::open(&e.path)?;
    let got = sha256_pieces(file.bytes().chunks(64 << 20));
    check(e.sha256.as_deref() == Some(got.as_str()))?;
    verify_mapped(&file, &mut |_, _, _| {})?;
    Ok(())
}

/// `work` over `entries` on `jobs` threads, as `verify_many` spreads them.
fn on_jobs(
    entries: &[Entry],
    jobs: usize,
    work: fn(&Entry) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                while let Some(e) = entries.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if work(e).is_err() {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    check(failed.load(Ordering::Relaxed) == 0)
}

/// Each bench's best of three wall times, in seconds; the benches take turns, so a change
/// in the machine's load (it is shared) falls on all of them alike.
fn best_of_3<const N: usize>(
    benches: &[Bench; N],
    entries: &[Entry],
    cold: bool,
) -> Result<[f64; N], Box<dyn std::error::Error>> {
    let mut best = [f64::INFINITY; N];
    for _ in 0..3 {
        for (b, best) in benches.iter().zip(best.iter_mut()) {
            if cold {
                entries.iter().try_for_each(|e| drop_cached(&e.path))?;
            }
            let t = Instant::now();
            b()?;
            *best = best.min(t.elapsed().as_secs_f64());
        }
    }
    Ok(best)
}

/// Drops the file's pages from the page cache (clean pages: written and synced).
fn drop_cached(path: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path)?;
    // SAFETY: posix_fadvise takes the descriptor of a file open here and plain integers; it
    // only advises the kernel and touches no memory of ours.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(rc))
    }
}

/// A complete capture with one region of `bytes` of float-like data (a smooth field with
/// noise in the low bits: it compresses partly, as activations do).
fn write_capture(path: &Path, seed: u64, bytes: usize) -> Result<(), Box<dyn std::error::Error>> {
    let f = std::fs::File::create(path)?;
    let mut w = CaptureWriter::new(
        BufWriter::with_capacity(1 << 20, f),
        [seed as u8; 16],
        WriterOptions::default(),
    )?;
    w.dispatch(&Dispatch {
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
    })?;
    w.region(&Region {
        region_id: 0,
        address: 0x7f00_0000_0000,
        size: bytes as u64,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size: DEFAULT_CHUNK_SIZE,
    })?;
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ seed;
    let data: Vec<u8> = (0..bytes / 4)
        .flat_map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = i as f32 * 1e-4;
            ((x.sin() * 3.0) * (1.0 + (s & 0xff) as f32 * 1e-6)).to_le_bytes()
        })
        .collect();
    w.memory(0, MemoryState::Pre, 0, &data)?;
    w.finish()?
        .into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()?;
    Ok(())
}
