//! Captures by touched pages (REGION_EXTENTS, format 1.4): round trip, the writer's and the
//! reader's rules (each hostile file refused with its kind and byte offset), what a 1.3
//! reader does, salvage and pack.

mod common;

use std::io::Cursor;

use common::{extents_present, EXTENTS_PAGE as PAGE, EXTENTS_REGION_SIZE};
use kreplay_format::layout::{self, ChunkPrefix, FileHeader, FLAG_CRITICAL};
use kreplay_format::*;

type W = CaptureWriter<Cursor<Vec<u8>>>;

const CHUNK: u64 = 2 * PAGE;

fn region0() -> Region {
    Region {
        region_id: 0,
        address: 0x7f00_0000_0000,
        size: EXTENTS_REGION_SIZE,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size: CHUNK,
    }
}

fn extents(present: Vec<(u64, u64)>) -> RegionExtents {
    RegionExtents {
        region_id: 0,
        page_size: PAGE as u32,
        present,
    }
}

fn event_of(data: &[u8], kind: EventKind) -> reader::ScannedEvent {
    scan(data)
        .expect("scan")
        .intact
        .into_iter()
        .find(|e| e.frame.kind == kind as u16)
        .expect("the event")
}

#[test]
fn a_capture_by_touched_pages_round_trips_and_states_1_4() {
    let data = common::sample_extents();
    let cap = Capture::parse(&data).expect("parse");
    assert_eq!(cap.header.minor, layout::EXTENTS_MINOR);
    assert!(cap.has_extents());
    assert_eq!(
        cap.extents(0).map(|e| e.present.clone()),
        Some(extents_present())
    );
    assert_eq!(cap.extents(1), None);
    assert_eq!(cap.present_bytes(0), 2 * PAGE + 100);
    assert_eq!(cap.present_bytes(1), 1024);
    // The wholly absent chunk (offset 8192) is not stored.
    let pre: Vec<u64> = cap.chunks(0, MemoryState::Pre).map(|c| c.offset).collect();
    assert_eq!(pre, vec![0, 2 * CHUNK]);
    let post: Vec<u64> = cap.chunks(0, MemoryState::Post).map(|c| c.offset).collect();
    assert_eq!(post, vec![2 * CHUNK]);
    assert_eq!(
        cap.read_region(0).expect("region 0"),
        common::extents_region0()
    );
    verify(&data).expect("verifies");
    // The event is critical: a reader that does not know it refuses the file.
    assert_ne!(
        event_of(&data, EventKind::RegionExtents).frame.flags & FLAG_CRITICAL,
        0
    );
    // Writers that do not use extents still write 1.0 files.
    assert_eq!(
        Capture::parse(&common::sample())
            .expect("parse")
            .header
            .minor,
        0
    );
    assert!(!Capture::parse(&common::sample())
        .expect("parse")
        .has_extents());
}

/// A writer with the sample dispatch and region 0 declared.
fn with_region0() -> W {
    let mut w = common::writer_with_dispatch();
    w.region(&region0()).expect("region");
    w
}

#[test]
fn the_writer_refuses_what_the_rules_refuse() {
    let refused = |w: &mut W, e: RegionExtents, says: &str| {
        let err = w.region_extents(&e).expect_err("refused");
        assert_eq!(err.kind(), "limit", "{err}");
        assert!(err.to_string().contains(says), "{err}");
    };
    let mut w = with_region0();
    refused(&mut w, extents(vec![(4 * PAGE, 2 * PAGE)]), "outside");
    let mut bad_page = extents(vec![]);
    bad_page.page_size = 3;
    refused(&mut w, bad_page, "page size");
    let mut undeclared = extents(vec![]);
    undeclared.region_id = 9;
    refused(&mut w, undeclared, "undeclared region 9");
    w.region_extents(&extents(extents_present()))
        .expect("valid");
    refused(&mut w, extents(extents_present()), "already");
    // Absent bytes must be zero: the writer does not store data it is told is absent.
    let mut pre = common::extents_region0();
    pre[0] = 1;
    let err = w.memory(0, MemoryState::Pre, 0, &pre).expect_err("refused");
    assert!(err.to_string().contains("absent range [0, 4096)"), "{err}");
    // Extents come before the chunks.
    let mut w = with_region0();
    w.memory(0, MemoryState::Pre, 0, &common::extents_region0())
        .expect("whole region");
    refused(
        &mut w,
        extents(extents_present()),
        "extents come before them",
    );
}

