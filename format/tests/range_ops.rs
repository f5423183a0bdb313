//! Range captures of format 1.3: op steps (STEP_OP) and the RANGE event round trip, follow
//! their rules (errors name the byte offset), are refused by a reader that predates them,
//! detect every damaged byte, and survive salvage with what they still mean.

mod common;

use std::io::Cursor;

use kreplay_format::layout::{self, FLAG_CRITICAL, FRAME_LEN};
use kreplay_format::*;

const X: u64 = 0x7f00_0000_0000;
const Y: u64 = 0x7f00_0000_1000;
const STREAM_A: u64 = 0x5600_0000_1000;
const STREAM_B: u64 = 0x5600_0000_2000;

fn kernel(stream: u64, grid: u32) -> Step {
    let mut d = common::dispatch();
    d.grid = [grid, 1, 1];
    Step::kernel(stream, d)
}

/// Every op variant (and every host wait), on two streams, the range beginning with an op:
/// the DISPATCH is step 1, the first kernel step.
fn every_op() -> Vec<Step> {
    vec![
        Step::op(
            STREAM_A,
            Op::CopyHostToDevice {
                dst: X,
                host: (0..64).collect(),
            },
        ),
        kernel(STREAM_A, 4),
        Step::op(STREAM_A, Op::RecordEvent { event: 0xe1 }),
        Step::op(STREAM_B, Op::WaitEvent { event: 0xe1 }),
        Step::op(
            STREAM_B,
            Op::Fill {
                dst: Y + 16,
                value: 0xdead_beef,
                element_bytes: 4,
                count: 8,
            },
        ),
        Step::op(
            STREAM_B,
            Op::CopyDeviceToDevice {
                dst: Y,
                src: X + 512,
                bytes: 256,
            },
        ),
        kernel(STREAM_B, 2),
        Step::op(
            STREAM_B,
            Op::CopyDeviceToHost {
                src: Y,
                received: vec![7; 32],
            },
        ),
        Step::op(STREAM_B, Op::HostWait(HostWait::Stream)),
        Step::op(STREAM_A, Op::HostWait(HostWait::Event(0xe1))),
        Step::op(0, Op::HostWait(HostWait::Context)),
    ]
}

fn digest(regions: u32, seed: u64) -> Option<StateDigest> {
    Some(StateDigest {
        regions,
        digest: [seed, !seed],
    })
}

fn range_info(steps: usize) -> RangeInfo {
    RangeInfo {
        origin: "nvtx-range mydomain@layer.2 #1".into(),
        launches: Some((3, 4)),
        streams: vec![
            StreamInfo {
                handle: STREAM_A,
                flags: 1,
                priority: 0,
            },
            StreamInfo {
                handle: STREAM_B,
                flags: 0,
                priority: -1,
            },
        ],
        original_duration_ns: Some(98_765),
        digests: (0..steps)
            .map(|i| if i == 2 { None } else { digest(2, i as u64) })
            .collect(),
    }
}

/// What a test file holds besides its steps.
struct Parts {
    dispatch: Option<Dispatch>,
    range: Option<RangeInfo>,
    /// Regions as (id, address, size, kind).
    regions: Vec<(u32, u64, u64, MemoryKind)>,
}

impl Parts {
    fn of(steps: &[Step]) -> Parts {
        Parts {
            dispatch: None,
            range: Some(range_info(steps.len())),
            regions: vec![
                (0, X, 1024, MemoryKind::Device),
                (1, Y, 1024, MemoryKind::Device),
            ],
        }
    }
}

/// A range capture: head (its dispatch the first kernel step unless `parts` says otherwise),
/// the steps, the RANGE event, regions with their memory, a post chunk of region 1.
fn build(steps: &[Step], parts: Parts) -> Vec<u8> {
    let mut w = CaptureWriter::new(
        Cursor::new(Vec::new()),
        common::UUID,
        WriterOptions::default(),
    )
    .expect("writer");
    let modules = [ModuleImage {
        module_id: 1,
        kind: ModuleKind::Cubin,
        arch: 90,
        image: b"\x7fELF".to_vec(),
    }];
    let d = parts.dispatch.unwrap_or_else(|| {
        steps
            .iter()
            .find_map(Step::dispatch)
            .cloned()
            .unwrap_or_else(common::dispatch)
    });
    w.head(&CaptureHead {
        info: None,
        device: None,
        modules: &modules,
        dispatch: &d,
    })
    .expect("head");
    w.steps(steps).expect("steps");
    if let Some(r) = &parts.range {
        w.range_info(r).expect("range");
    }
    for &(id, address, size, kind) in &parts.regions {
        w.region(&Region {
            region_id: id,
            address,
            size,
            kind,
            role: RegionRole::Argument,
            chunk_size: 512,
        })
        .expect("region");
        let bytes: Vec<u8> = (0..size).map(|i| (i as u32 * 13 + id) as u8).collect();
        w.memory(id, MemoryState::Pre, 0, &bytes).expect("pre");
    }
    if let Some(&(_, _, size, _)) = parts.regions.iter().find(|r| r.0 == 1) {
        w.memory(1, MemoryState::Post, 0, &vec![9u8; size.min(512) as usize])
            .expect("post");
    }
    w.finish().expect("finish").into_inner()
}

