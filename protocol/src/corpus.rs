//! A corpus (`kreplay record --each-kernel -o DIR/`): what the recorder reports of each
//! capture it kept and of each kernel it left out, and `DIR/corpus.json`, which the CLI writes
//! from those reports at the end of the run (schema in the README; `kreplay play
//! DIR/corpus.json` reads `captures[].file` and `sha256`).

use std::collections::HashSet;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest's schema version.
pub const MANIFEST_VERSION: u32 = 1;

/// The manifest's file name inside the corpus folder.
pub const MANIFEST_NAME: &str = "corpus.json";

/// The name of every capture of a corpus, under its folder: the distinct kernel's index in
/// its process (`%i`, first seen first), its short name, which of that kernel's executions
/// (`%e`, from 1) and the pid (several processes may fill one folder).
pub const CAPTURE_NAME: &str = "%i-%k-%e-%p.krr";

/// One capture kept in the corpus.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CorpusCapture {
    /// As the recorder wrote it; relative to the folder in the manifest.
    pub file: String,
    /// The short (demangled base) name, and the mangled one.
    pub kernel: String,
    pub mangled: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// 1-based among all kernel launches of its process.
    pub launch_index: u64,
    /// The innermost NVTX push/pop range open at the launch.
    pub nvtx: Option<String>,
    /// It ran as a node of a CUDA graph.
    pub graph: bool,
    /// The file's size.
    pub bytes_stored: u64,
    /// The launch's duration in the application.
    pub in_app_us: Option<f64>,
    /// SHA-256 of the finished file, lowercase hex.
    pub sha256: String,
}

/// The file's SHA-256, lowercase hex (`CorpusCapture::sha256`): the recorder fills it when
/// it keeps a capture and `kreplay play DIR/corpus.json` checks it before replaying, so both
/// read the file with this one function. Read in bounded pieces: captures run to gigabytes.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// The SHA-256 of `pieces` one after the other, as [`sha256_file`] gives it for a file of
/// those bytes: `kreplay verify` hashes the mapping it verifies (read once, not twice), in
/// pieces so it can drop each piece's pages once hashed.
pub fn sha256_pieces<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut hasher = Sha256::new();
    for p in pieces {
        hasher.update(p);
    }
    hex(&hasher.finalize())
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A kernel with executions the corpus wanted and did not keep, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    /// The short name, and the mangled one.
    pub kernel: String,
    #[serde(default)]
    pub mangled: String,
    pub why: String,
}

/// `DIR/corpus.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    /// The GPU the captures were taken on (name, UUID, compute capability, ...).
    pub device: serde_json::Value,
    pub driver: String,
    pub host: String,
    pub command: Vec<String>,
    pub captures: Vec<CorpusCapture>,
    pub left_out: Vec<LeftOut>,
}

/// The manifest's captures and left-out kernels from every process's: captures in file-name
/// order with their paths made relative to `dir`; one left-out entry per kernel, and none for
/// a kernel another process did capture. A capture written outside `dir` (a `-o` pattern
/// that leaves the folder) is not listed as a capture, since `kreplay play DIR/corpus.json`
/// refuses a path that leaves its folder: its kernel is left out with that reason instead.
pub fn merge(
    dir: &Path,
    captures: Vec<CorpusCapture>,
    left_out: Vec<LeftOut>,
) -> (Vec<CorpusCapture>, Vec<LeftOut>) {
    let mut inside = Vec::new();
    let mut outside = Vec::new();
    for mut c in captures {
        match relative_to(dir, &c.file) {
            Some(rel) => {
                c.file = rel;
                inside.push(c);
            }
            None => outside.push(LeftOut {
                why: format!(
                    "its capture {} was written outside the corpus folder {}",
                    c.file,
                    dir.display()
                ),
                kernel: c.kernel,
                mangled: c.mangled,
            }),
        }
    }
    let mut captures = inside;
    captures.sort_by(|a, b| a.file.cmp(&b.file));
    captures.dedup_by(|a, b| a.file == b.file);
    let captured: HashSet<&str> = captures.iter().map(|c| c.mangled.as_str()).collect();
    let mut seen = HashSet::new();
    let left_out = left_out
        .into_iter()
        .chain(outside)
        .filter(|l| !captured.contains(l.mangled.as_str()))
        .filter(|l| seen.insert(l.mangled.clone()))
        .collect();
    (captures, left_out)
}

