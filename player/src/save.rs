//! `play --save-output`: the replay's result as a capture. The saved file is the capture with
//! its post-dispatch state replaced by device memory as the replay left it, so `kreplay diff`
//! compares the recorded output with the replayed one (another GPU, driver or `--module`).

use std::path::Path;

use kreplay_cuda::copy_dtoh;
use kreplay_format::file::PendingFile;
use kreplay_format::layout::FLAG_CRITICAL;
use kreplay_format::{
    Annotation, ChunkRef, EventKind, FormatError, MemoryState, SalvageRecord, WriterOptions,
};

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
        let uuid = saved_uuid(cap.header.uuid);
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
                    let payload = raw_payload(cap.bytes(), c)?;
                    w.write_raw_event(EventKind::MemoryChunk as u16, FLAG_CRITICAL, payload)?;
                    let Some((base, usable)) = placed else {
                        continue;
                    };
                    if !read_back(c, usable) {
                        continue; // a module global larger in the file than in the module
                    }
                    pre.resize(c.raw_len as usize, 0);
                    cap.read_chunk_into(c, &mut pre)?;
                    now.resize(c.raw_len as usize, 0);
                    // SAFETY: `read_back` checked the chunk lies in the `usable` bytes this
                    // session placed for the region, memory of its own.
                    unsafe { copy_dtoh(&mut now, base + c.offset)? };
                    if now != pre {
                        changed_bytes += differing_bytes(&pre, &now);
                        w.memory(r.region_id, MemoryState::Post, c.offset, &now)?;
                    }
                }
            }
            // The replay's output is a reference for these inputs, whatever the capture said.
            kreplay_format::pack::write_tail(w, cap)?;
            // What salvage lost of the input stays lost; the output is now the replay's.
            if let Some(s) = &cap.salvage {
                w.salvage_record(&saved_salvage(s))?;
            }
            w.annotation(&replay_annotation(self.device_name(), self.is_relocated()))?;
        }
        f.finish()?;
        Ok(SavedOutput {
            path: path.display().to_string(),
            changed_bytes,
        })
    }
}

/// The saved file's UUID: another capture (it must not pass for the recorded one in a
/// `kreplay diff`), of the same dispatch, so derived from the capture's and differing from it.
fn saved_uuid(mut uuid: [u8; 16]) -> [u8; 16] {
    uuid[15] ^= 0x5a;
    uuid
}

/// A chunk's stored payload (prefix and bytes), copied as is into the saved file. The offsets
/// come from the file's index, so a payload outside the file is an error, not a panic.
fn raw_payload<'b>(bytes: &'b [u8], c: &ChunkRef) -> Result<&'b [u8], FormatError> {
    let outside = || FormatError::Limit {
        what: "memory chunk",
        message: "outside the file".into(),
    };
    let start = usize::try_from(c.payload_offset).map_err(|_| outside())?;
    let end = c
        .payload_offset
        .checked_add(c.payload_len)
        .and_then(|e| usize::try_from(e).ok())
        .ok_or_else(outside)?;
    bytes.get(start..end).ok_or_else(outside)
}

/// Whether a pre-dispatch chunk is read back from the device: only when it lies wholly in the
/// `usable` bytes there (a module global may be smaller in the loaded module than in the
/// file); a chunk reaching past them keeps no post chunk, rather than a partial one.
fn read_back(c: &ChunkRef, usable: u64) -> bool {
    c.offset < usable && c.offset.saturating_add(c.raw_len) <= usable
}

/// Bytes at which the replay's output differs from the input (`pre` and `now` are as long).
fn differing_bytes(pre: &[u8], now: &[u8]) -> u64 {
    pre.iter().zip(now).filter(|(a, b)| a != b).count() as u64
}

/// What salvage recorded stays (what it lost of the input stays lost), except the output it
/// marked unknown: the saved file's output is the replay's, known for every chunk.
fn saved_salvage(s: &SalvageRecord) -> SalvageRecord {
    SalvageRecord {
        unknown_output: Vec::new(),
        ..s.clone()
    }
}

