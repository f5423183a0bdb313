//! What captures a run of many replays or verifies: the paths on the command line expanded
//! into one list. A directory is every `*.krr` under it, recursively (symlinked directories
//! are not followed, so a link loop cannot make the list endless), sorted by path; a file
//! ending in `.json` is a corpus manifest (`captures[].file`, relative to its folder, with
//! the SHA-256 checked before replay); any other path is one capture. The list keeps the
//! command line's order and names each capture once.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

/// One capture of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Where to read it.
    pub path: PathBuf,
    /// Its name in the JSON lines and the table: the path as given, or joined to the folder
    /// that was given.
    pub shown: String,
    /// Its path relative to the folder or manifest that named it (the path as given for a
    /// capture named on its own): what sharding hashes, so every host agrees wherever the
    /// corpus is mounted.
    pub key: String,
    /// The SHA-256 the manifest names (lowercase hex), checked before the capture is used.
    pub sha256: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a corpus manifest: {why}")]
    Manifest { path: String, why: String },
    #[error("{dir} holds no .krr capture")]
    EmptyDirectory { dir: String },
    #[error("{path} lists no capture (its \"captures\" is empty): there is nothing to run; name a manifest that lists captures, or the folder that holds them")]
    EmptyManifest { path: String },
}

/// Whether these paths ask for a run of many: more than one, a directory, or a manifest. One
/// capture file keeps the single replay and its output.
pub fn names_many(paths: &[PathBuf]) -> bool {
    match paths {
        [one] => one.is_dir() || is_manifest(one),
        _ => true,
    }
}

/// A `.json` file names a corpus manifest (`corpus.json`, or any name its writer chose).
pub fn is_manifest(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json") && !path.is_dir()
}

/// The captures `paths` name, in order, each once.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<Entry>, InputError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let found = directory(p)?;
            if found.is_empty() {
                return Err(InputError::EmptyDirectory {
                    dir: p.display().to_string(),
                });
            }
            out.extend(found);
        } else if is_manifest(p) {
            let listed = manifest(p)?;
            // A run of nothing would exit 0: a nightly gate passing on an empty corpus.
            if listed.is_empty() {
                return Err(InputError::EmptyManifest {
                    path: p.display().to_string(),
                });
            }
            out.extend(listed);
        } else {
            let shown = p.display().to_string();
            out.push(Entry {
                path: p.clone(),
                key: shown.clone(),
                shown,
                sha256: None,
            });
        }
    }
    let mut seen = HashSet::new();
    out.retain(|e| seen.insert(e.path.clone()));
    Ok(out)
}