/// A capture with region 0 (and `region` instead when given), then `events` as raw frames;
/// returns the file and the offset of the event `events` marks with `mark`.
fn crafted(region: Option<Region>, events: impl FnOnce(&mut W, &mut u64)) -> (Vec<u8>, u64) {
    let mut w = common::writer_with_dispatch();
    w.region(&region.unwrap_or_else(region0)).expect("region");
    let mut mark = 0;
    events(&mut w, &mut mark);
    (w.finish().expect("finish").into_inner(), mark)
}

fn raw_extents(w: &mut W, e: &RegionExtents) {
    let bytes = codec::encode(e, "region extents").expect("encode");
    w.write_raw_event(EventKind::RegionExtents as u16, FLAG_CRITICAL, &bytes)
        .expect("raw extents");
}

/// A zero chunk of region 0 at `offset`, written as a raw event.
fn raw_chunk(w: &mut W, state: MemoryState, offset: u64) {
    let raw_len = CHUNK.min(EXTENTS_REGION_SIZE - offset);
    let p = ChunkPrefix {
        region_id: 0,
        state,
        encoding: ChunkEncoding::Zero,
        offset,
        raw_len,
        raw_crc: crc32fast::hash(&vec![0u8; raw_len as usize]),
    };
    w.write_raw_event(EventKind::MemoryChunk as u16, FLAG_CRITICAL, &p.encode())
        .expect("raw chunk");
}

/// Both stored chunks of the sample's extents.
fn both_chunks(w: &mut W) {
    raw_chunk(w, MemoryState::Pre, 0);
    raw_chunk(w, MemoryState::Pre, 2 * CHUNK);
}

fn refused_at(file: &[u8], offset: u64, says: &str) {
    let e = Capture::parse(file).expect_err("refused");
    assert_eq!(e.kind(), "inconsistent", "{e}");
    assert_eq!(e.offset(), Some(offset), "{e}");
    assert!(e.to_string().contains(says), "{e}");
    assert!(verify(file).is_err());
}

/// Extents `e` as a raw event marked, then both stored chunks.
fn bad_extents(e: RegionExtents, says: &str) {
    let (file, at) = crafted(None, |w, mark| {
        *mark = w.position();
        raw_extents(w, &e);
        both_chunks(w);
    });
    refused_at(&file, at, says);
}

#[test]
fn hostile_extents_are_refused_with_their_kind_and_offset() {
    // The crafted files are sound otherwise.
    let (good, _) = crafted(None, |w, _| {
        raw_extents(w, &extents(extents_present()));
        both_chunks(w);
    });
    verify(&good).expect("the crafted baseline verifies");
    bad_extents(extents(vec![(4 * PAGE, 2 * PAGE)]), "outside the region");
    bad_extents(extents(vec![(0, 2 * PAGE), (PAGE, 2 * PAGE)]), "overlaps");
    bad_extents(extents(vec![(0, PAGE), (PAGE, PAGE)]), "touches");
    bad_extents(extents(vec![(100, PAGE)]), "not aligned");
    bad_extents(extents(vec![(PAGE, 100)]), "not aligned");
    bad_extents(extents(vec![(PAGE, 0)]), "empty");
    for page_size in [0, 3, 4 * PAGE as u32] {
        let mut e = extents(extents_present());
        e.page_size = page_size;
        bad_extents(e, "page size");
    }
}

#[test]
fn extents_come_once_after_their_region_and_before_its_chunks() {
    let (file, at) = crafted(None, |w, mark| {
        raw_extents(w, &extents(extents_present()));
        *mark = w.position();
        raw_extents(w, &extents(extents_present()));
        both_chunks(w);
    });
    refused_at(&file, at, "a second extents event for region 0");
    let (file, at) = crafted(None, |w, mark| {
        raw_chunk(w, MemoryState::Pre, 0);
        *mark = w.position();
        raw_extents(w, &extents(extents_present()));
        raw_chunk(w, MemoryState::Pre, 2 * CHUNK);
    });
    refused_at(&file, at, "after its first memory chunk");
    let (file, at) = crafted(None, |w, mark| {
        *mark = w.position();
        let mut e = extents(vec![]);
        e.region_id = 7;
        raw_extents(w, &e);
    });
    refused_at(&file, at, "before (or without) its region");
    let array = Region {
        kind: MemoryKind::CudaArray,
        address: 0,
        ..region0()
    };
    let (file, at) = crafted(Some(array), |w, mark| {
        *mark = w.position();
        raw_extents(w, &extents(extents_present()));
        both_chunks(w);
    });
    refused_at(&file, at, "CUDA array");
}

