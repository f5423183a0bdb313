//! `kreplay verify DIR | corpus.json` and `kreplay play FILE...` end to end, without a GPU:
//! the many-capture path (inputs, shards, resume, JSON lines, table, exit status).

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::{capture, kreplay, scratch};

fn captures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/captures")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The JSON lines of `path`, as values.
fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("json lines")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn testdata_count() -> usize {
    std::fs::read_dir(captures_dir())
        .expect("testdata")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "krr"))
        })
        .count()
}

#[test]
fn verify_of_a_directory_verifies_every_capture_once() {
    let d = scratch("farm-verify-dir");
    let out = d.join("r.jsonl");
    let (code, stdout, stderr) = kreplay(&["verify", s(&captures_dir()), "--json-lines", s(&out)]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let got = lines(&out);
    assert_eq!(got.len(), testdata_count());
    assert!(got.iter().all(|l| l["verdict"] == "verified"), "{got:?}");
    let saxpy = got.iter().find(|l| {
        l["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("cuda-saxpy.krr"))
    });
    assert_eq!(saxpy.expect("saxpy")["kernel"], "saxpy");
    assert!(
        stdout.contains(&format!("{} capture(s): {} verified", got.len(), got.len())),
        "{stdout}"
    );
}

#[test]
fn shards_split_the_corpus_and_their_lines_concatenate_to_all_of_it() {
    let d = scratch("farm-shards");
    let mut seen: HashMap<String, usize> = HashMap::new();
    for i in 0..3 {
        let out = d.join(format!("r-{i}.jsonl"));
        let shard = format!("{i}/3");
        let (code, o, e) = kreplay(&[
            "verify",
            s(&captures_dir()),
            "--shard",
            &shard,
            "--json-lines",
            s(&out),
        ]);
        assert_eq!(code, 0, "{o}{e}");
        for l in lines(&out) {
            *seen
                .entry(l["file"].as_str().expect("file").to_string())
                .or_default() += 1;
        }
    }
    assert_eq!(seen.len(), testdata_count());
    assert!(seen.values().all(|&n| n == 1), "{seen:?}");
}

#[test]
fn shard_auto_reads_the_cluster_or_says_what_it_needs() {
    let d = scratch("farm-auto");
    let out = d.join("r.jsonl");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args([
            "verify",
            s(&captures_dir()),
            "--shard",
            "auto",
            "--json-lines",
            s(&out),
        ])
        .env("JOB_COMPLETION_INDEX", "0")
        .env("JOB_COMPLETIONS", "1")
        .env_remove("SLURM_ARRAY_TASK_ID")
        .output()
        .expect("run");
    assert_eq!(status.status.code(), Some(0));
    assert_eq!(
        lines(&out).len(),
        testdata_count(),
        "one shard of one is everything"
    );
    let bare = std::process::Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(["verify", s(&captures_dir()), "--shard", "auto"])
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&bare.stderr);
    assert_eq!(bare.status.code(), Some(2), "{err}");
    assert!(
        err.contains("SLURM_ARRAY_TASK_ID") && err.contains("JOB_COMPLETION_INDEX"),
        "{err}"
    );
}

#[test]
fn resume_skips_what_the_file_answers_and_a_full_file_is_not_overwritten() {
    let d = scratch("farm-resume");
    let out = d.join("r.jsonl");
    let (code, o, e) = kreplay(&[
        "verify",
        s(&captures_dir()),
        "--shard",
        "0/2",
        "--json-lines",
        s(&out),
    ]);
    assert_eq!(code, 0, "{o}{e}");
    let first = lines(&out).len();
    let (code, _, e) = kreplay(&["verify", s(&captures_dir()), "--json-lines", s(&out)]);
    assert_eq!(code, 2);
    assert!(e.contains("--resume"), "{e}");
    let (code, o, e) = kreplay(&[
        "verify",
        s(&captures_dir()),
        "--json-lines",
        s(&out),
        "--resume",
    ]);
    assert_eq!(code, 0, "{o}{e}");
    assert!(
        o.contains(&format!("({first} already answered, skipped)")),
        "{o}"
    );
    assert_eq!(
        lines(&out).len(),
        testdata_count(),
        "each capture answered once"
    );
}

#[test]
fn a_manifest_checks_each_files_checksum_and_damage_names_its_byte() {
    let d = scratch("farm-manifest");
    std::fs::copy(capture("cuda-saxpy"), d.join("good.krr")).expect("copy");
    let mut bytes = std::fs::read(capture("cuda-saxpy")).expect("read");
    bytes.truncate(bytes.len() / 2);
    std::fs::write(d.join("cut.krr"), &bytes).expect("write");
    std::fs::copy(capture("surface"), d.join("changed.krr")).expect("copy");
    let good_sha = kreplay_protocol::corpus::sha256_file(&d.join("good.krr")).expect("sha");
    let cut_sha = kreplay_protocol::corpus::sha256_file(&d.join("cut.krr")).expect("sha");
    let manifest = serde_json::json!({"version": 1, "captures": [
        {"file": "good.krr", "sha256": good_sha},
        {"file": "cut.krr", "sha256": cut_sha},
        {"file": "changed.krr", "sha256": "00".repeat(32)},
    ], "left_out": []});
    let m = d.join("corpus.json");
    std::fs::write(&m, manifest.to_string()).expect("write");
    let out = d.join("r.jsonl");
    let (code, o, e) = kreplay(&["verify", s(&m), "--json-lines", s(&out), "--jobs", "1"]);
    assert_eq!(code, 1, "{o}{e}");
    let by_file: HashMap<String, serde_json::Value> = lines(&out)
        .into_iter()
        .map(|l| {
            (
                l["file"]
                    .as_str()
                    .expect("file")
                    .rsplit('/')
                    .next()
                    .expect("name")
                    .to_string(),
                l,
            )
        })
        .collect();
    assert_eq!(by_file["good.krr"]["verdict"], "verified");
    assert_eq!(by_file["good.krr"]["sha256"], good_sha.as_str());
    assert_eq!(by_file["cut.krr"]["verdict"], "damaged");
    assert!(
        by_file["cut.krr"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("byte")),
        "{:?}",
        by_file["cut.krr"]
    );
    assert_eq!(by_file["changed.krr"]["verdict"], "damaged");
    assert!(by_file["changed.krr"]["error"]
        .as_str()
        .is_some_and(|e| e.contains("manifest")));
}

#[test]
fn several_plain_files_keep_verifys_own_lines() {
    let (code, o, _) = kreplay(&["verify", s(&capture("cuda-saxpy")), s(&capture("surface"))]);
    assert_eq!(code, 0);
    assert!(
        o.contains(": intact: ") && !o.contains("capture(s):"),
        "{o}"
    );
}

// Without a GPU each child says why, and the run goes on to the next capture.
#[test]
fn play_of_several_files_without_a_gpu_is_an_error_per_capture_with_its_reason() {
    if Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!(
            "skipped: this machine has an NVIDIA driver (the GPU suite's farm-play covers it)"
        );
        return;
    }
    let d = scratch("farm-play");
    let out = d.join("r.jsonl");
    let files = [
        capture("cuda-saxpy"),
        capture("surface"),
        capture("cuda-coop"),
    ];
    let mut args = vec!["play"];
    args.extend(files.iter().map(|f| s(f)));
    args.extend(["--json-lines", s(&out), "--timeout", "60"]);
    let (code, o, e) = kreplay(&args);
    assert_eq!(code, 2, "{o}{e}");
    let got = lines(&out);
    assert_eq!(got.len(), 3);
    for l in &got {
        assert_eq!(l["verdict"], "error", "{l}");
        let why = l["error"].as_str().expect("error text");
        assert!(
            why.contains("cannot replay") && why.contains(l["file"].as_str().expect("file")),
            "{why}"
        );
    }
    assert!(o.contains("3 capture(s): 3 error"), "{o}");
}

