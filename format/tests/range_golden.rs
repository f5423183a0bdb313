//! The golden 1.3 range capture `testdata/golden/range-ops.krr`: a real capture's kernel,
//! module and memory (cuda-saxpy) as a range of kernel, copy, fill, event and host-wait steps
//! on two streams, beginning with an op. The player's and the CLI's tests of range captures
//! read it; this test builds it and locks its bytes (`KREPLAY_BLESS=1 cargo test -p
//! kreplay-format --test range_golden` rewrites it, deliberately).

use std::io::Cursor;
use std::path::PathBuf;

use kreplay_format::*;

const STREAM_A: u64 = 0x5600_0000_1000;
const STREAM_B: u64 = 0x5600_0000_2000;
const EVENT: u64 = 0x5600_0000_e000;

fn testdata(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(path)
}

/// The steps over saxpy's x (region 0) and y (region 1), on two streams.
fn steps(cap: &Capture<'_>) -> Vec<Step> {
    let (x, y) = (cap.regions[0].address, cap.regions[1].address);
    let mut second = cap.dispatch.clone();
    second.grid = [7, 1, 1];
    second.original_duration_ns = Some(1500);
    let host: Vec<u8> = (0..64u32)
        .flat_map(|i| (i as f32 / 4.0).to_le_bytes())
        .collect();
    vec![
        Step::op(STREAM_A, Op::CopyHostToDevice { dst: x, host }),
        Step::kernel(STREAM_A, cap.dispatch.clone()),
        Step::op(STREAM_A, Op::RecordEvent { event: EVENT }),
        Step::op(STREAM_B, Op::WaitEvent { event: EVENT }),
        Step::op(
            STREAM_B,
            Op::Fill {
                dst: y + 4096,
                value: 1.0f32.to_bits(),
                element_bytes: 4,
                count: 1024,
            },
        ),
        Step::op(
            STREAM_B,
            Op::CopyDeviceToDevice {
                dst: y + 8192,
                src: x,
                bytes: 4096,
            },
        ),
        Step::kernel(STREAM_B, second),
        Step::op(
            STREAM_B,
            Op::CopyDeviceToHost {
                src: y,
                received: (0..16u32).flat_map(|i| (i as f32).to_le_bytes()).collect(),
            },
        ),
        Step::op(STREAM_B, Op::HostWait(HostWait::Stream)),
    ]
}

fn range_info(cap: &Capture<'_>, steps: usize) -> RangeInfo {
    let regions = cap.regions.len() as u32;
    RangeInfo {
        origin: "launch-range 2:3".into(),
        launches: Some((2, 3)),
        streams: vec![
            StreamInfo {
                handle: STREAM_A,
                flags: 1,
                priority: 0,
            },
            StreamInfo {
                handle: STREAM_B,
                flags: 1,
                priority: -1,
            },
        ],
        original_duration_ns: Some(31_000),
        digests: (0..steps as u64)
            .map(|i| {
                Some(StateDigest {
                    regions,
                    digest: [0x1234_5678 + i, 0x9abc_def0 ^ i],
                })
            })
            .collect(),
    }
}

fn range_ops_bytes() -> Vec<u8> {
    let src = std::fs::read(testdata("captures/cuda-saxpy.krr")).expect("testdata capture");
    let cap = Capture::parse(&src).expect("parse");
    let steps = steps(&cap);
    let mut info = cap.info.clone().expect("capture info");
    info.kernel_filter = "launch-range 2:3".into();
    let mut w = CaptureWriter::new(Cursor::new(Vec::new()), [5; 16], WriterOptions::default())
        .expect("writer");
    w.head(&CaptureHead {
        info: Some(&info),
        device: cap.device.as_ref(),
        modules: &cap.modules,
        dispatch: &cap.dispatch,
    })
    .expect("head");
    w.steps(&steps).expect("steps");
    w.range_info(&range_info(&cap, steps.len())).expect("range");
    let mut buf = Vec::new();
    for r in &cap.regions {
        w.region(r).expect("region");
        buf.resize(r.size as usize, 0);
        cap.read_region_into(r.region_id, &mut buf).expect("pre");
        w.memory(r.region_id, MemoryState::Pre, 0, &buf)
            .expect("pre");
    }
    for r in &cap.regions {
        for c in cap.chunks(r.region_id, MemoryState::Post) {
            buf.resize(c.raw_len as usize, 0);
            cap.read_chunk_into(c, &mut buf).expect("post");
            w.memory(r.region_id, MemoryState::Post, c.offset, &buf)
                .expect("post");
        }
    }
    pack::write_tail(&mut w, &cap).expect("tail");
    w.finish().expect("finish").into_inner()
}

#[test]
fn the_golden_range_capture_is_the_one_built_here() {
    let golden = testdata("golden/range-ops.krr");
    let bytes = range_ops_bytes();
    if std::env::var_os("KREPLAY_BLESS").is_some() {
        std::fs::write(&golden, &bytes).expect("write golden");
    }
    let on_disk = std::fs::read(&golden).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with KREPLAY_BLESS=1 to create)",
            golden.display()
        )
    });
    assert!(
        on_disk == bytes,
        "{}: not the range this test builds (KREPLAY_BLESS=1 rewrites it)",
        golden.display()
    );
}

#[test]
fn the_golden_range_capture_reads_back_as_built() {
    let bytes = std::fs::read(testdata("golden/range-ops.krr")).expect("golden");
    verify(&bytes).expect("verifies");
    let cap = Capture::parse(&bytes).expect("parse");
    assert_eq!(cap.header.minor, layout::RANGE_MINOR);
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
            "host-wait"
        ]
    );
    let streams: std::collections::BTreeSet<u64> = cap.steps.iter().map(|s| s.stream).collect();
    assert_eq!(streams.len(), 2);
    let range = cap.range.as_ref().expect("range");
    assert_eq!(range.digests.len(), cap.steps.len());
    assert_eq!(Some(&cap.dispatch), cap.steps[1].dispatch());
    assert!(cap.is_written(1), "saxpy's y holds recorded output");
}
