//! The steps of a range capture and what the capture says of the range as a whole. On disk a
//! kernel step is a STEP event (`KernelStep`, since 1.2) and any other step a STEP_OP event
//! (`OpStep`, since 1.3), interleaved in issue order; the RANGE event (`RangeInfo`, since 1.3)
//! follows them. In memory both kinds are one `Step`.

use serde::{Deserialize, Serialize};

use crate::events::{Dispatch, MemoryKind, Region};

/// The most host bytes one copy step may hold (a host-to-device copy's source, a
/// device-to-host copy's received bytes): they live inline in the step's event.
pub const MAX_STEP_HOST_BYTES: u64 = 16 << 20;

/// One step of a range capture, in issue order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The application's stream handle value the step was issued on (0: the legacy default
    /// stream, 2: the per-thread default stream). It names a stream within the capture
    /// (`RangeInfo::streams`); a replay cannot use it.
    pub stream: u64,
    pub action: Action,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A kernel launch, as a single capture's DISPATCH holds it (its in-app duration in
    /// `original_duration_ns`).
    Kernel(Dispatch),
    Op(Op),
}

/// A step other than a kernel launch. Addresses are the recorded process's; each device span
/// lies inside a region of the capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// `cuMemcpy*` between two device addresses.
    CopyDeviceToDevice { dst: u64, src: u64, bytes: u64 },
    /// `cuMemcpy*` from host memory: the bytes the application's host buffer held.
    CopyHostToDevice { dst: u64, host: Vec<u8> },
    /// `cuMemcpy*` to host memory: the bytes the application received (a replay checks it
    /// receives the same).
    CopyDeviceToHost { src: u64, received: Vec<u8> },
    /// `cuMemsetD8/D16/D32*`: `count` elements of `element_bytes` (1, 2 or 4) set to `value`.
    Fill {
        dst: u64,
        value: u32,
        element_bytes: u8,
        count: u64,
    },
    /// `cuEventRecord*` of the application's event (its handle value) on the step's stream.
    RecordEvent { event: u64 },
    /// `cuStreamWaitEvent`: the step's stream waits for the event's latest record; an event
    /// not recorded earlier in the range had completed when the range began (a no-op).
    WaitEvent { event: u64 },
    /// The host waited for the GPU inside the range (the stream, the context, or an event).
    HostWait(HostWait),
}

/// What the host waited for (`Op::HostWait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostWait {
    /// `cuStreamSynchronize` of the step's stream.
    Stream,
    /// `cuCtxSynchronize`.
    Context,
    /// `cuEventSynchronize` of the application's event (its handle value).
    Event(u64),
}

/// A kernel step as the STEP event holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelStep {
    pub stream: u64,
    pub dispatch: Dispatch,
}

/// Any other step as the STEP_OP event holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpStep {
    pub stream: u64,
    pub op: Op,
}

/// One stream of a range (`RangeInfo::streams`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    /// The application's handle value, as steps name it.
    pub handle: u64,
    /// `cuStreamGetFlags` (1: non-blocking: no implicit order with the legacy default stream).
    pub flags: u32,
    /// `cuStreamGetPriority`.
    pub priority: i32,
}

/// A digest of the range's memory after a step: the regions `0..regions` (those the range
/// held by then), each digested chunk by chunk with the GPU's chunk digest and folded with
/// `fold_digests` (CUDA-array regions count but contribute nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateDigest {
    pub regions: u32,
    pub digest: [u64; 2],
}

/// The RANGE event: what a range capture is as a whole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeInfo {
    /// How the range was selected, as the user would give it again (`launch-range 3:5`,
    /// `nvtx-range layer.2 #1`, `profiler-range #1`, `graph-launch ...`).
    pub origin: String,
    /// Process launch indices of the range's first and last kernel steps, when known.
    pub launches: Option<(u64, u64)>,
    /// Every stream a step names, in order of first use.
    pub streams: Vec<StreamInfo>,
    /// In-app duration of the whole range, when measured.
    pub original_duration_ns: Option<u64>,
    /// Per step, in step order: the digest of the range's memory after it (empty, or `None`
    /// for a step, when not taken).
    pub digests: Vec<Option<StateDigest>>,
}

impl Step {
    pub fn kernel(stream: u64, dispatch: Dispatch) -> Step {
        Step {
            stream,
            action: Action::Kernel(dispatch),
        }
    }

    pub fn op(stream: u64, op: Op) -> Step {
        Step {
            stream,
            action: Action::Op(op),
        }
    }

