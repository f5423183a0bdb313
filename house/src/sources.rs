//! Where source text comes from: the disk for the real check, a map for the tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Source files by path relative to the repository root.
pub trait Sources {
    /// The file's text, or `None` when there is no such file.
    fn read(&self, path: &Path) -> Option<String>;
}

/// The files of a checkout.
pub struct Disk {
    pub root: PathBuf,
}

impl Sources for Disk {
    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(self.root.join(path)).ok()
    }
}

/// Files held in memory, for tests.
#[derive(Default)]
pub struct Memory(pub BTreeMap<PathBuf, String>);

impl Memory {
    pub fn with(mut self, path: &str, text: &str) -> Memory {
        self.0.insert(PathBuf::from(path), text.to_string());
        self
    }
}

impl Sources for Memory {
    fn read(&self, path: &Path) -> Option<String> {
        self.0.get(path).cloned()
    }
}

/// A path the way the report and the allowlist spell it: forward slashes, `.` and `..`
/// components folded (a `#[path = "../x.rs"]` module must name the same file as `x.rs`).
pub fn normal(path: &Path) -> PathBuf {
    let mut parts: Vec<String> = Vec::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir if parts.last().is_some_and(|p| p != "..") => {
                parts.pop();
            }
            other => parts.push(other.as_os_str().to_string_lossy().into_owned()),
        }
    }
    PathBuf::from(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_folds_dot_and_parent_components() {
        assert_eq!(normal(Path::new("a/./b/../c.rs")), PathBuf::from("a/c.rs"));
        assert_eq!(normal(Path::new("../x.rs")), PathBuf::from("../x.rs"));
    }
}
