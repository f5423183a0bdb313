//! Any bytes as a cubin: the symbol table and the declared parameter layout are read without
//! panicking (the recorder reads cubins the driver hands it; the player reads them from files).
//!
//!   cargo +nightly fuzz run cubin
#![no_main]

use kreplay_format::cubin;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(syms) = cubin::symbols(data) {
        for f in syms.functions.iter().take(8) {
            let _ = cubin::declared_params(data, f);
        }
    }
    let _ = cubin::declared_params(data, "k");
    let _ = kreplay_format::ptx::target_arch(data);
});
