//! What the player decides about range captures (a sequence of steps replayed as one pass):
//! which replay options do not apply to them yet, their in-app time, what the report says of
//! each step, and whether a mismatch is worth replaying step by step to name the step.

use std::collections::BTreeMap;

use kreplay_format::{Capture, StateDigest};
use serde::Serialize;

use crate::play_options::PlayOptions;

/// The in-app duration to compare a pass with: the dispatch's, or for a range the sum of its
/// steps' (none when a step's is unknown).
pub fn original_ns(cap: &Capture<'_>) -> Option<u64> {
    if !cap.is_range() {
        return cap.dispatch.original_duration_ns;
    }
    if let Some(ns) = cap.range.as_ref().and_then(|r| r.original_duration_ns) {
        return Some(ns);
    }
    cap.steps
        .iter()
        .filter_map(|s| s.dispatch())
        .map(|d| d.original_duration_ns)
        .sum()
}

/// One step of a range as the report shows it (`play --json`: `steps[]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    pub index: usize,
    /// `Step::kind`: `kernel`, `copy-dtod`, `fill`...
    pub kind: &'static str,
    /// The kernel, for kernel steps (as `info --json`'s steps name it).
    pub kernel: Option<crate::kernel_name::Kernel>,
    /// Median over the timed passes, for kernel steps with `--per-step`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_ns: Option<u64>,
    /// The kernel step's counters with `--metrics` (`crate::range_metrics::attach`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<BTreeMap<String, f64>>,
}

/// What a replay found of a range's steps (`play --json`: `steps`, `first_divergent_step`,
/// `divergence_note`, `mismatched_copies`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RangeReport {
    pub steps: Vec<StepReport>,
    /// The first step after which the replay's memory digest differed from the recorded one
    /// (`--verify`, on a mismatch); null when none was named.
    pub first_divergent_step: Option<usize>,
    /// Why no step was named although the output differed, when so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub divergence_note: Option<String>,
    /// Device-to-host copy steps whose bytes differed from what the application received.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mismatched_copies: Vec<usize>,
    /// With `--metrics`: the additive metrics summed over the kernel steps
    /// (`kreplay_engine::range_counters::is_additive`; the others are per step only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_metrics: Option<BTreeMap<String, f64>>,
}

/// The report's list of steps, with the per-step medians where there are some.
pub fn step_reports(cap: &Capture<'_>, medians: &[Option<u64>]) -> Vec<StepReport> {
    cap.steps
        .iter()
        .enumerate()
        .map(|(index, s)| StepReport {
            index,
            kind: s.kind(),
            kernel: s
                .dispatch()
                .map(|d| crate::kernel_name::Kernel::of(&d.kernel_name)),
            median_ns: medians.get(index).copied().flatten(),
            metrics: None,
        })
        .collect()
}

/// Whether a mismatched range is replayed again step by step to name the divergent step:
/// `Err` says why not.
pub fn divergence_search(cap: &Capture<'_>, relocated: bool) -> Result<(), String> {
    if relocated {
        return Err(
            "the first divergent step is not named: the replay was relocated, so the \
             digests of regions holding pointers differ from the recorded ones"
                .into(),
        );
    }
    if cap.has_extents() {
        return Err(
            "the first divergent step is not named: the capture holds only touched pages, \
             and the recorded digests cover whole regions"
                .into(),
        );
    }
    let digests = cap.range.as_ref().map_or(&[][..], |r| &r.digests[..]);
    if digests.iter().all(Option::is_none) {
        return Err(
            "the first divergent step is not named: the capture holds no per-step digests".into(),
        );
    }
    Ok(())
}

/// What step `index`'s digest says, given the recorded one and the replay's (`None`: could
/// not be computed here): `Some(true)` differs, `Some(false)` matches or was not recorded,
/// `None` cannot be told (the search stops there).
pub fn step_differs(recorded: Option<&StateDigest>, replayed: Option<[u64; 2]>) -> Option<bool> {
    let Some(r) = recorded else {
        return Some(false);
    };
    replayed.map(|d| d != r.digest)
}

