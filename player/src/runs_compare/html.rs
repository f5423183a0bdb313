//! `kreplay compare --html`: the comparison as one self-contained page: the summary compare's
//! text prints, the per-capture time ratio sorted with its noise band and the threshold, the
//! regressions and verdict changes, and a row per paired capture.

use maud::{html, Markup};

use super::report::{CapturePair, RunSide, RunsComparison, Unpaired};
use super::timing::TimeClass;
use super::verdicts::VerdictChange;
use crate::html_report::{
    change_pct, figure, noise_pct, page, ratio, summary_table, us, Band, RefLine, Series,
    SortedChart, YScale,
};
use crate::units::count;

const SLOWER_RGB: (u8, u8, u8) = (200, 40, 40);
const FASTER_RGB: (u8, u8, u8) = (30, 130, 60);
const UNCHANGED_RGB: (u8, u8, u8) = (95, 110, 130);
const THRESHOLD_RGB: (u8, u8, u8) = (150, 95, 20);

/// The whole report as an HTML document.
pub fn comparison_html(r: &RunsComparison) -> String {
    let lead = format!(
        "{} (new) against {} (base); a change counts beyond ±{} % and beyond the two runs' pass spread (noise).",
        r.new.name, r.base.name, r.threshold_pct
    );
    let caption = "Each point is one capture timed in both runs, sorted by its ratio of median \
                   times NEW/BASE (above 1: slower). The shaded band is that capture's noise \
                   (the two runs' pass spreads added in quadrature) around 1; the dashed lines \
                   are the threshold.";
    let body = html! {
        h2 { "Summary" }
        (summary(r))
        h2 { "Time ratio per capture" }
        (figure(&ratio_chart(r), caption))
        h2 { "Regressions and verdict changes" }
        (changes_table(r))
        h2 { "Every paired capture (slowest change first)" }
        (pairs_table(r))
        (unpaired_table("Added: in the new run only", &r.added))
        (unpaired_table("Removed: in the base run only", &r.removed))
    };
    page("kreplay compare", &lead, body)
}

fn run_line(s: &RunSide) -> String {
    format!(
        "{}: {} records, device {}, driver {}",
        s.name, s.records, s.device, s.driver
    )
}

fn result(r: &RunsComparison) -> Markup {
    let status = r.exit_status();
    html! {
        @if r.regressed() {
            span.bad { "REGRESSED" } " (exit " (status) ")"
        } @else {
            span.good { "ok" } " (exit " (status) ")"
        }
    }
}

fn summary(r: &RunsComparison) -> Markup {
    let s = &r.summary;
    let geomean = match s.geomean_ratio {
        Some(g) => format!(
            "{} NEW/BASE over {} timed in both",
            ratio(Some(g)),
            count(s.timed, "capture", "captures")
        ),
        None => "no capture timed in both runs".to_string(),
    };
    let rows = [
        ("base run", html! { (run_line(&r.base)) }),
        ("new run", html! { (run_line(&r.new)) }),
        (
            "captures paired",
            html! {
                (s.paired) " (" (s.by_sha256) " by SHA-256, " (s.by_file + s.by_file_sha_differs)
                " by file path); " (s.added) " added, " (s.removed) " removed"
            },
        ),
        ("geometric-mean ratio", html! { (geomean) }),
        (
            "time changes",
            html! {
                (s.slower) " slower and " (s.faster) " faster beyond ±" (r.threshold_pct)
                " % and the noise; " (s.within_noise) " within noise, " (s.within_threshold)
                " within the threshold; " (s.single_pass) " timed with one pass in a run (not judged)"
            },
        ),
        (
            "verdict changes",
            html! {
                (count(s.correctness_regressions, "correctness regression", "correctness regressions"))
                ", " (count(s.correctness_improvements, "improvement", "improvements"))
                ", " (count(s.verdicts_changed, "other change", "other changes"))
            },
        ),
        ("result", result(r)),
    ];
    summary_table(&rows)
}

