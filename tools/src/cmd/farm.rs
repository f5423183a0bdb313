//! `kreplay play DIR | FILE... | corpus.json` and `kreplay verify` of the same forms: the
//! flags turned into the farm's settings (`kreplay_player::farm`), the results written as
//! JSON lines and shown as a table (`farm_table`), and with `--html` as a report page.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use kreplay_player::farm::{self, Done, Entry, Shard};
use kreplay_player::run_record::{RunRecord, Verdict};

use super::farm_table::Table;
use crate::cli::{CacheMode, ManyArgs, PlayArgs, VerifyArgs};

/// Whether `play` was asked for many captures (one capture file alone keeps the single replay).
pub fn play_wants_many(a: &PlayArgs) -> bool {
    farm::names_many(&a.files)
        || a.many.given()
        || a.devices.is_some()
        || a.no_timing
        || a.timeout.is_some()
}

/// Whether `verify` was asked for the many-capture form (several plain files without its
/// flags keep the per-file lines verify has always printed).
pub fn verify_wants_many(a: &VerifyArgs) -> bool {
    a.many.given() || a.files.iter().any(|f| f.is_dir() || farm::is_manifest(f))
}

/// The captures this process runs, and where their records go.
struct Selection {
    entries: Vec<Entry>,
    /// Already answered in the --json-lines file (--resume).
    skipped: usize,
    sink: JsonLines,
    /// `--html FILE`, written when the run finishes.
    report: Option<HtmlReport>,
}

/// `--html FILE`: where the finished run's page goes, and what the run was given.
struct HtmlReport {
    command: &'static str,
    path: PathBuf,
    inputs: String,
}

impl HtmlReport {
    fn write(&self, records: &[RunRecord], skipped: usize, wall: Duration) -> anyhow::Result<()> {
        let page = farm::farm_html(&farm::FarmRun {
            command: self.command,
            inputs: &self.inputs,
            records,
            skipped,
            wall_s: wall.as_secs_f64(),
        });
        std::fs::write(&self.path, page)
            .with_context(|| format!("--html: cannot write {}", self.path.display()))
    }
}

impl Selection {
    /// `command` (`play`, `verify`) names the run in its --html report.
    fn of(command: &'static str, files: &[PathBuf], many: &ManyArgs) -> anyhow::Result<Selection> {
        let mut entries = farm::expand(files)?;
        if let Some(s) = &many.shard {
            let shard = if s == "auto" {
                Shard::from_cluster(&|k| std::env::var(k).ok())
            } else {
                Shard::parse(s)
            };
            entries = shard.map_err(anyhow::Error::msg)?.select(entries);
        }
        let mut skipped = 0;
        let mut tail = farm::Tail::Whole;
        if let (true, Some(path)) = (many.resume, &many.json_lines) {
            // Read once: what the earlier run answered, and how its end is to be mended (a
            // last line cut short answers nothing and is said once, as cut, not as unreadable).
            let text = match std::fs::read(path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("--resume: cannot read {}", path.display()))
                }
            };
            tail = farm::tail_repair(&text);
            let whole = match tail {
                farm::Tail::CutTo(len) => &text[..len as usize],
                _ => &text[..],
            };
            let done = Done::from_lines(&String::from_utf8_lossy(whole));
            if done.unreadable > 0 {
                crate::warn!(
                    "kreplay: warning: {} line(s) of {} do not read as results: their captures run again",
                    done.unreadable,
                    path.display()
                );
            }
            (entries, skipped) = done.remaining(entries);
        }
        if let Some(path) = &many.html {
            // Before the run, not after hours of it: the page replaces a file of that name.
            super::check_new_output(path, true, "--html")?;
        }
        let sink = JsonLines::open(many.json_lines.as_deref(), many.resume.then_some(tail))?;
        let report = many.html.as_ref().map(|path| HtmlReport {
            command,
            path: path.clone(),
            inputs: files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(" "),
        });
        Ok(Selection {
            entries,
            skipped,
            sink,
            report,
        })
    }
}

/// `--json-lines FILE`: one line per capture, flushed as each finishes, so a killed run
/// leaves every finished capture's line for `--resume`.
struct JsonLines(Option<std::fs::File>);

impl JsonLines {
    /// Appends with `resume` (the repair its end needs, found when the earlier lines were
    /// read); otherwise the file must be new or empty (a run's results are never overwritten
    /// by the next).
    fn open(path: Option<&Path>, resume: Option<farm::Tail>) -> anyhow::Result<JsonLines> {
        let Some(path) = path else {
            return Ok(JsonLines(None));
        };
        if resume.is_none() && std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
            anyhow::bail!(
                "--json-lines {}: the file holds results already: add --resume to skip those captures and append, or choose another file",
                path.display()
            );
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("--json-lines: cannot open {}", path.display()))?;
        if let Some(tail) = resume {
            repair_tail(&mut file, path, tail)?;
        }
        Ok(JsonLines(Some(file)))
    }

    fn write(&mut self, r: &RunRecord) -> std::io::Result<()> {
        match &mut self.0 {
            Some(f) => f.write_all(format!("{}\n", r.to_line()).as_bytes()),
            None => Ok(()),
        }
    }
}

