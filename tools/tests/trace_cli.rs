//! `play --trace` at the command line without a GPU: the file is checked before the replay,
//! nothing is written when the replay cannot run, many captures are refused; the hidden
//! `verify-trace` accepts the checked-in traces and names a defect. The traces of real
//! replays are checked by the GPU suite (tests/gpu/test_trace.py).

use std::path::PathBuf;

mod common;
use common::{capture, kreplay, kreplay_app, scratch};

fn traces() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/traces")
}

/// Whether this machine has no CUDA driver (as on CI): what `play` says there.
fn no_driver(err: &str) -> bool {
    err.contains("no CUDA driver")
}

// Catches: a trace file written (empty or partial) for a replay that never ran, or the
// usual error replaced by one about the trace.
#[test]
fn play_with_trace_without_a_gpu_fails_as_play_does_and_writes_nothing() {
    let d = scratch("trace-nogpu");
    let cap = capture("cuda-saxpy");
    let cap = cap.to_str().expect("utf-8 path");
    let (code, _, err) = kreplay_app(
        Some(&d),
        &["play", cap, "--passes", "3", "--trace", "t.json"],
    );
    if !no_driver(&err) {
        eprintln!("skipped: this machine has a CUDA driver (the GPU suite covers --trace): {err}");
        return;
    }
    let (plain_code, _, plain_err) = kreplay_app(Some(&d), &["play", cap, "--passes", "3"]);
    assert_eq!((code, err.as_str()), (plain_code, plain_err.as_str()));
    assert_ne!(code, 0);
    assert!(
        !d.join("t.json").exists(),
        "a trace of no replay was written"
    );
    let _ = std::fs::remove_dir_all(&d);
}

// Catches: an existing file replaced after minutes of replay (or the refusal coming after
// the GPU work), or --force not applying to --trace.
#[test]
fn the_trace_file_is_checked_before_the_replay() {
    let d = scratch("trace-exists");
    std::fs::write(d.join("t.json"), b"keep").expect("write");
    let cap = capture("cuda-saxpy");
    let cap = cap.to_str().expect("utf-8 path");
    let (code, _, err) = kreplay_app(Some(&d), &["play", cap, "--trace", "t.json"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--trace t.json: already exists: pass --force"),
        "{err}"
    );
    assert!(!err.contains("CUDA"), "refused before the replay: {err}");
    let (_, _, err) = kreplay_app(Some(&d), &["play", cap, "--trace", "t.json", "--force"]);
    assert!(!err.contains("already exists"), "--force applies: {err}");
    assert_eq!(std::fs::read(d.join("t.json")).expect("read"), b"keep");
    let (code, _, err) = kreplay_app(Some(&d), &["play", cap, "--trace", "nodir/t.json"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the directory nodir does not exist"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn many_captures_are_refused_a_trace() {
    let d = scratch("trace-many");
    let a = capture("cuda-saxpy");
    let a = a.to_str().expect("utf-8 path");
    let (code, _, err) = kreplay_app(Some(&d), &["play", a, a, "--trace", "t.json"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--trace names one output file"), "{err}");
    assert!(!d.join("t.json").exists());
    let _ = std::fs::remove_dir_all(&d);
}

// Catches: the checker and the checked-in builder output disagreeing, a defect not making
// the exit status, or the debugging command listed in --help.
#[test]
fn verify_trace_accepts_the_builders_traces_and_names_defects() {
    let play = traces().join("synthetic-play.json");
    let range = traces().join("synthetic-range.json");
    let (code, out, err) = kreplay(&[
        "verify-trace",
        play.to_str().expect("utf-8"),
        range.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["slices"]["replay stream"], 3);
    assert_eq!(lines[1]["slices"]["range passes"], 2);
    let d = scratch("trace-bad");
    let bad = d.join("bad.json");
    std::fs::write(
        &bad,
        br#"{"traceEvents":[{"name":"k","ph":"X","ts":1,"dur":1,"pid":1,"tid":3}]}"#,
    )
    .expect("write");
    let (code, out, err) = kreplay(&["verify-trace", bad.to_str().expect("utf-8")]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("thread 3 of process 1 has events but no thread_name"),
        "{err}"
    );
    let (_, help, _) = kreplay(&["--help"]);
    assert!(!help.contains("verify-trace"), "{help}");
    let _ = std::fs::remove_dir_all(&d);
}

// Catches: the checker refusing what real H200 replays and profiles wrote (the files the
// Perfetto UI check of scripts/test.sh opens), or a checked-in profile trace replaced by one of
// another layout (pass 0 of each dispatch on the application's stream, the further passes on
// kreplay's). The builder's own output is pinned by profile_trace's golden test.
#[test]
fn verify_trace_accepts_the_h200_traces_of_play_and_profile() {
    let names = [
        "play-metrics.trace.json",
        "range-per-step.trace.json",
        "profile-saxpy.trace.json",
        "profile-train.trace.json",
    ];
    let paths: Vec<String> = names
        .iter()
        .map(|n| traces().join(n).to_str().expect("utf-8").to_string())
        .collect();
    let mut args = vec!["verify-trace"];
    args.extend(paths.iter().map(String::as_str));
    let (code, out, err) = kreplay(&args);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), names.len());
    let own = "kreplay passes (its own stream)";
    let app = "stream 0 (legacy default) (application)";
    // saxpy: 3 dispatches x 4 passes; the training step: 16 GEMMs x 3 passes.
    assert_eq!(lines[2]["slices"][app], 3);
    assert_eq!(lines[2]["slices"][own], 9);
    assert_eq!(lines[3]["slices"][app], 16);
    assert_eq!(lines[3]["slices"][own], 32);
    assert_eq!(lines[3]["counters"].as_object().map(|c| c.len()), Some(2));
}

// Catches: an existing trace replaced, or found out only after the application ran (minutes
// of a training job), or --force accepted without --trace.
#[test]
fn profile_checks_its_trace_file_before_the_application_runs() {
    let d = scratch("profile-trace-exists");
    std::fs::write(d.join("t.json"), b"keep").expect("write");
    let (code, _, err) = kreplay_app(
        Some(&d),
        &[
            "profile", "-k", "k", "--trace", "t.json", "--", "touch", "ran",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--trace t.json: already exists: pass --force"),
        "{err}"
    );
    assert!(!d.join("ran").exists(), "the application ran: {err}");
    assert_eq!(std::fs::read(d.join("t.json")).expect("read"), b"keep");
    let (code, _, err) = kreplay_app(Some(&d), &["profile", "-k", "k", "--force", "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--trace"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}
