//! Salvaging a damaged capture file into another, as `kreplay verify --salvage OUT` and
//! Python's `kreplay.verify(path, salvage=OUT)` both do: never into the damaged file itself.

use std::path::{Path, PathBuf};

use crate::error::FormatError;
use crate::file::{salvage_to_file, MappedFile};
use crate::salvage::SalvageReport;

/// Why nothing was salvaged.
#[derive(Debug, thiserror::Error)]
pub enum SalvageRefused {
    /// The output names the damaged capture (the CLI prefixes its flag, `--salvage`).
    #[error("{}: that is the damaged capture itself; salvage into another file", .0.display())]
    IntoItself(PathBuf),
    #[error("nothing replayable could be salvaged from {name}")]
    Failed {
        name: String,
        #[source]
        source: FormatError,
    },
}

/// Salvages the damaged capture `file` (called `name` in messages) into `out` (replacing it
/// only with `force`); what it kept and dropped.
pub fn salvage_into(
    file: &MappedFile,
    name: &str,
    out: &Path,
    force: bool,
) -> Result<SalvageReport, SalvageRefused> {
    if file.is_same_file(out) {
        return Err(SalvageRefused::IntoItself(out.to_path_buf()));
    }
    salvage_to_file(file.bytes(), out, force).map_err(|source| SalvageRefused::Failed {
        name: name.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_is_never_salvaged_over_itself() {
        let dir = std::env::temp_dir().join(format!("kreplay-salvage-into-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cut.krr");
        std::fs::write(&path, b"\x89KRR\r\n\x1a\n cut short").unwrap();
        let file = MappedFile::open(&path).unwrap();
        let e = salvage_into(&file, "cut.krr", &path, true).unwrap_err();
        assert!(matches!(e, SalvageRefused::IntoItself(_)), "{e}");
        assert!(e
            .to_string()
            .ends_with("that is the damaged capture itself; salvage into another file"));
        let e = salvage_into(&file, "cut.krr", &dir.join("out.krr"), false).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("nothing replayable could be salvaged from cut.krr"));
        assert!(!dir.join("out.krr").exists(), "nothing left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
