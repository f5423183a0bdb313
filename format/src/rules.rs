//! The rules of each event kind, in one place: what an event must hold, what must precede it,
//! what it refers to. [`CaptureBuilder`] applies them event by event; `Capture::parse` builds
//! through it (and fails on the first broken rule) and salvage builds through it (and drops
//! what breaks a rule, then everything that refers to what it dropped). Metadata decoding is
//! bounded here too: a file cannot make the reader hold more than it plausibly encodes.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;

use serde::de::DeserializeOwned;

use crate::chunk::ChunkRef;
use crate::chunk::MAX_CHUNK_SIZE;
use crate::codec::{self, METADATA_LIMIT};
use crate::error::{FormatError, Result};
use crate::events::*;
use crate::extents::{self, RegionExtents};
use crate::layout::*;
use crate::range_rules;
use crate::steps::{KernelStep, OpStep, RangeInfo, Step};

/// A zstd metadata payload may decode to at most this many times its stored size (module
/// images and PTX compress 3-15x; 64x leaves room and stops a few KB from becoming GBs)...
pub const METADATA_RATIO: u64 = 64;
/// ...or to this many bytes, whichever is larger (tiny payloads have poor ratios to bound).
pub const METADATA_FLOOR: u64 = 1 << 20;
/// All metadata of one file decodes to at most this, plus `METADATA_PER_FILE_BYTE` x its size.
pub const METADATA_BUDGET_BASE: u64 = 48 << 20;
pub const METADATA_PER_FILE_BYTE: u64 = 4;

/// How many decoded metadata bytes a file may still produce.
#[derive(Debug, Clone, Copy)]
pub struct MetaBudget {
    left: u64,
}

impl MetaBudget {
    /// The budget of a file of `file_len` bytes.
    pub fn for_file(file_len: u64) -> MetaBudget {
        MetaBudget {
            left: METADATA_BUDGET_BASE
                .saturating_add(file_len.saturating_mul(METADATA_PER_FILE_BYTE)),
        }
    }

    fn take(&mut self, n: u64, offset: u64, what: &str) -> Result<()> {
        if n > self.left {
            return Err(FormatError::Decode {
                offset,
                what: what.to_string(),
                message: format!(
                    "the file's metadata decodes to more than it can plausibly hold ({} bytes of \
                     budget left for {n}); the file is damaged or crafted",
                    self.left
                ),
            });
        }
        self.left -= n;
        Ok(())
    }
}

pub(crate) fn payload_of<'a>(data: &'a [u8], offset: u64, frame: &Frame) -> Result<&'a [u8]> {
    slice_at(
        data,
        offset + FRAME_LEN as u64,
        frame.payload_len,
        "event payload",
    )
}

