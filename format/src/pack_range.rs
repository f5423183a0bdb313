//! `pack` of a range capture: its steps and RANGE event carried into the packed file, as
//! recorded or redacted.
//!
//! What a range adds to a single capture's redaction (`pack`'s module documentation):
//! - kernel steps: each launch redacted as the DISPATCH is, with its own parameter types
//!   (`PackOptions::step_param_types`); the first kernel step is the redacted DISPATCH, byte
//!   for byte, as the format requires.
//! - host bytes inside copy steps are the application's data: a host-to-device copy's source
//!   becomes generated 8-byte words 0..=15 (all-zero buffers stay zero; words that hold an
//!   address inside a captured region are kept: a table of device pointers the range uploads);
//!   a device-to-host copy's received bytes are zeroed (they are recorded output, as the post
//!   chunks are).
//! - stream and event handles (host addresses of the recorded process) become small numbers,
//!   consistently in steps and RANGE; the default streams (0, 1, 2) keep their meaning.
//! - the selection's name (an NVTX range's, the application's string) is cut to its kind;
//!   `launch-range I:J` and `profiler-range #N` say nothing of the application and stay.
//! - the per-step digests of memory are dropped (of the application's memory, which redaction
//!   replaced, so a replay of the redacted capture would not match them).
//!
//! A replay of a redacted range has no reference: it checks neither the zeroed received bytes
//! nor digests (there are none), as it checks no post chunks.

use std::collections::HashMap;

use crate::events::{Dispatch, MemoryKind, Redaction, Region};
use crate::reader::Capture;
use crate::redact_values::{redacted_period, Element, ParamType, REDACTION_PERIOD};
use crate::steps::{Action, HostWait, Op, RangeInfo, Step};
use crate::units::bytes;

/// Streams with a meaning of their own (legacy default, `CU_STREAM_LEGACY`, per-thread
/// default): kept as they are.
const DEFAULT_STREAMS: [u64; 3] = [0, 1, 2];
/// Where renumbered streams start (above the default streams' values).
const FIRST_STREAM: u64 = 0x100;

/// The steps and RANGE event a packed range capture holds (none for a single capture).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackedRange {
    pub steps: Vec<Step>,
    pub range: Option<RangeInfo>,
}

/// A range kept as recorded. `--drop-post` keeps it whole too: the digests and the bytes
/// device-to-host copies received are small, still true of the capture's input, and what a
/// replay checks when the post chunks are gone.
pub fn as_recorded(cap: &Capture<'_>) -> PackedRange {
    PackedRange {
        steps: cap.steps.clone(),
        range: cap.range.clone(),
    }
}

/// The range redacted, each field listed in `log`. `dispatch` is the redacted DISPATCH (the
/// first kernel step becomes it); `redact_kernel` redacts another kernel step's launch with
/// its parameter types into the log it is given.
pub fn redacted(
    cap: &Capture<'_>,
    dispatch: &Dispatch,
    step_types: &[Vec<ParamType>],
    redact_kernel: &mut dyn FnMut(&Dispatch, &[ParamType], &mut Redaction) -> Dispatch,
    log: &mut Redaction,
) -> PackedRange {
    let first_kernel = cap.steps.iter().position(|s| s.dispatch().is_some());
    let handles = Handles::of(&cap.steps, cap.range.as_ref());
    let mut steps = Vec::with_capacity(cap.steps.len());
    for (i, s) in cap.steps.iter().enumerate() {
        let action = match &s.action {
            Action::Kernel(_) if Some(i) == first_kernel => Action::Kernel(dispatch.clone()),
            Action::Kernel(d) => {
                let types = step_types.get(i).map_or(&[][..], Vec::as_slice);
                let mut own = Redaction::default();
                let out = redact_kernel(d, types, &mut own);
                prefixed(log, &format!("step {i} "), own);
                Action::Kernel(out)
            }
            Action::Op(op) => Action::Op(redact_op(op, i, &cap.regions, &handles, log)),
        };
        steps.push(Step {
            stream: handles.stream(s.stream),
            action,
        });
    }
    if handles.renumbered() {
        log.replaced(
            "stream and event handles",
            "now small numbers (host addresses of the recorded process); the default streams kept",
        );
    }
    let range = cap
        .range
        .as_ref()
        .map(|r| redact_range_info(r, &handles, log));
    PackedRange { steps, range }
}