/// Mends the end of a --json-lines file before --resume appends to it (`tail`, as
/// `farm::tail_repair` found it): a record without its newline gets one, a last line cut short
/// by a killed run is removed (its capture runs again).
fn repair_tail(file: &mut std::fs::File, path: &Path, tail: farm::Tail) -> anyhow::Result<()> {
    let context = || format!("--resume: cannot mend the end of {}", path.display());
    match tail {
        farm::Tail::Whole => {}
        farm::Tail::AddNewline => file.write_all(b"\n").with_context(context)?,
        farm::Tail::CutTo(len) => {
            file.set_len(len).with_context(context)?;
            crate::warn!(
                "kreplay: warning: the last line of {} was cut short (a run killed while writing it): removed; its capture runs again",
                path.display()
            );
        }
    }
    Ok(())
}

/// Runs `work` over the selection with the table and the summary; the exit status.
fn run_many(
    sel: Selection,
    quiet: bool,
    work: impl FnOnce(
        &[Entry],
        &mut dyn FnMut(&RunRecord) -> std::io::Result<()>,
    ) -> std::io::Result<Vec<Verdict>>,
) -> anyhow::Result<ExitCode> {
    let Selection {
        entries,
        skipped,
        mut sink,
        report,
    } = sel;
    let started = Instant::now();
    let mut table = Table::new(&entries, quiet);
    // Kept only for --html: the page needs every record once the run is over.
    let mut finished: Vec<RunRecord> = Vec::new();
    let verdicts = work(&entries, &mut |r| {
        sink.write(r)?;
        if report.is_some() {
            finished.push(r.clone());
        }
        // A reader that went away (`| head`) ends the table, not the run: the JSON lines,
        // the page and the exit status still follow every capture.
        match table.row(r) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                table.stop_printing();
                Ok(())
            }
            other => other,
        }
    })?;
    let wall = started.elapsed();
    if let Some(report) = &report {
        report.write(&finished, skipped, wall)?;
    }
    table.summary(&verdicts, skipped, wall)?;
    Ok(ExitCode::from(farm::exit_status(&verdicts)))
}

/// `kreplay play` of many captures.
pub fn play(a: &PlayArgs) -> anyhow::Result<ExitCode> {
    let args = child_args(a)?;
    let parent_visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let visible = farm::visible_count();
    let chosen = farm::choose_devices(a.devices.as_deref(), visible, parent_visible.as_deref())
        .map_err(anyhow::Error::msg)?;
    let ordinals = chosen.ordinals;
    if !a.quiet {
        if chosen.unchecked {
            crate::warn!("kreplay: warning: no CUDA driver answered (none found, or it would not start): --devices is taken as given, unchecked; each replay will say why it cannot run");
        } else if ordinals.is_empty() {
            crate::warn!("kreplay: warning: no GPU found (no CUDA driver, or no device): each replay will say why");
        }
    }
    let jobs =
        farm::job_count(a.many.jobs, ordinals.len(), !a.no_timing).map_err(anyhow::Error::msg)?;
    let settings = farm::PlayFarm {
        child: farm::ChildCommand {
            program: std::env::current_exe()
                .context("cannot find this kreplay executable to run each replay")?,
            args,
        },
        gpus: farm::describe_gpus(&ordinals, visible.is_some()),
        jobs,
        timeout: a.timeout.map(Duration::from_secs_f64),
    };
    let sel = Selection::of("play", &a.files, &a.many)?;
    run_many(sel, a.quiet, |entries, report| {
        farm::play_many(&settings, entries, report)
    })
}

