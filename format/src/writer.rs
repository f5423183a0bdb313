//! Streaming writer. The header is written first with state RECORDING and rewritten by
//! `finish`, so a file whose writer died is recognisably incomplete. Memory is encoded in
//! batches on the rayon pool and written in order; nothing is held twice.

use std::collections::HashMap;
use std::io::{Seek, SeekFrom, Write};
use std::sync::Arc;

use rayon::prelude::*;
use serde::Serialize;

use crate::chunk::{encode_chunk, EncodedChunk, DEFAULT_LEVEL, MAX_CHUNK_SIZE};
use crate::codec;
use crate::error::{FormatError, Result};
use crate::events::*;
use crate::extents::{self, RegionExtents};
use crate::layout::*;
use crate::steps::{Action, KernelStep, OpStep, RangeInfo, Step};

/// Writer settings.
#[derive(Debug, Clone, Copy)]
pub struct WriterOptions {
    /// zstd level for memory chunks.
    pub level: i32,
    /// Metadata payloads larger than this are zstd-compressed.
    pub compress_metadata_above: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            level: DEFAULT_LEVEL,
            compress_metadata_above: 4096,
        }
    }
}

/// Encoded chunks ready to write: prefix bytes, payload CRC, stored bytes.
type EncodedBatch<'a> = Vec<([u8; CHUNK_PREFIX_LEN], u32, EncodedChunk<'a>)>;

struct RegionShape {
    region: Region,
    /// Present ranges, once `region_extents` declared them (shared: every `memory` call of
    /// the region reads them, and a large region may have many).
    present: Option<Arc<[(u64, u64)]>>,
    /// Whether a chunk of it was written (its extents can no longer be declared).
    chunks_written: bool,
}

/// Writes one `.krr` log to any seekable sink.
pub struct CaptureWriter<W: Write + Seek> {
    out: W,
    pos: u64,
    uuid: [u8; 16],
    index: Vec<IndexEntry>,
    regions: HashMap<u32, RegionShape>,
    opts: WriterOptions,
    /// CRCs of zero chunks by length (`zeros` writes many of the same length).
    zero_crcs: Vec<(u64, u32)>,
    /// The minor version the finished header states: the newest whose events it wrote.
    minor: u16,
}

impl<W: Write + Seek> CaptureWriter<W> {
    /// Starts a log: writes the header with state RECORDING.
    pub fn new(mut out: W, uuid: [u8; 16], opts: WriterOptions) -> Result<Self> {
        let header = FileHeader {
            major: VERSION_MAJOR,
            minor: BASE_MINOR,
            features: 0,
            uuid,
            state: STATE_RECORDING,
            index_offset: 0,
        };
        out.write_all(&header.encode())?;
        Ok(CaptureWriter {
            out,
            pos: HEADER_LEN as u64,
            uuid,
            index: Vec::new(),
            regions: HashMap::new(),
            opts,
            zero_crcs: Vec::new(),
            minor: BASE_MINOR,
        })
    }

