//! `kreplay pack` and Python's `kreplay.pack`: a capture rewritten for sharing, smaller or
//! without the application's data. The format crate does the rewriting; this module decides
//! the level and reads the parameter types redaction needs from the kernel's signature.

use std::path::{Path, PathBuf};

use kreplay_format::file::{pack_to_file, MappedFile};
use kreplay_format::{Capture, FormatError, PackOptions, PackReport, Phase};

/// What a pack is asked for (the flags of `kreplay pack`, less the files).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackRequest {
    /// zstd level 1-22; None: [`default_level`] of the capture's memory.
    pub level: Option<i32>,
    pub redact: bool,
    pub drop_post: bool,
}

/// Why nothing was packed.
#[derive(Debug, thiserror::Error)]
pub enum PackRefused {
    /// The output names the capture itself (the CLI prefixes its flag, `-o`).
    #[error("{}: that is the capture itself; pack into another file", .0.display())]
    IntoItself(PathBuf),
    #[error("zstd level {0} is out of range: 1-22")]
    Level(i32),
    #[error("cannot pack {name}")]
    Failed {
        name: String,
        #[source]
        source: FormatError,
    },
}

/// The zstd level when none is asked: the smallest files while that takes seconds (zstd's
/// levels are not monotonic below 19 on every kind of data: 9 can be larger than 1).
pub fn default_level(memory_bytes: u64) -> i32 {
    if memory_bytes <= 1 << 30 {
        19
    } else {
        3
    }
}

/// A pack planned: the format's options and how much memory the capture holds (what
/// progress counts).
#[derive(Debug, Clone)]
pub struct PackPlan {
    pub options: PackOptions,
    pub memory_bytes: u64,
}

impl PackPlan {
    /// The plan for `data` (a file that does not parse packs with no parameter types: the
    /// packer then refuses it with the parser's reason).
    pub fn of(data: &[u8], request: PackRequest) -> Result<PackPlan, PackRefused> {
        if let Some(level) = request.level.filter(|l| !(1..=22).contains(l)) {
            return Err(PackRefused::Level(level));
        }
        let parsed = Capture::parse(data).ok();
        let memory_bytes: u64 = parsed
            .as_ref()
            .map(|c| c.regions.iter().map(|r| r.size).sum())
            .unwrap_or(0);
        // Parameter types from the signature: what redaction replaces an argument by, and the
        // element type of the memory it points to.
        let param_types = parsed
            .as_ref()
            .map(|c| crate::params::param_types(&c.dispatch))
            .unwrap_or_default();
        let step_param_types = parsed.as_ref().map(step_param_types).unwrap_or_default();
        Ok(PackPlan {
            options: PackOptions {
                level: request.level.unwrap_or(default_level(memory_bytes)),
                drop_post: request.drop_post,
                redact: request.redact,
                param_types,
                step_param_types,
            },
            memory_bytes,
        })
    }
}

/// A range capture's parameter types per step, each kernel's from its own signature (none
/// for op steps; empty for a single capture).
fn step_param_types(cap: &Capture<'_>) -> Vec<Vec<kreplay_format::ParamType>> {
    cap.steps
        .iter()
        .map(|s| {
            s.dispatch()
                .map(crate::params::param_types)
                .unwrap_or_default()
        })
        .collect()
}

/// Refuses an output that is the capture itself.
pub fn refuse_into_itself(file: &MappedFile, output: &Path) -> Result<(), PackRefused> {
    if file.is_same_file(output) {
        return Err(PackRefused::IntoItself(output.to_path_buf()));
    }
    Ok(())
}

/// Packs `file` (called `name` in messages) into `output` as `plan` says, replacing it only
/// with `force`; written to `OUTPUT.partial` and renamed once it verifies.
pub fn pack_file(
    file: &MappedFile,
    name: &str,
    output: &Path,
    force: bool,
    plan: PackPlan,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<PackReport, PackRefused> {
    refuse_into_itself(file, output)?;
    pack_to_file(file, output, force, plan.options, progress).map_err(|source| {
        PackRefused::Failed {
            name: name.to_string(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_level_is_the_smallest_files_up_to_a_gib_then_fast() {
        assert_eq!(default_level(0), 19);
        assert_eq!(default_level(1 << 30), 19);
        assert_eq!(default_level((1 << 30) + 1), 3);
    }

    #[test]
    fn a_plan_takes_the_asked_level_or_the_default_and_refuses_one_out_of_range() {
        let saxpy = crate::testdata::bytes("cuda-saxpy");
        let plan = PackPlan::of(&saxpy, PackRequest::default()).unwrap();
        assert_eq!(plan.options.level, 19);
        assert!(plan.memory_bytes > 0);
        assert!(
            !plan.options.param_types.is_empty(),
            "types from the signature"
        );
        let asked = PackRequest {
            level: Some(5),
            redact: true,
            ..PackRequest::default()
        };
        let plan = PackPlan::of(&saxpy, asked).unwrap();
        assert_eq!((plan.options.level, plan.options.redact), (5, true));
        for bad in [0, 23, -1] {
            let e = PackPlan::of(
                &saxpy,
                PackRequest {
                    level: Some(bad),
                    ..asked
                },
            )
            .unwrap_err();
            assert!(matches!(e, PackRefused::Level(l) if l == bad), "{e}");
        }
    }

    #[test]
    fn a_range_plans_the_types_of_each_kernel_step() {
        let range = crate::testdata::golden("range-ops");
        let plan = PackPlan::of(&range, PackRequest::default()).unwrap();
        let per_step = &plan.options.step_param_types;
        let cap = crate::testdata::parse(&range);
        assert_eq!(per_step.len(), cap.steps.len());
        for (types, step) in per_step.iter().zip(&cap.steps) {
            assert_eq!(
                types.is_empty(),
                step.dispatch().is_none(),
                "{}",
                step.kind()
            );
        }
        assert_eq!(
            per_step[6], plan.options.param_types,
            "saxpy's signature both times"
        );
        let single = crate::testdata::bytes("cuda-saxpy");
        let plan = PackPlan::of(&single, PackRequest::default()).unwrap();
        assert!(plan.options.step_param_types.is_empty());
    }

    #[test]
    fn what_does_not_parse_plans_with_no_types_and_no_memory() {
        let plan = PackPlan::of(b"garbage", PackRequest::default()).unwrap();
        assert_eq!(plan.memory_bytes, 0);
        assert!(plan.options.param_types.is_empty());
    }
}
