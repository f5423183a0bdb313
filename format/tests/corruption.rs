//! Damaged files: every one must give a specific error, never a panic, and never `Ok`.

mod common;

use std::io::Cursor;

use kreplay_format::layout::*;
use kreplay_format::*;

fn set_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Recomputes a frame's own CRC after a field was edited on purpose.
fn refresh_frame_crc(bytes: &mut [u8], at: usize) {
    let c = crc32fast::hash(&bytes[at..at + 20]);
    bytes[at + 20..at + 24].copy_from_slice(&c.to_le_bytes());
}

/// The captures every byte and bit of which is damaged: a plain one and one by touched
/// pages (whose extents decide which zeros are data).
fn samples() -> [(&'static str, Vec<u8>); 2] {
    [
        ("small", common::sample()),
        ("extents", common::sample_extents()),
    ]
}

#[test]
fn truncation_at_every_byte_is_reported() {
    for (name, full) in samples() {
        truncation_at_every_byte_is_reported_in(name, &full);
    }
}

fn truncation_at_every_byte_is_reported_in(name: &str, full: &[u8]) {
    for cut in 0..full.len() {
        let data = &full[..cut];
        let e = verify(data).expect_err("a truncated file must not verify");
        assert!(
            matches!(
                e,
                FormatError::NotKrr { .. }
                    | FormatError::Truncated { .. }
                    | FormatError::Inconsistent { .. }
                    | FormatError::Checksum { .. }
            ),
            "{name}: cut at {cut}: unexpected error {e}"
        );
        assert!(
            Capture::parse(data).is_err(),
            "{name}: cut at {cut}: parse accepted it"
        );
    }
}

#[test]
fn every_single_bit_flip_is_detected() {
    for (name, full) in samples() {
        every_single_bit_flip_is_detected_in(name, &full);
    }
}

fn every_single_bit_flip_is_detected_in(name: &str, full: &[u8]) {
    for byte in 0..full.len() {
        for bit in 0..8 {
            let mut data = full.to_vec();
            data[byte] ^= 1 << bit;
            assert!(
                verify(&data).is_err(),
                "{name}: flip of bit {bit} in byte {byte} went unnoticed"
            );
        }
    }
}

#[test]
fn checksum_error_names_the_event() {
    let mut data = common::sample();
    let cap = Capture::parse(&data).expect("parse");
    let chunk = *cap.all_chunks()[0];
    drop(cap);
    let at = (chunk.payload_offset + 40) as usize;
    data[at] ^= 0x55;
    let e = verify(&data).expect_err("corrupt chunk");
    match e {
        FormatError::Checksum {
            offset, ref what, ..
        } => {
            assert_eq!(offset, chunk.event_offset);
            assert!(what.contains("memory chunk"), "{what}");
        }
        other => panic!("expected checksum error, got {other}"),
    }
    // parse() only checks metadata: the damage shows when the chunk is read.
    let cap = Capture::parse(&data).expect("metadata intact");
    assert!(cap.read_region(chunk.region_id).is_err());
}

#[test]
fn bogus_payload_lengths_are_refused_without_allocating() {
    let good = common::sample();
    let first_event = HEADER_LEN;
    for len in [u64::MAX, u64::MAX - 23, 1 << 62, good.len() as u64, 1 << 40] {
        let mut data = good.clone();
        set_u64(&mut data, first_event + 8, len);
        refresh_frame_crc(&mut data, first_event);
        let e = verify(&data).expect_err("bogus length");
        assert!(
            matches!(
                e,
                FormatError::Truncated { .. } | FormatError::Checksum { .. }
            ),
            "len {len}: {e}"
        );
        assert!(Capture::parse(&data).is_err(), "len {len}");
    }
}

#[test]
fn newer_major_is_refused_naming_both_versions() {
    let mut data = common::sample();
    data[8..10].copy_from_slice(&(VERSION_MAJOR + 1).to_le_bytes());
    let e = Capture::parse(&data).expect_err("newer major");
    let msg = e.to_string();
    assert!(matches!(e, FormatError::NewerMajor { .. }), "{msg}");
    assert!(msg.contains(&format!("{}.0", VERSION_MAJOR + 1)), "{msg}");
    assert!(msg.contains(&format!("{VERSION_MAJOR}.")), "{msg}");
}

#[test]
fn newer_minor_is_accepted() {
    let mut data = common::sample();
    let mut h = FileHeader::decode(&data).expect("header");
    h.minor = VERSION_MINOR + 3;
    data[..64].copy_from_slice(&h.encode());
    let cap = Capture::parse(&data).expect("newer minor reads");
    assert_eq!(cap.header.minor, VERSION_MINOR + 3);
    verify(&data).expect("and verifies");
}

fn with_extra_event(kind: u16, flags: u16) -> Vec<u8> {
    let mut w = CaptureWriter::new(
        Cursor::new(Vec::new()),
        common::UUID,
        WriterOptions::default(),
    )
    .expect("writer");
    w.dispatch(&common::dispatch()).expect("dispatch");
    w.write_raw_event(kind, flags, b"from the future")
        .expect("raw");
    w.finish().expect("finish").into_inner()
}

#[test]
fn unknown_non_critical_event_is_skipped() {
    let data = with_extra_event(999, 0);
    let cap = Capture::parse(&data).expect("skippable");
    assert_eq!(cap.skipped.len(), 1);
    assert_eq!(cap.skipped[0].1, 999);
    verify(&data).expect("verifies");
}

#[test]
fn unknown_critical_event_is_refused() {
    let data = with_extra_event(999, FLAG_CRITICAL);
    let e = Capture::parse(&data).expect_err("critical");
    assert!(
        matches!(e, FormatError::UnknownCritical { kind: 999, .. }),
        "{e}"
    );
}

#[test]
fn missing_end_is_incomplete_and_salvageable() {
    let data = common::unfinished_bytes(1024);
    let e = Capture::parse(&data).expect_err("incomplete");
    let FormatError::Incomplete { intact_events, .. } = e else {
        panic!("expected incomplete, got {e}");
    };
    assert!(intact_events >= 8, "{intact_events}");
    assert!(verify(&data).is_err());
    let (out, report) = salvage(&data, Cursor::new(Vec::new())).expect("salvage");
    let fixed = out.into_inner();
    verify(&fixed).expect("salvaged file verifies");
    let cap = Capture::parse(&fixed).expect("parse");
    assert_eq!(cap.regions.len(), 2);
    assert!(report.dropped_regions.is_empty());
    assert_eq!(cap.read_region(0).expect("x"), common::sample_region0());
}

#[test]
fn salvage_drops_regions_whose_memory_was_cut() {
    let full = common::unfinished_bytes(1024);
    // Cut inside the last chunk of region 1's post state, then inside region 1's pre chunks.
    let cut = full.len() - 700;
    let (out, report) = salvage(&full[..cut], Cursor::new(Vec::new())).expect("salvage");
    let fixed = out.into_inner();
    verify(&fixed).expect("verifies");
    assert!(report.damage.is_some());
    let cap = Capture::parse(&fixed).expect("parse");
    assert!(cap.region(0).is_some());
}

#[test]
fn garbage_after_trailer_is_reported() {
    let mut data = common::sample();
    let len = data.len() as u64;
    data.extend_from_slice(b"junk");
    let e = Capture::parse(&data).expect_err("garbage");
    assert!(
        matches!(e, FormatError::TrailingGarbage { end, .. } if end == len),
        "{e}"
    );
    assert!(verify(&data).is_err());
}

#[test]
fn text_mode_mangling_is_named() {
    let mut data = common::sample();
    data.remove(4); // CR LF -> LF, as a text-mode transfer does
    let e = Capture::parse(&data).expect_err("mangled");
    assert!(e.to_string().contains("text-mode"), "{e}");
}

#[test]
fn not_a_capture() {
    for junk in [
        &b""[..],
        b"hello world, this is not a capture at all",
        b"\x89KR",
    ] {
        let e = Capture::parse(junk).expect_err("junk");
        assert!(matches!(e, FormatError::NotKrr { .. }), "{e}");
    }
}

#[test]
fn chunk_past_its_region_is_inconsistent() {
    // A region declared smaller than the chunk written for it cannot be built by the writer,
    // so edit the region's size field in a finished file and fix its CRCs.
    let data = common::sample();
    let cap = Capture::parse(&data).expect("parse");
    assert!(cap.region(1).is_some());
    let w = CaptureWriter::new(
        Cursor::new(Vec::new()),
        common::UUID,
        WriterOptions::default(),
    );
    let mut w = w.expect("writer");
    w.dispatch(&common::dispatch()).expect("dispatch");
    w.region(&Region {
        region_id: 5,
        address: 0x1000,
        size: 100,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size: 64,
    })
    .expect("region");
    w.memory(5, MemoryState::Pre, 0, &[1u8; 64])
        .expect("first chunk");
    // The second chunk is missing: lengths do not add up.
    let bytes = w.finish().expect("finish").into_inner();
    let e = Capture::parse(&bytes).expect_err("missing chunk");
    assert!(
        matches!(e, FormatError::Inconsistent { ref what, .. } if what.contains("needs 2 memory chunks")),
        "{e}"
    );
}

#[test]
fn writer_refuses_misaligned_or_oversized_memory() {
    let mut w = CaptureWriter::new(
        Cursor::new(Vec::new()),
        common::UUID,
        WriterOptions::default(),
    )
    .expect("writer");
    w.region(&Region {
        region_id: 0,
        address: 0,
        size: 100,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size: 64,
    })
    .expect("region");
    assert!(w.memory(0, MemoryState::Pre, 10, &[0; 10]).is_err());
    assert!(w.memory(0, MemoryState::Pre, 64, &[0; 64]).is_err());
    assert!(w.memory(0, MemoryState::Pre, 0, &[0; 50]).is_err());
    assert!(w.memory(9, MemoryState::Pre, 0, &[0; 64]).is_err());
    w.memory(0, MemoryState::Pre, 64, &[0; 36])
        .expect("tail chunk ok");
}
