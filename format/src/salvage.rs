//! Salvage: rewrite the intact prefix of a damaged or incomplete log as a complete one.
//!
//! Events go through the same rules as `Capture::parse` ([`CaptureBuilder`]): an event that
//! breaks one is dropped, regions whose memory did not all survive are dropped together with
//! everything that refers to them (module globals living in them, pointer slots inside them),
//! and the result is checked by `verify` before salvage says it succeeded.

use std::collections::HashSet;
use std::io::{Cursor, Seek, Write};

use crate::error::{FormatError, Result};
use crate::events::{EventKind, PointerSlots};
use crate::layout::*;
use crate::reader::{scan, verify};
use crate::rules::{payload_of, CaptureBuilder, EventRef};
use crate::writer::{CaptureWriter, WriterOptions};

/// What salvage kept and dropped.
#[derive(Debug, Clone, Default)]
pub struct SalvageReport {
    pub intact_events: u64,
    pub kept_events: u64,
    /// Regions dropped because not all their chunks survived.
    pub dropped_regions: Vec<u32>,
    /// Intact events dropped because they broke a rule of the format (offset, why).
    pub dropped_events: Vec<(u64, String)>,
    /// Why the original log stopped being readable.
    pub damage: Option<String>,
}

/// Copies every intact event of `data` that the format's rules accept into `out`, drops
/// regions whose memory did not all survive and what refers to them, finishes `out` as a
/// complete log and checks it with `verify`. Fails (having written something unusable to
/// `out`, which the caller discards) when nothing replayable survives.
pub fn salvage<W: Write + Seek>(data: &[u8], out: W) -> Result<(W, SalvageReport)> {
    let report = scan(data)?;
    let mut rules = CaptureBuilder::new(data, report.header);
    let mut accepted: Vec<(u64, Frame, EventRef)> = Vec::new();
    let mut dropped_events = Vec::new();
    for ev in &report.intact {
        if ev.frame.kind == EventKind::Index as u16 || ev.frame.kind == EventKind::End as u16 {
            continue;
        }
        match rules.add(ev.offset, &ev.frame) {
            Ok(r) => accepted.push((ev.offset, ev.frame, r)),
            // A newer writer's event cannot be judged: keeping or dropping it could both
            // change what the capture means.
            Err(e @ FormatError::UnknownCritical { .. }) => return Err(e),
            Err(e) => dropped_events.push((ev.offset, e.to_string())),
        }
    }
    let dropped_regions = rules.incomplete_regions();
    let gone: HashSet<u32> = dropped_regions.iter().copied().collect();
    rules.drop_regions(&gone);
    rules.check_complete(report.intact_until)?;

    let mut w = CaptureWriter::new(out, report.header.uuid, WriterOptions::default())?;
    let mut kept = 0u64;
    let mut slots_written = false;
    for (off, frame, r) in &accepted {
        match r {
            EventRef::Region(id) | EventRef::Chunk(id) | EventRef::Global(id)
                if gone.contains(id) =>
            {
                continue
            }
            EventRef::Textures(ids) if ids.iter().any(|id| gone.contains(id)) => {
                dropped_events.push((
                    *off,
                    "texture and surface objects whose array data was lost (the dispatch cannot be replayed faithfully without them)".into(),
                ));
                continue;
            }
            EventRef::PointerSlots => {
                // The slots that survived, in one event where the first one was.
                if !slots_written && !rules.pointer_slots.is_empty() {
                    w.pointer_slots(&PointerSlots {
                        slots: rules.pointer_slots.clone(),
                    })?;
                    kept += 1;
                }
                slots_written = true;
                continue;
            }
            _ => {}
        }
        w.write_raw_event(frame.kind, frame.flags, payload_of(data, *off, frame)?)?;
        kept += 1;
    }
    let out = w.finish()?;
    Ok((
        out,
        SalvageReport {
            intact_events: report.intact.len() as u64,
            kept_events: kept,
            dropped_regions,
            dropped_events,
            damage: report.stopped.map(|e| e.to_string()),
        },
    ))
}

/// `salvage` into memory, then `verify` the result: the bytes of a capture that verifies.
pub fn salvage_verified(data: &[u8]) -> Result<(Vec<u8>, SalvageReport)> {
    let (out, report) = salvage(data, Cursor::new(Vec::new()))?;
    let bytes = out.into_inner();
    verify(&bytes)?;
    Ok((bytes, report))
}
