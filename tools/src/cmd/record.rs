//! `kreplay record` and `kreplay list`: run the application with the recorder injected.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::{bail, Context};
use kreplay_protocol::config::{
    base_name, check_record_output, env, expand_output, fixed_directory, host_name, rank_from,
    uses_placeholder, KernelFilter, CAPTURES_DIR, PARTIALS_DIR, STARTED_DIR,
};
use kreplay_protocol::report::{CaptureSummary, KernelStat, ProcessReport};

use super::list_ranges;
use super::record_corpus::CorpusDir;
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

pub(crate) struct Run {
    pub(crate) status: std::process::ExitStatus,
    pub(crate) reports: Vec<ProcessReport>,
    /// Captures completed by processes that wrote no report (they ended through `_exit` or
    /// `exec`, or were killed, after the capture was written).
    orphan_captures: Vec<CaptureSummary>,
    /// `.partial` files removed: captures the application did not live to finish.
    unfinished: Vec<PathBuf>,
    /// Processes in which the recorder noted its start (pids).
    started: Vec<u32>,
}

/// The application's pid while it runs (0 otherwise), for the signal handler.
static CHILD: AtomicI32 = AtomicI32::new(0);

/// The last of the forwarded signals kreplay itself received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// SIGINT/SIGTERM/SIGHUP/SIGQUIT sent to kreplay itself are passed on to the application, and
/// kreplay waits for it to end (then cleans up). A Ctrl-C at the terminal already reaches
/// the whole process group (the kernel sends it, `si_code` SI_KERNEL): it is not sent again.
extern "C" fn forward_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let from_process = !info.is_null() && {
        // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
        let code = unsafe { (*info).si_code };
        code == libc::SI_USER || code == libc::SI_QUEUE || code == libc::SI_TKILL
    };
    let child = CHILD.load(Ordering::SeqCst);
    if from_process && child > 0 {
        // Only a signal actually passed on is told as such (a terminal's Ctrl-C reached the
        // application by itself).
        RECEIVED.store(sig, Ordering::SeqCst);
        // SAFETY: kill is async-signal-safe; child is the pid of our own child process.
        unsafe {
            libc::kill(child, sig);
        }
    }
}

const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

fn install_forwarding() {
    for sig in FORWARDED {
        // SAFETY: sigaction is plain data; the handler only uses atomics and calls kill.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// A private directory for the recorder's reports: created fresh (never an existing one,
/// which someone else could have planted), mode 0700, removed on drop.
struct ReportDir(PathBuf);

impl ReportDir {
    fn create() -> anyhow::Result<ReportDir> {
        let dir = std::env::temp_dir().join(format!(
            "kreplay-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(ReportDir(dir))
    }

    fn reports(&self) -> Vec<ProcessReport> {
        let mut reports = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&self.0) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                match std::fs::read(e.path()).map(|b| serde_json::from_slice::<ProcessReport>(&b)) {
                    Ok(Ok(r)) => reports.push(r),
                    _ => crate::warn!("kreplay: ignoring unreadable report {}", e.path().display()),
                }
            }
        }
        reports.sort_by_key(|r| (r.rank, r.pid));
        reports
    }

    /// Capture summaries the recorder wrote as each capture finished, for processes that
    /// left no report.
    fn orphan_captures(&self, reports: &[ProcessReport]) -> Vec<CaptureSummary> {
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.0.join(CAPTURES_DIR)) else {
            return out;
        };
        for e in entries.flatten() {
            let Ok(Ok(c)) =
                std::fs::read(e.path()).map(|b| serde_json::from_slice::<CaptureSummary>(&b))
            else {
                continue;
            };
            if !reports
                .iter()
                .flat_map(|r| &r.captures)
                .any(|r| r.file == c.file)
            {
                out.push(c);
            }
        }
        out.sort_by(|a, b| a.file.cmp(&b.file));
        out
    }

    /// Removes the `.partial` files of captures the application did not live to finish
    /// (killed by a signal, `_exit`, `exec`); returns their paths.
    fn started(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = std::fs::read_dir(self.0.join(STARTED_DIR))
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        pids.sort_unstable();
        pids
    }

    /// Removes the `.partial` files the recorder noted for captures it did not finish
    /// (killed by a signal, `_exit`, `exec`); returns their paths.
    fn remove_unfinished(&self) -> Vec<PathBuf> {
        let mut removed = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.0.join(PARTIALS_DIR)) else {
            return removed;
        };
        for e in entries.flatten() {
            let Ok(bytes) = std::fs::read(e.path()) else {
                continue;
            };
            let path = PathBuf::from(std::ffi::OsString::from_vec(bytes));
            let is_partial = path.extension().is_some_and(|x| x == "partial");
            if is_partial
                && std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file())
                && std::fs::remove_file(&path).is_ok()
            {
                removed.push(path);
            }
        }
        removed
    }
}

