//! The JSON report of a replay (`kreplay play --json`, and `kreplay.play()` in Python): one
//! object, its fields documented in docs/FORMAT.md.

use std::collections::BTreeMap;

use crate::{CacheState, MetricsReport, PlayReport, SavedOutput, SavedStep};
use serde::Serialize;

/// `--json` output: the replay report (with `tool`: `path`, `passes`, `stopped_by_tool`,
/// `capped`, `skipped` when `--tool` chose the passes; see `kreplay_player::ToolRun`), plus
/// the counters when `--metrics` was given.
#[derive(Serialize)]
pub struct PlayJson<'a> {
    #[serde(flatten)]
    play: &'a PlayReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics: Option<BTreeMap<&'a str, f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metric_units: Option<BTreeMap<&'a str, &'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metric_passes: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metric_cache: Option<CacheState>,
    /// Which CUPTI collected the counters: `path`, `api_version`, `nvperf`.
    #[serde(skip_serializing_if = "Option::is_none")]
    metric_cupti: Option<&'a kreplay_cuda::cupti::CuptiInfo>,
    /// `--save-output`: the file and how many bytes the replay left different from the input.
    #[serde(skip_serializing_if = "Option::is_none")]
    saved_output: Option<&'a SavedOutput>,
    /// `--save-step`: the file, the step and its kernel.
    #[serde(skip_serializing_if = "Option::is_none")]
    saved_step: Option<&'a SavedStep>,
}

impl<'a> PlayJson<'a> {
    pub fn new(
        play: &'a PlayReport,
        m: Option<&'a MetricsReport>,
        saved_output: Option<&'a SavedOutput>,
    ) -> Self {
        PlayJson {
            play,
            metrics: m.map(|m| {
                m.metrics
                    .iter()
                    .map(|v| (v.name.as_str(), v.value))
                    .collect()
            }),
            // A range's totals hold only the additive metrics: the units come from its steps
            // too (a single dispatch has none).
            metric_units: m.map(|m| {
                m.metrics
                    .iter()
                    .chain(m.steps.iter().flat_map(|s| &s.metrics))
                    .map(|v| (v.name.as_str(), v.unit.as_str()))
                    .collect()
            }),
            metric_passes: m.map(|m| m.passes),
            metric_cache: m.map(|m| m.cache),
            metric_cupti: m.and_then(|m| m.cupti.as_ref()),
            saved_output,
            saved_step: None,
        }
    }

    /// With what `--save-step` wrote.
    pub fn with_saved_step(mut self, saved: Option<&'a SavedStep>) -> Self {
        self.saved_step = saved;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::{RangeReport, StepReport};

    fn report(range: Option<RangeReport>) -> PlayReport {
        PlayReport {
            kernel: "k".into(),
            timing: Default::default(),
            original_ns: None,
            address_mode: kreplay_engine::AddressMode::Original,
            code: kreplay_engine::CodeSource::Cubin,
            device: "d".into(),
            write_set_bytes: 0,
            absent_bytes: 0,
            pristine: kreplay_engine::PristineStore::None,
            cache: CacheState::Keep,
            verify: Default::default(),
            tool: None,
            range,
            pass_records: Vec::new(),
        }
    }

    // Catches: a single dispatch's JSON gaining range keys, or a range's losing
    // `first_divergent_step` when none was named (the contract says null).
    #[test]
    fn range_keys_appear_for_ranges_only() {
        let single = report(None);
        let j = serde_json::to_value(PlayJson::new(&single, None, None)).expect("json");
        assert!(j.get("steps").is_none() && j.get("first_divergent_step").is_none());
        let range = report(Some(RangeReport {
            steps: vec![StepReport {
                index: 0,
                kind: "kernel",
                kernel: Some(crate::kernel_name::Kernel::of("k")),
                median_ns: Some(5),
                metrics: None,
            }],
            ..RangeReport::default()
        }));
        let j = serde_json::to_value(PlayJson::new(&range, None, None)).expect("json");
        assert_eq!(j["steps"][0]["median_ns"], 5);
        assert_eq!(j["steps"][0]["index"], 0);
        assert!(j["first_divergent_step"].is_null());
        assert!(j.get("mismatched_copies").is_none());
    }
}
