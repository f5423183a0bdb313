//! `kreplay profile`: run the application with the recorder injected in profile mode, then
//! report every profiled dispatch (table on stderr; JSON or CSV on stdout or in `-o`).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_protocol::config::{
    check_pattern, env, expand_output, fixed_directory, rank_from, KernelFilter, MemoryScope,
    REPORT_PLACEHOLDERS,
};
use kreplay_protocol::report::ProfileRow;

use crate::cli::{CacheMode, Keep, ProfileArgs};
use crate::cmd::record::{app_exit_code, run_app};

/// How a report is written.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Format {
    Table,
    Json,
    Csv,
}

/// --json/--csv, else the output name's extension, else the table.
fn format_of(a: &ProfileArgs) -> Format {
    if a.json {
        return Format::Json;
    }
    if a.csv {
        return Format::Csv;
    }
    match a
        .output
        .as_deref()
        .and_then(|o| o.rsplit_once('.'))
        .map(|(_, e)| e)
    {
        Some("json") | Some("jsonl") => Format::Json,
        Some("csv") => Format::Csv,
        _ => Format::Table,
    }
}

/// The report: its rows, or (JSON only: CSV and the table have no place for it) one object
/// with an `error` field when no process reported. With `variant`, the variant's report.
fn render(
    rows: &[ProfileRow],
    f: Format,
    error: Option<&str>,
    variant: bool,
) -> anyhow::Result<String> {
    if let (Some(e), Format::Json) = (error, f) {
        return Ok(serde_json::to_string(&serde_json::json!({ "error": e }))? + "\n");
    }
    if variant {
        return Ok(match f {
            Format::Table => kreplay::profile_variant::table(rows),
            Format::Json => kreplay::profile_variant::json_lines(rows)?,
            Format::Csv => kreplay::profile_variant::csv(rows)?,
        });
    }
    Ok(match f {
        Format::Table => kreplay::profile::table(rows),
        Format::Json => kreplay::profile::json_lines(rows)?,
        Format::Csv => kreplay::profile::csv(rows)?,
    })
}

/// Checks the metric names on this machine's first visible GPU before the application starts:
/// a typo, a GPU that cannot be profiled, or counters restricted to administrators cost
/// nothing (the context is gone before the application runs).
fn check_metrics(names: &[String]) -> anyhow::Result<()> {
    let device = kreplay_cuda::Device::open(0).context("--metrics needs a GPU")?;
    kreplay_player::MetricRequest::new(&device, names).context("cannot collect counters")?;
    Ok(())
}

