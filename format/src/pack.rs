//! Repacking a capture for sharing: another zstd level, the reference output dropped, or the
//! application's data replaced (redaction). No I/O beyond the sink; memory bounded by one
//! window of chunks whatever the capture's size.
//!
//! Redaction keeps what a replay needs to run the same code path on the same addresses and
//! nothing else of the application's data or environment, and writes a REDACTION event that
//! lists every field it replaced or kept (`kreplay info` shows it):
//! - memory: every pointer word (pointer slots) and texture/surface handle word, module globals
//!   and `__constant__` data (kept whole), and which chunks were all zeros (zero-filled
//!   workspaces, semaphores and counters stay zero) are kept. Every other byte becomes a
//!   generated value, a pure function of (region, offset, element type), so packing the same
//!   capture twice gives the same file. Values are finite and of the element type the region
//!   is known to hold: a typed pointer argument (`float*`, `__nv_bfloat16*`, `int*`, as the
//!   caller read it from the signature: [`PackOptions::param_types`]) or a texture's format
//!   types the region from where it points; floats are odd sixteenths in (-1, 1), integers
//!   0..=15, bools 0/1. Memory of unknown type (no signature, `void*`, structs, regions reached only
//!   through memory) gets the safe default: 8-byte words holding 0..=15, small as every
//!   integer width and finite (zero or subnormal) as f16, bf16, f32 and f64. The values repeat
//!   every [`REDACTION_PERIOD`] bytes, so a redacted chunk compresses to about one period.
//! - arguments: pointer and handle words, integers and bools (sizes, counts, strides, flags)
//!   and arguments of unknown layout (structs) are kept; floating-point scalars are replaced
//!   (sign kept; 0, +-1 and +-inf, which select code paths, kept); padding between
//!   parameters is zeroed.
//! - launch attributes: only the bytes of the attribute's own value are kept; the rest of the
//!   64-byte union, and event and graph-node handles of the recorded process, are zeroed.
//! - environment: host, pid, rank, command line, time, kernel filter, match index, device UUID
//!   and ordinal, the executable graph's handle and the capture UUID (the recorder's holds
//!   the time, pid and output path) are replaced; the GPU model, driver version, code,
//!   geometry, launch index and timing are kept.
//!
//! - a range capture's steps and RANGE event: see [`crate::pack_range`].
//!
//! The post-dispatch state cannot be recomputed without a GPU: its chunks keep only where the
//! kernel writes (zero holes), and the capture says so (`Reference`), so `play --verify`
//! checks determinism instead of a reference.

use std::io::{Seek, Write};

use crate::chunk::ChunkRef;
use crate::error::{FormatError, Result};
use crate::events::{
    Annotation, CaptureInfo, DeviceInfo, Dispatch, GraphOrigin, LaunchAttribute, MemoryKind,
    Redaction, Reference, Region, RegionRole, TextureResource, REFERENCE_ANNOTATION,
};
use crate::extents;
use crate::layout::MemoryState;
use crate::observe::{Observer, Phase};
use crate::reader::Capture;
use crate::redact_values::{f16_bits, mix};
pub use crate::redact_values::{redacted_period, Element, ParamShape, ParamType, REDACTION_PERIOD};
use crate::units::bytes;
use crate::writer::{CaptureHead, CaptureTail, CaptureWriter, WriterOptions};

/// What `pack` changes.
#[derive(Debug, Clone)]
pub struct PackOptions {
    /// zstd level for memory chunks (1..=22).
    pub level: i32,
    /// Keep only where the kernel writes, not what (no reference output).
    pub drop_post: bool,
    /// Replace the application's data and environment (implies `drop_post`).
    pub redact: bool,
    /// The kernel's parameter types, one per `Dispatch::params`, as the caller read them from
    /// the demangled signature; empty when unknown (redaction then keeps every argument and
    /// gives memory the safe default type).
    pub param_types: Vec<ParamType>,
    /// A range capture's: per step, its kernel's parameter types as `param_types` (empty for
    /// an op step, or when unknown); the first kernel step's are `param_types`.
    pub step_param_types: Vec<Vec<ParamType>>,
}

/// What `pack` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackReport {
    /// Bytes replaced by generated data.
    pub redacted_bytes: u64,
    /// Bytes of pointer and handle words kept as they were in redacted regions.
    pub kept_bytes: u64,
    /// Regions kept whole (module globals, `__constant__` data).
    pub kept_regions: u32,
    /// Post-dispatch bytes no longer stored.
    pub dropped_post_bytes: u64,
    pub reference: Option<Reference>,
    /// The zstd level memory was compressed with (redaction uses at least
    /// [`MIN_REDACT_LEVEL`]).
    pub level: i32,
    /// What redaction replaced and kept, field by field (as written to the REDACTION event).
    pub redaction: Option<Redaction>,
}

