//! Salvage: rewrite what survives of a damaged or incomplete log as a complete one.
//!
//! The walk reads on past a damaged event when it knows where the next one starts: the frame
//! CRC holds (only the payload is damaged: its length is right), or the file is complete and
//! its index survived (it names every event's offset and kind). Otherwise, and at a cut, the
//! rest of the file is lost. One damaged chunk then loses only itself (and the region it
//! belongs to, when it is a pre-dispatch chunk).
//!
//! Events go through the same rules as `Capture::parse` ([`CaptureBuilder`]): an event that
//! breaks one is dropped, regions whose memory did not all survive are dropped together with
//! everything that refers to them (module globals living in them, pointer slots inside them),
//! and the result is checked by `verify` before salvage says it succeeded.
//!
//! Post-dispatch chunks exist only where the kernel changed memory, so a lost one would read
//! as "unchanged": the input passed off as the output. Unless salvage can account for every
//! lost chunk as a lost pre-dispatch chunk, every chunk without a surviving post chunk gets a
//! zero post chunk that the SALVAGE event marks as unknown output (`SalvageRecord`).

use std::collections::HashSet;
use std::io::{Cursor, Seek, Write};

use crate::error::{FormatError, Result};
use crate::events::{
    Dispatch, EventKind, IndexEntry, MemoryKind, ModuleGlobal, PointerSlots, Region, RegionRole,
    SalvageRecord,
};
use crate::extents;
use crate::layout::*;
use crate::reader::{verify, Capture, ScannedEvent};
use crate::rules::{
    check_payload_crc, decode_meta, payload_of, CaptureBuilder, EventRef, MetaBudget,
};
use crate::salvage_extents::regions_of_lost_extents;
use crate::salvage_range::{is_step_event, step_blockers};
use crate::steps::Step;
use crate::writer::{CaptureWriter, WriterOptions};

/// What salvage kept and dropped (serialized for Python's `kreplay.verify(salvage=...)`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SalvageReport {
    pub intact_events: u64,
    pub kept_events: u64,
    /// Regions dropped because not all their chunks survived.
    pub dropped_regions: Vec<u32>,
    /// Intact events dropped because they broke a rule of the format (offset, why).
    pub dropped_events: Vec<(u64, String)>,
    /// Why the original log stopped being readable (its first damage).
    pub damage: Option<String>,
    /// Damaged events skipped, the walk reading on after them: (offset, kind).
    pub lost_events: Vec<(u64, u16)>,
    /// Where the walk stopped for good (a cut, or damage it could not read past).
    pub lost_from: Option<u64>,
    /// Chunks whose output is unknown: zero post chunks the salvage record names.
    pub unknown_output_chunks: u64,
    /// Why the salvaged capture cannot be replayed (empty: it can).
    pub replay_blockers: Vec<String>,
}

/// What the resynchronising walk found.
struct Walk {
    header: FileHeader,
    intact: Vec<ScannedEvent>,
    lost: Vec<(u64, u16)>,
    lost_from: Option<u64>,
    damage: Option<FormatError>,
    /// Offset just past the last event read (where errors point).
    until: u64,
}

/// The events the index of a complete file names, with the INDEX and END events, by offset;
/// None when the header, the index frame or its payload is damaged or does not add up.
fn readable_index(data: &[u8], header: &FileHeader) -> Option<Vec<(u64, u16)>> {
    let len = data.len() as u64;
    let off = header.index_offset;
    if header.state != STATE_COMPLETE || off < HEADER_LEN as u64 || off >= len {
        return None;
    }
    let frame = Frame::decode(data, off).ok()?;
    if frame.kind != EventKind::Index as u16 {
        return None;
    }
    let mut budget = MetaBudget::for_file(len);
    let entries: Vec<IndexEntry> =
        decode_meta(data, off, &frame, EventKind::Index, &mut budget).ok()?;
    let mut events: Vec<(u64, u16)> = entries.iter().map(|e| (e.offset, e.kind)).collect();
    let increasing = events.windows(2).all(|w| w[0].0 < w[1].0);
    let inside = events.iter().all(|e| e.0 >= HEADER_LEN as u64 && e.0 < off);
    if !increasing || !inside {
        return None;
    }
    events.push((off, EventKind::Index as u16));
    let end = off
        .checked_add(FRAME_LEN as u64)?
        .checked_add(frame.payload_len)?;
    events.push((end, EventKind::End as u16));
    Some(events)
}

