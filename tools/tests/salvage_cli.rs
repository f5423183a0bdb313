//! `kreplay verify --salvage` on damaged copies of a real capture (testdata/captures): what it
//! writes never claims an output the kernel did not produce, one damaged event loses only
//! itself, and a capture whose arguments point into lost memory says it cannot be replayed
//! (and `play` refuses it before touching a GPU). No GPU needed.

mod common;

use common::*;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Byte offsets of the events of cuda-saxpy.krr (frame offsets, from its index).
const SAXPY_REGION0_CHUNK0: usize = 7386; // region 0 (x, read), PRE chunk at 0
const SAXPY_REGION1_CHUNK0: usize = 23554; // region 1 (y, written), PRE chunk at 0
const SAXPY_REGION1_POST1: usize = 42582; // region 1 POST chunk at 0x400000
const FRAME: usize = 24;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn saxpy() -> Vec<u8> {
    std::fs::read(capture("cuda-saxpy")).expect("read cuda-saxpy.krr")
}

/// Checks that `at` is the frame of a memory chunk (kind 6) in `bytes`: the offsets above are
/// those of the file in testdata, and a test must not pass by damaging something else.
fn assert_chunk_frame(bytes: &[u8], at: usize) {
    assert_eq!(
        u16::from_le_bytes([bytes[at], bytes[at + 1]]),
        6,
        "no memory chunk at byte {at}: cuda-saxpy.krr changed"
    );
}

/// Writes `bytes` as `name` in `dir`, salvages it into `salvaged.krr`: (path of the salvaged
/// file, exit status, stderr).
fn salvage(dir: &Path, name: &str, bytes: &[u8]) -> (PathBuf, i32, String) {
    let input = dir.join(name);
    std::fs::write(&input, bytes).expect("write damaged copy");
    let out = dir.join("salvaged.krr");
    let (code, _, err) = kreplay(&["verify", s(&input), "--salvage", s(&out), "--force"]);
    (out, code, err)
}

fn info_json(path: &Path) -> Value {
    let (code, out, err) = kreplay(&["info", "--json", s(path)]);
    assert_eq!(code, 0, "info: {err}");
    serde_json::from_str(&out).expect("info --json is JSON")
}

fn region_ids(v: &Value) -> Vec<u64> {
    v["regions"]
        .as_array()
        .expect("regions")
        .iter()
        .map(|r| r["id"].as_u64().expect("id"))
        .collect()
}

