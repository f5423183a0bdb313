//! Writes damaged-but-checksummed variants of a real capture, for the GPU suite's proof that
//! the player does not trust the file (issue 14). Not a user tool.
//!
//!   craft_hostile KIND IN.krr OUT.krr
//!   craft_hostile meta-bomb|zero-bomb|zstd-bomb - OUT.krr
//!
//! KIND: `fewer-params` (the last parameter dropped from the layout), `huge-global` (the first
//! module global's region claims 40 GiB), `bad-elf` (the cubin's section table points past its
//! end), `bad-pointer` (the first pointer stored in captured memory points at unmapped memory:
//! the kernel faults).

use std::io::Cursor;

use kreplay_format::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, kind, input, output] = &args[..] else {
        return Err("usage: craft_hostile KIND IN.krr OUT.krr".into());
    };
    if input == "-" {
        return bomb(kind, output);
    }
    let data = std::fs::read(input)?;
    let cap = Capture::parse(&data)?;
    let mut dispatch = cap.dispatch.clone();
    let mut modules = cap.modules.clone();
    let mut sizes: Vec<(u32, u64)> = cap.regions.iter().map(|r| (r.region_id, r.size)).collect();
    let mut poison: Option<(u32, u64)> = None;
    match kind.as_str() {
        "fewer-params" => {
            let last = dispatch
                .params
                .pop()
                .ok_or("the kernel has no parameters")?;
            dispatch.arg_bytes.truncate(last.offset as usize);
            let len = dispatch.arg_bytes.len() as u32;
            dispatch.pointer_words.retain(|&w| w + 8 <= len);
        }
        "huge-global" => {
            let g = cap
                .globals
                .first()
                .ok_or("the capture has no module global")?;
            for s in sizes.iter_mut().filter(|s| s.0 == g.region_id) {
                s.1 = 40 << 30;
            }
        }
        "bad-elf" => {
            let m = modules
                .iter_mut()
                .find(|m| m.kind == ModuleKind::Cubin)
                .ok_or("the capture has no cubin")?;
            let len = m.image.len() as u64;
            m.image[40..48].copy_from_slice(&len.to_le_bytes());
        }
        "bad-pointer" => {
            poison = Some(
                *cap.pointer_slots
                    .first()
                    .ok_or("the capture has no pointer stored in captured memory")?,
            );
        }
        other => return Err(format!("unknown KIND {other}").into()),
    }

    let mut w = CaptureWriter::new(
        Cursor::new(Vec::new()),
        cap.header.uuid,
        WriterOptions::default(),
    )?;
    if let Some(i) = &cap.info {
        w.capture_info(i)?;
    }
    if let Some(d) = &cap.device {
        w.device(d)?;
    }
    for m in &modules {
        w.module(m)?;
    }
    w.dispatch(&dispatch)?;
    for r in &cap.regions {
        let size = sizes
            .iter()
            .find(|s| s.0 == r.region_id)
            .map_or(r.size, |s| s.1);
        write_region(&mut w, &cap, r, size, poison)?;
    }
    for g in &cap.globals {
        w.module_global(g)?;
    }
    if !cap.pointer_slots.is_empty() {
        w.pointer_slots(&PointerSlots {
            slots: cap.pointer_slots.clone(),
        })?;
    }
    for a in &cap.annotations {
        w.annotation(a)?;
    }
    std::fs::write(output, w.finish()?.into_inner())?;
    Ok(())
}

