//! `kreplay extract`.

use std::fs;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::{Capture, MemoryState, ModuleKind};

use crate::cli::ExtractArgs;
use crate::describe::describe;

pub fn run(a: ExtractArgs) -> anyhow::Result<ExitCode> {
    let file = super::open(&a.file)?;
    let cap = Capture::parse(file.bytes()).with_context(|| format!("{}", a.file.display()))?;
    let dir = &a.output;
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let write = |name: String, bytes: &[u8]| -> anyhow::Result<()> {
        let p = dir.join(name);
        fs::write(&p, bytes).with_context(|| format!("cannot write {}", p.display()))
    };
    for m in &cap.modules {
        let ext = match m.kind {
            ModuleKind::Cubin => "cubin",
            ModuleKind::Ptx => "ptx",
            ModuleKind::Fatbin => "fatbin",
        };
        write(format!("module-{}.{ext}", m.module_id), &m.image)?;
    }
    write("args.bin".into(), &cap.dispatch.arg_bytes)?;
    for r in &cap.regions {
        let mut data = cap.read_region(r.region_id)?;
        write(
            format!("region-{}-{:#x}.bin", r.region_id, r.address),
            &data,
        )?;
        if cap.is_written(r.region_id) {
            for c in cap.chunks(r.region_id, MemoryState::Post) {
                let s = c.offset as usize;
                cap.read_chunk_into(c, &mut data[s..s + c.raw_len as usize])?;
            }
            write(
                format!("region-{}-{:#x}.post.bin", r.region_id, r.address),
                &data,
            )?;
        }
    }
    let desc = describe(&a.file.display().to_string(), &cap);
    write("capture.json".into(), &serde_json::to_vec_pretty(&desc)?)?;
    eprintln!(
        "kreplay: extracted {} module(s), args.bin and {} region(s) into {}",
        cap.modules.len(),
        cap.regions.len(),
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
