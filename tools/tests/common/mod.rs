//! Helpers shared by the CLI tests: run the built `kreplay`, find the real captures, make a
//! scratch directory.
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs the built `kreplay` with `args`: (exit status, stdout, stderr).
pub fn kreplay(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(args)
        .output()
        .expect("run kreplay");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the built `kreplay` with `args` in `dir` (or here) for an application that never loads
/// the recorder (no GPU needed): any existing file stands for the recorder library.
pub fn kreplay_app(dir: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kreplay"));
    c.args(args)
        .env("KREPLAY_RECORD_LIB", env!("CARGO_BIN_EXE_kreplay"));
    if let Some(d) = dir {
        c.current_dir(d);
    }
    let out = c.output().expect("run kreplay");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A real H200 capture of testdata/captures.
pub fn capture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../testdata/captures/{name}.krr"))
}

/// An empty directory of its own for a test (`tag` names it).
pub fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kreplay-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch");
    d
}

/// The application every "refused before it runs" test starts: it leaves `ran` in its
/// directory if it ever runs.
pub const TOUCH_RAN: [&str; 3] = ["sh", "-c", "touch ran"];

/// For each `(flags, says)`: `kreplay` with `lead`, the flags, then `-- TOUCH_RAN` in `dir`
/// exits 2 with an error containing `says`, and the application never ran.
pub fn assert_refused_before_run(dir: &Path, lead: &[&str], cases: &[(&[&str], &str)]) {
    for (flags, says) in cases {
        let mut args = lead.to_vec();
        args.extend_from_slice(flags);
        args.extend_from_slice(&TOUCH_RAN);
        let (code, _, err) = kreplay_app(Some(dir), &args);
        assert_eq!(code, 2, "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
        assert!(!dir.join("ran").exists(), "{flags:?}: the application ran");
    }
}