    /// The launch, for a kernel step.
    pub fn dispatch(&self) -> Option<&Dispatch> {
        match &self.action {
            Action::Kernel(d) => Some(d),
            Action::Op(_) => None,
        }
    }

    pub fn dispatch_mut(&mut self) -> Option<&mut Dispatch> {
        match &mut self.action {
            Action::Kernel(d) => Some(d),
            Action::Op(_) => None,
        }
    }

    /// A short kind name (`kernel`, `copy-dtod`, `copy-htod`, `copy-dtoh`, `fill`,
    /// `event-record`, `event-wait`, `host-wait`), as `info` and Python show it.
    pub fn kind(&self) -> &'static str {
        match &self.action {
            Action::Kernel(_) => "kernel",
            Action::Op(op) => op.kind(),
        }
    }
}

impl Op {
    pub fn kind(&self) -> &'static str {
        match self {
            Op::CopyDeviceToDevice { .. } => "copy-dtod",
            Op::CopyHostToDevice { .. } => "copy-htod",
            Op::CopyDeviceToHost { .. } => "copy-dtoh",
            Op::Fill { .. } => "fill",
            Op::RecordEvent { .. } => "event-record",
            Op::WaitEvent { .. } => "event-wait",
            Op::HostWait(_) => "host-wait",
        }
    }

    /// The device spans the step reads and writes: (address, bytes, written).
    pub fn device_spans(&self) -> Vec<(u64, u64, bool)> {
        match self {
            Op::CopyDeviceToDevice { dst, src, bytes } => {
                vec![(*src, *bytes, false), (*dst, *bytes, true)]
            }
            Op::CopyHostToDevice { dst, host } => vec![(*dst, host.len() as u64, true)],
            Op::CopyDeviceToHost { src, received } => vec![(*src, received.len() as u64, false)],
            Op::Fill {
                dst,
                element_bytes,
                count,
                ..
            } => vec![(*dst, count.saturating_mul(*element_bytes as u64), true)],
            Op::RecordEvent { .. } | Op::WaitEvent { .. } | Op::HostWait(_) => Vec::new(),
        }
    }

    /// Bytes the step moves or sets on the device (0 for the ordering steps).
    pub fn bytes(&self) -> u64 {
        self.device_spans()
            .iter()
            .filter(|s| s.2)
            .map(|s| s.1)
            .max()
            .unwrap_or_else(|| self.device_spans().first().map_or(0, |s| s.1))
    }
}

/// What is wrong with op step `index`, if anything: each device span lies inside an
/// addressable region, a fill's element is 1, 2 or 4 bytes, host bytes within
/// `MAX_STEP_HOST_BYTES`.
pub fn op_problem(op: &Op, index: usize, regions: &[Region]) -> Option<String> {
    if let Op::Fill { element_bytes, .. } = op {
        if !matches!(element_bytes, 1 | 2 | 4) {
            return Some(format!(
                "step {index} (fill) has {element_bytes}-byte elements (1, 2 or 4 allowed)"
            ));
        }
    }
    if let Op::CopyHostToDevice { host: b, .. } | Op::CopyDeviceToHost { received: b, .. } = op {
        if b.len() as u64 > MAX_STEP_HOST_BYTES {
            return Some(format!(
                "step {index} ({}) holds {} host bytes (at most {MAX_STEP_HOST_BYTES})",
                op.kind(),
                b.len()
            ));
        }
    }
    for (addr, bytes, _) in op.device_spans() {
        let inside = regions.iter().any(|r| {
            r.kind != MemoryKind::CudaArray
                && addr >= r.address
                && addr
                    .checked_add(bytes)
                    .is_some_and(|end| end <= r.address.saturating_add(r.size))
        });
        if !inside {
            return Some(format!(
                "step {index} ({}) touches {bytes} bytes at {addr:#x}, outside every region of the capture",
                op.kind()
            ));
        }
    }
    None
}

/// Folds per-chunk 128-bit digests into one, in order (FNV-1a over their little-endian
/// bytes, two lanes with different offsets).
pub fn fold_digests<'a>(digests: impl IntoIterator<Item = &'a [u64; 2]>) -> [u64; 2] {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut lanes = [0xcbf2_9ce4_8422_2325u64, 0x6c62_272e_07bb_0142u64];
    for d in digests {
        for word in d {
            for b in word.to_le_bytes() {
                lanes[0] = (lanes[0] ^ b as u64).wrapping_mul(PRIME);
                lanes[1] = (lanes[1] ^ b as u64).wrapping_mul(PRIME).rotate_left(5);
            }
        }
    }
    lanes
}