pub(crate) fn check_payload_crc(
    payload: &[u8],
    offset: u64,
    frame: &Frame,
    what: &str,
) -> Result<()> {
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

/// Decodes one metadata event (checking its payload CRC), within `budget`.
pub(crate) fn decode_meta<T: DeserializeOwned>(
    data: &[u8],
    offset: u64,
    frame: &Frame,
    kind: EventKind,
    budget: &mut MetaBudget,
) -> Result<T> {
    let payload = payload_of(data, offset, frame)?;
    check_payload_crc(payload, offset, frame, kind.name())?;
    let payload_offset = offset + FRAME_LEN as u64;
    if frame.flags & FLAG_ZSTD == 0 {
        budget.take(payload.len() as u64, payload_offset, kind.name())?;
        return codec::decode(payload, payload_offset, kind.name());
    }
    let zstd_err = |e: std::io::Error| FormatError::Decode {
        offset: payload_offset,
        what: kind.name().into(),
        message: format!("zstd: {e}"),
    };
    // The most this payload may decode to: by ratio, by the file's budget, by the codec.
    let limit = (payload.len() as u64)
        .saturating_mul(METADATA_RATIO)
        .max(METADATA_FLOOR)
        .min(METADATA_LIMIT as u64)
        .min(budget.left);
    let dec = zstd::stream::read::Decoder::with_buffer(payload).map_err(zstd_err)?;
    let mut out = Vec::new();
    dec.take(limit + 1)
        .read_to_end(&mut out)
        .map_err(zstd_err)?;
    if out.len() as u64 > limit {
        return Err(FormatError::Decode {
            offset: payload_offset,
            what: kind.name().into(),
            message: format!(
                "{} compressed bytes decode to more than {limit} bytes, more than the file can \
                 plausibly hold (at most {METADATA_RATIO}x per event, within a budget for the \
                 file); the file is damaged or crafted",
                payload.len()
            ),
        });
    }
    budget.take(out.len() as u64, payload_offset, kind.name())?;
    codec::decode(&out, payload_offset, kind.name())
}

/// What is wrong with kernel step `index` of a range capture, if anything: its module must be
/// declared (modules precede the steps) and its pointer words lie inside its arguments.
pub fn step_problem(d: &Dispatch, index: usize, modules: &[ModuleImage]) -> Option<String> {
    if !modules.iter().any(|m| m.module_id == d.module_id) {
        return Some(format!(
            "step {index} ({}) names module {}, which the capture does not hold",
            d.kernel_name, d.module_id
        ));
    }
    if d.pointer_words
        .iter()
        .any(|&w| w as usize + 8 > d.arg_bytes.len())
    {
        return Some(format!(
            "step {index} ({}): a pointer word lies outside the kernel-argument bytes",
            d.kernel_name
        ));
    }
    None
}

/// What an accepted event is about; salvage drops the events that refer to dropped regions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventRef {
    Region(u32),
    /// The extents of a region (REGION_EXTENTS).
    Extents(u32),
    Chunk(u32),
    Global(u32),
    PointerSlots,
    /// The textures event, with the regions of its arrays.
    Textures(Vec<u32>),
    /// The salvage record of an earlier salvage.
    Salvage,
    /// The range event (salvage rewrites it: its digests may cover dropped regions).
    Range,
    /// An unknown non-critical event, skipped.
    Skipped,
    Other,
}

/// Everything a capture holds, as assembled event by event under the rules.
#[derive(Debug)]
pub struct CaptureBuilder<'a> {
    data: &'a [u8],
    header: FileHeader,
    budget: MetaBudget,
    pub info: Option<CaptureInfo>,
    pub device: Option<DeviceInfo>,
    pub modules: Vec<ModuleImage>,
    pub dispatch: Option<Dispatch>,
    /// A range capture's steps in issue order (empty for a single capture).
    pub steps: Vec<Step>,
    /// What the range is as a whole (the RANGE event, since 1.3).
    pub range: Option<RangeInfo>,
    pub regions: Vec<Region>,
    /// The extents of the regions captured by touched pages (REGION_EXTENTS, since 1.4); a
    /// region without is held whole.
    pub extents: BTreeMap<u32, RegionExtents>,
    pub globals: Vec<ModuleGlobal>,
    pub annotations: Vec<Annotation>,
    pub timing: Option<TimingConditions>,
    pub graph: Option<GraphOrigin>,
    pub redaction: Option<Redaction>,
    pub pointer_slots: Vec<(u32, u64)>,
    pub textures: Textures,
    pub chunks: BTreeMap<(u32, MemoryState, u64), ChunkRef>,
    pub skipped: Vec<(u64, u16)>,
    /// What an earlier salvage lost (the SALVAGE event).
    pub salvage: Option<SalvageRecord>,
    /// Regions `drop_regions` removed (as declared): an op step may still name them.
    lost_regions: Vec<Region>,
}

