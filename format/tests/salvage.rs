//! Salvage goes through the parser's rules: whatever it reports as salvaged verifies, and what
//! refers to a dropped region is dropped with it.

mod common;

use std::io::Cursor;

use kreplay_format::layout::{FileHeader, STATE_RECORDING};
use kreplay_format::*;

/// An unfinished capture (header RECORDING, no index) whose last region holds a module global
/// and a pointer slot, written after the region's chunks as the recorder does.
fn unfinished_with_global() -> (Vec<u8>, u64) {
    let mut w = common::writer_with_dispatch();
    for id in 0..2u32 {
        w.region(&Region {
            region_id: id,
            address: 0x7f00_0000_0000 + id as u64 * 0x1000,
            size: 4096,
            kind: MemoryKind::Device,
            role: RegionRole::Argument,
            chunk_size: 1024,
        })
        .expect("region");
        let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7 + id) as u8).collect();
        w.memory(id, MemoryState::Pre, 0, &bytes).expect("memory");
    }
    let region1_end = w.position();
    w.module_global(&ModuleGlobal {
        module_id: 1,
        name: "lut".into(),
        region_id: 1,
    })
    .expect("global");
    w.pointer_slots(&PointerSlots {
        slots: vec![(0, 8), (1, 16)],
    })
    .expect("slots");
    let full = w.finish().expect("finish").into_inner();
    let cap = Capture::parse(&full).expect("parse");
    let mut bytes = full[..cap.header.index_offset as usize].to_vec();
    let header = FileHeader {
        state: STATE_RECORDING,
        index_offset: 0,
        ..cap.header
    };
    bytes[..64].copy_from_slice(&header.encode());
    (bytes, region1_end)
}

#[test]
fn a_global_and_slots_in_a_dropped_region_are_dropped_with_it() {
    let (bytes, _) = unfinished_with_global();
    let cap_full = salvage_verified(&bytes).expect("whole file salvages").0;
    let cap = Capture::parse(&cap_full).expect("parse");
    assert_eq!(cap.globals.len(), 1);
    assert_eq!(cap.pointer_slots, vec![(0, 8), (1, 16)]);

    // Cut one of region 1's chunks out of the middle of the log (a hole, as a lost block
    // makes): salvage keeps the events after it but drops region 1 and what lives in it.
    let scan_events = scan(&bytes).expect("scan").intact;
    let chunk_ev = scan_events
        .iter()
        .filter(|e| e.frame.kind == EventKind::MemoryChunk as u16)
        .nth(5)
        .expect("a region-1 chunk");
    let start = chunk_ev.offset as usize;
    let end = start + 24 + chunk_ev.frame.payload_len as usize;
    let mut holed = bytes[..start].to_vec();
    holed.extend_from_slice(&bytes[end..]);
    let (out, report) = salvage_verified(&holed).expect("salvage with a hole");
    assert_eq!(report.dropped_regions, vec![1]);
    let cap = Capture::parse(&out).expect("parse");
    assert!(cap.region(1).is_none());
    assert!(
        cap.globals.is_empty(),
        "the global of a dropped region survived"
    );
    assert_eq!(cap.pointer_slots, vec![(0, 8)]);
}

#[test]
fn every_cut_either_salvages_to_a_verified_capture_or_fails() {
    let (bytes, _) = unfinished_with_global();
    let mut salvaged = 0;
    for cut in 64..=bytes.len() {
        match salvage(&bytes[..cut], Cursor::new(Vec::new())) {
            Ok((out, report)) => {
                let out = out.into_inner();
                verify(&out).unwrap_or_else(|e| panic!("cut {cut}: salvage said ok but {e}"));
                let cap = Capture::parse(&out).expect("parse");
                for g in &cap.globals {
                    assert!(cap.region(g.region_id).is_some(), "cut {cut}");
                }
                assert!(report.kept_events <= report.intact_events + 1);
                salvaged += 1;
            }
            Err(e) => {
                // Nothing replayable: no dispatch yet.
                assert!(e.to_string().contains("no dispatch"), "cut {cut}: {e}");
            }
        }
    }
    assert!(salvaged > 100, "{salvaged}");
}

