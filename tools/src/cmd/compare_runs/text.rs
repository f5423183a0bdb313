//! The text form of `kreplay compare`: the two runs, the summary, then the verdict changes,
//! the worst regressions, the best improvements and the captures in one run only.

use std::io::Write;

use kreplay::figures::micros_or_dash;
use kreplay_player::runs_compare::{
    CapturePair, RunSide, RunsComparison, Summary, TimeChange, Unpaired,
};
use kreplay_player::units::count;

use crate::out;
use crate::output::{printable, verdict};

/// Kernel names longer than this widen their column no further (the file comes after).
const KERNEL_WIDTH_CAP: usize = 40;

fn side(w: &mut impl Write, label: &str, s: &RunSide) -> anyhow::Result<()> {
    out!(
        w,
        "{label:<9} {}: {}, device {}, driver {}",
        printable(&s.name),
        count(s.records, "record", "records"),
        printable(&s.device),
        printable(&s.driver)
    );
    Ok(())
}

fn how_paired(s: &Summary) -> String {
    let mut ways = Vec::new();
    if s.by_sha256 > 0 {
        ways.push(format!("{} by sha256", s.by_sha256));
    }
    let by_path = s.by_file + s.by_file_sha_differs;
    if by_path > 0 {
        ways.push(format!("{by_path} by file path"));
    }
    let ways = if ways.is_empty() {
        String::new()
    } else {
        format!(" ({})", ways.join(", "))
    };
    format!(
        "{}{ways}, {} added, {} removed",
        count(s.paired, "capture", "captures"),
        s.added,
        s.removed
    )
}

fn summary(w: &mut impl Write, r: &RunsComparison) -> anyhow::Result<()> {
    let s = &r.summary;
    out!(w, "{:<9} {}", "paired", how_paired(s));
    let mean = match s.geomean_ratio {
        Some(g) => format!(
            "geomean {g:.3}x new/base over {} timed in both",
            count(s.timed, "capture", "captures")
        ),
        None => "no capture timed in both runs".to_string(),
    };
    out!(w, "{:<9} {mean}; threshold {} %", "time", r.threshold_pct);
    out!(
        w,
        "{:<9} {} slower, {} faster, {} within noise, {} within threshold{}",
        "",
        s.slower,
        s.faster,
        s.within_noise,
        s.within_threshold,
        match s.single_pass {
            0 => String::new(),
            n => format!(", {n} timed with one pass in a run (not judged)"),
        }
    );
    out!(
        w,
        "{:<9} {}, {}, {}",
        "verdicts",
        count(
            s.correctness_regressions,
            "correctness regression",
            "correctness regressions"
        ),
        count(s.correctness_improvements, "improvement", "improvements"),
        count(s.verdicts_changed, "other change", "other changes")
    );
    notes(w, s)?;
    out!(
        w,
        "{:<9} {} (exit {})",
        "result",
        result(r),
        r.exit_status()
    );
    Ok(())
}

/// The verdict CI acts on, with what caused it.
fn result(r: &RunsComparison) -> String {
    let s = &r.summary;
    if !r.regressed() {
        return verdict("ok", true);
    }
    let mut why = Vec::new();
    if s.slower > 0 {
        why.push(format!(
            "{} beyond {} %",
            count(s.slower, "time regression", "time regressions"),
            r.threshold_pct
        ));
    }
    if s.correctness_regressions > 0 {
        why.push(count(
            s.correctness_regressions,
            "correctness regression",
            "correctness regressions",
        ));
    }
    format!("{}: {}", verdict("REGRESSED", false), why.join(", "))
}

fn notes(w: &mut impl Write, s: &Summary) -> anyhow::Result<()> {
    if s.by_file_sha_differs > 0 {
        out!(
            w,
            "{:<9} {} by file path with different sha256s (re-recorded: inputs may differ)",
            "note",
            count(s.by_file_sha_differs, "capture", "captures")
        );
    }
    if s.superseded_base + s.superseded_new > 0 {
        out!(
            w,
            "{:<9} lines superseded by a later line of the same capture: {} in base, {} in new",
            "note",
            s.superseded_base,
            s.superseded_new
        );
    }
    Ok(())
}

fn kernel(k: &Option<String>) -> String {
    printable(k.as_deref().unwrap_or("?")).into_owned()
}

