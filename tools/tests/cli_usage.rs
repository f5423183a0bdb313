//! The forms users type for `record` and `list`: the application is the first positional
//! argument, `--` optional, and everything after the application is the application's. These
//! run real processes (no GPU needed: a non-CUDA application never loads the recorder).

use std::process::Command;

mod common;

fn kreplay(args: &[&str]) -> (i32, String, String) {
    common::kreplay_app(None, args)
}

const ECHO_ARGS: &str = "printf 'app got:'; printf ' [%s]' \"$@\"; echo";

#[test]
fn list_runs_the_application_without_double_dash() {
    let (code, out, err) = kreplay(&["list", "sh", "-c", ECHO_ARGS, "sh", "-k", "bar", "--json"]);
    assert!(out.contains("app got: [-k] [bar] [--json]"), "{out}");
    // Not a CUDA application: the recorder never started, which kreplay says (exit 3); --json
    // went to the application, so kreplay printed no JSON.
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("recorder never started"), "{err}");
    assert!(!out.contains("\"error\""), "{out}");
}

#[test]
fn list_with_double_dash_and_its_own_flags() {
    let (code, out, err) = kreplay(&["list", "--json", "--", "sh", "-c", ECHO_ARGS, "sh", "x"]);
    assert_eq!(code, 3, "{err}");
    assert!(out.contains("app got: [x]"), "{out}");
    assert!(
        out.contains("\"error\":\"the recorder never started"),
        "kreplay's own --json applied: {out}"
    );
}

#[test]
fn record_passes_lookalike_flags_to_the_application() {
    let (code, out, err) = kreplay(&[
        "record", "-k", "foo", "sh", "-c", ECHO_ARGS, "sh", "-k", "bar", "-o", "y.krr",
    ]);
    assert!(out.contains("app got: [-k] [bar] [-o] [y.krr]"), "{out}");
    // Not a CUDA application: the recorder never started, which kreplay says (exit 3).
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("recorder never started"), "{err}");
    assert!(!std::path::Path::new("y.krr").exists());
}

#[test]
fn record_with_double_dash() {
    let (code, out, err) = kreplay(&[
        "record", "-k", "foo", "--", "sh", "-c", ECHO_ARGS, "sh", "z",
    ]);
    assert!(out.contains("app got: [z]"), "{out}");
    assert_eq!(code, 3, "{err}");
}

#[test]
fn application_exit_status_is_kept() {
    let (code, _, _) = kreplay(&["list", "sh", "-c", "exit 7"]);
    assert_eq!(code, 7);
}

#[test]
fn a_command_that_does_not_exist_is_named() {
    let (code, _, err) = kreplay(&["record", "-k", "foo", "./no-such-app-kreplay", "-x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot start ./no-such-app-kreplay"), "{err}");
    assert!(err.contains("check the path"), "{err}");
    let (code, _, err) = kreplay(&["list", "no-such-app-kreplay"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not found on PATH"), "{err}");
}

#[test]
fn usage_shows_the_form_users_type() {
    let (code, out, _) = kreplay(&["record", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("<CMD>..."), "{out}");
    assert!(!out.contains("-- <CMD>"), "`--` is optional: {out}");
}

#[test]
fn completions_and_man_page_are_generated() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = kreplay(&["completions", shell]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("kreplay"), "{shell}: {out}");
        assert!(
            out.contains("launch-index"),
            "{shell}: every flag is completed"
        );
    }
    let (code, _, _) = kreplay(&["completions", "tcsh"]);
    assert_eq!(code, 2, "an unknown shell is refused");
    let (code, out, err) = kreplay(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(".TH kreplay 1"), "{out}");
    // A closed pipe is not a crash.
    let mut child = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(["completions", "bash"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let st = child.wait().expect("wait");
    assert_ne!(st.code(), Some(101), "panicked on a closed pipe");
}

#[test]
fn csv_and_quiet_flags() {
    // No recorder, no list: not an empty CSV that reads as "no kernels ran".
    let (code, out, err) = kreplay(&["list", "--csv", "sh", "-c", "true"]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(out, "");
    let (code, _, err) = kreplay(&["list", "--csv", "--json", "sh", "-c", "true"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = kreplay(&["play", "x.krr", "--csv", "--json"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, out, err) = kreplay(&["record", "-q", "-k", "foo", "sh", "-c", "echo ran"]);
    assert_eq!(out, "ran\n");
    assert_eq!(code, 3, "{err}");
}