impl Drop for ReportDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn run_app(command: &[String], vars: &[(&str, String)]) -> anyhow::Result<Run> {
    let lib = recorder_library()?;
    if let Ok(other) = std::env::var("CUDA_INJECTION64_PATH") {
        if !other.is_empty() {
            crate::warn!("kreplay: note: replacing CUDA_INJECTION64_PATH={other} for the recorded application");
        }
    }
    if let Ok(other) = std::env::var("NVTX_INJECTION64_PATH") {
        if !other.is_empty() {
            crate::warn!("kreplay: note: replacing NVTX_INJECTION64_PATH={other} for the recorded application");
        }
    }
    let report_dir = ReportDir::create()?;
    let (prog, args) = command.split_first().context("no command given")?;
    let mut cmd = Command::new(prog);
    // The same library serves CUDA's and NVTX's injection hooks (NVTX ranges select and
    // label launches).
    cmd.args(args)
        .env("CUDA_INJECTION64_PATH", &lib)
        .env("NVTX_INJECTION64_PATH", &lib)
        .env(env::REPORT_DIR, &report_dir.0);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    install_forwarding();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
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
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    let status = child.wait();
    CHILD.store(0, Ordering::SeqCst);
    let status = status.with_context(|| format!("waiting for {prog}"))?;
    let unfinished = report_dir.remove_unfinished();
    for p in &unfinished {
        crate::warn!(
            "kreplay: removed {}: the application ended ({status}) before the capture was complete",
            crate::output::printable(&p.display().to_string())
        );
    }
    let reports = report_dir.reports();
    let orphan_captures = report_dir.orphan_captures(&reports);
    Ok(Run {
        status,
        reports,
        orphan_captures,
        unfinished,
        started: report_dir.started(),
    })
}