fn class_word(c: TimeClass) -> &'static str {
    match c {
        TimeClass::Slower => "slower",
        TimeClass::Faster => "faster",
        TimeClass::WithinNoise => "within noise",
        TimeClass::WithinThreshold => "within threshold",
        TimeClass::SinglePass => "one pass: not judged",
    }
}

/// The chart: the timed pairs sorted by ratio, a series per kind of change, each capture's
/// noise as a band around 1, and the threshold either side.
pub fn ratio_chart(r: &RunsComparison) -> SortedChart {
    let mut timed: Vec<_> = r.pairs.iter().filter_map(|p| p.time).collect();
    timed.sort_by(|a, b| a.ratio.total_cmp(&b.ratio));
    let series = |label: &str, rgb, keep: &dyn Fn(TimeClass) -> bool| Series {
        label: label.to_string(),
        rgb,
        points: (timed.iter().enumerate())
            .filter(|(_, t)| keep(t.class))
            .map(|(i, t)| (i, t.ratio))
            .collect(),
    };
    let threshold = format!("±{} % threshold", r.threshold_pct);
    let line = |y| RefLine {
        y,
        label: threshold.clone(),
        rgb: THRESHOLD_RGB,
    };
    SortedChart {
        caption: "Time ratio NEW/BASE per capture, sorted".into(),
        x_label: "captures timed in both runs, sorted by ratio (rank)".into(),
        y_label: "time ratio NEW/BASE (×; 1 = same time)".into(),
        count: timed.len(),
        series: vec![
            series("slower (regression)", SLOWER_RGB, &|c| {
                c == TimeClass::Slower
            }),
            series("faster", FASTER_RGB, &|c| c == TimeClass::Faster),
            series("within noise or threshold", UNCHANGED_RGB, &|c| {
                matches!(
                    c,
                    TimeClass::WithinNoise | TimeClass::WithinThreshold | TimeClass::SinglePass
                )
            }),
        ],
        band: Some(Band {
            label: "noise (combined pass spread)".into(),
            spans: (timed.iter().enumerate())
                .filter_map(|(i, t)| t.noise_pct.map(|n| (i, 1.0 - n / 100.0, 1.0 + n / 100.0)))
                .collect(),
        }),
        lines: vec![
            line(1.0 + r.threshold_pct / 100.0),
            line(1.0 - r.threshold_pct / 100.0),
        ],
        scale: YScale::Linear,
    }
}

fn is_bad(p: &CapturePair) -> bool {
    p.verdict_change == VerdictChange::Regression
        || p.time.is_some_and(|t| t.class == TimeClass::Slower)
}

fn is_good(p: &CapturePair) -> bool {
    p.verdict_change == VerdictChange::Improvement
        || p.time.is_some_and(|t| t.class == TimeClass::Faster)
}

fn file_cell(p: &CapturePair) -> Markup {
    html! {
        td.file {
            (p.base_file)
            @if p.new_file != p.base_file { " (new: " (p.new_file) ")" }
        }
    }
}

const PAIR_HEADER: [&str; 10] = [
    "kernel",
    "file",
    "base µs",
    "new µs",
    "ratio",
    "change",
    "noise",
    "time",
    "base verdict",
    "new verdict",
];

fn header(first: Option<&str>, columns: &[&str]) -> Markup {
    let numeric = |c: &str| c.ends_with("µs") || matches!(c, "ratio" | "change" | "noise");
    html! {
        tr {
            @if let Some(f) = first { th { (f) } }
            @for c in columns {
                @if numeric(c) { th.num { (c) } } @else { th { (c) } }
            }
        }
    }
}

/// One pair's row; `what` first when the table says why the row is there.
fn pair_row(p: &CapturePair, what: Option<&str>) -> Markup {
    let t = p.time;
    let tone = if is_bad(p) {
        "pair bad"
    } else if is_good(p) {
        "pair good"
    } else {
        "pair"
    };
    html! {
        tr class=(tone) {
            @if let Some(w) = what { td { (w) } }
            td.name { (p.kernel.as_deref().unwrap_or("–")) }
            (file_cell(p))
            td.num { (us(p.base_median_us)) }
            td.num { (us(p.new_median_us)) }
            td.num { (ratio(t.map(|t| t.ratio))) }
            td.num { (change_pct(t.map(|t| t.change_pct))) }
            td.num { (noise_pct(t.and_then(|t| t.noise_pct))) }
            td { (t.map_or("not timed in both", |t| class_word(t.class))) }
            td { (p.base_verdict.name()) }
            td { (p.new_verdict.name()) }
        }
    }
}

