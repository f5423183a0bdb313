//! `kreplay extract`.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::{
    Capture, ChunkEncoding, ChunkRef, MemoryState, ModuleKind, Reference, Region,
};
use kreplay_player::ReproContent;

use crate::cli::ExtractArgs;
use crate::describe::{bytes, describe};
use kreplay_format::file::{create_new_private, MappedFile};

/// Writes one region chunk by chunk (memory stays bounded by the chunk size whatever the
/// region's size); all-zero chunks become holes of a sparse file. With `post`, chunks the
/// kernel changed are taken from the post-dispatch state.
fn write_region(
    file: &MappedFile,
    cap: &Capture<'_>,
    r: &Region,
    path: &Path,
    post: bool,
    force: bool,
) -> anyhow::Result<()> {
    let ctx = || format!("cannot write {}", path.display());
    let f = create(path, force).with_context(ctx)?;
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
        // Read once per output file: the input's pages need not stay resident.
        file.release(src.payload_offset, src.payload_offset + src.payload_len);
    }
    Ok(())
}

/// A new private file (0600, no symlink followed); with `force`, one already there is
/// replaced (unlinked first, so a planted symlink is replaced, not followed).
fn create(path: &Path, force: bool) -> std::io::Result<File> {
    if force {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    create_new_private(path)
}

/// Most bytes extract writes without `--force`: 16 x the capture's size, at least 256 MiB.
/// Captures compress memory by orders of magnitude (zero chunks cost nothing), so a small
/// file can stand for terabytes; writing them out is something to ask for.
pub fn output_limit(file_len: u64) -> u64 {
    file_len.saturating_mul(16).max(256 << 20)
}

/// Bytes extract would write: modules, arguments, every region, and the post state of
/// written regions (apparent sizes: zero chunks become holes, but still count).
pub fn output_size(cap: &Capture<'_>) -> u64 {
    let modules: u64 = cap.modules.iter().map(|m| m.image.len() as u64).sum();
    let regions: u64 = cap
        .regions
        .iter()
        .map(|r| {
            r.size
                .saturating_mul(if cap.is_written(r.region_id) { 2 } else { 1 })
        })
        .fold(0u64, u64::saturating_add);
    modules
        .saturating_add(cap.dispatch.arg_bytes.len() as u64)
        .saturating_add(regions)
}

/// Creates `dir` (or takes an empty one; a non-empty one only with `force`).
fn output_dir(dir: &Path, force: bool) -> anyhow::Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let non_empty = fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .next()
        .is_some();
    if non_empty && !force {
        anyhow::bail!(
            "{} is not empty: extract into a new directory, or pass --force to replace files in it",
            dir.display()
        );
    }
    Ok(())
}

/// Writes a new file of `dir` (replacing one of that name with `force`).
fn write_file(dir: &Path, name: &str, bytes: &[u8], force: bool) -> anyhow::Result<()> {
    let p = dir.join(name);
    let mut f = create(&p, force).with_context(|| format!("cannot write {}", p.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("cannot write {}", p.display()))
}

pub fn run(a: ExtractArgs) -> anyhow::Result<ExitCode> {
    let file = super::open(&a.file)?;
    let cap = Capture::parse(file.bytes()).with_context(|| format!("{}", a.file.display()))?;
    kreplay_format::range::refuse_range(&cap, "extract").map_err(anyhow::Error::msg)?;
    let total = output_size(&cap);
    let limit = output_limit(file.bytes().len() as u64);
    if total > limit && !a.force {
        anyhow::bail!(
            "extract would write {} from a {} capture (more than {}, 16 x its size): pass --force to write it",
            bytes(total),
            bytes(file.bytes().len() as u64),
            bytes(limit)
        );
    }
    // The reproducer is planned before anything is written: a capture it cannot carry is
    // refused with nothing left behind.
    let repro = match &a.repro {
        Some(dir) => Some((
            dir,
            kreplay_player::Reproducer::of(&cap)
                .with_context(|| format!("no reproducer for {}", a.file.display()))?,
        )),
        None => None,
    };
    if let Some(dir) = &a.output {
        extract_into(&a, &file, &cap, dir)?;
    }
    if let Some((dir, r)) = repro {
        output_dir(dir, a.force)?;
        for (name, content) in &r.files {
            match content {
                ReproContent::Text(t) => write_file(dir, name, t.as_bytes(), a.force)?,
                ReproContent::Bytes(b) => write_file(dir, name, b, a.force)?,
                ReproContent::Region { region_id, post } => {
                    let Some(region) = cap.region(*region_id) else {
                        continue;
                    };
                    write_region(&file, &cap, region, &dir.join(name), *post, a.force)?;
                }
            }
        }
        crate::warn!(
            "kreplay: wrote a reproducer into {} ({} files): make -C {} && {}/repro",
            dir.display(),
            r.files.len(),
            dir.display(),
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn extract_into(
    a: &ExtractArgs,
    file: &MappedFile,
    cap: &Capture<'_>,
    dir: &Path,
) -> anyhow::Result<()> {
    output_dir(dir, a.force)?;
    let write = |name: String, bytes: &[u8]| write_file(dir, &name, bytes, a.force);
    for m in &cap.modules {
        let ext = match m.kind {
            ModuleKind::Cubin => "cubin",
            ModuleKind::Ptx => "ptx",
            ModuleKind::Fatbin => "fatbin",
        };
        write(format!("module-{}.{ext}", m.module_id), &m.image)?;
    }
    write("args.bin".into(), &cap.dispatch.arg_bytes)?;
    // Without a recorded output the post chunks only say where the kernel writes.
    let reference = cap.reference() == Reference::Recorded;
    for r in &cap.regions {
        let pre = dir.join(format!("region-{}-{:#x}.bin", r.region_id, r.address));
        write_region(file, cap, r, &pre, false, a.force)?;
        if reference && cap.is_written(r.region_id) {
            let post = dir.join(format!("region-{}-{:#x}.post.bin", r.region_id, r.address));
            write_region(file, cap, r, &post, true, a.force)?;
        }
    }
    let desc = describe(&a.file.display().to_string(), cap);
    write("capture.json".into(), &serde_json::to_vec_pretty(&desc)?)?;
    crate::warn!(
        "kreplay: extracted {} module(s), args.bin and {} region(s) into {}",
        cap.modules.len(),
        cap.regions.len(),
        dir.display()
    );
    Ok(())
}
