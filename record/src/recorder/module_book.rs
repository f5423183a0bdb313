//! The code objects the recorder keeps: loaded modules that hold a wanted kernel (image,
//! functions, globals), and where the PTX of wanted kernels can be found.

use std::sync::Arc;

use crate::ptx::PtxSource;

pub(super) struct StoredModule {
    pub id: u32,
    pub image: Arc<Vec<u8>>,
    pub functions: Vec<String>,
    pub objects: Vec<(String, u64)>,
    /// Which of the driver's modules it is, as far as the load told.
    pub key: ModuleKey,
}

/// How to tell which of the driver's modules a stored image is. Several loaded modules may
/// define a kernel of the same name with different code (Triton compiles one per
/// specialization, all named after the Python function): a capture must keep the code its
/// launch runs, which only the driver's handles tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum ModuleKey {
    /// Loaded where nothing said which module it became.
    #[default]
    Unknown,
    /// Loaded inside the load call with this correlation id, still running on its thread:
    /// its handle comes at that call's EXIT (another thread's load EXIT leaves it alone).
    Loading(u32),
    /// The `CUmodule` a load call returned (or the launch that loaded it lazily ran).
    Module(usize),
    /// Loaded lazily inside the launch (this correlation id) of this function (or
    /// `CUkernel`) handle, still in its ENTER on its thread.
    LaunchedFunction(usize, u32),
}

/// Which module a launch runs among the stored ones that define its kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ModuleChoice {
    /// The index into the candidates.
    Chosen(usize),
    /// Several hold different code and none is known to be the launch's module: the index
    /// of the latest loaded, which is what the recorder kept before it could tell modules
    /// apart (right whenever the kernel's own code is the same in each, as for a template
    /// kernel that two fatbins both hold), said with a warning.
    Ambiguous {
        latest: usize,
        candidates: usize,
    },
    None,
}

/// The module of a launch among `candidates` (the stored modules defining its kernel, in load
/// order: `(image, the driver module handle it resolves to)`), given `launched`, the handle
/// of the module the launch runs (None when the driver could not say). The one whose handle
/// is the launch's; else, when every candidate holds the same image (the same code loaded
/// again, or in another context), the latest; else ambiguous: a capture with another
/// module's code would replay something else.
pub(super) fn choose_module(
    candidates: &[(&[u8], Option<usize>)],
    launched: Option<usize>,
) -> ModuleChoice {
    let Some((last, _)) = candidates.last() else {
        return ModuleChoice::None;
    };
    if let Some(h) = launched {
        if let Some(i) = candidates.iter().rposition(|(_, c)| *c == Some(h)) {
            return ModuleChoice::Chosen(i);
        }
    }
    if candidates.iter().all(|(image, _)| image == last) {
        return ModuleChoice::Chosen(candidates.len() - 1);
    }
    ModuleChoice::Ambiguous {
        latest: candidates.len() - 1,
        candidates: candidates.len(),
    }
}

/// The owner's state, behind its lock.
#[derive(Default)]
pub(super) struct Modules {
    pub modules: Vec<StoredModule>,
    pub next_module_id: u32,
    /// Where PTX for wanted kernels can be found (see `ptx`).
    pub ptx_sources: Vec<PtxSource>,
    /// The kernels already warned about: several modules, and no telling which one runs.
    pub warned_ambiguous: std::collections::HashSet<String>,
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
    fn a_launch_gets_the_module_whose_handle_it_runs_not_the_latest() {
        let (a, b, c): (&[u8], &[u8], &[u8]) = (b"block256", b"block512", b"block1024");
        let loaded = [(a, Some(0x10)), (b, Some(0x20)), (c, Some(0x30))];
        assert_eq!(choose_module(&loaded, Some(0x10)), ModuleChoice::Chosen(0));
        assert_eq!(choose_module(&loaded, Some(0x20)), ModuleChoice::Chosen(1));
        assert_eq!(choose_module(&loaded, Some(0x30)), ModuleChoice::Chosen(2));
    }

    #[test]
    fn different_code_with_no_handle_to_tell_is_ambiguous() {
        let (a, b): (&[u8], &[u8]) = (b"one", b"two");
        assert_eq!(
            choose_module(&[(a, None), (b, Some(0x20))], Some(0x99)),
            ModuleChoice::Ambiguous {
                latest: 1,
                candidates: 2
            }
        );
        assert_eq!(
            choose_module(&[(a, None), (b, None)], None),
            ModuleChoice::Ambiguous {
                latest: 1,
                candidates: 2
            }
        );
    }

    #[test]
    fn the_same_code_loaded_twice_needs_no_handle() {
        let a: &[u8] = b"same";
        assert_eq!(
            choose_module(&[(a, None), (a, None)], None),
            ModuleChoice::Chosen(1)
        );
        assert_eq!(choose_module(&[(a, None)], None), ModuleChoice::Chosen(0));
        assert_eq!(choose_module(&[], Some(1)), ModuleChoice::None);
    }

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
