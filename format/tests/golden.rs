//! Golden files lock the on-disk bytes: a change to the layout, the codec or the compressor
//! settings shows up here. Regenerate deliberately with `KREPLAY_BLESS=1 cargo test -p kreplay-format --test golden`.

mod common;

use std::path::PathBuf;

use kreplay_format::*;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/golden")
}

fn check(name: &str, bytes: &[u8]) {
    let path = golden_dir().join(name);
    if std::env::var_os("KREPLAY_BLESS").is_some() {
        std::fs::create_dir_all(golden_dir()).expect("mkdir");
        std::fs::write(&path, bytes).expect("write golden");
    }
    let golden = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with KREPLAY_BLESS=1 to create)",
            path.display()
        )
    });
    assert!(
        golden == bytes,
        "{name}: bytes differ from the golden file ({} vs {} bytes): the format changed",
        golden.len(),
        bytes.len()
    );
}

#[test]
fn sample_capture_bytes_are_locked() {
    check("small.krr", &common::sample());
}

#[test]
fn capture_by_touched_pages_bytes_are_locked() {
    check("extents.krr", &common::sample_extents());
}

#[test]
fn golden_capture_by_touched_pages_reads_back() {
    let bytes = std::fs::read(golden_dir().join("extents.krr")).expect("golden");
    let report = verify(&bytes).expect("golden verifies");
    // Region 0: 2 of its 3 pre chunks (one wholly absent) + 1 post chunk; region 1: 1 chunk.
    assert_eq!(report.chunks, 4);
    let cap = Capture::parse(&bytes).expect("parse");
    assert_eq!(cap.header.minor, 4);
    assert_eq!(
        cap.extents(0).map(|e| (e.page_size, e.present.clone())),
        Some((4096, common::extents_present()))
    );
    assert_eq!(cap.present_bytes(0), 2 * 4096 + 100);
    assert_eq!(cap.read_region(0).expect("x"), common::extents_region0());
}

#[test]
fn incomplete_capture_bytes_are_locked() {
    check("incomplete.krr", &common::unfinished_bytes(1024));
}

#[test]
fn dispatch_metadata_encoding_is_locked() {
    let bytes = codec::encode(&common::dispatch(), "dispatch").expect("encode");
    check("dispatch.bin", &bytes);
    let back: Dispatch = codec::decode(&bytes, 0, "dispatch").expect("decode");
    assert_eq!(back, common::dispatch());
}

#[test]
fn golden_sample_reads_back() {
    let bytes = std::fs::read(golden_dir().join("small.krr")).expect("golden");
    let report = verify(&bytes).expect("golden verifies");
    // x: 2 chunks of 1024; y: 2 zero pre chunks (holes) + 2 post chunks.
    assert_eq!(report.chunks, 6);
    assert_eq!(report.raw_bytes, 3 * 2048);
    let cap = Capture::parse(&bytes).expect("parse");
    assert_eq!(cap.dispatch.kernel_name, "_Z5saxpyifPKfPf");
    assert_eq!(cap.regions.len(), 2);
    let x = cap.read_region(0).expect("x");
    assert_eq!(&x[4..8], &1.0f32.to_le_bytes());
    assert!(cap.is_written(1));
    assert!(!cap.is_written(0));
    let y = cap.read_region(1).expect("y");
    assert!(y.iter().all(|&b| b == 0));
    assert_eq!(cap.device.as_ref().map(|d| d.cc_major), Some(9));
}