fn change_word(c: VerdictChange) -> &'static str {
    match c {
        VerdictChange::Regression => "correctness regression",
        VerdictChange::Improvement => "verdict improvement",
        VerdictChange::Changed | VerdictChange::Same => "verdict changed",
    }
}

fn changes_table(r: &RunsComparison) -> Markup {
    let slower = r.slower_worst_first.iter().filter_map(|&i| r.pairs.get(i));
    let changes = r.verdict_changes();
    if r.slower_worst_first.is_empty() && changes.is_empty() {
        return html! { p { "No time regression beyond the threshold and no verdict change." } };
    }
    html! {
        table #changes {
            (header(Some("what"), &PAIR_HEADER))
            @for p in slower { (pair_row(p, Some("time regression"))) }
            @for p in changes { (pair_row(p, Some(change_word(p.verdict_change)))) }
        }
    }
}

/// Every pair, the largest time change first; pairs not timed in both runs last.
fn pairs_table(r: &RunsComparison) -> Markup {
    let mut order: Vec<&CapturePair> = r.pairs.iter().collect();
    let change = |p: &CapturePair| p.time.map_or(f64::NEG_INFINITY, |t| t.change_pct);
    order.sort_by(|a, b| change(b).total_cmp(&change(a)));
    html! {
        @if order.is_empty() {
            p { "No capture is in both runs." }
        } @else {
            table #pairs {
                (header(None, &PAIR_HEADER))
                @for p in order { (pair_row(p, None)) }
            }
        }
    }
}

