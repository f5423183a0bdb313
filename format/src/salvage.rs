//! Salvage: rewrite the intact prefix of a damaged or incomplete log as a complete one.

use std::collections::{HashMap, HashSet};
use std::io::{Seek, Write};

use crate::codec;
use crate::error::Result;
use crate::events::{EventKind, Region};
use crate::layout::*;
use crate::reader::scan;
use crate::writer::{CaptureWriter, WriterOptions};

/// What salvage kept and dropped.
#[derive(Debug, Clone, Default)]
pub struct SalvageReport {
    pub intact_events: u64,
    pub kept_events: u64,
    /// Regions dropped because not all their chunks survived.
    pub dropped_regions: Vec<u32>,
    /// Why the original log stopped being readable.
    pub damage: Option<String>,
}

/// Copies every intact event of `data` into `out`, drops regions whose memory did not all
/// survive, and finishes `out` as a complete log.
pub fn salvage<W: Write + Seek>(data: &[u8], out: W) -> Result<(W, SalvageReport)> {
    let report = scan(data)?;
    let payload = |off: u64, len: u64| -> &[u8] {
        // scan() checked these bounds for every intact event.
        &data[(off + FRAME_LEN as u64) as usize..(off + FRAME_LEN as u64 + len) as usize]
    };
    let mut regions: HashMap<u32, Region> = HashMap::new();
    let mut pre_chunks: HashMap<u32, HashSet<u64>> = HashMap::new();
    for ev in &report.intact {
        let p = payload(ev.offset, ev.frame.payload_len);
        if ev.frame.kind == EventKind::Region as u16 && ev.frame.flags & FLAG_ZSTD == 0 {
            if let Ok(r) = codec::decode::<Region>(p, ev.offset, "region") {
                regions.insert(r.region_id, r);
            }
        } else if ev.frame.kind == EventKind::MemoryChunk as u16 {
            if let Ok(c) = ChunkPrefix::decode(p, ev.offset) {
                if c.state == MemoryState::Pre {
                    pre_chunks.entry(c.region_id).or_default().insert(c.offset);
                }
            }
        }
    }
    let complete: HashSet<u32> = regions
        .values()
        .filter(|r| {
            let n = r.size.div_ceil(r.chunk_size.max(1));
            pre_chunks.get(&r.region_id).map_or(0, |s| s.len() as u64) == n
        })
        .map(|r| r.region_id)
        .collect();
    let mut dropped: Vec<u32> = regions
        .keys()
        .filter(|id| !complete.contains(id))
        .copied()
        .collect();
    dropped.sort_unstable();

    let mut w = CaptureWriter::new(out, report.header.uuid, WriterOptions::default())?;
    let mut kept = 0u64;
    for ev in &report.intact {
        let kind = ev.frame.kind;
        let p = payload(ev.offset, ev.frame.payload_len);
        if kind == EventKind::Index as u16 || kind == EventKind::End as u16 {
            continue;
        }
        if kind == EventKind::Region as u16 {
            let keep = codec::decode::<Region>(p, ev.offset, "region")
                .map(|r| complete.contains(&r.region_id))
                .unwrap_or(false);
            if !keep {
                continue;
            }
        }
        if kind == EventKind::MemoryChunk as u16 {
            let keep = ChunkPrefix::decode(p, ev.offset)
                .map(|c| complete.contains(&c.region_id))
                .unwrap_or(false);
            if !keep {
                continue;
            }
        }
        w.write_raw_event(kind, ev.frame.flags, p)?;
        kept += 1;
    }
    let out = w.finish()?;
    Ok((
        out,
        SalvageReport {
            intact_events: report.intact.len() as u64,
            kept_events: kept,
            dropped_regions: dropped,
            damage: report.stopped.map(|e| e.to_string()),
        },
    ))
}