/// The annotation saying where the saved output came from; a relocated replay says so, since
/// then the pointer words in the output hold this replay's addresses, not the recorded ones.
fn replay_annotation(device: &str, relocated: bool) -> Annotation {
    Annotation {
        key: "replay".into(),
        value: format!(
            "post-dispatch state saved by kreplay play {} on {}{}",
            env!("CARGO_PKG_VERSION"),
            device,
            if relocated {
                " (relocated: pointer words hold the replay's addresses)"
            } else {
                ""
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    //! The choices `save_output` makes without the device. Each test names the mutation it is
    //! there to catch.

    use super::*;
    use crate::testdata;

    // Catches: the saved file keeping the capture's UUID (`saved_uuid` made the identity),
    // or deriving one that is not the capture's (a byte other than the last changed).
    #[test]
    fn the_saved_file_is_another_capture_of_the_same_dispatch() {
        let uuid = *b"kreplay-golden-1";
        let saved = saved_uuid(uuid);
        assert_ne!(saved, uuid);
        assert_eq!(saved[..15], uuid[..15]);
        assert_eq!(saved_uuid(saved), uuid);
    }

    // Catches: a payload slice that is not the chunk's stored bytes (`payload_offset` off by
    // the frame), or one that panics, rather than failing, on an index pointing past the file.
    #[test]
    fn a_payload_is_copied_as_stored_and_one_outside_the_file_refused() {
        let b = testdata::bytes("cuda-saxpy");
        let cap = testdata::parse(&b);
        for c in cap.chunks(1, MemoryState::Pre) {
            let p = raw_payload(cap.bytes(), c).expect("inside");
            assert_eq!(p.len() as u64, c.payload_len);
            // The stored payload is a chunk prefix naming the chunk, then its bytes.
            assert_eq!(p[..4], c.region_id.to_le_bytes());
            assert_eq!(p[8..16], c.offset.to_le_bytes());
        }
        let c = *cap.chunks(1, MemoryState::Pre).next().expect("chunk");
        let len = b.len() as u64;
        for (payload_offset, payload_len) in [(len, 1), (len - 1, 2), (u64::MAX, 2), (8, u64::MAX)]
        {
            let outside = ChunkRef {
                payload_offset,
                payload_len,
                ..c
            };
            let e = raw_payload(cap.bytes(), &outside).expect_err("outside the file");
            assert!(e.to_string().contains("outside the file"), "{e}");
        }
    }

    // Catches: `read_back` made `offset < usable` only (a chunk half outside a module global
    // read back past it) or `<` for `<=` (a chunk ending exactly at the end skipped).
    #[test]
    fn only_chunks_wholly_in_the_usable_bytes_are_read_back() {
        let b = testdata::bytes("cuda-globals");
        let cap = testdata::parse(&b);
        let coef = *cap.chunks(2, MemoryState::Pre).next().expect("coef");
        assert_eq!(coef.raw_len, 16);
        assert!(read_back(&coef, 16));
        assert!(read_back(&coef, 32));
        assert!(!read_back(&coef, 15));
        assert!(!read_back(&coef, 0));
        let later = ChunkRef { offset: 16, ..coef };
        assert!(!read_back(&later, 16));
        assert!(read_back(&later, 32));
    }

    // Catches: counting differing chunks or all bytes instead of differing bytes.
    #[test]
    fn changed_bytes_count_each_byte_that_differs() {
        assert_eq!(differing_bytes(&[1, 2, 3, 4], &[1, 0, 3, 0]), 2);
        assert_eq!(differing_bytes(&[7; 8], &[7; 8]), 0);
    }

    // Catches: the unknown output kept (a `kreplay diff` of the saved file would skip output
    // the replay produced), or the rest of what salvage lost forgotten.
    #[test]
    fn a_salvaged_capture_saved_keeps_its_losses_but_not_its_unknown_output() {
        let salvaged = testdata::salvaged_unfinished(&testdata::bytes("cuda-globals"));
        let cap = testdata::parse(&salvaged);
        let s = cap.salvage.as_ref().expect("a salvage record");
        assert!(!s.unknown_output.is_empty());
        let saved = saved_salvage(s);
        assert!(saved.unknown_output.is_empty());
        assert_eq!(
            SalvageRecord {
                unknown_output: s.unknown_output.clone(),
                ..saved
            },
            *s
        );
    }

    // Catches: the relocation note dropped (pointer words in the saved output would look like
    // a mismatch) or added to an unmoved replay.
    #[test]
    fn the_replay_annotation_names_the_device_and_a_relocation() {
        let a = replay_annotation("NVIDIA H200", false);
        assert_eq!(a.key, "replay");
        assert!(a.value.ends_with("on NVIDIA H200"), "{}", a.value);
        assert!(a.value.contains(env!("CARGO_PKG_VERSION")));
        let moved = replay_annotation("NVIDIA H200", true);
        assert!(moved.value.contains("relocated"), "{}", moved.value);
    }
}
