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
            saved_step: None,
        }
    }

    /// With what `--save-step` wrote.
    pub fn with_saved_step(mut self, saved: Option<&'a SavedStep>) -> Self {
        self.saved_step = saved;
        self
    }
}