#[test]
fn no_dispatch_means_salvage_fails() {
    let (bytes, _) = unfinished_with_global();
    let cap = scan(&bytes).expect("scan");
    let module_end = cap.intact[0].offset + 24 + cap.intact[0].frame.payload_len;
    let e =
        salvage(&bytes[..module_end as usize], Cursor::new(Vec::new())).expect_err("only a module");
    assert!(e.to_string().contains("no dispatch"), "{e}");
}

#[test]
fn timing_conditions_round_trip_and_survive_salvage() {
    let t = TimingConditions {
        settle_sweeps: 18,
        clocks_steady: true,
        l2_empty: true,
        skipped: None,
    };
    let mut w = common::writer_with_dispatch();
    w.timing_conditions(&t).expect("timing");
    let bytes = w.finish().expect("finish").into_inner();
    let cap = Capture::parse(&bytes).expect("parse");
    assert_eq!(cap.timing.as_ref(), Some(&t));
    // A capture without the event (older recorders) reads as unknown conditions.
    let plain = common::writer_with_dispatch()
        .finish()
        .expect("finish")
        .into_inner();
    assert!(Capture::parse(&plain).expect("parse").timing.is_none());
    // Cut short after the event: salvage keeps it.
    let cut = &bytes[..bytes.len() - 40];
    let mut out = std::io::Cursor::new(Vec::new());
    salvage(cut, &mut out).expect("salvage");
    let saved = out.into_inner();
    assert_eq!(Capture::parse(&saved).expect("parse").timing, Some(t));
}

/// The output a capture claims for each chunk of each region, as the reader exposes it: the
/// post-dispatch chunk where the kernel changed the chunk, the input elsewhere; `None` where
/// the capture says its output is unknown.
fn claimed_output(cap: &Capture<'_>, region_id: u32) -> Vec<(u64, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    for pre in cap.chunks(region_id, MemoryState::Pre) {
        let post = cap
            .chunks(region_id, MemoryState::Post)
            .find(|c| c.offset == pre.offset);
        let src = post.unwrap_or(pre);
        if !cap.recorded_output(src) {
            out.push((pre.offset, None));
            continue;
        }
        let mut b = vec![0u8; src.raw_len as usize];
        cap.read_chunk_into(src, &mut b).expect("chunk");
        out.push((pre.offset, Some(b)));
    }
    out
}

#[test]
fn no_cut_of_a_capture_salvages_to_a_wrong_recorded_output() {
    let full = common::sample();
    let original = Capture::parse(&full).expect("parse");
    let truth: Vec<_> = (0..2).map(|r| claimed_output(&original, r)).collect();
    assert!(truth.iter().flatten().all(|(_, b)| b.is_some()));
    let bytes = common::unfinished_bytes(1024);
    let mut partial = 0;
    for cut in 64..=bytes.len() {
        let Ok((out, _)) = salvage(&bytes[..cut], Cursor::new(Vec::new())) else {
            continue;
        };
        let out = out.into_inner();
        let cap = Capture::parse(&out).expect("parse");
        for r in &cap.regions {
            for (offset, claimed) in claimed_output(&cap, r.region_id) {
                let Some(claimed) = claimed else {
                    partial += 1;
                    continue;
                };
                let (_, expected) = truth[r.region_id as usize]
                    .iter()
                    .find(|t| t.0 == offset)
                    .expect("slot");
                assert!(
                    Some(&claimed) == expected.as_ref(),
                    "cut at {cut}: region {} chunk at {offset} claims an output the kernel did not produce",
                    r.region_id
                );
            }
        }
    }
    assert!(partial > 0, "no cut lost any output");
}

/// The sample, complete, with four bytes of region 0's first chunk flipped.
fn sample_with_damaged_x() -> Vec<u8> {
    let mut bytes = common::sample();
    let ev = scan(&bytes)
        .expect("scan")
        .intact
        .into_iter()
        .find(|e| e.frame.kind == EventKind::MemoryChunk as u16)
        .expect("first chunk");
    let at = ev.offset as usize + 24 + 32 + 8;
    for b in &mut bytes[at..at + 4] {
        *b ^= 0x5a;
    }
    bytes
}

