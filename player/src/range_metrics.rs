//! `play --metrics` on a range capture, the player's side: which steps the counters are
//! collected for (the kernel steps, named as the profiler's automatic ranges may be), and how
//! the counters land in the report (`steps[i].metrics`, `range_metrics`).

use std::collections::BTreeMap;

use kreplay_engine::counters::MetricsReport;
use kreplay_engine::range_counters::KernelStep;
use kreplay_format::Capture;

use crate::kernel_name::Kernel;
use crate::range::RangeReport;

/// A range's kernel steps, in order: each index among all steps and its kernel's names.
pub fn kernel_steps(cap: &Capture<'_>) -> Vec<(usize, Kernel)> {
    cap.steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.dispatch().map(|d| (i, Kernel::of(&d.kernel_name))))
        .collect()
}

/// The engine's view of `kernel_steps` (borrowing it).
pub fn as_kernel_steps(steps: &[(usize, Kernel)]) -> Vec<KernelStep<'_>> {
    steps
        .iter()
        .map(|(index, k)| KernelStep {
            index: *index,
            mangled: &k.mangled,
            demangled: &k.name,
        })
        .collect()
}

/// Puts a range's counters into its report: each kernel step's values under its step, the
/// range's totals (the additive metrics, possibly none) beside the steps.
pub fn attach(range: &mut RangeReport, metrics: &MetricsReport) {
    for s in &metrics.steps {
        let Some(step) = range.steps.get_mut(s.index) else {
            continue;
        };
        if !s.metrics.is_empty() {
            step.metrics = Some(
                s.metrics
                    .iter()
                    .map(|v| (v.name.clone(), v.value))
                    .collect(),
            );
        }
    }
    range.range_metrics = Some(
        metrics
            .metrics
            .iter()
            .map(|v| (v.name.clone(), v.value))
            .collect::<BTreeMap<_, _>>(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_engine::counters::{MetricValue, StepMetrics};

    fn range_cap(cap: &mut Capture<'_>) {
        let d = cap.dispatch.clone();
        let mut other = d.clone();
        other.kernel_name = "_Z5otherv".into();
        cap.steps = vec![
            kreplay_format::Step::kernel(0, d),
            kreplay_format::Step::op(
                0,
                kreplay_format::Op::Fill {
                    dst: 0,
                    value: 0,
                    element_bytes: 1,
                    count: 1,
                },
            ),
            kreplay_format::Step::kernel(1, other),
        ];
    }

    // Catches: ops offered to the profiler as kernel steps, or kernel steps numbered among
    // kernels only (their counters would land on the wrong step of the report).
    #[test]
    fn kernel_steps_keep_their_index_among_all_steps() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        range_cap(&mut cap);
        let steps = kernel_steps(&cap);
        let engine = as_kernel_steps(&steps);
        let seen: Vec<_> = engine.iter().map(|k| (k.index, k.mangled)).collect();
        assert_eq!(
            seen,
            vec![(0, cap.dispatch.kernel_name.as_str()), (2, "_Z5otherv")]
        );
        assert_eq!(engine[1].demangled, "other()");
    }

    fn value(name: &str, value: f64) -> MetricValue {
        MetricValue {
            name: name.into(),
            value,
            unit: "byte".into(),
        }
    }

    // Catches: counters on the op between the kernels, a dropped step shown with an empty
    // map (as if it had been measured), or the range's totals missing from the JSON.
    #[test]
    fn counters_land_on_their_steps_and_totals_beside_them() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        range_cap(&mut cap);
        let mut report = RangeReport {
            steps: crate::range::step_reports(&cap, &[]),
            ..RangeReport::default()
        };
        let m = MetricsReport {
            metrics: vec![value("dram__bytes_read.sum", 30.0)],
            steps: vec![
                StepMetrics {
                    index: 0,
                    kernel: "k".into(),
                    metrics: vec![value("dram__bytes_read.sum", 30.0)],
                },
                StepMetrics {
                    index: 2,
                    kernel: "o".into(),
                    metrics: Vec::new(),
                },
            ],
            passes: 1,
            cache: kreplay_engine::CacheState::Flush,
            chip: "GH100".into(),
            cupti: None,
        };
        attach(&mut report, &m);
        let j = serde_json::to_value(&report).expect("json");
        assert_eq!(j["steps"][0]["metrics"]["dram__bytes_read.sum"], 30.0);
        assert!(j["steps"][1].get("metrics").is_none(), "{j}");
        assert!(j["steps"][2].get("metrics").is_none(), "{j}");
        assert_eq!(j["range_metrics"]["dram__bytes_read.sum"], 30.0);
        // Without --metrics the keys are absent.
        let plain = serde_json::to_value(RangeReport::default()).expect("json");
        assert!(plain.get("range_metrics").is_none(), "{plain}");
    }
}