/// One region of the copy at `size` bytes (grown regions get zero chunks past their end), its
/// chunks copied with the `poison` pointer word (region, offset) overwritten when given.
fn write_region(
    w: &mut CaptureWriter<Cursor<Vec<u8>>>,
    cap: &Capture<'_>,
    r: &Region,
    size: u64,
    poison: Option<(u32, u64)>,
) -> Result<(), Box<dyn std::error::Error>> {
    let region = Region { size, ..r.clone() };
    w.region(&region)?;
    for state in [MemoryState::Pre, MemoryState::Post] {
        for c in cap.chunks(r.region_id, state) {
            let mut buf = vec![0u8; c.raw_len as usize];
            cap.read_chunk_into(c, &mut buf)?;
            if let Some((_, off)) = poison.filter(|p| p.0 == r.region_id) {
                if off >= c.offset && off + 8 <= c.offset + c.raw_len {
                    let at = (off - c.offset) as usize;
                    buf[at..at + 8].copy_from_slice(&0x0000_0dea_d000_0000u64.to_le_bytes());
                }
            }
            // A grown region: its last original chunk is padded to a whole chunk.
            let end = (c.offset + region.chunk_size).min(size);
            buf.resize((end - c.offset) as usize, 0);
            w.memory(r.region_id, state, c.offset, &buf)?;
        }
    }
    // Zero chunks for the rest of a grown region.
    let mut off = r.size.div_ceil(r.chunk_size) * r.chunk_size;
    let zero = vec![0u8; region.chunk_size as usize];
    while off < size {
        let n = region.chunk_size.min(size - off) as usize;
        w.memory(r.region_id, MemoryState::Pre, off, &zero[..n])?;
        off += region.chunk_size;
    }
    Ok(())
}

/// Files that claim far more than they hold (issue 14's amplification cases): `meta-bomb`
/// (an annotation of 100 MiB in a few KB of zstd), `zero-bomb` (1 TiB of zero chunks),
/// `zstd-bomb` (256 zstd chunks of 64 MiB each, a few KB each: 16 GiB).
fn bomb(kind: &str, output: &str) -> Result<(), Box<dyn std::error::Error>> {
    use kreplay_format::layout::{ChunkPrefix, FLAG_CRITICAL, FLAG_ZSTD};
    let mut w = CaptureWriter::new(Cursor::new(Vec::new()), [7; 16], WriterOptions::default())?;
    w.module(&ModuleImage {
        module_id: 1,
        kind: ModuleKind::Cubin,
        arch: 90,
        image: b"\x7fELF".to_vec(),
    })?;
    w.dispatch(&Dispatch {
        kernel_name: "k".into(),
        module_id: 1,
        api: LaunchApi::LaunchKernel,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        cluster: [0, 0, 0],
        dynamic_shared_bytes: 0,
        attributes: vec![],
        params: vec![],
        arg_bytes: vec![],
        pointer_words: vec![],
        original_duration_ns: None,
    })?;
    let chunk: u64 = 64 << 20;
    let region = |w: &mut CaptureWriter<Cursor<Vec<u8>>>, size: u64| {
        w.region(&Region {
            region_id: 0,
            address: 0x7f00_0000_0000,
            size,
            kind: MemoryKind::Device,
            role: RegionRole::Allocation,
            chunk_size: chunk,
        })
    };
    match kind {
        "meta-bomb" => {
            let a = Annotation {
                key: "k".into(),
                value: "a".repeat(100 << 20),
            };
            let bytes = kreplay_format::codec::encode(&a, "annotation")?;
            let z = zstd::bulk::compress(&bytes, 19)?;
            w.write_raw_event(EventKind::Annotation as u16, FLAG_ZSTD, &z)?;
        }
        "zero-bomb" | "zstd-bomb" => {
            let n: u64 = if kind == "zero-bomb" { 16384 } else { 256 };
            region(&mut w, n * chunk)?;
            let zeros = vec![0u8; chunk as usize];
            let z = zstd::bulk::compress(&zeros, 19)?;
            let zeros_crc = crc32fast::hash(&zeros);
            for i in 0..n {
                let p = ChunkPrefix {
                    region_id: 0,
                    state: MemoryState::Pre,
                    encoding: if kind == "zero-bomb" {
                        ChunkEncoding::Zero
                    } else {
                        ChunkEncoding::Zstd
                    },
                    offset: i * chunk,
                    raw_len: chunk,
                    raw_crc: zeros_crc,
                };
                let mut payload = p.encode().to_vec();
                if kind == "zstd-bomb" {
                    payload.extend_from_slice(&z);
                }
                w.write_raw_event(EventKind::MemoryChunk as u16, FLAG_CRITICAL, &payload)?;
            }
        }
        other => return Err(format!("unknown bomb {other}").into()),
    }
    std::fs::write(output, w.finish()?.into_inner())?;
    Ok(())
}