/// `kreplay verify` of many captures: in this process, on every core by default.
pub fn verify(a: &VerifyArgs) -> anyhow::Result<ExitCode> {
    if a.salvage.is_some() {
        anyhow::bail!("--salvage takes one capture at a time");
    }
    if a.json {
        anyhow::bail!("--json prints one capture's verdict: with many, use --json-lines FILE");
    }
    let jobs = match a.many.jobs {
        Some(0) => anyhow::bail!("--jobs is at least 1"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let sel = Selection::of("verify", &a.files, &a.many)?;
    run_many(sel, false, |entries, report| {
        farm::verify_many(entries, jobs, report)
    })
}

/// The options each child's `play FILE --json` takes: the replay's own, with `--verify`
/// always (a verdict needs it), and `--no-timing` as one verified pass without warm-up.
pub fn child_args(a: &PlayArgs) -> anyhow::Result<Vec<OsString>> {
    let refuse = |flag: &str, why: &str| anyhow::anyhow!("{flag} {why} with many captures");
    if a.save_output.is_some() {
        return Err(refuse(
            "--save-output",
            "names one output file: not available",
        ));
    }
    if a.save_step.is_some() {
        return Err(refuse(
            "--save-step",
            "names one output file: not available",
        ));
    }
    if a.trace.is_some() {
        return Err(refuse(
            "--trace",
            "names one output file: not available (trace one capture at a time)",
        ));
    }
    if a.json || a.csv {
        return Err(refuse(
            "--json and --csv",
            "print one replay's report: use --json-lines FILE",
        ));
    }
    if a.device != 0 {
        return Err(refuse("--device", "picks one GPU: use --devices 0,1,..."));
    }
    let mut v: Vec<OsString> = Vec::new();
    let mut push = |s: &str| v.push(s.into());
    if a.no_timing {
        push("--passes");
        push("1");
    } else if a.tool.is_none() {
        push("--passes");
        push(&a.passes.to_string());
    }
    if a.warmup > 0 && !a.no_timing {
        push("--warmup");
        push(&a.warmup.to_string());
    }
    push("--verify");
    if let Some(c) = a.cache {
        push("--cache");
        push(match c {
            CacheMode::Flush => "flush",
            CacheMode::Keep => "keep",
        });
    }
    if !a.metrics.is_empty() {
        push("--metrics");
        push(&a.metrics.join(","));
    }
    for (on, flag) in [
        (a.relocate, "--relocate"),
        (a.ptx, "--ptx"),
        (a.per_step, "--per-step"),
    ] {
        if on {
            push(flag);
        }
    }
    for (flag, path) in [("--module", &a.module), ("--tool", &a.tool)] {
        if let Some(p) = path {
            v.push(flag.into());
            v.push(p.into());
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn play_args(argv: &[&str]) -> PlayArgs {
        let argv = ["kreplay", "play"].iter().chain(argv);
        match crate::cli::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::cli::Command::Play(a)) => a,
            Ok(_) => panic!("not parsed as play"),
            Err(e) => panic!("{e}"),
        }
    }

    fn words(a: &PlayArgs) -> Vec<String> {
        child_args(a)
            .expect("args")
            .into_iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn each_replay_option_reaches_the_children_with_verify_always() {
        let a = play_args(&[
            "d/",
            "--passes",
            "5",
            "--warmup",
            "2",
            "--cache",
            "flush",
            "--relocate",
            "--ptx",
            "--metrics",
            "a.sum,b.avg",
        ]);
        assert_eq!(
            words(&a),
            [
                "--passes",
                "5",
                "--warmup",
                "2",
                "--verify",
                "--cache",
                "flush",
                "--metrics",
                "a.sum,b.avg",
                "--relocate",
                "--ptx"
            ]
        );
        assert_eq!(words(&play_args(&["d/"])), ["--passes", "1", "--verify"]);
    }

    // Catches: --no-timing leaving the timed passes in, or --tool clashing with --passes.
    #[test]
    fn no_timing_is_one_verified_pass_and_a_tool_chooses_its_own() {
        assert_eq!(
            words(&play_args(&["d/", "--no-timing"])),
            ["--passes", "1", "--verify"]
        );
        let tool = words(&play_args(&["d/", "--tool", "t.so"]));
        assert_eq!(tool, ["--verify", "--tool", "t.so"]);
        assert!(crate::cli::Cli::try_parse_from([
            "kreplay",
            "play",
            "d/",
            "--no-timing",
            "--passes",
            "3"
        ])
        .is_err());
    }

    #[test]
    fn one_output_flags_are_refused_with_many() {
        for argv in [
            &["d/", "--save-output", "o.krr"][..],
            &["d/", "--json"],
            &["d/", "--csv"],
            &["d/", "--device", "1"],
        ] {
            let e = child_args(&play_args(argv)).expect_err("refused");
            assert!(e.to_string().contains("with many captures"), "{e}");
        }
    }

    #[test]
    fn one_capture_file_stays_a_single_replay_unless_many_flags_are_given() {
        let f = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/captures/cuda-saxpy.krr"
        );
        assert!(!play_wants_many(&play_args(&[f])));
        assert!(!play_wants_many(&play_args(&[
            f, "--passes", "3", "--verify"
        ])));
        assert!(play_wants_many(&play_args(&[f, "--json-lines", "r.jsonl"])));
        assert!(play_wants_many(&play_args(&[f, "--timeout", "3"])));
        assert!(play_wants_many(&play_args(&[f, "--html", "r.html"])));
        assert!(play_wants_many(&play_args(&[f, f])));
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/captures");
        assert!(play_wants_many(&play_args(&[dir])));
    }
}
