pub mod compare_runs;
pub mod completions;
pub mod diff;
pub mod extract;
pub mod farm;
mod farm_table;
pub mod info;
pub mod list_ranges;
pub mod man;
pub mod pack;
pub mod play;
pub mod profile;
pub mod record;
pub mod record_corpus;
pub mod verify;
pub mod verify_trace;
pub mod version;

use std::path::Path;

use anyhow::Context;
use kreplay_format::file::MappedFile;

/// Writes generated text (completions, a man page, a listing) to stdout. Generated in memory
/// first: the generators panic on a failed write, and a closed pipe is not an error.
fn print_generated(
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> anyhow::Result<std::process::ExitCode> {
    let mut text = Vec::new();
    write(&mut text)?;
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    std::io::Write::write_all(&mut w, &text)?;
    std::io::Write::flush(&mut w)?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Opens a capture file for reading.
pub fn open(path: &Path) -> anyhow::Result<MappedFile> {
    MappedFile::open(path).with_context(|| format!("cannot open {}", path.display()))
}

/// The nearest of `dir` and its parents that exists (`.` for a relative path none of whose
/// parents exist).
fn nearest_existing(dir: &Path) -> &Path {
    let mut p = dir;
    loop {
        if p.as_os_str().is_empty() {
            return Path::new(".");
        }
        if std::fs::symlink_metadata(p).is_ok() {
            return p;
        }
        match p.parent() {
            Some(up) => p = up,
            None => return Path::new("."),
        }
    }
}

/// Whether files can be created in the directory `dir`: a file of kreplay's is created there
/// and removed at once (permissions alone do not say it: root passes every check, and a
/// read-only file system or `/proc` refuses anyway).
fn writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".kreplay-probe-{}", std::process::id()));
    kreplay_format::file::create_new_private(&probe)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Refuses, before any work, a directory outputs cannot be written into: the nearest existing
/// one of `dir` and its parents must be a directory this user can write in (those missing
/// below it are created by whoever writes the output). `what` names the output for the
/// message (`-o out/x.krr`).
pub fn check_output_dir(dir: &Path, what: &str) -> anyhow::Result<()> {
    let base = nearest_existing(dir);
    let shown = base.display();
    if !std::fs::metadata(base).is_ok_and(|m| m.is_dir()) {
        anyhow::bail!("{what}: {shown} is not a directory");
    }
    if let Err(e) = writable(base) {
        anyhow::bail!("{what}: cannot write in {shown} ({e}): choose a directory you can write in");
    }
    Ok(())
}

/// Refuses, before any work, an output file that cannot be written: one that exists (unless
/// `force`), a directory, or one whose directory is missing or not writable. `flag` names the
/// option for the message (`--save-output`).
pub fn check_new_output(path: &Path, force: bool, flag: &str) -> anyhow::Result<()> {
    let what = format!("{flag} {}", path.display());
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.is_dir() {
            anyhow::bail!("{what}: is a directory: name a file");
        }
        if !force {
            anyhow::bail!("{what}: already exists: pass --force to replace it");
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        anyhow::bail!(
            "{what}: the directory {} does not exist: create it first",
            dir.display()
        );
    }
    check_output_dir(dir, &what)
}