/// The lowest zstd level a redacted capture is compressed with.
pub const MIN_REDACT_LEVEL: i32 = 3;

/// Bytes of chunks decoded at once.
const WINDOW: u64 = 64 << 20;

/// A stretch of a region with one element type, from `start` to the next segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub element: Element,
    /// What typed it (`argument 2 (float const*)`, `texture format`), empty for the default.
    pub source: String,
}

/// The element types of each region as redaction sees them: from typed pointer arguments and
/// texture formats, each from where it points to the next; the first covers the region's
/// start. A region no typed pointer reaches is one segment of `Element::Unknown`.
pub fn region_segments(
    cap: &Capture<'_>,
    param_types: &[ParamType],
    region: &Region,
) -> Vec<Segment> {
    range_region_segments(cap, param_types, &[], region)
}

/// The typed pointer arguments of launch `d` (with `types`, one per parameter) that point
/// into `region`, each a segment from where it points; `label` prefixes their source.
fn pointer_segments(
    d: &Dispatch,
    types: &[ParamType],
    region: &Region,
    label: &str,
) -> Vec<Segment> {
    let inside = |addr: u64| addr >= region.address && addr - region.address < region.size;
    let mut found = Vec::new();
    if types.len() != d.params.len() || region.kind == MemoryKind::CudaArray {
        return found;
    }
    for (i, (p, t)) in d.params.iter().zip(types).enumerate() {
        let ParamShape::Pointer(e) = t.shape else {
            continue;
        };
        if e == Element::Unknown || !d.pointer_words.contains(&p.offset) {
            continue;
        }
        let at = p.offset as usize;
        let Some(word) = d.arg_bytes.get(at..at + 8) else {
            continue;
        };
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let v = u64::from_le_bytes(w);
        if inside(v) {
            found.push(Segment {
                start: v - region.address,
                element: e,
                source: format!("{label}argument {i} ({})", t.name),
            });
        }
    }
    found
}

/// As [`region_segments`], for a range capture also from the typed pointer arguments of its
/// later kernel steps (`step_types`, one list per step: `PackOptions::step_param_types`); at
/// one offset the DISPATCH's type wins, then the earlier step's.
pub fn range_region_segments(
    cap: &Capture<'_>,
    param_types: &[ParamType],
    step_types: &[Vec<ParamType>],
    region: &Region,
) -> Vec<Segment> {
    let mut found = pointer_segments(&cap.dispatch, param_types, region, "");
    let first_kernel = cap.steps.iter().position(|s| s.dispatch().is_some());
    for (k, (step, types)) in cap.steps.iter().zip(step_types).enumerate() {
        if let Some(d) = step.dispatch().filter(|_| Some(k) != first_kernel) {
            found.extend(pointer_segments(d, types, region, &format!("step {k} ")));
        }
    }
    let inside = |addr: u64| addr >= region.address && addr - region.address < region.size;
    let format_element = |format: u32| match format {
        0x01 | 0x08 => Some(Element::Int(1)),
        0x02 | 0x09 => Some(Element::Int(2)),
        0x03 | 0x0a => Some(Element::Int(4)),
        0x10 => Some(Element::F16),
        0x20 => Some(Element::F32),
        _ => None,
    };
    for a in &cap.textures.arrays {
        if a.region_id == region.region_id {
            if let Some(e) = format_element(a.format) {
                found.push(Segment {
                    start: 0,
                    element: e,
                    source: "the array's texel format".into(),
                });
            }
        }
    }
    for o in &cap.textures.objects {
        if let TextureResource::Linear {
            address, format, ..
        }
        | TextureResource::Pitch2D {
            address, format, ..
        } = o.resource
        {
            if region.kind != MemoryKind::CudaArray && inside(address) {
                if let Some(e) = format_element(format) {
                    found.push(Segment {
                        start: address - region.address,
                        element: e,
                        source: "a texture's format".into(),
                    });
                }
            }
        }
    }
    // Stable: at one offset the first source (an argument) wins.
    found.sort_by_key(|s| s.start);
    found.dedup_by_key(|s| s.start);
    match found.first_mut() {
        Some(first) => first.start = 0,
        None => found.push(Segment {
            start: 0,
            element: Element::Unknown,
            source: String::new(),
        }),
    }
    found
}

/// Whether a region's bytes are kept as they are by redaction.
fn kept_whole(kind: MemoryKind, role: RegionRole) -> bool {
    role == RegionRole::Global || kind == MemoryKind::ModuleGlobal
}

