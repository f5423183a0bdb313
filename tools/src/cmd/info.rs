//! `kreplay info`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::Capture;

use crate::cli::InfoArgs;
use crate::describe::{bytes, describe, duration, Description, ExtentsDesc};
use crate::out;
use crate::output::printable as p;

pub fn run(a: InfoArgs) -> anyhow::Result<ExitCode> {
    // Every file is described; the ones that cannot be are reported and make the exit 2.
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    let mut failed = 0;
    let mut all = Vec::new();
    for (i, path) in a.files.iter().enumerate() {
        let described = super::open(path).and_then(|file| {
            let cap =
                Capture::parse(file.bytes()).with_context(|| format!("{}", path.display()))?;
            Ok(describe(&path.display().to_string(), &cap))
        });
        let d = match described {
            Ok(d) => d,
            Err(e) if a.files.len() > 1 => {
                crate::warn!("kreplay: error: {}", crate::output::error_text(&e));
                failed += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        if a.json {
            all.push(d);
            continue;
        }
        if i > 0 {
            out!(w);
        }
        print_text(&mut w, &d)?;
    }
    if a.json {
        if a.files.len() == 1 {
            if let Some(d) = all.first() {
                serde_json::to_writer_pretty(&mut w, d)?;
            }
        } else {
            serde_json::to_writer_pretty(&mut w, &all)?;
        }
        out!(w);
    }
    Ok(if failed > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_text(w: &mut impl Write, d: &Description) -> anyhow::Result<()> {
    print_head(w, d)?;
    print_steps(w, d)?;
    print_reference(w, d)?;
    print_salvage(w, d)?;
    print_origin(w, d)?;
    print_params(w, d)?;
    print_memory(w, d)?;
    print_provenance(w, d)?;
    Ok(())
}

/// The capture, the kernel and its launch configuration.
fn print_head(w: &mut impl Write, d: &Description) -> anyhow::Result<()> {
    out!(
        w,
        "capture   {} (format {}, {})",
        p(&d.file),
        d.format_version,
        bytes(d.file_bytes)
    );
    out!(w, "kernel    {}", p(&d.kernel.name));
    if d.kernel.name != d.kernel.mangled {
        out!(w, "mangled   {}", p(&d.kernel.mangled));
    }
    let l = &d.launch;
    let cluster = if l.cluster == [0, 0, 0] {
        "-".to_string()
    } else {
        format!("({},{},{})", l.cluster[0], l.cluster[1], l.cluster[2])
    };
    out!(
        w,
        "launch    {} grid ({},{},{}) block ({},{},{}) cluster {} dynamic shared {}{}",
        l.api,
        l.grid[0],
        l.grid[1],
        l.grid[2],
        l.block[0],
        l.block[1],
        l.block[2],
        cluster,
        bytes(l.dynamic_shared_bytes as u64),
        if l.attributes.is_empty() {
            String::new()
        } else {
            format!(" attributes {:?}", l.attributes)
        }
    );
    Ok(())
}

/// A range capture's steps, one line each: index, kind, stream, kernel (grid x block) or
/// bytes, in-app time.
fn print_steps(w: &mut impl Write, d: &Description) -> anyhow::Result<()> {
    let Some(r) = &d.range else {
        return Ok(());
    };
    out!(
        w,
        "range     {} steps ({} kernels) on {} stream{}, in-app {}, from {}",
        d.steps.len(),
        r.kernel_steps,
        r.streams,
        if r.streams == 1 { "" } else { "s" },
        r.original_ns.map_or("unknown".into(), duration),
        r.origin
    );
    for s in &d.steps {
        let what = match (&s.kernel, s.grid, s.block) {
            (Some(k), Some(g), Some(b)) => format!(
                "{}  ({},{},{})x({},{},{})",
                p(&k.name),
                g[0],
                g[1],
                g[2],
                b[0],
                b[1],
                b[2]
            ),
            _ => match (s.bytes, s.event) {
                (Some(n), _) => kreplay_format::units::bytes(n),
                (_, Some(e)) => format!("event {e:#x}"),
                _ => String::new(),
            },
        };
        let time = s
            .original_ns
            .map_or(String::new(), |ns| format!("  in-app {}", duration(ns)));
        out!(
            w,
            "  step {:<3} {:<12} stream {:#x}  {what}{time}",
            s.index,
            s.kind,
            s.stream
        );
    }
    Ok(())
}

/// What stands in for the recorded output, when it is not the recorded bytes.
fn print_reference(w: &mut impl Write, d: &Description) -> anyhow::Result<()> {
    match d.reference {
        kreplay_format::Reference::Recorded => {}
        kreplay_format::Reference::Dropped => out!(
            w,
            "output    dropped by kreplay pack: the write set is kept, not the bytes (play --verify checks determinism)"
        ),
        kreplay_format::Reference::Redacted => match &d.redaction {
            Some(fields) => {
                out!(
                    w,
                    "redacted  by kreplay pack: no recorded output (play --verify checks determinism); field by field:"
                );
                for f in fields {
                    out!(
                        w,
                        "          {} {}: {}",
                        if f.kept { "kept    " } else { "replaced" },
                        p(&f.field),
                        p(&f.note)
                    );
                }
            }
            None => out!(
                w,
                "redacted  by an older kreplay pack: region data replaced (pointers, handles, module globals kept), but the host, pid, command line, time, device UUID, argument and launch-attribute bytes were kept as recorded; pack --redact it again to remove them; no recorded output (play --verify checks determinism)"
            ),
        },
        kreplay_format::Reference::Partial => {
            let lost: Vec<String> = d
                .regions
                .iter()
                .filter(|r| r.unknown_output_bytes > 0)
                .map(|r| format!("{} ({})", r.id, bytes(r.unknown_output_bytes)))
                .collect();
            out!(
                w,
                "output    partly unknown: salvage lost the recorded output of regions {} (play --verify checks those bytes for determinism only)",
                lost.join(", ")
            );
        }
    }
    Ok(())
}

/// What salvage lost, and what that stops from replaying.
fn print_salvage(w: &mut impl Write, d: &Description) -> anyhow::Result<()> {
    if let Some(s) = &d.salvage {
        let mut what = Vec::new();
        if let Some(at) = s.lost_from {
            what.push(format!(
                "everything from byte {at} of the damaged file on was lost"
            ));
        }
        if !s.lost_events.is_empty() {
            let list: Vec<String> = s
                .lost_events
                .iter()
                .map(|(off, kind)| format!("{kind} at byte {off}"))
                .collect();
            what.push(format!("damaged events skipped: {}", list.join(", ")));
        }
        if !s.dropped_regions.is_empty() {
            let ids: Vec<String> = s.dropped_regions.iter().map(|r| r.to_string()).collect();
            what.push(format!(
                "region{} {} dropped (their memory was lost)",
                if ids.len() == 1 { "" } else { "s" },
                ids.join(", ")
            ));
        }
        if s.textures_dropped {
            what.push("texture and surface objects dropped".into());
        }
        out!(
            w,
            "salvaged  by kreplay verify --salvage{}{}",
            if what.is_empty() { "" } else { ": " },
            p(&what.join("; "))
        );
        for b in &s.replay_blockers {
            out!(
                w,
                "replay    {}: {}",
                crate::output::verdict("cannot be replayed", false),
                p(b)
            );
        }
    }
    Ok(())
}

/// Where the dispatch came from and how long it took when recorded.
fn print_origin(w: &mut impl Write, d: &Description) -> anyhow::Result<()> {
    if let Some(g) = &d.graph {
        out!(w, "graph     {}", crate::describe::graph_origin(g));
    }
    out!(
        w,
        "original  {}{}",
        d.original_ns.map_or("unknown".to_string(), duration),
        d.timing.as_ref().map_or(String::new(), |t| format!(
            ", {}",
            crate::describe::timing_conditions(t)
        ))
    );
    Ok(())
}

/// The kernel parameters, one a line.
fn print_params(w: &mut impl Write, d: &Description) -> anyhow::Result<()> {
    out!(
        w,
        "params    {:>3} {:>6} {:>5}  {:<24} value",
        "#",
        "offset",
        "size",
        "type"
    );
    for prm in &d.params {
        let ty = prm
            .r#type
            .clone()
            .unwrap_or_else(|| if prm.pointer { "pointer" } else { "value" }.to_string());
        let shown = match &prm.value {
            Some(v) => v.clone(),
            None if prm.value_hex.len() > 48 => {
                format!("{}… ({} bytes, hex)", &prm.value_hex[..48], prm.size)
            }
            None => format!("{} (hex)", prm.value_hex),
        };
        let target = match (prm.region, prm.region_offset) {
            (Some(r), Some(0)) => format!(" -> region {r}"),
            (Some(r), Some(o)) => format!(" -> region {r} +{o:#x}"),
            _ => String::new(),
        };
        out!(
            w,
            "          {:>3} {:>6} {:>5}  {:<24} {}{}",
            prm.index,
            prm.offset,
            prm.size,
            p(&ty),
            shown,
            target
        );
    }
    Ok(())
}

/// What a region captured by touched pages holds, under its row.
fn touched_line(size: u64, present: u64, e: &ExtentsDesc) -> String {
    format!(
        "              touched pages: {} present, {} absent (not captured) in {} extent(s) of {} pages",
        bytes(present),
        bytes(size.saturating_sub(present)),
        e.present.len(),
        bytes(u64::from(e.page_size))
    )
}

/// The memory regions, textures, pointer slots and code modules.
fn print_memory(w: &mut impl Write, d: &Description) -> anyhow::Result<()> {
    out!(
        w,
        "regions   {:>3} {:>18} {:>12} {:>12} {:<9} {:<13} {:<7} global",
        "id",
        "address",
        "size",
        "stored",
        "role",
        "kind",
        "written"
    );
    for r in &d.regions {
        out!(
            w,
            "          {:>3} {:>#18x} {:>12} {:>12} {:<9} {:<13} {:<7} {}",
            r.id,
            r.address,
            bytes(r.size),
            bytes(r.stored_bytes),
            r.role,
            r.kind,
            if r.unknown_output_bytes > 0 {
                "unknown"
            } else if r.written {
                "yes"
            } else {
                "no"
            },
            p(r.global.as_deref().unwrap_or(""))
        );
        if let Some(e) = &r.extents {
            out!(w, "{}", touched_line(r.size, r.present_bytes, e));
        }
    }
    for t in &d.textures {
        let mut at: Vec<String> = t
            .arg_offsets
            .iter()
            .map(|o| format!("argument offset {o}"))
            .collect();
        at.extend(
            t.memory_words
                .iter()
                .map(|(r, o)| format!("region {r} offset {o:#x}")),
        );
        out!(
            w,
            "textures  {} {} in {}: {}{}",
            t.kind,
            t.handle,
            at.join(", "),
            p(&t.resource),
            t.region.map_or(String::new(), |r| format!(" (region {r})"))
        );
    }
    if d.pointer_slots > 0 {
        out!(
            w,
            "pointers  {} word(s) in captured memory point into captured regions",
            d.pointer_slots
        );
    }
    for m in &d.modules {
        out!(
            w,
            "module    {} {} sm_{} {}",
            m.id,
            m.kind,
            m.arch,
            bytes(m.size)
        );
    }
    Ok(())
}

/// The device, who recorded it and where, and what the file holds of the application.
fn print_provenance(w: &mut impl Write, d: &Description) -> anyhow::Result<()> {
    match &d.device {
        Some(v) => out!(
            w,
            "device    {} (compute {}, {} SMs, {}), driver {}",
            p(&v.name),
            v.compute_capability,
            v.sm_count,
            bytes(v.total_memory),
            v.driver_version
        ),
        None => out!(w, "device    unknown"),
    }
    if let Some(r) = d.recorder.as_ref().filter(|_| d.redaction.is_some()) {
        out!(
            w,
            "recorded  by kreplay {}, launch {} of the process (where, when and how: redacted)",
            p(&r.version),
            r.launch_index
        );
    } else if let Some(r) = &d.recorder {
        out!(
            w,
            "recorded  by kreplay {} on {} pid {}{} at {}, match {} (launch {}) of -k '{}'",
            p(&r.version),
            p(&r.host),
            r.pid,
            r.rank.map_or(String::new(), |r| format!(" rank {r}")),
            r.time,
            r.match_index,
            r.launch_index,
            p(&r.kernel_filter)
        );
        out!(w, "command   {}", p(&r.command_line.join(" ")));
    }
    for (k, v) in &d.annotations {
        out!(w, "note      {}: {}", p(k), p(v));
    }
    let held: u64 = d.regions.iter().map(|r| r.present_bytes).sum();
    if let Some(fields) = &d.redaction {
        let kept: Vec<&str> = fields
            .iter()
            .filter(|f| f.kept)
            .map(|f| f.field.as_str())
            .collect();
        out!(
            w,
            "privacy   redacted: none of the application's data or environment but what is listed as kept above ({})",
            p(&kept.join(", "))
        );
    } else {
        out!(
            w,
            "privacy   holds {} of the application's memory in {} region(s), like a core dump: share it as you would one",
            bytes(held),
            d.regions.len()
        );
    }
    Ok(())
}