#[test]
fn one_damaged_chunk_loses_only_its_region() {
    let (out, report) = salvage_verified(&sample_with_damaged_x()).expect("salvage");
    assert_eq!(report.dropped_regions, vec![0]);
    let cap = Capture::parse(&out).expect("parse");
    assert!(cap.region(0).is_none());
    // Region 1 and its recorded output came through the damage before it.
    assert!(cap.region(1).is_some(), "region 1 was lost with region 0");
    let whole = common::sample();
    let original = Capture::parse(&whole).expect("parse");
    assert_eq!(claimed_output(&cap, 1), claimed_output(&original, 1));
    assert_eq!(cap.reference(), Reference::Recorded);
    assert_eq!(cap.annotations.len(), 1, "the annotation after the damage");
}

#[test]
fn an_argument_into_a_dropped_region_blocks_replay() {
    let (out, report) = salvage_verified(&sample_with_damaged_x()).expect("salvage");
    let cap = Capture::parse(&out).expect("parse");
    let blockers = replay_blockers(&cap);
    assert_eq!(blockers.len(), 1, "{blockers:?}");
    assert!(blockers[0].contains("byte 8"), "{blockers:?}");
    assert!(blockers[0].contains("region 0"), "{blockers:?}");
    assert_eq!(report.replay_blockers, blockers);
    // Intact captures and salvaged ones that lost nothing an argument needs are replayable.
    let whole = common::sample();
    assert!(replay_blockers(&Capture::parse(&whole).expect("parse")).is_empty());
    let (cut, _) = salvage_verified(&common::unfinished_bytes(1024)).expect("salvage");
    assert!(replay_blockers(&Capture::parse(&cut).expect("parse")).is_empty());
}

#[test]
fn lost_output_is_marked_in_a_critical_event_of_format_1_1() {
    let bytes = common::unfinished_bytes(1024);
    let (out, report) = salvage_verified(&bytes).expect("salvage");
    let cap = Capture::parse(&out).expect("parse");
    // Nothing after the last event is known: the recorder may have been about to write more
    // output. y's post chunks survived and are the recorded output; x has none, so each of
    // its chunks gets a zero post chunk that is not.
    assert_eq!(cap.reference(), Reference::Partial);
    assert_eq!(report.unknown_output_chunks, 2);
    let y: Vec<_> = cap.chunks(1, MemoryState::Post).collect();
    assert_eq!(y.len(), 2);
    assert!(y.iter().all(|c| cap.recorded_output(c)));
    let x: Vec<_> = cap.chunks(0, MemoryState::Post).collect();
    assert_eq!(x.len(), 2);
    assert!(x
        .iter()
        .all(|c| !cap.recorded_output(c) && c.encoding == ChunkEncoding::Zero));
    assert_eq!(cap.unknown_output_bytes(0), 2048);
    assert_eq!(cap.unknown_output_bytes(1), 0);
    assert_eq!(cap.header.minor, 1);
    let ev = scan(&out)
        .expect("scan")
        .intact
        .into_iter()
        .find(|e| e.frame.kind == EventKind::Salvage as u16)
        .expect("a salvage event");
    assert_ne!(
        ev.frame.flags & layout::FLAG_CRITICAL,
        0,
        "a reader that does not know it must refuse the file"
    );
    // A capture that uses nothing of 1.1 is still written as 1.0 (the golden files).
    let plain = Capture::parse(&common::sample()).expect("parse").header;
    assert_eq!(plain.minor, 0);
}

