//! Baselines for the model-scale capture benchmarks (#13), measured on the machine that runs
//! them: zstd compression at the writer's level and decompression, on all cores, in the
//! writer's chunk size, over the data `testdata/apps/bigmem.cu` makes (float-like: random f32
//! and bf16 values in the ranges weights take; and zeros).
//!
//!   stream_rates [MIB]      (default 1024)
//!
//! Prints one line per kind: `rates: floats compress 5.1 GB/s decompress 9.8 GB/s ratio 1.21`.

use std::time::Instant;

use kreplay_format::{DEFAULT_CHUNK_SIZE, DEFAULT_LEVEL};
use rayon::prelude::*;

/// The generator of bigmem.cu's `fill_floats`, word for word.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn float_like(bytes: usize) -> Vec<u8> {
    let words = bytes / 4;
    let mut out = vec![0u8; words * 4];
    out.par_chunks_mut(4).enumerate().for_each(|(i, w)| {
        let r = mix(i as u64);
        let e1 = 119 + (r % 12) as u32;
        let e2 = 119 + ((r >> 8) % 12) as u32;
        let v = if i < words / 2 {
            (((r >> 63) as u32) << 31) | (e1 << 23) | ((r >> 16) as u32 & 0x7f_ffff)
        } else {
            let lo = (((r >> 63) as u32) << 15) | (e1 << 7) | ((r >> 16) as u32 & 0x7f);
            let hi = (((r >> 62) as u32 & 1) << 15) | (e2 << 7) | ((r >> 24) as u32 & 0x7f);
            (hi << 16) | lo
        };
        w.copy_from_slice(&v.to_le_bytes());
    });
    out
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1024);
    let cs = DEFAULT_CHUNK_SIZE as usize;
    for (kind, data) in [
        ("floats", float_like(mib << 20)),
        ("zeros", vec![0u8; mib << 20]),
    ] {
        let t = Instant::now();
        let packed: Vec<Vec<u8>> = data
            .par_chunks(cs)
            .map(|c| zstd::bulk::compress(c, DEFAULT_LEVEL).unwrap_or_default())
            .collect();
        let compress = data.len() as f64 / t.elapsed().as_secs_f64() / 1e9;
        let stored: usize = packed.iter().map(Vec::len).sum();
        let t = Instant::now();
        let total: usize = packed
            .par_iter()
            .map(|z| zstd::bulk::decompress(z, cs).map_or(0, |v| v.len()))
            .sum();
        let decompress = total as f64 / t.elapsed().as_secs_f64() / 1e9;
        println!(
            "rates: {kind} compress {compress:.1} GB/s decompress {decompress:.1} GB/s ratio {:.2} ({} threads, level {DEFAULT_LEVEL}, {} MiB chunks)",
            data.len() as f64 / stored.max(1) as f64,
            rayon::current_num_threads(),
            cs >> 20
        );
    }
}