fn every_op_file() -> Vec<u8> {
    let steps = every_op();
    build(&steps, Parts::of(&steps))
}

/// The refusal of a file (`parse` and `verify`), which must name a byte offset.
fn refusal(data: &[u8]) -> String {
    let e = Capture::parse(data).expect_err("refused");
    assert!(verify(data).is_err(), "verify accepted what parse refused");
    let offset = match &e {
        FormatError::Inconsistent { offset, .. } | FormatError::Decode { offset, .. } => *offset,
        other => panic!("not an inconsistency: {other}"),
    };
    assert!(offset > 0, "{e}");
    e.to_string()
}

fn event_of(data: &[u8], kind: EventKind) -> reader::ScannedEvent {
    scan(data)
        .expect("scan")
        .intact
        .into_iter()
        .find(|e| e.frame.kind == kind as u16)
        .expect("the event")
}

#[test]
fn every_op_and_the_range_round_trip_and_state_format_1_3() {
    let steps = every_op();
    let data = every_op_file();
    let cap = Capture::parse(&data).expect("parse");
    assert_eq!(cap.steps, steps);
    assert_eq!(cap.range, Some(range_info(steps.len())));
    assert_eq!(cap.header.minor, layout::RANGE_MINOR);
    assert_eq!(
        Some(&cap.dispatch),
        steps[1].dispatch(),
        "the first kernel step"
    );
    verify(&data).expect("verify");
    for kind in [EventKind::StepOp, EventKind::Range] {
        assert_ne!(
            event_of(&data, kind).frame.flags & FLAG_CRITICAL,
            0,
            "{} must be critical",
            kind.name()
        );
    }
    let kinds: Vec<&str> = cap.steps.iter().map(Step::kind).collect();
    assert_eq!(
        kinds,
        [
            "copy-htod",
            "kernel",
            "event-record",
            "event-wait",
            "fill",
            "copy-dtod",
            "kernel",
            "copy-dtoh",
            "host-wait",
            "host-wait",
            "host-wait"
        ]
    );
}

#[test]
fn a_range_info_of_defaults_round_trips_too() {
    let steps = vec![kernel(0, 4)];
    let mut parts = Parts::of(&steps);
    parts.range = Some(RangeInfo::default());
    let cap_bytes = build(&steps, parts);
    let cap = Capture::parse(&cap_bytes).expect("parse");
    assert_eq!(cap.range, Some(RangeInfo::default()));
    assert_eq!(
        cap.header.minor,
        layout::RANGE_MINOR,
        "RANGE alone states 1.3"
    );
}

#[test]
fn a_kernel_only_range_without_range_event_still_states_1_2() {
    let steps = vec![kernel(0, 4), kernel(0, 2)];
    let mut parts = Parts::of(&steps);
    parts.range = None;
    let cap_bytes = build(&steps, parts);
    assert_eq!(
        Capture::parse(&cap_bytes).expect("parse").header.minor,
        layout::STEP_MINOR
    );
}

/// `data` with its header stating minor `minor` (header CRC recomputed).
fn stating_minor(mut data: Vec<u8>, minor: u16) -> Vec<u8> {
    let mut h = layout::FileHeader::decode(&data).expect("header");
    h.minor = minor;
    data[..64].copy_from_slice(&h.encode());
    data
}

