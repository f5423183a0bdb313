//! Issue 29, item 5 (and item 1's killed `record`): kreplay says what went wrong, and says it
//! before the application runs when it can. No GPU needed: a run whose recorder never loads
//! (a non-CUDA application, or no driver on this machine) is exactly what these check.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::scratch;

/// Runs the built `kreplay` in `dir` with `args`: (exit status, stdout, stderr).
fn kreplay_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    common::kreplay_app(Some(dir), args)
}

/// Whether this machine's CUDA driver library cannot be loaded (as on CI).
fn no_driver() -> bool {
    ["libcuda.so.1", "libcuda.so"].iter().all(|name| {
        let c = std::ffi::CString::new(*name).expect("name");
        // SAFETY: dlopen with a valid C string; the handle is closed at once.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        if !h.is_null() {
            // SAFETY: a handle dlopen returned.
            unsafe { libc::dlclose(h) };
        }
        h.is_null()
    })
}

#[test]
fn a_run_whose_recorder_never_started_says_so_and_fails() {
    let d = scratch("silent");
    for args in [
        &["list", "/bin/true"][..],
        &["record", "-k", "saxpy", "/bin/true"][..],
        &["profile", "-k", "saxpy", "/bin/true"][..],
    ] {
        let (code, out, err) = kreplay_in(&d, args);
        assert_ne!(code, 0, "{args:?}: {err}");
        assert_eq!(code, 3, "{args:?}: {err}");
        assert!(
            err.contains("the recorder never started in /bin/true"),
            "{args:?}: {err}"
        );
        if no_driver() {
            // Why, as `play` says it.
            assert!(err.contains("no CUDA driver"), "{args:?}: {err}");
            assert!(
                err.contains("libcuda.so could not be loaded"),
                "{args:?}: {err}"
            );
        } else {
            assert!(err.contains("never initialised CUDA"), "{args:?}: {err}");
        }
        assert_eq!(
            err.matches("never started").count(),
            1,
            "said once: {args:?}: {err}"
        );
        assert!(!out.contains("count"), "no empty table: {out}");
    }
    // --json stays parseable and says it in `error`.
    for args in [
        &["list", "--json", "/bin/true"][..],
        &["record", "--json", "-k", "saxpy", "/bin/true"][..],
        &["profile", "--json", "-k", "saxpy", "/bin/true"][..],
    ] {
        let (code, out, err) = kreplay_in(&d, args);
        assert_eq!(code, 3, "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON value");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.contains("recorder never started"), "{args:?}: {out}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_killed_application_is_not_said_to_have_run_without_the_recorder() {
    let d = scratch("killed");
    let (code, _, err) = kreplay_in(&d, &["record", "-k", "saxpy", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(code, 128 + libc::SIGTERM, "{err}");
    assert!(!err.contains("never started"), "{err}");
    assert!(err.contains("killed by SIGTERM"), "{err}");
    assert!(err.contains("cannot tell whether it had started"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_recorder_that_started_in_a_killed_application_is_said_to_have_started() {
    // The application notes the recorder's start as the recorder does (in the report
    // directory's `started/`, a file named by the pid), then dies before any report.
    let d = scratch("killed-started");
    let script = r#"mkdir -p "$KREPLAY_REPORT_DIR/started" && : > "$KREPLAY_REPORT_DIR/started/$$" && kill -KILL $$"#;
    let (code, _, err) = kreplay_in(&d, &["record", "-k", "saxpy", "sh", "-c", script]);
    assert_eq!(code, 128 + libc::SIGKILL, "{err}");
    assert!(err.contains("the recorder had started (pid "), "{err}");
    assert!(err.contains("sh was killed by SIGKILL"), "{err}");
    assert!(!err.contains("never started"), "{err}");
    assert!(!err.contains("cannot tell"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn kreplay_killed_while_the_application_runs_says_what_it_knows() {
    let d = scratch("kreplay-killed");
    let child = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(["record", "-k", "saxpy", "sleep", "30"])
        .current_dir(&d)
        .env("KREPLAY_RECORD_LIB", env!("CARGO_BIN_EXE_kreplay"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill on the pid of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{err}");
    assert!(!err.contains("never started"), "{err}");
    assert!(err.contains("kreplay received SIGTERM"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `record` refuses these before the application runs: it would have created `ran`.
#[test]
fn output_names_that_cannot_work_are_refused_before_the_application_starts() {
    let d = scratch("names");
    std::fs::write(d.join("existing.krr"), b"keep").expect("write");
    std::fs::create_dir(d.join("adir")).expect("dir");
    let cases: [(&[&str], &str); 6] = [
        (&["-o", "x-%x.krr"], "unknown placeholder %x"),
        (&["-o", "x%"], "lone %"),
        (&["--count", "2", "-o", "capture.krr"], "no %n"),
        (&["-c", "3", "-o", "capture.krr"], "-o capture-%n.krr"),
        (&["-o", "existing.krr"], "already exists: pass --force"),
        (
            &["-o", "existing.krr/x-%n.krr"],
            "existing.krr is not a directory",
        ),
    ];
    common::assert_refused_before_run(&d, &["record", "-k", "saxpy"], &cases);
    let (code, _, err) = kreplay_in(
        &d,
        &[
            "record",
            "-k",
            "saxpy",
            "-o",
            "adir",
            "sh",
            "-c",
            "touch ran",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("adir is a directory"), "{err}");
    assert!(!d.join("ran").exists());
    // A directory nobody can create files in (root included).
    let (code, _, err) = kreplay_in(
        &d,
        &[
            "record",
            "-k",
            "saxpy",
            "-o",
            "/proc/kreplay-denied/x.krr",
            "sh",
            "-c",
            "touch ran",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot write in /proc"), "{err}");
    assert!(!d.join("ran").exists());
    // A directory this user cannot write in (as root every directory is writable).
    let ro = d.join("ro");
    std::fs::create_dir(&ro).expect("dir");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).expect("chmod");
    if std::fs::write(ro.join("probe"), b"").is_err() {
        let (code, _, err) = kreplay_in(
            &d,
            &[
                "record",
                "-k",
                "saxpy",
                "-o",
                "ro/x.krr",
                "sh",
                "-c",
                "touch ran",
            ],
        );
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("cannot write in ro"), "{err}");
        assert!(!d.join("ran").exists());
    }
    // The default name has %n: --count needs nothing more.
    let (code, _, err) = kreplay_in(
        &d,
        &[
            "record",
            "-k",
            "saxpy",
            "--count",
            "2",
            "sh",
            "-c",
            "touch ran",
        ],
    );
    assert_eq!(code, 3, "{err}");
    assert!(d.join("ran").exists(), "{err}");
    // profile -o names one report per process.
    let (code, _, err) = kreplay_in(
        &d,
        &[
            "profile",
            "-k",
            "saxpy",
            "-o",
            "p-%n.json",
            "sh",
            "-c",
            "touch ran2",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown placeholder %n"), "{err}");
    assert!(!d.join("ran2").exists());
    let _ = std::fs::remove_dir_all(&d);
}

fn saxpy() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/captures/cuda-saxpy.krr")
        .display()
        .to_string()
}

#[test]
fn outputs_of_play_pack_and_salvage_are_checked_before_the_work() {
    let d = scratch("outputs");
    std::fs::write(d.join("existing.krr"), b"keep").expect("write");
    std::fs::create_dir(d.join("adir")).expect("dir");
    let cap = saxpy();
    // Refused before the replay runs (here: before it would find that there is no GPU).
    let (code, _, err) = kreplay_in(&d, &["play", &cap, "--save-output", "existing.krr"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--save-output existing.krr: already exists: pass --force"),
        "{err}"
    );
    assert!(!err.contains("CUDA"), "refused before the replay: {err}");
    let (code, _, err) = kreplay_in(&d, &["play", &cap, "--save-output", "nodir/out.krr"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the directory nodir does not exist"), "{err}");
    assert_eq!(
        std::fs::read(d.join("existing.krr")).expect("read"),
        b"keep"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn errors_are_printed_once() {
    let d = scratch("once");
    std::fs::write(d.join("existing.krr"), b"keep").expect("write");
    std::fs::create_dir(d.join("adir")).expect("dir");
    let cap = saxpy();
    // Each error once (it was `... already exists: pass --force to replace it: ... already
    // exists: pass --force to replace it`, and `Is a directory (os error 21)` twice).
    for (args, says) in [
        (&["pack", &cap, "-o", "existing.krr"][..], "exists"),
        (&["pack", &cap, "-o", "adir", "--force"][..], "directory"),
    ] {
        let (code, _, err) = kreplay_in(&d, args);
        assert_eq!(code, 2, "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert_eq!(err.matches(says).count(), 1, "{args:?}: {err}");
        assert!(!err.contains("\\n"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn nth_zero_says_that_nth_counts_from_one() {
    let d = scratch("nth");
    for cmd in ["record", "profile"] {
        let (code, _, err) = kreplay_in(&d, &[cmd, "-k", "saxpy", "--nth", "0", "/bin/true"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--nth counts from 1"), "{cmd}: {err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

// `play --tool`: a library that cannot be loaded is refused, naming it, before any GPU work
// (no "no CUDA driver" or device error comes first, on a machine with or without a GPU).
#[test]
fn play_refuses_a_tool_it_cannot_load_before_any_gpu_work() {
    let cap = common::capture("cuda-saxpy");
    let cap = cap.to_str().expect("utf-8 path");
    let (code, _, err) = common::kreplay(&["play", "--tool", "/nonexistent.so", cap]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot load the tool /nonexistent.so"),
        "{err}"
    );
    assert!(
        !err.contains("CUDA driver") && !err.contains("device"),
        "{err}"
    );
    // A library that is not a tool says what it lacks.
    let (code, _, err) = common::kreplay(&["play", "--tool", "libc.so.6", cap]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("exports no kreplay_tool_init"), "{err}");
}

// `play --tool` decides the pass count: an explicit --passes with it is a usage error, not
// silently overridden; the default --passes is not "explicit".
#[test]
fn play_refuses_passes_given_with_a_tool() {
    let cap = common::capture("cuda-saxpy");
    let cap = cap.to_str().expect("utf-8 path");
    let (code, _, err) =
        common::kreplay(&["play", "--tool", "/nonexistent.so", "--passes", "3", cap]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--passes") && err.contains("cannot be used with"),
        "{err}"
    );
    let (_, _, err) = common::kreplay(&["play", "--tool", "/nonexistent.so", "--warmup", "2", cap]);
    assert!(err.contains("cannot load the tool"), "{err}");
}

// A boundary range is one capture of every launch between its boundaries: with another
// selection, or a malformed range, it is a usage error before the application runs.
#[test]
fn boundary_ranges_refuse_other_selections_before_the_run() {
    let d = scratch("boundary-usage");
    let cases: [(&[&str], &str); 6] = [
        (
            &["--nvtx-range", "layer", "-k", "saxpy"],
            "cannot be used with",
        ),
        (
            &["--nvtx-range", "layer", "--launch-range", "1:2"],
            "cannot be used with",
        ),
        (
            &["--nvtx-range", "layer", "--nvtx-include", "model"],
            "cannot be used with",
        ),
        (
            &["--profiler-range", "--launch-index", "3"],
            "cannot be used with",
        ),
        (
            &["--profiler-range", "--nvtx-range", "layer"],
            "cannot be used with",
        ),
        (&["--nvtx-range", "a//b"], "expected [DOMAIN@]RANGE"),
    ];
    common::assert_refused_before_run(&d, &["record"], &cases);
}

#[test]
fn a_variant_that_is_no_code_is_refused_before_the_application_runs() {
    let d = scratch("variant-refused");
    std::fs::write(d.join("kernel.cu"), "extern \"C\" __global__ void k() {}\n").expect("write");
    let marker = d.join("ran");
    let touch = format!("touch {}", marker.display());
    let (code, _, err) = kreplay_in(
        &d,
        &[
            "profile",
            "-k",
            "k",
            "--variant",
            "kernel.cu",
            "--",
            "/bin/sh",
            "-c",
            &touch,
        ],
    );
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("not a cubin, fatbin or PTX") && err.contains("nvcc -cubin"),
        "{err}"
    );
    assert!(!marker.exists(), "the application ran");
    let (code, _, err) = kreplay_in(
        &d,
        &["profile", "-k", "k", "--keep", "variant", "/bin/true"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("--variant"), "{err}");
}