/// Replaces `buf` (the region's bytes from `start`) by generated values, except all-zero
/// chunks and the 8-byte words at `keep` (offsets inside the region, sorted). `periods` holds,
/// per segment, one period of its bytes. Returns (bytes replaced, bytes kept, all-zero chunks
/// left as they are).
fn redact_window(
    segments: &[(Segment, Vec<u8>)],
    start: u64,
    chunk_size: u64,
    buf: &mut [u8],
    keep: &[u64],
) -> (u64, u64, u32) {
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
    let mut zero_chunks = 0u32;
    for (ci, chunk) in buf.chunks_mut(chunk_size.max(1) as usize).enumerate() {
        if crate::chunk::is_all_zero(chunk) {
            zero_chunks += 1;
            continue;
        }
        let chunk_start = start + ci as u64 * chunk_size;
        let chunk_end = chunk_start + chunk.len() as u64;
        for (si, (seg, period)) in segments.iter().enumerate() {
            let seg_end = segments.get(si + 1).map_or(u64::MAX, |n| n.0.start);
            let (a, b) = (seg.start.max(chunk_start), seg_end.min(chunk_end));
            if a >= b {
                continue;
            }
            let mut phase = ((a - seg.start) % REDACTION_PERIOD) as usize;
            let mut at = (a - chunk_start) as usize;
            let stop = (b - chunk_start) as usize;
            while at < stop {
                let n = (period.len() - phase).min(stop - at);
                chunk[at..at + n].copy_from_slice(&period[phase..phase + n]);
                at += n;
                phase = 0;
            }
        }
        replaced += chunk.len() as u64;
    }
    for (o, w) in &kept {
        buf[*o..*o + 8].copy_from_slice(w);
    }
    let kept_bytes = 8 * kept.len() as u64;
    (replaced.saturating_sub(kept_bytes), kept_bytes, zero_chunks)
}

/// The bytes of a launch attribute's own value (`CUlaunchAttributeValue` member) that a replay
/// needs, as byte ranges; the rest of the 64-byte union is padding or another member. Event and
/// graph-node handles are left out: they name objects of the recorded process (the player makes
/// its own). `None` for ids this build does not know.
fn attribute_layout(id: u32) -> Option<(&'static str, &'static [(usize, usize)])> {
    Some(match id {
        0 => ("ignore", &[]),
        1 => ("access policy window", &[(0, 28)]),
        2 => ("cooperative", &[(0, 4)]),
        3 => ("synchronization policy", &[(0, 4)]),
        4 => ("cluster dimension", &[(0, 12)]),
        5 => ("cluster scheduling policy", &[(0, 4)]),
        6 => ("programmatic stream serialization", &[(0, 4)]),
        7 => ("programmatic event", &[(8, 16)]),
        8 => ("priority", &[(0, 4)]),
        9 => ("memory sync domain map", &[(0, 2)]),
        10 => ("memory sync domain", &[(0, 4)]),
        11 => ("preferred cluster dimension", &[(0, 12)]),
        12 => ("launch completion event", &[(8, 12)]),
        13 => ("device-updatable kernel node", &[(0, 4)]),
        14 => ("preferred shared memory carveout", &[(0, 4)]),
        16 => ("NVLink utilisation-centric scheduling", &[(0, 4)]),
        _ => return None,
    })
}

/// A launch attribute with only its value's bytes kept, and what was done, in words.
fn redact_attribute(a: &LaunchAttribute) -> (LaunchAttribute, bool, String, String) {
    let mut value = vec![0u8; a.value.len()];
    let Some((name, ranges)) = attribute_layout(a.id) else {
        let nonzero = a.value.iter().filter(|&&b| b != 0).count();
        return (
            LaunchAttribute { id: a.id, value },
            false,
            format!("launch attribute {}", a.id),
            format!(
                "unknown to this kreplay: all {} value bytes zeroed ({nonzero} were not zero)",
                a.value.len()
            ),
        );
    };
    let mut kept = 0usize;
    for &(lo, hi) in ranges {
        let hi = hi.min(a.value.len());
        if lo < hi {
            value[lo..hi].copy_from_slice(&a.value[lo..hi]);
            kept += hi - lo;
        }
    }
    let changed = a.value.iter().zip(&value).filter(|(x, y)| x != y).count();
    let handle = if matches!(a.id, 7 | 12) {
        "; its event handle (of the recorded process) zeroed: the player makes its own"
    } else if a.id == 13 {
        "; its graph-node handle zeroed"
    } else {
        ""
    };
    let field = format!("launch attribute {} ({name})", a.id);
    let note = format!(
        "{kept} byte(s) of its value kept, the other {} of the union zeroed ({changed} were not zero){handle}",
        a.value.len() - kept
    );
    (
        LaunchAttribute { id: a.id, value },
        changed == 0,
        field,
        note,
    )
}