#[test]
fn play_html_of_one_file_is_a_run_with_its_report_written_at_the_end() {
    if Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!("skipped: this machine has an NVIDIA driver (the GPU suite covers it)");
        return;
    }
    let d = scratch("farm-html");
    let page = d.join("run.html");
    let saxpy = capture("cuda-saxpy");
    let (code, o, e) = kreplay(&["play", s(&saxpy), "--html", s(&page), "--timeout", "60"]);
    assert_eq!(code, 2, "{o}{e}");
    assert!(o.contains("1 capture(s): 1 error"), "{o}");
    let html = std::fs::read_to_string(&page).expect("the report");
    assert!(
        html.contains("<title>kreplay play: run report</title>"),
        "{html}"
    );
    assert_eq!(html.matches("<tr class=\"capture bad\">").count(), 1);
    assert!(html.contains("no CUDA driver") && html.contains("(exit 2)"));
    assert!(html.contains("<svg") && !html.contains("http"));
}

#[test]
fn verify_html_reports_every_capture_verified() {
    let d = scratch("verify-html");
    let page = d.join("verify.html");
    let (code, o, e) = kreplay(&["verify", s(&captures_dir()), "--html", s(&page)]);
    assert_eq!(code, 0, "{o}{e}");
    let html = std::fs::read_to_string(&page).expect("the report");
    let n = testdata_count();
    assert!(html.contains(&format!("{n} verified")), "{html}");
    assert_eq!(html.matches("<tr class=\"capture\">").count(), n);
    assert!(html.contains("all passed") && html.contains("kreplay verify"));
}

