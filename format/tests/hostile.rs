//! Files crafted to make the reader do far more than they hold (issue 14): each test fails on
//! the reader before the bounds were added (it decoded, allocated or memset what the file
//! claimed) and passes now.

mod common;

use std::io::Cursor;
use std::time::Instant;

use kreplay_format::layout::{ChunkPrefix, FLAG_CRITICAL, FLAG_ZSTD};
use kreplay_format::*;

/// A valid capture, plus `extra` written just before the index (events as raw frames).
fn with_extra(extra: impl FnOnce(&mut CaptureWriter<Cursor<Vec<u8>>>)) -> Vec<u8> {
    let mut w = common::writer_with_dispatch();
    extra(&mut w);
    w.finish().expect("finish").into_inner()
}

fn zstd_annotation(value_len: usize) -> Vec<u8> {
    let a = Annotation {
        key: "k".into(),
        value: "a".repeat(value_len),
    };
    let bytes = kreplay_format::codec::encode(&a, "annotation").expect("encode");
    zstd::bulk::compress(&bytes, 19).expect("zstd")
}

#[test]
fn a_small_metadata_event_cannot_decode_to_a_hundred_mib() {
    let bomb = zstd_annotation(100 << 20);
    assert!(
        bomb.len() < 64 << 10,
        "the bomb is small: {} bytes",
        bomb.len()
    );
    let file = with_extra(|w| {
        w.write_raw_event(EventKind::Annotation as u16, FLAG_ZSTD, &bomb)
            .expect("raw")
    });
    let t = Instant::now();
    let err = Capture::parse(&file).expect_err("a 64x+ metadata bomb must be refused");
    assert!(t.elapsed().as_secs() < 5, "bounded time: {:?}", t.elapsed());
    assert_eq!(err.kind(), "decode", "{err}");
    assert!(err.to_string().contains("decode to more than"), "{err}");
    assert!(err.to_string().contains("plausibly hold"), "{err}");
    // The offset names the bomb's payload, inside the file.
    let off = err.offset().expect("offset");
    assert!(off > 64 && off < file.len() as u64, "{off}");
    assert!(verify(&file).is_err());
}

#[test]
fn many_small_metadata_events_share_one_budget() {
    // Each decodes to just under the per-event floor (1 MiB); 60 of them exceed the file's
    // budget of 48 MiB + 4 x its size.
    let one = zstd_annotation((1 << 20) - 64);
    let file = with_extra(|w| {
        for _ in 0..60 {
            w.write_raw_event(EventKind::Annotation as u16, FLAG_ZSTD, &one)
                .expect("raw");
        }
    });
    assert!(file.len() < 1 << 20, "{}", file.len());
    let err = Capture::parse(&file).expect_err("budget exceeded");
    assert!(err.to_string().contains("plausibly hold"), "{err}");
    // The same 10 times is fine: real captures are not refused.
    let file = with_extra(|w| {
        for _ in 0..10 {
            w.write_raw_event(EventKind::Annotation as u16, FLAG_ZSTD, &one)
                .expect("raw");
        }
    });
    let cap = Capture::parse(&file).expect("within budget");
    assert_eq!(cap.annotations.len(), 10);
}

/// A region of `size` bytes in all-zero chunks of `chunk_size`, written as raw events.
fn zero_region(size: u64, chunk_size: u64) -> Vec<u8> {
    with_extra(|w| {
        w.region(&Region {
            region_id: 0,
            address: 0x7f00_0000_0000,
            size,
            kind: MemoryKind::Device,
            role: RegionRole::Allocation,
            chunk_size,
        })
        .expect("region");
        let mut off = 0;
        while off < size {
            let p = ChunkPrefix {
                region_id: 0,
                state: MemoryState::Pre,
                encoding: ChunkEncoding::Zero,
                offset: off,
                raw_len: chunk_size.min(size - off),
                raw_crc: 0,
            };
            w.write_raw_event(EventKind::MemoryChunk as u16, FLAG_CRITICAL, &p.encode())
                .expect("chunk");
            off += chunk_size;
        }
    })
}

#[test]
fn a_terabyte_of_zero_chunks_verifies_in_time_bounded_by_the_file() {
    let file = zero_region(1 << 40, 64 << 20);
    assert!(file.len() < 1 << 20, "{}", file.len());
    let t = Instant::now();
    let r = verify(&file).expect("verifies");
    // Before: 16384 x (allocate and memset 64 MiB) = 1 TiB written, minutes.
    assert!(t.elapsed().as_secs() < 10, "took {:?}", t.elapsed());
    assert_eq!(r.raw_bytes, 1 << 40);
    assert_eq!(r.chunks, 16384);
}

#[test]
fn a_zstd_chunk_that_decodes_to_more_than_it_claims_is_refused() {
    let data = vec![7u8; 1 << 20];
    let z = zstd::bulk::compress(&data, 1).expect("zstd");
    let file = with_extra(|w| {
        w.region(&Region {
            region_id: 0,
            address: 0x7f00_0000_0000,
            size: 4096,
            kind: MemoryKind::Device,
            role: RegionRole::Allocation,
            chunk_size: 4096,
        })
        .expect("region");
        let p = ChunkPrefix {
            region_id: 0,
            state: MemoryState::Pre,
            encoding: ChunkEncoding::Zstd,
            offset: 0,
            raw_len: 4096,
            raw_crc: 0,
        };
        let mut payload = p.encode().to_vec();
        payload.extend_from_slice(&z);
        w.write_raw_event(EventKind::MemoryChunk as u16, FLAG_CRITICAL, &payload)
            .expect("chunk");
    });
    let err = verify(&file).expect_err("1 MiB where 4 KiB was claimed");
    assert!(
        err.to_string().contains("more than the 4096 bytes"),
        "{err}"
    );
}

#[test]
fn real_chunks_still_verify_chunk_by_chunk() {
    let good = common::sample_with(256);
    verify(&good).expect("sample verifies");
    let cap = Capture::parse(&good).expect("parse");
    for c in cap.all_chunks() {
        cap.verify_chunk(c).expect("chunk");
    }
}