#[test]
fn a_capture_cut_in_its_output_does_not_claim_the_input_as_output() {
    let d = scratch("salvage-cut-output");
    let bytes = saxpy();
    // Inside region 1's post-dispatch chunks: the first survives, the other three are lost.
    let (out, code, err) = salvage(&d, "cut.krr", &bytes[..46000]);
    assert_eq!(code, 1, "the cut file itself is damaged: {err}");
    assert!(err.contains("salvaged"), "{err}");
    assert!(
        err.contains("recorded output") && err.contains("unknown"),
        "salvage does not say that output was lost: {err}"
    );
    // The module globals' names came after the cut: the replay could not put their bytes
    // back, so the capture cannot be replayed as recorded.
    assert!(err.contains("cannot be replayed"), "{err}");
    assert!(err.contains("module global"), "{err}");
    assert!(!err.contains("(verified)"), "{err}");
    let v = info_json(&out);
    assert_eq!(v["reference"], "partial", "{v}");
    let y = &v["regions"][1];
    assert_eq!(y["id"], 1);
    // Three of y's four chunks lost their output; x and the globals could have been written
    // after the cut too.
    assert_eq!(y["unknown_output_bytes"], 3 * 4194304, "{y}");
    assert_eq!(v["regions"][0]["unknown_output_bytes"], 16 << 20, "{v}");
    assert_eq!(v["salvage"]["lost_from"], 42582, "{v}");
    let (code, text, err) = kreplay(&["info", s(&out)]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("unknown") && text.contains("salvage"),
        "info does not say the output is partly unknown:\n{text}"
    );
    // diff must not report the lost output as a difference in the results.
    let (code, text, err) = kreplay(&["diff", s(&capture("cuda-saxpy")), s(&out)]);
    assert!(
        !text.contains("result    different"),
        "diff reports the lost output as a different result:\n{text}"
    );
    assert_ne!(code, 0, "{text}{err}");
    assert!(err.contains("salvage"), "{err}");
    // The inputs did survive whole.
    let (code, text, err) =
        kreplay(&["diff", "--state", "pre", s(&capture("cuda-saxpy")), s(&out)]);
    assert_eq!(code, 0, "{text}{err}");
    // The salvaged file is a complete capture.
    let (code, _, err) = kreplay(&["verify", s(&out)]);
    assert_eq!(code, 0, "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn one_damaged_chunk_loses_only_its_region_and_an_argument_into_it_blocks_replay() {
    let d = scratch("salvage-flip-x");
    let mut bytes = saxpy();
    assert_chunk_frame(&bytes, SAXPY_REGION0_CHUNK0);
    // Four bytes inside the stored data of region 0's first chunk (past frame and prefix).
    let at = SAXPY_REGION0_CHUNK0 + FRAME + 32 + 100;
    for b in &mut bytes[at..at + 4] {
        *b ^= 0xff;
    }
    let (out, code, err) = salvage(&d, "flipped.krr", &bytes);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("dropped regions [0]"), "{err}");
    assert!(
        !err.contains("(verified)"),
        "salvage calls a capture without its input verified: {err}"
    );
    assert!(err.contains("cannot be replayed"), "{err}");
    assert!(err.contains("region 0"), "{err}");
    let v = info_json(&out);
    // Only the damaged chunk's region is gone; y kept its recorded output.
    assert_eq!(region_ids(&v), vec![1, 2, 3, 4], "{v}");
    assert_eq!(v["reference"], "recorded", "{v}");
    assert_eq!(v["regions"][0]["written"], true, "{v}");
    assert_eq!(v["regions"][0]["unknown_output_bytes"], 0, "{v}");
    let blockers = v["salvage"]["replay_blockers"]
        .as_array()
        .expect("blockers");
    assert!(
        blockers
            .iter()
            .any(|b| b.as_str().is_some_and(|b| b.contains("region 0"))),
        "{v}"
    );
    let (code, text, err) = kreplay(&["info", s(&out)]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("cannot be replayed"), "{text}");
    // play refuses it, with that reason, before it looks for a GPU.
    let (code, _, err) = kreplay(&["play", s(&out), "--verify"]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("cannot be replayed"), "{err}");
    assert!(err.contains("region 0"), "{err}");
    assert!(
        !err.contains("driver"),
        "play looked for a GPU before refusing: {err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_damaged_frame_is_skipped_through_the_index() {
    let d = scratch("salvage-frame");
    let mut bytes = saxpy();
    assert_chunk_frame(&bytes, SAXPY_REGION1_CHUNK0);
    // The frame itself (its payload length): its length cannot be trusted, the index can.
    bytes[SAXPY_REGION1_CHUNK0 + 9] ^= 0x40;
    let (out, code, err) = salvage(&d, "frame.krr", &bytes);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("dropped regions [1]"), "{err}");
    assert!(err.contains("cannot be replayed"), "{err}");
    let v = info_json(&out);
    assert_eq!(region_ids(&v), vec![0, 2, 3, 4], "{v}");
    // The module globals after the damage survived with their names.
    assert_eq!(v["regions"][1]["global"], "coef", "{v}");
    assert_eq!(
        v["salvage"]["lost_events"][0][0], SAXPY_REGION1_CHUNK0,
        "{v}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_damaged_output_chunk_marks_the_output_unknown_and_keeps_the_rest() {
    let d = scratch("salvage-post");
    let mut bytes = saxpy();
    assert_chunk_frame(&bytes, SAXPY_REGION1_POST1);
    let at = SAXPY_REGION1_POST1 + FRAME + 32 + 10;
    bytes[at] ^= 0x01;
    let (out, code, err) = salvage(&d, "post.krr", &bytes);
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("dropped regions"), "{err}");
    assert!(!err.contains("cannot be replayed"), "{err}");
    assert!(err.contains("unknown"), "{err}");
    let v = info_json(&out);
    assert_eq!(region_ids(&v), vec![0, 1, 2, 3, 4], "{v}");
    assert_eq!(v["reference"], "partial", "{v}");
    // Three post chunks of y survived; which chunk was lost is unknown, so every other chunk
    // of every region may have been written.
    assert_eq!(v["regions"][1]["unknown_output_bytes"], 4194304, "{v}");
    assert_eq!(
        v["salvage"]["replay_blockers"],
        serde_json::json!([]),
        "{v}"
    );
    // The names of the module globals (after the damage) survived.
    assert_eq!(v["regions"][2]["global"], "coef", "{v}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_cut_capture_without_globals_stays_replayable_with_its_output_unknown() {
    let d = scratch("salvage-driver-cut");
    let bytes = std::fs::read(capture("driver-extra")).expect("read driver-extra.krr");
    const POST: usize = 8893; // region 0's only post-dispatch chunk
    assert_chunk_frame(&bytes, POST);
    let (out, code, err) = salvage(&d, "cut.krr", &bytes[..POST + 100]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("(verified)"), "{err}");
    assert!(err.contains("unknown"), "{err}");
    assert!(!err.contains("cannot be replayed"), "{err}");
    let v = info_json(&out);
    assert_eq!(v["reference"], "partial", "{v}");
    assert_eq!(v["regions"][0]["unknown_output_bytes"], 4194304, "{v}");
    assert_eq!(
        v["salvage"]["replay_blockers"],
        serde_json::json!([]),
        "{v}"
    );
    // Not refused for what salvage lost (on a machine without a GPU it stops at the driver).
    let (_, _, err) = kreplay(&["play", s(&out), "--verify"]);
    assert!(!err.contains("cannot be replayed"), "{err}");
    // Repacking keeps the lost output marked as lost.
    let packed = d.join("packed.krr");
    let (code, _, err) = kreplay(&["pack", s(&out), "-o", s(&packed), "--level", "3"]);
    assert_eq!(code, 0, "{err}");
    let v = info_json(&packed);
    assert_eq!(v["reference"], "partial", "{v}");
    assert_eq!(v["regions"][0]["unknown_output_bytes"], 4194304, "{v}");
    // Without the output (--drop-post), no chunk claims an output, so none is a lost one.
    let dropped = d.join("dropped.krr");
    let (code, _, err) = kreplay(&["pack", s(&out), "-o", s(&dropped), "--drop-post"]);
    assert_eq!(code, 0, "{err}");
    let v = info_json(&dropped);
    assert_eq!(v["reference"], "dropped", "{v}");
    assert_eq!(v["regions"][0]["unknown_output_bytes"], 0, "{v}");
    let _ = std::fs::remove_dir_all(&d);
}