fn file(p: &CapturePair) -> String {
    if p.base_file == p.new_file {
        printable(&p.base_file).into_owned()
    } else {
        format!(
            "{} (new: {})",
            printable(&p.base_file),
            printable(&p.new_file)
        )
    }
}

fn kernel_width<'a>(names: impl Iterator<Item = &'a Option<String>>) -> usize {
    names
        .map(|k| kernel(k).chars().count())
        .max()
        .unwrap_or(0)
        .clamp("kernel".len(), KERNEL_WIDTH_CAP)
}

fn verdict_changes(w: &mut impl Write, r: &RunsComparison) -> anyhow::Result<()> {
    let changes = r.verdict_changes();
    if changes.is_empty() {
        return Ok(());
    }
    let kw = kernel_width(changes.iter().map(|p| &p.kernel));
    out!(w);
    out!(w, "verdict changes");
    out!(w, "  {:<16} {:<16} {:<kw$}  file", "base", "new", "kernel");
    for p in changes {
        let new = verdict(p.new_verdict.name(), p.new_verdict.passed());
        let pad = 16usize.saturating_sub(p.new_verdict.name().len());
        out!(
            w,
            "  {:<16} {new}{:pad$} {:<kw$}  {}",
            p.base_verdict.name(),
            "",
            kernel(&p.kernel),
            file(p)
        );
    }
    Ok(())
}

fn noise(t: &TimeChange) -> String {
    t.noise_pct
        .map_or("-".to_string(), |n| format!("±{n:.1} %"))
}

/// One ranked list (`slower`, `faster`) of at most `top` pairs (0: all).
fn ranked(
    w: &mut impl Write,
    title: &str,
    r: &RunsComparison,
    order: &[usize],
    top: usize,
) -> anyhow::Result<()> {
    if order.is_empty() {
        return Ok(());
    }
    let shown = if top == 0 {
        order.len()
    } else {
        top.min(order.len())
    };
    let rows: Vec<&CapturePair> = order[..shown].iter().map(|&i| &r.pairs[i]).collect();
    let kw = kernel_width(rows.iter().map(|p| &p.kernel));
    out!(w);
    out!(w, "{title} ({shown} of {})", order.len());
    out!(
        w,
        "  {:>8} {:>9} {:>8} {:>12} {:>12}  {:<kw$}  file",
        "ratio",
        "change",
        "noise",
        "base µs",
        "new µs",
        "kernel"
    );
    for p in rows {
        let Some(t) = p.time else { continue };
        out!(
            w,
            "  {:>8} {:>9} {:>8} {:>12} {:>12}  {:<kw$}  {}",
            format!("{:.3}x", t.ratio),
            format!("{:+.1} %", t.change_pct),
            noise(&t),
            micros_or_dash(p.base_median_us),
            micros_or_dash(p.new_median_us),
            kernel(&p.kernel),
            file(p)
        );
    }
    Ok(())
}

fn unpaired(w: &mut impl Write, title: &str, list: &[Unpaired], top: usize) -> anyhow::Result<()> {
    if list.is_empty() {
        return Ok(());
    }
    let shown = if top == 0 {
        list.len()
    } else {
        top.min(list.len())
    };
    let kw = kernel_width(list[..shown].iter().map(|u| &u.kernel));
    out!(w);
    out!(w, "{title} ({shown} of {})", list.len());
    out!(
        w,
        "  {:<16} {:>12}  {:<kw$}  file",
        "verdict",
        "median µs",
        "kernel"
    );
    for u in &list[..shown] {
        out!(
            w,
            "  {:<16} {:>12}  {:<kw$}  {}",
            u.verdict.name(),
            micros_or_dash(u.median_us),
            kernel(&u.kernel),
            printable(&u.file)
        );
    }
    Ok(())
}

/// The whole text report; lists are cut to `top` entries (0: all).
pub fn print(w: &mut impl Write, r: &RunsComparison, top: usize) -> anyhow::Result<()> {
    side(w, "base", &r.base)?;
    side(w, "new", &r.new)?;
    summary(w, r)?;
    verdict_changes(w, r)?;
    ranked(w, "slower, worst first", r, &r.slower_worst_first, top)?;
    ranked(w, "faster, best first", r, &r.faster_best_first, top)?;
    unpaired(w, "added, in new only", &r.added, top)?;
    unpaired(w, "removed, in base only", &r.removed, top)?;
    Ok(())
}
