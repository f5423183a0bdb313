//! Replay benchmark (issue "kreplay play"), printed in one run next to its baselines:
//! - restore overhead per pass against 1.2 x (write-set bytes / device-to-device bandwidth
//!   measured now) + 50 us;
//! - file to first launch (open, parse, map, upload, load, launch);
//! - replayed median against the duration the recorder measured in the application.
//!
//!   replay_bench FILE [PASSES] [--flush]
use std::time::Instant;

use kreplay_format::{file::MappedFile, Capture};
use kreplay_player::{CacheState, OpenOptions, RunOptions, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: replay_bench FILE [PASSES] [--flush]")?;
    let passes: u32 = args.get(2).and_then(|p| p.parse().ok()).unwrap_or(20);
    let flush = args.iter().any(|a| a == "--flush");
    let t0 = Instant::now();
    let file = MappedFile::open(std::path::Path::new(path))?;
    let cap = Capture::parse(file.bytes())?;
    let parse_ms = t0.elapsed().as_secs_f64() * 1e3;
    let run = RunOptions {
        passes,
        cache: if flush {
            CacheState::Flush
        } else {
            CacheState::Keep
        },
        ..Default::default()
    };
    let mut s = Session::open(&cap, &OpenOptions::default())?;
    let r = s.run(&run)?;
    drop(s);
    let first_launch_s = (parse_ms + r.timing.setup_ms) / 1e3;
    let device = kreplay_cuda::Device::open(0)?;
    let _ctx = kreplay_cuda::PrimaryContext::retain(&device)?;
    let bw = kreplay_cuda::memory::measure_dtod_bandwidth(1 << 30, 5)?;
    let ws = r.write_set_bytes as f64;
    let bound_us = 1.2 * ws / bw * 1e6 + 50.0;
    let raw: u64 = cap.regions.iter().map(|x| x.size).sum();
    println!(
        "capture {path}: {} MiB of memory, write set {:.1} MiB, kernel {}",
        raw >> 20,
        ws / 1048576.0,
        r.kernel
    );
    println!(
        "bench: restore {:.1} us per pass; bound 1.2 x write set / dtod + 50 us = {:.1} us (dtod {:.0} GB/s measured now) -> {}",
        r.timing.restore_median_ns as f64 / 1e3,
        bound_us,
        bw / 1e9,
        if (r.timing.restore_median_ns as f64 / 1e3) <= bound_us { "ok" } else { "OVER" }
    );
    println!(
        "bench: file to first launch {:.3} s (parse {:.0} ms, setup {:.0} ms); target 2 s -> {}",
        first_launch_s,
        parse_ms,
        r.timing.setup_ms,
        if first_launch_s <= 2.0 { "ok" } else { "OVER" }
    );
    if let Some(o) = r.original_ns {
        let d = (r.timing.median_ns as f64 - o as f64) / o as f64 * 100.0;
        // The recorder measures with a settled, empty L2: --cache flush is the like-for-like
        // replay, and the +-5 % target applies to kernels of 20 us or more. The original is
        // one launch, one sample: gpu-bench.sh judges the target on medians of several runs.
        let verdict = if r.cache != CacheState::Flush || o < 20_000 {
            ""
        } else if d.abs() <= 5.0 {
            " (one in-app sample; +-5%) -> ok"
        } else {
            " (one in-app sample; +-5%) -> outside"
        };
        println!(
            "bench: replay median {:.1} us (min {:.1}, first pass {:.1}) original {:.1} us diff {:+.1}% cache {}{}",
            r.timing.median_ns as f64 / 1e3,
            r.timing.min_ns as f64 / 1e3,
            r.timing.durations_ns.first().copied().unwrap_or(0) as f64 / 1e3,
            o as f64 / 1e3,
            d,
            r.cache,
            verdict
        );
    }
    Ok(())
}
