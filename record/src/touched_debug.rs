//! `KREPLAY_DEBUG_TOUCHED`: the pages of each region a capture holds, given by hand, so that the
//! recorder's half of a capture by touched pages (REGION_EXTENTS, absent bytes stored as zeros,
//! chunks without a touched page not stored) can be proven on a GPU apart from the recorder's
//! own finding of them (`--memory touched`, `touched_run`, on the Compute Sanitizer API). A test aid, as
//! `craft_touched` is for finished captures; not a user option.
//!
//! `REGION=PAGES[;REGION=PAGES...]`: REGION a region id (the walk's order, as `kreplay info`
//! shows it); PAGES comma-separated 4 KiB page indices or half-open ranges `a-b`, or `@FILE`
//! with one page index per line. Regions not named are held whole. It applies to the
//! snapshots a capture takes before its (first) dispatch: for one dispatch, not for the later
//! steps of a range. Read once, at the first capture.

use kreplay_format::extents::extents_of_pages;
use kreplay_format::MIN_EXTENT_PAGE;

use crate::snapshot::Snapshot;

const PAGE: u64 = MIN_EXTENT_PAGE as u64;
/// The most pages a spec may name in all (64 GiB of pages, 128 MiB of indices: a typo must not
/// allocate gigabytes inside the application's launch).
const MOST_PAGES: u64 = 1 << 24;

/// (region id, sorted page indices without repeats) of each entry of `spec`; `read` reads an
/// `@FILE`.
pub(crate) fn parse(
    spec: &str,
    read: impl Fn(&str) -> std::io::Result<String>,
) -> Result<Vec<(u32, Vec<u64>)>, String> {
    let mut out: Vec<(u32, Vec<u64>)> = Vec::new();
    let mut named = 0u64;
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
                    if b <= a {
                        return Err(format!(
                            "{entry}: {item} is not a page range a-b with a < b"
                        ));
                    }
                    named = named.saturating_add(b - a);
                    if named > MOST_PAGES {
                        return Err(format!("{entry}: more than {MOST_PAGES} pages named"));
                    }
                    pages.extend(a..b);
                }
                None => {
                    named += 1;
                    pages.push(page(item)?);
                }
            }
        }
        if pages.is_empty() {
            return Err(format!(
                "{entry}: no page named (a region with no touched page would be held absent whole)"
            ));
        }
        if out.iter().any(|(i, _)| *i == id) {
            return Err(format!("{entry}: region {id} is named twice"));
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
        if s.spilled.is_some() {
            return Err(format!(
                "region {id} went to the file during the stall (no device scratch for it): it is captured whole"
            ));
        }
        s.touched = Some(extents_of_pages(pages, PAGE, s.region.size));
    }
    Ok(())
}

/// `KREPLAY_DEBUG_TOUCHED` applied to `snapshots`, when it is set; why not, when it cannot be.
pub(crate) fn from_env(snapshots: &mut [Snapshot]) -> Result<(), String> {
    type Parsed = Option<Result<Vec<(u32, Vec<u64>)>, String>>;
    static PARSED: std::sync::OnceLock<Parsed> = std::sync::OnceLock::new();
    let parsed = PARSED.get_or_init(|| {
        let spec = std::env::var_os("KREPLAY_DEBUG_TOUCHED")?;
        Some(parse(&spec.to_string_lossy(), |f| {
            std::fs::read_to_string(f)
        }))
    });
    match parsed {
        None => Ok(()),
        Some(Err(e)) => Err(format!("KREPLAY_DEBUG_TOUCHED: {e}")),
        Some(Ok(spec)) => apply(spec, snapshots).map_err(|e| format!("KREPLAY_DEBUG_TOUCHED: {e}")),
    }
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
        for bad in [
            "3",
            "x=1",
            "3=a",
            "3=4-2",
            "3=0-999999999999",
            "3=0-9999999;4=0-9999999",
            "3=@missing",
            "3=",
            "3=1;3=2",
        ] {
            let e = parse(bad, no_file).expect_err(bad);
            assert!(
                e.starts_with(bad.rsplit(';').next().unwrap_or(bad)),
                "{bad}: {e}"
            );
        }
    }

    fn snapshot(id: u32, size: u64) -> Snapshot {
        Snapshot {
            region: kreplay_format::Region {
                region_id: id,
                address: 0x1000 * u64::from(id + 1),
                size,
                kind: kreplay_format::MemoryKind::Device,
                role: kreplay_format::RegionRole::Argument,
                chunk_size: kreplay_format::DEFAULT_CHUNK_SIZE,
            },
            device_addr: 0,
            pre: crate::snapshot::Bytes::Host(Vec::new()),
            post: None,
            pre_nonzero: None,
            spilled: None,
            array: None,
            touched: None,
            kernel_readable: false,
        }
    }

    // Catches: pages given to the wrong region (an index, not the region id), a page past the
    // region accepted, or a region not in the capture passed over.
    #[test]
    fn pages_go_to_the_region_named_and_nothing_else_is_touched() {
        let mut snaps = vec![snapshot(1, 3 * PAGE + 5), snapshot(0, 10 * PAGE)];
        apply(&[(0, vec![2, 3, 4]), (1, vec![3])], &mut snaps).expect("apply");
        assert_eq!(snaps[1].touched, Some(vec![(2 * PAGE, 3 * PAGE)]));
        assert_eq!(
            snaps[0].touched,
            Some(vec![(3 * PAGE, 5)]),
            "the short last page"
        );
        let mut snaps = vec![snapshot(0, 2 * PAGE)];
        assert!(
            apply(&[(0, vec![2])], &mut snaps).is_err(),
            "page past the region"
        );
        assert!(
            apply(&[(5, vec![0])], &mut snaps).is_err(),
            "no such region"
        );
        assert_eq!(snaps[0].touched, None);
    }
}
