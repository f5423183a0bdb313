//! Any bytes as a fatbin section: walk the containers, decompress every PTX entry and list its
//! kernels without panicking or allocating more than the (bounded) sizes allow.
//!
//!   cargo +nightly fuzz run fatbin fuzz/corpus/fatbin
#![no_main]

use kreplay_format::fatbin;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fatbin::classify(data);
    let _ = fatbin::container_len(data);
    let _ = fatbin::wrapper_target(data);
    for e in fatbin::ptx_entries(data) {
        if let Ok(text) = e.text() {
            let _ = kreplay_format::ptx::entry_names(&text);
        }
    }
    let _ = kreplay_format::ptx::entry_names(data);
});