/// Walks the log from the first event, checking both CRCs of each, reading on past damage
/// where the next event's offset is known. Fails only on a bad file header.
fn walk(data: &[u8]) -> Result<Walk> {
    let header = FileHeader::decode(data)?;
    let index = readable_index(data, &header);
    let len = data.len() as u64;
    let mut w = Walk {
        header,
        intact: Vec::new(),
        lost: Vec::new(),
        lost_from: None,
        damage: None,
        until: HEADER_LEN as u64,
    };
    let mut pos = HEADER_LEN as u64;
    let mut reached_end = false;
    while pos < len {
        let frame = match Frame::decode(data, pos) {
            Ok(f) => f,
            Err(e) => {
                w.damage.get_or_insert(e);
                // Kind and length are not to be trusted: only the index knows what was here
                // and where the next event starts.
                let here = index
                    .as_ref()
                    .and_then(|ix| ix.binary_search_by_key(&pos, |e| e.0).ok().map(|i| (ix, i)));
                match here {
                    Some((ix, i)) => {
                        w.lost.push((pos, ix[i].1));
                        if ix[i].1 == EventKind::End as u16 {
                            reached_end = true;
                            break;
                        }
                        match ix.get(i + 1) {
                            Some(next) => pos = next.0,
                            None => break,
                        }
                        continue;
                    }
                    None => {
                        w.lost_from = Some(pos);
                        break;
                    }
                }
            }
        };
        let payload = match payload_of(data, pos, &frame) {
            Ok(p) => p,
            Err(e) => {
                w.damage.get_or_insert(e);
                w.lost_from = Some(pos);
                break;
            }
        };
        let what = EventKind::from_u16(frame.kind).map_or("unknown", |k| k.name());
        match check_payload_crc(payload, pos, &frame, what) {
            Ok(()) => w.intact.push(ScannedEvent { offset: pos, frame }),
            Err(e) => {
                // The frame CRC holds: its kind and length are right, only the payload is not.
                w.damage.get_or_insert(e);
                w.lost.push((pos, frame.kind));
            }
        }
        pos += FRAME_LEN as u64 + frame.payload_len;
        w.until = pos;
        if frame.kind == EventKind::End as u16 {
            reached_end = true;
            break;
        }
    }
    if !reached_end && w.lost_from.is_none() {
        // Cut at an event boundary: what would have followed is unknown.
        w.lost_from = Some(pos.min(len));
        w.damage.get_or_insert(FormatError::Truncated {
            offset: pos,
            what: "END event",
            needed: FRAME_LEN as u64,
            available: len.saturating_sub(pos),
        });
    }
    Ok(w)
}

/// Copies every surviving event of `data` that the format's rules accept into `out`, drops
/// regions whose memory did not all survive and what refers to them, marks output that may
/// have been lost as unknown, finishes `out` as a complete log. Fails (having written
/// something unusable to `out`, which the caller discards) when nothing replayable survives.
pub fn salvage<W: Write + Seek>(data: &[u8], out: W) -> Result<(W, SalvageReport)> {
    let walk = walk(data)?;
    let mut rules = CaptureBuilder::new(data, walk.header);
    let Judged {
        accepted,
        mut dropped_events,
        rejected_chunks_of,
        refused_steps,
        refused_extents,
    } = judge(data, &walk, &mut rules)?;
    forget_digests_if_steps_lost(&mut rules, &walk.lost, &refused_steps);
    let mut dropped_regions = rules.incomplete_regions();
    dropped_regions.extend(extents_lost_by(&walk, &accepted, &refused_extents, &rules));
    dropped_regions.sort_unstable();
    dropped_regions.dedup();
    let gone: HashSet<u32> = dropped_regions.iter().copied().collect();

    // Every lost chunk must be one of the missing pre-dispatch chunks for the post-dispatch
    // state to be whole; otherwise any chunk may have lost its output.
    let missing_pre = missing_pre_chunks(&rules);
    let lost_chunks = walk
        .lost
        .iter()
        .filter(|l| l.1 == EventKind::MemoryChunk as u16)
        .count() as u64;
    let ambiguous = rejected_chunks_of
        .iter()
        .any(|id| rules.regions.iter().any(|r| r.region_id == *id));
    let output_whole = walk.lost_from.is_none() && lost_chunks == missing_pre && !ambiguous;

    let dropped_decls: Vec<Region> = rules
        .regions
        .iter()
        .filter(|r| gone.contains(&r.region_id))
        .cloned()
        .collect();
    let had_textures = !rules.textures.is_empty();
    rules.drop_regions(&gone);
    let textures_dropped = had_textures && rules.textures.is_empty();
    rules.check_complete(walk.until)?;

    // Chunks of the kept regions with no surviving post chunk, when output may be lost.
    let placeholders = if output_whole {
        Vec::new()
    } else {
        chunks_without_output(&rules)
    };
    let previous = rules.salvage.take();
    // A step the rules refused is as gone as a damaged one: the record keeps it, so the
    // replay's blockers still name it.
    let mut lost_events = walk.lost.clone();
    lost_events.extend(refused_steps);
    lost_events.sort_unstable();
    let write_record = previous.is_some()
        || !lost_events.is_empty()
        || walk.lost_from.is_some()
        || !gone.is_empty()
        || textures_dropped
        || !placeholders.is_empty();
    let record = merged_record(
        previous.unwrap_or_default(),
        SalvageRecord {
            lost_from: walk.lost_from,
            lost_events,
            dropped_regions: dropped_decls,
            unknown_output: placeholders.iter().map(|p| (p.0, p.1)).collect(),
            textures_dropped,
        },
    );

    let mut w = CaptureWriter::new(out, walk.header.uuid, WriterOptions::default())?;
    let kept = write_kept(&mut w, data, &accepted, &rules, &gone, &mut dropped_events)?;
    for &(region_id, offset, n) in &placeholders {
        w.zeros(region_id, MemoryState::Post, offset, n)?;
    }
    if write_record {
        w.salvage_record(&record)?;
    }
    let replay_blockers = match &rules.dispatch {
        Some(d) if write_record => {
            all_blockers(d, &rules.steps, &rules.regions, &rules.globals, &record)
        }
        _ => Vec::new(),
    };
    let out = w.finish()?;
    Ok((
        out,
        SalvageReport {
            intact_events: walk.intact.len() as u64,
            kept_events: kept,
            dropped_regions,
            dropped_events,
            damage: walk.damage.map(|e| e.to_string()),
            lost_events: walk.lost,
            lost_from: walk.lost_from,
            unknown_output_chunks: placeholders.len() as u64,
            replay_blockers,
        },
    ))
}

