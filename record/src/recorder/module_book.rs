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

/// The modules stored while `from` was their load site (a load call's or a launch's, by its
/// correlation id) learn what the driver said once it was over: `to`. Others, loading on
/// other threads, keep theirs.
pub(super) fn settle_keys(modules: &mut [StoredModule], from: ModuleKey, to: ModuleKey) {
    for m in modules.iter_mut().filter(|m| m.key == from) {
        m.key = to;
    }
}

/// The driver module handle a candidate's key stands for, when a capture compares it with
/// `launched` (the launched function's module): a handle a load returned; the launch's own
/// for a module loaded inside this very launch (`this_launch`, this thread's load site now);
/// none for a module still loading, or loaded inside another launch still in its ENTER
/// (perhaps on another thread, in another context), or loaded where nothing said.
pub(super) fn candidate_handle(
    key: ModuleKey,
    this_launch: ModuleKey,
    launched: Option<usize>,
) -> Option<usize> {
    match key {
        ModuleKey::Module(h) => Some(h),
        ModuleKey::LaunchedFunction(..) if key == this_launch => launched,
        ModuleKey::LaunchedFunction(..) | ModuleKey::Unknown | ModuleKey::Loading(_) => None,
    }
}

/// Whether a loaded module is the recorder's own (`cuda/kernels`: every kernel named
/// `kreplay_*`), which no capture needs.
pub(super) fn is_own_module(functions: &[String]) -> bool {
    !functions.is_empty() && functions.iter().all(|f| f.starts_with("kreplay_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(id: u32, image: &[u8], key: ModuleKey) -> StoredModule {
        StoredModule {
            id,
            image: Arc::new(image.to_vec()),
            functions: vec!["row_softmax".into()],
            objects: Vec::new(),
            key,
        }
    }

    fn choose_among(
        modules: &[StoredModule],
        this_launch: ModuleKey,
        launched: usize,
    ) -> ModuleChoice {
        let candidates: Vec<(&[u8], Option<usize>)> = modules
            .iter()
            .map(|m| {
                let h = candidate_handle(m.key, this_launch, Some(launched));
                (m.image.as_slice(), h)
            })
            .collect();
        choose_module(&candidates, Some(launched))
    }

    // Catches: one thread's load EXIT giving its handle to a module another thread is still
    // loading (both were "loading"), so that a launch of either got the other's code.
    #[test]
    fn two_threads_loading_at_once_each_get_their_own_handle() {
        let mut m = vec![
            stored(0, b"block256", ModuleKey::Loading(7)),
            stored(1, b"block1024", ModuleKey::Loading(9)),
        ];
        settle_keys(&mut m, ModuleKey::Loading(9), ModuleKey::Module(0x90));
        assert_eq!(
            m[0].key,
            ModuleKey::Loading(7),
            "the other thread's load is left alone"
        );
        settle_keys(&mut m, ModuleKey::Loading(7), ModuleKey::Module(0x70));
        let none = ModuleKey::Unknown;
        assert_eq!(choose_among(&m, none, 0x70), ModuleChoice::Chosen(0));
        assert_eq!(choose_among(&m, none, 0x90), ModuleChoice::Chosen(1));
    }

    #[test]
    fn a_module_loaded_inside_this_launch_is_the_launchs_own_and_another_launchs_is_unknown() {
        let here = ModuleKey::LaunchedFunction(0xf1, 3);
        let there = ModuleKey::LaunchedFunction(0xf2, 4);
        assert_eq!(candidate_handle(here, here, Some(0x30)), Some(0x30));
        assert_eq!(candidate_handle(there, here, Some(0x30)), None);
        assert_eq!(
            candidate_handle(ModuleKey::Module(0x10), here, Some(0x30)),
            Some(0x10)
        );
        assert_eq!(
            candidate_handle(ModuleKey::Loading(3), here, Some(0x30)),
            None
        );
        assert_eq!(candidate_handle(ModuleKey::Unknown, here, Some(0x30)), None);
        let m = vec![
            stored(0, b"block256", ModuleKey::Module(0x10)),
            stored(1, b"block1024", here),
        ];
        assert_eq!(choose_among(&m, here, 0x30), ModuleChoice::Chosen(1));
        // Seen from another launch, the module another launch is loading tells nothing.
        assert_eq!(
            choose_among(&m, there, 0x30),
            ModuleChoice::Ambiguous {
                latest: 1,
                candidates: 2
            }
        );
    }

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