/// The `play` option, if any, that range captures do not support yet (`--tool`, `--ptx`,
/// `--save-output`). `--relocate` works: kernel pointer arguments and pointer slots are
/// patched as for one dispatch, op addresses placed with their regions; `--metrics` gives
/// counters per kernel step and for the range (`crate::range_metrics`).
pub fn unsupported_option(options: &PlayOptions) -> Option<&'static str> {
    if options.tool.is_some() {
        return Some("play --tool");
    }
    if options.code == kreplay_engine::CodeChoice::Ptx {
        return Some("play --ptx");
    }
    if options.save_output.is_some() {
        return Some("play --save-output");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: a divergent step named from digests of whole regions, which the replay of a
    // capture by touched pages (its absent bytes the fill) differs from at every step.
    #[test]
    fn a_capture_by_touched_pages_names_no_divergent_step() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        crate::testdata::touched(&mut cap, 1, true);
        let why = divergence_search(&cap, false).expect_err("no search");
        assert!(why.contains("touched pages"), "{why}");
    }

    #[test]
    fn options_a_range_cannot_take_yet_are_named() {
        assert_eq!(unsupported_option(&PlayOptions::default()), None);
        let verify = PlayOptions {
            passes: 8,
            verify: true,
            ..PlayOptions::default()
        };
        assert_eq!(unsupported_option(&verify), None);
        let metrics = PlayOptions {
            metrics: vec!["sm__cycles_elapsed.avg".into()],
            ..PlayOptions::default()
        };
        assert_eq!(unsupported_option(&metrics), None);
        let tool = PlayOptions {
            tool: Some("t.so".into()),
            ..PlayOptions::default()
        };
        assert_eq!(unsupported_option(&tool), Some("play --tool"));
        let moved = PlayOptions {
            relocate: true,
            ..PlayOptions::default()
        };
        assert_eq!(unsupported_option(&moved), None);
        let ptx = PlayOptions {
            code: kreplay_engine::CodeChoice::Ptx,
            ..PlayOptions::default()
        };
        assert_eq!(unsupported_option(&ptx), Some("play --ptx"));
        // A --module variant replaces the range's kernels it defines.
        let variant = PlayOptions {
            code: kreplay_engine::CodeChoice::Variant(vec![1, 2, 3]),
            per_step: true,
            ..PlayOptions::default()
        };
        assert_eq!(unsupported_option(&variant), None);
    }

    #[test]
    fn a_single_capture_keeps_its_dispatch_time() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        assert_eq!(original_ns(&cap), cap.dispatch.original_duration_ns);
        let step = |ns| {
            kreplay_format::Step::kernel(
                0,
                kreplay_format::Dispatch {
                    original_duration_ns: ns,
                    ..cap.dispatch.clone()
                },
            )
        };
        cap.steps = vec![step(Some(100)), step(Some(250))];
        assert_eq!(original_ns(&cap), Some(350));
        cap.steps.push(step(None));
        assert_eq!(original_ns(&cap), None);
    }

    fn range_of(cap: &mut Capture<'_>) {
        let d = cap.dispatch.clone();
        cap.steps = vec![
            kreplay_format::Step::kernel(0, d.clone()),
            kreplay_format::Step::op(
                0,
                kreplay_format::Op::Fill {
                    dst: 0,
                    value: 0,
                    element_bytes: 1,
                    count: 1,
                },
            ),
            kreplay_format::Step::kernel(0, d),
        ];
    }

    // Catches: ops left out of the list, a kernel name on an op, or medians put on the
    // wrong step.
    #[test]
    fn the_report_lists_every_step_with_its_median() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        range_of(&mut cap);
        let r = step_reports(&cap, &[Some(10), None, Some(30)]);
        let kinds: Vec<_> = r.iter().map(|s| (s.index, s.kind, s.median_ns)).collect();
        assert_eq!(
            kinds,
            vec![
                (0, "kernel", Some(10)),
                (1, "fill", None),
                (2, "kernel", Some(30))
            ]
        );
        assert_eq!(
            r[0].kernel.as_ref().map(|k| k.mangled.as_str()),
            Some(cap.dispatch.kernel_name.as_str())
        );
        assert_eq!(r[1].kernel, None);
        // Without --per-step: the steps, no times (and no median_ns key in the JSON).
        let plain = step_reports(&cap, &[]);
        assert!(plain.iter().all(|s| s.median_ns.is_none()));
        let json = serde_json::to_value(&plain[0]).expect("json");
        assert!(json.get("median_ns").is_none(), "{json}");
        assert_eq!(json["kind"], "kernel");
    }

    // Catches: naming attempted on a relocated replay (pointer regions always differ) or on
    // a capture without digests (every step would look divergent).
    #[test]
    fn the_divergent_step_is_searched_only_where_digests_can_match() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        range_of(&mut cap);
        let digest = StateDigest {
            regions: 1,
            digest: [1, 2],
        };
        cap.range = Some(kreplay_format::RangeInfo {
            digests: vec![None, None, None],
            ..Default::default()
        });
        assert!(divergence_search(&cap, false)
            .expect_err("no digests")
            .contains("no per-step digests"));
        if let Some(r) = cap.range.as_mut() {
            r.digests[1] = Some(digest);
        }
        assert_eq!(divergence_search(&cap, false), Ok(()));
        assert!(divergence_search(&cap, true)
            .expect_err("relocated")
            .contains("relocated"));
    }

    // Catches: a step without a recorded digest taken as divergent, or an uncomputable
    // digest taken as a match (the search would name a later, innocent step).
    #[test]
    fn a_step_differs_only_when_both_digests_are_known_and_unequal() {
        let d = StateDigest {
            regions: 2,
            digest: [7, 8],
        };
        assert_eq!(step_differs(Some(&d), Some([7, 8])), Some(false));
        assert_eq!(step_differs(Some(&d), Some([7, 9])), Some(true));
        assert_eq!(step_differs(None, Some([7, 9])), Some(false));
        assert_eq!(step_differs(Some(&d), None), None);
    }
}