/// Regions whose extents event was lost or refused (see `regions_of_lost_extents`).
fn extents_lost_by(
    walk: &Walk,
    accepted: &[(u64, Frame, EventRef)],
    refused: &[u64],
    rules: &CaptureBuilder<'_>,
) -> Vec<u32> {
    let lost: Vec<u64> = walk
        .lost
        .iter()
        .filter(|l| l.1 == EventKind::RegionExtents as u16)
        .map(|l| l.0)
        .chain(refused.iter().copied())
        .collect();
    // Nearly every salvage loses no extents event: no copy of the accepted events then.
    if lost.is_empty() {
        return Vec::new();
    }
    let accepted: Vec<(u64, EventRef)> = accepted.iter().map(|a| (a.0, a.2.clone())).collect();
    regions_of_lost_extents(&accepted, &lost, &|id| rules.extents.contains_key(&id))
}

/// Digests are per step: with a step lost (or refused) none of them names a step for sure.
fn forget_digests_if_steps_lost(
    rules: &mut CaptureBuilder<'_>,
    lost: &[(u64, u16)],
    refused_steps: &[(u64, u16)],
) {
    let gone = lost.iter().any(|l| is_step_event(l.1)) || !refused_steps.is_empty();
    if let Some(range) = rules.range.as_mut().filter(|_| gone) {
        range.digests.clear();
    }
}

/// The surviving events the format's rules accept, with why each other one was dropped.
struct Judged {
    accepted: Vec<(u64, Frame, EventRef)>,
    dropped_events: Vec<(u64, String)>,
    /// Regions named by intact chunks that broke a rule (a missing chunk may be one of them).
    rejected_chunks_of: Vec<u32>,
    /// Step events that broke a rule: (offset, kind).
    refused_steps: Vec<(u64, u16)>,
    /// Offsets of REGION_EXTENTS events that broke a rule.
    refused_extents: Vec<u64>,
}

