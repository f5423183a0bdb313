//! The sharing commands on range captures, no GPU needed: `pack` (and `--redact`) keeps the
//! steps and the range, `extract` writes a range's files per step and says the reproducer
//! comes later, `diff` compares two ranges step by step and memory as for single captures.
//! The ranges are the golden files the format's tests build.

mod common;

use common::*;
use serde_json::Value;

fn golden(name: &str) -> String {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/golden")
        .join(name);
    p.to_string_lossy().into_owned()
}

fn info_json(path: &str) -> Value {
    let (code, out, err) = kreplay(&["info", "--json", path]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("JSON")
}

#[test]
fn pack_keeps_the_steps_and_the_range() {
    let d = scratch("range-pack");
    let out = d.join("p.krr");
    let out = out.to_str().expect("utf-8");
    let range = golden("range-ops.krr");
    let (code, _, err) = kreplay(&["pack", &range, "-o", out]);
    assert_eq!(code, 0, "{err}");
    let (before, after) = (info_json(&range), info_json(out));
    assert_eq!(after["steps"], before["steps"]);
    assert_eq!(after["range"], before["range"]);
    assert_eq!(after["format_version"], "1.3");
    let (code, _, err) = kreplay(&["verify", out]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn pack_redact_replaces_the_host_bytes_of_copies_and_says_so() {
    let d = scratch("range-redact");
    let out = d.join("r.krr");
    let out = out.to_str().expect("utf-8");
    let (code, _, err) = kreplay(&["pack", "--redact", &golden("range-ops.krr"), "-o", out]);
    assert_eq!(code, 0, "{err}");
    let v = info_json(out);
    assert_eq!(v["reference"], "redacted");
    let fields = v["redaction"].as_array().expect("redaction listing");
    let field = |name: &str| {
        fields
            .iter()
            .find(|f| f["field"] == name)
            .unwrap_or_else(|| panic!("no {name} in {fields:?}"))
    };
    assert_eq!(field("step 0 host bytes (copy-htod)")["kept"], false);
    assert_eq!(field("step 7 received bytes (copy-dtoh)")["kept"], false);
    assert_eq!(field("step 6 argument 1 (float)")["kept"], false);
    assert_eq!(v["steps"].as_array().map(Vec::len), Some(9));
    assert_eq!(
        v["range"]["step_digests"], false,
        "digests of replaced memory"
    );
}

#[test]
fn extract_writes_a_range_per_step_and_no_reproducer_yet() {
    let d = scratch("range-extract");
    let dir = d.join("x");
    let dir_s = dir.to_str().expect("utf-8");
    let range = golden("range-ops.krr");
    let (code, _, err) = kreplay(&["extract", &range, "-o", dir_s]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("4 step file(s)"), "{err}");
    for f in [
        "step-0-host.bin",
        "step-1-args.bin",
        "step-6-args.bin",
        "step-7-received.bin",
        "capture.json",
        "module-0.cubin",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let repro = d.join("repro");
    let (code, _, err) = kreplay(&["extract", &range, "--repro", repro.to_str().expect("utf-8")]);
    assert_ne!(code, 0);
    assert!(
        err.contains("range capture") && err.contains("comes later"),
        "{err}"
    );
    assert!(!repro.exists(), "nothing written");
}

#[test]
fn diff_compares_ranges_step_by_step() {
    let range = golden("range-ops.krr");
    let (code, text, err) = kreplay(&["diff", &range, &range]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("steps     9 / 9, 0 of those both hold differ"),
        "{text}"
    );
    // Another range of the same memory: three kernel launches of saxpy.
    let other = golden("range-saxpy.krr");
    let (code, text, err) = kreplay(&["diff", "--state", "pre", &range, &other]);
    assert_eq!(code, 1, "{err}");
    assert!(text.contains("steps     9 / 3"), "{text}");
    assert!(text.contains("step 0: kind copy-htod / kernel"), "{text}");
    let (code, out, err) = kreplay(&["diff", "--json", "--state", "pre", &range, &other]);
    assert_eq!(code, 1, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["steps"]["steps_b"], 3);
    assert_eq!(v["identical"], false);
    // Single captures' reports have no steps.
    let single = capture("cuda-saxpy");
    let single = single.to_str().expect("utf-8");
    let (_, out, _) = kreplay(&["diff", "--json", single, single]);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert!(v.get("steps").is_none());
}
