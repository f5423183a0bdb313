//! Any bytes: parse, verify, scan, salvage and read every region without panicking, hanging or
//! allocating more than the input could describe.
//!
//!   cargo +nightly fuzz run parse fuzz/corpus/parse
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kreplay_format::scan(data);
    let _ = kreplay_format::verify(data);
    if let Ok(cap) = kreplay_format::Capture::parse(data) {
        for r in cap.regions.clone() {
            if r.size <= 1 << 26 {
                let _ = cap.read_region(r.region_id);
            }
        }
    }
    let _ = kreplay_format::salvage(data, std::io::Cursor::new(Vec::new()));
});
