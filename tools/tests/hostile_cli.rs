//! The CLI against hostile and unlucky inputs (issue 14). No GPU needed: everything here is
//! refused or handled before any GPU work.

mod common;

use common::*;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kreplay_format::layout::{ChunkPrefix, FLAG_CRITICAL};
use kreplay_format::*;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn dispatch(name: &str) -> Dispatch {
    Dispatch {
        kernel_name: name.into(),
        module_id: 1,
        api: LaunchApi::LaunchKernelEx,
        grid: [1, 1, 1],
        block: [32, 1, 1],
        cluster: [0, 0, 0],
        dynamic_shared_bytes: 0,
        attributes: vec![],
        params: vec![Param { offset: 0, size: 8 }],
        arg_bytes: 0x7f00_0000_0000u64.to_le_bytes().to_vec(),
        pointer_words: vec![0],
        original_duration_ns: None,
    }
}

/// A capture with the given dispatch, one region of `size` bytes in zero chunks of
/// `chunk` bytes, and annotations.
fn capture(d: &Dispatch, size: u64, chunk: u64, notes: &[(&str, &str)]) -> Vec<u8> {
    let mut w = CaptureWriter::new(Cursor::new(Vec::new()), [9; 16], WriterOptions::default())
        .expect("writer");
    w.module(&ModuleImage {
        module_id: 1,
        kind: ModuleKind::Cubin,
        arch: 90,
        image: b"\x7fELF".to_vec(),
    })
    .expect("module");
    w.dispatch(d).expect("dispatch");
    w.region(&Region {
        region_id: 0,
        address: 0x7f00_0000_0000,
        size,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size: chunk,
    })
    .expect("region");
    let mut off = 0;
    while off < size {
        let p = ChunkPrefix {
            region_id: 0,
            state: MemoryState::Pre,
            encoding: ChunkEncoding::Zero,
            offset: off,
            raw_len: chunk.min(size - off),
            raw_crc: 0,
        };
        w.write_raw_event(EventKind::MemoryChunk as u16, FLAG_CRITICAL, &p.encode())
            .expect("chunk");
        off += chunk;
    }
    for (k, v) in notes {
        w.annotation(&Annotation {
            key: k.to_string(),
            value: v.to_string(),
        })
        .expect("note");
    }
    w.finish().expect("finish").into_inner()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write");
    p
}

