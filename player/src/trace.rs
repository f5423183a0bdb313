//! `play --trace FILE.json`: what the trace of a replay is of (the capture's steps and
//! origin, the counters), handed with the pass records to `trace_build`.

use kreplay_format::{Capture, Step};
use kreplay_protocol::config::demangle;
use serde_json::{Map, Value};

use crate::play::PlayOutcome;
use crate::trace_build::{build, CounterLabel, StepLabel, TraceSubject};
use crate::trace_events::Trace;

/// The trace of `outcome`, a replay of `cap` read from `capture_file`.
pub fn trace_of(cap: &Capture<'_>, outcome: &PlayOutcome, capture_file: &str) -> Trace {
    build(
        &subject(cap, outcome, capture_file),
        &outcome.report.pass_records,
    )
}

fn step_label(outcome: &PlayOutcome, i: usize, s: &Step) -> StepLabel {
    let metrics = outcome
        .report
        .range
        .as_ref()
        .and_then(|r| r.steps.get(i))
        .and_then(|s| s.metrics.clone())
        .unwrap_or_default();
    StepLabel {
        name: match s.dispatch() {
            Some(d) => demangle(&d.kernel_name),
            None => s.kind().to_string(),
        },
        stream: Some(s.stream),
        metrics,
    }
}

/// What the trace shows beside the passes.
pub fn subject(cap: &Capture<'_>, outcome: &PlayOutcome, capture_file: &str) -> TraceSubject {
    let steps = match cap.is_range() {
        true => cap
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| step_label(outcome, i, s))
            .collect(),
        false => vec![StepLabel {
            name: demangle(&cap.dispatch.kernel_name),
            stream: None,
            metrics: Default::default(),
        }],
    };
    let counters = outcome.metrics.iter().flat_map(|m| &m.metrics);
    TraceSubject {
        title: format!("kreplay play {capture_file}"),
        range: cap.is_range(),
        steps,
        counters: counters
            .map(|m| CounterLabel {
                metric: m.name.clone(),
                unit: m.unit.clone(),
                value: m.value,
            })
            .collect(),
        origin: origin(cap, outcome, capture_file),
    }
}

/// Where the capture came from and what the replay was, for the trace's metadata.
fn origin(cap: &Capture<'_>, outcome: &PlayOutcome, capture_file: &str) -> Map<String, Value> {
    let d = &cap.dispatch;
    let r = &outcome.report;
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("capture_file", capture_file.into());
    put(
        "format_version",
        format!("{}.{}", cap.header.major, cap.header.minor).into(),
    );
    put("kernel", demangle(&d.kernel_name).into());
    put("kernel_mangled", d.kernel_name.clone().into());
    put("grid", Value::from(d.grid.to_vec()));
    put("block", Value::from(d.block.to_vec()));
    if cap.is_range() {
        put("steps", cap.steps.len().into());
    }
    put("replay_device", r.device.clone().into());
    if let Some(dev) = &cap.device {
        put("recorded_device", dev.name.clone().into());
        put(
            "recorded_compute_capability",
            format!("{}.{}", dev.cc_major, dev.cc_minor).into(),
        );
        put("recorded_driver_version", dev.driver_version.into());
    }
    if let Some(info) = &cap.info {
        put("recorded_host", info.host.clone().into());
        put("recorded_tool_version", info.tool_version.clone().into());
        put("recorded_time_unix_ns", info.time_unix_ns.into());
    }
    put("passes", r.timing.passes.into());
    put("warmup", r.timing.warmup.into());
    put("median_ns", r.timing.median_ns.into());
    put("cache", r.cache.to_string().into());
    put("tool_version", env!("CARGO_PKG_VERSION").into());
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace_build::tests::{range_passes, span};
    use crate::trace_check::check_trace;
    use crate::PlayReport;
    use kreplay_engine::counters::{MetricValue, MetricsReport};
    use kreplay_engine::pass_trace::PassRecord;

    fn outcome(pass_records: Vec<PassRecord>, metrics: Option<MetricsReport>) -> PlayOutcome {
        PlayOutcome {
            report: PlayReport {
                kernel: "k".into(),
                timing: Default::default(),
                original_ns: None,
                address_mode: kreplay_engine::AddressMode::Original,
                code: kreplay_engine::CodeSource::Cubin,
                device: "NVIDIA H200".into(),
                write_set_bytes: 0,
                absent_bytes: 0,
                pristine: kreplay_engine::PristineStore::None,
                cache: kreplay_engine::CacheState::Keep,
                verify: Default::default(),
                tool: None,
                range: None,
                pass_records,
            },
            metrics,
            saved: None,
            saved_step: None,
            warnings: Vec::new(),
        }
    }

    fn metrics() -> MetricsReport {
        MetricsReport {
            metrics: vec![MetricValue {
                name: "dram__bytes_read.sum".into(),
                value: 4096.0,
                unit: "byte".into(),
            }],
            passes: 1,
            cache: kreplay_engine::CacheState::Flush,
            chip: "gh100".into(),
            cupti: None,
            steps: Vec::new(),
        }
    }

    // Catches: the origin missing what the contract names (kernel, grid, block, devices,
    // file, format version, driver), or the dispatch not named by its demangled kernel.
    #[test]
    fn a_single_capture_names_its_kernel_and_origin() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let cap = crate::testdata::parse(&bytes);
        let passes = vec![PassRecord {
            timed: span(0, 1_000),
            ..PassRecord::default()
        }];
        let o = outcome(passes, Some(metrics()));
        let s = subject(&cap, &o, "saxpy.krr");
        assert!(!s.range);
        assert_eq!(s.steps.len(), 1);
        assert_eq!(s.steps[0].name, demangle(&cap.dispatch.kernel_name));
        assert_eq!(s.counters[0].unit, "byte");
        for key in [
            "kernel",
            "grid",
            "block",
            "replay_device",
            "capture_file",
            "format_version",
            "recorded_device",
            "recorded_driver_version",
        ] {
            assert!(s.origin.contains_key(key), "no {key}");
        }
        assert_eq!(s.origin["grid"], Value::from(cap.dispatch.grid.to_vec()));
        let t: Value = serde_json::from_slice(&trace_of(&cap, &o, "saxpy.krr").to_json()).unwrap();
        assert!(check_trace(&t).is_ok());
        assert_eq!(t["metadata"]["capture_file"], "saxpy.krr");
    }

    // Catches: a range's steps not labelled with their recorded streams (every step on one
    // thread), or ops named as kernels.
    #[test]
    fn a_range_capture_labels_each_step_with_its_stream() {
        let bytes = crate::testdata::golden("range-ops");
        let cap = crate::testdata::parse(&bytes);
        let s = subject(&cap, &outcome(range_passes(), None), "r.krr");
        assert!(s.range);
        assert_eq!(s.steps.len(), cap.steps.len());
        for (label, step) in s.steps.iter().zip(&cap.steps) {
            assert_eq!(label.stream, Some(step.stream));
            if step.dispatch().is_none() {
                assert_eq!(label.name, step.kind());
            }
        }
    }
}
