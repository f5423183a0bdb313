//! What a child `kreplay play FILE --json` said, as a verdict and a record; and what the run
//! as a whole exits with. Pure: the child's end arrives as data.

use serde::Deserialize;

use crate::run_record::{RunRecord, Severity, Verdict};
use crate::units::micros;
use kreplay_format::Reference;

/// How a child ended, and what it printed.
#[derive(Debug, Clone, Default)]
pub struct ChildEnd {
    /// Its exit status; None when a signal ended it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Killed by the farm after `--timeout` (the seconds).
    pub timed_out: Option<f64>,
    pub stdout: String,
    pub stderr: String,
}

/// The fields of `play --json` a record takes.
#[derive(Deserialize)]
struct ChildReport {
    kernel: String,
    device: String,
    passes: u32,
    durations_ns: Vec<u64>,
    min_ns: u64,
    median_ns: u64,
    max_ns: u64,
    original_ns: Option<u64>,
    verify: ChildVerify,
}

#[derive(Deserialize)]
struct ChildVerify {
    checked: bool,
    reference: Reference,
    matched: bool,
    deterministic: bool,
}

/// The verdict of a replay the child finished (exit 0 or 1 with its report).
fn replay_verdict(v: &ChildVerify) -> Result<Verdict, String> {
    if !v.checked {
        return Err("the replay was not verified".into());
    }
    let compared = matches!(v.reference, Reference::Recorded | Reference::Partial);
    Ok(match (v.matched, v.deterministic) {
        (false, _) => Verdict::Mismatch,
        (true, false) => Verdict::Nondeterministic,
        (true, true) if compared => Verdict::Matched,
        (true, true) => Verdict::Deterministic,
    })
}

/// The child's own explanation: its last `kreplay: error:` line, else its last line.
fn error_text(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("kreplay: error: "))
        .or(lines.last().copied())
        .map(str::to_string)
}

/// Fills `r` (named, with its wall time) from how the child ended.
pub fn record_of(mut r: RunRecord, end: &ChildEnd) -> RunRecord {
    if let Some(s) = end.timed_out {
        r.verdict = Verdict::Timeout;
        r.error = Some(format!("killed after {s} s (--timeout)"));
        return r;
    }
    let report = match end.code {
        Some(0 | 1) => serde_json::from_str::<ChildReport>(end.stdout.trim()).ok(),
        _ => None,
    };
    let Some(report) = report else {
        r.verdict = Verdict::Error;
        let how = match (end.code, end.signal) {
            (_, Some(sig)) => format!("the replay's process was killed by signal {sig}"),
            (Some(c), _) => format!("the replay's process exited with status {c}"),
            (None, None) => "the replay's process ended without a status".to_string(),
        };
        r.error = Some(match error_text(&end.stderr) {
            Some(text) if end.signal.is_none() => text,
            Some(text) => format!("{how}: {text}"),
            None => how,
        });
        return r;
    };
    match replay_verdict(&report.verify) {
        Ok(v) => r.verdict = v,
        Err(why) => {
            r.verdict = Verdict::Error;
            r.error = Some(why);
        }
    }
    r = r.with_kernel(&report.kernel);
    r.device = Some(report.device);
    r.passes = Some(report.passes);
    // No timed pass (a tool that ran none, a timer that gave nothing) is no time: null, not
    // 0 µs, which every reader would have to know to leave out.
    let timed = !report.durations_ns.is_empty() && report.median_ns > 0;
    r.median_us = timed.then(|| micros(report.median_ns));
    r.first_us = report
        .durations_ns
        .first()
        .filter(|&&d| d > 0)
        .map(|&d| micros(d));
    r.in_app_us = report.original_ns.map(micros);
    // One timed pass measures no spread: null, not 0 %, so `kreplay compare` does not read
    // it as a noise-free figure.
    r.spread_pct = (report.median_ns > 0 && report.durations_ns.len() >= 2).then(|| {
        report.max_ns.saturating_sub(report.min_ns) as f64 / report.median_ns as f64 * 100.0
    });
    r
}