pub(crate) fn app_exit_code(status: std::process::ExitStatus) -> ExitCode {
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

/// When recording stood down in every process that reported: (for stderr, where the
/// recorder already said why; for JSON, with the first reason).
fn all_disabled(reports: &[ProcessReport]) -> Option<(String, String)> {
    let why: Vec<&str> = reports
        .iter()
        .filter_map(|r| r.disabled.as_deref())
        .collect();
    if why.is_empty() || why.len() < reports.len() {
        return None;
    }
    let n = why.len();
    Some((
        format!("recording was disabled in {n} process(es), see above"),
        format!("recording was disabled in {n} process(es): {}", why[0]),
    ))
}

/// A signal's name (`SIGTERM`), or its number.
fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

impl Run {
    /// Whether anything shows that the recorder ran in some process: a report, a capture
    /// finished, or a capture file begun.
    pub(crate) fn recorder_seen(&self) -> bool {
        !self.reports.is_empty() || !self.orphan_captures.is_empty() || !self.unfinished.is_empty()
    }

    /// Why no process reported, for a run where nothing shows that the recorder ran. True
    /// whatever happened: the recorder reports when the application exits and notes each
    /// capture file it begins, so an application killed before it exits leaves no trace of
    /// a recorder that had started.
    pub(crate) fn silence(&self, prog: &str) -> String {
        use std::os::unix::process::ExitStatusExt;
        let kreplay = match RECEIVED.load(Ordering::SeqCst) {
            0 => String::new(),
            r => format!(" (kreplay received {} and passed it on)", signal_name(r)),
        };
        if !self.started.is_empty() {
            let pids: Vec<String> = self.started.iter().map(|p| p.to_string()).collect();
            let how = match self.status.signal() {
                Some(sig) => format!("{prog} was killed by {}{kreplay}", signal_name(sig)),
                // The pid may be a grandchild (under a shell, torchrun or mpirun), whose death
                // by a signal reaches kreplay only as the launcher's exit status.
                None => format!(
                    "{prog} exited with {} and the process that ran the recorder ended without its report (killed, _exit, exec or a crash)",
                    self.status
                ),
            };
            return format!(
                "the recorder had started (pid {}), but no process reported: {how}; the recorder reports when its process exits; nothing was recorded",
                pids.join(", ")
            );
        }
        if let Some(sig) = self.status.signal() {
            return format!(
                "no report from the recorder: {prog} was killed by {}{kreplay} before it exited, and the recorder reports when the application exits, so kreplay cannot tell whether it had started; nothing was recorded",
                signal_name(sig)
            );
        }
        match kreplay_cuda::ensure_driver() {
            Err(why) => format!("the recorder never started in {prog}: {why}"),
            Ok(()) => format!(
                "the recorder never started in {prog}: it never initialised CUDA (the CUDA driver loads the recorder in cuInit): is it a CUDA application? (a process that ends through _exit or exec cannot report either)"
            ),
        }
    }
}

fn merge_kernels(reports: &[ProcessReport]) -> Vec<KernelStat> {
    let mut by_name: HashMap<String, KernelStat> = HashMap::new();
    for r in reports {
        for k in &r.kernels {
            by_name
                .entry(k.name.clone())
                .and_modify(|e| {
                    e.count += k.count;
                    e.in_graphs += k.in_graphs;
                })
                .or_insert_with(|| k.clone());
        }
    }
    let mut v: Vec<KernelStat> = by_name.into_values().collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
    v
}

pub fn run_record(a: RecordArgs) -> anyhow::Result<ExitCode> {
    let kernel = a.kernel.clone().unwrap_or_default();
    if a.kernel.is_some() {
        KernelFilter::parse(&kernel).map_err(anyhow::Error::msg)?;
    }
    if let Some(n) = &a.nvtx_include {
        kreplay_protocol::nvtx::NvtxFilter::parse(n).map_err(anyhow::Error::msg)?;
    }
    let nth = a.launch_skip.map_or(a.nth, |s| s.saturating_add(1));
    let count = a.launch_count.unwrap_or(a.count);
    let corpus = if a.each_kernel {
        Some(CorpusDir::prepare(&a)?)
    } else {
        check_output(&a, count)?;
        None
    };
    let mut vars = recorder_vars(&a, &kernel, nth, count);
    if let Some(c) = &corpus {
        c.apply(&a, &mut vars);
    }
    // The recorder reads these settings in the application; what it would refuse (a flag that
    // does not combine with another) is refused here, before the application starts.
    kreplay_protocol::config::Config::from_lookup(|k| {
        vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let run = run_app(&a.command, &vars)?;
    // Without a trace of the recorder there is no corpus to describe.
    let manifest = match &corpus {
        Some(c) if run.recorder_seen() => {
            Some(c.write_manifest(&a, &run.reports, &run.orphan_captures)?)
        }
        _ => None,
    };
    let captures: Vec<_> = run
        .reports
        .iter()
        .flat_map(|r| r.captures.iter())
        .chain(run.orphan_captures.iter())
        .collect();
    let errors: Vec<_> = run.reports.iter().flat_map(|r| r.errors.iter()).collect();
    // Why nothing was captured (`None`: something was), for stderr and for --json's `error`.
    let error = why_nothing(&a, &run, (captures.is_empty(), errors.is_empty()), nth);
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
                "corpus": corpus.as_ref().map(|c| c.manifest_path()),
                "left_out": manifest.map(|m| m.left_out).unwrap_or_default(),
                "error": error,
            }),
        )?;
        out!(w);
    }
    if run.reports.is_empty() {
        if let Some(e) = &error {
            crate::warn!("kreplay: {e}");
        }
        if !run.status.success() {
            return Ok(app_exit_code(run.status));
        }
        return Ok(if captures.is_empty() {
            ExitCode::from(3)
        } else {
            ExitCode::SUCCESS
        });
    }
    if !run.status.success() {
        crate::warn!("kreplay: the application exited with {}", run.status);
        return Ok(app_exit_code(run.status));
    }
    let Some(error) = error else {
        // Per-capture summaries went to stderr from the recorder itself: stdout stays the
        // application's own.
        return Ok(ExitCode::SUCCESS);
    };
    explain_nothing(&a, &run, &kernel, &error, errors.is_empty());
    Ok(ExitCode::from(3))
}

