//! `KREPLAY_DEBUG_TOUCHED`: the pages of each region a capture holds, given by hand, so that the
//! recorder's half of a capture by touched pages (REGION_EXTENTS, absent bytes stored as zeros,
//! chunks without a touched page not stored) can be proven on a GPU before the recorder finds
//! the pages itself (`--memory touched`, issue 35, on the Compute Sanitizer API). A test aid, as
//! `craft_touched` is for finished captures; not a user option.
//!
//! `REGION=PAGES[;REGION=PAGES...]`: REGION a region id (the walk's order, as `kreplay info`
//! shows it); PAGES comma-separated 4 KiB page indices or half-open ranges `a-b`, or `@FILE`
//! with one page index per line. Regions not named are held whole.

use kreplay_format::extents::extents_of_pages;
use kreplay_format::MIN_EXTENT_PAGE;

use crate::snapshot::Snapshot;

const PAGE: u64 = MIN_EXTENT_PAGE as u64;
/// The most pages one range `a-b` may name (a typo must not allocate gigabytes).
const MOST_PAGES: u64 = 1 << 28;

/// (region id, sorted page indices without repeats) of each entry of `spec`; `read` reads an
/// `@FILE`.
pub(crate) fn parse(
    spec: &str,
    read: impl Fn(&str) -> std::io::Result<String>,
) -> Result<Vec<(u32, Vec<u64>)>, String> {
    let mut out = Vec::new();
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, list) = entry
            .split_once('=')
            .ok_or_else(|| format!("{entry}: not REGION=PAGES"))?;
        let id: u32 = id
            .trim()
            .parse()
            .map_err(|_| format!("{entry}: {id:?} is not a region id"))?;
        let list = match list.strip_prefix('@') {
            Some(file) => read(file)
                .map_err(|e| format!("{entry}: reading {file}: {e}"))?
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(","),
            None => list.to_string(),
        };
        let mut pages = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let page = |s: &str| {
                s.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("{entry}: {s:?} is not a page index"))
            };
            match item.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (page(a)?, page(b)?);
                    if b <= a || b - a > MOST_PAGES {
                        return Err(format!(
                            "{entry}: {item} is not a page range a-b with a < b (at most {MOST_PAGES} pages)"
                        ));
                    }
                    pages.extend(a..b);
                }
                None => pages.push(page(item)?),
            }
        }
        pages.sort_unstable();
        pages.dedup();
        out.push((id, pages));
    }
    Ok(out)
}

/// Gives the named snapshots their touched pages (a page past a region is an error: the spec
/// was written for another capture).
pub(crate) fn apply(spec: &[(u32, Vec<u64>)], snapshots: &mut [Snapshot]) -> Result<(), String> {
    for (id, pages) in spec {
        let Some(s) = snapshots.iter_mut().find(|s| s.region.region_id == *id) else {
            return Err(format!("the capture has no region {id}"));
        };
        let last = s.region.size.div_ceil(PAGE);
        if let Some(p) = pages.iter().find(|&&p| p >= last) {
            return Err(format!("page {p} is past region {id}'s {last} pages"));
        }
        if s.array.is_some() {
            return Err(format!("region {id} is a CUDA array: it is captured whole"));
        }
        s.touched = Some(extents_of_pages(pages, PAGE, s.region.size));
    }
    Ok(())
}

/// `KREPLAY_DEBUG_TOUCHED` applied to `snapshots`, when it is set; why not, when it cannot be.
pub(crate) fn from_env(snapshots: &mut [Snapshot]) -> Result<(), String> {
    let Some(spec) = std::env::var_os("KREPLAY_DEBUG_TOUCHED") else {
        return Ok(());
    };
    let spec = spec.to_string_lossy();
    let parsed = parse(&spec, |f| std::fs::read_to_string(f))
        .map_err(|e| format!("KREPLAY_DEBUG_TOUCHED: {e}"))?;
    apply(&parsed, snapshots).map_err(|e| format!("KREPLAY_DEBUG_TOUCHED: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_file(_: &str) -> std::io::Result<String> {
        Err(std::io::Error::other("no such file"))
    }

    #[test]
    fn pages_are_parsed_sorted_merged_and_bounded() {
        assert_eq!(
            parse("3=5,1-3,2 ; 0=@p", |f| {
                assert_eq!(f, "p");
                Ok("7\n0\n".into())
            }),
            Ok(vec![(3, vec![1, 2, 5]), (0, vec![0, 7])])
        );
        assert_eq!(parse("", no_file), Ok(vec![]));
        for bad in ["3", "x=1", "3=a", "3=4-2", "3=0-999999999999", "3=@missing"] {
            let e = parse(bad, no_file).expect_err(bad);
            assert!(
                e.starts_with(bad.split(';').next().unwrap_or(bad)),
                "{bad}: {e}"
            );
        }
    }
}