/// `file` relative to `dir` when it lies inside it (both as written, or both absolute), with
/// no `..` component left that could climb out of it.
fn relative_to(dir: &Path, file: &str) -> Option<String> {
    let path = Path::new(file);
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let rel = absolute(path)
        .strip_prefix(absolute(dir))
        .ok()?
        .to_path_buf();
    let climbs = rel
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)));
    if rel.as_os_str().is_empty() || climbs {
        return None;
    }
    Some(rel.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(file: &str, mangled: &str) -> CorpusCapture {
        CorpusCapture {
            file: file.into(),
            mangled: mangled.into(),
            ..Default::default()
        }
    }

    fn left(mangled: &str, why: &str) -> LeftOut {
        LeftOut {
            kernel: mangled.into(),
            mangled: mangled.into(),
            why: why.into(),
        }
    }

    #[test]
    fn captures_relative_to_the_folder_in_name_order() {
        let (c, _) = merge(
            Path::new("out/corpus"),
            vec![
                capture("out/corpus/2-b-1-9.krr", "b"),
                capture("out/corpus/1-a-1-9.krr", "a"),
            ],
            vec![],
        );
        let files: Vec<&str> = c.iter().map(|c| c.file.as_str()).collect();
        assert_eq!(files, ["1-a-1-9.krr", "2-b-1-9.krr"]);
    }

    #[test]
    fn a_capture_outside_the_folder_is_left_out_not_listed() {
        let (c, l) = merge(
            Path::new("out/corpus"),
            vec![
                capture("out/corpus/1-a-1-9.krr", "a"),
                capture("elsewhere/x.krr", "x"),
                capture("out/corpus/../y.krr", "y"),
            ],
            vec![],
        );
        let files: Vec<&str> = c.iter().map(|c| c.file.as_str()).collect();
        assert_eq!(files, ["1-a-1-9.krr"]);
        let left: Vec<&str> = l.iter().map(|l| l.mangled.as_str()).collect();
        assert_eq!(left, ["x", "y"]);
        assert!(l[0].why.contains("elsewhere/x.krr"), "{}", l[0].why);
        assert!(
            l[0].why.contains("outside the corpus folder"),
            "{}",
            l[0].why
        );
    }

    #[test]
    fn a_kernel_is_left_out_once_and_not_when_another_process_kept_it() {
        let (_, l) = merge(
            Path::new("d"),
            vec![capture("d/1-a-1-7.krr", "a")],
            vec![left("a", "full"), left("b", "full"), left("b", "too big")],
        );
        assert_eq!(l, [left("b", "full")]);
    }

    #[test]
    fn a_file_digest_is_its_sha256_in_lowercase_hex() {
        let d = tempfile::tempdir().expect("tempdir");
        let abc = d.path().join("abc");
        std::fs::write(&abc, b"abc").expect("write");
        // FIPS 180-2's example.
        assert_eq!(
            sha256_file(&abc).expect("hash"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // Longer than one read: the pieces are hashed in order, not just the last.
        let big = d.path().join("big");
        std::fs::write(&big, vec![b'a'; (1 << 20) + 3]).expect("write");
        let mut whole = Sha256::new();
        whole.update(vec![b'a'; (1 << 20) + 3]);
        let want: String = whole
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(sha256_file(&big).expect("hash"), want);
        assert!(sha256_file(&d.path().join("missing")).is_err());
    }

    // Catches: a piecewise hash that differs from the file's (a piece dropped, reordered or
    // hashed twice), which would call every manifest-checked capture damaged.
    #[test]
    fn pieces_hash_as_the_file_of_those_bytes() {
        let d = tempfile::tempdir().expect("tempdir");
        let bytes: Vec<u8> = (0..(3u32 << 20) + 5)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        let path = d.path().join("x");
        std::fs::write(&path, &bytes).expect("write");
        let file = sha256_file(&path).expect("hash");
        assert_eq!(sha256_pieces(bytes.chunks(1 << 20)), file);
        assert_eq!(sha256_pieces([bytes.as_slice()]), file);
        assert_ne!(sha256_pieces(bytes.chunks(1 << 20).skip(1)), file);
        assert_eq!(
            sha256_pieces([b"ab".as_slice(), b"c"]),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(sha256_pieces([]), sha256_pieces([b"".as_slice()]));
    }

    #[test]
    fn the_manifest_reads_back_with_the_contract_field_names() {
        let m = Manifest {
            version: MANIFEST_VERSION,
            captures: vec![capture("1-a-1-7.krr", "a")],
            ..Default::default()
        };
        let v: serde_json::Value = serde_json::to_value(&m).unwrap();
        for key in [
            "version", "device", "driver", "host", "command", "captures", "left_out",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        let c = &v["captures"][0];
        for key in [
            "file",
            "kernel",
            "mangled",
            "grid",
            "block",
            "launch_index",
            "nvtx",
            "graph",
            "bytes_stored",
            "in_app_us",
            "sha256",
        ] {
            assert!(c.get(key).is_some(), "{key}");
        }
        let back: Manifest = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
    }
}