/// Why nothing was captured (`None`: something was), for stderr and --json's `error`.
fn why_nothing(
    a: &RecordArgs,
    run: &Run,
    (nothing, no_errors): (bool, bool),
    nth: u64,
) -> Option<String> {
    let disabled = run.reports.iter().filter(|r| r.disabled.is_some()).count();
    let matches: u64 = run.reports.iter().map(|r| r.matches).sum();
    let what = selection(a);
    if !nothing {
        None
    } else if !run.recorder_seen() {
        Some(run.silence(&a.command[0]))
    } else if run.reports.is_empty() {
        Some("nothing captured: the application ended (exec, _exit or a signal) before the capture was written".into())
    } else if disabled == run.reports.len() {
        // The application ran untouched.
        all_disabled(&run.reports).map(|(_, why)| format!("nothing captured: {why}"))
    } else if matches == 0 {
        Some(format!("no dispatch matched {what}"))
    } else if a.each_kernel && no_errors {
        Some(format!(
            "{what} matched {matches} dispatch(es), and the corpus kept none of them"
        ))
    } else if no_errors {
        Some(format!(
            "{what} matched {matches} dispatch(es), fewer than --nth {nth}"
        ))
    } else {
        Some("nothing captured: the recorder's errors are above".into())
    }
}

/// What the recorder in the application is told: the selection, the output, the memory scope.
fn recorder_vars(
    a: &RecordArgs,
    kernel: &str,
    nth: u64,
    count: u64,
) -> Vec<(&'static str, String)> {
    vec![
        (env::MODE, "record".to_string()),
        (env::KERNEL, kernel.to_string()),
        (env::NTH, nth.to_string()),
        (env::COUNT, count.to_string()),
        (
            env::LAUNCH_INDEX,
            a.launch_index.map_or(String::new(), |i| i.to_string()),
        ),
        (
            env::LAUNCH_RANGE,
            a.launch_range.map_or(String::new(), |r| r.env_value()),
        ),
        (env::OUTPUT, a.output.clone()),
        (env::FORCE, if a.force { "1" } else { "0" }.to_string()),
        (env::QUIET, if a.quiet { "1" } else { "0" }.to_string()),
        (
            env::NVTX_INCLUDE,
            a.nvtx_include.clone().unwrap_or_default(),
        ),
        (env::NVTX_RANGE, a.nvtx_range.clone().unwrap_or_default()),
        (
            env::PROFILER_RANGE,
            if a.profiler_range { "1" } else { "0" }.to_string(),
        ),
        (
            env::GRAPH_LAUNCH,
            if a.graph_launch { "1" } else { "0" }.to_string(),
        ),
        (env::MEMORY, a.memory.env_value().to_string()),
    ]
}

/// Says on stderr why nothing was captured (`error`), with the kernels closest to what was
/// asked for when nothing matched; the recorder's own errors (`no_errors` false) already said.
fn explain_nothing(a: &RecordArgs, run: &Run, kernel: &str, error: &str, no_errors: bool) {
    let disabled = run.reports.iter().filter(|r| r.disabled.is_some()).count();
    let matches: u64 = run.reports.iter().map(|r| r.matches).sum();
    if matches == 0 && disabled < run.reports.len() {
        let kernels = merge_kernels(&run.reports);
        if a.kernel
            .as_deref()
            .is_some_and(|k| !k.starts_with("regex:"))
        {
            crate::warn!(
                "kreplay: {error}: a plain name matches a kernel's function name or mangled name exactly (as ncu does); `-k regex:{kernel}` searches instead."
            );
        } else {
            crate::warn!("kreplay: {error}.");
        }
        let close = closest(kernel, &kernels);
        let (title, list): (&str, Vec<&KernelStat>) = if close.is_empty() {
            ("most frequent kernels", kernels.iter().collect())
        } else {
            ("closest kernels", close)
        };
        crate::warn!("kreplay: {title} (count, first launch, function, name):");
        for k in list.iter().take(10) {
            crate::warn!(
                "  {:>8} {:>8}  {:<24} {}",
                k.count,
                k.first_launch,
                base_name(&k.demangled),
                k.demangled
            );
        }
    } else if let Some((said, _)) = all_disabled(&run.reports) {
        crate::warn!("kreplay: nothing captured: {said}");
    } else if no_errors {
        crate::warn!("kreplay: {error}");
    }
}

