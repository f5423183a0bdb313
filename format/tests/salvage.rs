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
