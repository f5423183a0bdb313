//! Rewrites a whole capture as a capture by touched pages (format 1.4, REGION_EXTENTS): the
//! named regions keep only the 4 KiB pages given, every other byte absent. For the GPU
//! suite's proof that the player replays absent pages (filled, neither restored nor
//! verified) while the recorder's `--memory touched` is being built. Not a user tool.
//!
//!   craft_touched IN.krr OUT.krr REGION=PAGES [REGION=PAGES ...]
//!
//! REGION: a region id (`kreplay info --json`). PAGES: comma-separated page indices or
//! half-open ranges `a-b` (page `a` up to, not including, `b`), or `@FILE` with one page index
//! per line. Regions not named stay whole.

use std::collections::BTreeMap;
use std::io::Cursor;

use kreplay_format::*;

const PAGE: u64 = MIN_EXTENT_PAGE as u64;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: craft_touched IN.krr OUT.krr REGION=PAGES [REGION=PAGES ...]".into());
    }
    let data = std::fs::read(&args[1])?;
    let cap = Capture::parse(&data)?;
    let mut pages: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for spec in &args[3..] {
        let (id, list) = spec
            .split_once('=')
            .ok_or_else(|| format!("{spec}: not REGION=PAGES"))?;
        let id: u32 = id.parse().map_err(|_| format!("{spec}: bad region id"))?;
        let r = cap
            .region(id)
            .ok_or_else(|| format!("{spec}: the capture has no region {id}"))?;
        let list = match list.strip_prefix('@') {
            Some(file) => std::fs::read_to_string(file)?
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(","),
            None => list.to_string(),
        };
        let mut got = parse_pages(&list)?;
        let last = r.size.div_ceil(PAGE);
        if let Some(p) = got.iter().find(|&&p| p >= last) {
            return Err(format!("{spec}: page {p} is past region {id}'s {last} pages").into());
        }
        got.sort_unstable();
        got.dedup();
        pages.insert(id, got);
    }

    let mut w = CaptureWriter::new(
        Cursor::new(Vec::new()),
        cap.header.uuid,
        WriterOptions::default(),
    )?;
    pack::write_head(&mut w, &cap)?;
    for r in &cap.regions {
        w.region(r)?;
        let present = pages
            .get(&r.region_id)
            .map(|p| extents::extents_of_pages(p, PAGE, r.size));
        if let Some(present) = &present {
            w.region_extents(&RegionExtents {
                region_id: r.region_id,
                page_size: MIN_EXTENT_PAGE,
                present: present.clone(),
            })?;
        }
        for state in [MemoryState::Pre, MemoryState::Post] {
            for c in cap.chunks(r.region_id, state) {
                let mut buf = vec![0u8; c.raw_len as usize];
                cap.read_chunk_into(c, &mut buf)?;
                if let Some(present) = &present {
                    // The writer stores absent bytes only as zeros (and drops wholly absent
                    // chunks).
                    extents::zero_absent(present, c.offset, &mut buf);
                }
                w.memory(r.region_id, state, c.offset, &buf)?;
            }
        }
    }
    pack::write_tail(&mut w, &cap)?;
    let reference = cap.reference();
    if reference != Reference::Recorded && reference != Reference::Partial {
        w.annotation(&Annotation {
            key: REFERENCE_ANNOTATION.into(),
            value: reference.name().into(),
        })?;
    }
    std::fs::write(&args[2], w.finish()?.into_inner())?;
    Ok(())
}

fn parse_pages(list: &str) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (a.parse()?, b.parse()?);
                if b <= a || b - a > 1 << 32 {
                    return Err(format!("{item}: not a page range a-b with a < b").into());
                }
                out.extend(a..b);
            }
            None => out.push(item.parse()?),
        }
    }
    Ok(out)
}
