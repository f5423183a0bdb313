//! A capture's time in two runs: the ratio of the medians, how much of it the runs' own
//! spread explains, and which side of the threshold it falls.

use serde::Serialize;

/// Where a time change falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeClass {
    /// Slower by more than the threshold and more than the noise: a regression.
    Slower,
    /// Faster by more than the threshold and more than the noise.
    Faster,
    /// The change is no larger than the two runs' combined spread.
    WithinNoise,
    /// Beyond the noise but within the threshold.
    WithinThreshold,
    /// A run timed it with a single pass (`--no-timing`, a one-pass replay): one cold run
    /// against another says nothing a threshold could judge, so it never counts as a change.
    SinglePass,
}

/// NEW / BASE for one capture.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimeChange {
    /// new median / base median.
    pub ratio: f64,
    /// (ratio - 1) in percent: positive is slower.
    pub change_pct: f64,
    /// The combined spread of both runs in percent, when either run measured one.
    pub noise_pct: Option<f64>,
    pub class: TimeClass,
}

/// A median that can be divided by: finite and positive (a record may hold 0 or worse from a
/// writer that had no timing).
fn usable(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite() && *v > 0.0)
}

/// A spread that means something: finite and not negative.
fn usable_spread(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite() && *v >= 0.0)
}

/// new / base of two medians, when both are usable.
pub fn time_ratio(base_us: Option<f64>, new_us: Option<f64>) -> Option<f64> {
    Some(usable(new_us)? / usable(base_us)?)
}

/// The noise of a ratio of two medians, from each run's pass spread ((max - min) / median, in
/// percent): the two runs are independent, so their relative spreads add in quadrature. A run
/// without a spread (one pass) adds nothing; None when neither has one.
pub fn combined_noise_pct(base_spread: Option<f64>, new_spread: Option<f64>) -> Option<f64> {
    let (b, n) = (usable_spread(base_spread), usable_spread(new_spread));
    if b.is_none() && n.is_none() {
        return None;
    }
    let (b, n) = (b.unwrap_or(0.0), n.unwrap_or(0.0));
    Some((b * b + n * n).sqrt())
}

/// Where a change of `change_pct` falls, given its noise and the threshold (both percent).
pub fn classify(change_pct: f64, noise_pct: Option<f64>, threshold_pct: f64) -> TimeClass {
    if noise_pct.is_some_and(|n| change_pct.abs() <= n) {
        TimeClass::WithinNoise
    } else if change_pct > threshold_pct {
        TimeClass::Slower
    } else if change_pct < -threshold_pct {
        TimeClass::Faster
    } else {
        TimeClass::WithinThreshold
    }
}

/// A run's timing of one capture: its median, its pass spread, its number of timed passes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timed {
    pub median_us: Option<f64>,
    pub spread_pct: Option<f64>,
    /// None in records that do not say (older ones): taken as a median of several.
    pub passes: Option<u32>,
}

/// The time change of one capture, when both runs timed it; `SinglePass` when either timed
/// it once only.
pub fn time_change(base: Timed, new: Timed, threshold_pct: f64) -> Option<TimeChange> {
    let ratio = time_ratio(base.median_us, new.median_us)?;
    let change_pct = (ratio - 1.0) * 100.0;
    let noise_pct = combined_noise_pct(base.spread_pct, new.spread_pct);
    let single = [base.passes, new.passes]
        .iter()
        .any(|p| p.is_some_and(|n| n < 2));
    Some(TimeChange {
        ratio,
        change_pct,
        noise_pct,
        class: match single {
            true => TimeClass::SinglePass,
            false => classify(change_pct, noise_pct, threshold_pct),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn the_ratio_is_new_over_base_and_needs_two_usable_medians() {
        assert_eq!(time_ratio(Some(10.0), Some(12.5)), Some(1.25));
        assert_eq!(time_ratio(None, Some(1.0)), None);
        assert_eq!(time_ratio(Some(1.0), None), None);
        assert_eq!(time_ratio(Some(0.0), Some(1.0)), None);
        assert_eq!(time_ratio(Some(1.0), Some(f64::NAN)), None);
        assert_eq!(time_ratio(Some(-1.0), Some(1.0)), None);
    }

    #[test]
    fn spreads_add_in_quadrature_and_a_missing_one_adds_nothing() {
        let n = combined_noise_pct(Some(3.0), Some(4.0)).unwrap();
        assert!(close(n, 5.0));
        assert_eq!(combined_noise_pct(None, Some(2.0)), Some(2.0));
        assert_eq!(
            combined_noise_pct(Some(f64::INFINITY), Some(2.0)),
            Some(2.0)
        );
        assert_eq!(combined_noise_pct(None, None), None);
        assert_eq!(combined_noise_pct(Some(-1.0), None), None);
    }

    #[test]
    fn noise_comes_before_the_threshold() {
        assert_eq!(classify(8.0, Some(10.0), 5.0), TimeClass::WithinNoise);
        assert_eq!(classify(-8.0, Some(8.0), 5.0), TimeClass::WithinNoise);
        assert_eq!(classify(8.0, Some(2.0), 5.0), TimeClass::Slower);
        assert_eq!(classify(8.0, None, 5.0), TimeClass::Slower);
        assert_eq!(classify(-8.0, None, 5.0), TimeClass::Faster);
        assert_eq!(classify(3.0, Some(1.0), 5.0), TimeClass::WithinThreshold);
        // Exactly the threshold is not beyond it.
        assert_eq!(classify(5.0, None, 5.0), TimeClass::WithinThreshold);
        assert_eq!(classify(-5.0, None, 5.0), TimeClass::WithinThreshold);
        assert_eq!(classify(0.1, None, 0.0), TimeClass::Slower);
    }

    fn run(median: Option<f64>, spread: Option<f64>, passes: Option<u32>) -> Timed {
        Timed {
            median_us: median,
            spread_pct: spread,
            passes,
        }
    }

    #[test]
    fn a_time_change_carries_ratio_change_and_noise() {
        let (b, n) = (
            run(Some(10.0), Some(3.0), Some(8)),
            run(Some(12.0), Some(4.0), None),
        );
        let t = time_change(b, n, 5.0).unwrap();
        assert!(close(t.ratio, 1.2) && close(t.change_pct, 20.0));
        assert!(close(t.noise_pct.unwrap(), 5.0));
        assert_eq!(t.class, TimeClass::Slower);
        assert_eq!(time_change(run(None, None, None), n, 5.0), None);
    }

    // Catches: two `--no-timing` sweeps (one cold pass each) gating CI on a "regression" that
    // is one run against another; or a median of several taken for a single pass.
    #[test]
    fn a_single_pass_on_either_side_is_not_judged() {
        let several = run(Some(10.0), Some(1.0), Some(8));
        let once = run(Some(20.0), None, Some(1));
        for (b, n) in [(several, once), (once, several), (once, once)] {
            let t = time_change(b, n, 5.0).expect("both timed");
            assert_eq!(t.class, TimeClass::SinglePass);
        }
        let t = time_change(several, run(Some(20.0), Some(1.0), Some(2)), 5.0).unwrap();
        assert_eq!(t.class, TimeClass::Slower);
    }
}