/// A floating-point scalar replaced: same sign, magnitude k/16 in [1/8, 7/8]; 0, +-1, +-inf
/// kept (they select code paths: `beta == 0`, `alpha == 1`, `-inf` as a max's start).
/// `None`: kept.
fn redact_float_scalar(e: Element, index: usize, bytes: &[u8]) -> Option<Vec<u8>> {
    let v: f64 = match (e, bytes.len()) {
        (Element::F32, 4) => f64::from(f32::from_le_bytes(bytes.try_into().ok()?)),
        (Element::F64, 8) => f64::from_le_bytes(bytes.try_into().ok()?),
        (Element::F16 | Element::Bf16, 2) => {
            let h = u16::from_le_bytes(bytes.try_into().ok()?);
            let zero = h & 0x7fff == 0;
            // Only the classes matter here: zero, +-1, +-inf, NaN, other.
            let (one, inf) = match e {
                Element::F16 => (h & 0x7fff == 0x3c00, h & 0x7fff == 0x7c00),
                _ => (h & 0x7fff == 0x3f80, h & 0x7fff == 0x7f80),
            };
            let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
            match (zero, one, inf) {
                (true, _, _) => 0.0,
                (_, true, _) => sign,
                (_, _, true) => sign * f64::INFINITY,
                _ => sign * 0.5,
            }
        }
        _ => return None,
    };
    if v == 0.0 || v.abs() == 1.0 || v.is_infinite() {
        return None;
    }
    let k = 2 + mix(u64::from(u32::MAX), index as u64) % 13;
    let sign = if v.is_sign_negative() { -1.0f32 } else { 1.0 };
    let new = sign * k as f32 / 16.0;
    let mut out = vec![0u8; bytes.len()];
    match e {
        Element::F32 => out.copy_from_slice(&new.to_le_bytes()),
        Element::F64 => out.copy_from_slice(&f64::from(new).to_le_bytes()),
        Element::F16 => out.copy_from_slice(&f16_bits(new).to_le_bytes()),
        _ => out.copy_from_slice(&((new.to_bits() >> 16) as u16).to_le_bytes()),
    }
    Some(out)
}

/// The dispatch with its arguments and launch attributes redacted, and the listing.
fn redact_dispatch(
    d: &Dispatch,
    types: &[ParamType],
    textures: &[u32],
    log: &mut Redaction,
) -> Dispatch {
    let mut out = d.clone();
    log.kept(
        "kernel and code",
        "the kernel's name and the code objects (cubin, PTX): the replay runs them",
    );
    log.kept(
        "geometry",
        "grid, block, cluster and dynamic shared memory: the replay launches with them",
    );
    // Padding between parameters: not the kernel's, may hold the application's stack.
    let mut covered = vec![false; d.arg_bytes.len()];
    for p in &d.params {
        let lo = (p.offset as usize).min(covered.len());
        let hi = (p.offset as usize + p.size as usize).min(covered.len());
        covered[lo..hi].fill(true);
    }
    let padding = covered.iter().filter(|&&c| !c).count();
    let nonzero = out
        .arg_bytes
        .iter_mut()
        .zip(&covered)
        .filter(|(_, &c)| !c)
        .map(|(b, _)| std::mem::replace(b, 0))
        .filter(|&b| b != 0)
        .count();
    if padding > 0 && nonzero > 0 {
        log.replaced(
            "argument padding",
            format!("{padding} byte(s) between parameters zeroed ({nonzero} were not zero)"),
        );
    } else if padding > 0 {
        log.kept(
            "argument padding",
            format!("{padding} byte(s) between parameters, all zero"),
        );
    }
    let typed = types.len() == d.params.len();
    for (i, p) in d.params.iter().enumerate() {
        let (lo, hi) = (p.offset, p.offset as u64 + p.size as u64);
        let words_in = |w: &u32| *w >= lo && u64::from(*w) < hi;
        let pointer = d.pointer_words.iter().any(words_in);
        let handle = textures.iter().any(words_in);
        let name = match typed {
            true => format!("argument {i} ({})", types[i].name),
            false => format!("argument {i}"),
        };
        let shape = if typed { Some(types[i].shape) } else { None };
        match shape {
            _ if handle => log.kept(name, "a texture or surface handle: the player writes its own"),
            Some(ParamShape::Scalar(e @ (Element::F16 | Element::Bf16 | Element::F32 | Element::F64)))
                if !pointer =>
            {
                let at = p.offset as usize..(p.offset as usize + p.size as usize).min(d.arg_bytes.len());
                match d.arg_bytes.get(at.clone()).and_then(|b| redact_float_scalar(e, i, b)) {
                    Some(new) => {
                        out.arg_bytes[at].copy_from_slice(&new);
                        log.replaced(name, "a floating-point value: replaced by one of the same sign in [1/8, 7/8]");
                    }
                    None => log.kept(
                        name,
                        "0, +-1 or +-inf: kept, these select code paths (beta == 0, alpha == 1)",
                    ),
                }
            }
            Some(ParamShape::Scalar(_)) if !pointer => log.kept(
                name,
                "an integer or bool (a size, count, stride or flag): the replay needs it",
            ),
            Some(ParamShape::Pointer(_)) | Some(ParamShape::Scalar(_)) => {
                log.kept(name, "a device address: the replay maps memory there")
            }
            _ if pointer && p.size == 8 => log.kept(name, "a device address: the replay maps memory there"),
            Some(ParamShape::Other) => log.kept(
                name,
                "kept whole: its layout is unknown (a struct may hold sizes, pointers and the application's values)",
            ),
            None => log.kept(
                name,
                "kept whole: no signature gives its type (may be a size, a pointer or the application's value)",
            ),
        }
    }
    for (a, slot) in d.attributes.iter().zip(out.attributes.iter_mut()) {
        let (new, kept, field, note) = redact_attribute(a);
        *slot = new;
        if kept {
            log.kept(field, note);
        } else {
            log.replaced(field, note);
        }
    }
    out
}

