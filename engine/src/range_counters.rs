//! `kreplay play --metrics` on a range capture: counters per kernel step and for the range.
//! Each counter pass restores the range's write set and runs the whole range, every step in
//! the order a timed pass runs them; CUPTI's automatic ranges (one per kernel launched while
//! the profiler is started, which the single-dispatch path already configures) give each
//! kernel step its own counters, so no user range has to be pushed between steps. What here is
//! decided — which profiler range belongs to which step, which metrics add up over steps, the
//! range's totals — is pure and tested on the CPU.

use kreplay_cuda::AsFunction;

use crate::counters::{
    assign_ranges, range_is_kernel, MetricRequest, MetricValue, MetricsReport, StepMetrics,
};
use crate::error::{MetricsError, PlayError};
use crate::options::CacheState;
use crate::passes::Replayer;
use crate::tool::DispatchView;

/// A range's kernel step as the counters name it: its index among all steps and its kernel's
/// names (mangled, demangled), either of which an automatic range may carry.
#[derive(Debug, Clone, Copy)]
pub struct KernelStep<'a> {
    pub index: usize,
    pub mangled: &'a str,
    pub demangled: &'a str,
}

/// Whether a metric's value for the range is the sum of its values for the kernel steps.
/// The steps run one after another under the profiler (an automatic range per kernel), so a
/// counter rolled up over the device's units with `.sum` or `.avg` (`dram__bytes_read.sum`,
/// `sm__cycles_elapsed.avg`, `gpu__time_duration.sum`) is linear in the counts and adds up.
/// Not additive: `.min`/`.max` (extremes do not add), anything with a submetric
/// (`.per_second`, `.per_cycle_active`, `.pct_of_peak_sustained_*`, `.ratio`, `.peak_*`: rates,
/// shares and device constants), throughputs, and launch or device attributes (`launch__*`,
/// `device__*`, no rollup): those are given per step only.
pub fn is_additive(name: &str) -> bool {
    let mut parts = name.split('.');
    let (Some(base), Some(rollup), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let attribute = base.starts_with("launch__") || base.starts_with("device__");
    let throughput = base.ends_with("__throughput");
    !attribute && !throughput && matches!(rollup, "sum" | "avg")
}

/// Which profiler range holds each kernel step's counters, among `ranges` (decoded names, in
/// launch order): by position when there is exactly one range per kernel step (exact,
/// whatever CUPTI named them), else by name, passing over ranges of other kernels.
pub fn ranges_of_steps(ranges: &[String], steps: &[KernelStep<'_>]) -> Vec<Option<usize>> {
    if ranges.len() == steps.len() {
        return (0..steps.len()).map(Some).collect();
    }
    assign_ranges(ranges, steps.len(), |r, k| {
        range_is_kernel(r, steps[k].mangled) || range_is_kernel(r, steps[k].demangled)
    })
}

/// Each kernel step with its counters, `values(range)` evaluating one profiler range; a step
/// without a range gets none.
pub fn step_metrics<E>(
    steps: &[KernelStep<'_>],
    assigned: &[Option<usize>],
    values: &mut dyn FnMut(usize) -> Result<Vec<MetricValue>, E>,
) -> Result<Vec<StepMetrics>, E> {
    steps
        .iter()
        .zip(assigned)
        .map(|(s, range)| {
            Ok(StepMetrics {
                index: s.index,
                kernel: s.mangled.to_string(),
                metrics: match range {
                    Some(r) => values(*r)?,
                    None => Vec::new(),
                },
            })
        })
        .collect()
}

/// The range's figures: each additive metric summed over the kernel steps, in the order the
/// user asked for them. None at all when a kernel step lacks its counters (a partial sum would
/// pass for the range's).
pub fn range_totals(steps: &[StepMetrics]) -> Vec<MetricValue> {
    if steps.is_empty() || steps.iter().any(|s| s.metrics.is_empty()) {
        return Vec::new();
    }
    steps[0]
        .metrics
        .iter()
        .filter(|m| is_additive(&m.name))
        .map(|m| MetricValue {
            name: m.name.clone(),
            unit: m.unit.clone(),
            value: steps
                .iter()
                .flat_map(|s| s.metrics.iter().filter(|v| v.name == m.name))
                .map(|v| v.value)
                .sum(),
        })
        .collect()
}

/// Room for one automatic range per step (an op the driver runs as a kernel of its own, a
/// memset, still fits), at least one.
pub fn max_ranges(steps: usize) -> usize {
    steps.max(1)
}

impl<F: AsFunction> Replayer<F> {
    /// A range's counters: as many whole-range passes as the metric set needs, each on
    /// restored memory (`cache` flush empties L2 before each, outside the profiled window),
    /// then each kernel step's counters and the additive ones' sums. `steps` are the range's
    /// kernel steps in order, `all_steps` its number of steps.
    pub fn collect_range_metrics(
        &mut self,
        req: &MetricRequest,
        cache: CacheState,
        view: &DispatchView,
        steps: &[KernelStep<'_>],
        all_steps: usize,
    ) -> Result<MetricsReport, PlayError> {
        let (mut rp, passes) = self.counter_passes(req, cache, view, max_ranges(all_steps))?;
        let names = req.decode(&mut rp)?;
        if names.is_empty() {
            return Err(MetricsError::Dropped.into());
        }
        let assigned = ranges_of_steps(&names, steps);
        let per_step = step_metrics(steps, &assigned, &mut |r| req.values_of_range(&rp, r))?;
        let totals = range_totals(&per_step);
        Ok(MetricsReport::collected(
            req, passes, cache, totals, per_step,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(name: &str, value: f64) -> MetricValue {
        MetricValue {
            name: name.into(),
            value,
            unit: "u".into(),
        }
    }

    fn step<'a>(index: usize, mangled: &'a str) -> KernelStep<'a> {
        KernelStep {
            index,
            mangled,
            demangled: mangled,
        }
    }

    // Catches: rates, shares, extremes or attributes summed into a meaningless range figure,
    // or the counters the brief names (bytes, cycles) left without one.
    #[test]
    fn only_linear_counter_rollups_are_additive() {
        for yes in [
            "dram__bytes_read.sum",
            "sm__cycles_elapsed.avg",
            "gpu__time_duration.sum",
            "smsp__inst_executed.sum",
        ] {
            assert!(is_additive(yes), "{yes}");
        }
        for no in [
            "sm__cycles_elapsed.max",
            "sm__cycles_elapsed.min",
            "dram__bytes_read.sum.per_second",
            "sm__throughput.avg.pct_of_peak_sustained_elapsed",
            "smsp__inst_executed.avg.per_cycle_active",
            "sm__warps_active.avg.ratio",
            "dram__bytes_read.sum.peak_sustained",
            "sm__throughput.avg",
            "launch__grid_size",
            "launch__registers_per_thread.sum",
            "device__attribute_max_threads_per_block",
            "",
        ] {
            assert!(!is_additive(no), "{no}");
        }
    }

    // Catches: ranges matched by name when positions are exact (a kernel CUPTI names
    // otherwise would lose its counters), or an extra range (a memset) shifting every later
    // step onto its neighbour's counters.
    #[test]
    fn steps_take_ranges_by_position_when_exact_else_by_name() {
        let r = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let steps = [step(0, "ka"), step(2, "kb"), step(3, "ka")];
        assert_eq!(
            ranges_of_steps(&r(&["x", "y", "z"]), &steps),
            vec![Some(0), Some(1), Some(2)]
        );
        assert_eq!(
            ranges_of_steps(&r(&["ka", "memset", "kb", "ka"]), &steps),
            vec![Some(0), Some(2), Some(3)]
        );
        // A demangled range name matches too.
        let named = [KernelStep {
            index: 0,
            mangled: "_Z2kav",
            demangled: "ka()",
        }];
        assert_eq!(
            ranges_of_steps(&r(&["memset", "ka()"]), &named),
            vec![Some(1)]
        );
        assert_eq!(
            ranges_of_steps(&r(&["ka"]), &steps),
            vec![Some(0), None, None]
        );
    }

    fn grouped(assigned: &[Option<usize>]) -> Vec<StepMetrics> {
        let steps = [step(0, "ka"), step(2, "kb"), step(3, "ka")];
        let mut values = |r: usize| -> Result<Vec<MetricValue>, ()> {
            Ok(vec![
                value("dram__bytes_read.sum", 100.0 * (r + 1) as f64),
                value("sm__throughput.avg.pct_of_peak_sustained_elapsed", 50.0),
                value("sm__cycles_elapsed.avg", 10.0),
            ])
        };
        step_metrics(&steps, assigned, &mut values).expect("values")
    }

    // Catches: counters put on the wrong step index (ops between kernels count), or a step
    // without a range given another's counters.
    #[test]
    fn each_kernel_step_gets_its_ranges_counters() {
        let g = grouped(&[Some(0), Some(2), None]);
        let idx: Vec<_> = g.iter().map(|s| (s.index, s.kernel.as_str())).collect();
        assert_eq!(idx, vec![(0, "ka"), (2, "kb"), (3, "ka")]);
        assert_eq!(g[0].metrics[0].value, 100.0);
        assert_eq!(g[1].metrics[0].value, 300.0);
        assert!(g[2].metrics.is_empty());
        let failing = step_metrics(&[step(0, "ka")], &[Some(0)], &mut |_| Err("bad"));
        assert_eq!(failing, Err("bad"));
    }

    // Catches: a percentage summed over steps, totals in another order than asked, or a sum
    // over some steps passed off as the range's.
    #[test]
    fn totals_sum_the_additive_metrics_over_every_kernel_step() {
        let t = range_totals(&grouped(&[Some(0), Some(1), Some(2)]));
        let named: Vec<_> = t.iter().map(|m| (m.name.as_str(), m.value)).collect();
        assert_eq!(
            named,
            vec![
                ("dram__bytes_read.sum", 600.0),
                ("sm__cycles_elapsed.avg", 30.0)
            ]
        );
        assert_eq!(t[0].unit, "u");
        assert!(range_totals(&grouped(&[Some(0), Some(1), None])).is_empty());
        assert!(range_totals(&[]).is_empty());
    }

    #[test]
    fn there_is_room_for_a_range_per_step() {
        assert_eq!(max_ranges(0), 1);
        assert_eq!(max_ranges(7), 7);
    }
}