#[test]
fn a_salvage_event_may_only_name_zero_output_chunks() {
    // Region 1's post chunk at 0 holds real bytes: marking it unknown is refused.
    let full = common::sample();
    let cap = Capture::parse(&full).expect("parse");
    let mut w = CaptureWriter::new(
        Cursor::new(Vec::new()),
        common::UUID,
        WriterOptions::default(),
    )
    .expect("writer");
    pack::write_head(&mut w, &cap).expect("head");
    for r in &cap.regions {
        w.region(r).expect("region");
        let pre = cap.read_region(r.region_id).expect("pre");
        w.memory(r.region_id, MemoryState::Pre, 0, &pre)
            .expect("pre");
    }
    let mut post = vec![0u8; 1024];
    let c = cap.chunks(1, MemoryState::Post).next().expect("post");
    cap.read_chunk_into(c, &mut post).expect("post");
    w.memory(1, MemoryState::Post, 0, &post).expect("post");
    w.salvage_record(&SalvageRecord {
        unknown_output: vec![(1, 0)],
        ..SalvageRecord::default()
    })
    .expect("record");
    let bytes = w.finish().expect("finish").into_inner();
    let e = Capture::parse(&bytes).expect_err("a real output marked unknown");
    assert!(e.to_string().contains("zero"), "{e}");
}

#[test]
fn salvaging_a_salvaged_capture_keeps_what_the_first_salvage_lost() {
    let (once, _) = salvage_verified(&common::unfinished_bytes(1024)).expect("salvage");
    assert_eq!(
        Capture::parse(&once)
            .expect("parse")
            .unknown_output_bytes(0),
        2048
    );
    // Damage the annotation (no chunk is lost this time).
    let mut damaged = once.clone();
    let ev = scan(&damaged)
        .expect("scan")
        .intact
        .into_iter()
        .find(|e| e.frame.kind == EventKind::Annotation as u16)
        .expect("annotation");
    damaged[ev.offset as usize + 24 + 2] ^= 0x01;
    let (twice, report) = salvage_verified(&damaged).expect("salvage again");
    assert_eq!(
        report.lost_events,
        vec![(ev.offset, EventKind::Annotation as u16)]
    );
    assert_eq!(report.unknown_output_chunks, 0, "no output lost this time");
    let cap = Capture::parse(&twice).expect("parse");
    assert_eq!(cap.reference(), Reference::Partial);
    assert_eq!(
        cap.unknown_output_bytes(0),
        2048,
        "the first salvage's loss was forgotten"
    );
    assert_eq!(cap.unknown_output_bytes(1), 0);
    assert!(cap.annotations.is_empty());
    // The first salvage's cut and the second's damaged event are both still told.
    let first = Capture::parse(&once).expect("parse");
    let first = first.salvage.as_ref().expect("first record");
    let record = cap.salvage.as_ref().expect("record");
    assert!(first.lost_from.is_some());
    assert_eq!(record.lost_from, first.lost_from);
    assert!(record
        .lost_events
        .contains(&(ev.offset, EventKind::Annotation as u16)));
}

#[test]
fn no_flipped_byte_salvages_to_a_wrong_recorded_output() {
    let full = common::sample();
    let original = Capture::parse(&full).expect("parse");
    let truth: Vec<_> = (0..2).map(|r| claimed_output(&original, r)).collect();
    let mut salvaged = 0;
    // Every byte after the header, one at a time.
    for at in 64..full.len() {
        let mut bytes = full.clone();
        bytes[at] ^= 0x10;
        let Ok((out, _)) = salvage(&bytes, Cursor::new(Vec::new())) else {
            continue;
        };
        let out = out.into_inner();
        verify(&out).unwrap_or_else(|e| panic!("flip at {at}: salvage said ok but {e}"));
        let cap = Capture::parse(&out).expect("parse");
        salvaged += 1;
        for r in &cap.regions {
            for (offset, claimed) in claimed_output(&cap, r.region_id) {
                let Some(claimed) = claimed else { continue };
                let expected = truth[r.region_id as usize]
                    .iter()
                    .find(|t| t.0 == offset)
                    .and_then(|t| t.1.as_ref());
                assert!(
                    Some(&claimed) == expected,
                    "flip at {at}: region {} chunk at {offset} claims an output the kernel did not produce",
                    r.region_id
                );
            }
        }
    }
    assert!(salvaged > full.len() / 2, "{salvaged} of {}", full.len());
}