/// The capture info with the application's environment replaced.
fn redact_info(i: &CaptureInfo, log: &mut Redaction) -> CaptureInfo {
    log.kept(
        "tool version",
        format!("{}: kreplay's, not the application's", i.tool_version),
    );
    log.replaced("host", "now empty");
    log.replaced("pid", "now 0");
    log.replaced("rank", "now none");
    log.replaced("command line", "now empty");
    log.replaced("time", "now 0 (1970-01-01)");
    log.replaced(
        "kernel filter and match index",
        "now empty and 0 (what was typed to record it)",
    );
    log.kept(
        "launch index",
        format!(
            "{}: which launch of the process it was (record --launch-index)",
            i.launch_index
        ),
    );
    CaptureInfo {
        tool_version: i.tool_version.clone(),
        host: String::new(),
        pid: 0,
        rank: None,
        command_line: Vec::new(),
        time_unix_ns: 0,
        match_index: 0,
        launch_index: i.launch_index,
        kernel_filter: String::new(),
    }
}

/// The device with what names the machine replaced.
fn redact_device(d: &DeviceInfo, log: &mut Redaction) -> DeviceInfo {
    log.kept(
        "device model",
        "name, compute capability, SMs, memory size and driver version: which GPU replays it",
    );
    log.replaced("device UUID", "now zeros (it names one physical GPU)");
    log.replaced("device ordinal", "now 0");
    DeviceInfo {
        uuid: [0; 16],
        ordinal: 0,
        ..d.clone()
    }
}

/// FNV-1a 64 of `data` from `seed`.
fn fnv(seed: u64, data: &[u8]) -> u64 {
    data.iter().fold(seed, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A redacted capture's UUID: of what it keeps (kernel, arguments), nothing of the recorder's
/// (which holds the time, pid and output path).
fn redacted_uuid(d: &Dispatch) -> [u8; 16] {
    let mut data = d.kernel_name.as_bytes().to_vec();
    data.extend_from_slice(&d.arg_bytes);
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325, &data).to_le_bytes());
    uuid[8..].copy_from_slice(&fnv(0x6c62_272e_07bb_0142, &data).to_le_bytes());
    uuid
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
/// stretches of the input it will not read again. A redacted capture gets a UUID of its own
/// (`uuid` is ignored: the recorder's is made of the time, pid and output path).
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
    let mut log = Redaction::default();

    // What the head holds, redacted or as recorded.
    let (info, device, dispatch, graph) = if opts.redact {
        redacted_head(cap, &opts.param_types, &mut log)
    } else {
        (
            cap.info.clone(),
            cap.device.clone(),
            cap.dispatch.clone(),
            cap.graph.clone(),
        )
    };
    let uuid = if opts.redact {
        log.replaced(
            "capture UUID",
            "made from the kernel and its arguments (the recorder's holds the time, pid and output path)",
        );
        redacted_uuid(&dispatch)
    } else {
        uuid
    };
    // zstd levels 1 and 2 do not find the repeat of the safe default's 8-byte words (runs of
    // zeros mislead their match finder: 1 MiB stays about 33 KiB); level 3 does, at hundreds
    // of MB/s on generated data.
    report.level = if opts.redact {
        opts.level.max(MIN_REDACT_LEVEL)
    } else {
        opts.level
    };
    let mut w = CaptureWriter::new(
        out,
        uuid,
        WriterOptions {
            level: report.level,
            ..WriterOptions::default()
        },
    )?;
    write_head_parts(&mut w, info.as_ref(), device.as_ref(), cap, &dispatch)?;
    write_range(&mut w, cap, &opts, &dispatch, &mut log)?;

    // Words a redacted region keeps: pointer slots and texture handle words, per region.
    let mut keep: Vec<(u32, u64)> = cap.pointer_slots.clone();
    for o in &cap.textures.objects {
        keep.extend(o.memory_words.iter().copied());
    }
    keep.sort_unstable();
    keep.dedup();
    if opts.redact {
        log.kept(
            "region addresses and sizes",
            "the replay maps memory at the recorded addresses",
        );
    }

    pack_regions(&mut w, cap, &opts, &keep, &mut log, &mut report, observer)?;
    pack_post(&mut w, cap, drop_post, &mut report, observer)?;
    let redaction = if opts.redact {
        list_tail(&mut log, cap, report.dropped_post_bytes);
        Some(&log)
    } else {
        cap.redaction.as_ref()
    };
    write_tail_parts(&mut w, cap, graph.as_ref(), redaction)?;
    // Its zero post chunks were copied as they are: they still stand for lost output.
    if let Some(s) = &cap.salvage {
        w.salvage_record(s)?;
    }
    let reference = reference_after(opts.redact, drop_post, cap.reference());
    // A partial reference is the salvage record's to say (written above).
    if !matches!(reference, Reference::Recorded | Reference::Partial) {
        w.annotation(&Annotation {
            key: REFERENCE_ANNOTATION.into(),
            value: reference.name().into(),
        })?;
    }
    report.reference = Some(reference);
    report.redaction = redaction.cloned();
    Ok((w.finish()?, report))
}