#[test]
fn op_steps_and_the_range_event_in_a_file_that_states_1_2_are_refused() {
    let msg = refusal(&stating_minor(every_op_file(), 2));
    assert!(
        msg.contains("step op") || msg.contains("STEP_OP") || msg.contains("format 1.2"),
        "{msg}"
    );
    assert!(msg.contains("needs 1.3"), "{msg}");
    // A kernel-only range whose RANGE event needs 1.3.
    let steps = vec![kernel(0, 4)];
    let msg = refusal(&stating_minor(build(&steps, Parts::of(&steps)), 2));
    assert!(msg.contains("format 1.2") && msg.contains("1.3"), "{msg}");
}

type Extra = fn(&mut CaptureWriter<Cursor<Vec<u8>>>);

/// The file of `steps` (with its RANGE event) with `before_steps` written between the
/// dispatch and the steps and `after_range` right after the RANGE event.
fn with_extra_events(steps: &[Step], before_steps: Extra, after_range: Extra) -> Vec<u8> {
    let mut w = CaptureWriter::new(
        Cursor::new(Vec::new()),
        common::UUID,
        WriterOptions::default(),
    )
    .expect("writer");
    w.module(&ModuleImage {
        module_id: 1,
        kind: ModuleKind::Cubin,
        arch: 90,
        image: b"\x7fELF".to_vec(),
    })
    .expect("module");
    w.dispatch(steps.iter().find_map(Step::dispatch).expect("a kernel"))
        .expect("dispatch");
    before_steps(&mut w);
    w.steps(steps).expect("steps");
    w.range_info(&range_info(steps.len())).expect("range");
    after_range(&mut w);
    for (id, address) in [(0u32, X), (1, Y)] {
        w.region(&Region {
            region_id: id,
            address,
            size: 1024,
            kind: MemoryKind::Device,
            role: RegionRole::Argument,
            chunk_size: 1024,
        })
        .expect("region");
        w.memory(id, MemoryState::Pre, 0, &[1u8; 1024])
            .expect("pre");
    }
    w.finish().expect("finish").into_inner()
}

fn no_event(_: &mut CaptureWriter<Cursor<Vec<u8>>>) {}

fn default_range(w: &mut CaptureWriter<Cursor<Vec<u8>>>) {
    w.range_info(&RangeInfo::default()).expect("range")
}

#[test]
fn a_second_range_event_is_refused() {
    let msg = refusal(&with_extra_events(&every_op(), no_event, default_range));
    assert!(msg.contains("a second range event"), "{msg}");
}

#[test]
fn a_range_event_before_any_step_is_refused() {
    let msg = refusal(&with_extra_events(&every_op(), default_range, no_event));
    assert!(msg.contains("range event before any step"), "{msg}");
}

#[test]
fn an_op_outside_every_region_is_refused_naming_the_step() {
    let mut steps = every_op();
    steps[4] = Step::op(
        STREAM_B,
        Op::Fill {
            dst: Y + 1020,
            value: 0,
            element_bytes: 4,
            count: 2,
        },
    );
    let msg = refusal(&build(&steps, Parts::of(&steps)));
    assert!(
        msg.contains("step 4 (fill)") && msg.contains("outside every region"),
        "{msg}"
    );
}

#[test]
fn an_op_into_a_cuda_array_region_is_refused() {
    // A CUDA array's region has no device address: its bytes are packed texels.
    let mut steps = every_op();
    steps[5] = Step::op(
        STREAM_B,
        Op::CopyDeviceToDevice {
            dst: 0x10,
            src: X,
            bytes: 16,
        },
    );
    let mut parts = Parts::of(&steps);
    parts.regions.push((2, 0, 1024, MemoryKind::CudaArray));
    let msg = refusal(&build(&steps, parts));
    assert!(msg.contains("step 5 (copy-dtod)"), "{msg}");
}

#[test]
fn more_digests_than_steps_are_refused() {
    let steps = every_op();
    let mut parts = Parts::of(&steps);
    parts.range = Some(range_info(steps.len() + 1));
    let msg = refusal(&build(&steps, parts));
    assert!(msg.contains("12 step digests for 11 steps"), "{msg}");
}

#[test]
fn a_digest_over_more_regions_than_held_is_refused() {
    let steps = every_op();
    let mut parts = Parts::of(&steps);
    let mut r = range_info(steps.len());
    r.digests[3] = digest(3, 0);
    parts.range = Some(r);
    let msg = refusal(&build(&steps, parts));
    assert!(
        msg.contains("step 3's digest") && msg.contains("no region 2"),
        "{msg}"
    );
}

