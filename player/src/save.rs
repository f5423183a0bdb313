//! `play --save-output`: the replay's result as a capture. The saved file is the capture with
//! its post-dispatch state replaced by device memory as the replay left it, so `kreplay diff`
//! compares the recorded output with the replayed one (another GPU, driver or `--module`).

use std::path::Path;

use kreplay_cuda::copy_dtoh;
use kreplay_format::file::PendingFile;
use kreplay_format::layout::FLAG_CRITICAL;
use kreplay_format::{Annotation, EventKind, MemoryState, WriterOptions};

use kreplay_engine::PlayError;

use crate::session::Session;

/// What `save_output` wrote.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SavedOutput {
    pub path: String,
    /// Bytes the replay left different from the capture's input.
    pub changed_bytes: u64,
}

impl Session<'_> {
    /// Writes the capture with the device's current memory as its post-dispatch state. Call
    /// after `run`: the device holds the last pass's output.
    pub fn save_output(&self, path: &Path, force: bool) -> Result<SavedOutput, PlayError> {
        let cap = self.capture();
        let mut uuid = cap.header.uuid;
        uuid[15] ^= 0x5a; // another capture, of the same dispatch
        let mut f = PendingFile::create(path, uuid, WriterOptions::default(), force)?;
        let mut changed_bytes = 0u64;
        {
            let w = &mut f.writer;
            kreplay_format::pack::write_head(w, cap)?;
            let (mut pre, mut now) = (Vec::new(), Vec::new());
            for r in &cap.regions {
                w.region(r)?;
                let placed = self.placement(r.region_id);
                for c in cap.chunks(r.region_id, MemoryState::Pre) {
                    // The input, as recorded: copied without decoding.
                    let payload = cap
                        .bytes()
                        .get(c.payload_offset as usize..(c.payload_offset + c.payload_len) as usize)
                        .ok_or(kreplay_format::FormatError::Limit {
                            what: "memory chunk",
                            message: "outside the file".into(),
                        })?;
                    w.write_raw_event(EventKind::MemoryChunk as u16, FLAG_CRITICAL, payload)?;
                    let Some((base, usable)) = placed else {
                        continue;
                    };
                    if c.offset >= usable || c.offset + c.raw_len > usable {
                        continue; // a module global larger in the file than in the module
                    }
                    pre.resize(c.raw_len as usize, 0);
                    cap.read_chunk_into(c, &mut pre)?;
                    now.resize(c.raw_len as usize, 0);
                    copy_dtoh(&mut now, base + c.offset)?;
                    if now != pre {
                        changed_bytes +=
                            pre.iter().zip(&now).filter(|(a, b)| a != b).count() as u64;
                        w.memory(r.region_id, MemoryState::Post, c.offset, &now)?;
                    }
                }
            }
            // The replay's output is a reference for these inputs, whatever the capture said.
            kreplay_format::pack::write_tail(w, cap)?;
            // What salvage lost of the input stays lost; the output is now the replay's.
            if let Some(s) = &cap.salvage {
                w.salvage_record(&kreplay_format::SalvageRecord {
                    unknown_output: Vec::new(),
                    ..s.clone()
                })?;
            }
            w.annotation(&Annotation {
                key: "replay".into(),
                value: format!(
                    "post-dispatch state saved by kreplay play {} on {}{}",
                    env!("CARGO_PKG_VERSION"),
                    self.device_name(),
                    if self.is_relocated() {
                        " (relocated: pointer words hold the replay's addresses)"
                    } else {
                        ""
                    }
                ),
            })?;
        }
        f.finish()?;
        Ok(SavedOutput {
            path: path.display().to_string(),
            changed_bytes,
        })
    }
}
