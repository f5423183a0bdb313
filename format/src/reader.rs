//! The parser: works on a byte slice (an mmap in practice) and does no I/O. `Capture::parse`
//! follows header → index → events, touching only metadata and chunk prefixes; chunk bytes are
//! checked and decompressed only when read. `scan` walks the log front to back, for `verify`
//! and salvage.

use std::collections::BTreeMap;
use std::io::Read;

use rayon::prelude::*;

use crate::chunk::MAX_CHUNK_SIZE;
use crate::error::{FormatError, Result};
use crate::events::*;
use crate::extents::RegionExtents;
use crate::layout::*;
use crate::observe::{Observer, Phase};
use crate::rules::{check_payload_crc, payload_of, CaptureBuilder};
use crate::steps::{RangeInfo, Step};

pub use crate::chunk::ChunkRef;

impl ChunkRef {
    /// Bytes the chunk occupies on disk after its prefix.
    pub fn stored_len(&self) -> u64 {
        self.payload_len - CHUNK_PREFIX_LEN as u64
    }
}

/// One event as found by the sequential scan.
#[derive(Debug, Clone, Copy)]
pub struct ScannedEvent {
    pub offset: u64,
    pub frame: Frame,
}

/// A parsed capture. Borrowed from the bytes it was parsed from.
#[derive(Debug, Clone)]
pub struct Capture<'a> {
    data: &'a [u8],
    pub header: FileHeader,
    pub info: Option<CaptureInfo>,
    pub device: Option<DeviceInfo>,
    pub modules: Vec<ModuleImage>,
    pub dispatch: Dispatch,
    /// A range capture's steps in issue order; empty for a single-dispatch capture (whose
    /// one step is `dispatch`). The first kernel step's dispatch equals `dispatch`.
    pub steps: Vec<Step>,
    /// What the range is as a whole (the RANGE event; absent in single captures and in 1.2
    /// range captures).
    pub range: Option<RangeInfo>,
    pub regions: Vec<Region>,
    /// Extents of the regions captured by touched pages (REGION_EXTENTS), by region id; a
    /// region without is held whole (see `extents`, `present_bytes`).
    pub region_extents: BTreeMap<u32, RegionExtents>,
    pub globals: Vec<ModuleGlobal>,
    pub annotations: Vec<Annotation>,
    /// How the original duration was measured (absent in older captures).
    pub timing: Option<TimingConditions>,
    /// Where the dispatch came from when it ran inside a CUDA graph.
    pub graph: Option<GraphOrigin>,
    /// What `pack --redact` replaced and kept (absent when not redacted, or redacted by a
    /// packer older than this event).
    pub redaction: Option<Redaction>,
    /// Pointer words inside captured memory, sorted by (region, offset).
    pub pointer_slots: Vec<(u32, u64)>,
    /// Texture and surface objects of the dispatch (empty when it uses none).
    pub textures: Textures,
    /// Chunks by (region, state, offset).
    chunks: BTreeMap<(u32, MemoryState, u64), ChunkRef>,
    /// Unknown non-critical events that were skipped: (offset, kind).
    pub skipped: Vec<(u64, u16)>,
    /// What salvage lost, for a capture `verify --salvage` rewrote (the SALVAGE event).
    pub salvage: Option<SalvageRecord>,
    pub event_count: u32,
}

/// What `scan` found walking the log front to back.
#[derive(Debug)]
pub struct ScanReport {
    pub header: FileHeader,
    /// Every event whose frame and payload checksums hold, in file order.
    pub intact: Vec<ScannedEvent>,
    /// Offset just past the last intact event.
    pub intact_until: u64,
    /// Why the walk stopped before a complete END + trailer (None when the log is whole).
    pub stopped: Option<FormatError>,
    /// Whether the walk reached END followed by a valid trailer.
    pub complete: bool,
}

/// Bytes scanned between two reports to the observer.
const OBSERVE_EVERY: u64 = 64 << 20;

/// Walks the log from the first event, checking every frame CRC and payload CRC, until END,
/// the first damaged event, or the end of the data. Never fails except on a bad header.
pub fn scan(data: &[u8]) -> Result<ScanReport> {
    scan_observed(data, &mut ())
}