/// One held region's part of a state digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegionDigest {
    /// A CUDA array: no address, nothing digested.
    Array,
    /// The region's chunk digests, in chunk order.
    Chunks(Vec<[u64; 2]>),
}

/// The state digest of `regions` (by region id): every chunk digest of every region, in that
/// order, in one `fold_digests` (CUDA arrays count in `regions` and add nothing). The recorder
/// and the player both call this: the rule is in one place.
pub fn state_digest(regions: &[RegionDigest]) -> StateDigest {
    let chunks = regions.iter().flat_map(|r| match r {
        RegionDigest::Array => [].iter(),
        RegionDigest::Chunks(c) => c.iter(),
    });
    StateDigest {
        regions: regions.len() as u32,
        digest: fold_digests(chunks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::RegionRole;

    fn region(address: u64, size: u64) -> Region {
        Region {
            region_id: 0,
            address,
            size,
            kind: MemoryKind::Device,
            role: RegionRole::Argument,
            chunk_size: 256,
        }
    }

    #[test]
    fn an_op_must_stay_inside_a_region() {
        let regions = [region(0x1000, 0x100)];
        let inside = Op::CopyDeviceToDevice {
            dst: 0x1000,
            src: 0x1080,
            bytes: 0x80,
        };
        assert_eq!(op_problem(&inside, 1, &regions), None);
        let past = Op::Fill {
            dst: 0x10f0,
            value: 0,
            element_bytes: 4,
            count: 8,
        };
        let why = op_problem(&past, 2, &regions).expect("refused");
        assert!(
            why.contains("step 2 (fill)") && why.contains("0x10f0"),
            "{why}"
        );
        let wraps = Op::CopyDeviceToDevice {
            dst: 0x1000,
            src: u64::MAX - 4,
            bytes: 16,
        };
        assert!(op_problem(&wraps, 0, &regions).is_some());
        let odd = Op::Fill {
            dst: 0x1000,
            value: 0,
            element_bytes: 3,
            count: 1,
        };
        assert!(op_problem(&odd, 0, &regions)
            .expect("refused")
            .contains("3-byte"));
        assert_eq!(op_problem(&Op::WaitEvent { event: 7 }, 0, &[]), None);
    }

    #[test]
    fn folding_depends_on_every_digest_and_its_order() {
        let a = [1u64, 2];
        let b = [3u64, 4];
        let ab = fold_digests([&a, &b]);
        assert_ne!(ab, fold_digests([&b, &a]));
        assert_ne!(ab, fold_digests([&a]));
        assert_eq!(ab, fold_digests([&a, &b]));
    }

    #[test]
    fn kinds_and_bytes_are_what_info_shows() {
        let s = Step::op(
            3,
            Op::Fill {
                dst: 0,
                value: 0,
                element_bytes: 4,
                count: 10,
            },
        );
        assert_eq!((s.kind(), s.dispatch().is_none()), ("fill", true));
        let Action::Op(op) = &s.action else {
            panic!("an op")
        };
        assert_eq!(op.bytes(), 40);
        let copy = Op::CopyDeviceToHost {
            src: 0,
            received: vec![0; 12],
        };
        assert_eq!(copy.bytes(), 12);
    }

    #[test]
    fn all_chunks_fold_in_region_order_and_arrays_only_count() {
        let (a, b, c) = ([1u64, 2], [3u64, 4], [5u64, 6]);
        let regions = [
            RegionDigest::Chunks(vec![a, b]),
            RegionDigest::Array,
            RegionDigest::Chunks(vec![c]),
        ];
        let d = state_digest(&regions);
        assert_eq!(d.regions, 3, "the array counts");
        assert_eq!(
            d.digest,
            fold_digests([&a, &b, &c]),
            "one fold, no separators"
        );
        let swapped = [
            RegionDigest::Chunks(vec![c]),
            RegionDigest::Array,
            RegionDigest::Chunks(vec![a, b]),
        ];
        assert_ne!(
            state_digest(&swapped).digest,
            d.digest,
            "region order matters"
        );
        let no_array = [
            RegionDigest::Chunks(vec![a, b]),
            RegionDigest::Chunks(vec![c]),
        ];
        let without = state_digest(&no_array);
        assert_eq!(without.digest, d.digest, "an array adds no bytes");
        assert_eq!(without.regions, 2);
    }

    #[test]
    fn a_range_holding_nothing_digests_to_the_empty_fold() {
        let d = state_digest(&[]);
        assert_eq!(d.regions, 0);
        assert_eq!(d.digest, fold_digests(std::iter::empty()));
    }
}
