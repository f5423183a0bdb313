//! The SHA-256 a corpus manifest names for each capture, checked before the capture is used:
//! a file changed or damaged since the corpus was written is `damaged`, not replayed.

use std::path::Path;
use std::time::Instant;

use kreplay_format::file::MappedFile;
use kreplay_protocol::corpus::{sha256_file, sha256_pieces};

use crate::farm::Entry;
use crate::run_record::{RunRecord, Verdict};

/// How much of a mapping is hashed before its pages are dropped: resident memory stays near
/// this whatever the file's size.
const PIECE: usize = 64 << 20;

/// Why the file at `path` is not the one the manifest names (`Ok(None)`: it is).
pub fn mismatch(path: &Path, want: &str) -> std::io::Result<Option<String>> {
    Ok(differs(&sha256_file(path)?, want))
}

/// Why a file whose SHA-256 is `got` is not the one the manifest names (None: it is).
pub fn differs(got: &str, want: &str) -> Option<String> {
    (got != want).then(|| {
        format!("SHA-256 {got} is not the manifest's {want}: the file changed since the corpus was written")
    })
}

/// The mapped file's SHA-256, hashed in pieces, each piece's pages dropped once hashed.
pub fn sha256_mapped(file: &MappedFile) -> String {
    let bytes = file.bytes();
    let pieces = bytes.chunks(PIECE).enumerate().map(|(i, piece)| {
        // The piece before this one is hashed by now.
        if let Some(before) = i.checked_sub(1) {
            file.release((before * PIECE) as u64, (i * PIECE) as u64);
        }
        piece
    });
    let digest = sha256_pieces(pieces);
    file.release(bytes.len().saturating_sub(PIECE) as u64, bytes.len() as u64);
    digest
}

/// The record `e` gets when its checksum is refused: `damaged` with `why`.
pub fn damaged(e: &Entry, why: String) -> RunRecord {
    let mut r = RunRecord::new(e.shown.clone(), Verdict::Damaged);
    r.key = Some(e.key.clone());
    r.sha256 = e.sha256.clone();
    r.error = Some(why);
    r
}

/// The record `e` gets when it could not be checked at all (its file unreadable, a check
/// that failed): `error` with `why`.
pub fn unreadable(e: &Entry, why: String) -> RunRecord {
    let mut r = damaged(e, why);
    r.verdict = Verdict::Error;
    r
}

/// A capture the manifest's checksum refuses before any replay (None: go ahead, or the
/// manifest names no checksum): `damaged`, or `error` when the file cannot be read.
pub fn refusal(e: &Entry) -> Option<RunRecord> {
    let want = e.sha256.as_deref()?;
    let started = Instant::now();
    let mut r = match mismatch(&e.path, want) {
        Ok(None) => return None,
        Ok(Some(why)) => damaged(e, why),
        Err(err) => unreadable(e, format!("cannot read {}: {err}", e.shown)),
    };
    r.wall_s = started.elapsed().as_secs_f64();
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    fn entry(path: &Path, sha256: Option<&str>) -> Entry {
        Entry {
            shown: "x.krr".into(),
            key: "x.krr".into(),
            path: path.to_path_buf(),
            sha256: sha256.map(str::to_string),
        }
    }

    #[test]
    fn the_digest_is_sha256_and_a_change_is_named() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("x");
        std::fs::write(&p, b"abc").expect("write");
        assert_eq!(sha256_file(&p).expect("hash"), ABC);
        assert_eq!(mismatch(&p, ABC).expect("hash"), None);
        let why = mismatch(&p, "00").expect("hash").expect("differs");
        assert!(
            why.contains(ABC) && why.contains("the manifest's 00"),
            "{why}"
        );
    }

    // Catches: the mapped hash disagreeing with the file hash the recorder wrote into the
    // manifest (a piece left out at a piece boundary), which would call every capture damaged.
    #[test]
    fn a_mapping_hashes_as_its_file_across_piece_boundaries() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("x");
        let bytes: Vec<u8> = (0..PIECE * 2 + 17).map(|i| (i % 253) as u8).collect();
        std::fs::write(&p, &bytes).expect("write");
        let file = MappedFile::open(&p).expect("map");
        assert_eq!(sha256_mapped(&file), sha256_file(&p).expect("hash"));
        // Dropped pages read back the same bytes.
        assert_eq!(file.bytes(), bytes.as_slice());
        std::fs::write(&p, b"abc").expect("write");
        assert_eq!(sha256_mapped(&MappedFile::open(&p).expect("map")), ABC);
    }

    #[test]
    fn a_refusal_is_damaged_or_unreadable_and_none_without_a_checksum() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("x");
        std::fs::write(&p, b"abc").expect("write");
        assert!(refusal(&entry(&p, None)).is_none());
        assert!(refusal(&entry(&p, Some(ABC))).is_none());
        let r = refusal(&entry(&p, Some("00"))).expect("refused");
        assert_eq!(r.verdict, Verdict::Damaged);
        assert_eq!(r.sha256.as_deref(), Some("00"));
        let gone = refusal(&entry(&d.path().join("gone"), Some(ABC))).expect("refused");
        assert_eq!(gone.verdict, Verdict::Error);
        assert!(
            gone.error
                .as_deref()
                .is_some_and(|e| e.starts_with("cannot read x.krr: ")),
            "{:?}",
            gone.error
        );
    }
}
