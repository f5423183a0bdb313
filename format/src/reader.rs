//! The parser: works on a byte slice (an mmap in practice) and does no I/O. `Capture::parse`
//! follows header → index → events, touching only metadata and chunk prefixes; chunk bytes are
//! checked and decompressed only when read. `scan` walks the log front to back, for `verify`
//! and salvage.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;

use rayon::prelude::*;
use serde::de::DeserializeOwned;

use crate::chunk::MAX_CHUNK_SIZE;
use crate::codec::{self, METADATA_LIMIT};
use crate::error::{FormatError, Result};
use crate::events::*;
use crate::layout::*;

/// Where one memory chunk lies in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRef {
    pub region_id: u32,
    pub state: MemoryState,
    pub encoding: ChunkEncoding,
    /// Offset inside the region.
    pub offset: u64,
    pub raw_len: u64,
    pub raw_crc: u32,
    /// File offset of the event frame.
    pub event_offset: u64,
    /// File offset and length of the whole payload (prefix + stored bytes).
    pub payload_offset: u64,
    pub payload_len: u64,
    pub payload_crc: u32,
}

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
#[derive(Debug)]
pub struct Capture<'a> {
    data: &'a [u8],
    pub header: FileHeader,
    pub info: Option<CaptureInfo>,
    pub device: Option<DeviceInfo>,
    pub modules: Vec<ModuleImage>,
    pub dispatch: Dispatch,
    pub regions: Vec<Region>,
    pub globals: Vec<ModuleGlobal>,
    pub annotations: Vec<Annotation>,
    /// Pointer words inside captured memory, sorted by (region, offset).
    pub pointer_slots: Vec<(u32, u64)>,
    /// Chunks by (region, state, offset).
    chunks: BTreeMap<(u32, MemoryState, u64), ChunkRef>,
    /// Unknown non-critical events that were skipped: (offset, kind).
    pub skipped: Vec<(u64, u16)>,
    pub event_count: u32,
}

fn payload_of<'a>(data: &'a [u8], offset: u64, frame: &Frame) -> Result<&'a [u8]> {
    slice_at(
        data,
        offset + FRAME_LEN as u64,
        frame.payload_len,
        "event payload",
    )
}

fn check_payload_crc(payload: &[u8], offset: u64, frame: &Frame, what: &str) -> Result<()> {
    let computed = crc(payload);
    if computed != frame.payload_crc {
        return Err(FormatError::Checksum {
            offset,
            what: format!("{what} event payload"),
            stored: frame.payload_crc,
            computed,
        });
    }
    Ok(())
}

fn decode_meta<T: DeserializeOwned>(
    data: &[u8],
    offset: u64,
    frame: &Frame,
    kind: EventKind,
) -> Result<T> {
    let payload = payload_of(data, offset, frame)?;
    check_payload_crc(payload, offset, frame, kind.name())?;
    let payload_offset = offset + FRAME_LEN as u64;
    if frame.flags & FLAG_ZSTD != 0 {
        let mut out = Vec::new();
        let dec =
            zstd::stream::read::Decoder::with_buffer(payload).map_err(|e| FormatError::Decode {
                offset: payload_offset,
                what: kind.name().into(),
                message: format!("zstd: {e}"),
            })?;
        // Bounded: a small frame claiming gigabytes cannot make us allocate them.
        dec.take(METADATA_LIMIT as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| FormatError::Decode {
                offset: payload_offset,
                what: kind.name().into(),
                message: format!("zstd: {e}"),
            })?;
        if out.len() > METADATA_LIMIT {
            return Err(FormatError::Decode {
                offset: payload_offset,
                what: kind.name().into(),
                message: format!("decompressed metadata exceeds {METADATA_LIMIT} bytes"),
            });
        }
        codec::decode(&out, payload_offset, kind.name())
    } else {
        codec::decode(payload, payload_offset, kind.name())
    }
}

