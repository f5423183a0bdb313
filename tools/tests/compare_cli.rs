//! `kreplay compare BASE.jsonl NEW.jsonl` as CI runs it: the text report against its golden
//! file, the exit status that gates, CSV and JSON, and bad input (no GPU needed).

use std::path::{Path, PathBuf};

mod common;
use common::{kreplay, scratch};

fn runs(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../testdata/runs/{name}"));
    p.to_str().expect("utf-8 path").to_string()
}

/// Runs `kreplay compare` from the repository root, so paths print as the golden file has
/// them.
fn compare_at_root(args: &[&str]) -> (i32, String, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .arg("compare")
        .args(args)
        .current_dir(root)
        .output()
        .expect("run kreplay");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write<S: AsRef<str>>(dir: &Path, name: &str, lines: &[S]) -> String {
    let p = dir.join(name);
    let text: String = lines.iter().map(|l| format!("{}\n", l.as_ref())).collect();
    std::fs::write(&p, text).expect("write a run");
    p.to_str().expect("utf-8 path").to_string()
}

#[test]
fn the_text_report_matches_its_golden_file() {
    let (code, out, err) =
        compare_at_root(&["testdata/runs/base.jsonl", "testdata/runs/new.jsonl"]);
    assert_eq!(code, 1, "{err}");
    let golden = std::fs::read_to_string(runs("compare.txt")).expect("golden file");
    assert_eq!(out, golden);
}

#[test]
fn a_run_against_itself_passes_the_gate() {
    let new = runs("new.jsonl");
    let (code, out, err) = kreplay(&["compare", &new, &new]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("result    ok (exit 0)"), "{out}");
}

#[test]
fn a_wider_threshold_leaves_only_the_correctness_regression() {
    let (base, new) = (runs("base.jsonl"), runs("new.jsonl"));
    let (code, out, _) = kreplay(&["compare", &base, &new, "--threshold", "40"]);
    assert_eq!(code, 1);
    assert!(out.contains("0 slower"), "{out}");
    assert!(
        out.contains("REGRESSED: 1 correctness regression (exit 1)"),
        "{out}"
    );
    assert!(!out.contains("worst first"), "{out}");
}

#[test]
fn only_time_within_the_threshold_passes_and_a_time_regression_fails() {
    let dir = scratch("compare-gate");
    let base = write(
        &dir,
        "base.jsonl",
        &[r#"{"file":"a.krr","verdict":"matched","median_us":10.0,"spread_pct":1.0,"wall_s":1}"#],
    );
    let slower = write(
        &dir,
        "slower.jsonl",
        &[r#"{"file":"a.krr","verdict":"matched","median_us":10.8,"spread_pct":1.0,"wall_s":1}"#],
    );
    let (code, out, _) = kreplay(&["compare", &base, &slower]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("1 time regression beyond 5 %"), "{out}");
    let (code, out, _) = kreplay(&["compare", &base, &slower, "--threshold", "10"]);
    assert_eq!(code, 0, "{out}");
    // Noisy runs: 8 % is within sqrt(6² + 6²) = 8.5 %.
    let noisy = |s: &str| s.replace("\"spread_pct\":1.0", "\"spread_pct\":6.0");
    let base_noisy = write(
        &dir,
        "bn.jsonl",
        &[noisy(&std::fs::read_to_string(&base).expect("read"))],
    );
    let new_noisy = write(
        &dir,
        "nn.jsonl",
        &[noisy(&std::fs::read_to_string(&slower).expect("read"))],
    );
    let (code, out, _) = kreplay(&["compare", &base_noisy, &new_noisy]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 within noise"), "{out}");
}

#[test]
fn the_header_says_mixed_devices_and_drivers() {
    let dir = scratch("compare-mixed");
    let base = write(
        &dir,
        "base.jsonl",
        &[
            r#"{"file":"a.krr","verdict":"matched","device":"NVIDIA H200","driver":"580","wall_s":1}"#,
            r#"{"file":"b.krr","verdict":"matched","device":"NVIDIA H100","driver":"580","wall_s":1}"#,
        ],
    );
    let new = write(
        &dir,
        "new.jsonl",
        &[r#"{"file":"a.krr","verdict":"matched"}"#],
    );
    let (code, out, err) = kreplay(&["compare", &base, &new]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("device mixed (NVIDIA H100, NVIDIA H200), driver 580"),
        "{out}"
    );
    assert!(out.contains("device unknown, driver unknown"), "{out}");
    assert!(out.contains("no capture timed in both runs"), "{out}");
    assert!(out.contains("removed, in base only (1 of 1)"), "{out}");
}

#[test]
fn csv_has_a_row_per_capture_and_json_the_whole_comparison() {
    let (base, new) = (runs("base.jsonl"), runs("new.jsonl"));
    let (code, out, _) = kreplay(&["compare", &base, &new, "--csv"]);
    assert_eq!(code, 1);
    let rows: Vec<&str> = out.lines().collect();
    assert!(
        rows[0].starts_with("status,base_file,new_file,kernel,paired_by"),
        "{out}"
    );
    // 6 pairs, 1 added, 1 removed.
    assert_eq!(rows.len(), 1 + 8, "{out}");
    assert!(
        rows.iter()
            .any(|r| r.starts_with("added,,corpus/attention-0.krr,")),
        "{out}"
    );
    assert!(
        rows.iter()
            .any(|r| r.starts_with("removed,corpus/conv-0.krr,,")),
        "{out}"
    );

    let (code, out, _) = kreplay(&["compare", &base, &new, "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["summary"]["paired"], 6);
    assert_eq!(v["summary"]["correctness_regressions"], 1);
    assert_eq!(v["new"]["driver"], "590.44.01");
    assert_eq!(v["pairs"].as_array().map(Vec::len), Some(6));
    let worst = v["slower_worst_first"][0].as_u64().expect("an index") as usize;
    assert_eq!(v["pairs"][worst]["kernel"], "gemm_kernel");
    assert_eq!(v["pairs"][worst]["time"]["class"], "slower");
}

#[test]
fn top_cuts_the_text_lists() {
    let dir = scratch("compare-top");
    let line = |f: &str, us: f64| {
        format!(r#"{{"file":"{f}","verdict":"matched","median_us":{us},"wall_s":1}}"#)
    };
    let base: Vec<String> = (0..5).map(|i| line(&format!("{i}.krr"), 10.0)).collect();
    let new: Vec<String> = (0..5)
        .map(|i| line(&format!("{i}.krr"), 20.0 + f64::from(i)))
        .collect();
    let base = write(&dir, "base.jsonl", &base);
    let new = write(&dir, "new.jsonl", &new);
    let (_, out, _) = kreplay(&["compare", &base, &new, "--top", "2"]);
    assert!(out.contains("slower, worst first (2 of 5)"), "{out}");
    assert!(
        out.contains("4.krr") && out.contains("3.krr") && !out.contains("2.krr"),
        "{out}"
    );
    let (_, out, _) = kreplay(&["compare", &base, &new, "--top", "0"]);
    assert!(out.contains("slower, worst first (5 of 5)"), "{out}");
}

#[test]
fn bad_input_exits_2_naming_the_file_and_line() {
    let dir = scratch("compare-bad");
    let good = write(
        &dir,
        "good.jsonl",
        &[r#"{"file":"a.krr","verdict":"matched"}"#],
    );
    let bad = write(
        &dir,
        "bad.jsonl",
        &[
            r#"{"file":"a.krr","verdict":"matched"}"#,
            r#"{"file":"b.krr","verdict":"#,
        ],
    );
    let (code, _, err) = kreplay(&["compare", &good, &bad]);
    assert_eq!(code, 2);
    assert!(err.contains(&format!("{bad}:2: not a run record")), "{err}");
    let missing = dir.join("missing.jsonl");
    let (code, _, err) = kreplay(&["compare", &good, missing.to_str().expect("path")]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read"), "{err}");
    for threshold in ["-1", "x"] {
        let (code, _, err) = kreplay(&["compare", &good, &good, "--threshold", threshold]);
        assert_eq!(code, 2, "{err}");
    }
    let (code, _, _) = kreplay(&["compare", &good, &good, "--csv", "--json"]);
    assert_eq!(code, 2);
}

#[test]
fn a_closed_pipe_keeps_the_gates_exit_status() {
    use std::process::{Command, Stdio};
    let (base, new) = (runs("base.jsonl"), runs("new.jsonl"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(["compare", &base, &new, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kreplay");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn html_writes_the_report_and_leaves_stdout_and_the_gate_as_they_were() {
    let d = scratch("compare-html");
    let page = d.join("report.html");
    let (base, new) = (runs("corpus-base.jsonl"), runs("corpus-new.jsonl"));
    let (plain_code, plain_out, _) = kreplay(&["compare", &base, &new]);
    let page_arg = page.to_str().expect("utf-8 path");
    let (code, out, err) = kreplay(&["compare", &base, &new, "--html", page_arg]);
    assert_eq!((code, plain_code), (1, 1), "{err}");
    assert_eq!(out, plain_out);
    let html = std::fs::read_to_string(&page).expect("the report");
    let (_, pairs) = html.split_once("<table id=\"pairs\">").expect("pairs");
    let pairs = &pairs[..pairs.find("</table>").expect("end of the table")];
    assert_eq!(pairs.matches("<tr class=\"pair").count(), 30);
    assert!(html.contains("4 slower and 2 faster"), "{html}");
    assert!(html.contains("cunn_SoftMaxForward&lt;4, float"));
    assert!(html.contains("<svg") && !html.contains("http"));
}

#[test]
fn an_html_report_that_cannot_be_written_is_an_error_naming_it() {
    let new = runs("new.jsonl");
    let (code, _, err) = kreplay(&["compare", &new, &new, "--html", "/nonexistent/dir/r.html"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--html: cannot write /nonexistent/dir/r.html"),
        "{err}"
    );
}