#[test]
fn salvage_never_overwrites_its_input_or_an_existing_file() {
    let d = scratch("salvage");
    let golden =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/golden/incomplete.krr");
    let input = d.join("in.krr");
    std::fs::copy(&golden, &input).expect("copy");
    let before = std::fs::read(&input).expect("read");
    // The same file, by its name and through a symlink.
    let alias = d.join("alias.krr");
    std::os::unix::fs::symlink(&input, &alias).expect("alias");
    for out in [&input, &alias] {
        let (code, _, err) = kreplay(&["verify", s(&input), "--salvage", s(out), "--force"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("damaged capture itself"), "{err}");
    }
    assert_eq!(
        std::fs::read(&input).expect("read"),
        before,
        "input changed"
    );
    // An existing output is kept without --force, replaced with it.
    let out = write(&d, "out.krr", b"keep");
    let (code, _, err) = kreplay(&["verify", s(&input), "--salvage", s(&out)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(&out).expect("kept"), b"keep");
    let (code, _, err) = kreplay(&["verify", s(&input), "--salvage", s(&out), "--force"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("(verified)"), "{err}");
    let (code, _, err) = kreplay(&["verify", s(&out)]);
    assert_eq!(code, 0, "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_salvage_that_keeps_nothing_replayable_writes_nothing() {
    let d = scratch("salvage-none");
    let golden = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/golden/incomplete.krr"),
    )
    .expect("golden");
    let scan = scan(&golden).expect("scan");
    // Only the events before the dispatch survive.
    let dispatch_at = scan
        .intact
        .iter()
        .find(|e| e.frame.kind == EventKind::Dispatch as u16)
        .expect("dispatch")
        .offset as usize;
    let input = write(&d, "cut.krr", &golden[..dispatch_at]);
    let out = d.join("out.krr");
    let (code, _, err) = kreplay(&["verify", s(&input), "--salvage", s(&out)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nothing replayable"), "{err}");
    assert!(err.contains("no dispatch"), "{err}");
    assert!(!out.exists(), "a failed salvage left {}", out.display());
    assert!(!d.join("out.krr.partial").exists());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn extract_refuses_to_inflate_a_small_file_and_to_clobber_a_directory() {
    let d = scratch("extract");
    // 900 KB standing for 1 TiB of zeros.
    let bomb = write(
        &d,
        "bomb.krr",
        &capture(&dispatch("k"), 1 << 40, 64 << 20, &[]),
    );
    assert!(std::fs::metadata(&bomb).expect("meta").len() < 1 << 20);
    let out = d.join("x");
    let (code, _, err) = kreplay(&["extract", s(&bomb), "-o", s(&out)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--force") && err.contains("1.0 TiB"), "{err}");
    assert!(!out.exists(), "nothing written");
    // A normal capture goes into an empty directory, not into a full one.
    let small = write(&d, "small.krr", &capture(&dispatch("k"), 4096, 1024, &[]));
    let (code, _, err) = kreplay(&["extract", s(&small), "-o", s(&out)]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = kreplay(&["extract", s(&small), "-o", s(&out)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not empty"), "{err}");
    // A symlink planted among the outputs is replaced, never followed.
    let victim = write(&d, "victim", b"keep me");
    let args = out.join("args.bin");
    std::fs::remove_file(&args).expect("rm");
    std::os::unix::fs::symlink(&victim, &args).expect("plant");
    let (code, _, err) = kreplay(&["extract", s(&small), "-o", s(&out), "--force"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(&victim).expect("victim"), b"keep me");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&args).expect("args").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "extracted memory is private");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_terabyte_of_zeros_verifies_quickly() {
    let d = scratch("verify-bomb");
    let bomb = write(
        &d,
        "bomb.krr",
        &capture(&dispatch("k"), 1 << 40, 64 << 20, &[]),
    );
    let t = Instant::now();
    let (code, out, err) = kreplay(&["verify", s(&bomb)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1.0 TiB of memory"), "{out}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_fifo_is_refused_at_once() {
    let d = scratch("fifo");
    let fifo = d.join("p.krr");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success());
    let mut child = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(["info", s(&fifo)])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("kreplay info blocked on a FIFO");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(2));
    let out = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a regular file"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn terminal_control_characters_from_a_capture_are_shown_inert() {
    let d = scratch("escape");
    let f = write(
        &d,
        "esc.krr",
        &capture(
            &dispatch("evil\x1b]0;pwned\x07\nkernel"),
            4096,
            1024,
            &[("note\x1b[2J", "line1\nline2\r\x1b[31mred")],
        ),
    );
    let (code, out, err) = kreplay(&["info", s(&f)]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains('\x1b'), "{out:?}");
    assert!(out.contains("evil\\u{1b}]0;pwned\\u{7}\\nkernel"), "{out}");
    assert!(out.contains("line1\\nline2\\r\\u{1b}[31mred"), "{out}");
    assert!(out.contains("like a core dump"), "{out}");
    // JSON keeps the exact strings (escaped by JSON itself).
    let (code, out, _) = kreplay(&["info", "--json", s(&f)]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["kernel"]["mangled"], "evil\x1b]0;pwned\x07\nkernel");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn parameter_offsets_near_u32_max_do_not_overflow() {
    let d = scratch("overflow");
    let mut disp = dispatch("k");
    disp.params.push(Param {
        offset: u32::MAX - 3,
        size: 16,
    });
    let f = write(&d, "o.krr", &capture(&disp, 4096, 1024, &[]));
    let (code, out, err) = kreplay(&["info", s(&f)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("params"), "{out}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_unwritable_stderr_is_not_a_crash() {
    let dev_full = Path::new("/dev/full");
    if !dev_full.exists() {
        eprintln!("skipped: this system has no /dev/full");
        return;
    }
    let st = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(["info", "/nonexistent/x.krr"])
        .stderr(
            std::fs::OpenOptions::new()
                .write(true)
                .open(dev_full)
                .expect("/dev/full"),
        )
        .status()
        .expect("run");
    // Exit 2 (the error), not 101 (a panic while printing it).
    assert_eq!(st.code(), Some(2));
}

#[test]
fn an_unknown_launch_attribute_is_refused_before_any_gpu_work() {
    let d = scratch("attr");
    let mut disp = dispatch("k");
    disp.attributes.push(LaunchAttribute {
        id: 9999,
        value: vec![0; 64],
    });
    let f = write(&d, "a.krr", &capture(&disp, 4096, 1024, &[]));
    let (code, _, err) = kreplay(&["play", s(&f)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("launch attribute 9999"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}
