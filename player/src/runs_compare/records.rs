//! The JSON-lines run record as `kreplay compare` reads it: one object per capture per line,
//! the schema the farm writes (`--json-lines`). Optional fields default, so lines from older
//! writers still read; unknown fields are ignored, so newer writers' lines read too.

/// A capture's outcome in one run: the farm's type (`crate::run_record`), one for both.
pub use crate::run_record::Verdict;

/// One line of a run's JSON-lines file: the farm's own record, one type for writer and reader.
pub use crate::run_record::RunRecord;

/// A line that is not a run record.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}:{line}: not a run record: {reason}")]
pub struct RecordError {
    /// The file as the user named it.
    pub source_name: String,
    /// 1-based.
    pub line: usize,
    pub reason: String,
}

/// Every record of a run's JSON-lines text, in order. Blank lines are skipped (an editor's or
/// a shell's trailing newline); any other line that is not a record is an error naming
/// `source_name` and the line.
pub fn parse_runs(source_name: &str, text: &str) -> Result<Vec<RunRecord>, RecordError> {
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str::<RunRecord>(line).map_err(|e| RecordError {
            source_name: source_name.to_string(),
            line: i + 1,
            reason: e.to_string(),
        })?;
        records.push(record);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_line_reads_every_field() {
        let line = r#"{"file":"a.krr","sha256":"ab","kernel":"saxpy","mangled":"_Z5saxpy",
            "device":"NVIDIA H200","device_uuid":"GPU-1","driver":"580.65","verdict":"matched",
            "median_us":10.5,"first_us":12.0,"in_app_us":11.0,"passes":8,"spread_pct":1.5,
            "error":null,"wall_s":0.8}"#
            .replace('\n', "");
        let r = parse_runs("run.jsonl", &line).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].sha256.as_deref(), Some("ab"));
        assert_eq!(r[0].verdict, Verdict::Matched);
        assert_eq!(r[0].median_us, Some(10.5));
        assert_eq!(r[0].passes, Some(8));
        assert_eq!(r[0].driver.as_deref(), Some("580.65"));
    }

    #[test]
    fn optional_fields_default_and_unknown_fields_are_ignored() {
        let text = "{\"file\":\"a.krr\",\"verdict\":\"timeout\",\"future\":[1,2]}\n\n";
        let r = parse_runs("run.jsonl", text).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].verdict, Verdict::Timeout);
        assert_eq!(r[0].median_us, None);
        assert_eq!(r[0].sha256, None);
    }

    #[test]
    fn a_malformed_line_names_the_file_and_line() {
        let text = "{\"file\":\"a.krr\",\"verdict\":\"matched\"}\n\n{\"file\":\"b.krr\"\n";
        let e = parse_runs("new.jsonl", text).unwrap_err();
        assert_eq!((e.source_name.as_str(), e.line), ("new.jsonl", 3));
        assert!(
            e.to_string().starts_with("new.jsonl:3: not a run record"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_verdict_or_a_missing_file_is_refused() {
        let e = parse_runs("r", "{\"file\":\"a\",\"verdict\":\"maybe\"}").unwrap_err();
        assert!(e.reason.contains("maybe"), "{e}");
        let e = parse_runs("r", "{\"verdict\":\"matched\"}").unwrap_err();
        assert!(e.reason.contains("file"), "{e}");
    }

    #[test]
    fn passing_verdicts() {
        let passing = [Verdict::Matched, Verdict::Deterministic, Verdict::Verified];
        for v in passing {
            assert!(v.passed(), "{v:?}");
        }
        for v in [
            Verdict::Mismatch,
            Verdict::Nondeterministic,
            Verdict::Error,
            Verdict::Timeout,
            Verdict::Damaged,
        ] {
            assert!(!v.passed(), "{v:?}");
        }
    }
}