impl<'a> CaptureBuilder<'a> {
    pub fn new(data: &'a [u8], header: FileHeader) -> CaptureBuilder<'a> {
        CaptureBuilder {
            data,
            header,
            budget: MetaBudget::for_file(data.len() as u64),
            info: None,
            device: None,
            modules: Vec::new(),
            dispatch: None,
            steps: Vec::new(),
            range: None,
            regions: Vec::new(),
            extents: BTreeMap::new(),
            globals: Vec::new(),
            annotations: Vec::new(),
            timing: None,
            graph: None,
            redaction: None,
            pointer_slots: Vec::new(),
            textures: Textures::default(),
            chunks: BTreeMap::new(),
            skipped: Vec::new(),
            salvage: None,
            lost_regions: Vec::new(),
        }
    }

    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// Decodes a metadata event within this file's budget (the index and END use it too).
    pub(crate) fn decode<T: DeserializeOwned>(
        &mut self,
        offset: u64,
        frame: &Frame,
        kind: EventKind,
    ) -> Result<T> {
        decode_meta(self.data, offset, frame, kind, &mut self.budget)
    }

    fn region(&self, region_id: u32) -> Option<&Region> {
        self.regions.iter().find(|r| r.region_id == region_id)
    }

    /// Applies the rules of one event (frame at `off`, payload within the data). A chunk's
    /// stored bytes are not checked here (that is `verify`'s job); metadata CRCs are.
    pub fn add(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        if frame.flags & !KNOWN_FLAGS != 0 {
            return Err(FormatError::Inconsistent {
                offset: off + 2,
                what: format!("unknown frame flags {:#06x}", frame.flags),
            });
        }
        let Some(kind) = EventKind::from_u16(frame.kind) else {
            if frame.flags & FLAG_CRITICAL != 0 {
                return Err(FormatError::UnknownCritical {
                    offset: off,
                    kind: frame.kind,
                    found_major: self.header.major,
                    found_minor: self.header.minor,
                    supported_major: VERSION_MAJOR,
                    supported_minor: VERSION_MINOR,
                });
            }
            self.skipped.push((off, frame.kind));
            return Ok(EventRef::Skipped);
        };
        match kind {
            EventKind::CaptureInfo => {
                self.info = Some(self.decode(off, frame, kind)?);
                Ok(EventRef::Other)
            }
            EventKind::Device => {
                self.device = Some(self.decode(off, frame, kind)?);
                Ok(EventRef::Other)
            }
            EventKind::Module => self.add_module(off, frame),
            EventKind::Dispatch => self.add_dispatch(off, frame),
            EventKind::Region => self.add_region(off, frame),
            EventKind::MemoryChunk => self.add_chunk(off, frame),
            EventKind::ModuleGlobal => self.add_global(off, frame),
            EventKind::Annotation => {
                let a: Annotation = self.decode(off, frame, kind)?;
                self.annotations.push(a);
                Ok(EventRef::Other)
            }
            EventKind::TimingConditions => {
                self.timing = Some(self.decode(off, frame, kind)?);
                Ok(EventRef::Other)
            }
            EventKind::GraphOrigin => {
                self.graph = Some(self.decode(off, frame, kind)?);
                Ok(EventRef::Other)
            }
            EventKind::Redaction => {
                self.redaction = Some(self.decode(off, frame, kind)?);
                Ok(EventRef::Other)
            }
            EventKind::PointerSlots => self.add_pointer_slots(off, frame),
            EventKind::Textures => self.add_textures(off, frame),
            EventKind::Salvage => self.add_salvage(off, frame),
            EventKind::Step => self.add_step(off, frame),
            EventKind::StepOp => self.add_step_op(off, frame),
            EventKind::Range => self.add_range(off, frame),
            EventKind::RegionExtents => self.add_extents(off, frame),
            EventKind::Index | EventKind::End => Err(FormatError::Inconsistent {
                offset: off,
                what: format!("{} event inside the event area", kind.name()),
            }),
        }
    }

    /// MODULE: ids are unique.
    fn add_module(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        let inconsistent = |what: String| FormatError::Inconsistent { offset: off, what };
        let m: ModuleImage = self.decode(off, frame, EventKind::Module)?;
        if self.modules.iter().any(|x| x.module_id == m.module_id) {
            return Err(inconsistent(format!(
                "module {} appears twice",
                m.module_id
            )));
        }
        self.modules.push(m);
        Ok(EventRef::Other)
    }

    /// DISPATCH: exactly one; its pointer words lie inside its argument bytes.
    fn add_dispatch(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        let inconsistent = |what: String| FormatError::Inconsistent { offset: off, what };
        if self.dispatch.is_some() {
            return Err(inconsistent(
                "a second dispatch event (a capture holds one)".into(),
            ));
        }
        let d: Dispatch = self.decode(off, frame, EventKind::Dispatch)?;
        if d.pointer_words
            .iter()
            .any(|&w| w as usize + 8 > d.arg_bytes.len())
        {
            return Err(inconsistent(
                "a pointer word lies outside the kernel-argument bytes".into(),
            ));
        }
        self.dispatch = Some(d);
        Ok(EventRef::Other)
    }

    /// STEP: only in a file that states 1.2 or newer, after the DISPATCH (the first kernel
    /// step's copy), its module declared, its pointer words inside its argument bytes.
    fn add_step(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        self.step_allowed(off, EventKind::Step, STEP_MINOR)?;
        let s: KernelStep = self.decode(off, frame, EventKind::Step)?;
        step_problem(&s.dispatch, self.steps.len(), &self.modules).map_or(Ok(()), |p| {
            Err(FormatError::Inconsistent {
                offset: off,
                what: p,
            })
        })?;
        self.steps.push(Step::kernel(s.stream, s.dispatch));
        Ok(EventRef::Other)
    }

    /// STEP_OP: as STEP, in a file that states 1.3 or newer (its device spans are checked
    /// against the regions once all are known, in `check_complete`).
    fn add_step_op(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        self.step_allowed(off, EventKind::StepOp, RANGE_MINOR)?;
        let s: OpStep = self.decode(off, frame, EventKind::StepOp)?;
        self.steps.push(Step::op(s.stream, s.op));
        Ok(EventRef::Other)
    }

    /// RANGE: once, in a file that states 1.3 or newer, after the steps.
    fn add_range(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        let inconsistent = |what: String| FormatError::Inconsistent { offset: off, what };
        self.step_allowed(off, EventKind::Range, RANGE_MINOR)?;
        if self.range.is_some() {
            return Err(inconsistent("a second range event".into()));
        }
        if self.steps.is_empty() {
            return Err(inconsistent("a range event before any step".into()));
        }
        let r: RangeInfo = self.decode(off, frame, EventKind::Range)?;
        self.range = Some(r);
        Ok(EventRef::Range)
    }

    /// A step or range event needs a file of `minor` or newer and the DISPATCH before it.
    fn step_allowed(&self, off: u64, kind: EventKind, minor: u16) -> Result<()> {
        let inconsistent = |what: String| FormatError::Inconsistent { offset: off, what };
        if self.header.minor < minor {
            return Err(inconsistent(format!(
                "a {} event in a file that states format {}.{} (it needs {}.{minor})",
                kind.name(),
                self.header.major,
                self.header.minor,
                self.header.major
            )));
        }
        if self.dispatch.is_none() {
            return Err(inconsistent(format!(
                "a {} event before the dispatch event",
                kind.name()
            )));
        }
        Ok(())
    }

    /// REGION: a sane chunk size, no wrap, ids unique.
    fn add_region(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        let inconsistent = |what: String| FormatError::Inconsistent { offset: off, what };
        let r: Region = self.decode(off, frame, EventKind::Region)?;
        if r.chunk_size == 0 || r.chunk_size > MAX_CHUNK_SIZE {
            return Err(inconsistent(format!(
                "region {} has chunk size {} (1 to {MAX_CHUNK_SIZE} allowed)",
                r.region_id, r.chunk_size
            )));
        }
        if r.address.checked_add(r.size).is_none() {
            return Err(inconsistent(format!(
                "region {} wraps the address space",
                r.region_id
            )));
        }
        if self.region(r.region_id).is_some() {
            return Err(inconsistent(format!(
                "region {} declared twice",
                r.region_id
            )));
        }
        let id = r.region_id;
        self.regions.push(r);
        Ok(EventRef::Region(id))
    }

    /// REGION_EXTENTS: in a file that states 1.4 or newer, once per region, after its region
    /// and before its first chunk, as `extents::extents_problem` accepts.
    fn add_extents(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        let inconsistent = |what: String| FormatError::Inconsistent { offset: off, what };
        if self.header.minor < EXTENTS_MINOR {
            return Err(inconsistent(format!(
                "a region extents event in a file that states format {}.{} (it needs {}.{EXTENTS_MINOR})",
                self.header.major, self.header.minor, self.header.major
            )));
        }
        let e: RegionExtents = self.decode(off, frame, EventKind::RegionExtents)?;
        let id = e.region_id;
        let Some(region) = self.region(id) else {
            return Err(inconsistent(format!(
                "extents for region {id} before (or without) its region"
            )));
        };
        if self.extents.contains_key(&id) {
            return Err(inconsistent(format!(
                "a second extents event for region {id}"
            )));
        }
        if self
            .chunks
            .range((id, MemoryState::Pre, 0)..)
            .next()
            .is_some_and(|(k, _)| k.0 == id)
        {
            return Err(inconsistent(format!(
                "extents for region {id} after its first memory chunk (they precede its chunks)"
            )));
        }
        if let Some(p) = extents::extents_problem(region, &e) {
            return Err(inconsistent(p));
        }
        self.extents.insert(id, e);
        Ok(EventRef::Extents(id))
    }

    /// MEMORY_CHUNK: after its region, at a chunk boundary inside it, of the size the region implies, stored as its encoding says, once.
    fn add_chunk(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        let inconsistent = |what: String| FormatError::Inconsistent { offset: off, what };
        let payload = payload_of(self.data, off, frame)?;
        let p = ChunkPrefix::decode(payload, off + FRAME_LEN as u64)?;
        let region = self.region(p.region_id).ok_or_else(|| {
            inconsistent(format!(
                "memory chunk for region {} before (or without) its region",
                p.region_id
            ))
        })?;
        let expected_len = region.size.saturating_sub(p.offset).min(region.chunk_size);
        if p.offset % region.chunk_size != 0 || p.offset >= region.size || p.raw_len != expected_len
        {
            return Err(inconsistent(format!(
                "chunk of {} bytes at offset {} does not fit region {} ({} bytes, chunk size {})",
                p.raw_len, p.offset, region.region_id, region.size, region.chunk_size
            )));
        }
        if let Some(e) = self.extents.get(&p.region_id) {
            if !extents::holds_present(&e.present, p.offset, p.raw_len) {
                return Err(inconsistent(format!(
                    "{:?} chunk at offset {} of region {} holds no present byte (the region's \
                     extents leave it wholly absent, so it has no chunk)",
                    p.state, p.offset, p.region_id
                )));
            }
        }
        let stored = frame.payload_len - CHUNK_PREFIX_LEN as u64;
        if (p.encoding == ChunkEncoding::Raw && stored != p.raw_len)
            || (p.encoding == ChunkEncoding::Zero && stored != 0)
        {
            return Err(inconsistent(format!(
                "{:?} chunk stores {stored} bytes for {} raw bytes",
                p.encoding, p.raw_len
            )));
        }
        let key = (p.region_id, p.state, p.offset);
        if self.chunks.contains_key(&key) {
            return Err(inconsistent(format!(
                "duplicate {:?} chunk at offset {} of region {}",
                p.state, p.offset, p.region_id
            )));
        }
        self.chunks.insert(
            key,
            ChunkRef {
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
            },
        );
        Ok(EventRef::Chunk(p.region_id))
    }

    /// MODULE_GLOBAL: after the region holding its bytes.
    fn add_global(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        let inconsistent = |what: String| FormatError::Inconsistent { offset: off, what };
        let g: ModuleGlobal = self.decode(off, frame, EventKind::ModuleGlobal)?;
        if self.region(g.region_id).is_none() {
            return Err(inconsistent(format!(
                "global {} names region {}, which is not declared before it",
                g.name, g.region_id
            )));
        }
        let id = g.region_id;
        self.globals.push(g);
        Ok(EventRef::Global(id))
    }

    /// POINTER_SLOTS: every slot is an 8-byte word inside a region declared before.
    fn add_pointer_slots(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        let inconsistent = |what: String| FormatError::Inconsistent { offset: off, what };
        let p: PointerSlots = self.decode(off, frame, EventKind::PointerSlots)?;
        for &(region_id, offset) in &p.slots {
            let fits = self
                .region(region_id)
                .is_some_and(|r| offset.checked_add(8).is_some_and(|e| e <= r.size));
            if !fits {
                return Err(inconsistent(format!(
                    "pointer slot at offset {offset} lies outside region {region_id}"
                )));
            }
        }
        self.pointer_slots.extend(p.slots);
        Ok(EventRef::PointerSlots)
    }

    /// TEXTURES: once, after the dispatch and the array regions; each array's region is a
    /// CUDA-array region exactly as large as its texels; each object names an array of its
    /// kind and handle words inside the argument bytes.
    fn add_textures(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        let inconsistent = |what: String| FormatError::Inconsistent { offset: off, what };
        if !self.textures.is_empty() {
            return Err(inconsistent("a second textures event".into()));
        }
        let t: Textures = self.decode(off, frame, EventKind::Textures)?;
        let Some(d) = &self.dispatch else {
            return Err(inconsistent(
                "textures event before the dispatch it belongs to".into(),
            ));
        };
        let arg_len = d.arg_bytes.len() as u64;
        for (i, a) in t.arrays.iter().enumerate() {
            if a.levels > MAX_MIP_LEVELS || !matches!(a.channels, 1 | 2 | 4) {
                return Err(inconsistent(format!(
                    "array {i}: {} channels, {} mip levels",
                    a.channels, a.levels
                )));
            }
            let Some(bytes) = a.texel_bytes() else {
                return Err(inconsistent(format!(
                    "array {i}: format {:#x} unknown or its size overflows",
                    a.format
                )));
            };
            match self.region(a.region_id) {
                Some(r) if r.kind == MemoryKind::CudaArray && r.size == bytes => {}
                Some(r) => {
                    return Err(inconsistent(format!(
                        "array {i} needs a CUDA-array region of {bytes} bytes; region {} is {:?} of {} bytes",
                        a.region_id, r.kind, r.size
                    )))
                }
                None => {
                    return Err(inconsistent(format!(
                        "array {i} names region {}, which is not declared before it",
                        a.region_id
                    )))
                }
            }
        }
        for (i, o) in t.objects.iter().enumerate() {
            let array = match o.resource {
                TextureResource::Array { index } => Some((index, false)),
                TextureResource::Mipmapped { index } => Some((index, true)),
                _ => None,
            };
            if let Some((index, mip)) = array {
                let fits = t
                    .arrays
                    .get(index as usize)
                    .is_some_and(|a| (a.levels > 0) == mip);
                if !fits {
                    return Err(inconsistent(format!(
                        "texture object {i} views array {index}, which is not a{} array of this capture",
                        if mip { " mipmapped" } else { " plain" }
                    )));
                }
            }
            if o.arg_words.iter().any(|&w| w as u64 + 8 > arg_len) {
                return Err(inconsistent(format!(
                    "texture object {i} has a handle word outside the kernel-argument bytes"
                )));
            }
            for &(region_id, offset) in &o.memory_words {
                let fits = self.region(region_id).is_some_and(|r| {
                    r.kind != MemoryKind::CudaArray
                        && offset.checked_add(8).is_some_and(|e| e <= r.size)
                });
                if !fits {
                    return Err(inconsistent(format!(
                        "texture object {i} has a handle word at offset {offset} outside region {region_id}"
                    )));
                }
            }
        }
        let ids = t
            .arrays
            .iter()
            .map(|a| a.region_id)
            .chain(
                t.objects
                    .iter()
                    .flat_map(|o| o.memory_words.iter().map(|w| w.0)),
            )
            .collect();
        self.textures = t;
        Ok(EventRef::Textures(ids))
    }

    /// SALVAGE: once, after the chunks it names; each unknown output is a ZERO post chunk of a
    /// declared region, named once; no dropped region is also declared.
    fn add_salvage(&mut self, off: u64, frame: &Frame) -> Result<EventRef> {
        let inconsistent = |what: String| FormatError::Inconsistent { offset: off, what };
        if self.salvage.is_some() {
            return Err(inconsistent("a second salvage record".into()));
        }
        let mut s: SalvageRecord = self.decode(off, frame, EventKind::Salvage)?;
        for &(region_id, offset) in &s.unknown_output {
            match self.chunks.get(&(region_id, MemoryState::Post, offset)) {
                Some(c) if c.encoding == ChunkEncoding::Zero => {}
                Some(_) => {
                    return Err(inconsistent(format!(
                        "the salvage record marks the output at offset {offset} of region \
                         {region_id} unknown, but that post chunk is not a zero hole"
                    )))
                }
                None => {
                    return Err(inconsistent(format!(
                        "the salvage record marks the output at offset {offset} of region \
                         {region_id} unknown, but no post chunk precedes it there"
                    )))
                }
            }
        }
        s.unknown_output.sort_unstable();
        let n = s.unknown_output.len();
        s.unknown_output.dedup();
        if s.unknown_output.len() != n {
            return Err(inconsistent(
                "the salvage record names an unknown output twice".into(),
            ));
        }
        if let Some(r) = s
            .dropped_regions
            .iter()
            .find(|d| self.region(d.region_id).is_some())
        {
            return Err(inconsistent(format!(
                "the salvage record lists region {} as dropped, but the capture declares it",
                r.region_id
            )));
        }
        self.salvage = Some(s);
        Ok(EventRef::Salvage)
    }

    /// Regions that lack some of their pre-dispatch chunks, sorted.
    pub fn incomplete_regions(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .regions
            .iter()
            .filter(|r| {
                let n = extents::needed_pre_chunks(r, self.extents.get(&r.region_id));
                let have = self
                    .chunks
                    .range(
                        (r.region_id, MemoryState::Pre, 0)
                            ..=(r.region_id, MemoryState::Pre, u64::MAX),
                    )
                    .count() as u64;
                have != n
            })
            .map(|r| r.region_id)
            .collect();
        v.sort_unstable();
        v
    }

    /// Removes regions and everything that refers to them: their chunks, the module globals
    /// that live in them, the pointer slots inside them, the range's digests over them (op
    /// steps that name them stay: `replay_blockers` reports them).
    /// Texture objects cannot lose their arrays or handle tables: a dropped region they refer
    /// to drops the textures event whole (`salvage` says so).
    pub fn drop_regions(&mut self, ids: &HashSet<u32>) {
        let t = &self.textures;
        let refers = t.arrays.iter().any(|a| ids.contains(&a.region_id))
            || t.objects
                .iter()
                .any(|o| o.memory_words.iter().any(|w| ids.contains(&w.0)));
        if refers {
            self.textures = Textures::default();
        }
        let (lost, kept): (Vec<Region>, Vec<Region>) = std::mem::take(&mut self.regions)
            .into_iter()
            .partition(|r| ids.contains(&r.region_id));
        self.regions = kept;
        self.lost_regions.extend(lost);
        if let Some(range) = &mut self.range {
            range_rules::forget_digests_over(range, ids);
        }
        self.chunks.retain(|k, _| !ids.contains(&k.0));
        self.extents.retain(|id, _| !ids.contains(id));
        self.globals.retain(|g| !ids.contains(&g.region_id));
        self.pointer_slots.retain(|(r, _)| !ids.contains(r));
        if let Some(s) = &mut self.salvage {
            s.unknown_output.retain(|(r, _)| !ids.contains(r));
        }
    }

    /// The rules of a range that need the whole capture (`range_rules`): the first kernel
    /// step is the dispatch, every op inside a region (or one salvage dropped), the range's
    /// digests one per step at most and over regions the capture holds.
    fn check_steps(&self, offset: u64) -> Result<()> {
        let lost: Vec<Region> = self
            .lost_regions
            .iter()
            .chain(self.salvage.iter().flat_map(|s| &s.dropped_regions))
            .cloned()
            .collect();
        let problem = range_rules::kernel_steps_problem(&self.steps, self.dispatch.as_ref())
            .or_else(|| range_rules::ops_problem(&self.steps, &self.regions, &lost))
            .or_else(|| {
                self.range
                    .as_ref()
                    .and_then(|r| range_rules::digest_problem(r, self.steps.len(), &self.regions))
            });
        match problem {
            Some(what) => Err(FormatError::Inconsistent { offset, what }),
            None => Ok(()),
        }
    }

    /// The rules that need the whole capture: one dispatch, every region complete. `offset`
    /// is where errors point (the index, for a parsed file).
    pub fn check_complete(&mut self, offset: u64) -> Result<()> {
        if self.dispatch.is_none() {
            return Err(FormatError::Inconsistent {
                offset,
                what: "the capture holds no dispatch event".into(),
            });
        }
        self.check_steps(offset)?;
        if let Some(&id) = self.incomplete_regions().first() {
            let needed = self
                .region(id)
                .map_or(0, |r| extents::needed_pre_chunks(r, self.extents.get(&id)));
            let have = self
                .chunks
                .range((id, MemoryState::Pre, 0)..=(id, MemoryState::Pre, u64::MAX))
                .count();
            return Err(FormatError::Inconsistent {
                offset,
                what: format!(
                    "region {id} needs {needed} memory chunks but the capture holds {have}"
                ),
            });
        }
        self.pointer_slots.sort_unstable();
        self.pointer_slots.dedup();
        Ok(())
    }
}