/// `scan`, telling `observer` how far it got.
pub fn scan_observed(data: &[u8], observer: &mut dyn Observer) -> Result<ScanReport> {
    let header = FileHeader::decode(data)?;
    let mut intact = Vec::new();
    let mut pos = HEADER_LEN as u64;
    let mut stopped = None;
    let mut complete = false;
    let len = data.len() as u64;
    let mut reported = 0u64;
    while pos < len {
        let frame = match Frame::decode(data, pos) {
            Ok(f) => f,
            Err(e) => {
                stopped = Some(e);
                break;
            }
        };
        let payload = match payload_of(data, pos, &frame) {
            Ok(p) => p,
            Err(e) => {
                stopped = Some(e);
                break;
            }
        };
        let what = EventKind::from_u16(frame.kind).map_or("unknown", |k| k.name());
        if let Err(e) = check_payload_crc(payload, pos, &frame, what) {
            stopped = Some(e);
            break;
        }
        intact.push(ScannedEvent { offset: pos, frame });
        pos += FRAME_LEN as u64 + frame.payload_len;
        if pos - reported >= OBSERVE_EVERY {
            observer.progress(Phase::Scan, pos, len);
            observer.done_with(reported, pos);
            reported = pos;
        }
        if frame.kind == EventKind::End as u16 {
            match Trailer::decode(data, pos) {
                Ok(t) => {
                    let end = pos + TRAILER_LEN as u64;
                    if t.end_offset != pos - FRAME_LEN as u64 - frame.payload_len {
                        stopped = Some(FormatError::Inconsistent {
                            offset: pos,
                            what: format!(
                                "trailer names END at byte {}, but END is at byte {}",
                                t.end_offset,
                                pos - FRAME_LEN as u64 - frame.payload_len
                            ),
                        });
                    } else if end != len {
                        stopped = Some(FormatError::TrailingGarbage { end, len });
                    } else {
                        complete = true;
                    }
                }
                Err(e) => stopped = Some(e),
            }
            break;
        }
    }
    // Complete: the trailer after END was read too.
    let scanned = if complete { len } else { pos.min(len) };
    observer.progress(Phase::Scan, scanned, len);
    if !complete && stopped.is_none() {
        stopped = Some(FormatError::Truncated {
            offset: pos,
            what: "END event",
            needed: FRAME_LEN as u64,
            available: len.saturating_sub(pos),
        });
    }
    Ok(ScanReport {
        header,
        intact,
        intact_until: pos.min(len),
        stopped,
        complete,
    })
}

/// The index event the header names, checked to lie inside the file and to be an index.
fn index_frame(data: &[u8], header: &FileHeader) -> Result<(u64, Frame)> {
    let len = data.len() as u64;
    let index_offset = header.index_offset;
    if index_offset < HEADER_LEN as u64 || index_offset >= len {
        return Err(FormatError::Truncated {
            offset: index_offset,
            what: "index event named by the header",
            needed: FRAME_LEN as u64,
            available: len.saturating_sub(index_offset),
        });
    }
    let index_frame = Frame::decode(data, index_offset)?;
    if index_frame.kind != EventKind::Index as u16 {
        return Err(FormatError::Inconsistent {
            offset: index_offset,
            what: format!(
                "header names an index at this offset but the event there has kind {}",
                index_frame.kind
            ),
        });
    }
    Ok((index_offset, index_frame))
}

/// The END event after the index and the trailer after it, checked to agree with the
/// header and the index (`entries` events indexed).
fn check_end(
    data: &[u8],
    b: &mut CaptureBuilder<'_>,
    index_offset: u64,
    index_frame: &Frame,
    entries: usize,
) -> Result<EndMark> {
    let len = data.len() as u64;
    let end_offset = index_offset + FRAME_LEN as u64 + index_frame.payload_len;
    let end_frame = Frame::decode(data, end_offset)?;
    if end_frame.kind != EventKind::End as u16 {
        return Err(FormatError::Inconsistent {
            offset: end_offset,
            what: format!(
                "expected END after the index, found kind {}",
                end_frame.kind
            ),
        });
    }
    let end: EndMark = b.decode(end_offset, &end_frame, EventKind::End)?;
    let trailer_offset = end_offset + FRAME_LEN as u64 + end_frame.payload_len;
    let trailer = Trailer::decode(data, trailer_offset)?;
    let file_end = trailer_offset + TRAILER_LEN as u64;
    if file_end < len {
        return Err(FormatError::TrailingGarbage { end: file_end, len });
    }
    if trailer.index_offset != index_offset
        || trailer.end_offset != end_offset
        || end.index_offset != index_offset
        || end.event_count as usize != entries + 1
        || trailer.event_count != end.event_count + 1
    {
        return Err(FormatError::Inconsistent {
            offset: trailer_offset,
            what: "header, index, END and trailer disagree on offsets or event counts".into(),
        });
    }
    Ok(end)
}

