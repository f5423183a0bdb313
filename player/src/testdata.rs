//! The real captures checked in under `testdata/captures`, and captures derived from them the
//! way users derive them (packed without output, salvaged), for CPU tests of the session's
//! decisions.

use std::io::Cursor;

use kreplay_format::pack::{pack, PackOptions};
use kreplay_format::{salvage_verified, Capture};

/// The bytes of `testdata/captures/{name}.krr`.
pub fn bytes(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../testdata/captures/{name}.krr",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The bytes of `testdata/golden/{name}.krr` (range captures built by the format's tests).
pub fn golden(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../testdata/golden/{name}.krr",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn parse(bytes: &[u8]) -> Capture<'_> {
    Capture::parse(bytes).unwrap_or_else(|e| panic!("parse: {e}"))
}

/// `kreplay pack --drop-output`: where the kernel writes is kept, not what.
pub fn without_output(bytes: &[u8]) -> Vec<u8> {
    let opts = PackOptions {
        level: 3,
        drop_post: true,
        redact: false,
        param_types: Vec::new(),
        step_param_types: Vec::new(),
    };
    let (out, _) = pack(&parse(bytes), Cursor::new(Vec::new()), [9; 16], opts).expect("pack");
    out.into_inner()
}

/// What `kreplay verify --salvage` makes of the file a recorder leaves when it dies just
/// before the index: every event there, but nothing says the output was complete, so the
/// regions without post chunks get post chunks of unknown output (`Reference::Partial`).
pub fn salvaged_unfinished(bytes: &[u8]) -> Vec<u8> {
    let cap = parse(bytes);
    let mut cut = bytes[..cap.header.index_offset as usize].to_vec();
    let header = kreplay_format::layout::FileHeader {
        state: kreplay_format::layout::STATE_RECORDING,
        index_offset: 0,
        ..cap.header
    };
    cut[..64].copy_from_slice(&header.encode());
    salvage_verified(&cut).expect("salvage").0
}

/// `cap` as a recorder of touched pages would leave it: each region of `regions` holds only
/// its first 4 KiB page (or nothing, `first_page` false).
pub fn touched(cap: &mut Capture<'_>, regions: usize, first_page: bool) {
    for r in cap.regions.clone().into_iter().take(regions) {
        cap.region_extents.insert(
            r.region_id,
            kreplay_format::RegionExtents {
                region_id: r.region_id,
                page_size: 4096,
                present: if first_page {
                    vec![(0, 4096)]
                } else {
                    Vec::new()
                },
            },
        );
    }
}
