//! `kreplay compare BASE.jsonl NEW.jsonl`: reads the two runs, the player compares them
//! (`kreplay_player::runs_compare`), and this prints the result as text, CSV or JSON and
//! turns it into the exit status CI gates on; `--html` also writes the player's report page.

mod text;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_player::runs_compare::{
    compare_runs, comparison_html, parse_runs, CapturePair, RunRecord, RunsComparison, Unpaired,
};

use crate::cli::CompareArgs;
use crate::out;
use crate::output::{is_broken_pipe, write_csv};

pub fn run(a: CompareArgs) -> anyhow::Result<ExitCode> {
    let (base_name, base) = read_run(&a.base)?;
    let (new_name, new) = read_run(&a.new)?;
    let report = compare_runs((&base_name, &base), (&new_name, &new), a.threshold);
    if let Some(path) = &a.html {
        std::fs::write(path, comparison_html(&report))
            .with_context(|| format!("--html: cannot write {}", path.display()))?;
    }
    match print(&a, &report) {
        // A reader that stopped early (`| head`) still gets the gate's answer: a pipeline
        // under `set -o pipefail` must not pass a regression because its output was cut.
        Err(e) if is_broken_pipe(&e) => {}
        other => other?,
    }
    Ok(ExitCode::from(report.exit_status()))
}

fn print(a: &CompareArgs, report: &RunsComparison) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if a.json {
        serde_json::to_writer(&mut w, report)?;
        out!(w);
    } else if a.csv {
        write_csv(&mut w, &csv_rows(report))?;
    } else {
        text::print(&mut w, report, a.top)?;
    }
    w.flush()?;
    Ok(())
}

/// A run's records and its name as the user gave it.
fn read_run(path: &Path) -> anyhow::Result<(String, Vec<RunRecord>)> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {name}"))?;
    let records = parse_runs(&name, &text)?;
    Ok((name, records))
}

fn number(x: Option<f64>) -> String {
    x.map(|v| v.to_string()).unwrap_or_default()
}

const CSV_HEADER: [&str; 14] = [
    "status",
    "base_file",
    "new_file",
    "kernel",
    "paired_by",
    "base_verdict",
    "new_verdict",
    "verdict_change",
    "base_median_us",
    "new_median_us",
    "ratio",
    "change_pct",
    "noise_pct",
    "time",
];

/// A JSON name of a unit enum (`paired_by`, `verdict_change`, `time`) as its CSV cell.
fn json_word(v: impl serde::Serialize) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

fn pair_row(p: &CapturePair) -> Vec<String> {
    let t = p.time;
    vec![
        "paired".into(),
        p.base_file.clone(),
        p.new_file.clone(),
        p.kernel.clone().unwrap_or_default(),
        json_word(p.paired_by),
        p.base_verdict.name().into(),
        p.new_verdict.name().into(),
        json_word(p.verdict_change),
        number(p.base_median_us),
        number(p.new_median_us),
        number(t.map(|t| t.ratio)),
        number(t.map(|t| t.change_pct)),
        number(t.and_then(|t| t.noise_pct)),
        t.map(|t| json_word(t.class)).unwrap_or_default(),
    ]
}

/// A capture of one run only: its columns on that run's side, the rest empty.
fn unpaired_row(u: &Unpaired, in_base: bool) -> Vec<String> {
    let mut row = vec![String::new(); CSV_HEADER.len()];
    let (status, file, verdict, median) = if in_base {
        ("removed", 1, 5, 8)
    } else {
        ("added", 2, 6, 9)
    };
    row[0] = status.into();
    row[file] = u.file.clone();
    row[3] = u.kernel.clone().unwrap_or_default();
    row[verdict] = u.verdict.name().into();
    row[median] = number(u.median_us);
    row
}

/// `--csv`: a header, then one row per pair (base order), per added and per removed capture.
pub fn csv_rows(r: &RunsComparison) -> Vec<Vec<String>> {
    let header = CSV_HEADER.iter().map(|h| h.to_string()).collect();
    std::iter::once(header)
        .chain(r.pairs.iter().map(pair_row))
        .chain(r.added.iter().map(|u| unpaired_row(u, false)))
        .chain(r.removed.iter().map(|u| unpaired_row(u, true)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs() -> RunsComparison {
        let base = parse_runs(
            "base",
            concat!(
                r#"{"file":"a.krr","sha256":"s","kernel":"k,1","verdict":"matched","median_us":10}"#,
                "\n",
                r#"{"file":"gone.krr","verdict":"timeout"}"#,
            ),
        )
        .expect("base");
        let new = parse_runs(
            "new",
            concat!(
                r#"{"file":"moved/a.krr","sha256":"s","kernel":"k,1","verdict":"mismatch","median_us":12.5}"#,
                "\n",
                r#"{"file":"fresh.krr","verdict":"matched","median_us":3}"#,
            ),
        )
        .expect("new");
        compare_runs(("base", &base), ("new", &new), 5.0)
    }

    #[test]
    fn csv_rows_put_each_run_on_its_side() {
        let rows = csv_rows(&runs());
        assert_eq!(rows.len(), 4);
        assert!(rows.iter().all(|r| r.len() == CSV_HEADER.len()));
        let pair = &rows[1];
        assert_eq!(
            pair[..5],
            ["paired", "a.krr", "moved/a.krr", "k,1", "sha256"]
        );
        assert_eq!(pair[5..8], ["matched", "mismatch", "regression"]);
        assert_eq!(pair[8..11], ["10", "12.5", "1.25"]);
        assert_eq!(pair[12], "");
        assert_eq!(pair[13], "slower");
        assert_eq!(rows[2][..4], ["added", "", "fresh.krr", ""]);
        assert_eq!((rows[2][6].as_str(), rows[2][9].as_str()), ("matched", "3"));
        assert_eq!(rows[3][..2], ["removed", "gone.krr"]);
        assert_eq!((rows[3][5].as_str(), rows[3][8].as_str()), ("timeout", ""));
    }

    #[test]
    fn text_names_both_paths_and_both_causes() {
        let mut text = Vec::new();
        text::print(&mut text, &runs(), 10).expect("print");
        let text = String::from_utf8(text).expect("utf-8");
        assert!(text.contains("a.krr (new: moved/a.krr)"), "{text}");
        assert!(
            text.contains(
                "REGRESSED: 1 time regression beyond 5 %, 1 correctness regression (exit 1)"
            ),
            "{text}"
        );
        assert!(
            text.contains("1 capture (1 by sha256), 1 added, 1 removed"),
            "{text}"
        );
        assert!(text.contains("    1.250x   +25.0 %        -"), "{text}");
    }
}
