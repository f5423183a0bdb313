//! `kreplay play`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::Capture;
use kreplay_player::{PlayOptions, Session};

use crate::cli::{CacheMode, PlayArgs};
use crate::describe::{bytes, demangle, duration};
use crate::out;

pub fn run(a: PlayArgs) -> anyhow::Result<ExitCode> {
    let file = super::open(&a.file)?;
    let cap = Capture::parse(file.bytes()).with_context(|| format!("{}", a.file.display()))?;
    let module_override = match &a.module {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?),
        None => None,
    };
    let opts = PlayOptions {
        device: a.device,
        passes: a.passes,
        warmup: a.warmup,
        verify: a.verify,
        flush_cache: a.cache == CacheMode::Flush,
        module_override,
        relocate: a.relocate,
    };
    let mut session = Session::open(&cap, &opts)
        .with_context(|| format!("cannot replay {}", a.file.display()))?;
    let r = session.run(&opts).context("replay failed")?;
    drop(session);
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if a.json {
        serde_json::to_writer(&mut w, &r)?;
        out!(w);
    } else {
        out!(w, "kernel    {}", demangle(&r.kernel));
        out!(
            w,
            "device    {}; addresses {}; pristine copy in {} memory; cache {}",
            r.device,
            match r.address_mode {
                kreplay_player::AddressMode::Original => "original",
                kreplay_player::AddressMode::Relocated => "relocated",
            },
            r.pristine,
            r.cache
        );
        out!(
            w,
            "duration  min {}  median {}  max {}  over {} pass(es) ({} warm-up); original {}",
            duration(r.min_ns),
            duration(r.median_ns),
            duration(r.max_ns),
            r.passes,
            r.warmup,
            r.original_ns.map_or("unknown".into(), duration)
        );
        let per: Vec<String> = r.durations_ns.iter().map(|&d| duration(d)).collect();
        out!(w, "passes    {}", per.join(", "));
        out!(
            w,
            "restore   write set {}, median {} per pass (outside the timed window); setup {:.0} ms",
            bytes(r.write_set_bytes),
            duration(r.restore_median_ns),
            r.setup_ms
        );
        if r.verify.checked {
            let v = &r.verify;
            if v.matched {
                out!(w, "verify    matched the recorded output bit for bit");
            } else {
                out!(
                    w,
                    "verify    MISMATCH: {} byte(s) differ from the recorded output",
                    v.mismatched_bytes
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
                    r.passes
                );
            } else {
                out!(w, "          NON-DETERMINISTIC: passes {:?} differ from pass 1 (atomics or races)", v.divergent_passes);
            }
        }
    }
    let v = &r.verify;
    // A non-deterministic kernel is reported as such, not as wrong.
    if v.checked && !v.matched && v.deterministic {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
