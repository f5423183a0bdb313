//! `verify_observed`: progress reaches the totals of both phases, never goes back, and every
//! stored chunk's bytes are reported done exactly once, after the scan reported the file.

use kreplay_format::*;

struct Seen {
    progress: Vec<(Phase, u64, u64)>,
    done: Vec<(u64, u64)>,
}

impl Observer for Seen {
    fn progress(&mut self, phase: Phase, done: u64, total: u64) {
        self.progress.push((phase, done, total));
    }
    fn done_with(&mut self, start: u64, end: u64) {
        self.done.push((start, end));
    }
}

#[test]
fn progress_and_released_ranges_cover_the_file() {
    let p = format!(
        "{}/../testdata/captures/cuda-saxpy.krr",
        env!("CARGO_MANIFEST_DIR")
    );
    let data = std::fs::read(&p).expect("capture");
    let mut seen = Seen {
        progress: vec![],
        done: vec![],
    };
    let report = verify_observed(&data, &mut seen).expect("intact");
    let scan: Vec<_> = seen
        .progress
        .iter()
        .filter(|p| p.0 == Phase::Scan)
        .collect();
    let chunks: Vec<_> = seen
        .progress
        .iter()
        .filter(|p| p.0 == Phase::Chunks)
        .collect();
    assert_eq!(
        scan.last().map(|p| (p.1, p.2)),
        Some((data.len() as u64, data.len() as u64))
    );
    let cap = Capture::parse(&data).expect("parse");
    let stored: Vec<_> = cap
        .all_chunks()
        .into_iter()
        .filter(|c| c.encoding != ChunkEncoding::Zero)
        .collect();
    let raw: u64 = stored.iter().map(|c| c.raw_len).sum();
    assert_eq!(chunks.last().map(|p| (p.1, p.2)), Some((raw, raw)));
    for w in seen.progress.windows(2) {
        if w[0].0 == w[1].0 {
            assert!(w[0].1 <= w[1].1, "progress went back: {w:?}");
        }
    }
    // Every stored chunk's payload is released once, in file order.
    let mut expected: Vec<(u64, u64)> = stored
        .iter()
        .map(|c| (c.payload_offset, c.payload_offset + c.payload_len))
        .collect();
    expected.sort_unstable();
    assert_eq!(seen.done, expected);
    assert_eq!(report.chunks as usize, cap.all_chunks().len());
}

#[test]
fn a_damaged_file_stops_the_observer_with_the_error() {
    let p = format!(
        "{}/../testdata/captures/cuda-saxpy.krr",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut data = std::fs::read(&p).expect("capture");
    let at = data.len() / 2;
    data[at] ^= 0x40;
    let mut seen = Seen {
        progress: vec![],
        done: vec![],
    };
    let e = verify_observed(&data, &mut seen).expect_err("damaged");
    assert!(
        e.to_string().contains("offset") || e.to_string().contains("checksum"),
        "{e}"
    );
}
