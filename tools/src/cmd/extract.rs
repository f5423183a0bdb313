//! `kreplay extract`.

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::{Capture, ChunkEncoding, ChunkRef, MemoryState, ModuleKind, Region};

use crate::cli::ExtractArgs;
use crate::describe::describe;

/// Writes one region chunk by chunk (memory stays bounded by the chunk size whatever the
/// region's size); all-zero chunks become holes of a sparse file. With `post`, chunks the
/// kernel changed are taken from the post-dispatch state.
fn write_region(cap: &Capture<'_>, r: &Region, path: &Path, post: bool) -> anyhow::Result<()> {
    let ctx = || format!("cannot write {}", path.display());
    let f = File::create(path).with_context(ctx)?;
    f.set_len(r.size).with_context(ctx)?;
    let changed: HashMap<u64, &ChunkRef> = if post {
        cap.chunks(r.region_id, MemoryState::Post)
            .map(|c| (c.offset, c))
            .collect()
    } else {
        HashMap::new()
    };
    let mut buf = Vec::new();
    for c in cap.chunks(r.region_id, MemoryState::Pre) {
        let src = changed.get(&c.offset).copied().unwrap_or(c);
        if src.encoding == ChunkEncoding::Zero {
            continue;
        }
        buf.resize(src.raw_len as usize, 0);
        cap.read_chunk_into(src, &mut buf)?;
        f.write_all_at(&buf, c.offset).with_context(ctx)?;
    }
    Ok(())
}

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
        let pre = dir.join(format!("region-{}-{:#x}.bin", r.region_id, r.address));
        write_region(&cap, r, &pre, false)?;
        if cap.is_written(r.region_id) {
            let post = dir.join(format!("region-{}-{:#x}.post.bin", r.region_id, r.address));
            write_region(&cap, r, &post, true)?;
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
