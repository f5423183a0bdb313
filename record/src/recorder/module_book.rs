//! The code objects the recorder keeps: loaded modules that hold a wanted kernel (image,
//! functions, globals), and where the PTX of wanted kernels can be found.

use std::sync::Arc;

use crate::ptx::PtxSource;

pub(super) struct StoredModule {
    pub id: u32,
    pub image: Arc<Vec<u8>>,
    pub functions: Vec<String>,
    pub objects: Vec<(String, u64)>,
}

/// The owner's state, behind its lock.
#[derive(Default)]
pub(super) struct Modules {
    pub modules: Vec<StoredModule>,
    pub next_module_id: u32,
    /// Where PTX for wanted kernels can be found (see `ptx`).
    pub ptx_sources: Vec<PtxSource>,
}

/// Whether a loaded module is the recorder's own (`cuda/kernels`: every kernel named
/// `kreplay_*`), which no capture needs.
pub(super) fn is_own_module(functions: &[String]) -> bool {
    !functions.is_empty() && functions.iter().all(|f| f.starts_with("kreplay_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorders_own_module_is_told_by_its_kernels() {
        let own: Vec<String> = [
            "kreplay_chunk_scan",
            "kreplay_l2_sweep",
            "kreplay_heap_probe",
        ]
        .map(String::from)
        .to_vec();
        assert!(is_own_module(&own));
        let mixed = vec![
            "kreplay_chunk_scan".to_string(),
            "_Z5saxpyifPKfPf".to_string(),
        ];
        assert!(!is_own_module(&mixed));
        assert!(!is_own_module(&[]));
    }
}
