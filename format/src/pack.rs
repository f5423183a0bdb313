//! Repacking a capture for sharing: another zstd level, the reference output dropped, or the
//! application's data replaced (redaction). No I/O beyond the sink; memory bounded by one
//! window of chunks whatever the capture's size.
//!
//! Redaction keeps what the replay needs to run the same code path on the same addresses and
//! nothing of the data: every pointer word (pointer slots in memory; the argument bytes are
//! kept whole), texture and surface handle words, module globals and `__constant__` data, and
//! which chunks were all zeros (zero-filled workspaces, semaphores and counters stay zero).
//! Every other byte becomes pseudo-random, a pure function of (region, offset), so packing
//! the same capture twice gives the same file. The post-dispatch state cannot be recomputed
//! without a GPU: its chunks keep only where the kernel writes (zero holes), and the capture
//! says so (`Reference`), so `play --verify` checks determinism instead of a reference.

use std::io::{Seek, Write};

use crate::error::{FormatError, Result};
use crate::events::{
    Annotation, MemoryKind, PointerSlots, Reference, RegionRole, REFERENCE_ANNOTATION,
};
use crate::layout::MemoryState;
use crate::observe::{Observer, Phase};
use crate::reader::Capture;
use crate::writer::{CaptureWriter, WriterOptions};

/// What `pack` changes.
#[derive(Debug, Clone, Copy)]
pub struct PackOptions {
    /// zstd level for memory chunks (1..=22).
    pub level: i32,
    /// Keep only where the kernel writes, not what (no reference output).
    pub drop_post: bool,
    /// Replace the application's data with pseudo-random bytes (implies `drop_post`).
    pub redact: bool,
}

/// What `pack` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackReport {
    /// Bytes replaced by pseudo-random data.
    pub redacted_bytes: u64,
    /// Bytes of pointer and handle words kept as they were in redacted regions.
    pub kept_bytes: u64,
    /// Regions kept whole (module globals, `__constant__` data).
    pub kept_regions: u32,
    /// Post-dispatch bytes no longer stored.
    pub dropped_post_bytes: u64,
    pub reference: Option<Reference>,
}

/// Bytes of chunks decoded at once.
const WINDOW: u64 = 64 << 20;

/// Redacted data repeats with this period (bytes): pseudo-random at every scale a kernel
/// sees, yet it compresses (zstd finds the repeat), so a redacted capture of a large buffer
/// stays small enough to attach to a bug report.
pub const REDACTION_PERIOD: u64 = 64 << 10;

/// The pseudo-random 8 bytes standing for the word at `offset` of `region_id`
/// (splitmix64 of both: reproducible, and unrelated to the data it replaces).
pub fn redacted_word(region_id: u32, offset: u64) -> [u8; 8] {
    let word = offset % REDACTION_PERIOD / 8;
    let mut z = (u64::from(region_id) << 48 ^ word).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).to_le_bytes()
}

/// Whether a region's bytes are kept as they are by redaction.
fn kept_whole(kind: MemoryKind, role: RegionRole) -> bool {
    role == RegionRole::Global || kind == MemoryKind::ModuleGlobal
}

/// Replaces `buf` (the region's bytes from `start`) by pseudo-random data, except all-zero
/// chunks and the 8-byte words at `keep` (offsets inside the region, sorted). Returns (bytes
/// replaced, bytes kept).
fn redact_window(
    region_id: u32,
    start: u64,
    chunk_size: u64,
    buf: &mut [u8],
    keep: &[u64],
) -> (u64, u64) {
    let end = start + buf.len() as u64;
    let lo = keep.partition_point(|&k| k < start);
    let kept: Vec<(usize, [u8; 8])> = keep[lo..]
        .iter()
        .take_while(|&&k| k < end)
        .filter(|&&k| k.saturating_add(8) <= end)
        .map(|&k| {
            let o = (k - start) as usize;
            let mut w = [0u8; 8];
            w.copy_from_slice(&buf[o..o + 8]);
            (o, w)
        })
        .collect();
    let mut replaced = 0u64;
    for (ci, chunk) in buf.chunks_mut(chunk_size.max(1) as usize).enumerate() {
        if crate::chunk::is_all_zero(chunk) {
            continue;
        }
        let chunk_start = start + ci as u64 * chunk_size;
        for (wi, word) in chunk.chunks_mut(8).enumerate() {
            let r = redacted_word(region_id, chunk_start + wi as u64 * 8);
            word.copy_from_slice(&r[..word.len()]);
        }
        replaced += chunk.len() as u64;
    }
    for (o, w) in &kept {
        buf[*o..*o + 8].copy_from_slice(w);
    }
    let kept_bytes = 8 * kept.len() as u64;
    (replaced.saturating_sub(kept_bytes), kept_bytes)
}

/// Writes `cap` repacked into `out` and finishes it (complete, with index and trailer).
pub fn pack<W: Write + Seek>(
    cap: &Capture<'_>,
    out: W,
    uuid: [u8; 16],
    opts: PackOptions,
) -> Result<(W, PackReport)> {
    pack_observed(cap, out, uuid, opts, &mut ())
}

