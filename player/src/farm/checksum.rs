//! The SHA-256 a corpus manifest names for each capture, checked before the capture is used:
//! a file changed or damaged since the corpus was written is `damaged`, not replayed.

use std::path::Path;

use kreplay_protocol::corpus::sha256_file;

/// Why the file at `path` is not the one the manifest names (`Ok(None)`: it is).
pub fn mismatch(path: &Path, want: &str) -> std::io::Result<Option<String>> {
    let got = sha256_file(path)?;
    Ok((got != want).then(|| {
        format!("SHA-256 {got} is not the manifest's {want}: the file changed since the corpus was written")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_sha256_and_a_change_is_named() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("x");
        std::fs::write(&p, b"abc").expect("write");
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_file(&p).expect("hash"), abc);
        assert_eq!(mismatch(&p, abc).expect("hash"), None);
        let why = mismatch(&p, "00").expect("hash").expect("differs");
        assert!(
            why.contains(abc) && why.contains("the manifest's 00"),
            "{why}"
        );
    }
}
