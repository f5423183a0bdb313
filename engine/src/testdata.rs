//! The real captures checked in under `testdata/captures`, for CPU tests of the plan.

use kreplay_format::Capture;

pub fn capture(name: &str, f: impl FnOnce(&Capture<'_>)) {
    let path = format!(
        "{}/../testdata/captures/{name}.krr",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let cap = Capture::parse(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    f(&cap);
}
