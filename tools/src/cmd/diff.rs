//! `kreplay diff A B`: the player compares (`kreplay_player::diff`); this prints the report
//! as text or JSON.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::Capture;
use kreplay_player::diff::{diff, DiffReport, DiffState};
use kreplay_player::step_diff::StepsDiff;

use crate::cli::DiffArgs;
use crate::describe::bytes;
use crate::out;
use crate::output::printable;

pub fn run(a: DiffArgs) -> anyhow::Result<ExitCode> {
    let fa = super::open(&a.a)?;
    let fb = super::open(&a.b)?;
    let ca = Capture::parse(fa.bytes()).with_context(|| format!("{}", a.a.display()))?;
    let cb = Capture::parse(fb.bytes()).with_context(|| format!("{}", a.b.display()))?;
    let (name_a, name_b) = (a.a.display().to_string(), a.b.display().to_string());
    let report = diff(&name_a, &ca, &name_b, &cb, a.state, a.r#as)?;
    let identical = report.identical;
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if a.json {
        serde_json::to_writer(&mut w, &report)?;
        out!(w);
    } else {
        print_text(&mut w, &report)?;
    }
    Ok(if identical {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_text(w: &mut impl Write, r: &DiffReport) -> anyhow::Result<()> {
    if r.kernel_a != r.kernel_b {
        out!(
            w,
            "note      different kernels: {} / {}",
            printable(&r.kernel_a),
            printable(&r.kernel_b)
        );
    }
    out!(
        w,
        "diff      {} state, elements read as {}",
        match r.state {
            DiffState::Post => "post-dispatch",
            DiffState::Pre => "pre-dispatch",
        },
        format!("{:?}", r.r#as).to_lowercase()
    );
    out!(
        w,
        "regions   {:>7} {:>18} {:>10} {:>14} {:>7} {:>14} {:>12} {:>12}",
        "a/b",
        "address (a)",
        "size",
        "bytes differ",
        "chunks",
        "elements",
        "max abs",
        "max rel"
    );
    for d in &r.regions {
        let x = &d.diff;
        out!(
            w,
            "          {:>7} {:>#18x} {:>10} {:>14} {:>7} {:>14} {:>12} {:>12}{}",
            format!("{}/{}", d.id_a, d.id_b),
            d.address_a,
            bytes(d.size),
            x.differing_bytes,
            d.differing_chunks,
            x.differing_elements,
            if x.identical() {
                "-".into()
            } else {
                format!("{:.4e}", x.max_abs)
            },
            if x.identical() {
                "-".into()
            } else {
                format!("{:.4e}", x.max_rel)
            },
            match (x.first_offset, x.nan_mismatches) {
                (Some(o), 0) => format!("  first at +{o:#x}"),
                (Some(o), n) => format!("  first at +{o:#x}, {n} NaN mismatch(es)"),
                _ => String::new(),
            }
        );
        if d.absent_bytes > 0 {
            out!(
                w,
                "          {:>7} {} not compared: absent from a capture (touched pages only)",
                "",
                bytes(d.absent_bytes)
            );
        }
    }
    if let Some(s) = &r.steps {
        print_steps(w, s)?;
    }
    if !r.unmatched_a.is_empty() || !r.unmatched_b.is_empty() {
        out!(
            w,
            "unmatched regions: {:?} in A, {:?} in B (no region of the same size)",
            r.unmatched_a,
            r.unmatched_b
        );
    }
    out!(
        w,
        "result    {}",
        if r.identical {
            crate::output::verdict("identical", true)
        } else {
            crate::output::verdict("different", false)
        }
    );
    Ok(())
}

/// A range's steps compared: the counts, then each step that differs and how.
fn print_steps(w: &mut impl Write, s: &StepsDiff) -> anyhow::Result<()> {
    out!(
        w,
        "steps     {} / {}, {} of those both hold differ",
        s.steps_a,
        s.steps_b,
        s.differing.len()
    );
    for d in &s.differing {
        out!(
            w,
            "          step {}: {}",
            d.index,
            printable(&d.what.join("; "))
        );
    }
    Ok(())
}
