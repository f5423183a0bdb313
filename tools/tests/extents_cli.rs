//! Captures by touched pages (REGION_EXTENTS) at the command line, no GPU needed: `info`
//! shows present and absent bytes, `info --json` the extents, `verify` checks them, `play`
//! takes such a capture (its absent pages filled) and so does `extract --repro`. The capture is made
//! from a real capture's dispatch, module and memory, with region 0 held by touched pages.

mod common;

use std::io::Cursor;

use common::*;
use kreplay_format::*;
use serde_json::Value;

/// The present range of region 0: its second 4 KiB page.
const PRESENT: (u64, u64) = (4096, 4096);

/// cuda-saxpy's capture rewritten with region 0 captured by touched pages.
fn touched_bytes() -> Vec<u8> {
    let src = std::fs::read(common::capture("cuda-saxpy")).expect("testdata capture");
    let cap = Capture::parse(&src).expect("parse");
    let mut w = CaptureWriter::new(Cursor::new(Vec::new()), [4; 16], WriterOptions::default())
        .expect("writer");
    w.head(&CaptureHead {
        info: cap.info.as_ref(),
        device: cap.device.as_ref(),
        modules: &cap.modules,
        dispatch: &cap.dispatch,
    })
    .expect("head");
    for r in &cap.regions {
        w.region(r).expect("region");
        let mut bytes = cap.read_region(r.region_id).expect("pre");
        if r.region_id == 0 {
            w.region_extents(&RegionExtents {
                region_id: 0,
                page_size: 4096,
                present: vec![PRESENT],
            })
            .expect("extents");
            let (o, l) = (PRESENT.0 as usize, PRESENT.1 as usize);
            bytes[..o].fill(0);
            bytes[o + l..].fill(0);
        }
        w.memory(r.region_id, MemoryState::Pre, 0, &bytes)
            .expect("memory");
    }
    w.finish().expect("finish").into_inner()
}

fn touched_file(dir: &std::path::Path) -> (String, u64) {
    let out = dir.join("touched.krr");
    std::fs::write(&out, touched_bytes()).expect("write");
    let src = std::fs::read(common::capture("cuda-saxpy")).expect("testdata capture");
    let size = Capture::parse(&src).expect("parse").regions[0].size;
    (out.to_string_lossy().into_owned(), size)
}

#[test]
fn info_shows_present_and_absent_bytes_and_verify_checks_them() {
    let d = scratch("touched-info");
    let (f, size) = touched_file(&d);
    let (code, out, err) = kreplay(&["info", "--json", &f]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["format_version"], "1.4");
    let r0 = &v["regions"][0];
    assert_eq!(r0["present_bytes"], 4096);
    assert_eq!(r0["extents"]["page_size"], 4096);
    assert_eq!(r0["extents"]["present"], serde_json::json!([[4096, 4096]]));
    let r1 = &v["regions"][1];
    assert_eq!(r1["present_bytes"], r1["size"]);
    assert!(r1["extents"].is_null());
    let (code, text, err) = kreplay(&["info", &f]);
    assert_eq!(code, 0, "{err}");
    let absent = kreplay_format::units::bytes(size - 4096);
    let line = format!("touched pages: 4.0 KiB present, {absent} absent (not captured) in 1 extent(s) of 4.0 KiB pages");
    assert!(text.contains(&line), "{text}");
    let (code, _, err) = kreplay(&["verify", &f]);
    assert_eq!(code, 0, "{err}");
}

// Catches: `play` or `extract --repro` refusing a capture by touched pages again (both fill
// the absent pages), or a reproducer that starts from zeros there where play starts from
// ABSENT_FILL.
#[test]
fn play_and_extract_repro_get_past_absent_pages() {
    let d = scratch("touched-play-repro");
    let (f, size) = touched_file(&d);
    let (code, _, err) = kreplay(&["play", &f, "--tool", "/nonexistent/t.so"]);
    assert_ne!(code, 0, "{err}");
    assert!(
        !err.contains("captured by touched pages"),
        "play no longer refuses absent pages: {err}"
    );
    assert!(
        err.contains("/nonexistent/t.so"),
        "the tool is what stops this play: {err}"
    );
    let repro = d.join("repro");
    let (code, _, err) = kreplay(&["extract", &f, "--repro", repro.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{err}");
    let program = std::fs::read_to_string(repro.join("repro.cpp")).expect("the program");
    let start = program
        .find("std::vector<Absent> ABSENT = {")
        .expect("an ABSENT table");
    let table = &program[start..];
    let table = &table[..table.find("};").expect("its end")];
    // Region 0 holds its second page only: absent before it and after it, nothing else.
    let rows = [
        "{0, 0x0ull, 0x1000ull}".to_string(),
        format!("{{0, 0x2000ull, {:#x}ull}}", size - 8192),
    ];
    for row in &rows {
        assert!(table.contains(row.as_str()), "{row} not in {table}");
    }
    assert_eq!(table.matches("ull}").count(), rows.len(), "{table}");
    assert!(
        program.contains("fill_absent(r.id, bytes);"),
        "the pre-state is filled"
    );
    assert!(
        program.contains("fill_absent(p.r->id, expected[i]);"),
        "and the reference"
    );
}

// Catches: a region's absent bytes extracted as zeros without a word (they read as data),
// or `diff` comparing absent bytes as zeros (two captures that hold different pages would
// read as identical there), or their count missing from its JSON.
#[test]
fn extract_and_diff_say_which_bytes_are_absent() {
    let d = scratch("touched-extract");
    let (f, _) = touched_file(&d);
    let out = d.join("x");
    let (code, _, err) = kreplay(&["extract", &f, "-o", out.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("region 0:") && err.contains("absent (captured by touched pages)"),
        "{err}"
    );
    let whole = common::capture("cuda-saxpy");
    let whole = whole.to_str().expect("utf-8");
    let (code, out, err) = kreplay(&["diff", &f, whole, "--json"]);
    assert!(code == 0 || code == 1, "{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    let r0 = &report["regions"][0];
    let size = r0["size"].as_u64().expect("size");
    assert_eq!(r0["absent_bytes"].as_u64(), Some(size - PRESENT.1));
    assert_eq!(
        r0["bytes"].as_u64(),
        Some(PRESENT.1),
        "only the present page is compared"
    );
}