/// Puts every intact event but the index and END through the rules.
fn judge(data: &[u8], walk: &Walk, rules: &mut CaptureBuilder<'_>) -> Result<Judged> {
    let mut accepted: Vec<(u64, Frame, EventRef)> = Vec::new();
    let mut dropped_events = Vec::new();
    let mut rejected_chunks_of: Vec<u32> = Vec::new();
    let mut refused_steps = Vec::new();
    let mut refused_extents = Vec::new();
    for ev in &walk.intact {
        if ev.frame.kind == EventKind::Index as u16 || ev.frame.kind == EventKind::End as u16 {
            continue;
        }
        match rules.add(ev.offset, &ev.frame) {
            Ok(r) => accepted.push((ev.offset, ev.frame, r)),
            // A newer writer's event cannot be judged: keeping or dropping it could both
            // change what the capture means.
            Err(e @ FormatError::UnknownCritical { .. }) => return Err(e),
            Err(e) => {
                if ev.frame.kind == EventKind::MemoryChunk as u16 {
                    if let Ok(p) = payload_of(data, ev.offset, &ev.frame)
                        .and_then(|p| ChunkPrefix::decode(p, ev.offset + FRAME_LEN as u64))
                    {
                        rejected_chunks_of.push(p.region_id);
                    }
                }
                if ev.frame.kind == EventKind::RegionExtents as u16 {
                    refused_extents.push(ev.offset);
                }
                if is_step_event(ev.frame.kind) {
                    refused_steps.push((ev.offset, ev.frame.kind));
                }
                dropped_events.push((ev.offset, e.to_string()));
            }
        }
    }
    Ok(Judged {
        accepted,
        dropped_events,
        rejected_chunks_of,
        refused_steps,
        refused_extents,
    })
}

