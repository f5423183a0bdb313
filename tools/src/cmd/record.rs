//! `kreplay record` and `kreplay list`: run the application with the recorder injected.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use kreplay_record::config::env;
use kreplay_record::report::{KernelStat, ProcessReport};

use crate::cli::{ListArgs, RecordArgs};
use crate::out;

const LIB_NAME: &str = "libkreplay_record.so";

/// Where the injected library is: `KREPLAY_RECORD_LIB`, or next to this executable.
fn recorder_library() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("KREPLAY_RECORD_LIB") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("KREPLAY_RECORD_LIB={} does not exist", p.display());
    }
    let exe = std::env::current_exe().context("cannot locate the kreplay executable")?;
    let dir = exe
        .parent()
        .context("the kreplay executable has no directory")?;
    let p = dir.join(LIB_NAME);
    if p.is_file() {
        return Ok(p.canonicalize().unwrap_or(p));
    }
    bail!(
        "{LIB_NAME} was not found next to {}: keep it in the same directory as kreplay, or set KREPLAY_RECORD_LIB",
        exe.display()
    )
}

struct Run {
    status: std::process::ExitStatus,
    reports: Vec<ProcessReport>,
}

fn run_app(command: &[String], vars: &[(&str, String)]) -> anyhow::Result<Run> {
    let lib = recorder_library()?;
    if let Ok(other) = std::env::var("CUDA_INJECTION64_PATH") {
        if !other.is_empty() {
            eprintln!("kreplay: note: replacing CUDA_INJECTION64_PATH={other} for the recorded application");
        }
    }
    let report_dir = std::env::temp_dir().join(format!(
        "kreplay-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&report_dir)
        .with_context(|| format!("cannot create {}", report_dir.display()))?;
    let (prog, args) = command.split_first().context("no command given")?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env("CUDA_INJECTION64_PATH", &lib)
        .env(env::REPORT_DIR, &report_dir);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&report_dir);
            let hint = if e.kind() == std::io::ErrorKind::NotFound {
                if prog.contains('/') {
                    " (no such file: check the path)"
                } else {
                    " (not found on PATH: give its path, e.g. ./app)"
                }
            } else {
                ""
            };
            return Err(e).with_context(|| format!("cannot start {prog}{hint}"));
        }
    };
    let mut reports = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&report_dir) {
        for e in entries.flatten() {
            match std::fs::read(e.path()).map(|b| serde_json::from_slice::<ProcessReport>(&b)) {
                Ok(Ok(r)) => reports.push(r),
                _ => eprintln!("kreplay: ignoring unreadable report {}", e.path().display()),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&report_dir);
    reports.sort_by_key(|r| (r.rank, r.pid));
    Ok(Run { status, reports })
}

fn app_exit_code(status: std::process::ExitStatus) -> ExitCode {
    if let Some(c) = status.code() {
        return ExitCode::from(c.clamp(0, 255) as u8);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return ExitCode::from((128 + sig).clamp(0, 255) as u8);
        }
    }
    ExitCode::FAILURE
}

fn merge_kernels(reports: &[ProcessReport]) -> Vec<KernelStat> {
    let mut by_name: HashMap<String, KernelStat> = HashMap::new();
    for r in reports {
        for k in &r.kernels {
            by_name
                .entry(k.name.clone())
                .and_modify(|e| e.count += k.count)
                .or_insert_with(|| k.clone());
        }
    }
    let mut v: Vec<KernelStat> = by_name.into_values().collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
    v
}

pub fn run_record(a: RecordArgs) -> anyhow::Result<ExitCode> {
    regex::Regex::new(&a.kernel)
        .with_context(|| format!("-k {}: not a valid regular expression", a.kernel))?;
    let vars = [
        (env::MODE, "record".to_string()),
        (env::KERNEL, a.kernel.clone()),
        (env::NTH, a.nth.to_string()),
        (env::COUNT, a.count.to_string()),
        (env::OUTPUT, a.output.clone()),
        (
            env::MEMORY,
            match a.memory {
                crate::cli::MemoryScope::Reachable => "reachable",
                crate::cli::MemoryScope::All => "all",
            }
            .to_string(),
        ),
    ];
    let run = run_app(&a.command, &vars)?;
    let captures: Vec<_> = run.reports.iter().flat_map(|r| r.captures.iter()).collect();
    let errors: Vec<_> = run.reports.iter().flat_map(|r| r.errors.iter()).collect();
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if a.json {
        serde_json::to_writer(
            &mut w,
            &serde_json::json!({
                "exit_code": run.status.code(),
                "captures": captures,
                "errors": errors,
                "processes": run.reports.len(),
            }),
        )?;
        out!(w);
    }
    if run.reports.is_empty() {
        eprintln!("kreplay: the recorder never started in {}: is it a CUDA application, and does it reach cuInit? (the CUDA driver loads the recorder on cuInit)", a.command[0]);
        if run.status.success() {
            return Ok(ExitCode::from(3));
        }
        return Ok(app_exit_code(run.status));
    }
    if !run.status.success() {
        eprintln!("kreplay: the application exited with {}", run.status);
        return Ok(app_exit_code(run.status));
    }
    let disabled = run.reports.iter().filter(|r| r.disabled.is_some()).count();
    if captures.is_empty() && disabled == run.reports.len() {
        // The recorder printed why it stood down; the application ran untouched.
        eprintln!("kreplay: nothing captured: recording was disabled in {disabled} process(es), see above");
        return Ok(ExitCode::from(3));
    }
    if captures.is_empty() {
        let matches: u64 = run.reports.iter().map(|r| r.matches).sum();
        if matches > 0 && errors.is_empty() {
            eprintln!(
                "kreplay: -k '{}' matched {matches} dispatch(es), fewer than --nth {}",
                a.kernel, a.nth
            );
        } else if matches == 0 {
            eprintln!(
                "kreplay: no dispatch matched -k '{}'. Most frequent kernels:",
                a.kernel
            );
            for k in merge_kernels(&run.reports).iter().take(10) {
                eprintln!("  {:>8}  {}", k.count, k.demangled);
            }
        }
        return Ok(ExitCode::from(3));
    }
    // Per-capture summaries went to stderr from the recorder itself: stdout stays the
    // application's own.
    Ok(ExitCode::SUCCESS)
}

pub fn run_list(a: ListArgs) -> anyhow::Result<ExitCode> {
    let run = run_app(&a.command, &[(env::MODE, "list".to_string())])?;
    if run.reports.is_empty() {
        eprintln!(
            "kreplay: the recorder never started in {}: is it a CUDA application?",
            a.command[0]
        );
    }
    let kernels = merge_kernels(&run.reports);
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if a.json {
        serde_json::to_writer(&mut w, &kernels)?;
        out!(w);
    } else {
        out!(w, "{:>8}  {:<16} {:<14} kernel", "count", "grid", "block");
        for k in &kernels {
            out!(
                w,
                "{:>8}  {:<16} {:<14} {}",
                k.count,
                format!("({},{},{})", k.grid[0], k.grid[1], k.grid[2]),
                format!("({},{},{})", k.block[0], k.block[1], k.block[2]),
                k.demangled
            );
        }
    }
    Ok(app_exit_code(run.status))
}
