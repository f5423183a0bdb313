//! What a capture's verdict change means for correctness.

use serde::Serialize;

use super::records::Verdict;

/// A capture's verdict from the base run to the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictChange {
    Same,
    /// It passed (matched, deterministic, verified) and now fails (mismatch,
    /// nondeterministic, error, timeout, damaged): a correctness regression.
    Regression,
    /// It failed and now passes.
    Improvement,
    /// Another verdict on the same side: matched to deterministic (the reference output was
    /// dropped), mismatch to error, ...
    Changed,
}

pub fn verdict_change(base: Verdict, new: Verdict) -> VerdictChange {
    match (base.passed(), new.passed()) {
        _ if base == new => VerdictChange::Same,
        (true, false) => VerdictChange::Regression,
        (false, true) => VerdictChange::Improvement,
        _ => VerdictChange::Changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Verdict::*;

    #[test]
    fn passing_to_failing_is_a_regression() {
        for bad in [Mismatch, Nondeterministic, Error, Timeout] {
            assert_eq!(verdict_change(Matched, bad), VerdictChange::Regression);
            assert_eq!(
                verdict_change(Deterministic, bad),
                VerdictChange::Regression
            );
        }
        assert_eq!(verdict_change(Verified, Damaged), VerdictChange::Regression);
    }

    #[test]
    fn failing_to_passing_is_an_improvement() {
        assert_eq!(
            verdict_change(Mismatch, Matched),
            VerdictChange::Improvement
        );
        assert_eq!(
            verdict_change(Timeout, Deterministic),
            VerdictChange::Improvement
        );
        assert_eq!(
            verdict_change(Damaged, Verified),
            VerdictChange::Improvement
        );
    }

    #[test]
    fn same_side_changes_and_no_change() {
        assert_eq!(verdict_change(Matched, Matched), VerdictChange::Same);
        assert_eq!(verdict_change(Error, Error), VerdictChange::Same);
        assert_eq!(
            verdict_change(Matched, Deterministic),
            VerdictChange::Changed
        );
        assert_eq!(verdict_change(Mismatch, Error), VerdictChange::Changed);
    }
}
