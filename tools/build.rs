//! Bakes the git commit of the checkout into the binary (`KREPLAY_GIT_COMMIT`, shown by
//! `kreplay --version`), so a bug report names the exact source. Outside a git checkout (a
//! source tarball, `cargo package`) the commit is "unknown".

use std::path::Path;
use std::process::Command;

/// One line of `git` output run in the crate's directory, or None when git is missing, this
/// is not a checkout, or the answer is empty.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.trim();
    (!line.is_empty()).then(|| line.to_string())
}

/// Asks cargo to rerun this script when `path` changes. Only for files that exist: cargo
/// reruns a script on every build while a watched path is missing.
fn watch(dir: &Path, path: &str) {
    let path = dir.join(path);
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Release binaries keep their line tables (backtraces name file:line) compressed, at about
    // a third of their size: most are the prebuilt standard library's, which no profile
    // setting leaves out.
    if std::env::var("PROFILE").as_deref() == Ok("release") {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
    let dir = match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from("."),
    };
    let commit = git(&dir, &["rev-parse", "--short", "HEAD"]);
    if commit.is_some() {
        // `--git-path` resolves through worktrees and separate git dirs: HEAD moves on a
        // checkout, the branch's ref (loose, or in packed-refs) on a commit.
        for name in ["HEAD", "packed-refs"] {
            if let Some(p) = git(&dir, &["rev-parse", "--git-path", name]) {
                watch(&dir, &p);
            }
        }
        if let Some(branch) = git(&dir, &["symbolic-ref", "-q", "HEAD"]) {
            if let Some(p) = git(&dir, &["rev-parse", "--git-path", &branch]) {
                watch(&dir, &p);
            }
        }
    }
    println!(
        "cargo:rustc-env=KREPLAY_GIT_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}