#[test]
fn stored_chunks_are_exactly_those_that_hold_a_present_byte() {
    // A chunk for the wholly absent chunk 1.
    let (file, at) = crafted(None, |w, mark| {
        raw_extents(w, &extents(extents_present()));
        both_chunks(w);
        *mark = w.position();
        raw_chunk(w, MemoryState::Pre, CHUNK);
    });
    refused_at(&file, at, "holds no present byte");
    // A post chunk there, likewise.
    let (file, at) = crafted(None, |w, mark| {
        raw_extents(w, &extents(extents_present()));
        both_chunks(w);
        *mark = w.position();
        raw_chunk(w, MemoryState::Post, CHUNK);
    });
    refused_at(&file, at, "holds no present byte");
    // The chunk holding the last present page is missing: the index names it.
    let (file, _) = crafted(None, |w, _| {
        raw_extents(w, &extents(extents_present()));
        raw_chunk(w, MemoryState::Pre, 0);
    });
    let index = FileHeader::decode(&file).expect("header").index_offset;
    refused_at(
        &file,
        index,
        "region 0 needs 2 memory chunks but the capture holds 1",
    );
    // No present byte at all: no chunk is needed.
    let (file, _) = crafted(None, |w, _| raw_extents(w, &extents(vec![])));
    let cap = Capture::parse(&file).expect("an empty touched set is a capture");
    assert_eq!(cap.present_bytes(0), 0);
    assert!(cap.read_region(0).expect("reads").iter().all(|&b| b == 0));
}

/// `data` with its header stating minor `minor` (header CRC recomputed).
fn stating_minor(mut data: Vec<u8>, minor: u16) -> Vec<u8> {
    let mut h = FileHeader::decode(&data).expect("header");
    h.minor = minor;
    data[..64].copy_from_slice(&h.encode());
    data
}

#[test]
fn extents_need_a_file_that_states_1_4() {
    let data = common::sample_extents();
    let at = event_of(&data, EventKind::RegionExtents).offset;
    refused_at(
        &stating_minor(data, layout::RANGE_MINOR),
        at,
        "states format 1.3 (it needs 1.4)",
    );
}

#[test]
fn a_reader_of_1_3_refuses_a_capture_by_touched_pages_naming_both_versions() {
    // What a 1.3 reader sees: a critical kind it does not know in a newer-minor file. Give
    // the REGION_EXTENTS event a kind this reader does not know either, and it answers so.
    let mut data = common::sample_extents();
    let found_minor = Capture::parse(&data).expect("parse").header.minor;
    let ev = event_of(&data, EventKind::RegionExtents);
    let at = ev.offset as usize;
    data[at..at + 2].copy_from_slice(&0x7ff0u16.to_le_bytes());
    let c = crc32fast::hash(&data[at..at + 20]);
    data[at + 20..at + 24].copy_from_slice(&c.to_le_bytes());
    // The index names the kind too: a reader refuses at the index or at the event.
    let e = Capture::parse(&data).expect_err("refused");
    assert!(
        matches!(
            e,
            FormatError::UnknownCritical { .. } | FormatError::Inconsistent { .. }
        ),
        "{e}"
    );
    let old = FormatError::UnknownCritical {
        offset: ev.offset,
        kind: EventKind::RegionExtents as u16,
        found_major: 1,
        found_minor,
        supported_major: 1,
        supported_minor: layout::RANGE_MINOR,
    };
    let msg = old.to_string();
    assert!(
        msg.contains("format 1.4") && msg.contains("reads 1.3"),
        "{msg}"
    );
}

#[test]
fn salvage_drops_a_region_whose_extents_were_damaged() {
    let mut data = common::sample_extents();
    let ev = event_of(&data, EventKind::RegionExtents);
    // Damage the payload only: the frame still says where the next event starts.
    data[ev.offset as usize + 24 + 4] ^= 0x40;
    let (bytes, report) = salvage_verified(&data).expect("salvaged");
    assert_eq!(report.dropped_regions, vec![0]);
    let cap = Capture::parse(&bytes).expect("parse");
    assert!(cap.region(0).is_none());
    assert_eq!(cap.read_region(1).expect("region 1"), vec![5u8; 1024]);
    assert!(!cap.has_extents());
}

