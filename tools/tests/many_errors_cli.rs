//! The error paths of the many-capture commands (`kreplay play` and `verify` of a folder,
//! files or a manifest) and of `kreplay compare`, end to end without a GPU: what must fail
//! says what is wrong and exits 2 instead of passing a gate on a run of nothing.

mod common;

use std::path::Path;

use common::{kreplay, scratch};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

// Catches: a manifest listing no capture run as nothing at all, with exit 0.
#[test]
fn a_manifest_listing_no_capture_is_refused_by_play_and_verify() {
    let d = scratch("many-empty-manifest");
    let m = d.join("corpus.json");
    std::fs::write(&m, r#"{"version":1,"captures":[],"left_out":[]}"#).expect("write");
    let out = d.join("r.jsonl");
    for command in ["play", "verify"] {
        let (code, o, e) = kreplay(&[command, s(&m), "--json-lines", s(&out)]);
        assert_eq!(code, 2, "{command}: {o}{e}");
        assert!(
            e.contains(&format!("{} lists no capture", m.display())),
            "{command}: {e}"
        );
        assert!(!o.contains("capture(s):"), "{command} ran: {o}");
    }
}
