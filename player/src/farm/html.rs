//! `kreplay play DIR --html` (and `verify DIR --html`): a finished run of many captures as one self-contained page: the
//! verdicts, the median times sorted (log scale, each with its pass spread), and a row per
//! capture, failures first.

use maud::{html, Markup};

use crate::farm::outcome::{count_line, exit_status};
use crate::html_report::{
    figure, page, ratio, seconds, spread_pct, summary_table, us, Band, Series, SortedChart, YScale,
};
use crate::run_record::{RunRecord, Severity};
use crate::runs_compare::run_side;

const PASSED_RGB: (u8, u8, u8) = (40, 90, 170);
const WRONG_RGB: (u8, u8, u8) = (200, 40, 40);

/// What the report shows of a run.
#[derive(Debug, Clone, Copy)]
pub struct FarmRun<'a> {
    /// `play` or `verify`.
    pub command: &'a str,
    /// What was played, as the user named it (folders, files, manifests).
    pub inputs: &'a str,
    /// In finishing order.
    pub records: &'a [RunRecord],
    /// Captures `--resume` found answered already.
    pub skipped: usize,
    pub wall_s: f64,
}

/// The whole report as an HTML document.
pub fn farm_html(run: &FarmRun) -> String {
    let lead = format!("kreplay {} {}", run.command, run.inputs);
    let caption = "Each point is one timed capture, sorted by its median replay time (log \
                   scale). The shaded band spans that capture's pass spread (max − min of the \
                   timed passes), centred on the median.";
    let body = html! {
        h2 { "Summary" }
        (summary(run))
        h2 { "Median time per capture" }
        (figure(&median_chart(run.records), caption))
        h2 { "Every capture (failures first)" }
        (captures_table(run.records))
    };
    page(&format!("kreplay {}: run report", run.command), &lead, body)
}

fn summary(run: &FarmRun) -> Markup {
    let verdicts: Vec<_> = run.records.iter().map(|r| r.verdict).collect();
    let side = run_side(run.inputs, run.records);
    let status = exit_status(&verdicts);
    let timed = run.records.iter().filter(|r| r.median_us.is_some()).count();
    let rows = [
        (
            "captures",
            html! {
                (run.records.len())
                @if run.skipped > 0 { " (" (run.skipped) " already answered, skipped)" }
            },
        ),
        ("verdicts", html! { (count_line(&verdicts)) }),
        (
            "timed",
            html! { (timed) " of " (run.records.len()) " captures" },
        ),
        ("devices", html! { (side.device) }),
        ("drivers", html! { (side.driver) }),
        ("wall time", html! { (seconds(run.wall_s)) }),
        (
            "result",
            html! {
                @if status == 0 { span.good { "all passed" } } @else { span.bad { "FAILED" } }
                " (exit " (status) ")"
            },
        ),
    ];
    summary_table(&rows)
}

/// The chart: timed captures sorted by median, passing and wrong answers apart, each with
/// its pass spread.
pub fn median_chart(records: &[RunRecord]) -> SortedChart {
    let mut timed: Vec<&RunRecord> = records
        .iter()
        .filter(|r| r.median_us.is_some_and(|m| m.is_finite() && m > 0.0))
        .collect();
    let median = |r: &RunRecord| r.median_us.unwrap_or(0.0);
    timed.sort_by(|a, b| median(a).total_cmp(&median(b)));
    let series = |label: &str, rgb, passed: bool| Series {
        label: label.to_string(),
        rgb,
        points: (timed.iter().enumerate())
            .filter(|(_, r)| r.verdict.passed() == passed)
            .map(|(i, r)| (i, median(r)))
            .collect(),
    };
    let spans = timed.iter().enumerate().filter_map(|(i, r)| {
        let half = r.spread_pct? / 200.0;
        Some((i, median(r) * (1.0 - half), median(r) * (1.0 + half)))
    });
    SortedChart {
        caption: "Median replay time per capture, sorted".into(),
        x_label: "timed captures, sorted by median time (rank)".into(),
        y_label: "median time per pass (µs, log scale)".into(),
        count: timed.len(),
        series: vec![
            series("passed", PASSED_RGB, true),
            series("wrong answer", WRONG_RGB, false),
        ],
        band: Some(Band {
            label: "pass spread (max − min)".into(),
            spans: spans.collect(),
        }),
        lines: Vec::new(),
        scale: YScale::Log,
    }
}

/// Failures first (no answer, then wrong answers), then by file.
fn table_order(records: &[RunRecord]) -> Vec<&RunRecord> {
    let mut order: Vec<&RunRecord> = records.iter().collect();
    order.sort_by(|a, b| {
        (b.verdict.severity().cmp(&a.verdict.severity())).then_with(|| a.file.cmp(&b.file))
    });
    order
}