fn check_flags(frame: &Frame, offset: u64) -> Result<()> {
    if frame.flags & !KNOWN_FLAGS != 0 {
        return Err(FormatError::Inconsistent {
            offset: offset + 2,
            what: format!("unknown frame flags {:#06x}", frame.flags),
        });
    }
    Ok(())
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

/// Walks the log from the first event, checking every frame CRC and payload CRC, until END,
/// the first damaged event, or the end of the data. Never fails except on a bad header.
pub fn scan(data: &[u8]) -> Result<ScanReport> {
    let header = FileHeader::decode(data)?;
    let mut intact = Vec::new();
    let mut pos = HEADER_LEN as u64;
    let mut stopped = None;
    let mut complete = false;
    let len = data.len() as u64;
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
        let entries: Vec<IndexEntry> =
            decode_meta(data, index_offset, &index_frame, EventKind::Index)?;
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
        let end: EndMark = decode_meta(data, end_offset, &end_frame, EventKind::End)?;
        let trailer_offset = end_offset + FRAME_LEN as u64 + end_frame.payload_len;
        let trailer = Trailer::decode(data, trailer_offset)?;
        let file_end = trailer_offset + TRAILER_LEN as u64;
        if file_end < len {
            return Err(FormatError::TrailingGarbage { end: file_end, len });
        }
        if trailer.index_offset != index_offset
            || trailer.end_offset != end_offset
            || end.index_offset != index_offset
            || end.event_count as usize != entries.len() + 1
            || trailer.event_count != end.event_count + 1
        {
            return Err(FormatError::Inconsistent {
                offset: trailer_offset,
                what: "header, index, END and trailer disagree on offsets or event counts".into(),
            });
        }

        let mut info = None;
        let mut device = None;
        let mut modules = Vec::new();
        let mut dispatch = None;
        let mut regions: Vec<Region> = Vec::new();
        let mut globals: Vec<ModuleGlobal> = Vec::new();
        let mut annotations: Vec<Annotation> = Vec::new();
        let mut pointer_slots: Vec<(u32, u64)> = Vec::new();
        let mut chunks = BTreeMap::new();
        let mut skipped = Vec::new();
        let mut next_free = HEADER_LEN as u64;
        let mut region_ids = HashSet::new();
        let mut module_ids = HashSet::new();

        for entry in &entries {
            let off = entry.offset;
            if off < next_free || off >= index_offset {
                return Err(FormatError::Inconsistent {
                    offset: index_offset,
                    what: format!("index entry points at byte {off}, outside the event area or overlapping the previous event"),
                });
            }
            let frame = Frame::decode(data, off)?;
            check_flags(&frame, off)?;
            if frame.kind != entry.kind {
                return Err(FormatError::Inconsistent {
                    offset: off,
                    what: format!(
                        "index says kind {} but the event has kind {}",
                        entry.kind, frame.kind
                    ),
                });
            }
            let event_end = off
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
            next_free = event_end;
            let Some(kind) = EventKind::from_u16(frame.kind) else {
                if frame.flags & FLAG_CRITICAL != 0 {
                    return Err(FormatError::UnknownCritical {
                        offset: off,
                        kind: frame.kind,
                        found_major: header.major,
                        found_minor: header.minor,
                        supported_major: VERSION_MAJOR,
                        supported_minor: VERSION_MINOR,
                    });
                }
                skipped.push((off, frame.kind));
                continue;
            };
            match kind {
                EventKind::CaptureInfo => info = Some(decode_meta(data, off, &frame, kind)?),
                EventKind::Device => device = Some(decode_meta(data, off, &frame, kind)?),
                EventKind::Module => {
                    let m: ModuleImage = decode_meta(data, off, &frame, kind)?;
                    if !module_ids.insert(m.module_id) {
                        return Err(FormatError::Inconsistent {
                            offset: off,
                            what: format!("module {} appears twice", m.module_id),
                        });
                    }
                    modules.push(m);
                }
                EventKind::Dispatch => {
                    if dispatch.is_some() {
                        return Err(FormatError::Inconsistent {
                            offset: off,
                            what: "a second dispatch event (a capture holds one)".into(),
                        });
                    }
                    dispatch = Some(decode_meta::<Dispatch>(data, off, &frame, kind)?)
                }
                EventKind::Region => {
                    let r: Region = decode_meta(data, off, &frame, kind)?;
                    if r.chunk_size == 0 || r.chunk_size > MAX_CHUNK_SIZE {
                        return Err(FormatError::Inconsistent {
                            offset: off,
                            what: format!("region {} has chunk size {}", r.region_id, r.chunk_size),
                        });
                    }
                    if r.address.checked_add(r.size).is_none() {
                        return Err(FormatError::Inconsistent {
                            offset: off,
                            what: format!("region {} wraps the address space", r.region_id),
                        });
                    }
                    if !region_ids.insert(r.region_id) {
                        return Err(FormatError::Inconsistent {
                            offset: off,
                            what: format!("region {} declared twice", r.region_id),
                        });
                    }
                    regions.push(r);
                }
                EventKind::MemoryChunk => {
                    let payload = payload_of(data, off, &frame)?;
                    let p = ChunkPrefix::decode(payload, off + FRAME_LEN as u64)?;
                    let region = regions
                        .iter()
                        .find(|r| r.region_id == p.region_id)
                        .ok_or_else(|| FormatError::Inconsistent {
                            offset: off,
                            what: format!(
                                "memory chunk for region {} before (or without) its region",
                                p.region_id
                            ),
                        })?;
                    let expected_len = region.size.saturating_sub(p.offset).min(region.chunk_size);
                    if p.offset % region.chunk_size != 0
                        || p.offset >= region.size
                        || p.raw_len != expected_len
                    {
                        return Err(FormatError::Inconsistent {
                            offset: off,
                            what: format!(
                                "chunk of {} bytes at offset {} does not fit region {} ({} bytes, chunk size {})",
                                p.raw_len, p.offset, region.region_id, region.size, region.chunk_size
                            ),
                        });
                    }
                    let stored = frame.payload_len - CHUNK_PREFIX_LEN as u64;
                    if (p.encoding == ChunkEncoding::Raw && stored != p.raw_len)
                        || (p.encoding == ChunkEncoding::Zero && stored != 0)
                    {
                        return Err(FormatError::Inconsistent {
                            offset: off,
                            what: format!(
                                "{:?} chunk stores {stored} bytes for {} raw bytes",
                                p.encoding, p.raw_len
                            ),
                        });
                    }
                    let key = (p.region_id, p.state, p.offset);
                    let cref = ChunkRef {
                        region_id: p.region_id,
                        state: p.state,
                        encoding: p.encoding,
                        offset: p.offset,
                        raw_len: p.raw_len,
                        raw_crc: p.raw_crc,
                        event_offset: off,
                        payload_offset: off + FRAME_LEN as u64,
                        payload_len: frame.payload_len,
                        payload_crc: frame.payload_crc,
                    };
                    if chunks.insert(key, cref).is_some() {
                        return Err(FormatError::Inconsistent {
                            offset: off,
                            what: format!(
                                "duplicate {:?} chunk at offset {} of region {}",
                                p.state, p.offset, p.region_id
                            ),
                        });
                    }
                }
                EventKind::ModuleGlobal => globals.push(decode_meta(data, off, &frame, kind)?),
                EventKind::Annotation => annotations.push(decode_meta(data, off, &frame, kind)?),
                EventKind::PointerSlots => {
                    let p: PointerSlots = decode_meta(data, off, &frame, kind)?;
                    pointer_slots.extend(p.slots);
                }
                EventKind::Index | EventKind::End => {
                    return Err(FormatError::Inconsistent {
                        offset: off,
                        what: format!("{} event inside the event area", kind.name()),
                    })
                }
            }
        }

        let dispatch = dispatch.ok_or_else(|| FormatError::Inconsistent {
            offset: index_offset,
            what: "the capture holds no dispatch event".into(),
        })?;
        if dispatch.arg_bytes.len() > u32::MAX as usize
            || dispatch
                .pointer_words
                .iter()
                .any(|&w| w as usize + 8 > dispatch.arg_bytes.len())
        {
            return Err(FormatError::Inconsistent {
                offset: index_offset,
                what: "a pointer word lies outside the kernel-argument bytes".into(),
            });
        }
        for r in &regions {
            let n = r.size.div_ceil(r.chunk_size);
            let have = chunks
                .range(
                    (r.region_id, MemoryState::Pre, 0)..=(r.region_id, MemoryState::Pre, u64::MAX),
                )
                .count() as u64;
            if have != n {
                return Err(FormatError::Inconsistent {
                    offset: index_offset,
                    what: format!(
                        "region {} needs {n} memory chunks but the capture holds {have}",
                        r.region_id
                    ),
                });
            }
        }
        for g in &globals {
            if !region_ids.contains(&g.region_id) {
                return Err(FormatError::Inconsistent {
                    offset: index_offset,
                    what: format!("global {} names missing region {}", g.name, g.region_id),
                });
            }
        }
        pointer_slots.sort_unstable();
        pointer_slots.dedup();
        for &(region_id, offset) in &pointer_slots {
            let fits = regions
                .iter()
                .find(|r| r.region_id == region_id)
                .is_some_and(|r| offset.checked_add(8).is_some_and(|e| e <= r.size));
            if !fits {
                return Err(FormatError::Inconsistent {
                    offset: index_offset,
                    what: format!(
                        "pointer slot at offset {offset} lies outside region {region_id}"
                    ),
                });
            }
        }
        Ok(Capture {
            data,
            header,
            info,
            device,
            modules,
            dispatch,
            regions,
            globals,
            annotations,
            pointer_slots,
            chunks,
            skipped,
            event_count: end.event_count + 1,
        })
    }

    /// The bytes this capture was parsed from.
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    pub fn region(&self, region_id: u32) -> Option<&Region> {
        self.regions.iter().find(|r| r.region_id == region_id)
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

    /// Decodes a whole region's pre-dispatch bytes into `out`, chunks in parallel.
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
        let refs: Vec<&ChunkRef> = self.chunks(region_id, MemoryState::Pre).collect();
        out.par_chunks_mut(r.chunk_size as usize)
            .zip(refs.par_iter())
            .try_for_each(|(dst, c)| self.read_chunk_into(c, dst))
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

    /// Decodes every chunk against the CRC of its decoded bytes, in parallel. (The CRCs of
    /// the stored bytes are `scan`'s job; `verify` runs both.)
    pub fn verify_chunks(&self) -> Result<()> {
        self.all_chunks().par_iter().try_for_each(|c| {
            let mut buf = vec![0u8; c.raw_len as usize];
            self.read_chunk_into(c, &mut buf)
        })
    }
}

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
    let report = scan(data)?;
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
    cap.verify_chunks()?;
    let chunks = cap.all_chunks();
    Ok(VerifyReport {
        events: report.intact.len() as u64,
        chunks: chunks.len() as u64,
        raw_bytes: chunks.iter().map(|c| c.raw_len).sum(),
        stored_bytes: chunks.iter().map(|c| c.stored_len()).sum(),
    })
}