/// Every indexed event, in file order, checked not to overlap or leave the event area.
fn add_indexed(
    data: &[u8],
    b: &mut CaptureBuilder<'_>,
    entries: &[IndexEntry],
    index_offset: u64,
) -> Result<()> {
    let mut next_free = HEADER_LEN as u64;
    for entry in entries {
        let off = entry.offset;
        if off < next_free || off >= index_offset {
            return Err(FormatError::Inconsistent {
                offset: index_offset,
                what: format!("index entry points at byte {off}, outside the event area or overlapping the previous event"),
            });
        }
        let frame = Frame::decode(data, off)?;
        if frame.kind != entry.kind {
            return Err(FormatError::Inconsistent {
                offset: off,
                what: format!(
                    "index says kind {} but the event has kind {}",
                    entry.kind, frame.kind
                ),
            });
        }
        next_free = off
            .checked_add(FRAME_LEN as u64)
            .and_then(|v| v.checked_add(frame.payload_len))
            .filter(|&e| e <= index_offset)
            .ok_or_else(|| FormatError::Inconsistent {
                offset: off,
                what: format!(
                    "payload length {} runs past the event area",
                    frame.payload_len
                ),
            })?;
        b.add(off, &frame)?;
    }
    Ok(())
}

impl<'a> Capture<'a> {
    /// Parses a complete capture through its index.
    pub fn parse(data: &'a [u8]) -> Result<Capture<'a>> {
        let header = FileHeader::decode(data)?;
        if header.state == STATE_RECORDING {
            let report = scan(data)?;
            return Err(FormatError::Incomplete {
                intact_events: report.intact.len() as u64,
                intact_until: report.intact_until,
            });
        }
        let (index_offset, index_frame) = index_frame(data, &header)?;
        let mut b = CaptureBuilder::new(data, header);
        let entries: Vec<IndexEntry> = b.decode(index_offset, &index_frame, EventKind::Index)?;
        let end = check_end(data, &mut b, index_offset, &index_frame, entries.len())?;
        add_indexed(data, &mut b, &entries, index_offset)?;
        b.check_complete(index_offset)?;
        let Some(dispatch) = b.dispatch else {
            return Err(FormatError::Inconsistent {
                offset: index_offset,
                what: "the capture holds no dispatch event".into(),
            });
        };
        Ok(Capture {
            data,
            header,
            info: b.info,
            device: b.device,
            modules: b.modules,
            dispatch,
            steps: b.steps,
            range: b.range,
            regions: b.regions,
            region_extents: b.extents,
            globals: b.globals,
            annotations: b.annotations,
            timing: b.timing,
            graph: b.graph,
            redaction: b.redaction,
            pointer_slots: b.pointer_slots,
            textures: b.textures,
            chunks: b.chunks,
            skipped: b.skipped,
            salvage: b.salvage,
            event_count: end.event_count + 1,
        })
    }

    /// Whether this is a range capture (a sequence of steps) rather than one dispatch.
    pub fn is_range(&self) -> bool {
        !self.steps.is_empty()
    }

    /// The bytes this capture was parsed from.
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    pub fn region(&self, region_id: u32) -> Option<&Region> {
        self.regions.iter().find(|r| r.region_id == region_id)
    }

    /// Which bytes of the region the capture holds; none: the whole region.
    pub fn extents(&self, region_id: u32) -> Option<&RegionExtents> {
        self.region_extents.get(&region_id)
    }

    /// Whether any region was captured by touched pages (has absent bytes or may have).
    pub fn has_extents(&self) -> bool {
        !self.region_extents.is_empty()
    }

    /// Bytes of the region the capture holds (its size, without extents).
    pub fn present_bytes(&self, region_id: u32) -> u64 {
        match (self.extents(region_id), self.region(region_id)) {
            (Some(e), _) => e.present_bytes(),
            (None, Some(r)) => r.size,
            (None, None) => 0,
        }
    }

    pub fn module(&self, module_id: u32) -> Option<&ModuleImage> {
        self.modules.iter().find(|m| m.module_id == module_id)
    }

    /// The chunks of one region in one state, by offset.
    pub fn chunks(&self, region_id: u32, state: MemoryState) -> impl Iterator<Item = &ChunkRef> {
        self.chunks
            .range((region_id, state, 0)..=(region_id, state, u64::MAX))
            .map(|(_, c)| c)
    }

    /// All chunks in file order.
    pub fn all_chunks(&self) -> Vec<&ChunkRef> {
        let mut v: Vec<_> = self.chunks.values().collect();
        v.sort_by_key(|c| c.event_offset);
        v
    }

    /// Bytes the region takes on disk (pre + post chunks, prefixes excluded).
    pub fn stored_bytes(&self, region_id: u32) -> u64 {
        self.chunks
            .values()
            .filter(|c| c.region_id == region_id)
            .map(|c| c.stored_len())
            .sum()
    }

    /// Whether the kernel wrote into the region (it has post-dispatch chunks).
    /// Whether the post-dispatch chunks are the recorded output (`pack` may have dropped or
    /// redacted it, keeping only where the kernel writes).
    /// A salvaged capture whose salvage lost output is `Partial` (see `recorded_output`).
    pub fn reference(&self) -> Reference {
        let packed = self
            .annotations
            .iter()
            .rev()
            .find(|a| a.key == REFERENCE_ANNOTATION)
            .map(|a| Reference::from_annotation(&a.value));
        match packed {
            Some(r) => r,
            None if self
                .salvage
                .as_ref()
                .is_some_and(|s| !s.unknown_output.is_empty()) =>
            {
                Reference::Partial
            }
            None => Reference::Recorded,
        }
    }

    /// Whether the POST chunk `c` holds the kernel's recorded output (false for every chunk
    /// of a capture without a reference, and for the lost output of a salvaged one).
    pub fn recorded_output(&self, c: &ChunkRef) -> bool {
        match self.reference() {
            Reference::Recorded => true,
            Reference::Partial => !self
                .salvage
                .as_ref()
                .is_some_and(|s| s.output_unknown(c.region_id, c.offset)),
            Reference::Dropped | Reference::Redacted => false,
        }
    }

    /// Bytes of the region whose output salvage lost (its post chunks that stand for it); 0
    /// unless the reference is partial (after `pack --drop-post` or `--redact` no post chunk
    /// claims an output, so none stands for a lost one).
    pub fn unknown_output_bytes(&self, region_id: u32) -> u64 {
        if self.reference() != Reference::Partial {
            return 0;
        }
        let Some(s) = &self.salvage else { return 0 };
        self.chunks(region_id, MemoryState::Post)
            .filter(|c| s.output_unknown(c.region_id, c.offset))
            .map(|c| c.raw_len)
            .sum()
    }

    pub fn is_written(&self, region_id: u32) -> bool {
        self.chunks(region_id, MemoryState::Post).next().is_some()
    }

    /// Decodes one chunk into `out` (exactly `raw_len` bytes) and checks the CRC of the decoded
    /// bytes. The CRC of the stored bytes is left to `verify`: the decoded CRC already covers
    /// the data, and the rest of the prefix was validated by `parse`.
    pub fn read_chunk_into(&self, c: &ChunkRef, out: &mut [u8]) -> Result<()> {
        if out.len() as u64 != c.raw_len {
            return Err(FormatError::Limit {
                what: "output buffer",
                message: format!("{} bytes for a chunk of {}", out.len(), c.raw_len),
            });
        }
        let payload = slice_at(self.data, c.payload_offset, c.payload_len, "memory chunk")?;
        let mismatch = |what: &str, stored: u32, computed: u32| FormatError::Checksum {
            offset: c.event_offset,
            what: format!("{what} at offset {} of region {}", c.offset, c.region_id),
            stored,
            computed,
        };
        if c.encoding == ChunkEncoding::Zero {
            let computed = crc(payload);
            if computed != c.payload_crc {
                return Err(mismatch("memory chunk", c.payload_crc, computed));
            }
        }
        let stored = &payload[CHUNK_PREFIX_LEN..];
        match c.encoding {
            ChunkEncoding::Zero => {
                // Nothing stored to go wrong; the prefix is covered by the payload CRC above.
                out.fill(0);
                return Ok(());
            }
            ChunkEncoding::Raw => out.copy_from_slice(stored),
            ChunkEncoding::Zstd => {
                let n = zstd::bulk::decompress_to_buffer(stored, out).map_err(|e| {
                    FormatError::Decode {
                        offset: c.payload_offset + CHUNK_PREFIX_LEN as u64,
                        what: format!(
                            "memory chunk at offset {} of region {}",
                            c.offset, c.region_id
                        ),
                        message: format!("zstd: {e}"),
                    }
                })?;
                if n as u64 != c.raw_len {
                    return Err(FormatError::Inconsistent {
                        offset: c.event_offset,
                        what: format!(
                            "memory chunk decompressed to {n} bytes, expected {}",
                            c.raw_len
                        ),
                    });
                }
            }
        }
        let computed = crc(out);
        if computed != c.raw_crc {
            return Err(mismatch("decoded memory chunk", c.raw_crc, computed));
        }
        Ok(())
    }

    /// Decodes a whole region's pre-dispatch bytes into `out`, chunks in parallel. The
    /// absent bytes of a region with extents read as zero (they mean nothing).
    pub fn read_region_into(&self, region_id: u32, out: &mut [u8]) -> Result<()> {
        let r = self.region(region_id).ok_or(FormatError::Limit {
            what: "region id",
            message: format!("no region {region_id}"),
        })?;
        if out.len() as u64 != r.size {
            return Err(FormatError::Limit {
                what: "output buffer",
                message: format!("{} bytes for region of {}", out.len(), r.size),
            });
        }
        let cs = r.chunk_size;
        // Chunks by position: with extents, wholly absent chunks are not stored.
        out.par_chunks_mut(cs as usize)
            .enumerate()
            .try_for_each(|(i, dst)| {
                match self
                    .chunks
                    .get(&(region_id, MemoryState::Pre, i as u64 * cs))
                {
                    Some(c) => self.read_chunk_into(c, dst),
                    None => {
                        dst.fill(0);
                        Ok(())
                    }
                }
            })
    }

    /// A region's pre-dispatch bytes.
    pub fn read_region(&self, region_id: u32) -> Result<Vec<u8>> {
        let size = self.region(region_id).map_or(0, |r| r.size);
        let mut out = vec![
            0u8;
            usize::try_from(size).map_err(|_| FormatError::Limit {
                what: "region size",
                message: format!("{size} bytes do not fit in memory"),
            })?
        ];
        self.read_region_into(region_id, &mut out)?;
        Ok(out)
    }

    /// Checks one chunk against the CRC of its decoded bytes without materialising it: raw
    /// bytes are hashed where they lie, zstd is decoded in small pieces into the hasher, and a
    /// zero chunk needs nothing (its prefix is covered by the payload CRC).
    pub fn verify_chunk(&self, c: &ChunkRef) -> Result<()> {
        let payload = slice_at(self.data, c.payload_offset, c.payload_len, "memory chunk")?;
        let stored = &payload[CHUNK_PREFIX_LEN..];
        let computed = match c.encoding {
            ChunkEncoding::Zero => return Ok(()),
            ChunkEncoding::Raw => crc(stored),
            ChunkEncoding::Zstd => {
                let what = || {
                    format!(
                        "memory chunk at offset {} of region {}",
                        c.offset, c.region_id
                    )
                };
                let decode_err = |e: std::io::Error| FormatError::Decode {
                    offset: c.payload_offset + CHUNK_PREFIX_LEN as u64,
                    what: what(),
                    message: format!("zstd: {e}"),
                };
                let mut dec =
                    zstd::stream::read::Decoder::with_buffer(stored).map_err(decode_err)?;
                // A chunk's window is at most the chunk: a frame asking for more is refused
                // before the decoder allocates it.
                dec.window_log_max(MAX_CHUNK_SIZE.trailing_zeros())
                    .map_err(decode_err)?;
                let mut hasher = crc32fast::Hasher::new();
                let mut buf = vec![0u8; VERIFY_PIECE];
                let mut total = 0u64;
                loop {
                    let n = dec.read(&mut buf).map_err(decode_err)?;
                    if n == 0 {
                        break;
                    }
                    total += n as u64;
                    if total > c.raw_len {
                        break;
                    }
                    hasher.update(&buf[..n]);
                }
                if total != c.raw_len {
                    return Err(FormatError::Inconsistent {
                        offset: c.event_offset,
                        what: format!(
                            "{} decompresses to {} bytes, expected {}",
                            what(),
                            if total > c.raw_len {
                                format!("more than the {}", c.raw_len)
                            } else {
                                total.to_string()
                            },
                            c.raw_len
                        ),
                    });
                }
                hasher.finalize()
            }
        };
        if computed != c.raw_crc {
            return Err(FormatError::Checksum {
                offset: c.event_offset,
                what: format!(
                    "decoded memory chunk at offset {} of region {}",
                    c.offset, c.region_id
                ),
                stored: c.raw_crc,
                computed,
            });
        }
        Ok(())
    }

    /// Checks every chunk against the CRC of its decoded bytes, in parallel, in bounded
    /// memory. (The CRCs of the stored bytes are `scan`'s job; `verify` runs both.) zstd keeps
    /// a window of up to a chunk's size per decoder, so chunks are checked in waves whose
    /// decoded sizes add up to at most `VERIFY_WAVE_BYTES`.
    pub fn verify_chunks(&self) -> Result<()> {
        self.verify_chunks_observed(&mut ())
    }

    /// `verify_chunks`, telling `observer` after each wave (chunks in file order, so the
    /// bytes left behind are not read again).
    pub fn verify_chunks_observed(&self, observer: &mut dyn Observer) -> Result<()> {
        let mut stored: Vec<&ChunkRef> = self
            .all_chunks()
            .into_iter()
            .filter(|c| c.encoding != ChunkEncoding::Zero)
            .collect();
        stored.sort_unstable_by_key(|c| c.payload_offset);
        let total: u64 = stored.iter().map(|c| c.raw_len).sum();
        let mut done = 0u64;
        let mut check = |wave: &[&ChunkRef]| -> Result<()> {
            wave.par_iter().try_for_each(|c| self.verify_chunk(c))?;
            for c in wave {
                done += c.raw_len;
                observer.done_with(c.payload_offset, c.payload_offset + c.payload_len);
            }
            observer.progress(Phase::Chunks, done, total);
            Ok(())
        };
        let mut wave: Vec<&ChunkRef> = Vec::new();
        let mut wave_bytes = 0u64;
        for c in stored {
            // zstd keeps a window per decoder; raw chunks are read straight, but still count,
            // so a wave of raw chunks does not map the whole file at once either.
            let cost = c.raw_len;
            if wave_bytes + cost > VERIFY_WAVE_BYTES && !wave.is_empty() {
                check(&wave)?;
                wave.clear();
                wave_bytes = 0;
            }
            wave.push(c);
            wave_bytes += cost;
        }
        check(&wave)
    }
}

/// Bytes decoded per read while verifying a chunk.
const VERIFY_PIECE: usize = 256 << 10;
/// Decoded bytes of zstd chunks checked at once (bounds the decoders' windows).
const VERIFY_WAVE_BYTES: u64 = 64 << 20;

/// Result of a full verification.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    pub events: u64,
    pub chunks: u64,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
}