/// Refuses, before the application starts, an output name that cannot work: an unknown
/// placeholder, `--count` above 1 without `%n`, a directory that cannot be created or
/// written in, and a fixed name that exists (without `--force`) or is a directory.
fn check_output(a: &RecordArgs, count: u64) -> anyhow::Result<()> {
    let pattern = &a.output;
    check_record_output(pattern, count).map_err(anyhow::Error::msg)?;
    let dir = fixed_directory(pattern).unwrap_or_else(|| PathBuf::from("."));
    super::check_output_dir(&dir, &format!("-o {pattern}"))?;
    // A name with no per-process, per-match or per-kernel part is known now.
    if !['p', 'n', 'k']
        .iter()
        .any(|&c| uses_placeholder(pattern, c))
    {
        let path = expand_output(
            pattern,
            0,
            rank_from(|k| std::env::var(k).ok()),
            &host_name(),
            0,
            "",
        );
        if let Ok(m) = std::fs::symlink_metadata(&path) {
            if m.is_dir() {
                bail!(
                    "-o {pattern}: {path} is a directory: name a file (e.g. {path}/%k-%p-%n.krr)"
                );
            }
            if !a.force {
                bail!("-o {pattern}: {path} already exists: pass --force to replace it");
            }
        }
    }
    Ok(())
}

/// How the user selected the dispatch, for messages.
fn selection(a: &RecordArgs) -> String {
    if a.each_kernel {
        return match (&a.kernel, &a.nvtx_include) {
            (None, None) => "--each-kernel".into(),
            (Some(k), None) => format!("--each-kernel -k '{k}'"),
            (None, Some(n)) => format!("--each-kernel inside NVTX range '{n}'"),
            (Some(k), Some(n)) => format!("--each-kernel -k '{k}' inside NVTX range '{n}'"),
        };
    }
    if let Some(r) = a.launch_range {
        return format!("--launch-range {}", r.env_value());
    }
    if let Some(n) = &a.nvtx_range {
        return format!("--nvtx-range '{n}' --nth {}", a.nth);
    }
    if a.profiler_range {
        return format!("--profiler-range --nth {}", a.nth);
    }
    if let (true, Some(k)) = (a.graph_launch, &a.kernel) {
        return format!("-k '{k}' --graph-launch --nth {}", a.nth);
    }
    let base = match (&a.kernel, a.launch_index) {
        (Some(k), None) => format!("-k '{k}'"),
        (Some(k), Some(i)) => format!("-k '{k}' at --launch-index {i}"),
        (None, Some(i)) => format!("--launch-index {i}"),
        (None, None) => "nothing".into(),
    };
    match &a.nvtx_include {
        Some(n) => format!("{base} inside NVTX range '{n}'"),
        None => base,
    }
}

/// Kernels whose names resemble what the user typed: the function name or a name contains
/// it (case-insensitively), or it contains the function name; most frequent first.
fn closest<'a>(typed: &str, kernels: &'a [KernelStat]) -> Vec<&'a KernelStat> {
    let typed = typed.strip_prefix("regex:").unwrap_or(typed).to_lowercase();
    if typed.is_empty() {
        return Vec::new();
    }
    kernels
        .iter()
        .filter(|k| {
            let base = base_name(&k.demangled).to_lowercase();
            (!base.is_empty() && (base.contains(&typed) || typed.contains(&base)))
                || k.demangled.to_lowercase().contains(&typed)
                || k.name.to_lowercase().contains(&typed)
        })
        .collect()
}

pub fn run_list(a: ListArgs) -> anyhow::Result<ExitCode> {
    let mut vars = vec![(env::MODE, "list".to_string())];
    if a.ranges {
        vars.push((env::LIST_RANGES, "1".to_string()));
    }
    let run = run_app(&a.command, &vars)?;
    // No process reported, or recording stood down in every one: there is no list to print,
    // and an empty one would read as "no kernels ran".
    let error = if run.reports.is_empty() {
        let e = run.silence(&a.command[0]);
        Some((e.clone(), e))
    } else {
        all_disabled(&run.reports)
    };
    if let Some((said, error)) = error {
        if a.json {
            let stdout = std::io::stdout();
            let mut w = stdout.lock();
            let mut failed = serde_json::json!({"error": error, "kernels": []});
            if a.ranges {
                failed["ranges"] = serde_json::json!([]);
            }
            serde_json::to_writer(&mut w, &failed)?;
            out!(w);
        }
        crate::warn!("kreplay: {said}");
        return Ok(if run.status.success() {
            ExitCode::from(3)
        } else {
            app_exit_code(run.status)
        });
    }
    let kernels = merge_kernels(&run.reports);
    let (ranges, left_out) = list_ranges::ranges_of(&run.reports);
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if a.json && a.ranges {
        serde_json::to_writer(&mut w, &list_ranges::json(&kernels, &ranges, left_out))?;
        out!(w);
    } else if a.json {
        serde_json::to_writer(&mut w, &kernels)?;
        out!(w);
    } else if a.csv {
        write_kernels_csv(&mut w, &kernels)?;
    } else {
        print_kernels(&mut w, &kernels)?;
        if a.ranges {
            for line in list_ranges::range_lines(&ranges, left_out) {
                out!(w, "{line}");
            }
        }
    }
    Ok(app_exit_code(run.status))
}

