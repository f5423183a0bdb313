//! `kreplay info`, `verify` and `extract` on real captures recorded on an H200 by
//! scripts/gpu-test.sh (testdata/captures). No GPU needed.

mod common;

use common::*;
use std::path::PathBuf;

use serde_json::Value;

/// Every capture in testdata/captures.
const ALL: [&str; 10] = [
    "cuda-saxpy",
    "cuda-globals",
    "cuda-pointers",
    "driver-extra",
    "cuda-cluster",
    "cuda-coop",
    "graph-node",
    "surface",
    "host-mapped",
    "texture-table",
];

fn info(name: &str) -> Value {
    let path = capture(name);
    let (code, out, err) = kreplay(&["info", "--json", path.to_str().expect("utf-8 path")]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("info --json is JSON")
}

fn params(v: &Value) -> Vec<(u64, u64, bool)> {
    v["params"]
        .as_array()
        .expect("params")
        .iter()
        .map(|p| {
            (
                p["offset"].as_u64().expect("offset"),
                p["size"].as_u64().expect("size"),
                p["pointer"].as_bool().expect("pointer"),
            )
        })
        .collect()
}

#[test]
fn every_real_capture_verifies() {
    for name in ALL {
        let path = capture(name);
        let (code, out, err) = kreplay(&["verify", path.to_str().expect("path")]);
        assert_eq!(code, 0, "{name}: {out}{err}");
        assert!(out.contains("intact"), "{name}: {out}");
    }
}

#[test]
fn saxpy_capture_describes_the_launch() {
    let v = info("cuda-saxpy");
    assert_eq!(
        v["kernel"]["name"],
        "saxpy(int, float, float const*, float*)"
    );
    assert_eq!(v["kernel"]["mangled"], "_Z5saxpyifPKfPf");
    assert_eq!(v["launch"]["grid"], serde_json::json!([16384, 1, 1]));
    assert_eq!(v["launch"]["block"], serde_json::json!([256, 1, 1]));
    assert_eq!(
        params(&v),
        vec![(0, 4, false), (4, 4, false), (8, 8, true), (16, 8, true)]
    );
    let regions = v["regions"].as_array().expect("regions");
    // x is read, y is updated in place.
    let args: Vec<_> = regions.iter().filter(|r| r["role"] == "argument").collect();
    assert_eq!(args.len(), 2);
    assert_eq!(args[0]["written"], false);
    assert_eq!(args[1]["written"], true);
    assert_eq!(args[1]["size"], 16 << 20);
    assert_eq!(v["device"]["compute_capability"], "9.0");
    assert!(v["original_ns"].as_u64().expect("duration") > 1000);
}

#[test]
fn globals_capture_has_the_written_device_variable() {
    let v = info("cuda-globals");
    let regions = v["regions"].as_array().expect("regions");
    let hits = regions
        .iter()
        .find(|r| r["global"] == "hits")
        .expect("hits global");
    assert_eq!(hits["written"], true);
    assert_eq!(hits["role"], "global");
    let coef = regions
        .iter()
        .find(|r| r["global"] == "coef")
        .expect("coef");
    assert_eq!(coef["size"], 16);
}

#[test]
fn pointer_table_regions_are_followed() {
    let v = info("cuda-pointers");
    let regions = v["regions"].as_array().expect("regions");
    let indirect = regions.iter().filter(|r| r["role"] == "indirect").count();
    assert_eq!(indirect, 5, "the five buffers behind the pointer table");
    assert_eq!(v["pointer_slots"], 5, "the table's five entries");
    assert_eq!(params(&v), vec![(0, 24, true)]);
}

#[test]
fn driver_api_extra_launch_keeps_its_layout() {
    let v = info("driver-extra");
    assert_eq!(v["kernel"]["name"], "axpb");
    assert_eq!(
        params(&v),
        vec![
            (0, 8, true),
            (8, 8, true),
            (16, 4, false),
            (20, 4, false),
            (24, 4, false)
        ]
    );
}

#[test]
fn cluster_and_cooperative_launches() {
    let v = info("cuda-cluster");
    assert_eq!(v["launch"]["api"], "cuLaunchKernelEx");
    assert_eq!(v["launch"]["cluster"], serde_json::json!([4, 1, 1]));
    let v = info("cuda-coop");
    assert_eq!(v["launch"]["api"], "cuLaunchCooperativeKernel");
}

#[test]
fn extract_writes_cubin_args_and_regions() {
    let dir = std::env::temp_dir().join(format!("kreplay-extract-{}", std::process::id()));
    let path = capture("cuda-saxpy");
    let (code, _, err) = kreplay(&[
        "extract",
        path.to_str().expect("path"),
        "-o",
        dir.to_str().expect("dir"),
    ]);
    assert_eq!(code, 0, "{err}");
    let cubin = std::fs::read(dir.join("module-0.cubin")).expect("cubin");
    assert_eq!(&cubin[..4], b"\x7fELF");
    let args = std::fs::read(dir.join("args.bin")).expect("args");
    assert_eq!(args.len(), 24);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let pre = names
        .iter()
        .filter(|n| n.starts_with("region-1-") && n.ends_with("0.bin"))
        .count();
    assert_eq!(pre, 1, "{names:?}");
    assert!(names
        .iter()
        .any(|n| n.starts_with("region-1-") && n.ends_with(".post.bin")));
    let desc: Value =
        serde_json::from_slice(&std::fs::read(dir.join("capture.json")).expect("json"))
            .expect("parse");
    assert_eq!(desc["kernel"]["mangled"], "_Z5saxpyifPKfPf");
    // The post image differs from the pre image: saxpy wrote y.
    let y_pre = std::fs::read(
        dir.join(
            names
                .iter()
                .find(|n| n.starts_with("region-1-") && !n.contains("post"))
                .expect("y"),
        ),
    )
    .expect("y");
    let y_post = std::fs::read(
        dir.join(
            names
                .iter()
                .find(|n| n.starts_with("region-1-") && n.contains("post"))
                .expect("y post"),
        ),
    )
    .expect("y post");
    assert_eq!(y_pre.len(), y_post.len());
    assert_ne!(y_pre, y_post);
    // Byte for byte what the format reader reconstructs: pre state, and pre overlaid with the
    // post-dispatch chunks.
    let bytes = std::fs::read(&path).expect("capture");
    let cap = kreplay_format::Capture::parse(&bytes).expect("parse");
    let mut expected = cap.read_region(1).expect("region 1");
    assert!(y_pre == expected);
    for c in cap.chunks(1, kreplay_format::MemoryState::Post) {
        let s = c.offset as usize;
        cap.read_chunk_into(c, &mut expected[s..s + c.raw_len as usize])
            .expect("post chunk");
    }
    assert!(y_post == expected);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn damaged_and_missing_files_get_clear_errors() {
    let dir = std::env::temp_dir().join(format!("kreplay-damaged-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let good = std::fs::read(capture("cuda-globals")).expect("read");
    let cut = dir.join("cut.krr");
    std::fs::write(&cut, &good[..good.len() / 2]).expect("write");
    let (code, _, err) = kreplay(&["verify", cut.to_str().expect("path")]);
    assert_eq!(code, 1);
    assert!(err.contains("byte"), "{err}");
    let (code, _, err) = kreplay(&["info", dir.join("missing.krr").to_str().expect("path")]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot open"), "{err}");
    let text = dir.join("text.krr");
    std::fs::write(&text, b"hello").expect("write");
    let (code, _, err) = kreplay(&["info", text.to_str().expect("path")]);
    assert_eq!(code, 2);
    assert!(err.contains("not a kreplay capture"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn play_without_a_gpu_says_so() {
    // On CI there is no libcuda; on a GPU machine this replays for real (also fine).
    let path = capture("cuda-saxpy");
    let (code, out, err) = kreplay(&["play", path.to_str().expect("path"), "--verify"]);
    if code == 0 {
        assert!(out.contains("matched"), "{out}");
        eprintln!("GPU present: replayed for real");
    } else {
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("CUDA") || err.contains("GPU"), "{err}");
    }
}

#[test]
fn counters_without_a_gpu_say_so_and_flags_are_checked() {
    let path = capture("cuda-saxpy");
    let p = path.to_str().expect("path");
    // A file or --list-metrics is required.
    let (code, _, err) = kreplay(&["play"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("FILE") || err.contains("required"), "{err}");
    // --ptx and --module exclude each other.
    let (code, _, err) = kreplay(&["play", p, "--ptx", "--module", p]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    // No GPU on CI: a clear message, exit 2, before any replay work. On a GPU machine the
    // counters are collected for real.
    let (code, out, err) = kreplay(&["play", p, "--metrics", "smsp__inst_executed.sum", "--json"]);
    if code == 0 {
        let v: Value = serde_json::from_str(&out).expect("json");
        assert!(
            v["metrics"]["smsp__inst_executed.sum"]
                .as_f64()
                .unwrap_or(0.0)
                > 0.0,
            "{out}"
        );
        eprintln!("GPU present: counters collected for real");
    } else {
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("cannot collect counters"), "{err}");
        assert!(err.contains("CUDA") || err.contains("GPU"), "{err}");
    }
    let (code, out, err) = kreplay(&["play", "--list-metrics"]);
    if code == 0 {
        assert!(out.contains("dram__bytes_read"), "{out}");
    } else {
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("cannot list metrics"), "{err}");
    }
}

#[test]
fn incomplete_capture_is_salvaged_by_verify() {
    let golden =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/golden/incomplete.krr");
    let out = std::env::temp_dir().join(format!("kreplay-salvaged-{}.krr", std::process::id()));
    let (code, _, err) = kreplay(&[
        "verify",
        golden.to_str().expect("path"),
        "--salvage",
        out.to_str().expect("path"),
    ]);
    assert_eq!(code, 1, "the incomplete file itself does not verify");
    assert!(err.contains("incomplete capture"), "{err}");
    assert!(err.contains("salvaged 13 of 13 intact events"), "{err}");
    let (code, stdout, err) = kreplay(&["verify", out.to_str().expect("path")]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("intact"), "{stdout}");
    let (code, stdout, _) = kreplay(&["info", "--json", out.to_str().expect("path")]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(v["kernel"]["mangled"], "_Z5saxpyifPKfPf");
    let _ = std::fs::remove_file(&out);
}

#[test]
fn captured_cubins_declare_the_captured_parameter_layout() {
    // What the player compares before launching: the layout in the file must be the one the
    // kernel's own cubin declares.
    for name in ALL {
        let bytes = std::fs::read(capture(name)).expect("read");
        let cap = kreplay_format::Capture::parse(&bytes).expect("parse");
        let d = &cap.dispatch;
        let m = cap.module(d.module_id).expect("module");
        let declared = kreplay_format::cubin::declared_params(&m.image, &d.kernel_name)
            .unwrap_or_else(|| panic!("{name}: no parameter info in the cubin"));
        let captured: Vec<(u32, u32)> = d.params.iter().map(|p| (p.offset, p.size)).collect();
        assert_eq!(declared.layout, captured, "{name}");
        let end = captured.last().map_or(0, |&(o, s)| o + s);
        assert_eq!(declared.total, Some(end), "{name}");
    }
}

#[test]
fn info_reads_parameters_as_their_types() {
    let v = info("cuda-saxpy");
    let p = v["params"].as_array().expect("params");
    let typed: Vec<(&str, &str)> = p
        .iter()
        .map(|p| {
            (
                p["type"].as_str().unwrap_or("-"),
                p["value"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(typed[0], ("int", "4194304"));
    assert_eq!(typed[1], ("float", "1.5"));
    assert_eq!(typed[2].0, "float const*");
    assert!(typed[2].1.starts_with("0x7f"), "{typed:?}");
    assert_eq!(p[2]["region"], 0);
    assert_eq!(p[2]["region_offset"], 0);
    // A struct parameter stays hex; a kernel without a signature shows its pointers.
    let v = info("cuda-pointers");
    assert_eq!(v["params"][0]["type"], "Batch");
    assert!(v["params"][0]["value"].is_null());
    let v = info("driver-extra");
    assert!(v["params"][0]["type"].is_null());
    assert!(v["params"][0]["value"]
        .as_str()
        .unwrap_or("")
        .starts_with("0x"));
    let path = capture("cuda-saxpy");
    let (code, out, _) = kreplay(&["info", path.to_str().expect("path")]);
    assert_eq!(code, 0);
    assert!(out.contains("float const*"), "{out}");
    assert!(out.contains("4194304"), "{out}");
}

#[test]
fn info_and_verify_take_several_files() {
    let a = capture("cuda-saxpy");
    let b = capture("cuda-globals");
    let (a, b) = (a.to_str().expect("path"), b.to_str().expect("path"));
    let (code, out, err) = kreplay(&["info", a, b]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.matches("\ncapture ").count() + usize::from(out.starts_with("capture ")),
        2,
        "{out}"
    );
    let (code, out, _) = kreplay(&["info", "--json", a, b]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v.as_array().map(Vec::len), Some(2));
    // One unreadable file: the others are still described, and the exit says it.
    let (code, out, err) = kreplay(&["info", a, "/nonexistent/x.krr", b]);
    assert_eq!(code, 2);
    assert!(
        out.contains("saxpy") && out.contains("poly_globals"),
        "{out}"
    );
    assert!(err.contains("/nonexistent/x.krr"), "{err}");
    let (code, out, _) = kreplay(&["verify", a, b]);
    assert_eq!(code, 0);
    assert_eq!(out.matches("intact").count(), 2, "{out}");
    let dir = std::env::temp_dir().join(format!("kreplay-multi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let good = std::fs::read(capture("cuda-globals")).expect("read");
    let cut = dir.join("cut.krr");
    std::fs::write(&cut, &good[..good.len() / 2]).expect("write");
    let (code, out, err) = kreplay(&["verify", a, cut.to_str().expect("path"), b]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out.matches(": intact").count(), 2, "{out}");
    let (code, _, err) = kreplay(&["verify", a, "/nonexistent/x.krr"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = kreplay(&["verify", a, b, "--salvage", "/tmp/x.krr"]);
    assert_eq!(code, 2);
    assert!(err.contains("one capture at a time"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A copy of a capture whose post-dispatch chunks are changed by `edit` (bytes, region id).
fn edited_copy(name: &str, edit: impl Fn(&mut [u8], u32)) -> Vec<u8> {
    use kreplay_format::*;
    let bytes = std::fs::read(capture(name)).expect("read");
    let cap = Capture::parse(&bytes).expect("parse");
    let mut w = CaptureWriter::new(
        std::io::Cursor::new(Vec::new()),
        cap.header.uuid,
        WriterOptions::default(),
    )
    .expect("writer");
    for m in &cap.modules {
        w.module(m).expect("module");
    }
    w.dispatch(&cap.dispatch).expect("dispatch");
    for r in &cap.regions {
        w.region(r).expect("region");
        for state in [MemoryState::Pre, MemoryState::Post] {
            for c in cap.chunks(r.region_id, state) {
                let mut buf = vec![0u8; c.raw_len as usize];
                cap.read_chunk_into(c, &mut buf).expect("chunk");
                if state == MemoryState::Post {
                    edit(&mut buf, r.region_id);
                }
                w.memory(r.region_id, state, c.offset, &buf)
                    .expect("memory");
            }
        }
    }
    for g in &cap.globals {
        w.module_global(g).expect("global");
    }
    w.finish().expect("finish").into_inner()
}

#[test]
fn diff_tells_rounding_from_a_different_result() {
    let a = capture("cuda-saxpy");
    let a = a.to_str().expect("path");
    let (code, out, err) = kreplay(&["diff", a, a]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("identical"), "{out}");
    // y (region 1): in each of its 4 post chunks, 3 elements off by one ulp and one off by
    // 25 %.
    let dir = std::env::temp_dir().join(format!("kreplay-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let b = dir.join("b.krr");
    std::fs::write(
        &b,
        edited_copy("cuda-saxpy", |buf, region| {
            if region != 1 {
                return;
            }
            // Elements 1 to 3 (element 0 is 0.0, where one ulp is a relative error of 1).
            for i in 1..4 {
                let v = f32::from_le_bytes(buf[i * 4..i * 4 + 4].try_into().expect("4"));
                let bumped = f32::from_bits(v.to_bits() + 1);
                buf[i * 4..i * 4 + 4].copy_from_slice(&bumped.to_le_bytes());
            }
            let v = f32::from_le_bytes(buf[400..404].try_into().expect("4"));
            buf[400..404].copy_from_slice(&(v * 1.25).to_le_bytes());
        }),
    )
    .expect("write");
    let (code, out, err) = kreplay(&["diff", a, b.to_str().expect("path"), "--json"]);
    assert_eq!(code, 1, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["identical"], false);
    let r1 = v["regions"]
        .as_array()
        .expect("regions")
        .iter()
        .find(|r| r["id_a"] == 1)
        .expect("region 1");
    assert_eq!(r1["differing_elements"], 16);
    assert_eq!(r1["differing_chunks"], 4);
    assert_eq!(r1["first_offset"], 4);
    let rel = r1["max_rel"].as_f64().expect("max_rel");
    assert!((rel - 0.2).abs() < 1e-6, "{rel}");
    // Only the inputs (pre state) are compared: identical.
    let (code, _, _) = kreplay(&["diff", a, b.to_str().expect("path"), "--state", "pre"]);
    assert_eq!(code, 0);
    // As bytes: every differing byte is an element.
    let (code, out, _) = kreplay(&["diff", a, b.to_str().expect("path"), "--as", "u8"]);
    assert_eq!(code, 1);
    assert!(out.contains("different"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn verdicts_are_coloured_only_when_asked() {
    let a = capture("cuda-saxpy");
    let a = a.to_str().expect("path");
    let (_, out, _) = kreplay(&["verify", "--color", "always", a]);
    assert!(out.contains("\x1b[32mintact\x1b[0m"), "{out:?}");
    // Not a terminal: auto means none.
    let (_, out, _) = kreplay(&["verify", a]);
    assert!(!out.contains('\x1b'), "{out:?}");
    let (_, out, _) = kreplay(&["diff", "--color", "never", a, a]);
    assert!(
        !out.contains('\x1b') && out.contains("identical"),
        "{out:?}"
    );
}

#[test]
fn a_graph_node_capture_says_where_it_came_from() {
    // Recorded on the H200 from `graph_apps explicit 3 4096` with `-k graph_consume --nth 2`:
    // the consumer node of the second graph launch, after the recorder re-ran the producer,
    // the copy and the memset that precede it.
    let v = info("graph-node");
    let g = &v["graph"];
    assert_eq!(g["graph_launch"], 2, "{g}");
    assert_eq!(g["kernel_node"], 2, "{g}");
    assert_eq!(g["kernel_nodes"], 3, "{g}");
    assert_eq!(g["nodes"], 5, "{g}");
    assert_eq!(g["ancestors_run"], 3, "{g}");
    assert_eq!(v["kernel"]["mangled"], "_Z13graph_consumePKfPfi");
    let (code, out, _) = kreplay(&["info", capture("graph-node").to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        out.contains("graph     kernel node 2 of 3 (5 nodes in all) in launch 2"),
        "{out}"
    );
    // A plain launch has no graph line.
    assert!(info("cuda-saxpy")["graph"].is_null());
}

#[test]
fn texture_and_surface_objects_are_listed_with_their_arrays() {
    // beyond_apps surface: surf_write(texture over array a, surface over array b, w, h).
    let v = info("surface");
    let t = v["textures"].as_array().expect("textures");
    assert_eq!(t.len(), 2, "{t:?}");
    let kinds: Vec<&str> = t
        .iter()
        .map(|o| o["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(kinds, ["texture", "surface"]);
    for (o, offset) in t.iter().zip([0u64, 8]) {
        assert_eq!(o["resource"], "array 2D 256x192 f32 x1");
        assert_eq!(o["arg_offsets"], serde_json::json!([offset]));
    }
    // The arrays' texels are cuda-array regions at address 0; only the surface's is written.
    let regions = v["regions"].as_array().expect("regions");
    let arrays: Vec<(u64, bool)> = regions
        .iter()
        .filter(|r| r["kind"] == "cuda-array")
        .map(|r| {
            (
                r["address"].as_u64().expect("address"),
                r["written"] == true,
            )
        })
        .collect();
    assert_eq!(arrays, vec![(0, false), (0, true)]);
    let path = capture("surface");
    let (code, out, err) = kreplay(&["info", path.to_str().expect("path")]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "textures  surface 2 in argument offset 8: array 2D 256x192 f32 x1 (region 2)"
        ),
        "{out}"
    );
}

#[test]
fn host_mapped_regions_are_named() {
    let v = info("host-mapped");
    let kinds: Vec<&str> = v["regions"]
        .as_array()
        .expect("regions")
        .iter()
        .map(|r| r["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(
        kinds,
        ["host-mapped", "host-mapped", "device", "module-global"]
    );
}

#[test]
fn handles_in_a_table_in_memory_are_listed_where_they_lie() {
    // beyond_apps textable: tex_table_read(const cudaTextureObject_t* table, n, out, w, h);
    // the table (24 bytes, region 0) holds handles 4, 5, 6.
    let v = info("texture-table");
    let t = v["textures"].as_array().expect("textures");
    let got: Vec<(u64, serde_json::Value)> = t
        .iter()
        .map(|o| {
            (
                o["handle"].as_u64().expect("handle"),
                o["memory_words"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (4, serde_json::json!([[0, 0]])),
            (5, serde_json::json!([[0, 8]])),
            (6, serde_json::json!([[0, 16]])),
        ]
    );
    assert!(t.iter().all(|o| o["arg_offsets"] == serde_json::json!([])));
}