/// The run's exit status: 2 when any capture has no answer (error, timeout), else 1 when any
/// answer is wrong (mismatch, nondeterministic, damaged), else 0.
pub fn exit_status<'a>(verdicts: impl IntoIterator<Item = &'a Verdict>) -> u8 {
    match verdicts.into_iter().map(|v| v.severity()).max() {
        Some(Severity::Failed) => 2,
        Some(Severity::Wrong) => 1,
        Some(Severity::Good) | None => 0,
    }
}

/// "8 matched, 1 mismatch, 1 error" over the verdicts that occurred, in `Verdict::ALL` order.
pub fn count_line<'a>(verdicts: impl IntoIterator<Item = &'a Verdict>) -> String {
    let mut counts = [0usize; Verdict::ALL.len()];
    for v in verdicts {
        if let Some(i) = Verdict::ALL.iter().position(|a| a == v) {
            counts[i] += 1;
        }
    }
    let parts: Vec<String> = Verdict::ALL
        .iter()
        .zip(counts)
        .filter(|(_, n)| *n > 0)
        .map(|(v, n)| format!("{n} {}", v.name()))
        .collect();
    if parts.is_empty() {
        "nothing to run".to_string()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(reference: &str, matched: bool, deterministic: bool) -> String {
        format!(
            r#"{{"kernel":"_Z5saxpyifPKfPf","device":"NVIDIA H200","passes":3,
            "durations_ns":[4000,2000,3000],"min_ns":2000,"median_ns":3000,"max_ns":4000,
            "original_ns":2500,"verify":{{"checked":true,"reference":"{reference}",
            "matched":{matched},"deterministic":{deterministic},"mismatched_bytes":0,
            "first_mismatches":[],"divergent_passes":[]}},"code":"cubin"}}"#
        )
    }

    fn ended(code: i32, stdout: String) -> ChildEnd {
        ChildEnd {
            code: Some(code),
            stdout,
            ..ChildEnd::default()
        }
    }

    fn verdict(end: &ChildEnd) -> Verdict {
        record_of(RunRecord::new("x.krr", Verdict::Error), end).verdict
    }

    #[test]
    fn a_finished_replay_is_judged_by_its_verification() {
        let cases = [
            (0, "recorded", true, true, Verdict::Matched),
            (0, "partial", true, true, Verdict::Matched),
            (0, "dropped", true, true, Verdict::Deterministic),
            (0, "redacted", true, true, Verdict::Deterministic),
            (1, "recorded", false, true, Verdict::Mismatch),
            (1, "redacted", false, true, Verdict::Mismatch),
            (1, "recorded", true, false, Verdict::Nondeterministic),
            (1, "recorded", false, false, Verdict::Mismatch),
        ];
        for (code, reference, m, d, want) in cases {
            assert_eq!(
                verdict(&ended(code, report(reference, m, d))),
                want,
                "{reference} {m} {d}"
            );
        }
    }

    #[test]
    fn the_record_takes_the_reports_figures() {
        let r = record_of(
            RunRecord::new("x.krr", Verdict::Error),
            &ended(0, report("recorded", true, true)),
        );
        assert_eq!(r.kernel.as_deref(), Some("saxpy"));
        assert_eq!(r.mangled.as_deref(), Some("_Z5saxpyifPKfPf"));
        assert_eq!(r.device.as_deref(), Some("NVIDIA H200"));
        assert_eq!(r.passes, Some(3));
        assert_eq!(r.median_us, Some(3.0));
        assert_eq!(r.first_us, Some(4.0));
        assert_eq!(r.in_app_us, Some(2.5));
        let spread = r.spread_pct.expect("spread");
        assert!((spread - 200.0 / 3.0).abs() < 1e-9, "{spread}");
        assert_eq!(r.error, None);
    }

    #[test]
    fn one_timed_pass_has_no_spread() {
        let one = report("recorded", true, true)
            .replace(r#""passes":3"#, r#""passes":1"#)
            .replace("[4000,2000,3000]", "[3000]");
        let r = record_of(RunRecord::new("x.krr", Verdict::Error), &ended(0, one));
        assert_eq!(r.passes, Some(1));
        assert_eq!(r.spread_pct, None);
    }

    // Catches: a replay that timed nothing written as `median_us: 0.0`.
    #[test]
    fn a_replay_that_timed_nothing_has_no_median() {
        let none = report("recorded", true, true)
            .replace("[4000,2000,3000]", "[]")
            .replace(
                r#""min_ns":2000,"median_ns":3000,"max_ns":4000"#,
                r#""min_ns":0,"median_ns":0,"max_ns":0"#,
            );
        let r = record_of(RunRecord::new("x.krr", Verdict::Error), &ended(0, none));
        assert_eq!(r.verdict, Verdict::Matched);
        assert_eq!((r.median_us, r.first_us, r.spread_pct), (None, None, None));
        let line: serde_json::Value = serde_json::from_str(&r.to_line()).expect("json");
        assert!(line["median_us"].is_null(), "{line}");
    }

    #[test]
    fn a_failed_child_is_an_error_with_its_own_message() {
        let end = ChildEnd {
            code: Some(2),
            stderr: "kreplay: warning: w\nkreplay: error: cannot replay x.krr: no CUDA driver\n"
                .into(),
            ..ChildEnd::default()
        };
        let r = record_of(RunRecord::new("x.krr", Verdict::Matched), &end);
        assert_eq!(r.verdict, Verdict::Error);
        assert_eq!(
            r.error.as_deref(),
            Some("cannot replay x.krr: no CUDA driver")
        );
    }

    // Catches: a crash (exit 0 never reached, or garbage on stdout) taken as a verdict.
    #[test]
    fn a_killed_or_garbled_child_is_an_error_that_says_how_it_ended() {
        let killed = ChildEnd {
            signal: Some(11),
            stderr: "partial line".into(),
            ..ChildEnd::default()
        };
        let r = record_of(RunRecord::new("x.krr", Verdict::Matched), &killed);
        assert_eq!(r.verdict, Verdict::Error);
        assert_eq!(
            r.error.as_deref(),
            Some("the replay's process was killed by signal 11: partial line")
        );
        assert_eq!(verdict(&ended(0, "not json".into())), Verdict::Error);
        let unverified =
            report("recorded", true, true).replace("\"checked\":true", "\"checked\":false");
        assert_eq!(verdict(&ended(0, unverified)), Verdict::Error);
        let silent = record_of(
            RunRecord::new("x", Verdict::Matched),
            &ended(3, String::new()),
        );
        assert_eq!(
            silent.error.as_deref(),
            Some("the replay's process exited with status 3")
        );
    }

    #[test]
    fn a_timeout_is_its_own_verdict() {
        let end = ChildEnd {
            timed_out: Some(5.0),
            ..ChildEnd::default()
        };
        let r = record_of(RunRecord::new("x.krr", Verdict::Matched), &end);
        assert_eq!(r.verdict, Verdict::Timeout);
        assert!(r.error.as_deref().is_some_and(|e| e.contains("5 s")));
    }

    #[test]
    fn the_worst_verdict_sets_the_exit_status() {
        use Verdict::*;
        assert_eq!(exit_status(&[]), 0);
        assert_eq!(exit_status(&[Matched, Deterministic, Verified]), 0);
        assert_eq!(exit_status(&[Matched, Nondeterministic]), 1);
        assert_eq!(exit_status(&[Damaged, Verified]), 1);
        assert_eq!(exit_status(&[Mismatch, Error, Matched]), 2);
        assert_eq!(exit_status(&[Timeout]), 2);
    }

    #[test]
    fn the_count_line_lists_what_occurred_in_a_fixed_order() {
        use Verdict::*;
        assert_eq!(
            count_line(&[Error, Matched, Matched, Mismatch]),
            "2 matched, 1 mismatch, 1 error"
        );
        assert_eq!(count_line(&[]), "nothing to run");
    }
}