#[test]
fn a_range_with_no_kernel_step_is_refused() {
    let steps: Vec<Step> = every_op()
        .into_iter()
        .filter(|s| s.dispatch().is_none())
        .collect();
    let msg = refusal(&build(&steps, Parts::of(&steps)));
    assert!(msg.contains("no kernel step"), "{msg}");
}

#[test]
fn a_range_whose_first_step_is_an_op_has_its_first_kernel_step_as_dispatch() {
    let steps = every_op();
    assert!(steps[0].dispatch().is_none());
    Capture::parse(&every_op_file()).expect("accepted");
    // The DISPATCH is the first kernel step, not the second.
    let mut parts = Parts::of(&steps);
    parts.dispatch = steps[6].dispatch().cloned();
    let msg = refusal(&build(&steps, parts));
    assert!(msg.contains("first kernel step differs"), "{msg}");
}

#[test]
fn a_reader_of_1_2_refuses_an_op_step_naming_both_versions() {
    // What a 1.2 reader sees: a critical kind it does not know in a newer-minor file. Give
    // the STEP_OP events a kind this reader does not know either, and it answers so.
    let mut data = every_op_file();
    let found_minor = Capture::parse(&data).expect("parse").header.minor;
    let ev = event_of(&data, EventKind::StepOp);
    let at = ev.offset as usize;
    data[at..at + 2].copy_from_slice(&0x7ff0u16.to_le_bytes());
    let c = crc32fast::hash(&data[at..at + 20]);
    data[at + 20..at + 24].copy_from_slice(&c.to_le_bytes());
    // The index names the kind too: a reader refuses at the index or at the event.
    let e = Capture::parse(&data).expect_err("refused");
    assert!(
        matches!(
            e,
            FormatError::UnknownCritical { .. } | FormatError::Inconsistent { .. }
        ),
        "{e}"
    );
    let old = FormatError::UnknownCritical {
        offset: ev.offset,
        kind: EventKind::StepOp as u16,
        found_major: 1,
        found_minor,
        supported_major: 1,
        supported_minor: layout::STEP_MINOR,
    };
    let msg = old.to_string();
    assert!(msg.contains("1.3") && msg.contains("1.2"), "{msg}");
}

/// A small 1.3 range (an op first, a kernel, a host-to-device copy on two streams): every
/// byte of it is flipped and cut, and the fuzzer starts from it.
fn small_range() -> Vec<u8> {
    let steps = vec![
        Step::op(STREAM_B, Op::WaitEvent { event: 1 }),
        kernel(STREAM_A, 1),
        Step::op(
            STREAM_A,
            Op::CopyHostToDevice {
                dst: X,
                host: vec![3; 8],
            },
        ),
    ];
    let mut parts = Parts::of(&steps);
    parts.regions = vec![
        (0, X, 64, MemoryKind::Device),
        (1, Y, 64, MemoryKind::Device),
    ];
    parts.range = Some(RangeInfo {
        digests: vec![None, digest(2, 5), None],
        ..range_info(0)
    });
    build(&steps, parts)
}

#[test]
fn the_small_range_is_in_the_parse_fuzz_corpus() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus/parse/range-1.3-ops.krr");
    if std::env::var_os("KREPLAY_BLESS").is_some() {
        std::fs::write(&path, small_range()).expect("write corpus file");
    }
    let on_disk = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (KREPLAY_BLESS=1 writes it)", path.display()));
    assert!(
        on_disk == small_range(),
        "{}: not the small range",
        path.display()
    );
}

#[test]
fn every_single_bit_flip_of_a_1_3_range_is_detected() {
    let full = small_range();
    verify(&full).expect("the intact file verifies");
    for byte in 0..full.len() {
        for bit in 0..8 {
            let mut data = full.clone();
            data[byte] ^= 1 << bit;
            assert!(
                verify(&data).is_err(),
                "flip of bit {bit} in byte {byte} went unnoticed"
            );
        }
    }
    for cut in 0..full.len() {
        assert!(verify(&full[..cut]).is_err(), "cut at {cut} went unnoticed");
    }
}

/// `data` with the payload of region `id`'s pre chunk damaged (its frame intact).
fn damage_pre_chunk(mut data: Vec<u8>, id: u32) -> Vec<u8> {
    let chunk = scan(&data)
        .expect("scan")
        .intact
        .into_iter()
        .filter(|e| e.frame.kind == EventKind::MemoryChunk as u16)
        .find(|e| {
            let at = e.offset as usize + FRAME_LEN;
            data[at..at + 4] == id.to_le_bytes() && data[at + 4] == 0
        })
        .expect("the pre chunk");
    let payload = chunk.offset as usize + FRAME_LEN + layout::CHUNK_PREFIX_LEN;
    data[payload] ^= 0xff;
    data
}

