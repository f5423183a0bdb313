//! The comparison of two runs: every pair with its time and verdict change, the captures in
//! one run only, the summary figures, and whether CI should fail.

use std::collections::BTreeSet;

use kreplay_protocol::variant::geomean;
use serde::Serialize;

use super::pairing::{pair, Pair, PairedBy};
use super::records::{RunRecord, Verdict};
use super::timing::{time_change, TimeChange, TimeClass, Timed};
use super::verdicts::{verdict_change, VerdictChange};

/// What one run was: its file, its size, and the device and driver its records name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSide {
    /// The JSON-lines file as the user named it.
    pub name: String,
    pub records: usize,
    /// The one device name the records give, `mixed (A, B)` for several, `unknown` for none.
    pub device: String,
    pub driver: String,
    /// Every distinct device name and driver, sorted.
    pub devices: Vec<String>,
    pub drivers: Vec<String>,
}

/// One capture in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapturePair {
    pub base_file: String,
    pub new_file: String,
    pub kernel: Option<String>,
    pub paired_by: PairedBy,
    pub base_verdict: Verdict,
    pub new_verdict: Verdict,
    pub verdict_change: VerdictChange,
    pub base_median_us: Option<f64>,
    pub new_median_us: Option<f64>,
    /// None unless both runs timed it.
    pub time: Option<TimeChange>,
}

/// A capture in one run only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unpaired {
    pub file: String,
    pub kernel: Option<String>,
    pub verdict: Verdict,
    pub median_us: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Summary {
    pub paired: usize,
    pub by_sha256: usize,
    pub by_file: usize,
    /// Paired by path although both SHA-256s are known and differ.
    pub by_file_sha_differs: usize,
    pub added: usize,
    pub removed: usize,
    /// Lines left out because a later line of the same run holds the same capture.
    pub superseded_base: usize,
    pub superseded_new: usize,
    /// Pairs timed in both runs: the geometric mean is over these.
    pub timed: usize,
    pub geomean_ratio: Option<f64>,
    pub slower: usize,
    pub faster: usize,
    pub within_noise: usize,
    pub within_threshold: usize,
    /// Timed with a single pass in either run: not judged.
    pub single_pass: usize,
    pub correctness_regressions: usize,
    pub correctness_improvements: usize,
    pub verdicts_changed: usize,
}

/// `kreplay compare BASE NEW`, as text, CSV and JSON print it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunsComparison {
    pub base: RunSide,
    pub new: RunSide,
    pub threshold_pct: f64,
    pub summary: Summary,
    /// In the base run's order.
    pub pairs: Vec<CapturePair>,
    /// Indices into `pairs`: the time regressions, worst first.
    pub slower_worst_first: Vec<usize>,
    /// Indices into `pairs`: the time improvements, best first.
    pub faster_best_first: Vec<usize>,
    pub added: Vec<Unpaired>,
    pub removed: Vec<Unpaired>,
}

/// The one value of `values`, `mixed (A, B)` for several, `unknown` for none.
pub fn one_or_mixed(values: &[String]) -> String {
    match values {
        [] => "unknown".to_string(),
        [one] => one.clone(),
        many => format!("mixed ({})", many.join(", ")),
    }
}

fn distinct<'a>(values: impl Iterator<Item = Option<&'a String>>) -> Vec<String> {
    let set: BTreeSet<&String> = values.flatten().collect();
    set.into_iter().cloned().collect()
}

pub fn run_side(name: &str, run: &[RunRecord]) -> RunSide {
    let devices = distinct(run.iter().map(|r| r.device.as_ref()));
    let drivers = distinct(run.iter().map(|r| r.driver.as_ref()));
    RunSide {
        name: name.to_string(),
        records: run.len(),
        device: one_or_mixed(&devices),
        driver: one_or_mixed(&drivers),
        devices,
        drivers,
    }
}