/// A range capture's steps and RANGE event, right after the head: as recorded, or redacted
/// with `dispatch` (the redacted DISPATCH) as its first kernel step.
fn write_range<W: Write + Seek>(
    w: &mut CaptureWriter<W>,
    cap: &Capture<'_>,
    opts: &PackOptions,
    dispatch: &Dispatch,
    log: &mut Redaction,
) -> Result<()> {
    if !cap.is_range() {
        return Ok(());
    }
    let packed = if opts.redact {
        crate::pack_range::redacted(
            cap,
            dispatch,
            &opts.step_param_types,
            &mut |d, types, log| redact_dispatch(d, types, &[], log),
            log,
        )
    } else {
        crate::pack_range::as_recorded(cap)
    };
    w.steps(&packed.steps)?;
    if let Some(r) = &packed.range {
        w.range_info(r)?;
    }
    Ok(())
}

/// Each region and its pre-state chunks, a window at a time, redacted when asked.
fn pack_regions<W: Write + Seek>(
    w: &mut CaptureWriter<W>,
    cap: &Capture<'_>,
    opts: &PackOptions,
    keep: &[(u32, u64)],
    log: &mut Redaction,
    report: &mut PackReport,
    observer: &mut dyn Observer,
) -> Result<()> {
    let total: u64 = cap.regions.iter().map(|r| r.size).sum();
    let mut done = 0u64;
    let mut buf = Vec::new();
    for r in &cap.regions {
        w.region(r)?;
        let present = cap.extents(r.region_id);
        if let Some(e) = present {
            w.region_extents(e)?;
        }
        let keep_here: Vec<u64> = keep
            .iter()
            .filter(|k| k.0 == r.region_id)
            .map(|k| k.1)
            .collect();
        let whole = !opts.redact || kept_whole(r.kind, r.role);
        if opts.redact && whole {
            report.kept_regions += 1;
        }
        let segments: Vec<(Segment, Vec<u8>)> = if whole {
            Vec::new()
        } else {
            range_region_segments(cap, &opts.param_types, &opts.step_param_types, r)
                .into_iter()
                .map(|s| {
                    let p = redacted_period(r.region_id, s.element);
                    (s, p)
                })
                .collect()
        };
        let (mut replaced_here, mut kept_here, mut zero_chunks) = (0u64, 0u64, 0u32);
        let chunks: Vec<_> = cap.chunks(r.region_id, MemoryState::Pre).collect();
        let per_window = (WINDOW / r.chunk_size.max(1)).max(1) as usize;
        for window in contiguous_windows(&chunks, per_window) {
            let start = window[0].offset;
            let len: u64 = window.iter().map(|c| c.raw_len).sum();
            // A window's chunks follow each other (the reader checked they lie in the region):
            // `len` is at most the window.
            buf.resize(len as usize, 0);
            let mut at = 0usize;
            for c in window {
                let n = c.raw_len as usize;
                cap.read_chunk_into(c, &mut buf[at..at + n])?;
                at += n;
            }
            if !whole {
                let (replaced, kept, zeros) =
                    redact_window(&segments, start, r.chunk_size, &mut buf, &keep_here);
                replaced_here += replaced;
                kept_here += kept;
                zero_chunks += zeros;
                // Absent bytes stay zero: redaction must not make them look like data.
                if let Some(e) = present {
                    for (o, l) in extents::absent_ranges(&e.present, start, len) {
                        let at = (o - start) as usize;
                        buf[at..at + l as usize].fill(0);
                    }
                }
            }
            w.memory(r.region_id, MemoryState::Pre, start, &buf)?;
            for c in window {
                observer.done_with(c.payload_offset, c.payload_offset + c.payload_len);
            }
            done += len;
            observer.progress(Phase::Pack, done, total);
        }
        report.redacted_bytes += replaced_here;
        report.kept_bytes += kept_here;
        if opts.redact {
            list_region(
                log,
                r,
                whole,
                &segments,
                (replaced_here, kept_here, zero_chunks),
            );
        }
    }
    Ok(())
}