/// `list --csv`: one row a kernel.
fn write_kernels_csv(w: &mut impl Write, kernels: &[KernelStat]) -> anyhow::Result<()> {
    let mut rows = vec![[
        "count",
        "in_graphs",
        "first_launch",
        "grid",
        "block",
        "nvtx",
        "name",
        "demangled",
    ]
    .map(String::from)
    .to_vec()];
    for k in kernels {
        rows.push(vec![
            k.count.to_string(),
            k.in_graphs.to_string(),
            k.first_launch.to_string(),
            format!("{}x{}x{}", k.grid[0], k.grid[1], k.grid[2]),
            format!("{}x{}x{}", k.block[0], k.block[1], k.block[2]),
            k.nvtx.clone().unwrap_or_default(),
            k.name.clone(),
            k.demangled.clone(),
        ]);
    }
    crate::output::write_csv(w, &rows)
}

/// `list` as a table, with an NVTX column when the application uses NVTX.
fn print_kernels(w: &mut impl Write, kernels: &[KernelStat]) -> anyhow::Result<()> {
    // The innermost NVTX range at each kernel's first launch, when the app uses NVTX.
    let nvtx_width = kernels
        .iter()
        .filter_map(|k| k.nvtx.as_ref().map(|n| n.chars().count()))
        .max()
        .map(|n| n.clamp(4, 40) + 1);
    let nvtx = |k: &KernelStat| -> String {
        match nvtx_width {
            Some(wd) => {
                let n: String = k.nvtx.as_deref().unwrap_or("-").chars().take(40).collect();
                format!("{:<wd$}", crate::output::printable(&n))
            }
            None => String::new(),
        }
    };
    let header = match nvtx_width {
        Some(wd) => format!("{:<wd$}", "nvtx"),
        None => String::new(),
    };
    out!(
        w,
        "{:>8} {:>8} {:>8}  {:<16} {:<14} {header}kernel",
        "count",
        "in graph",
        "first",
        "grid",
        "block"
    );
    for k in kernels {
        out!(
            w,
            "{:>8} {:>8} {:>8}  {:<16} {:<14} {}{}",
            k.count,
            k.in_graphs,
            k.first_launch,
            format!("({},{},{})", k.grid[0], k.grid[1], k.grid[2]),
            format!("({},{},{})", k.block[0], k.block[1], k.block[2]),
            nvtx(k),
            k.demangled
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(demangled: &str, count: u64) -> KernelStat {
        KernelStat {
            name: format!("_Z{demangled}"),
            demangled: demangled.into(),
            count,
            ..Default::default()
        }
    }

    #[test]
    fn closest_names_for_a_name_that_matched_nothing() {
        let ks = vec![
            stat(
                "void at::native::vectorized_elementwise_kernel<4, sigmoid>(int)",
                9,
            ),
            stat("saxpy(int, float, float const*, float*)", 3),
            stat("void cutlass::Kernel2<cutlass_80_simt_sgemm>(Params)", 1),
        ];
        let names = |typed: &str| -> Vec<String> {
            closest(typed, &ks)
                .iter()
                .map(|k| base_name(&k.demangled))
                .collect()
        };
        assert_eq!(names("sax"), ["saxpy"]);
        assert_eq!(names("SGEMM"), ["Kernel2"]);
        assert_eq!(names("regex:sigmoid"), ["vectorized_elementwise_kernel"]);
        assert_eq!(names("saxpy_kernel"), ["saxpy"]);
        assert!(names("zzz").is_empty());
    }
}
