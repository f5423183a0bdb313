//! The fuzz targets' corpora (fuzz/corpus/), replayed as tests: every input the fuzzer kept
//! goes through the same calls as its target (fuzz/fuzz_targets/), so CI runs what no test
//! ran before (the fuzzer needs nightly and is run by hand).

use std::path::{Path, PathBuf};

use kreplay_format::{cubin, fatbin, ptx};

fn corpus(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    // A corpus that vanished must not pass as an empty loop.
    assert!(
        files.len() >= 100,
        "{}: {} inputs",
        dir.display(),
        files.len()
    );
    files
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).expect("read");
            (p, b)
        })
        .collect()
}

#[test]
fn the_parse_corpus_neither_panics_nor_hangs() {
    for (_path, data) in corpus("parse") {
        let _ = kreplay_format::scan(&data);
        let _ = kreplay_format::verify(&data);
        if let Ok(cap) = kreplay_format::Capture::parse(&data) {
            for r in cap.regions.clone() {
                if r.size <= 1 << 26 {
                    let _ = cap.read_region(r.region_id);
                }
            }
        }
        let _ = kreplay_format::salvage(&data, std::io::Cursor::new(Vec::new()));
    }
}

#[test]
fn the_fatbin_corpus_neither_panics_nor_hangs() {
    for (_path, data) in corpus("fatbin") {
        let _ = fatbin::classify(&data);
        let _ = fatbin::container_len(&data);
        let _ = fatbin::wrapper_target(&data);
        for e in fatbin::ptx_entries(&data) {
            if let Ok(text) = e.text() {
                let _ = ptx::entry_names(&text);
            }
        }
        let _ = ptx::entry_names(&data);
        // The cubin target has no corpus of its own: the fatbin inputs hold ELF images.
        if let Some(syms) = cubin::symbols(&data) {
            for f in syms.functions.iter().take(8) {
                let _ = cubin::declared_params(&data, f);
            }
        }
        let _ = cubin::declared_params(&data, "k");
        let _ = ptx::target_arch(&data);
    }
}