#[test]
fn timing_refuses_more_jobs_than_gpus() {
    let (code, _, e) = kreplay(&["play", s(&captures_dir()), "--jobs", "4", "--devices", "0"]);
    assert_eq!(code, 2);
    assert!(e.contains("--no-timing"), "{e}");
}

// Catches: the farm's reader drifting from what `record --each-kernel` writes.
#[test]
fn the_manifest_record_writes_is_the_one_the_farm_reads() {
    use kreplay_protocol::corpus::{CorpusCapture, Manifest, MANIFEST_NAME, MANIFEST_VERSION};
    let d = scratch("farm-record-manifest");
    std::fs::create_dir_all(d.join("k")).expect("mkdir");
    std::fs::copy(capture("cuda-saxpy"), d.join("k/1-saxpy-1-7.krr")).expect("copy");
    let sha = kreplay_protocol::corpus::sha256_file(&d.join("k/1-saxpy-1-7.krr")).expect("sha");
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        captures: vec![CorpusCapture {
            file: "k/1-saxpy-1-7.krr".into(),
            kernel: "saxpy".into(),
            sha256: sha.clone(),
            ..CorpusCapture::default()
        }],
        ..Manifest::default()
    };
    let m = d.join(MANIFEST_NAME);
    std::fs::write(&m, serde_json::to_string(&manifest).expect("json")).expect("write");
    let out = d.join("r.jsonl");
    let (code, o, e) = kreplay(&["verify", s(&m), "--json-lines", s(&out)]);
    assert_eq!(code, 0, "{o}{e}");
    let got = lines(&out);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["verdict"], "verified");
    assert_eq!(got[0]["sha256"], sha.as_str());
    assert_eq!(got[0]["file"], s(&d.join("k/1-saxpy-1-7.krr")));
}

// Catches: a table reader that went away (`kreplay verify DIR | head -1`) ending the run
// early with exit 0, its JSON lines and page cut short.
#[test]
fn a_closed_stdout_ends_the_table_not_the_run() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let d = scratch("farm-closed-stdout");
    let (lines, page) = (d.join("runs.jsonl"), d.join("run.html"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .arg("verify")
        .arg(captures_dir())
        .args(["--jobs", "1", "--json-lines"])
        .arg(&lines)
        .arg("--html")
        .arg(&page)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run kreplay");
    // Read the first bytes of the table, then go away as `head` does.
    let mut first = [0u8; 16];
    let mut out = child.stdout.take().expect("stdout");
    let _ = out.read(&mut first);
    drop(out);
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "every testdata capture verifies");
    let text = std::fs::read_to_string(&lines).expect("the JSON lines");
    assert_eq!(text.lines().count(), 10, "{text}");
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(
        html.matches("verified").count() >= 10,
        "the page lists every capture"
    );
}

#[test]
fn an_unwritable_html_path_is_refused_before_the_run() {
    let d = scratch("farm-html-early");
    let lines = d.join("runs.jsonl");
    let page = d.join("missing-dir/run.html");
    let (code, _, err) = kreplay(&[
        "verify",
        captures_dir().to_str().expect("utf-8"),
        "--json-lines",
        lines.to_str().expect("utf-8"),
        "--html",
        page.to_str().expect("utf-8"),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--html") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!lines.exists(), "nothing ran");
}