/// Another kernel step's redaction listing, under its step's name; what every launch keeps
/// alike (code, geometry) is said once, for the DISPATCH.
fn prefixed(log: &mut Redaction, prefix: &str, own: Redaction) {
    for f in own.fields {
        if matches!(f.field.as_str(), "kernel and code" | "geometry") {
            continue;
        }
        let field = format!("{prefix}{}", f.field);
        match f.kept {
            true => log.kept(field, f.note),
            false => log.replaced(field, f.note),
        }
    }
}

fn redact_op(op: &Op, index: usize, regions: &[Region], h: &Handles, log: &mut Redaction) -> Op {
    match op {
        Op::CopyHostToDevice { dst, host } => {
            let (out, pointers) = redact_host_bytes(host, *dst, regions, index as u32);
            let field = format!("step {index} host bytes (copy-htod)");
            if out == *host {
                log.kept(field, format!("{}: all zero", bytes(host.len() as u64)));
            } else {
                log.replaced(
                    field,
                    format!(
                        "{} replaced by {}; {pointers} word(s) holding a captured device address kept",
                        bytes(host.len() as u64),
                        Element::Unknown.describe()
                    ),
                );
            }
            Op::CopyHostToDevice {
                dst: *dst,
                host: out,
            }
        }
        Op::CopyDeviceToHost { src, received } => {
            log.replaced(
                format!("step {index} received bytes (copy-dtoh)"),
                format!(
                    "{} zeroed: what the application received is recorded output, dropped as the post chunks are",
                    bytes(received.len() as u64)
                ),
            );
            Op::CopyDeviceToHost {
                src: *src,
                received: vec![0; received.len()],
            }
        }
        Op::RecordEvent { event } => Op::RecordEvent {
            event: h.event(*event),
        },
        Op::WaitEvent { event } => Op::WaitEvent {
            event: h.event(*event),
        },
        Op::HostWait(HostWait::Event(e)) => Op::HostWait(HostWait::Event(h.event(*e))),
        other => other.clone(),
    }
}

/// A host-to-device copy's bytes (landing at `dst`) redacted: generated 8-byte words 0..=15,
/// drawn from `seed`, except the device-aligned words that hold an address inside one of
/// `regions` (kept). An all-zero buffer stays as it is. Returns the bytes and how many words
/// were kept.
pub fn redact_host_bytes(host: &[u8], dst: u64, regions: &[Region], seed: u32) -> (Vec<u8>, u64) {
    if crate::chunk::is_all_zero(host) {
        return (host.to_vec(), 0);
    }
    let period = redacted_period(seed, Element::Unknown);
    let mut out: Vec<u8> = (0..host.len() as u64)
        .map(|k| period[((dst.wrapping_add(k)) % REDACTION_PERIOD) as usize])
        .collect();
    let points_into = |v: u64| {
        regions
            .iter()
            .any(|r| r.kind != MemoryKind::CudaArray && v >= r.address && v - r.address < r.size)
    };
    let first = ((8 - dst % 8) % 8) as usize;
    let mut kept = 0;
    let mut at = first;
    while at + 8 <= host.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&host[at..at + 8]);
        if points_into(u64::from_le_bytes(w)) {
            out[at..at + 8].copy_from_slice(&w);
            kept += 1;
        }
        at += 8;
    }
    (out, kept)
}

fn redact_range_info(r: &RangeInfo, h: &Handles, log: &mut Redaction) -> RangeInfo {
    let origin = redacted_origin(&r.origin);
    if origin == r.origin {
        log.kept("range origin", format!("{}: how it was selected", r.origin));
    } else {
        log.replaced(
            "range origin",
            format!("now `{origin}`: the range's name is the application's"),
        );
    }
    log.kept(
        "range streams and timing",
        "stream flags and priorities, launch indices, the range's in-app duration",
    );
    if !r.digests.is_empty() {
        log.replaced(
            "step digests",
            "dropped: they digest the application's memory, which redaction replaced",
        );
    }
    RangeInfo {
        origin,
        launches: r.launches,
        streams: r
            .streams
            .iter()
            .map(|s| crate::steps::StreamInfo {
                handle: h.stream(s.handle),
                ..*s
            })
            .collect(),
        original_duration_ns: r.original_duration_ns,
        digests: Vec::new(),
    }
}

/// A range's origin without the application's names: `launch-range I:J` and
/// `profiler-range #N` as they are, anything else cut to its first word.
pub fn redacted_origin(origin: &str) -> String {
    let kind = origin.split_whitespace().next().unwrap_or("");
    match kind {
        "launch-range" | "profiler-range" => origin.to_string(),
        _ => kind.to_string(),
    }
}

