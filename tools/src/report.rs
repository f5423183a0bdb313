//! The JSON report of a replay (`kreplay play --json`, and `kreplay.play()` in Python): one
//! object, its fields documented in docs/FORMAT.md.

use std::collections::BTreeMap;

use kreplay_player::{MetricsReport, PlayReport};
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
    metric_cache: Option<kreplay_player::CacheState>,
    /// Which CUPTI collected the counters: `path`, `api_version`, `nvperf`.
    #[serde(skip_serializing_if = "Option::is_none")]
    metric_cupti: Option<&'a kreplay_cuda::cupti::CuptiInfo>,
    /// `--save-output`: the file and how many bytes the replay left different from the input.
    #[serde(skip_serializing_if = "Option::is_none")]
    saved_output: Option<&'a kreplay_player::SavedOutput>,
}

impl<'a> PlayJson<'a> {
    pub fn new(
        play: &'a PlayReport,
        m: Option<&'a MetricsReport>,
        saved_output: Option<&'a kreplay_player::SavedOutput>,
    ) -> Self {
        PlayJson {
            play,
            metrics: m.map(|m| {
                m.metrics
                    .iter()
                    .map(|v| (v.name.as_str(), v.value))
                    .collect()
            }),
            metric_units: m.map(|m| {
                m.metrics
                    .iter()
                    .map(|v| (v.name.as_str(), v.unit.as_str()))
                    .collect()
            }),
            metric_passes: m.map(|m| m.passes),
            metric_cache: m.map(|m| m.cache),
            metric_cupti: m.and_then(|m| m.cupti.as_ref()),
            saved_output,
        }
    }
}