/// `chunks` (by offset) in windows of at most `per_window` chunks that follow each other
/// without a gap (a region with extents has no chunk where it is wholly absent).
fn contiguous_windows<'c, 'r>(
    chunks: &'c [&'r ChunkRef],
    per_window: usize,
) -> Vec<&'c [&'r ChunkRef]> {
    chunks
        .chunk_by(|a, b| a.offset + a.raw_len == b.offset)
        .flat_map(|run| run.chunks(per_window.max(1)))
        .collect()
}

/// Post chunks: the recorded output, or (no reference) zeros that mark the write set and
/// cost nothing.
fn pack_post<W: Write + Seek>(
    w: &mut CaptureWriter<W>,
    cap: &Capture<'_>,
    drop_post: bool,
    report: &mut PackReport,
    observer: &mut dyn Observer,
) -> Result<()> {
    let mut buf = Vec::new();
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
    Ok(())
}

/// The head of a redacted capture: capture info, device and dispatch with the application's
/// environment and data replaced, and the graph origin without its host handle; each field
/// listed in `log`.
fn redacted_head(
    cap: &Capture<'_>,
    param_types: &[ParamType],
    log: &mut Redaction,
) -> (
    Option<CaptureInfo>,
    Option<DeviceInfo>,
    Dispatch,
    Option<GraphOrigin>,
) {
    let handle_words: Vec<u32> = cap
        .textures
        .objects
        .iter()
        .flat_map(|o| o.arg_words.iter().copied())
        .collect();
    let info = cap.info.as_ref().map(|i| redact_info(i, log));
    let device = cap.device.as_ref().map(|d| redact_device(d, log));
    let dispatch = redact_dispatch(&cap.dispatch, param_types, &handle_words, log);
    let graph = cap.graph.as_ref().map(|g| {
        log.replaced(
            "executable graph handle",
            "now 0 (a host address of the recorded process)",
        );
        log.kept(
            "graph position",
            "which launch of the graph and which of its nodes",
        );
        GraphOrigin {
            graph_exec: 0,
            ..g.clone()
        }
    });
    (info, device, dispatch, graph)
}

/// Lists what redaction did to region `r`: (bytes replaced, bytes of pointer and handle words
/// kept, all-zero chunks) of its memory, by the element types of its `segments`.
fn list_region(
    log: &mut Redaction,
    r: &Region,
    whole: bool,
    segments: &[(Segment, Vec<u8>)],
    (replaced_here, kept_here, zero_chunks): (u64, u64, u32),
) {
    let field = format!("region {}", r.region_id);
    if whole {
        log.kept(
            field,
            format!(
                "{} kept whole: a module global or __constant__ variable (configuration, tables and pointers the kernel reads)",
                bytes(r.size)
            ),
        );
    } else if replaced_here == 0 {
        log.kept(
            field,
            format!(
                "nothing to replace: {} of pointer and handle words and {zero_chunks} all-zero chunk(s)",
                bytes(kept_here)
            ),
        );
    } else {
        let types: Vec<String> = segments
            .iter()
            .map(|(s, _)| match s.source.is_empty() {
                true => s.element.describe(),
                false => format!("{} (as {})", s.element.describe(), s.source),
            })
            .collect();
        log.replaced(
            field,
            format!(
                "{} replaced by {}; {} of pointer and handle words and {zero_chunks} all-zero chunk(s) kept",
                bytes(replaced_here),
                types.join(", then "),
                bytes(kept_here)
            ),
        );
    }
}

/// Lists what a redacted capture keeps after its memory: pointer slots, textures, timing and
/// kreplay's notes; and that the recorded output was dropped.
fn list_tail(log: &mut Redaction, cap: &Capture<'_>, dropped_post_bytes: u64) {
    log.replaced(
        "recorded output",
        format!(
            "{} dropped: zero holes mark where the kernel writes",
            bytes(dropped_post_bytes)
        ),
    );
    if !cap.pointer_slots.is_empty() {
        log.kept(
            "pointer slots",
            format!(
                "{} word(s) in memory that point into captured memory",
                cap.pointer_slots.len()
            ),
        );
    }
    if !cap.textures.is_empty() {
        log.kept(
            "textures",
            "handles, sampling, views and array shapes: the player rebuilds the objects",
        );
    }
    log.kept(
        "original duration and timing conditions",
        "how long the kernel took and how that was measured",
    );
    for a in cap
        .annotations
        .iter()
        .filter(|a| a.key != REFERENCE_ANNOTATION)
    {
        log.kept(
            format!("note {}", a.key),
            "kreplay's own note about the capture",
        );
    }
}