fn capture_pair(b: &RunRecord, n: &RunRecord, by: PairedBy, threshold_pct: f64) -> CapturePair {
    CapturePair {
        base_file: b.file.clone(),
        new_file: n.file.clone(),
        kernel: n.kernel.clone().or_else(|| b.kernel.clone()),
        paired_by: by,
        base_verdict: b.verdict,
        new_verdict: n.verdict,
        verdict_change: verdict_change(b.verdict, n.verdict),
        base_median_us: b.median_us,
        new_median_us: n.median_us,
        time: time_change(timed(b), timed(n), threshold_pct),
    }
}

fn timed(r: &RunRecord) -> Timed {
    Timed {
        median_us: r.median_us,
        spread_pct: r.spread_pct,
        passes: r.passes,
    }
}

fn unpaired(r: &RunRecord) -> Unpaired {
    Unpaired {
        file: r.file.clone(),
        kernel: r.kernel.clone(),
        verdict: r.verdict,
        median_us: r.median_us,
    }
}

/// Indices of the pairs in `class`, ordered by their change: largest first when
/// `largest_first`, smallest first otherwise (ties keep the base run's order).
pub fn ranked(pairs: &[CapturePair], class: TimeClass, largest_first: bool) -> Vec<usize> {
    let change = |i: usize| pairs[i].time.map_or(0.0, |t| t.change_pct);
    let mut idx: Vec<usize> = (0..pairs.len())
        .filter(|&i| pairs[i].time.is_some_and(|t| t.class == class))
        .collect();
    idx.sort_by(|&a, &b| {
        let order = change(a).total_cmp(&change(b));
        if largest_first {
            order.reverse()
        } else {
            order
        }
    });
    idx
}

fn summarise(pairs: &[CapturePair], paired_by: &[Pair]) -> Summary {
    let by = |k: PairedBy| paired_by.iter().filter(|p| p.by == k).count();
    let class = |c: TimeClass| {
        pairs
            .iter()
            .filter(|p| p.time.is_some_and(|t| t.class == c))
            .count()
    };
    let change = |c: VerdictChange| pairs.iter().filter(|p| p.verdict_change == c).count();
    let timed_ratios: Vec<f64> = pairs
        .iter()
        .filter_map(|p| p.time.map(|t| t.ratio))
        .collect();
    Summary {
        paired: pairs.len(),
        by_sha256: by(PairedBy::Sha256),
        by_file: by(PairedBy::File),
        by_file_sha_differs: by(PairedBy::FileShaDiffers),
        timed: pairs.iter().filter(|p| p.time.is_some()).count(),
        geomean_ratio: geomean(&timed_ratios),
        slower: class(TimeClass::Slower),
        faster: class(TimeClass::Faster),
        within_noise: class(TimeClass::WithinNoise),
        within_threshold: class(TimeClass::WithinThreshold),
        single_pass: class(TimeClass::SinglePass),
        correctness_regressions: change(VerdictChange::Regression),
        correctness_improvements: change(VerdictChange::Improvement),
        verdicts_changed: change(VerdictChange::Changed),
        ..Summary::default()
    }
}

/// Compares run `new` with run `base` (their records as read, their names as the user gave
/// them); a time change counts when beyond `threshold_pct` percent and beyond the noise.
pub fn compare_runs(
    (base_name, base): (&str, &[RunRecord]),
    (new_name, new): (&str, &[RunRecord]),
    threshold_pct: f64,
) -> RunsComparison {
    let pairing = pair(base, new);
    let pairs: Vec<CapturePair> = pairing
        .pairs
        .iter()
        .map(|p| capture_pair(&base[p.base], &new[p.new], p.by, threshold_pct))
        .collect();
    let added: Vec<Unpaired> = pairing.added.iter().map(|&i| unpaired(&new[i])).collect();
    let removed: Vec<Unpaired> = pairing
        .removed
        .iter()
        .map(|&i| unpaired(&base[i]))
        .collect();
    let summary = Summary {
        added: added.len(),
        removed: removed.len(),
        superseded_base: pairing.superseded.0,
        superseded_new: pairing.superseded.1,
        ..summarise(&pairs, &pairing.pairs)
    };
    RunsComparison {
        base: run_side(base_name, base),
        new: run_side(new_name, new),
        threshold_pct,
        summary,
        slower_worst_first: ranked(&pairs, TimeClass::Slower, true),
        faster_best_first: ranked(&pairs, TimeClass::Faster, false),
        pairs,
        added,
        removed,
    }
}

