//! Range captures at the command line, no GPU needed: `info` lists the steps, the commands
//! that do not know ranges yet refuse them with one message, and `play` refuses the options a
//! range does not take before touching a GPU. The range is made from a real capture's
//! dispatch, module and memory, with its dispatch as three steps.

mod common;

use std::io::Cursor;

use common::*;
use kreplay_format::*;
use serde_json::Value;

/// cuda-saxpy's capture rewritten as a range of three steps (the second with its own grid).
fn range_bytes() -> Vec<u8> {
    let src = std::fs::read(common::capture("cuda-saxpy")).expect("testdata capture");
    let cap = Capture::parse(&src).expect("parse");
    let mut second = cap.dispatch.clone();
    second.grid = [7, 1, 1];
    second.original_duration_ns = Some(1500);
    let steps: Vec<Step> = [cap.dispatch.clone(), second, cap.dispatch.clone()]
        .into_iter()
        .map(|dispatch| Step::kernel(0, dispatch))
        .collect();
    let mut w = CaptureWriter::new(Cursor::new(Vec::new()), [3; 16], WriterOptions::default())
        .expect("writer");
    w.head(&CaptureHead {
        info: cap.info.as_ref(),
        device: cap.device.as_ref(),
        modules: &cap.modules,
        dispatch: &cap.dispatch,
    })
    .expect("head");
    w.steps(&steps).expect("steps");
    for r in &cap.regions {
        w.region(r).expect("region");
        let mut bytes = vec![0u8; r.size as usize];
        cap.read_region_into(r.region_id, &mut bytes).expect("pre");
        w.memory(r.region_id, MemoryState::Pre, 0, &bytes)
            .expect("memory");
    }
    w.finish().expect("finish").into_inner()
}

/// [`range_bytes`] written to `dir/range.krr`; its path.
fn range_file(dir: &std::path::Path) -> String {
    let out = dir.join("range.krr");
    std::fs::write(&out, range_bytes()).expect("write");
    out.to_string_lossy().into_owned()
}

#[test]
fn range_capture_golden_file_is_the_one_built_here() {
    let golden = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/golden/range-saxpy.krr");
    let bytes = range_bytes();
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
fn info_lists_the_steps_of_a_range() {
    let d = scratch("range-info");
    let f = range_file(&d);
    let (code, out, err) = kreplay(&["info", "--json", &f]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["format_version"], "1.2");
    let steps = v["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[1]["grid"], serde_json::json!([7, 1, 1]));
    assert_eq!(steps[1]["original_ns"], 1500);
    assert!(steps[0]["kernel"]["name"]
        .as_str()
        .is_some_and(|n| n.starts_with("saxpy(")));
    let (code, text, err) = kreplay(&["info", &f]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("range     3 steps (3 kernels) on 1 stream"),
        "{text}"
    );
    assert!(text.contains("(7,1,1)x(256,1,1)"), "{text}");
    // A single capture's JSON has no steps.
    let single = common::capture("cuda-saxpy");
    let (_, out, _) = kreplay(&["info", "--json", single.to_str().expect("utf-8")]);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert!(v.get("steps").is_none());
}

#[test]
fn commands_that_do_not_know_ranges_refuse_them() {
    // pack, extract and diff take ranges (tests/range_share.rs).
    let d = scratch("range-refuse");
    let f = range_file(&d);
    for (command, args) in [
        (
            "play --tool",
            vec!["play", &f, "--tool", "/nonexistent/t.so"],
        ),
        ("play --ptx", vec!["play", &f, "--ptx"]),
    ] {
        let (code, _, err) = kreplay(&args);
        assert_ne!(code, 0, "{command}: {err}");
        assert!(
            err.contains(&format!("not supported by `{command}` yet")),
            "{command}: {err}"
        );
    }
    // Ranges take --metrics (counters per kernel step): past the refusal, to the device
    // (which a machine without a GPU lacks; a GPU suite case covers the counters).
    let (_, _, err) = kreplay(&["play", &f, "--metrics", "sm__cycles_elapsed.avg"]);
    assert!(!err.contains("not supported by"), "{err}");
}

#[test]
fn save_step_is_refused_before_the_gpu_unless_it_names_a_kernel_step_of_a_range() {
    let d = scratch("range-save-step");
    let f = range_file(&d);
    let out = d.join("s.krr");
    let out = out.to_str().expect("utf-8");
    let (code, _, err) = kreplay(&["play", &f, "--save-step", "5", out]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("the range has 3 steps"), "{err}");
    let single = common::capture("cuda-saxpy");
    let single = single.to_str().expect("utf-8");
    let (code, _, err) = kreplay(&["play", single, "--save-step", "0", out]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("takes a range capture"), "{err}");
    assert!(!std::path::Path::new(out).exists(), "nothing written");
}
