//! `kreplay play`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::Capture;
use kreplay_player::{
    CacheState, CodeChoice, MetricsReport, PlayFailure, PlayObserver, PlayOptions, PlayOutcome,
    PlayReport, SaveOutput, SaveStep,
};

use crate::cli::{CacheMode, PlayArgs};
use crate::describe::{bytes, demangle, duration};
use crate::out;

pub fn run(a: PlayArgs) -> anyhow::Result<ExitCode> {
    if a.list_metrics {
        return list_metrics(&a);
    }
    if super::farm::play_wants_many(&a) {
        return super::farm::play(&a);
    }
    let Some(path) = a.files.first() else {
        anyhow::bail!("no capture file given");
    };
    // Before any replay: the output must be writable when the replay is done.
    if let Some(out) = &a.save_output {
        super::check_new_output(out, a.force, "--save-output")?;
    }
    if let Some(out) = &a.trace {
        super::check_new_output(out, a.force, "--trace")?;
    }
    let file = super::open(path)?;
    let cap = Capture::parse(file.bytes()).with_context(|| format!("{}", path.display()))?;
    let options = options(&a)?;
    if let Some(s) = &options.save_step {
        super::check_new_output(&s.path, a.force, "--save-step")?;
        if let Some(why) = kreplay_player::save_step_problem(&cap, s.index) {
            anyhow::bail!("{}: {why}", path.display());
        }
    }
    let outcome = {
        // Device printf of the replayed kernel goes to stderr while stdout carries JSON or CSV.
        let _device_output = crate::output::StdoutToStderr::new(a.json || a.csv);
        let mut observer = Terminal {
            memory: cap.regions.iter().map(|r| r.size).sum(),
            loading: None,
            quiet: a.quiet,
        };
        // Each chunk's file pages are dropped once uploaded (and once verified): a capture
        // larger than host memory replays in bounded memory.
        let release = |start: u64, end: u64| file.release(start, end);
        kreplay_player::play(&cap, &options, &release, &mut observer)
            .map_err(|e| cli_error(e, path, &options))?
    };
    if let Some(out) = &a.trace {
        write_trace(out, &cap, &outcome, path)?;
    }
    print_outcome(&a, &outcome)?;
    if outcome.verification_failed() {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--trace FILE.json`: the passes as a trace.
fn write_trace(out: &Path, cap: &Capture<'_>, o: &PlayOutcome, path: &Path) -> anyhow::Result<()> {
    let trace = kreplay_player::trace_of(cap, o, &path.display().to_string());
    std::fs::write(out, trace.to_json())
        .with_context(|| format!("cannot write the trace to {}", out.display()))
}

/// The replay's progress and warnings on stderr.
struct Terminal {
    /// The capture's memory bytes: whether loading is worth a bar.
    memory: u64,
    loading: Option<crate::progress::Progress>,
    quiet: bool,
}

impl PlayObserver for Terminal {
    fn loading(&mut self, done: u64, total: u64) {
        let memory = self.memory;
        self.loading
            .get_or_insert_with(|| crate::progress::Progress::bytes("loading", memory))
            .set("loading", done, total);
    }

    fn loaded(&mut self) {
        self.loading = None;
    }

    fn warning(&mut self, text: &str) {
        if !self.quiet {
            crate::warn!("kreplay: warning: {}", crate::output::printable(text));
        }
    }
}

/// A failed replay, worded with the capture's path and the --save-output file.
fn cli_error(e: PlayFailure, path: &Path, options: &PlayOptions) -> anyhow::Error {
    let (what, cause) = match e {
        PlayFailure::Blocked(why) => {
            return anyhow::anyhow!("{} cannot be replayed: {}", path.display(), why.join("; "))
        }
        PlayFailure::Tool(t) => return anyhow::Error::new(t),
        PlayFailure::Counters(c) => ("cannot collect counters".to_string(), c),
        PlayFailure::Open(c) => (format!("cannot replay {}", path.display()), c),
        PlayFailure::Run {
            source,
            heap_note: Some(n),
        } => (
            format!(
                "replay failed (the kernel reads the device heap, not captured: {})",
                crate::output::printable(&n)
            ),
            source,
        ),
        PlayFailure::Run {
            source,
            heap_note: None,
        } => ("replay failed".to_string(), source),
        PlayFailure::Save(c) => {
            let file = options.save_output.as_ref().map(|s| s.path.display());
            let to = file.map_or(String::new(), |f| format!(" to {f}"));
            (format!("cannot save the replay's output{to}"), c)
        }
        PlayFailure::Metrics(c) => ("counter collection failed".to_string(), c),
        PlayFailure::SaveStep(c) => {
            let file = options.save_step.as_ref().map(|s| s.path.display());
            let to = file.map_or(String::new(), |f| format!(" to {f}"));
            (format!("cannot save the step{to}"), c)
        }
    };
    anyhow::Error::new(cause).context(what)
}

/// The report on stdout: JSON, CSV, or text with the counters and the saved output.
fn print_outcome(a: &PlayArgs, o: &PlayOutcome) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if a.json {
        serde_json::to_writer(&mut w, &o.json())?;
        out!(w);
    } else if a.csv {
        let j = serde_json::to_value(o.json())?;
        let cols = crate::output::flatten_json(&j);
        crate::output::write_csv(
            &mut w,
            &[
                cols.iter().map(|c| c.0.clone()).collect(),
                cols.into_iter().map(|c| c.1).collect(),
            ],
        )?;
    } else if !a.quiet {
        print_text(&mut w, &o.report)?;
    }
    if a.json || a.csv || a.quiet {
        return Ok(());
    }
    if let Some(t) = &o.report.tool {
        print_tool(&mut w, t)?;
    }
    if let Some(m) = &o.metrics {
        print_metrics(&mut w, m)?;
    }
    if let Some(s) = &o.saved {
        out!(
            w,
            "saved     the replay's output to {} ({} differ from the input); compare with kreplay diff",
            crate::output::printable(&s.path),
            crate::describe::bytes(s.changed_bytes)
        );
    }
    if let Some(t) = &a.trace {
        out!(
            w,
            "trace     the passes written to {} (open it in ui.perfetto.dev or chrome://tracing)",
            crate::output::printable(&t.display().to_string())
        );
    }
    if let Some(s) = &o.saved_step {
        out!(
            w,
            "saved     step {} ({}) as a single capture to {}",
            s.step,
            demangle(&s.kernel),
            crate::output::printable(&s.path)
        );
    }
    Ok(())
}

/// The choices of the command line, as the player's options.
fn options(a: &PlayArgs) -> anyhow::Result<PlayOptions> {
    let code = match (&a.module, a.ptx) {
        (Some(p), _) => CodeChoice::Variant(
            std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?,
        ),
        (None, true) => CodeChoice::Ptx,
        (None, false) => CodeChoice::Captured,
    };
    Ok(PlayOptions {
        passes: a.passes,
        warmup: a.warmup,
        verify: a.verify,
        device: a.device,
        code,
        relocate: a.relocate,
        cache: a.cache.map(|c| match c {
            CacheMode::Flush => CacheState::Flush,
            CacheMode::Keep => CacheState::Keep,
        }),
        metrics: a.metrics.clone(),
        save_output: a.save_output.as_ref().map(|p| SaveOutput {
            path: p.clone(),
            replace: a.force,
        }),
        tool: a.tool.clone(),
        per_step: a.per_step,
        trace: a.trace.is_some(),
        save_step: a
            .save_step
            .as_deref()
            .map(|v| save_step(v, a.force))
            .transpose()?,
    })
}

/// `--save-step K OUT.krr`: K must be a step index.
fn save_step(v: &[String], replace: bool) -> anyhow::Result<SaveStep> {
    let [k, path] = v else {
        anyhow::bail!("--save-step takes a step index and a file: --save-step K OUT.krr");
    };
    let index = k.parse().with_context(|| {
        format!("--save-step {k}: not a step index (a kernel step's 0-based index, as kreplay info lists them)")
    })?;
    Ok(SaveStep {
        index,
        path: path.into(),
        replace,
    })
}

/// The human-readable report.
fn print_text(w: &mut impl Write, r: &PlayReport) -> anyhow::Result<()> {
    out!(w, "kernel    {}", demangle(&r.kernel));
    out!(
        w,
        "device    {}; code {}; addresses {}; {}; cache {}",
        r.device,
        match r.code {
            kreplay_player::CodeSource::Cubin => "captured cubin",
            kreplay_player::CodeSource::PtxJit => "captured PTX (JIT-compiled)",
            kreplay_player::CodeSource::Variant => "--module variant",
        },
        match r.address_mode {
            kreplay_player::AddressMode::Original => "original",
            kreplay_player::AddressMode::Relocated => "relocated",
        },
        match r.pristine {
            kreplay_player::PristineStore::None => "nothing written, nothing to restore",
            kreplay_player::PristineStore::Device => "pristine copy in device memory",
            kreplay_player::PristineStore::Host => "pristine copy in host memory",
        },
        r.cache
    );
    out!(
        w,
        "duration  min {}  median {}  max {}  over {} pass(es) ({} warm-up); original {}",
        duration(r.timing.min_ns),
        duration(r.timing.median_ns),
        duration(r.timing.max_ns),
        r.timing.passes,
        r.timing.warmup,
        r.original_ns.map_or("unknown".into(), duration)
    );
    let per: Vec<String> = r.timing.durations_ns.iter().map(|&d| duration(d)).collect();
    out!(w, "passes    {}", per.join(", "));
    out!(
        w,
        "restore   write set {}, median {} per pass (outside the timed window); setup {:.0} ms",
        bytes(r.write_set_bytes),
        duration(r.timing.restore_median_ns),
        r.timing.setup_ms
    );
    if r.absent_bytes > 0 {
        out!(
            w,
            "absent    {} not in the capture (captured by touched pages): filled with {:#04x} \
             before the first pass (restored as the fill), not verified",
            bytes(r.absent_bytes),
            kreplay_format::absent::ABSENT_FILL
        );
    }
    if let Some(range) = &r.range {
        print_steps(w, range)?;
    }
    if r.verify.checked {
        print_verify(w, &r.verify, r.timing.passes)?;
    }
    if let Some(range) = r.range.as_ref().filter(|_| r.verify.checked) {
        print_divergence(w, range)?;
    }
    Ok(())
}

/// A range's steps, one line each: index, kind, kernel, median with `--per-step`.
fn print_steps(w: &mut impl Write, r: &kreplay_player::range::RangeReport) -> anyhow::Result<()> {
    out!(w, "steps     {}", r.steps.len());
    for s in &r.steps {
        let kernel = s.kernel.as_ref().map(|k| k.name.as_str()).unwrap_or("");
        let time = s
            .median_ns
            .map_or(String::new(), |ns| format!("  median {}", duration(ns)));
        out!(w, "  {:>4}  {:<12} {}{}", s.index, s.kind, kernel, time);
    }
    Ok(())
}

/// What the step-by-step replay of a mismatched range found.
fn print_divergence(
    w: &mut impl Write,
    r: &kreplay_player::range::RangeReport,
) -> anyhow::Result<()> {
    for &i in &r.mismatched_copies {
        out!(
            w,
            "          step {i} (copy-dtoh) received other bytes than the application did"
        );
    }
    if let Some(k) = r.first_divergent_step {
        let step = r.steps.get(k);
        out!(
            w,
            "          first divergent step: {k} ({}{})",
            step.map_or("?", |s| s.kind),
            step.and_then(|s| s.kernel.as_ref())
                .map_or(String::new(), |k| format!(", {}", k.name))
        );
    }
    if let Some(note) = &r.divergence_note {
        out!(w, "          {note}");
    }
    Ok(())
}

/// What `--verify` found: against the recorded output (or, without one, the input outside the
/// write set), and whether every pass produced the same output.
fn print_verify(
    w: &mut impl Write,
    v: &kreplay_player::VerifyOutcome,
    passes: u32,
) -> anyhow::Result<()> {
    let recorded = matches!(
        v.reference,
        kreplay_format::Reference::Recorded | kreplay_format::Reference::Partial
    );
    match v.reference {
        kreplay_format::Reference::Recorded => {}
        kreplay_format::Reference::Partial => out!(
            w,
            "verify    part of the recorded output was lost (kreplay verify --salvage): the chunks without it are checked for determinism only"
        ),
        kreplay_format::Reference::Dropped | kreplay_format::Reference::Redacted => out!(
            w,
            "verify    no recorded output in this capture ({} by kreplay pack): only determinism is checked{}",
            v.reference.name(),
            if v.matched { ", and that nothing outside the write set changed" } else { "" }
        ),
    }
    if v.matched && recorded {
        out!(
            w,
            "verify    {} the recorded output bit for bit{}",
            crate::output::verdict("matched", true),
            if v.reference == kreplay_format::Reference::Partial {
                " where it survived"
            } else {
                ""
            }
        );
    } else if !v.matched {
        out!(
            w,
            "verify    {}: {} byte(s) differ from the {}",
            crate::output::verdict("MISMATCH", false),
            v.mismatched_bytes,
            if recorded {
                "recorded output"
            } else {
                "input, outside the write set"
            }
        );
        for m in &v.first_mismatches {
            out!(
                w,
                "          region {} offset {:#x}: expected {:#04x} found {:#04x}",
                m.region_id,
                m.offset,
                m.expected,
                m.found
            );
        }
    }
    if v.deterministic {
        out!(
            w,
            "          all {} pass(es) produced identical output",
            passes
        );
    } else {
        out!(
            w,
            "          {}: passes {:?} differ from pass 1 (atomics or races)",
            crate::output::verdict("NON-DETERMINISTIC", false),
            v.divergent_passes
        );
    }
    Ok(())
}

/// The passes a `--tool` chose, and why the loop ended.
fn print_tool(w: &mut impl Write, t: &kreplay_player::ToolRun) -> anyhow::Result<()> {
    out!(
        w,
        "tool      {} chose {} timed pass(es){}",
        crate::output::printable(&t.path),
        t.passes,
        if t.skipped {
            " (it skipped the dispatch: one run, as without it)"
        } else if t.stopped_by_tool {
            ", then said stop"
        } else if t.capped {
            " (capped: it wanted more)"
        } else {
            ""
        }
    );
    Ok(())
}

fn print_metrics(w: &mut impl Write, m: &MetricsReport) -> anyhow::Result<()> {
    if !m.steps.is_empty() {
        return print_range_metrics(w, m);
    }
    out!(
        w,
        "counters  {} metric(s) in {} untimed pass(es) on {} (cache {} before each pass)",
        m.metrics.len(),
        m.passes,
        m.chip,
        m.cache
    );
    print_cupti(w, m)?;
    let width = m.metrics.iter().map(|v| v.name.len()).max().unwrap_or(0);
    for v in &m.metrics {
        out!(
            w,
            "          {:<width$}  {:>20}  {}",
            v.name,
            format_value(v.value),
            v.unit
        );
    }
    Ok(())
}

/// Which CUPTI collected the counters, when the report knows.
fn print_cupti(w: &mut impl Write, m: &MetricsReport) -> anyhow::Result<()> {
    if let Some(c) = &m.cupti {
        out!(
            w,
            "          CUPTI API {} from {}",
            c.api_version,
            crate::output::printable(&c.path)
        );
    }
    Ok(())
}

/// A range's counters: per kernel step (index, kernel, metric = value unit), then the range's
/// totals of the additive metrics (the others have none).
fn print_range_metrics(w: &mut impl Write, m: &MetricsReport) -> anyhow::Result<()> {
    let asked = m.steps.iter().map(|s| s.metrics.len()).max().unwrap_or(0);
    out!(
        w,
        "counters  {} metric(s) per kernel step, {} kernel step(s), in {} untimed whole-range pass(es) on {} (cache {} before each pass)",
        asked,
        m.steps.len(),
        m.passes,
        m.chip,
        m.cache
    );
    print_cupti(w, m)?;
    for s in &m.steps {
        let demangled = kreplay_player::describe::demangle(&s.kernel);
        let name = kreplay_protocol::config::base_name(&demangled);
        let kernel = crate::output::printable(&name);
        if s.metrics.is_empty() {
            out!(
                w,
                "  {:>4}  {}  (no counters: the profiler returned no range for it)",
                s.index,
                kernel
            );
        }
        for v in &s.metrics {
            out!(
                w,
                "  {:>4}  {}  {} = {} {}",
                s.index,
                kernel,
                v.name,
                format_value(v.value),
                v.unit
            );
        }
    }
    if m.metrics.is_empty() {
        out!(w, "  range  (no additive metric: values per step only)");
    }
    for v in &m.metrics {
        out!(
            w,
            "  range  {} = {} {}",
            v.name,
            format_value(v.value),
            v.unit
        );
    }
    Ok(())
}

/// Integers print without a fraction, with thousands separators; the rest with 2 decimals.
fn format_value(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let (int, frac) = if v.fract() == 0.0 && v.abs() < 1e18 {
        (format!("{}", v.abs() as u64), String::new())
    } else {
        let s = format!("{:.2}", v.abs());
        let (i, f) = s.split_once('.').unwrap_or((&s, ""));
        (i.to_string(), format!(".{f}"))
    };
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{}{grouped}{frac}", if v < 0.0 { "-" } else { "" })
}

fn list_metrics(a: &PlayArgs) -> anyhow::Result<ExitCode> {
    let device = kreplay_cuda::Device::open(a.device).context("cannot list metrics")?;
    let (chip, list) = kreplay_player::list_metrics(&device).context("cannot list metrics")?;
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if a.json {
        serde_json::to_writer(&mut w, &serde_json::json!({"chip": chip, "metrics": list}))?;
        out!(w);
        return Ok(ExitCode::SUCCESS);
    }
    out!(
        w,
        "# {} base metrics of {chip} (device {}).",
        list.len(),
        a.device
    );
    out!(w, "# Pass full names to --metrics: a counter takes .sum .avg .min .max (e.g. dram__bytes_read.sum),");
    out!(
        w,
        "# a ratio .pct or .ratio, a throughput .avg.pct_of_peak_sustained_elapsed."
    );
    let width = list.iter().map(|m| m.name.len()).max().unwrap_or(0);
    for m in &list {
        out!(
            w,
            "{:<width$}  {:<10}  {:<10}  {}",
            m.name,
            m.kind,
            m.unit,
            m.description
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::{format_value, options};
    use clap::Parser;
    use kreplay_player::{CacheState, CodeChoice, PlayOptions, SaveOutput, SaveStep};

    fn play_args(argv: &[&str]) -> crate::cli::PlayArgs {
        let argv = ["kreplay", "play"].iter().chain(argv);
        match crate::cli::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::cli::Command::Play(a)) => a,
            Ok(_) => panic!("not parsed as play"),
            Err(e) => panic!("{e}"),
        }
    }

    /// Python's `kreplay.play` keywords are checked against the same defaults.
    #[test]
    fn the_flags_defaults_are_the_players() {
        let parsed = options(&play_args(&["x.krr"])).expect("options");
        assert_eq!(parsed, PlayOptions::default());
    }

    #[test]
    fn each_flag_reaches_the_players_options() {
        let a = play_args(&[
            "x.krr",
            "--passes",
            "3",
            "--warmup",
            "2",
            "--verify",
            "--device",
            "1",
            "--relocate",
            "--ptx",
            "--cache",
            "keep",
            "--metrics",
            "a.sum,b.avg",
            "--save-output",
            "out.krr",
            "--force",
            "--per-step",
            "--save-step",
            "3",
            "step.krr",
            "--trace",
            "t.json",
        ]);
        let want = PlayOptions {
            passes: 3,
            warmup: 2,
            verify: true,
            device: 1,
            code: CodeChoice::Ptx,
            relocate: true,
            cache: Some(CacheState::Keep),
            metrics: vec!["a.sum".into(), "b.avg".into()],
            save_output: Some(SaveOutput {
                path: "out.krr".into(),
                replace: true,
            }),
            tool: None,
            per_step: true,
            save_step: Some(SaveStep {
                index: 3,
                path: "step.krr".into(),
                replace: true,
            }),
            trace: true,
        };
        assert_eq!(options(&a).expect("options"), want);
        let flush = options(&play_args(&["x.krr", "--cache", "flush"])).expect("options");
        assert_eq!(flush.cache, Some(CacheState::Flush));
        let tool = options(&play_args(&["x.krr", "--tool", "t.so"])).expect("options");
        assert_eq!(tool.tool, Some("t.so".into()));
    }

    #[test]
    fn failures_are_worded_with_the_capture_and_their_cause() {
        use kreplay_player::{PlayError, PlayFailure};
        let path = std::path::Path::new("x.krr");
        let o = PlayOptions::default();
        let cause = || PlayError::RelocationRefused { why: "w".into() };
        let text = |e| crate::output::error_text(&super::cli_error(e, path, &o));
        assert_eq!(
            text(PlayFailure::Blocked(vec!["a".into(), "b".into()])),
            "x.krr cannot be replayed: a; b"
        );
        let open = text(PlayFailure::Open(cause()));
        assert!(
            open.starts_with("cannot replay x.krr: --relocate"),
            "{open}"
        );
        let heap = text(PlayFailure::Run {
            source: cause(),
            heap_note: Some("malloc\x1b".into()),
        });
        assert!(
            heap.starts_with(
                "replay failed (the kernel reads the device heap, not captured: malloc"
            ),
            "{heap}"
        );
        assert!(
            !heap.contains('\x1b'),
            "control characters stay inert: {heap:?}"
        );
        let saving = PlayOptions {
            save_output: Some(SaveOutput {
                path: "out.krr".into(),
                replace: false,
            }),
            ..PlayOptions::default()
        };
        let save =
            crate::output::error_text(&super::cli_error(PlayFailure::Save(cause()), path, &saving));
        assert!(
            save.starts_with("cannot save the replay's output to out.krr: "),
            "{save}"
        );
    }

    // Catches: a step index that is not a number taken as 0, --force not reaching the
    // saved step, or --force refused with --save-step alone.
    #[test]
    fn save_step_takes_an_index_and_a_file() {
        let o = options(&play_args(&[
            "x.krr",
            "--save-step",
            "2",
            "s.krr",
            "--force",
        ]))
        .expect("options");
        assert_eq!(
            o.save_step,
            Some(SaveStep {
                index: 2,
                path: "s.krr".into(),
                replace: true
            })
        );
        let e = options(&play_args(&["x.krr", "--save-step", "two", "s.krr"]))
            .expect_err("not an index");
        assert!(e.to_string().contains("not a step index"), "{e}");
        let argv = ["kreplay", "play", "x.krr", "--force"];
        assert!(crate::cli::Cli::try_parse_from(argv).is_err());
    }

    #[test]
    fn an_unreadable_module_is_an_error_that_names_it() {
        let e = options(&play_args(&["x.krr", "--module", "/nonexistent/v.cubin"]))
            .expect_err("read a missing module");
        assert!(e.to_string().contains("/nonexistent/v.cubin"), "{e}");
    }

    #[test]
    fn values_print_like_a_profiler() {
        assert_eq!(format_value(169869312.0), "169,869,312");
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(430200.17), "430,200.17");
        assert_eq!(format_value(99.5), "99.50");
        assert_eq!(format_value(-1234.5), "-1,234.50");
    }

    // Catches: a range's counters printed as one dispatch's (only the totals), a step shown
    // without its index or kernel, or a non-additive metric given a range total.
    #[test]
    fn a_range_prints_counters_per_step_then_its_totals() {
        use kreplay_player::{MetricValue, MetricsReport};
        let v = |name: &str, value: f64| MetricValue {
            name: name.into(),
            value,
            unit: "byte".into(),
        };
        let step = |index, kernel: &str, metrics| kreplay_player::StepMetrics {
            index,
            kernel: kernel.into(),
            metrics,
        };
        let m = MetricsReport {
            metrics: vec![v("dram__bytes_read.sum", 3000.0)],
            steps: vec![
                step(
                    0,
                    "_Z5scalePff",
                    vec![v("dram__bytes_read.sum", 1000.0), v("x.max", 7.0)],
                ),
                step(
                    2,
                    "_Z4gemmIfLi128EEviPf",
                    vec![v("dram__bytes_read.sum", 2000.0), v("x.max", 9.0)],
                ),
            ],
            passes: 2,
            cache: CacheState::Flush,
            chip: "GH100".into(),
            cupti: None,
        };
        let mut out = Vec::new();
        super::print_metrics(&mut out, &m).expect("print");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(
            text.contains("2 metric(s) per kernel step, 2 kernel step(s)"),
            "{text}"
        );
        assert!(
            text.contains("     0  scale  dram__bytes_read.sum = 1,000 byte"),
            "{text}"
        );
        // A template's arguments and return type are not its name (`void gemm<float, 128>`
        // before: the name split on its first parenthesis).
        assert!(text.contains("     2  gemm  x.max = 9 byte"), "{text}");
        assert!(
            text.contains("  range  dram__bytes_read.sum = 3,000 byte"),
            "{text}"
        );
        assert!(!text.contains("range  x.max"), "{text}");
    }
}