pub fn run(a: ProfileArgs) -> anyhow::Result<ExitCode> {
    let tool = check_before_the_run(&a)?;
    let variant = match &a.variant {
        Some(v) => Some(check_variant(v)?),
        None => None,
    };
    let mut vars = recorder_vars(&a, tool.as_deref());
    vars.extend(variant_vars(&a, variant.as_deref()));
    let run = run_app(&a.command, &vars)?;
    // No process reported: an empty report would read as "nothing matched".
    let silence = (!run.recorder_seen()).then(|| run.silence(&a.command[0]));
    let mut rows: Vec<ProfileRow> = run
        .reports
        .iter()
        .flat_map(|r| r.profiles.iter().cloned())
        .collect();
    rows.sort_by_key(|r| (r.rank, r.pid, r.launch_index));
    // The recorder printed its errors as they happened.
    if !a.quiet && !rows.is_empty() {
        crate::warn!("{}", table(&a, &rows).trim_end());
    }
    write_report(&a, &rows, silence.as_deref())?;
    if let Some(out) = trace_path(&a) {
        write_trace(&out, &rows, &a.command)?;
    }
    if let Some(e) = &silence {
        crate::warn!("kreplay: {e}");
        return Ok(if run.status.success() {
            ExitCode::from(3)
        } else {
            app_exit_code(run.status)
        });
    }
    if !run.status.success() {
        crate::warn!("kreplay: the application exited with {}", run.status);
        return Ok(app_exit_code(run.status));
    }
    if rows.is_empty() {
        let matches: u64 = run.reports.iter().map(|r| r.matches).sum();
        crate::warn!(
            "kreplay: nothing profiled: -k '{}' matched {matches} dispatch(es){}",
            a.kernel,
            if matches > 0 {
                format!(", fewer than --nth {}", a.nth)
            } else {
                String::new()
            }
        );
        return Ok(ExitCode::from(3));
    }
    if a.variant.is_some() && rows.iter().all(|r| r.variant.is_none()) {
        crate::warn!("kreplay: the variant ran at no dispatch (the reasons are under the table)");
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

/// The table on stderr: the variant's comparison with --variant, else the timing table.
fn table(a: &ProfileArgs, rows: &[ProfileRow]) -> String {
    if a.variant.is_some() {
        kreplay::profile_variant::table(rows)
    } else {
        kreplay::profile::table(rows)
    }
}

/// The variant, as an absolute path (the recorder runs in the application's directory), once
/// it reads as a code image the driver can load: a cubin, a fatbin or PTX.
fn check_variant(path: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    let image = std::fs::read(path)
        .with_context(|| format!("--variant: cannot read {}", path.display()))?;
    let kind = kreplay_cuda::image::check_image(&image);
    // The image check takes any text without NUL for PTX; PTX opens with its `.version`.
    let is_ptx_text = |t: &[u8]| t.windows(8).any(|w| w == b".version");
    let why = match kind {
        Err(why) => Some(why),
        Ok(kreplay_cuda::image::ImageKind::Ptx) if !is_ptx_text(&image) => {
            Some("text without a PTX .version directive".to_string())
        }
        Ok(_) => None,
    };
    if let Some(why) = why {
        anyhow::bail!(
            "--variant {}: not a cubin, fatbin or PTX file ({why}): build one with \
             `nvcc -cubin -arch=sm_90 -o v.cubin kernel.cu` (or -ptx)",
            path.display()
        );
    }
    Ok(path.canonicalize()?)
}

/// The recorder's environment for --variant (empty values: none asked for).
fn variant_vars(a: &ProfileArgs, variant: Option<&std::path::Path>) -> Vec<(&'static str, String)> {
    vec![
        (
            env::VARIANT,
            variant.map_or(String::new(), |v| v.display().to_string()),
        ),
        (
            env::VARIANT_KERNEL,
            a.variant_kernel.clone().unwrap_or_default(),
        ),
        (env::TOLERANCE, a.tolerance.clone().unwrap_or_default()),
        // Empty without --variant: the recorder refuses a keep setting with no variant (and
        // profiled nothing when this said `original` for every run).
        (
            env::KEEP,
            match (variant, a.keep) {
                (None, _) => "",
                (Some(_), Some(Keep::Variant)) => "variant",
                (Some(_), Some(Keep::Original) | None) => "original",
            }
            .to_string(),
        ),
    ]
}

/// Everything that can be refused before the application starts: the filters, the tool
/// (returned as an absolute path, for the recorder in the application's directory), the
/// output's directory, the metric names.
fn check_before_the_run(a: &ProfileArgs) -> anyhow::Result<Option<std::path::PathBuf>> {
    KernelFilter::parse(&a.kernel).map_err(anyhow::Error::msg)?;
    if let Some(n) = &a.nvtx_include {
        kreplay_protocol::nvtx::NvtxFilter::parse(n).map_err(anyhow::Error::msg)?;
    }
    let tool = match &a.tool {
        Some(t) => Some(
            t.canonicalize()
                .with_context(|| format!("the tool {} does not exist", t.display()))?,
        ),
        None => None,
    };
    if let Some(pattern) = &a.output {
        check_pattern(pattern, REPORT_PLACEHOLDERS).map_err(anyhow::Error::msg)?;
        let dir = fixed_directory(pattern).unwrap_or_else(|| std::path::PathBuf::from("."));
        if !dir.is_dir() {
            anyhow::bail!(
                "-o {pattern}: the directory {} does not exist: create it first",
                dir.display()
            );
        }
        super::check_output_dir(&dir, &format!("-o {pattern}"))?;
    }
    if let Some(t) = &a.trace {
        check_pattern(&t.to_string_lossy(), REPORT_PLACEHOLDERS).map_err(anyhow::Error::msg)?;
    }
    if let Some(out) = trace_path(a) {
        super::check_new_output(&out, a.force, "--trace")?;
    }
    if !a.metrics.is_empty() {
        check_metrics(&a.metrics)?;
    }
    Ok(tool)
}

/// The recorder's environment for profile mode.
fn recorder_vars(a: &ProfileArgs, tool: Option<&std::path::Path>) -> Vec<(&'static str, String)> {
    let count = if a.all { u64::MAX } else { a.count };
    let passes = a.passes.unwrap_or(if a.metrics.is_empty() {
        kreplay_protocol::config::DEFAULT_PASSES
    } else {
        1
    });
    vec![
        (env::MODE, "profile".to_string()),
        (env::KERNEL, a.kernel.clone()),
        (env::NTH, a.nth.to_string()),
        (env::COUNT, count.to_string()),
        (env::PASSES, passes.to_string()),
        (env::METRICS, a.metrics.join(",")),
        (
            env::CACHE,
            if a.cache == CacheMode::Flush {
                "flush"
            } else {
                "keep"
            }
            .to_string(),
        ),
        (
            env::TOOL,
            tool.map_or(String::new(), |t| t.display().to_string()),
        ),
        (
            env::MEMORY,
            MemoryScope::from(a.memory).env_value().to_string(),
        ),
        (
            env::NVTX_INCLUDE,
            a.nvtx_include.clone().unwrap_or_default(),
        ),
        (
            env::PROFILE_TRACE,
            if a.trace.is_some() { "1" } else { "" }.to_string(),
        ),
    ]
}

/// The --trace file, its `%p`, `%r` and `%h` expanded as -o's are (one file per rank under
/// mpirun).
fn trace_path(a: &ProfileArgs) -> Option<std::path::PathBuf> {
    let pattern = a.trace.as_ref()?.to_string_lossy().into_owned();
    Some(std::path::PathBuf::from(expand_output(
        &pattern,
        std::process::id(),
        rank_from(|k| std::env::var(k).ok()),
        &kreplay_protocol::config::host_name(),
        0,
        "",
    )))
}

/// `--trace FILE.json`: the profiled passes as a trace (written whatever the application's
/// exit, with what the processes reported).
fn write_trace(
    out: &std::path::Path,
    rows: &[ProfileRow],
    command: &[String],
) -> anyhow::Result<()> {
    let trace = kreplay::profile_trace::trace(rows, &command.join(" "));
    std::fs::write(out, trace.to_json())
        .with_context(|| format!("cannot write the trace to {}", out.display()))?;
    let traced = rows.iter().filter(|r| r.timeline.is_some()).count();
    crate::warn!(
        "kreplay: trace     {traced} profiled dispatch(es) written to {} (open it in ui.perfetto.dev or chrome://tracing)",
        out.display()
    );
    Ok(())
}

/// The report to `-o` (its name expanded), or on stdout as JSON or CSV; the table went to
/// stderr already.
fn write_report(a: &ProfileArgs, rows: &[ProfileRow], silence: Option<&str>) -> anyhow::Result<()> {
    let format = format_of(a);
    match &a.output {
        Some(pattern) => {
            let path = expand_output(
                pattern,
                std::process::id(),
                rank_from(|k| std::env::var(k).ok()),
                &kreplay_protocol::config::host_name(),
                0,
                "",
            );
            std::fs::write(&path, render(rows, format, silence, a.variant.is_some())?)
                .with_context(|| format!("cannot write the report {path}"))?;
        }
        None if format != Format::Table => {
            let stdout = std::io::stdout();
            let mut w = stdout.lock();
            w.write_all(render(rows, format, silence, a.variant.is_some())?.as_bytes())?;
            crate::out!(w);
        }
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(v: &[&str]) -> ProfileArgs {
        let mut all = vec!["kreplay", "profile"];
        all.extend_from_slice(v);
        match crate::cli::Cli::try_parse_from(all).map(|c| c.command) {
            Ok(crate::cli::Command::Profile(a)) => a,
            Ok(_) => panic!("not a profile command"),
            Err(e) => panic!("{v:?}: {e}"),
        }
    }

    #[test]
    fn the_report_format_comes_from_the_flags_then_the_name() {
        assert_eq!(format_of(&args(&["-k", "f", "./app"])), Format::Table);
        assert_eq!(
            format_of(&args(&["-k", "f", "--json", "./app"])),
            Format::Json
        );
        assert_eq!(
            format_of(&args(&["-k", "f", "-o", "p-%r.json", "./app"])),
            Format::Json
        );
        assert_eq!(
            format_of(&args(&["-k", "f", "-o", "p.csv", "./app"])),
            Format::Csv
        );
        assert_eq!(
            format_of(&args(&["-k", "f", "--csv", "-o", "p.txt", "./app"])),
            Format::Csv
        );
        assert_eq!(
            format_of(&args(&["-k", "f", "-o", "p.txt", "./app"])),
            Format::Table
        );
    }

    // Catches: --memory not reaching the recorder, a default other than the chunk restore.
    #[test]
    fn memory_touched_reaches_the_recorder_and_reachable_is_the_default() {
        let var = |a: &ProfileArgs| {
            recorder_vars(a, None)
                .into_iter()
                .find(|(k, _)| *k == env::MEMORY)
                .map(|(_, v)| v)
        };
        let plain = args(&["-k", "f", "./app"]);
        assert_eq!(plain.memory, crate::cli::ProfileMemory::Reachable);
        assert_eq!(var(&plain).as_deref(), Some("reachable"));
        let touched = args(&["-k", "f", "--memory", "touched", "./app"]);
        assert_eq!(var(&touched).as_deref(), Some("touched"));
        assert!(crate::cli::Cli::try_parse_from([
            "kreplay", "profile", "-k", "f", "--memory", "all", "./app"
        ])
        .is_err());
    }

    #[test]
    fn flags_and_the_application_parse_as_record_does() {
        let a = args(&[
            "-k",
            "regex:gemm",
            "--all",
            "--passes",
            "3",
            "--cache",
            "keep",
            "./app",
            "-k",
            "x",
        ]);
        assert!(a.all);
        assert_eq!(a.passes, Some(3));
        assert!(a.cache == CacheMode::Keep);
        assert_eq!(a.command, vec!["./app", "-k", "x"]);
        let parsed = crate::cli::Cli::try_parse_from([
            "kreplay", "profile", "-k", "f", "--all", "--count", "2", "./app",
        ]);
        assert!(parsed.is_err(), "--all and --count together");
        let parsed = crate::cli::Cli::try_parse_from([
            "kreplay", "profile", "-k", "f", "--passes", "0", "./app",
        ]);
        assert!(parsed.is_err(), "zero passes");
    }

    #[test]
    fn variant_flags_need_the_variant_and_reach_the_recorder() {
        let a = args(&[
            "-k",
            "scale_add",
            "--variant",
            "v.cubin",
            "--variant-kernel",
            "_Z9scale_v2Pf",
            "--tolerance",
            "bf16:1e-2,1e-3",
            "--keep",
            "variant",
            "./app",
        ]);
        let vars = variant_vars(&a, Some(std::path::Path::new("/abs/v.cubin")));
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        assert_eq!(get(env::VARIANT), "/abs/v.cubin");
        assert_eq!(get(env::VARIANT_KERNEL), "_Z9scale_v2Pf");
        assert_eq!(get(env::TOLERANCE), "bf16:1e-2,1e-3");
        assert_eq!(get(env::KEEP), "variant");
        let plain = args(&["-k", "f", "./app"]);
        let vars = variant_vars(&plain, None);
        assert!(vars.iter().all(|(k, v)| v.is_empty() || *k == env::KEEP));
        for bad in [
            &["-k", "f", "--keep", "variant", "./app"][..],
            &["-k", "f", "--tolerance", "f32:1e-3", "./app"],
            &["-k", "f", "--variant-kernel", "g", "./app"],
            &[
                "-k",
                "f",
                "--variant",
                "v.cubin",
                "--tolerance",
                "f64:1",
                "./app",
            ],
            &["-k", "f", "--variant", "v.cubin", "--tool", "t.so", "./app"],
            &["-k", "f", "--variant", "v.cubin", "--metrics", "m", "./app"],
            &["-k", "f", "--variant", "v.cubin", "--keep", "both", "./app"],
        ] {
            let mut all = vec!["kreplay", "profile"];
            all.extend_from_slice(bad);
            assert!(crate::cli::Cli::try_parse_from(all).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_variant_that_is_no_code_image_is_refused_before_the_run() {
        let dir = std::env::temp_dir().join(format!("kreplay-variant-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let text = dir.join("kernel.cu");
        std::fs::write(&text, "extern \"C\" __global__ void k() {}").expect("write");
        let e = check_variant(&text)
            .expect_err("source, not a cubin")
            .to_string();
        assert!(
            e.contains("not a cubin, fatbin or PTX") && e.contains("nvcc -cubin"),
            "{e}"
        );
        let ptx = dir.join("k.ptx");
        std::fs::write(&ptx, ".version 8.0\n.target sm_90\n.address_size 64\n").expect("write");
        assert!(check_variant(&ptx).expect("PTX is accepted").is_absolute());
        let e = check_variant(&dir.join("missing.cubin"))
            .expect_err("missing")
            .to_string();
        assert!(e.contains("cannot read"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    // Catches: every plain `profile` run disabled by a keep setting with no variant.
    #[test]
    fn the_variant_settings_without_a_variant_read_as_no_variant() {
        let plain = args(&["-k", "saxpy", "--", "./app"]);
        let vars = variant_vars(&plain, None);
        let get = |k: &str| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            kreplay_protocol::variant::VariantConfig::from_lookup(&get),
            Ok(None)
        );
        let with = args(&["-k", "saxpy", "--variant", "v.cubin", "--", "./app"]);
        let vars = variant_vars(&with, Some(std::path::Path::new("/abs/v.cubin")));
        let get = |k: &str| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.clone())
        };
        let c = kreplay_protocol::variant::VariantConfig::from_lookup(&get)
            .expect("valid")
            .expect("a variant");
        assert!(!c.keep_variant);
    }
}