fn capture_row(r: &RunRecord) -> Markup {
    let tone = match r.verdict.severity() {
        Severity::Good => "capture",
        Severity::Wrong | Severity::Failed => "capture bad",
    };
    let replay_over_app = r.median_us.zip(r.in_app_us).map(|(m, a)| m / a);
    html! {
        tr class=(tone) {
            td.file { (r.file) }
            td.name { (r.kernel.as_deref().unwrap_or("–")) }
            td { (r.verdict.name()) }
            td.num { (us(r.median_us)) }
            td.num { (us(r.first_us)) }
            td.num { (us(r.in_app_us)) }
            td.num { (ratio(replay_over_app.filter(|x| x.is_finite()))) }
            td.num { (spread_pct(r.spread_pct)) }
            td.num { (r.passes.map_or("–".to_string(), |p| p.to_string())) }
            td.num { (seconds(r.wall_s)) }
            td.text { (r.error.as_deref().unwrap_or("")) }
        }
    }
}

fn captures_table(records: &[RunRecord]) -> Markup {
    const COLUMNS: [&str; 11] = [
        "file",
        "kernel",
        "verdict",
        "median µs",
        "first µs",
        "in-app µs",
        "replay/in-app",
        "spread",
        "passes",
        "wall",
        "error",
    ];
    let numeric = |i: usize| (3..10).contains(&i);
    html! {
        @if records.is_empty() {
            p { "No capture was run." }
        } @else {
            table #captures {
                tr {
                    @for (i, c) in COLUMNS.iter().enumerate() {
                        @if numeric(i) { th.num { (c) } } @else { th { (c) } }
                    }
                }
                @for r in table_order(records) { (capture_row(r)) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_record::Verdict;

    fn rec(file: &str, verdict: Verdict, median: Option<f64>) -> RunRecord {
        let mut r = RunRecord::new(file, verdict);
        r.kernel = Some(format!("void k<{file}, 4>(float&)"));
        r.device = Some("NVIDIA H200".into());
        r.driver = Some("580.65.06".into());
        r.median_us = median;
        r.in_app_us = median.map(|m| m * 0.5);
        r.spread_pct = median.map(|_| 4.0);
        r.passes = median.map(|_| 8);
        r.wall_s = 1.25;
        r
    }

    fn records() -> Vec<RunRecord> {
        let mut failed = rec("c.krr", Verdict::Error, None);
        failed.error = Some("CUDA_ERROR_LAUNCH_FAILED <at> launch".into());
        vec![
            rec("b.krr", Verdict::Matched, Some(300.0)),
            rec("a.krr", Verdict::Mismatch, Some(12.5)),
            failed,
        ]
    }

    fn report(records: &[RunRecord]) -> String {
        farm_html(&FarmRun {
            command: "play",
            inputs: "corpus/",
            records,
            skipped: 2,
            wall_s: 7.5,
        })
    }

    fn assert_self_contained(html: &str) {
        for reference in [
            "http://", "https://", "src=", "href=", "<script", "<link", "NaN",
        ] {
            assert!(!html.contains(reference), "{reference} in the report");
        }
    }

    #[test]
    fn the_report_sums_up_the_run() {
        let html = report(&records());
        assert!(html.contains("1 matched, 1 mismatch, 1 error"), "{html}");
        assert!(html.contains("3 (2 already answered, skipped)"));
        assert!(html.contains("2 of 3 captures"));
        assert!(html.contains("NVIDIA H200") && html.contains("580.65.06"));
        assert!(html.contains("7.5 s") && html.contains("FAILED") && html.contains("(exit 2)"));
        assert_eq!(html.matches("<svg").count(), 1);
        assert_self_contained(&html);
    }

    #[test]
    fn a_row_per_capture_failures_first_names_escaped() {
        let html = report(&records());
        assert_eq!(html.matches("<tr class=\"capture").count(), 3);
        let at = |s: &str| html.find(s).expect(s);
        assert!(at(">c.krr<") < at(">a.krr<") && at(">a.krr<") < at(">b.krr<"));
        assert!(html.contains("void k&lt;a.krr, 4&gt;(float&amp;)"));
        assert!(html.contains("CUDA_ERROR_LAUNCH_FAILED &lt;at&gt; launch"));
        assert!(!html.contains("k<a.krr"));
        assert!(html.contains(">2.000×<"), "replay over in-app");
    }

    #[test]
    fn the_chart_sorts_timed_captures_and_splits_wrong_answers() {
        let c = median_chart(&records());
        assert_eq!(c.count, 2);
        assert_eq!(c.series[0].points, [(1, 300.0)]);
        assert_eq!(c.series[1].points, [(0, 12.5)]);
        let band = c.band.expect("band");
        assert_eq!(band.spans[1], (1, 294.0, 306.0));
    }

    #[test]
    fn empty_and_one_capture_runs_still_make_a_whole_report() {
        let empty = report(&[]);
        assert!(empty.contains("<svg") && empty.contains("No capture was run."));
        assert_self_contained(&empty);
        let one = report(&[rec("a.krr", Verdict::Matched, Some(9.0))]);
        assert!(one.contains("<svg") && one.contains("all passed"));
        assert_self_contained(&one);
    }
}