fn salvaged(data: &[u8]) -> (Vec<u8>, SalvageReport) {
    salvage_verified(data).expect("salvage")
}

#[test]
fn salvage_of_a_range_that_lost_a_region_blocks_the_ops_naming_it_and_forgets_its_digests() {
    let steps = every_op();
    let (out, report) = salvaged(&damage_pre_chunk(every_op_file(), 1));
    assert_eq!(report.dropped_regions, vec![1]);
    let cap = Capture::parse(&out).expect("parse salvaged");
    assert_eq!(cap.steps, steps, "every step is kept");
    let why = replay_blockers(&cap);
    for step in [4, 5, 7] {
        assert!(
            why.iter()
                .any(|b| b.starts_with(&format!("step {step} (")) && b.contains("region 1")),
            "step {step}: {why:?}"
        );
    }
    assert!(
        why.iter().any(|b| b.contains("argument word")),
        "the dispatch's y is lost too: {why:?}"
    );
    assert_eq!(
        report.replay_blockers, why,
        "salvage reports what the reader finds"
    );
    // Digests over regions 0..2 name region 1, which is gone: forgotten, the rest kept.
    let range = cap.range.expect("the range survives");
    assert!(
        range.digests.iter().all(Option::is_none),
        "{:?}",
        range.digests
    );
    assert_eq!(range.streams, range_info(steps.len()).streams);
}

#[test]
fn salvage_keeps_the_digests_over_the_regions_that_remain() {
    let steps = every_op();
    let mut parts = Parts::of(&steps);
    let mut r = range_info(steps.len());
    r.digests[0] = digest(1, 42);
    parts.range = Some(r);
    let (out, _) = salvaged(&damage_pre_chunk(build(&steps, parts), 1));
    let cap = Capture::parse(&out).expect("parse salvaged");
    let digests = cap.range.expect("range").digests;
    assert_eq!(digests[0], digest(1, 42), "over region 0 alone: still true");
    assert!(digests[1..].iter().all(Option::is_none));
}

#[test]
fn salvage_of_a_range_that_lost_a_step_event_says_it_cannot_be_replayed() {
    let data = every_op_file();
    let ev = event_of(&data, EventKind::StepOp);
    let mut damaged = data.clone();
    damaged[ev.offset as usize + FRAME_LEN + 2] ^= 0x40;
    let (out, report) = salvaged(&damaged);
    let cap = Capture::parse(&out).expect("parse salvaged");
    assert_eq!(cap.steps.len(), every_op().len() - 1);
    let why = replay_blockers(&cap);
    assert!(
        why.iter()
            .any(|b| b.contains(&format!("step event at byte {}", ev.offset))),
        "{why:?}"
    );
    assert_eq!(report.replay_blockers, why);
    // Digests are per step: with one gone they name no step for sure.
    assert!(cap.range.expect("range").digests.is_empty());
}

#[test]
fn an_intact_salvaged_range_is_the_range() {
    let data = every_op_file();
    let cap = Capture::parse(&data).expect("parse");
    let cut = data[..cap.header.index_offset as usize].to_vec();
    let (out, _) = salvaged(&cut);
    let saved = Capture::parse(&out).expect("parse salvaged");
    assert_eq!(saved.steps, cap.steps);
    assert_eq!(saved.range, cap.range);
    assert_eq!(saved.header.minor, layout::RANGE_MINOR);
}

// Measured on the H200: a range's 1.5 MiB device-to-host copy of zeros compressed 64-fold and
// more, and the reader refused its own capture as a zip bomb. Host bytes are stored as they
// are, so a file of any such copy reads back.
#[test]
fn a_large_copy_of_zeros_round_trips() {
    let size = 4u64 << 20;
    let steps = vec![
        kernel(0, 4),
        Step::op(
            0,
            Op::CopyDeviceToHost {
                src: X,
                received: vec![0; size as usize],
            },
        ),
    ];
    let mut parts = Parts::of(&steps);
    parts.regions[0].2 = size;
    parts.regions[1].1 = X + size;
    let data = build(&steps, parts);
    let cap = Capture::parse(&data).expect("a capture of a large zero copy parses");
    assert_eq!(cap.steps[1], steps[1]);
}
