//! Which crates a checkout holds: every top-level folder with a `Cargo.toml` and a `src/`
//! (workspace members and the separately built `python/`), save `fuzz/`.

use std::path::{Path, PathBuf};

use crate::error::HouseError;

/// Folders that hold no crate of ours, or only fuzzing code.
const SKIPPED: [&str; 2] = ["target", "fuzz"];

/// The root file of every crate (library, main binary, `src/bin/` binaries), relative to `repo`.
pub fn crate_roots(repo: &Path) -> Result<Vec<PathBuf>, HouseError> {
    let mut roots = Vec::new();
    for dir in sorted_entries(repo)? {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with('.') || SKIPPED.contains(&name.as_str()) {
            continue;
        }
        if !repo.join(&dir).join("Cargo.toml").is_file() {
            continue;
        }
        let src = dir.join("src");
        for file in ["lib.rs", "main.rs"] {
            if repo.join(&src).join(file).is_file() {
                roots.push(src.join(file));
            }
        }
        let bin = src.join("bin");
        if repo.join(&bin).is_dir() {
            for entry in sorted_entries(&repo.join(&bin))? {
                let entry = bin.join(entry);
                if entry.extension().is_some_and(|e| e == "rs") {
                    roots.push(entry);
                } else if repo.join(&entry).join("main.rs").is_file() {
                    roots.push(entry.join("main.rs"));
                }
            }
        }
    }
    Ok(roots)
}

/// The names in `dir`, sorted so the report reads the same on every machine.
fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, HouseError> {
    let list = |source| HouseError::List {
        path: dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(list)? {
        names.push(PathBuf::from(entry.map_err(list)?.file_name()));
    }
    names.sort();
    Ok(names)
}
