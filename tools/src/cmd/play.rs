//! `kreplay play`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::Capture;
use kreplay_player::{
    CacheState, CodeChoice, MetricRequest, MetricsReport, OpenOptions, Placement, PlayReport,
    RunOptions, Session, Verification,
};

use crate::cli::{CacheMode, PlayArgs};
use crate::describe::{bytes, demangle, duration};
use crate::out;
use kreplay::report::PlayJson;

pub fn run(a: PlayArgs) -> anyhow::Result<ExitCode> {
    if a.list_metrics {
        return list_metrics(&a);
    }
    let Some(path) = &a.file else {
        anyhow::bail!("no capture file given");
    };
    // Before any replay: the output must be writable when the replay is done.
    if let Some(out) = &a.save_output {
        super::check_new_output(out, a.force, "--save-output")?;
    }
    let file = super::open(path)?;
    let cap = Capture::parse(file.bytes()).with_context(|| format!("{}", path.display()))?;
    // A salvaged capture that lost what the dispatch needs is refused before any GPU work.
    let blockers = kreplay_format::replay_blockers(&cap);
    if !blockers.is_empty() {
        anyhow::bail!(
            "{} cannot be replayed: {}",
            path.display(),
            blockers.join("; ")
        );
    }
    // The tool's initialiser runs before any GPU work: a bad library costs nothing.
    let mut tool = match &a.tool {
        Some(t) => Some(kreplay_player::CTool::load(t)?),
        None => None,
    };
    // Metric names are checked before anything is uploaded or launched.
    let request = if a.metrics.is_empty() {
        None
    } else {
        let device = kreplay_cuda::Device::open(a.device).context("cannot collect counters")?;
        Some(MetricRequest::new(&device, &a.metrics).context("cannot collect counters")?)
    };
    let (open, run) = options(&a)?;
    // Device printf of the replayed kernel goes to stderr while stdout carries JSON or CSV.
    let device_output = crate::output::StdoutToStderr::new(a.json || a.csv);
    let memory: u64 = cap.regions.iter().map(|r| r.size).sum();
    let loading = crate::progress::Progress::bytes("loading", memory);
    // Each chunk's file pages are dropped once uploaded (and once verified): a capture larger
    // than host memory replays in bounded memory.
    let release = |start: u64, end: u64| file.release(start, end);
    let mut session = Session::open_with_progress(
        &cap,
        &open,
        &mut |done, total| loading.set("loading", done, total),
        &release,
    )
    .with_context(|| format!("cannot replay {}", path.display()))?;
    drop(loading);
    // The recorder could not capture the device heap the kernel reads: say so before the
    // replay (it will likely fault) and with its error.
    let heap = cap
        .annotations
        .iter()
        .find(|a| a.key == kreplay_format::DEVICE_HEAP_ANNOTATION)
        .map(|a| crate::output::printable(&a.value).into_owned());
    if let (Some(n), false) = (&heap, a.quiet) {
        crate::warn!("kreplay: warning: {n}");
    }
    let ran = match (&mut tool, &a.tool) {
        (Some(t), Some(p)) => session.run_with_tool(&run, t, &p.display().to_string()),
        _ => session.run(&run),
    };
    let r = ran.with_context(|| match &heap {
        Some(n) => format!("replay failed (the kernel reads the device heap, not captured: {n})"),
        None => "replay failed".to_string(),
    })?;
    let saved = match &a.save_output {
        Some(p) => Some(
            session
                .save_output(p, a.force)
                .with_context(|| format!("cannot save the replay's output to {}", p.display()))?,
        ),
        None => None,
    };
    let metrics = match &request {
        Some(req) => Some(
            session
                .collect_metrics(
                    req,
                    match a.cache {
                        Some(CacheMode::Keep) => CacheState::Keep,
                        _ => CacheState::Flush,
                    },
                )
                .context("counter collection failed")?,
        ),
        None => None,
    };
    drop(session);
    drop(request);
    drop(device_output);
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if a.json {
        let j = PlayJson::new(&r, metrics.as_ref(), saved.as_ref());
        serde_json::to_writer(&mut w, &j)?;
        out!(w);
    } else if a.csv {
        let j = serde_json::to_value(PlayJson::new(&r, metrics.as_ref(), saved.as_ref()))?;
        let cols = crate::output::flatten_json(&j);
        crate::output::write_csv(
            &mut w,
            &[
                cols.iter().map(|c| c.0.clone()).collect(),
                cols.into_iter().map(|c| c.1).collect(),
            ],
        )?;
    } else if !a.quiet {
        print_text(&mut w, &r)?;
    }
    if let (Some(t), false) = (&r.tool, a.json || a.csv || a.quiet) {
        print_tool(&mut w, t)?;
    }
    if let (Some(m), false) = (&metrics, a.json || a.csv || a.quiet) {
        print_metrics(&mut w, m)?;
    }
    if let (Some(s), false) = (&saved, a.json || a.csv || a.quiet) {
        out!(
            w,
            "saved     the replay's output to {} ({} differ from the input); compare with kreplay diff",
            crate::output::printable(&s.path),
            crate::describe::bytes(s.changed_bytes)
        );
    }
    let v = &r.verify;
    // A non-deterministic kernel is reported as such, not as wrong.
    if v.checked && !v.matched && v.deterministic {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The choices of the command line, as the player's option types.
fn options(a: &PlayArgs) -> anyhow::Result<(OpenOptions, RunOptions)> {
    let code = match (&a.module, a.ptx) {
        (Some(p), _) => CodeChoice::Variant(
            std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?,
        ),
        (None, true) => CodeChoice::Ptx,
        (None, false) => CodeChoice::Captured,
    };
    let open = OpenOptions {
        device: a.device,
        code,
        placement: if a.relocate {
            Placement::Relocate
        } else {
            Placement::Original
        },
    };
    let run = RunOptions {
        passes: a.passes,
        warmup: a.warmup,
        cache: match a.cache {
            Some(CacheMode::Flush) => CacheState::Flush,
            _ => CacheState::Keep,
        },
        verification: if a.verify {
            Verification::Check
        } else {
            Verification::Off
        },
    };
    Ok((open, run))
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
    if r.verify.checked {
        let v = &r.verify;
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
                r.timing.passes
            );
        } else {
            out!(
                w,
                "          {}: passes {:?} differ from pass 1 (atomics or races)",
                crate::output::verdict("NON-DETERMINISTIC", false),
                v.divergent_passes
            );
        }
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
    out!(
        w,
        "counters  {} metric(s) in {} untimed pass(es) on {} (cache {} before each pass)",
        m.metrics.len(),
        m.passes,
        m.chip,
        m.cache
    );
    if let Some(c) = &m.cupti {
        out!(
            w,
            "          CUPTI API {} from {}",
            c.api_version,
            crate::output::printable(&c.path)
        );
    }
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
    use super::format_value;

    #[test]
    fn values_print_like_a_profiler() {
        assert_eq!(format_value(169869312.0), "169,869,312");
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(430200.17), "430,200.17");
        assert_eq!(format_value(99.5), "99.50");
        assert_eq!(format_value(-1234.5), "-1,234.50");
    }
}
