//! `kreplay verify-trace` (hidden): `play --trace` files checked against the format
//! (`kreplay_player::trace_check`), for the GPU suite and for debugging a trace a viewer will
//! not open.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_player::trace_check::check_trace;

use crate::cli::VerifyTraceArgs;
use crate::out;

/// One JSON line per valid file (what it holds); every defect of the others on stderr, and
/// exit 1.
pub fn run(a: VerifyTraceArgs) -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    let mut failed = false;
    for path in &a.files {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let json: serde_json::Value = serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        match check_trace(&json) {
            Ok(summary) => {
                let mut line = serde_json::to_value(&summary)?;
                line["file"] = path.display().to_string().into();
                serde_json::to_writer(&mut w, &line)?;
                out!(w);
            }
            Err(defects) => {
                failed = true;
                for d in defects {
                    crate::warn!(
                        "kreplay: {}: {}",
                        path.display(),
                        crate::output::printable(&d.to_string())
                    );
                }
            }
        }
    }
    Ok(match failed {
        true => ExitCode::from(1),
        false => ExitCode::SUCCESS,
    })
}