    /// Bytes written so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    fn write_event(&mut self, kind: u16, flags: u16, parts: &[&[u8]]) -> Result<()> {
        let mut hasher = crc32fast::Hasher::new();
        for p in parts {
            hasher.update(p);
        }
        self.write_event_with_crc(kind, flags, parts, hasher.finalize())
    }

    /// Writes an event whose payload CRC was computed elsewhere (memory chunks: on the
    /// encoding threads, so this thread only writes).
    fn write_event_with_crc(
        &mut self,
        kind: u16,
        flags: u16,
        parts: &[&[u8]],
        payload_crc: u32,
    ) -> Result<()> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let frame = Frame {
            kind,
            flags,
            payload_crc,
            payload_len: len,
        };
        self.index.push(IndexEntry {
            kind,
            offset: self.pos,
        });
        self.out.write_all(&frame.encode())?;
        for p in parts {
            self.out.write_all(p)?;
        }
        self.pos += FRAME_LEN as u64 + len;
        Ok(())
    }

    fn write_meta<T: Serialize>(&mut self, kind: EventKind, value: &T) -> Result<()> {
        let bytes = codec::encode(value, kind.name())?;
        let mut flags = if kind.is_critical() { FLAG_CRITICAL } else { 0 };
        // A step operation's host bytes are the application's data (often zeros): compressed,
        // they would exceed the ratio a reader allows metadata to expand by (and rightly:
        // that limit stops zip bombs), so they are stored as they are, at most
        // `MAX_STEP_HOST_BYTES` each.
        if bytes.len() > self.opts.compress_metadata_above && kind != EventKind::StepOp {
            let z = zstd::bulk::compress(&bytes, 3).map_err(|e| FormatError::Encode {
                what: kind.name(),
                message: e.to_string(),
            })?;
            if z.len() < bytes.len() {
                flags |= FLAG_ZSTD;
                return self.write_event(kind as u16, flags, &[&z]);
            }
        }
        self.write_event(kind as u16, flags, &[&bytes])
    }

    /// Appends an event exactly as given (salvage and tests of unknown kinds use this).
    pub fn write_raw_event(&mut self, kind: u16, flags: u16, payload: &[u8]) -> Result<()> {
        // Salvage copies a range capture's steps through here: the file must still state
        // the minor that added them.
        if kind == EventKind::Step as u16 {
            self.minor = self.minor.max(STEP_MINOR);
        }
        if kind == EventKind::StepOp as u16 || kind == EventKind::Range as u16 {
            self.minor = self.minor.max(RANGE_MINOR);
        }
        if kind == EventKind::RegionExtents as u16 {
            self.minor = self.minor.max(EXTENTS_MINOR);
        }
        self.write_event(kind, flags, &[payload])
    }

    pub fn capture_info(&mut self, v: &CaptureInfo) -> Result<()> {
        self.write_meta(EventKind::CaptureInfo, v)
    }
    pub fn device(&mut self, v: &DeviceInfo) -> Result<()> {
        self.write_meta(EventKind::Device, v)
    }
    pub fn module(&mut self, v: &ModuleImage) -> Result<()> {
        self.write_meta(EventKind::Module, v)
    }
    pub fn dispatch(&mut self, v: &Dispatch) -> Result<()> {
        self.write_meta(EventKind::Dispatch, v)
    }
    pub fn module_global(&mut self, v: &ModuleGlobal) -> Result<()> {
        self.write_meta(EventKind::ModuleGlobal, v)
    }
    pub fn pointer_slots(&mut self, v: &PointerSlots) -> Result<()> {
        self.write_meta(EventKind::PointerSlots, v)
    }
    pub fn annotation(&mut self, v: &Annotation) -> Result<()> {
        self.write_meta(EventKind::Annotation, v)
    }

    pub fn timing_conditions(&mut self, v: &TimingConditions) -> Result<()> {
        self.write_meta(EventKind::TimingConditions, v)
    }

    pub fn graph_origin(&mut self, v: &GraphOrigin) -> Result<()> {
        self.write_meta(EventKind::GraphOrigin, v)
    }

    /// What redaction replaced and kept (written by `pack --redact`).
    pub fn redaction(&mut self, v: &Redaction) -> Result<()> {
        self.write_meta(EventKind::Redaction, v)
    }

    /// After the dispatch and the regions of the arrays.
    pub fn textures(&mut self, v: &Textures) -> Result<()> {
        self.write_meta(EventKind::Textures, v)
    }

    /// What salvage lost; after every memory chunk (it names post chunks written before it).
    /// The file then states format 1.1.
    pub fn salvage_record(&mut self, v: &SalvageRecord) -> Result<()> {
        self.minor = self.minor.max(SALVAGE_MINOR);
        self.write_meta(EventKind::Salvage, v)
    }

    /// The steps of a range capture, in issue order, right after the head (whose dispatch is
    /// the first kernel step's). The file then states format 1.2, or 1.3 when a step is not
    /// a kernel launch.
    pub fn steps(&mut self, steps: &[Step]) -> Result<()> {
        self.minor = self.minor.max(STEP_MINOR);
        for s in steps {
            match &s.action {
                Action::Kernel(d) => self.write_meta(
                    EventKind::Step,
                    &KernelStep {
                        stream: s.stream,
                        dispatch: d.clone(),
                    },
                )?,
                Action::Op(op) => {
                    self.minor = self.minor.max(RANGE_MINOR);
                    self.write_meta(
                        EventKind::StepOp,
                        &OpStep {
                            stream: s.stream,
                            op: op.clone(),
                        },
                    )?
                }
            }
        }
        Ok(())
    }

    /// The range as a whole, after its steps. The file then states format 1.3.
    pub fn range_info(&mut self, v: &RangeInfo) -> Result<()> {
        self.minor = self.minor.max(RANGE_MINOR);
        self.write_meta(EventKind::Range, v)
    }

    /// Declares a region; its memory follows with `memory`.
    pub fn region(&mut self, v: &Region) -> Result<()> {
        if v.chunk_size == 0 || v.chunk_size > MAX_CHUNK_SIZE {
            return Err(FormatError::Limit {
                what: "chunk size",
                message: format!("{} not in 1..={MAX_CHUNK_SIZE}", v.chunk_size),
            });
        }
        if self.regions.contains_key(&v.region_id) {
            return Err(FormatError::Limit {
                what: "region id",
                message: format!("region {} declared twice", v.region_id),
            });
        }
        self.write_meta(EventKind::Region, v)?;
        self.regions.insert(
            v.region_id,
            RegionShape {
                region: v.clone(),
                present: None,
                chunks_written: false,
            },
        );
        Ok(())
    }

    /// Declares which bytes of a region the capture holds (captured by touched pages), after
    /// the region and before its chunks; the rules are the reader's
    /// (`extents::extents_problem`). From then on `memory` and `zeros` write only the chunks
    /// that hold a present byte and refuse absent bytes that are not zero. The file then
    /// states format 1.4.
    pub fn region_extents(&mut self, v: &RegionExtents) -> Result<()> {
        let refused = |message: String| FormatError::Limit {
            what: "region extents",
            message,
        };
        let shape = self
            .regions
            .get(&v.region_id)
            .ok_or_else(|| refused(format!("extents for undeclared region {}", v.region_id)))?;
        if shape.present.is_some() {
            return Err(refused(format!(
                "region {} has its extents already",
                v.region_id
            )));
        }
        if shape.chunks_written {
            return Err(refused(format!(
                "region {}'s chunks are written: extents come before them",
                v.region_id
            )));
        }
        if let Some(p) = extents::extents_problem(&shape.region, v) {
            return Err(refused(p));
        }
        self.minor = self.minor.max(EXTENTS_MINOR);
        self.write_meta(EventKind::RegionExtents, v)?;
        if let Some(shape) = self.regions.get_mut(&v.region_id) {
            shape.present = Some(v.present.as_slice().into());
        }
        Ok(())
    }

    /// The chunk size of `region_id`, once `[offset, offset + len)` is checked to lie inside
    /// it and to start at a chunk boundary and end at one or at the region's end.
    fn check_range(&self, region_id: u32, offset: u64, len: u64) -> Result<u64> {
        let shape = self.regions.get(&region_id).ok_or(FormatError::Limit {
            what: "region id",
            message: format!("memory for undeclared region {region_id}"),
        })?;
        let (size, cs) = (shape.region.size, shape.region.chunk_size);
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= size)
            .ok_or_else(|| FormatError::Limit {
                what: "memory range",
                message: format!(
                    "{len} bytes at offset {offset} exceed region {region_id} of {size} bytes"
                ),
            })?;
        if !offset.is_multiple_of(cs) || (!end.is_multiple_of(cs) && end != size) {
            return Err(FormatError::Limit {
                what: "memory range",
                message: format!("[{offset}, {end}) is not aligned to chunk size {cs}"),
            });
        }
        Ok(cs)
    }

    /// Writes `len` bytes of zeros at `offset` as zero chunks, without being handed the bytes:
    /// for memory known to be zero (the recorder learns it on the GPU). The range rules are
    /// `memory`'s.
    pub fn zeros(
        &mut self,
        region_id: u32,
        state: MemoryState,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let cs = self.check_range(region_id, offset, len)?;
        let present = self.present_of(region_id);
        let mut at = offset;
        while at < offset + len {
            let n = cs.min(offset + len - at);
            if present
                .as_ref()
                .is_some_and(|p| !extents::holds_present(p, at, n))
            {
                at += n;
                continue;
            }
            let raw_crc = match self.zero_crcs.iter().find(|(l, _)| *l == n) {
                Some(&(_, c)) => c,
                None => {
                    let c = crate::layout::crc(&vec![0u8; n as usize]);
                    self.zero_crcs.push((n, c));
                    c
                }
            };
            let prefix = ChunkPrefix {
                region_id,
                state,
                encoding: crate::layout::ChunkEncoding::Zero,
                offset: at,
                raw_len: n,
                raw_crc,
            }
            .encode();
            self.write_event(EventKind::MemoryChunk as u16, FLAG_CRITICAL, &[&prefix])?;
            at += n;
        }
        Ok(())
    }

    /// Writes `data`, the region's bytes starting at `offset` (a multiple of the region's chunk
    /// size), as chunks of `state`. `data` must end at a chunk boundary or at the region's end.
    /// Call repeatedly to stream a region larger than memory.
    pub fn memory(
        &mut self,
        region_id: u32,
        state: MemoryState,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        let cs = self.check_range(region_id, offset, data.len() as u64)?;
        let Some(present) = self.present_of(region_id) else {
            return self.memory_run(region_id, state, offset, data, cs);
        };
        for (o, l) in extents::absent_ranges(&present, offset, data.len() as u64) {
            let at = (o - offset) as usize;
            if data[at..at + l as usize].iter().any(|&b| b != 0) {
                return Err(FormatError::Limit {
                    what: "memory",
                    message: format!(
                        "region {region_id} holds non-zero bytes in its absent range [{o}, {}): \
                         absent bytes are stored as zero",
                        o + l
                    ),
                });
            }
        }
        // Runs of consecutive chunks that hold a present byte: the others are not stored.
        let end = offset + data.len() as u64;
        let mut run: Option<(u64, u64)> = None;
        let mut at = offset;
        while at < end {
            let n = cs.min(end - at);
            if extents::holds_present(&present, at, n) {
                run = Some(run.map_or((at, at + n), |r| (r.0, at + n)));
            } else if let Some((s, e)) = run.take() {
                let part = &data[(s - offset) as usize..(e - offset) as usize];
                self.memory_run(region_id, state, s, part, cs)?;
            }
            at += n;
        }
        if let Some((s, e)) = run {
            let part = &data[(s - offset) as usize..(e - offset) as usize];
            self.memory_run(region_id, state, s, part, cs)?;
        }
        Ok(())
    }

    /// The present ranges of a region with extents (none: held whole), marking that its
    /// chunks have begun.
    fn present_of(&mut self, region_id: u32) -> Option<Arc<[(u64, u64)]>> {
        let shape = self.regions.get_mut(&region_id)?;
        shape.chunks_written = true;
        shape.present.clone()
    }

    /// Writes chunks of `data` from `offset` (checked by `check_range`), in parallel batches.
    fn memory_run(
        &mut self,
        region_id: u32,
        state: MemoryState,
        offset: u64,
        data: &[u8],
        cs: u64,
    ) -> Result<()> {
        let level = self.opts.level;
        // Batches bound the encoded bytes held at once; the next batch is encoded while the
        // previous one is written, so the file I/O hides behind compression.
        let batch = (rayon::current_num_threads() * 2).max(2);
        let pieces: Vec<&[u8]> = data.chunks(cs as usize).collect();
        let mut pending: Option<EncodedBatch<'_>> = None;
        for (bi, group) in pieces.chunks(batch).enumerate() {
            let first = offset + (bi * batch) as u64 * cs;
            let previous = pending.take();
            // The encoding runs on the rayon pool from a helper thread; this thread writes.
            // (The sink need not be Send, so the writing stays here.)
            let (encoded, written) = std::thread::scope(|scope| {
                let job = scope.spawn(|| {
                    group
                        .par_iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let enc = encode_chunk(c, level);
                            let prefix = ChunkPrefix {
                                region_id,
                                state,
                                encoding: enc.encoding,
                                offset: first + i as u64 * cs,
                                raw_len: c.len() as u64,
                                raw_crc: enc.raw_crc,
                            }
                            .encode();
                            let mut h = crc32fast::Hasher::new();
                            h.update(&prefix);
                            h.update(&enc.stored);
                            (prefix, h.finalize(), enc)
                        })
                        .collect::<Vec<_>>()
                });
                let written = match previous {
                    Some(batch) => self.write_chunks(batch),
                    None => Ok(()),
                };
                (job.join(), written)
            });
            let encoded = encoded.map_err(|_| FormatError::Encode {
                what: "memory chunk",
                message: "the compression thread panicked".into(),
            })?;
            written?;
            pending = Some(encoded);
        }
        if let Some(batch) = pending {
            self.write_chunks(batch)?;
        }
        Ok(())
    }

    fn write_chunks(&mut self, batch: EncodedBatch<'_>) -> Result<()> {
        for (prefix, crc, enc) in batch {
            self.write_event_with_crc(
                EventKind::MemoryChunk as u16,
                FLAG_CRITICAL,
                &[&prefix, &enc.stored],
                crc,
            )?;
        }
        Ok(())
    }

    /// Writes the index, END and trailer, then marks the header COMPLETE.
    pub fn finish(mut self) -> Result<W> {
        let index_offset = self.pos;
        let entries = std::mem::take(&mut self.index);
        let event_count = entries.len() as u32 + 1; // the index itself
        self.write_meta(EventKind::Index, &entries)?;
        let end_offset = self.pos;
        let end = EndMark {
            event_count,
            index_offset,
        };
        self.write_meta(EventKind::End, &end)?;
        let trailer = Trailer {
            index_offset,
            end_offset,
            event_count: event_count + 1,
        };
        self.out.write_all(&trailer.encode())?;
        let header = FileHeader {
            major: VERSION_MAJOR,
            minor: self.minor,
            features: 0,
            uuid: self.uuid,
            state: STATE_COMPLETE,
            index_offset,
        };
        self.out.flush()?;
        self.out.seek(SeekFrom::Start(0))?;
        self.out.write_all(&header.encode())?;
        self.out.seek(SeekFrom::End(0))?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// What describes a capture's dispatch, written first (after the header), in this order:
/// capture info, device, code objects, the dispatch. The one order of a capture file:
/// [`CaptureHead`]; the regions, each declared before its chunks (its pre-state chunks, its
/// post-state chunks after them, at the latest before the tail); [`CaptureTail`]; then what a
/// rewriter adds about the post chunks (salvage record, reference annotation). Every writer of captures (the recorder, `pack`, the player's save)
/// goes through these two, so the order is known once.
#[derive(Debug, Clone, Copy)]
pub struct CaptureHead<'a> {
    pub info: Option<&'a CaptureInfo>,
    pub device: Option<&'a DeviceInfo>,
    /// The cubin first, then what else was kept (PTX).
    pub modules: &'a [ModuleImage],
    pub dispatch: &'a Dispatch,
}

