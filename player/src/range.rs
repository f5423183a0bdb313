//! What the player decides about range captures (a sequence of kernel steps replayed as one
//! pass): which replay options do not apply to them yet, and their in-app time.

use kreplay_format::Capture;

use crate::play_options::PlayOptions;

/// The in-app duration to compare a pass with: the dispatch's, or for a range the sum of its
/// steps' (none when a step's is unknown).
pub fn original_ns(cap: &Capture<'_>) -> Option<u64> {
    if !cap.is_range() {
        return cap.dispatch.original_duration_ns;
    }
    if let Some(ns) = cap.range.as_ref().and_then(|r| r.original_duration_ns) {
        return Some(ns);
    }
    cap.steps
        .iter()
        .filter_map(|s| s.dispatch())
        .map(|d| d.original_duration_ns)
        .sum()
}

/// The `play` option, if any, that range captures do not support yet (`--metrics`,
/// `--tool`, `--module` or `--ptx`, `--relocate`, `--save-output`).
pub fn unsupported_option(options: &PlayOptions) -> Option<&'static str> {
    if !options.metrics.is_empty() {
        return Some("play --metrics");
    }
    if options.tool.is_some() {
        return Some("play --tool");
    }
    if options.code != kreplay_engine::CodeChoice::Captured {
        return Some("play --module/--ptx");
    }
    if options.relocate {
        return Some("play --relocate");
    }
    if options.save_output.is_some() {
        return Some("play --save-output");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_a_range_cannot_take_yet_are_named() {
        assert_eq!(unsupported_option(&PlayOptions::default()), None);
        let verify = PlayOptions {
            passes: 8,
            verify: true,
            ..PlayOptions::default()
        };
        assert_eq!(unsupported_option(&verify), None);
        let metrics = PlayOptions {
            metrics: vec!["sm__cycles_elapsed.avg".into()],
            ..PlayOptions::default()
        };
        assert_eq!(unsupported_option(&metrics), Some("play --metrics"));
        let tool = PlayOptions {
            tool: Some("t.so".into()),
            ..PlayOptions::default()
        };
        assert_eq!(unsupported_option(&tool), Some("play --tool"));
        let moved = PlayOptions {
            relocate: true,
            ..PlayOptions::default()
        };
        assert_eq!(unsupported_option(&moved), Some("play --relocate"));
        let variant = PlayOptions {
            code: kreplay_engine::CodeChoice::Ptx,
            ..PlayOptions::default()
        };
        assert_eq!(unsupported_option(&variant), Some("play --module/--ptx"));
    }

    #[test]
    fn a_single_capture_keeps_its_dispatch_time() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        assert_eq!(original_ns(&cap), cap.dispatch.original_duration_ns);
        let step = |ns| {
            kreplay_format::Step::kernel(
                0,
                kreplay_format::Dispatch {
                    original_duration_ns: ns,
                    ..cap.dispatch.clone()
                },
            )
        };
        cap.steps = vec![step(Some(100)), step(Some(250))];
        assert_eq!(original_ns(&cap), Some(350));
        cap.steps.push(step(None));
        assert_eq!(original_ns(&cap), None);
    }
}