/// Writes the accepted events that survive the dropped regions (`gone`), the surviving pointer
/// slots in one event; returns how many it wrote.
fn write_kept<W: Write + Seek>(
    w: &mut CaptureWriter<W>,
    data: &[u8],
    accepted: &[(u64, Frame, EventRef)],
    rules: &CaptureBuilder<'_>,
    gone: &HashSet<u32>,
    dropped_events: &mut Vec<(u64, String)>,
) -> Result<u64> {
    let mut kept = 0u64;
    let mut slots_written = false;
    for (off, frame, r) in accepted {
        match r {
            EventRef::Region(id)
            | EventRef::Extents(id)
            | EventRef::Chunk(id)
            | EventRef::Global(id)
                if gone.contains(id) =>
            {
                continue
            }
            EventRef::Region(id) => {
                // Through the writer, so it knows the region's shape for the zero chunks.
                if let Some(region) = rules.regions.iter().find(|r| r.region_id == *id) {
                    w.region(region)?;
                    kept += 1;
                }
                continue;
            }
            EventRef::Extents(id) => {
                // Through the writer, so its zero chunks leave the absent ones out.
                if let Some(e) = rules.extents.get(id) {
                    w.region_extents(e)?;
                    kept += 1;
                }
                continue;
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
            // Rewritten below, with what this salvage lost.
            EventRef::Salvage => continue,
            // Without the digests over dropped regions (`drop_regions` forgot them).
            EventRef::Range => {
                if let Some(range) = &rules.range {
                    w.range_info(range)?;
                    kept += 1;
                }
                continue;
            }
            _ => {}
        }
        w.write_raw_event(frame.kind, frame.flags, payload_of(data, *off, frame)?)?;
        kept += 1;
    }
    Ok(kept)
}

/// Pre-dispatch chunks the declared regions should have and do not.
fn missing_pre_chunks(rules: &CaptureBuilder<'_>) -> u64 {
    rules
        .regions
        .iter()
        .map(|r| {
            let have = rules
                .chunks
                .range(
                    (r.region_id, MemoryState::Pre, 0)..=(r.region_id, MemoryState::Pre, u64::MAX),
                )
                .count() as u64;
            extents::needed_pre_chunks(r, rules.extents.get(&r.region_id)).saturating_sub(have)
        })
        .sum()
}

/// (region, offset, length) of every chunk of the kept regions with no surviving post chunk:
/// where output may have been lost.
fn chunks_without_output(rules: &CaptureBuilder<'_>) -> Vec<(u32, u64, u64)> {
    let mut out = Vec::new();
    for r in &rules.regions {
        let present = rules.extents.get(&r.region_id).map(|e| &e.present);
        let mut offset = 0;
        while offset < r.size {
            let n = r.chunk_size.min(r.size - offset);
            let stored = present.is_none_or(|p| extents::holds_present(p, offset, n));
            if stored
                && !rules
                    .chunks
                    .contains_key(&(r.region_id, MemoryState::Post, offset))
            {
                out.push((r.region_id, offset, n));
            }
            offset += n;
        }
    }
    out
}

/// This salvage's losses added to those of an earlier salvage of the same capture (a salvage
/// of a salvaged file keeps the first one's losses, whose offsets are in the file it read, so
/// `info` still tells them).
fn merged_record(prev: SalvageRecord, now: SalvageRecord) -> SalvageRecord {
    let mut unknown = prev.unknown_output;
    unknown.extend(now.unknown_output);
    unknown.sort_unstable();
    unknown.dedup();
    let mut dropped = prev.dropped_regions;
    dropped.extend(now.dropped_regions);
    let mut lost_events = prev.lost_events;
    lost_events.extend(now.lost_events);
    SalvageRecord {
        lost_from: now.lost_from.or(prev.lost_from),
        lost_events,
        dropped_regions: dropped,
        unknown_output: unknown,
        textures_dropped: prev.textures_dropped || now.textures_dropped,
    }
}

/// `salvage` into memory, then `verify` the result: the bytes of a capture that verifies.
pub fn salvage_verified(data: &[u8]) -> Result<(Vec<u8>, SalvageReport)> {
    let (out, report) = salvage(data, Cursor::new(Vec::new()))?;
    let bytes = out.into_inner();
    verify(&bytes)?;
    Ok((bytes, report))
}

/// Why a salvaged capture cannot be replayed faithfully: argument words that point into
/// memory salvage lost, lost memory the kernel reaches otherwise (through pointers in captured
/// memory, module globals), module global memory whose variable's name was lost, texture
/// objects dropped. Empty for a capture salvage never
/// touched, and for one whose losses the replay does not need. No I/O: the parsed capture
/// holds all it takes.
pub fn replay_blockers(cap: &Capture<'_>) -> Vec<String> {
    let Some(s) = &cap.salvage else {
        return Vec::new();
    };
    all_blockers(&cap.dispatch, &cap.steps, &cap.regions, &cap.globals, s)
}

/// The dispatch's blockers and, for a range, its steps' (`salvage_range`).
fn all_blockers(
    d: &Dispatch,
    steps: &[Step],
    kept: &[Region],
    globals: &[ModuleGlobal],
    s: &SalvageRecord,
) -> Vec<String> {
    let mut out = blockers(d, kept, globals, s);
    out.extend(step_blockers(steps, kept, s, &mut |d| {
        argument_blockers(d, kept, s, &mut HashSet::new())
    }));
    out
}

/// Whether address `v` lies in region `r` (CUDA arrays have no address).
fn inside(r: &Region, v: u64) -> bool {
    r.kind != MemoryKind::CudaArray && v >= r.address && v - r.address < r.size.max(1)
}

/// The argument words of `d` that point into a region salvage dropped; the regions they
/// name are added to `named`.
fn argument_blockers(
    d: &Dispatch,
    kept: &[Region],
    s: &SalvageRecord,
    named: &mut HashSet<u32>,
) -> Vec<String> {
    let mut out = Vec::new();
    for &word in &d.pointer_words {
        let at = word as usize;
        let Some(bytes) = d.arg_bytes.get(at..at + 8) else {
            continue; // the rules refuse a pointer word outside the argument bytes
        };
        let mut b = [0u8; 8];
        b.copy_from_slice(bytes);
        let v = u64::from_le_bytes(b);
        if kept.iter().any(|r| inside(r, v)) {
            continue;
        }
        if let Some(r) = s.dropped_regions.iter().find(|r| inside(r, v)) {
            named.insert(r.region_id);
            out.push(format!(
                "the argument word at byte {word} holds {v:#x}, inside region {} ({} bytes at \
                 {:#x}), whose memory was lost",
                r.region_id, r.size, r.address
            ));
        }
    }
    out
}

fn blockers(
    d: &Dispatch,
    kept: &[Region],
    globals: &[ModuleGlobal],
    s: &SalvageRecord,
) -> Vec<String> {
    let mut named: HashSet<u32> = HashSet::new();
    let mut out = argument_blockers(d, kept, s, &mut named);
    for r in &s.dropped_regions {
        if named.contains(&r.region_id) {
            continue;
        }
        match r.role {
            RegionRole::Indirect => out.push(format!(
                "region {} ({} bytes at {:#x}), which the kernel reaches through a pointer in \
                 captured memory, was lost",
                r.region_id, r.size, r.address
            )),
            RegionRole::Global => out.push(format!(
                "region {} (module global memory, {} bytes) was lost: the kernel would read \
                 the module's initial values",
                r.region_id, r.size
            )),
            // Captured with every live allocation (`--memory all`): needed only if an
            // argument points into it (above).
            RegionRole::Argument | RegionRole::Allocation => {}
        }
    }
    // The player puts a module global's bytes back by its variable's name.
    for r in kept.iter().filter(|r| r.role == RegionRole::Global) {
        if !globals.iter().any(|g| g.region_id == r.region_id) {
            out.push(format!(
                "region {} holds module global memory, but the event naming its variable was \
                 lost: the replay would leave the variable at the module's initial value",
                r.region_id
            ));
        }
    }
    if s.textures_dropped {
        out.push(
            "the texture and surface objects of the arguments were dropped with their arrays' \
             memory"
                .into(),
        );
    }
    out
}
