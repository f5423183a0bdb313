//! The error paths of the many-capture commands (`kreplay play` and `verify` of a folder,
//! files or a manifest) and of `kreplay compare`, end to end without a GPU: what must fail
//! says what is wrong and exits 2 instead of passing a gate on a run of nothing.

mod common;

use std::path::Path;

use common::{kreplay, scratch};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

// Catches: a manifest listing no capture run as nothing at all, with exit 0.
#[test]
fn a_manifest_listing_no_capture_is_refused_by_play_and_verify() {
    let d = scratch("many-empty-manifest");
    let m = d.join("corpus.json");
    std::fs::write(&m, r#"{"version":1,"captures":[],"left_out":[]}"#).expect("write");
    let out = d.join("r.jsonl");
    for command in ["play", "verify"] {
        let (code, o, e) = kreplay(&[command, s(&m), "--json-lines", s(&out)]);
        assert_eq!(code, 2, "{command}: {o}{e}");
        assert!(
            e.contains(&format!("{} lists no capture", m.display())),
            "{command}: {e}"
        );
        assert!(!o.contains("capture(s):"), "{command} ran: {o}");
    }
}

/// Writes `text` as the run `name` in `dir`; its path.
fn run_file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write a run");
    s(&p).to_string()
}

const MATCHED: &str = r#"{"file":"a.krr","verdict":"matched","median_us":10.0,"wall_s":1}"#;

// Catches: a run that produced nothing (or nothing readable) compared as "every capture
// removed", which passes a CI gate with exit 0.
#[test]
fn compare_refuses_a_run_with_no_record_on_either_side() {
    let d = scratch("many-compare-empty");
    let good = run_file(&d, "good.jsonl", &format!("{MATCHED}\n"));
    let empty = run_file(&d, "empty.jsonl", "");
    let blank = run_file(&d, "blank.jsonl", "\n\n");
    for (base, new, named) in [
        (&good, &empty, &empty),
        (&good, &blank, &blank),
        (&empty, &good, &empty),
    ] {
        let (code, o, e) = kreplay(&["compare", base, new]);
        assert_eq!(code, 2, "{base} {new}: {o}{e}");
        assert!(e.contains(&format!("{named} holds no run record")), "{e}");
        assert!(o.is_empty(), "a comparison was printed: {o}");
    }
    let garbage = run_file(&d, "garbage.jsonl", "\u{0}\u{1}binary\n");
    let (code, _, e) = kreplay(&["compare", &good, &garbage]);
    assert_eq!(code, 2, "{e}");
    assert!(e.contains(&format!("{garbage}:1: not a run record")), "{e}");
}

// Catches: a run killed mid-write gated as if it had finished.
#[test]
fn compare_says_a_last_line_is_cut_short_with_its_number() {
    let d = scratch("many-compare-torn");
    let good = run_file(&d, "good.jsonl", &format!("{MATCHED}\n"));
    let torn = run_file(&d, "torn.jsonl", &format!("{MATCHED}\n{}", &MATCHED[..20]));
    for (base, new) in [(&good, &torn), (&torn, &good)] {
        let (code, o, e) = kreplay(&["compare", base, new]);
        assert_eq!(code, 2, "{o}{e}");
        assert!(
            e.contains(&format!("{torn}:2: the last line is cut short")),
            "{e}"
        );
        assert!(e.contains("--resume"), "{e}");
        assert!(o.is_empty(), "the complete lines were compared: {o}");
    }
}

fn captures_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/captures")
}

/// The testdata captures copied under `root`/corpus: one corpus at another mount point.
fn corpus_under(root: &Path) -> std::path::PathBuf {
    let corpus = root.join("corpus");
    std::fs::create_dir_all(corpus.join("sub")).expect("mkdir");
    for item in std::fs::read_dir(captures_dir()).expect("testdata") {
        let p = item.expect("entry").path();
        if p.extension().is_some_and(|x| x == "krr") {
            let name = p.file_name().expect("name");
            std::fs::copy(&p, corpus.join("sub").join(name)).expect("copy");
        }
    }
    corpus
}

fn line_count(p: &Path) -> usize {
    std::fs::read_to_string(p).expect("lines").lines().count()
}