/// Every `*.krr` under `dir`, sorted by its path relative to `dir`.
fn directory(dir: &Path) -> Result<Vec<Entry>, InputError> {
    let mut rel = Vec::new();
    walk(dir, Path::new(""), &mut rel)?;
    rel.sort();
    Ok(rel
        .into_iter()
        .map(|r| {
            let path = dir.join(&r);
            Entry {
                shown: path.display().to_string(),
                key: r.display().to_string(),
                path,
                sha256: None,
            }
        })
        .collect())
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> Result<(), InputError> {
    let here = root.join(rel);
    let read_err = |source| InputError::Read {
        path: here.display().to_string(),
        source,
    };
    for item in std::fs::read_dir(&here).map_err(read_err)? {
        let item = item.map_err(read_err)?;
        let name = rel.join(item.file_name());
        let kind = item.file_type().map_err(read_err)?;
        if kind.is_dir() {
            walk(root, &name, out)?;
        } else if name.extension().is_some_and(|e| e == "krr") {
            out.push(name);
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct Manifest {
    captures: Vec<ManifestCapture>,
}

/// The two fields of a manifest entry a run needs; the rest are the writer's.
#[derive(Deserialize)]
struct ManifestCapture {
    file: String,
    #[serde(default)]
    sha256: Option<String>,
}

/// The captures a manifest lists, in its order.
fn manifest(path: &Path) -> Result<Vec<Entry>, InputError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
        path: shown.clone(),
        source,
    })?;
    let m: Manifest = serde_json::from_str(&text).map_err(|e| InputError::Manifest {
        path: shown.clone(),
        why: e.to_string(),
    })?;
    let folder = path.parent().unwrap_or(Path::new(""));
    m.captures
        .into_iter()
        .map(|c| {
            inside_folder(&c.file).map_err(|why| InputError::Manifest {
                path: shown.clone(),
                why,
            })?;
            let file = folder.join(&c.file);
            Ok(Entry {
                shown: file.display().to_string(),
                path: file,
                key: c.file,
                // An empty checksum says nothing to check.
                sha256: c
                    .sha256
                    .filter(|s| !s.is_empty())
                    .map(|s| s.to_ascii_lowercase()),
            })
        })
        .collect()
}

/// A manifest names files inside its folder: one from elsewhere (absolute, or climbing out
/// with `..`) would make the corpus mean different files on different hosts.
fn inside_folder(file: &str) -> Result<(), String> {
    let p = Path::new(file);
    let escapes = p
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if file.is_empty() || escapes {
        return Err(format!(
            "capture file {file:?} is not a path inside the manifest's folder"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, b"x").expect("write");
    }

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tempdir");
        for f in ["b.krr", "a.krr", "sub/c.krr", "notes.txt", "z/deep/d.krr"] {
            touch(&d.path().join(f));
        }
        d
    }

    #[test]
    fn a_directory_is_every_krr_under_it_sorted() {
        let d = tree();
        let got = expand(&[d.path().to_path_buf()]).expect("expand");
        let keys: Vec<&str> = got.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["a.krr", "b.krr", "sub/c.krr", "z/deep/d.krr"]);
        assert_eq!(got[2].path, d.path().join("sub/c.krr"));
        assert_eq!(
            got[2].shown,
            d.path().join("sub/c.krr").display().to_string()
        );
    }

    #[test]
    fn files_keep_their_order_and_each_appears_once() {
        let d = tree();
        let (b, a) = (d.path().join("b.krr"), d.path().join("a.krr"));
        let got = expand(&[b.clone(), a.clone(), b.clone()]).expect("expand");
        let paths: Vec<&Path> = got.iter().map(|e| e.path.as_path()).collect();
        assert_eq!(paths, [b.as_path(), a.as_path()]);
        assert_eq!(got[0].key, b.display().to_string());
    }

    #[test]
    fn an_empty_directory_is_an_error_not_an_empty_run() {
        let d = tempfile::tempdir().expect("tempdir");
        let e = expand(&[d.path().to_path_buf()]).expect_err("empty");
        assert!(matches!(e, InputError::EmptyDirectory { .. }), "{e}");
    }

    #[test]
    fn a_manifest_lists_files_relative_to_its_folder_with_their_checksums() {
        let d = tempfile::tempdir().expect("tempdir");
        let m = d.path().join("corpus.json");
        std::fs::write(
            &m,
            r#"{"version":1,"captures":[{"file":"k/1.krr","kernel":"k","sha256":"ABCD"},
                {"file":"0.krr"}],"left_out":[]}"#,
        )
        .expect("write");
        let got = expand(std::slice::from_ref(&m)).expect("expand");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].path, d.path().join("k/1.krr"));
        assert_eq!(got[0].key, "k/1.krr");
        assert_eq!(got[0].sha256.as_deref(), Some("abcd"));
        assert_eq!(got[1].sha256, None);
        assert!(names_many(&[m]));
    }

    // Catches: a manifest with no capture taken as a run of nothing (exit 0).
    #[test]
    fn a_manifest_listing_no_capture_is_an_error_naming_it() {
        let d = tempfile::tempdir().expect("tempdir");
        let m = d.path().join("corpus.json");
        std::fs::write(&m, r#"{"version":1,"captures":[],"left_out":[]}"#).expect("write");
        let e = expand(std::slice::from_ref(&m)).expect_err("empty manifest");
        assert!(matches!(e, InputError::EmptyManifest { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains(&m.display().to_string()), "{text}");
        assert!(text.contains("lists no capture"), "{text}");
    }

    #[test]
    fn a_manifest_naming_a_file_outside_its_folder_is_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let m = d.path().join("corpus.json");
        for bad in ["../x.krr", "/etc/x.krr", ""] {
            std::fs::write(&m, format!(r#"{{"captures":[{{"file":"{bad}"}}]}}"#)).expect("w");
            let e = expand(std::slice::from_ref(&m)).expect_err(bad);
            assert!(
                e.to_string().contains("inside the manifest's folder"),
                "{e}"
            );
        }
        std::fs::write(&m, r#"{"captures":3}"#).expect("w");
        assert!(matches!(
            expand(&[m]).expect_err("not a manifest"),
            InputError::Manifest { .. }
        ));
    }

    #[test]
    fn one_capture_file_is_not_a_run_of_many() {
        let d = tree();
        let a = d.path().join("a.krr");
        assert!(!names_many(std::slice::from_ref(&a)));
        assert!(names_many(&[d.path().to_path_buf()]));
        assert!(names_many(&[a.clone(), a]));
    }
}