/// `pack`, telling `observer` how much region memory is done (`Phase::Pack`) and which
/// stretches of the input it will not read again.
pub fn pack_observed<W: Write + Seek>(
    cap: &Capture<'_>,
    out: W,
    uuid: [u8; 16],
    opts: PackOptions,
    observer: &mut dyn Observer,
) -> Result<(W, PackReport)> {
    if !(1..=22).contains(&opts.level) {
        return Err(FormatError::Limit {
            what: "zstd level",
            message: format!("{} not in 1..=22", opts.level),
        });
    }
    let drop_post = opts.drop_post || opts.redact;
    let mut report = PackReport::default();
    let mut w = CaptureWriter::new(
        out,
        uuid,
        WriterOptions {
            level: opts.level,
            ..WriterOptions::default()
        },
    )?;
    write_head(&mut w, cap)?;

    // Words a redacted region keeps: pointer slots and texture handle words, per region.
    let mut keep: Vec<(u32, u64)> = cap.pointer_slots.clone();
    for o in &cap.textures.objects {
        keep.extend(o.memory_words.iter().copied());
    }
    keep.sort_unstable();
    keep.dedup();

    let total: u64 = cap.regions.iter().map(|r| r.size).sum();
    let mut done = 0u64;
    let mut buf = Vec::new();
    for r in &cap.regions {
        w.region(r)?;
        let keep_here: Vec<u64> = keep
            .iter()
            .filter(|k| k.0 == r.region_id)
            .map(|k| k.1)
            .collect();
        let whole = !opts.redact || kept_whole(r.kind, r.role);
        if opts.redact && whole {
            report.kept_regions += 1;
        }
        let chunks: Vec<_> = cap.chunks(r.region_id, MemoryState::Pre).collect();
        let per_window = (WINDOW / r.chunk_size.max(1)).max(1) as usize;
        for window in chunks.chunks(per_window) {
            let start = window[0].offset;
            let len: u64 = window.iter().map(|c| c.raw_len).sum();
            // The region's chunks tile it (the reader checked): `len` is at most the window.
            buf.resize(len as usize, 0);
            let mut at = 0usize;
            for c in window {
                let n = c.raw_len as usize;
                cap.read_chunk_into(c, &mut buf[at..at + n])?;
                at += n;
            }
            if !whole {
                let (replaced, kept) =
                    redact_window(r.region_id, start, r.chunk_size, &mut buf, &keep_here);
                report.redacted_bytes += replaced;
                report.kept_bytes += kept;
            }
            w.memory(r.region_id, MemoryState::Pre, start, &buf)?;
            for c in window {
                observer.done_with(c.payload_offset, c.payload_offset + c.payload_len);
            }
            done += len;
            observer.progress(Phase::Pack, done, total);
        }
    }
    // Post chunks: the recorded output, or (no reference) zeros that mark the write set and
    // cost nothing.
    for r in &cap.regions {
        for c in cap.chunks(r.region_id, MemoryState::Post) {
            buf.resize(c.raw_len as usize, 0);
            if drop_post {
                buf.fill(0);
                report.dropped_post_bytes += c.raw_len;
            } else {
                cap.read_chunk_into(c, &mut buf)?;
                observer.done_with(c.payload_offset, c.payload_offset + c.payload_len);
            }
            w.memory(r.region_id, MemoryState::Post, c.offset, &buf)?;
        }
    }
    write_tail(&mut w, cap)?;
    // Its zero post chunks were copied as they are: they still stand for lost output.
    if let Some(s) = &cap.salvage {
        w.salvage_record(s)?;
    }
    let before = cap.reference();
    let reference = match (opts.redact, drop_post, before) {
        (true, _, _) => Reference::Redacted,
        (false, _, Reference::Redacted) => Reference::Redacted,
        (false, true, _) => Reference::Dropped,
        (false, false, r) => r,
    };
    // A partial reference is the salvage record's to say (written above).
    if !matches!(reference, Reference::Recorded | Reference::Partial) {
        w.annotation(&Annotation {
            key: REFERENCE_ANNOTATION.into(),
            value: reference.name().into(),
        })?;
    }
    report.reference = Some(reference);
    Ok((w.finish()?, report))
}

/// Writes what describes a capture's dispatch, as `cap` has it: capture info, device, code
/// objects, the dispatch. (Rewriters of a capture start with this, then the regions.)
pub fn write_head<W: Write + Seek>(w: &mut CaptureWriter<W>, cap: &Capture<'_>) -> Result<()> {
    if let Some(i) = &cap.info {
        w.capture_info(i)?;
    }
    if let Some(d) = &cap.device {
        w.device(d)?;
    }
    for m in &cap.modules {
        w.module(m)?;
    }
    w.dispatch(&cap.dispatch)
}

/// Writes what follows the regions, as `cap` has it: module globals, textures, pointer
/// slots, timing conditions, graph origin, and the annotations but the reference one (what
/// the post chunks hold is for the rewriter to say, and so is the salvage record, which names
/// post chunks).
pub fn write_tail<W: Write + Seek>(w: &mut CaptureWriter<W>, cap: &Capture<'_>) -> Result<()> {
    for g in &cap.globals {
        w.module_global(g)?;
    }
    if !cap.textures.is_empty() {
        w.textures(&cap.textures)?;
    }
    if !cap.pointer_slots.is_empty() {
        w.pointer_slots(&PointerSlots {
            slots: cap.pointer_slots.clone(),
        })?;
    }
    if let Some(t) = &cap.timing {
        w.timing_conditions(t)?;
    }
    if let Some(g) = &cap.graph {
        w.graph_origin(g)?;
    }
    for a in cap
        .annotations
        .iter()
        .filter(|a| a.key != REFERENCE_ANNOTATION)
    {
        w.annotation(a)?;
    }
    Ok(())
}
