//! Which crates a checkout holds: every top-level folder with a `Cargo.toml` and a `src/`
//! (workspace members and the separately built `python/`), save `fuzz/`, and the examples and
//! benches beside their `src/` (each its own crate root: `craft_hostile`'s 111-line `main` once
//! got past a check that read `src/` alone).

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
        for extra in [src.join("bin"), dir.join("examples"), dir.join("benches")] {
            roots.extend(target_roots(repo, &extra)?);
        }
    }
    Ok(roots)
}

/// The crate roots of a folder of targets (`src/bin`, `examples`, `benches`): each `x.rs`, and
/// each `x/main.rs`.
fn target_roots(repo: &Path, folder: &Path) -> Result<Vec<PathBuf>, HouseError> {
    let mut roots = Vec::new();
    if !repo.join(folder).is_dir() {
        return Ok(roots);
    }
    for entry in sorted_entries(&repo.join(folder))? {
        let entry = folder.join(entry);
        if entry.extension().is_some_and(|e| e == "rs") {
            roots.push(entry);
        } else if repo.join(&entry).join("main.rs").is_file() {
            roots.push(entry.join("main.rs"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crate_root_is_found_and_fuzz_and_target_are_not() {
        let repo = std::env::temp_dir().join(format!("kreplay-house-{}", std::process::id()));
        let files = [
            "a/Cargo.toml",
            "a/src/lib.rs",
            "a/src/main.rs",
            "a/src/bin/x.rs",
            "a/src/bin/y/main.rs",
            "a/examples/e.rs",
            "a/examples/f/main.rs",
            "a/examples/f/helper.rs",
            "a/benches/b.rs",
            "b/Cargo.toml",
            "b/src/lib.rs",
            "notacrate/src/lib.rs",
            "fuzz/Cargo.toml",
            "fuzz/src/lib.rs",
            "target/Cargo.toml",
            "target/src/lib.rs",
        ];
        for f in files {
            let path = repo.join(f);
            std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
            std::fs::write(&path, "").expect("write");
        }
        let roots = crate_roots(&repo);
        std::fs::remove_dir_all(&repo).expect("clean up");
        let roots: Vec<String> = roots
            .expect("lists")
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            roots,
            [
                "a/src/lib.rs",
                "a/src/main.rs",
                "a/src/bin/x.rs",
                "a/src/bin/y/main.rs",
                "a/examples/e.rs",
                "a/examples/f/main.rs",
                "a/benches/b.rs",
                "b/src/lib.rs"
            ]
        );
    }
}