/// Stream and event handles of the recorded process renumbered in order of first use.
#[derive(Debug, Default)]
struct Handles {
    streams: HashMap<u64, u64>,
    events: HashMap<u64, u64>,
}

impl Handles {
    fn of(steps: &[Step], range: Option<&RangeInfo>) -> Handles {
        let mut h = Handles::default();
        let listed = range
            .into_iter()
            .flat_map(|r| r.streams.iter().map(|s| s.handle));
        for s in listed.chain(steps.iter().map(|s| s.stream)) {
            if !DEFAULT_STREAMS.contains(&s) {
                let next = FIRST_STREAM + h.streams.len() as u64;
                h.streams.entry(s).or_insert(next);
            }
        }
        for s in steps {
            let event = match &s.action {
                Action::Op(Op::RecordEvent { event } | Op::WaitEvent { event }) => *event,
                Action::Op(Op::HostWait(HostWait::Event(e))) => *e,
                _ => continue,
            };
            let next = 1 + h.events.len() as u64;
            h.events.entry(event).or_insert(next);
        }
        h
    }

    fn stream(&self, handle: u64) -> u64 {
        self.streams.get(&handle).copied().unwrap_or(handle)
    }

    fn event(&self, handle: u64) -> u64 {
        self.events.get(&handle).copied().unwrap_or(handle)
    }

    fn renumbered(&self) -> bool {
        !self.streams.is_empty() || !self.events.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::RegionRole;

    fn region(address: u64) -> Region {
        Region {
            region_id: 0,
            address,
            size: 0x1000,
            kind: MemoryKind::Device,
            role: RegionRole::Argument,
            chunk_size: 4096,
        }
    }

    #[test]
    fn host_bytes_are_replaced_but_device_pointers_and_zeros_stay() {
        let regions = [region(0x7000)];
        let mut host = vec![0xabu8; 32];
        host[8..16].copy_from_slice(&0x7010u64.to_le_bytes());
        let (out, kept) = redact_host_bytes(&host, 0x9000, &regions, 3);
        assert_eq!(kept, 1);
        assert_eq!(
            &out[8..16],
            &host[8..16],
            "a device pointer the range uploads"
        );
        assert!(out[..8].iter().all(|&b| b <= 15), "{out:?}");
        assert_ne!(out[16..], host[16..]);
        assert_eq!(redact_host_bytes(&host, 0x9000, &regions, 3).0, out, "pure");
        let zeros = vec![0u8; 24];
        assert_eq!(redact_host_bytes(&zeros, 0x9000, &regions, 3), (zeros, 0));
    }

    #[test]
    fn pointer_words_are_found_at_device_alignment() {
        let regions = [region(0x7000)];
        // dst ends in 4: the first aligned word starts 4 bytes in.
        let mut host = vec![0x11u8; 20];
        host[4..12].copy_from_slice(&0x7008u64.to_le_bytes());
        let (out, kept) = redact_host_bytes(&host, 0x9004, &regions, 0);
        assert_eq!((kept, &out[4..12]), (1, &host[4..12]));
    }

    #[test]
    fn an_nvtx_origin_loses_its_name_and_the_others_stay() {
        assert_eq!(
            redacted_origin("nvtx-range mydomain@layer.2 #1"),
            "nvtx-range"
        );
        assert_eq!(redacted_origin("launch-range 3:5"), "launch-range 3:5");
        assert_eq!(redacted_origin("profiler-range #2"), "profiler-range #2");
        assert_eq!(redacted_origin(""), "");
    }

    #[test]
    fn handles_are_renumbered_in_order_of_first_use_and_defaults_kept() {
        let steps = [
            Step::op(0x5000, Op::RecordEvent { event: 0xe0 }),
            Step::op(0, Op::WaitEvent { event: 0xe0 }),
            Step::op(0x6000, Op::HostWait(HostWait::Event(0xe9))),
        ];
        let h = Handles::of(&steps, None);
        assert_eq!(
            (h.stream(0x5000), h.stream(0x6000), h.stream(0)),
            (0x100, 0x101, 0)
        );
        assert_eq!((h.event(0xe0), h.event(0xe9)), (1, 2));
        assert!(!Handles::of(&steps[1..2], None).streams.contains_key(&0));
    }
}