#[test]
fn salvage_keeps_the_extents_of_the_regions_it_keeps() {
    // A recorder that died before the index: every event survives, the output is unknown.
    let full = common::sample_extents();
    let cap = Capture::parse(&full).expect("parse");
    let mut cut = full[..cap.header.index_offset as usize].to_vec();
    let header = FileHeader {
        state: layout::STATE_RECORDING,
        index_offset: 0,
        ..cap.header
    };
    cut[..64].copy_from_slice(&header.encode());
    let (bytes, report) = salvage_verified(&cut).expect("salvaged");
    assert!(report.dropped_regions.is_empty(), "{report:?}");
    let out = Capture::parse(&bytes).expect("parse");
    assert_eq!(out.header.minor, layout::EXTENTS_MINOR);
    assert_eq!(out.extents(0), cap.extents(0));
    assert_eq!(
        out.read_region(0).expect("region 0"),
        common::extents_region0()
    );
    // Unknown output is marked only where the region is stored: not the absent chunk.
    let unknown = &out.salvage.as_ref().expect("record").unknown_output;
    assert!(unknown.contains(&(0, 0)), "{unknown:?}");
    assert!(!unknown.contains(&(0, CHUNK)), "{unknown:?}");
}

fn packed(data: &[u8], redact: bool) -> Vec<u8> {
    let cap = Capture::parse(data).expect("parse");
    let opts = PackOptions {
        level: 3,
        drop_post: false,
        redact,
        param_types: Vec::new(),
        step_param_types: Vec::new(),
    };
    let (out, _) = pack(&cap, Cursor::new(Vec::new()), [7; 16], opts).expect("pack");
    out.into_inner()
}

#[test]
fn pack_keeps_the_extents_and_redaction_keeps_absent_bytes_zero() {
    let data = common::sample_extents();
    for redact in [false, true] {
        let bytes = packed(&data, redact);
        verify(&bytes).expect("verifies");
        let cap = Capture::parse(&bytes).expect("parse");
        assert_eq!(cap.header.minor, layout::EXTENTS_MINOR);
        assert_eq!(
            cap.extents(0).map(|e| e.present.clone()),
            Some(extents_present())
        );
        let pre: Vec<u64> = cap.chunks(0, MemoryState::Pre).map(|c| c.offset).collect();
        assert_eq!(pre, vec![0, 2 * CHUNK], "redact {redact}");
        let region = cap.read_region(0).expect("region 0");
        let present = &cap.extents(0).expect("extents").present;
        for (o, l) in extents::absent_ranges(present, 0, EXTENTS_REGION_SIZE) {
            let absent = &region[o as usize..(o + l) as usize];
            assert!(
                absent.iter().all(|&b| b == 0),
                "redact {redact}: [{o}, +{l})"
            );
        }
        if redact {
            assert_ne!(region, common::extents_region0(), "present bytes redacted");
        } else {
            assert_eq!(region, common::extents_region0());
        }
    }
}

#[test]
fn the_capture_by_touched_pages_is_in_the_parse_fuzz_corpus() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus/parse/extents-1.4.krr");
    if std::env::var_os("KREPLAY_BLESS").is_some() {
        std::fs::write(&path, common::sample_extents()).expect("write corpus file");
    }
    let on_disk = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (KREPLAY_BLESS=1 writes it)", path.display()));
    assert!(
        on_disk == common::sample_extents(),
        "{}: not the extents sample",
        path.display()
    );
}

#[test]
fn salvage_drops_a_region_whose_extents_the_rules_refuse() {
    let (file, _) = crafted(None, |w, _| {
        raw_extents(w, &extents(vec![(0, 2 * PAGE), (PAGE, 2 * PAGE)]));
        both_chunks(w);
    });
    let (bytes, report) = salvage_verified(&file).expect("salvaged");
    assert_eq!(report.dropped_regions, vec![0], "{report:?}");
    let cap = Capture::parse(&bytes).expect("parse");
    assert!(cap.region(0).is_none());
    // The dispatch's arguments point into the dropped region: it says so.
    assert!(!report.replay_blockers.is_empty());
}
