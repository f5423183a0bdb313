//! What commands that do not yet understand range captures call to refuse one.

use crate::reader::Capture;

/// `Err` with the message to show when `command` (e.g. `"pack"`, `"play --metrics"`) is given
/// a range capture, which it would otherwise treat as its first step alone.
pub fn refuse_range(cap: &Capture<'_>, command: &str) -> Result<(), String> {
    if cap.is_range() {
        return Err(range_refusal(command, cap.steps.len()));
    }
    Ok(())
}

/// The refusal message for a range of `steps` steps.
pub fn range_refusal(command: &str, steps: usize) -> String {
    format!(
        "this is a range capture ({steps} steps): range captures are not supported by `{command}` yet \
         (`kreplay info` and `kreplay play --passes N --verify` replay them)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_the_command_and_the_step_count() {
        let m = range_refusal("pack", 3);
        assert!(m.contains("`pack`"), "{m}");
        assert!(m.contains("3 steps"), "{m}");
        assert!(m.contains("not supported"), "{m}");
    }
}