// Catches: --resume appending after a line cut short, gluing the next record onto it.
#[test]
fn resume_after_a_killed_run_mends_the_torn_line_and_compares_whole() {
    let d = scratch("many-resume-torn");
    let corpus = corpus_under(&d);
    let out = d.join("r.jsonl");
    let (code, o, e) = kreplay(&["verify", s(&corpus), "--json-lines", s(&out)]);
    assert_eq!(code, 0, "{o}{e}");
    let whole = std::fs::read_to_string(&out).expect("read");
    let n = whole.lines().count();
    let cut = whole.trim_end().rfind('\n').expect("two lines") + 30;
    std::fs::write(&out, &whole[..cut]).expect("tear the last line");
    let (code, _, e) = kreplay(&["compare", s(&out), s(&out)]);
    assert_eq!(code, 2, "{e}");
    assert!(
        e.contains(&format!(":{n}: the last line is cut short")),
        "{e}"
    );
    let (code, o, e) = kreplay(&["verify", s(&corpus), "--json-lines", s(&out), "--resume"]);
    assert_eq!(code, 0, "{o}{e}");
    assert!(e.contains("cut short") && e.contains("removed"), "{e}");
    assert!(
        !e.contains("do not read as results"),
        "the torn line is said once, as cut short: {e}"
    );
    assert_eq!(line_count(&out), n, "one line per capture again");
    let (code, o, e) = kreplay(&["compare", s(&out), s(&out)]);
    assert_eq!(code, 0, "{o}{e}");
}

// With no driver there is nothing to count the GPUs against: --devices is taken as given,
// and says so; each child reports the driver's error (the GPU suite checks the refusal).
#[test]
fn devices_without_a_driver_are_taken_as_given_and_it_says_so() {
    if Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!(
            "skipped: this machine has an NVIDIA driver (the GPU suite's farm-devices covers it)"
        );
        return;
    }
    let saxpy = captures_dir().join("cuda-saxpy.krr");
    let (code, o, e) = kreplay(&["play", s(&saxpy), "--devices", "4", "--timeout", "60"]);
    assert_eq!(code, 2, "{o}{e}");
    assert!(e.contains("--devices is taken as given, unchecked"), "{e}");
    assert!(o.contains("1 capture(s): 1 error"), "{o}");
}

// Catches: records identified by the path as given, so one corpus under two mount points
// pairs nothing in compare and --resume runs everything again.
#[test]
fn one_corpus_under_two_roots_pairs_in_compare_and_resumes() {
    let d = scratch("many-two-roots");
    let (a, b) = (
        corpus_under(&d.join("mnt-a")),
        corpus_under(&d.join("mnt-b")),
    );
    let (ra, rb) = (d.join("a.jsonl"), d.join("b.jsonl"));
    for (corpus, out) in [(&a, &ra), (&b, &rb)] {
        let (code, o, e) = kreplay(&["verify", s(corpus), "--json-lines", s(out)]);
        assert_eq!(code, 0, "{o}{e}");
    }
    let n = line_count(&ra);
    assert!(n >= 2, "the testdata holds several captures");
    let first: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&ra)
            .expect("read")
            .lines()
            .next()
            .expect("a line"),
    )
    .expect("json");
    assert!(
        first["key"].as_str().is_some_and(|k| k.starts_with("sub/")),
        "{first}"
    );
    let (code, o, e) = kreplay(&["compare", s(&ra), s(&rb), "--json"]);
    assert_eq!(code, 0, "{o}{e}");
    let v: serde_json::Value = serde_json::from_str(&o).expect("json");
    assert_eq!(v["summary"]["paired"], n, "{o}");
    assert_eq!(
        (
            v["summary"]["added"].as_u64(),
            v["summary"]["removed"].as_u64()
        ),
        (Some(0), Some(0))
    );
    // Run A's lines answer run B's corpus: nothing runs again.
    let (code, o, e) = kreplay(&["verify", s(&b), "--json-lines", s(&ra), "--resume"]);
    assert_eq!(code, 0, "{o}{e}");
    assert!(
        o.contains(&format!("({n} already answered, skipped)")),
        "{o}"
    );
    assert_eq!(line_count(&ra), n, "nothing was appended");
}
