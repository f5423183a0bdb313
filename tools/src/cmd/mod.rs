pub mod diff;
pub mod extract;
pub mod info;
pub mod pack;
pub mod play;
pub mod profile;
pub mod record;
pub mod verify;

use std::path::Path;

use anyhow::Context;
use kreplay_format::file::MappedFile;

/// Opens a capture file for reading.
pub fn open(path: &Path) -> anyhow::Result<MappedFile> {
    MappedFile::open(path).with_context(|| format!("cannot open {}", path.display()))
}