fn unpaired_table(title: &str, captures: &[Unpaired]) -> Markup {
    html! {
        @if !captures.is_empty() {
            h2 { (title) }
            table {
                (header(None, &["kernel", "file", "verdict", "median µs"]))
                @for u in captures {
                    tr {
                        td.name { (u.kernel.as_deref().unwrap_or("–")) }
                        td.file { (u.file) }
                        td { (u.verdict.name()) }
                        td.num { (us(u.median_us)) }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs_compare::{compare_runs, parse_runs};

    const TEMPLATE: &str = "void cutlass::Kernel<Gemm<float, 128>>(Params&)";

    fn line(file: &str, kernel: &str, verdict: &str, median: f64, spread: f64) -> String {
        serde_json::json!({
            "file": file, "sha256": format!("sha-{file}"), "kernel": kernel,
            "device": "NVIDIA H200", "driver": "580.65.06", "verdict": verdict,
            "median_us": median, "spread_pct": spread,
        })
        .to_string()
    }

    fn report() -> RunsComparison {
        let base = [
            line("a.krr", TEMPLATE, "matched", 100.0, 1.0),
            line("b.krr", "softmax", "matched", 20.0, 1.0),
            line("c.krr", "norm", "matched", 50.0, 1.0),
            line("gone.krr", "gone_kernel", "matched", 5.0, 1.0),
        ]
        .join("\n");
        let new = [
            line("a.krr", TEMPLATE, "matched", 130.0, 1.0),
            line("b.krr", "softmax", "mismatch", 20.1, 1.0),
            line("c.krr", "norm", "matched", 40.0, 1.0),
        ]
        .join("\n");
        let base = parse_runs("base <1>.jsonl", &base).expect("base");
        let new = parse_runs("new.jsonl", &new).expect("new");
        compare_runs(("base <1>.jsonl", &base), ("new.jsonl", &new), 5.0)
    }

    fn assert_self_contained(html: &str) {
        for reference in [
            "http://", "https://", "src=", "href=", "<script", "<link", "NaN",
        ] {
            assert!(!html.contains(reference), "{reference} in the report");
        }
    }

    #[test]
    fn the_report_holds_the_summary_figures_and_the_run_names() {
        let r = report();
        let html = comparison_html(&r);
        let geomean = ratio(r.summary.geomean_ratio);
        assert!(
            html.contains(&format!("{geomean} NEW/BASE over 3 captures")),
            "{html}"
        );
        assert!(html.contains("3 (3 by SHA-256, 0 by file path); 0 added, 1 removed"));
        assert!(html.contains("1 slower and 1 faster beyond ±5 %"));
        assert!(
            html.contains("1 correctness regression, 0 improvements, 0 other changes"),
            "{html}"
        );
        assert!(html.contains("device NVIDIA H200, driver 580.65.06"));
        assert!(html.contains("REGRESSED") && html.contains("(exit 1)"));
        assert!(html.contains("base &lt;1&gt;.jsonl") && !html.contains("base <1>"));
        assert!(
            html.contains("gone_kernel"),
            "the removed capture is listed"
        );
        assert_self_contained(&html);
    }

    #[test]
    fn one_row_per_paired_capture_and_regressions_in_their_own_table() {
        let html = comparison_html(&report());
        let (_, every) = html
            .split_once("<table id=\"pairs\">")
            .expect("pairs table");
        let every = &every[..every.find("</table>").expect("end")];
        assert_eq!(every.matches("<tr class=\"pair").count(), 3);
        let (_, changes) = html.split_once("<table id=\"changes\">").expect("changes");
        let changes = &changes[..changes.find("</table>").expect("end")];
        assert!(changes.contains("time regression") && changes.contains("130.00"));
        assert!(changes.contains("correctness regression") && changes.contains("mismatch"));
        assert!(
            !changes.contains(">norm<"),
            "an improvement is not a regression"
        );
    }

    // Catches: a kernel name put into the page unescaped (C++ templates hold `<`, `>`, `&`).
    #[test]
    fn kernel_names_are_escaped() {
        let html = comparison_html(&report());
        assert!(html.contains("cutlass::Kernel&lt;Gemm&lt;float, 128&gt;&gt;(Params&amp;)"));
        assert!(!html.contains("Kernel<Gemm"));
    }

    #[test]
    fn the_chart_sorts_the_ratios_and_bands_each_by_its_noise() {
        let c = ratio_chart(&report());
        assert_eq!(c.count, 3);
        let all: Vec<(usize, f64)> = c.series.iter().flat_map(|s| s.points.clone()).collect();
        let mut ranks: Vec<usize> = all.iter().map(|p| p.0).collect();
        ranks.sort_unstable();
        assert_eq!(ranks, [0, 1, 2]);
        assert_eq!(
            c.series[0].points,
            [(2, 1.3)],
            "the slower one, ranked last"
        );
        assert_eq!(c.series[1].points, [(0, 0.8)]);
        let band = c.band.expect("band");
        let (_, lo, hi) = band.spans[0];
        let noise = 2f64.sqrt() / 100.0;
        assert!((lo - (1.0 - noise)).abs() < 1e-9 && (hi - (1.0 + noise)).abs() < 1e-9);
        let lines: Vec<f64> = c.lines.iter().map(|l| l.y).collect();
        assert_eq!(lines, [1.05, 0.95]);
        let html = comparison_html(&report());
        assert_eq!(html.matches("<svg").count(), 1);
    }

    #[test]
    fn empty_and_one_capture_runs_still_make_a_whole_report() {
        let empty = comparison_html(&compare_runs(("b", &[]), ("n", &[]), 5.0));
        assert!(empty.contains("<svg") && empty.contains("No capture is in both runs."));
        assert!(empty.contains("no capture timed in both runs"));
        assert_self_contained(&empty);
        let one = parse_runs("r", &line("a.krr", "k", "matched", 10.0, 0.0)).expect("one");
        let html = comparison_html(&compare_runs(("b", &one), ("n", &one), 5.0));
        assert!(html.contains("<svg") && html.contains("1.000× NEW/BASE over 1 capture timed"));
        assert_self_contained(&html);
    }
}
