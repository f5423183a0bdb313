//! What a replay is asked for, with the one set of defaults that `kreplay play`'s flags and
//! `kreplay.play()`'s keyword arguments both show.

use std::path::PathBuf;

use kreplay_engine::{CacheState, CodeChoice, OpenOptions, Placement, RunOptions, Verification};

/// A replay's choices: the CLI's flags, Python's keywords.
#[derive(Debug, Clone, PartialEq)]
pub struct PlayOptions {
    /// Timed passes; written memory is restored before each one.
    pub passes: u32,
    /// Untimed passes run first.
    pub warmup: u32,
    /// Compare the output with the recorded one and across passes.
    pub verify: bool,
    /// CUDA device ordinal.
    pub device: i32,
    pub code: CodeChoice,
    /// Move the memory to new addresses even when the captured ones are free.
    pub relocate: bool,
    /// L2 before each pass, timed and counter passes alike; `None`: kept for timed passes
    /// and emptied for counter passes (as ncu does), so counters see the dispatch's own
    /// DRAM traffic.
    pub cache: Option<CacheState>,
    /// Counters to collect after the timed passes; none when empty.
    pub metrics: Vec<String>,
    /// Where to write the replay's result as a capture (`--save-output`).
    pub save_output: Option<SaveOutput>,
    /// A `kreplay_tool.h` library that decides the timed passes instead of `passes`
    /// (`--tool`).
    pub tool: Option<PathBuf>,
    /// A range's kernel steps timed one by one too (`--per-step`).
    pub per_step: bool,
    /// Where to write one kernel step of a range as a single capture (`--save-step K FILE`).
    pub save_step: Option<SaveStep>,
    /// Keep where each timed pass's parts ran on the GPU, for a trace (`--trace`).
    pub trace: bool,
}

/// `--save-step K OUT.krr [--force]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveStep {
    /// The step's 0-based index in the range (a kernel step).
    pub index: usize,
    pub path: PathBuf,
    /// Replace the file when it exists.
    pub replace: bool,
}

/// `--save-output FILE [--force]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveOutput {
    pub path: PathBuf,
    /// Replace the file when it exists.
    pub replace: bool,
}

impl Default for PlayOptions {
    fn default() -> Self {
        PlayOptions {
            passes: 1,
            warmup: 0,
            verify: false,
            device: 0,
            code: CodeChoice::Captured,
            relocate: false,
            cache: None,
            metrics: Vec::new(),
            save_output: None,
            tool: None,
            per_step: false,
            save_step: None,
            trace: false,
        }
    }
}

impl PlayOptions {
    /// How the capture is opened.
    pub fn open_options(&self) -> OpenOptions {
        OpenOptions {
            device: self.device,
            code: self.code.clone(),
            placement: if self.relocate {
                Placement::Relocate
            } else {
                Placement::Original
            },
        }
    }

    /// How the timed passes run.
    pub fn run_options(&self) -> RunOptions {
        RunOptions {
            passes: self.passes,
            warmup: self.warmup,
            cache: self.cache.unwrap_or(CacheState::Keep),
            verification: if self.verify {
                Verification::Check
            } else {
                Verification::Off
            },
            per_step: self.per_step,
            trace: self.trace,
        }
    }

    /// The L2 state before each counter pass.
    pub fn counter_cache(&self) -> CacheState {
        self.cache.unwrap_or(CacheState::Flush)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_timed_passes_keep_the_cache_and_counter_passes_flush_it() {
        let o = PlayOptions::default();
        assert_eq!(o.run_options().cache, CacheState::Keep);
        assert_eq!(o.counter_cache(), CacheState::Flush);
    }

    #[test]
    fn a_cache_choice_applies_to_timed_and_counter_passes_alike() {
        for c in [CacheState::Keep, CacheState::Flush] {
            let o = PlayOptions {
                cache: Some(c),
                ..PlayOptions::default()
            };
            assert_eq!(o.run_options().cache, c);
            assert_eq!(o.counter_cache(), c);
        }
    }

    #[test]
    fn the_defaults_are_one_plain_pass_of_the_captured_code_in_place() {
        let o = PlayOptions::default();
        let run = o.run_options();
        assert_eq!((run.passes, run.warmup), (1, 0));
        assert_eq!(run.verification, Verification::Off);
        let open = o.open_options();
        assert_eq!(open.device, 0);
        assert_eq!(open.code, CodeChoice::Captured);
        assert_eq!(open.placement, Placement::Original);
        assert!(o.metrics.is_empty() && o.save_output.is_none() && o.tool.is_none());
    }

    #[test]
    fn choices_reach_the_engine_options() {
        let o = PlayOptions {
            passes: 7,
            warmup: 2,
            verify: true,
            device: 3,
            code: CodeChoice::Ptx,
            relocate: true,
            ..PlayOptions::default()
        };
        let (run, open) = (o.run_options(), o.open_options());
        assert_eq!((run.passes, run.warmup), (7, 2));
        assert_eq!(run.verification, Verification::Check);
        assert_eq!(open.device, 3);
        assert_eq!(open.code, CodeChoice::Ptx);
        assert_eq!(open.placement, Placement::Relocate);
    }
}