impl RunsComparison {
    /// Whether CI should fail: a time regression beyond the threshold and the noise, or a
    /// capture that passed and now fails.
    pub fn regressed(&self) -> bool {
        self.summary.slower > 0 || self.summary.correctness_regressions > 0
    }

    /// `kreplay compare`'s exit status for this result: 1 regressed, 0 not (2, for errors,
    /// is the caller's).
    pub fn exit_status(&self) -> u8 {
        u8::from(self.regressed())
    }

    /// The pairs whose verdict changed, in the base run's order: regressions first, then
    /// improvements, then other changes.
    pub fn verdict_changes(&self) -> Vec<&CapturePair> {
        let order = [
            VerdictChange::Regression,
            VerdictChange::Improvement,
            VerdictChange::Changed,
        ];
        order
            .iter()
            .flat_map(|c| self.pairs.iter().filter(move |p| p.verdict_change == *c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(file: &str, verdict: Verdict, median: Option<f64>, spread: Option<f64>) -> RunRecord {
        RunRecord {
            file: file.into(),
            key: None,
            sha256: Some(format!("sha-{file}")),
            kernel: Some(format!("k_{file}")),
            mangled: None,
            device: Some("NVIDIA H200".into()),
            device_uuid: None,
            driver: Some("580.65".into()),
            verdict,
            median_us: median,
            first_us: None,
            in_app_us: None,
            passes: Some(8),
            spread_pct: spread,
            error: None,
            wall_s: 1.0,
        }
    }

    fn matched(file: &str, median: f64) -> RunRecord {
        rec(file, Verdict::Matched, Some(median), Some(1.0))
    }

    fn compare(base: &[RunRecord], new: &[RunRecord]) -> RunsComparison {
        compare_runs(("base.jsonl", base), ("new.jsonl", new), 5.0)
    }

    #[test]
    fn changes_within_threshold_or_noise_pass() {
        let base = [
            matched("a", 10.0),
            rec("b", Verdict::Matched, Some(10.0), Some(20.0)),
        ];
        let new = [
            matched("a", 10.3),
            rec("b", Verdict::Matched, Some(11.5), Some(5.0)),
        ];
        let c = compare(&base, &new);
        assert_eq!(c.summary.within_threshold, 1);
        assert_eq!(c.summary.within_noise, 1);
        assert!(!c.regressed());
        assert_eq!(c.exit_status(), 0);
    }

    #[test]
    fn a_time_regression_beyond_threshold_and_noise_fails() {
        let c = compare(&[matched("a", 10.0)], &[matched("a", 11.0)]);
        assert_eq!(c.summary.slower, 1);
        assert_eq!(c.exit_status(), 1);
    }

    // Catches: two `--no-timing` sweeps (one pass per capture, no spread) failing CI on one
    // cold pass against another, or the single-pass captures dropped from the summary.
    #[test]
    fn single_pass_sweeps_are_compared_for_verdicts_only() {
        let once = |file: &str, median: f64| {
            let mut r = rec(file, Verdict::Matched, Some(median), None);
            r.passes = Some(1);
            r
        };
        let c = compare(&[once("a", 10.0)], &[once("a", 14.0)]);
        assert_eq!((c.summary.slower, c.summary.single_pass), (0, 1));
        assert_eq!(c.exit_status(), 0);
        let mut broke = once("a", 10.0);
        broke.verdict = Verdict::Mismatch;
        let c = compare(&[once("a", 10.0)], &[broke]);
        assert_eq!(c.exit_status(), 1, "a verdict regression still fails");
    }

    #[test]
    fn a_correctness_regression_fails_even_when_faster() {
        let base = [matched("a", 10.0)];
        let new = [rec("a", Verdict::Mismatch, Some(5.0), Some(1.0))];
        let c = compare(&base, &new);
        assert_eq!(c.summary.correctness_regressions, 1);
        assert_eq!(c.summary.faster, 1);
        assert_eq!(c.exit_status(), 1);
    }

    #[test]
    fn improvements_and_captures_in_one_run_only_pass() {
        let base = [
            rec("a", Verdict::Timeout, None, None),
            matched("b", 10.0),
            matched("gone", 1.0),
        ];
        let new = [matched("a", 3.0), matched("b", 5.0), matched("fresh", 1.0)];
        let c = compare(&base, &new);
        assert_eq!(c.summary.correctness_improvements, 1);
        assert_eq!(c.summary.faster, 1);
        assert_eq!((c.summary.added, c.summary.removed), (1, 1));
        assert_eq!(c.added[0].file, "fresh");
        assert_eq!(c.removed[0].file, "gone");
        assert_eq!(c.exit_status(), 0);
    }

    #[test]
    fn the_geomean_is_over_pairs_timed_in_both_runs() {
        let base = [matched("a", 10.0), matched("b", 10.0), matched("c", 10.0)];
        let new = [
            matched("a", 20.0),
            matched("b", 5.0),
            rec("c", Verdict::Error, None, None),
        ];
        let c = compare(&base, &new);
        assert_eq!(c.summary.timed, 2);
        let g = c.summary.geomean_ratio.unwrap();
        assert!((g - 1.0).abs() < 1e-9, "{g}");
        assert_eq!(compare(&[], &[]).summary.geomean_ratio, None);
    }

    #[test]
    fn regressions_rank_worst_first_and_improvements_best_first() {
        let base: Vec<RunRecord> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|f| matched(f, 10.0))
            .collect();
        let new = [
            matched("a", 12.0),
            matched("b", 8.0),
            matched("c", 15.0),
            matched("d", 5.0),
            matched("e", 10.0),
        ];
        let c = compare(&base, &new);
        assert_eq!(c.slower_worst_first, [2, 0]);
        assert_eq!(c.faster_best_first, [3, 1]);
    }

    #[test]
    fn verdict_changes_list_regressions_first() {
        let base = [
            rec("a", Verdict::Mismatch, None, None),
            matched("b", 1.0),
            rec("c", Verdict::Mismatch, None, None),
        ];
        let new = [
            matched("a", 1.0),
            rec("b", Verdict::Timeout, None, None),
            rec("c", Verdict::Error, None, None),
        ];
        let c = compare(&base, &new);
        let files: Vec<&str> = c
            .verdict_changes()
            .iter()
            .map(|p| p.base_file.as_str())
            .collect();
        assert_eq!(files, ["b", "a", "c"]);
    }

    #[test]
    fn each_run_names_its_device_and_driver_or_says_mixed() {
        let mut other = matched("b", 1.0);
        other.device = Some("NVIDIA H100".into());
        let mut no_driver = matched("c", 1.0);
        no_driver.driver = None;
        let side = run_side("r", &[matched("a", 1.0), other, no_driver]);
        assert_eq!(side.device, "mixed (NVIDIA H100, NVIDIA H200)");
        assert_eq!(side.driver, "580.65");
        assert_eq!(side.records, 3);
        let mut bare = matched("a", 1.0);
        bare.device = None;
        assert_eq!(run_side("r", &[bare]).device, "unknown");
    }

    #[test]
    fn the_summary_counts_how_pairs_were_made() {
        let mut no_hash = matched("b", 1.0);
        no_hash.sha256 = None;
        let mut rerecorded = matched("c", 1.0);
        rerecorded.sha256 = Some("other".into());
        let base = [matched("a", 1.0), matched("b", 1.0), matched("c", 1.0)];
        let c = compare(&base, &[matched("a", 1.0), no_hash, rerecorded]);
        let s = &c.summary;
        assert_eq!((s.by_sha256, s.by_file, s.by_file_sha_differs), (1, 1, 1));
    }
}
