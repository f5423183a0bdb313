//! Captures as attachments: `pack` (redacted, output dropped, recompressed) and
//! `extract --repro` on the real H200 captures in testdata. No GPU needed; the GPU suite
//! builds and runs the reproducers.

mod common;

use common::*;

use serde_json::Value;

fn capture(name: &str) -> String {
    common::capture(name).to_string_lossy().into_owned()
}

fn info_json(path: &str) -> Value {
    let (code, out, err) = kreplay(&["info", "--json", path]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("JSON")
}

#[test]
fn a_redacted_capture_says_so_and_keeps_its_shape() {
    let d = scratch("redact");
    let out = d.join("red.krr");
    let out = out.to_str().expect("utf-8");
    let src = capture("cuda-pointers");
    let (code, _, err) = kreplay(&["pack", &src, "-o", out, "--redact", "--level", "3"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("replaced by generated values"), "{err}");
    assert!(err.contains("determinism only"), "{err}");
    let (a, b) = (info_json(&src), info_json(out));
    assert_eq!(a["reference"], "recorded");
    assert_eq!(b["reference"], "redacted");
    for key in ["kernel", "launch", "params", "pointer_slots"] {
        assert_eq!(a[key], b[key], "{key}");
    }
    assert!(a["redaction"].is_null());
    let sizes = |v: &Value| -> Vec<(u64, u64)> {
        v["regions"]
            .as_array()
            .expect("regions")
            .iter()
            .map(|r| {
                (
                    r["address"].as_u64().unwrap_or(0),
                    r["size"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    };
    assert_eq!(sizes(&a), sizes(&b));
    let (code, text, _) = kreplay(&["info", out]);
    assert_eq!(code, 0);
    assert!(text.contains("redacted  by kreplay pack"), "{text}");
    assert!(!text.contains("like a core dump"), "{text}");
    // The inputs differ (redaction replaced them); the outputs cannot be compared.
    let (code, text, err) = kreplay(&["diff", &src, out, "--state", "pre", "--json"]);
    assert_eq!(code, 1, "{err}");
    let v: Value = serde_json::from_str(&text).expect("diff JSON");
    assert_eq!(v["identical"], false, "{text}");
    let differing: u64 = v["regions"]
        .as_array()
        .expect("regions")
        .iter()
        .map(|r| r["differing_bytes"].as_u64().expect("differing_bytes"))
        .sum();
    assert!(differing > 0, "{text}");
    // The same check on a capture against itself says identical (it passed before).
    let (code, text, err) = kreplay(&["diff", &src, &src, "--state", "pre", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&text).expect("diff JSON");
    assert_eq!(v["identical"], true, "{text}");
    let (code, _, err) = kreplay(&["diff", &src, out]);
    assert_eq!(code, 2);
    assert!(err.contains("holds no recorded output (redacted"), "{err}");
    // An existing output is not replaced without --force; the input never.
    let (code, _, err) = kreplay(&["pack", &src, "-o", out]);
    assert_eq!(code, 2);
    assert!(err.contains("already exists"), "{err}");
    let (code, _, err) = kreplay(&["pack", out, "-o", out, "--force"]);
    assert_eq!(code, 2);
    assert!(err.contains("that is the capture itself"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `info` on a redacted capture lists every field replaced or kept, shows none of the
/// recorder's environment, and no longer calls the file a core dump.
#[test]
fn info_lists_what_redaction_replaced_and_kept() {
    let d = scratch("redact-info");
    let out = d.join("red.krr");
    let out = out.to_str().expect("utf-8");
    let src = capture("cuda-saxpy");
    let (code, _, err) = kreplay(&["pack", &src, "-o", out, "--redact"]);
    assert_eq!(code, 0, "{err}");
    let len = |p: &str| std::fs::metadata(p).map(|m| m.len()).unwrap_or(u64::MAX);
    assert!(len(out) <= len(&src), "{} > {}", len(out), len(&src));
    let (a, b) = (info_json(&src), info_json(out));
    let fields = b["redaction"].as_array().expect("the listing");
    let kept = |f: &str| -> Option<bool> {
        fields
            .iter()
            .find(|x| x["field"] == f)
            .and_then(|x| x["kept"].as_bool())
    };
    for f in [
        "host",
        "pid",
        "command line",
        "time",
        "device UUID",
        "capture UUID",
        "argument 1 (float)",
        "region 0",
        "region 1",
        "recorded output",
    ] {
        assert_eq!(kept(f), Some(false), "{f} replaced: {fields:?}");
    }
    for f in [
        "argument 0 (int)",
        "argument 2 (float const*)",
        "argument 3 (float*)",
        "device model",
        "kernel and code",
        "geometry",
        "region 2",
    ] {
        assert_eq!(kept(f), Some(true), "{f} kept: {fields:?}");
    }
    // The scalar n is kept, a is replaced by a finite value; the memory by f32 values.
    assert_eq!(a["params"][0]["value"], b["params"][0]["value"]);
    let a1: f32 = b["params"][1]["value"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("a");
    assert!(a1.is_finite() && a1 != 1.5, "{a1}");
    let r = &b["recorder"];
    assert_eq!((r["host"].as_str(), r["pid"].as_u64()), (Some(""), Some(0)));
    assert_eq!(r["command_line"].as_array().map(|c| c.len()), Some(0));
    assert_eq!(r["time_unix_ns"], 0);
    assert_eq!(b["device"]["uuid"], "0".repeat(32));
    let (code, text, _) = kreplay(&["info", out]);
    assert_eq!(code, 0);
    let host = a["recorder"]["host"].as_str().expect("host");
    let line = a["recorder"]["command_line"][0].as_str().expect("argv[0]");
    let time = a["recorder"]["time"].as_str().expect("time");
    for secret in [line, time, &format!(" on {host} ")] {
        assert!(!text.contains(secret), "info shows {secret:?}: {text}");
    }
    assert!(text.contains("replaced host"), "{text}");
    assert!(text.contains("kept     argument 0 (int)"), "{text}");
    assert!(text.contains("privacy   redacted"), "{text}");
    assert!(!text.contains("like a core dump"), "{text}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn drop_post_makes_a_smaller_capture_without_a_reference() {
    let d = scratch("drop");
    let out = d.join("small.krr");
    let out = out.to_str().expect("utf-8");
    let src = capture("cuda-saxpy");
    let (code, _, err) = kreplay(&["pack", &src, "-o", out, "--drop-post"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("recorded output dropped"), "{err}");
    let len = |p: &str| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    assert!(len(out) < len(&src), "{} !< {}", len(out), len(&src));
    assert_eq!(info_json(out)["reference"], "dropped");
    let (code, _, err) = kreplay(&["verify", out]);
    assert_eq!(code, 0, "{err}");
    // extract writes no .post.bin for it.
    let x = d.join("x");
    let (code, _, err) = kreplay(&["extract", out, "-o", x.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{err}");
    let names: Vec<String> = std::fs::read_dir(&x)
        .expect("dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n.starts_with("region-")), "{names:?}");
    assert!(!names.iter().any(|n| n.ends_with(".post.bin")), "{names:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `extract --repro` of a testdata capture into a scratch folder: (scratch, reproducer dir,
/// repro.cpp).
fn reproducer(name: &str) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let d = scratch(&format!("repro-{name}"));
    let dir = d.join("r");
    let (code, _, err) = kreplay(&[
        "extract",
        &capture(name),
        "--repro",
        dir.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{name}: {err}");
    assert!(err.contains("make -C"), "{err}");
    let cpp = std::fs::read_to_string(dir.join("repro.cpp")).expect("repro.cpp");
    (d, dir, cpp)
}

#[test]
fn a_reproducer_holds_the_program_the_code_and_the_memory() {
    for name in [
        "cuda-saxpy",
        "cuda-globals",
        "cuda-pointers",
        "cuda-cluster",
        "cuda-coop",
        "driver-extra",
        "graph-node",
        "host-mapped",
    ] {
        let (d, dir, cpp) = reproducer(name);
        let v = info_json(&capture(name));
        let mangled = v["kernel"]["mangled"]
            .as_str()
            .or(v["kernel"]["name"].as_str())
            .unwrap_or("");
        assert!(
            cpp.contains(&format!("KERNEL = \"{mangled}\"")),
            "{name}: kernel name"
        );
        assert!(!cpp.contains("@CAPTURE@"), "{name}: tables generated");
        assert!(std::fs::read_to_string(dir.join("Makefile"))
            .expect("Makefile")
            .contains("-lcuda"));
        // Every region file has its region's size; written regions have their output.
        for r in v["regions"].as_array().expect("regions") {
            let id = r["id"].as_u64().expect("id");
            let size = r["size"].as_u64().expect("size");
            let pre = dir.join(format!("region-{id}.bin"));
            let global = r["global"].as_str().is_some_and(|g| !g.is_empty());
            if let Ok(m) = std::fs::metadata(&pre) {
                assert_eq!(m.len(), size, "{name}: region {id}");
            } else {
                assert!(global, "{name}: region {id} has no file");
            }
            if r["written"].as_bool() == Some(true) && !global {
                let post = std::fs::metadata(dir.join(format!("region-{id}.post.bin")));
                assert_eq!(
                    post.map(|m| m.len()).ok(),
                    Some(size),
                    "{name}: region {id} output"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn a_reproducer_rebuilds_textures_surfaces_and_handle_tables() {
    for (name, objects, arrays) in [("surface", 2, 2), ("texture-table", 3, 3)] {
        let (d, _dir, cpp) = reproducer(name);
        let table = |what: &str| -> String {
            let start = cpp.find(&format!("{what} = {{")).expect(what);
            let end = cpp[start..].find("};").expect("end of table") + start;
            cpp[start..end].to_string()
        };
        // One entry per object (each starts with its surface flag), per array.
        let objs = table("OBJECTS");
        assert_eq!(
            objs.matches("{false, ").count() + objs.matches("{true, ").count(),
            objects,
            "{name}: {objs}"
        );
        let arrs = table("ARRAYS");
        assert_eq!(arrs.matches("ull, ").count() / 3, arrays, "{name}: {arrs}");
        let v: Value = {
            let (_, out, _) = kreplay(&["info", "--json", &capture(name)]);
            serde_json::from_str(&out).expect("JSON")
        };
        for t in v["textures"].as_array().expect("textures") {
            for w in t["memory_words"].as_array().expect("memory words") {
                let (r, off) = (w[0].as_u64().unwrap_or(0), w[1].as_u64().unwrap_or(0));
                assert!(
                    objs.contains(&format!("{{{r}, {off:#x}ull}}")),
                    "{name}: handle word {w}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