/// Full check: sequential scan (every frame and payload CRC, END, trailer), the index path
/// must agree with it, and every chunk decompresses to its CRC.
pub fn verify(data: &[u8]) -> Result<VerifyReport> {
    verify_observed(data, &mut ())
}

/// `verify`, telling `observer` its progress and which bytes it is done with.
pub fn verify_observed(data: &[u8], observer: &mut dyn Observer) -> Result<VerifyReport> {
    let report = scan_observed(data, observer)?;
    if report.header.state == STATE_RECORDING {
        return Err(FormatError::Incomplete {
            intact_events: report.intact.len() as u64,
            intact_until: report.intact_until,
        });
    }
    if let Some(e) = report.stopped {
        return Err(e);
    }
    let cap = Capture::parse(data)?;
    if cap.event_count as usize != report.intact.len() {
        return Err(FormatError::Inconsistent {
            offset: cap.header.index_offset,
            what: format!(
                "the index lists {} events but the log holds {}",
                cap.event_count,
                report.intact.len()
            ),
        });
    }
    cap.verify_chunks_observed(observer)?;
    let chunks = cap.all_chunks();
    Ok(VerifyReport {
        events: report.intact.len() as u64,
        chunks: chunks.len() as u64,
        raw_bytes: chunks.iter().map(|c| c.raw_len).sum(),
        stored_bytes: chunks.iter().map(|c| c.stored_len()).sum(),
    })
}