/// What follows the memory chunks, in this order: module globals, textures (when any),
/// pointer slots (when any), timing conditions, graph origin, redaction listing, annotations.
#[derive(Debug, Clone, Copy)]
pub struct CaptureTail<'a> {
    pub globals: &'a [ModuleGlobal],
    pub textures: &'a Textures,
    pub pointer_slots: &'a [(u32, u64)],
    pub timing: Option<&'a TimingConditions>,
    pub graph: Option<&'a GraphOrigin>,
    pub redaction: Option<&'a Redaction>,
    pub annotations: &'a [Annotation],
}

impl<W: Write + Seek> CaptureWriter<W> {
    /// Writes a capture's head (see [`CaptureHead`] for the order).
    pub fn head(&mut self, h: &CaptureHead<'_>) -> Result<()> {
        if let Some(i) = h.info {
            self.capture_info(i)?;
        }
        if let Some(d) = h.device {
            self.device(d)?;
        }
        for m in h.modules {
            self.module(m)?;
        }
        self.dispatch(h.dispatch)
    }

    /// Writes a capture's tail (see [`CaptureTail`] for the order).
    pub fn tail(&mut self, t: &CaptureTail<'_>) -> Result<()> {
        for g in t.globals {
            self.module_global(g)?;
        }
        if !t.textures.is_empty() {
            self.textures(t.textures)?;
        }
        if !t.pointer_slots.is_empty() {
            self.pointer_slots(&PointerSlots {
                slots: t.pointer_slots.to_vec(),
            })?;
        }
        if let Some(timing) = t.timing {
            self.timing_conditions(timing)?;
        }
        if let Some(g) = t.graph {
            self.graph_origin(g)?;
        }
        if let Some(r) = t.redaction {
            self.redaction(r)?;
        }
        for a in t.annotations {
            self.annotation(a)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod order_tests {
    use super::*;
    use std::io::Cursor;

    fn dispatch() -> Dispatch {
        Dispatch::of_kernel("k")
    }

    fn module(id: u32) -> ModuleImage {
        ModuleImage {
            module_id: id,
            kind: ModuleKind::Cubin,
            arch: 90,
            image: vec![1, 2, 3],
        }
    }

    fn note(value: &str) -> Annotation {
        Annotation {
            key: "recorder".into(),
            value: value.into(),
        }
    }

    #[test]
    fn head_and_tail_write_their_events_in_the_one_order() {
        let mut w = CaptureWriter::new(Cursor::new(Vec::new()), [0; 16], WriterOptions::default())
            .expect("writer");
        let d = dispatch();
        let device = DeviceInfo::default();
        w.head(&CaptureHead {
            info: None,
            device: Some(&device),
            modules: &[module(0), module(1)],
            dispatch: &d,
        })
        .expect("head");
        let globals = [ModuleGlobal {
            module_id: 0,
            name: "g".into(),
            region_id: 0,
        }];
        let timing = TimingConditions::default();
        w.tail(&CaptureTail {
            globals: &globals,
            textures: &Textures::default(),
            pointer_slots: &[(0, 8)],
            timing: Some(&timing),
            graph: None,
            redaction: None,
            annotations: &[note("a"), note("b")],
        })
        .expect("tail");
        let bytes = w.finish().expect("finish").into_inner();
        let kinds: Vec<u16> = crate::reader::scan(&bytes)
            .expect("scan")
            .intact
            .iter()
            .map(|e| e.frame.kind)
            .collect();
        let expected = [
            EventKind::Device,
            EventKind::Module,
            EventKind::Module,
            EventKind::Dispatch,
            // No textures: none written.
            EventKind::ModuleGlobal,
            EventKind::PointerSlots,
            EventKind::TimingConditions,
            EventKind::Annotation,
            EventKind::Annotation,
            EventKind::Index,
            EventKind::End,
        ]
        .map(|k| k as u16);
        assert_eq!(kinds, expected);
    }
}
