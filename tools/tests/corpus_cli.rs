//! `kreplay record --each-kernel` (issue 33): its usage is checked before the application
//! runs, and a run whose recorder never started leaves no manifest. No GPU needed.

use std::path::Path;

mod common;
use common::scratch;

fn kreplay_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    common::kreplay_app(Some(dir), args)
}

#[test]
fn each_kernel_usage_is_refused_before_the_application_runs() {
    let d = scratch("corpus-usage");
    std::fs::create_dir_all(d.join("old")).unwrap();
    std::fs::write(d.join("old/corpus.json"), "{}").unwrap();
    let cases: [(&[&str], &str); 11] = [
        (&["--each-kernel"], "needs -o DIR/"),
        (
            &["--each-kernel", "-o", "x.krr"],
            "name a folder, e.g. -o x/",
        ),
        (&["--each-kernel", "-o", "c/%h/"], "no placeholder"),
        (&["--each-kernel", "-o", "old"], "pass --force"),
        (
            &["--each-kernel", "-o", "c/", "--nth", "2"],
            "cannot be used with",
        ),
        (
            &["--each-kernel", "-o", "c/", "--count", "2"],
            "cannot be used with",
        ),
        (
            &["--each-kernel", "-o", "c/", "--launch-range", "1:2"],
            "cannot be used with",
        ),
        (
            &["--each-kernel", "-o", "c/", "-k", "k", "--graph-launch"],
            "cannot be used with",
        ),
        (
            &["-k", "k", "-o", "c/", "--per-kernel", "2"],
            "--each-kernel",
        ),
        (
            &["--each-kernel", "-o", "c/", "--max-bytes", "lots"],
            "expected a size in bytes",
        ),
        (
            &["--each-kernel", "-o", "c/", "--by", "size"],
            "possible values",
        ),
    ];
    common::assert_refused_before_run(&d, &["record"], &cases);
}

#[test]
fn a_corpus_run_without_a_recorder_makes_its_folder_and_no_manifest() {
    let d = scratch("corpus-silent");
    let (code, _, err) = kreplay_in(
        &d,
        &[
            "record",
            "--each-kernel",
            "--per-kernel",
            "2",
            "--by",
            "shape",
            "--max-bytes",
            "1G",
            "-k",
            "regex:gemm",
            "-o",
            "corpus/",
            "sh",
            "-c",
            "touch ran",
        ],
    );
    assert_eq!(code, 3, "{err}");
    assert!(d.join("ran").exists(), "{err}");
    assert!(d.join("corpus").is_dir(), "{err}");
    assert!(!d.join("corpus/corpus.json").exists(), "{err}");
    assert!(err.contains("the recorder never started"), "{err}");
}