/// What a rewritten capture's post chunks hold: redaction and a dropped output say so; a
/// redacted input stays redacted; otherwise what the input's held.
fn reference_after(redact: bool, drop_post: bool, before: Reference) -> Reference {
    match (redact, drop_post, before) {
        (true, _, _) => Reference::Redacted,
        (false, _, Reference::Redacted) => Reference::Redacted,
        (false, true, _) => Reference::Dropped,
        (false, false, r) => r,
    }
}

/// Writes what describes a capture's dispatch, as `cap` has it: capture info, device, code
/// objects, the dispatch. (Rewriters of a capture start with this, then the regions.)
pub fn write_head<W: Write + Seek>(w: &mut CaptureWriter<W>, cap: &Capture<'_>) -> Result<()> {
    write_head_parts(
        w,
        cap.info.as_ref(),
        cap.device.as_ref(),
        cap,
        &cap.dispatch,
    )
}

fn write_head_parts<W: Write + Seek>(
    w: &mut CaptureWriter<W>,
    info: Option<&CaptureInfo>,
    device: Option<&DeviceInfo>,
    cap: &Capture<'_>,
    dispatch: &Dispatch,
) -> Result<()> {
    w.head(&CaptureHead {
        info,
        device,
        modules: &cap.modules,
        dispatch,
    })
}

/// Writes what follows the regions, as `cap` has it: module globals, textures, pointer
/// slots, timing conditions, graph origin, the redaction listing, and the annotations but the
/// reference one (what the post chunks hold is for the rewriter to say, and so is the salvage
/// record, which names post chunks).
pub fn write_tail<W: Write + Seek>(w: &mut CaptureWriter<W>, cap: &Capture<'_>) -> Result<()> {
    write_tail_parts(w, cap, cap.graph.as_ref(), cap.redaction.as_ref())
}

fn write_tail_parts<W: Write + Seek>(
    w: &mut CaptureWriter<W>,
    cap: &Capture<'_>,
    graph: Option<&GraphOrigin>,
    redaction: Option<&Redaction>,
) -> Result<()> {
    // The reference annotation is the rewriter's to say (after the tail).
    let annotations: Vec<Annotation> = cap
        .annotations
        .iter()
        .filter(|a| a.key != REFERENCE_ANNOTATION)
        .cloned()
        .collect();
    w.tail(&CaptureTail {
        globals: &cap.globals,
        textures: &cap.textures,
        pointer_slots: &cap.pointer_slots,
        timing: cap.timing.as_ref(),
        graph,
        redaction,
        annotations: &annotations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: a window spanning a gap (a wholly absent chunk of a region with extents, its
    // bytes then read from the next chunk), or a window longer than asked.
    #[test]
    fn windows_are_contiguous_and_bounded() {
        let chunk = |offset| ChunkRef {
            region_id: 0,
            state: MemoryState::Pre,
            encoding: crate::ChunkEncoding::Raw,
            offset,
            raw_len: 10,
            raw_crc: 0,
            event_offset: 0,
            payload_offset: 0,
            payload_len: 0,
            payload_crc: 0,
        };
        let all: Vec<ChunkRef> = [0, 10, 20, 40, 50].into_iter().map(chunk).collect();
        let refs: Vec<&ChunkRef> = all.iter().collect();
        let offsets = |per: usize| -> Vec<Vec<u64>> {
            contiguous_windows(&refs, per)
                .iter()
                .map(|w| w.iter().map(|c| c.offset).collect())
                .collect()
        };
        assert_eq!(offsets(2), vec![vec![0, 10], vec![20], vec![40, 50]]);
        assert_eq!(offsets(8), vec![vec![0, 10, 20], vec![40, 50]]);
        assert!(contiguous_windows(&[], 4).is_empty());
    }

    #[test]
    fn a_rewritten_capture_says_what_its_post_chunks_hold() {
        use Reference::*;
        assert_eq!(reference_after(true, true, Recorded), Redacted);
        assert_eq!(reference_after(false, false, Redacted), Redacted);
        assert_eq!(reference_after(false, true, Redacted), Redacted);
        assert_eq!(reference_after(false, true, Recorded), Dropped);
        assert_eq!(reference_after(false, true, Partial), Dropped);
        assert_eq!(reference_after(false, false, Partial), Partial);
        assert_eq!(reference_after(false, false, Recorded), Recorded);
    }
}
