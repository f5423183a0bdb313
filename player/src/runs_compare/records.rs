//! The JSON-lines run record as `kreplay compare` reads it: one object per capture per line,
//! the schema the farm writes (`--json-lines`). Optional fields default, so lines from older
//! writers still read; unknown fields are ignored, so newer writers' lines read too.

/// A capture's outcome in one run: the farm's type (`crate::run_record`), one for both.
pub use crate::run_record::Verdict;

/// One line of a run's JSON-lines file: the farm's own record, one type for writer and reader.
pub use crate::run_record::RunRecord;

/// Why a run's JSON-lines file cannot be compared. Each names the file as the user named it
/// (`source_name`), and the line (1-based) where there is one.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A line that is not a run record.
    #[error("{source_name}:{line}: not a run record: {reason}")]
    NotARecord {
        source_name: String,
        line: usize,
        reason: String,
    },
    /// The last line stops mid-record with no newline: the run that writes the file was killed
    /// while writing it, or is still running.
    #[error(
        "{source_name}:{line}: the last line is cut short (the run was killed while writing it, \
         or is still running): finish the run (the same kreplay play with --resume runs that \
         capture again), or delete the line to compare the rest"
    )]
    CutShort { source_name: String, line: usize },
    /// No record at all: the run produced nothing, so nothing can pass or fail.
    #[error(
        "{source_name} holds no run record (the file is empty): the run it comes from produced \
         no result to compare"
    )]
    NoRecord { source_name: String },
}

/// Every record of a run's JSON-lines text, in order. Blank lines are skipped (an editor's or
/// a shell's trailing newline); any other line that is not a record is an error naming
/// `source_name` and the line, and so is a text with no record: a comparison with an empty
/// run would show every capture removed and pass the gate. A last line cut short is not
/// compared around: the gate answers for a finished run only.
pub fn parse_runs(source_name: &str, text: &str) -> Result<Vec<RunRecord>, RecordError> {
    let mut records = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str::<RunRecord>(line).map_err(|e| {
            let torn = e.is_eof() && i + 1 == lines.len() && !text.ends_with('\n');
            let source_name = source_name.to_string();
            if torn {
                RecordError::CutShort {
                    source_name,
                    line: i + 1,
                }
            } else {
                RecordError::NotARecord {
                    source_name,
                    line: i + 1,
                    reason: e.to_string(),
                }
            }
        })?;
        records.push(record);
    }
    if records.is_empty() {
        return Err(RecordError::NoRecord {
            source_name: source_name.to_string(),
        });
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
        assert!(matches!(e, RecordError::NotARecord { line: 3, .. }), "{e}");
        assert!(
            e.to_string().starts_with("new.jsonl:3: not a run record"),
            "{e}"
        );
    }

    // Catches: an empty run (or one of blank lines) compared as "everything removed", which
    // passes the gate.
    #[test]
    fn a_file_with_no_record_is_an_error_naming_it() {
        for text in ["", "\n\n  \n"] {
            let e = parse_runs("new.jsonl", text).unwrap_err();
            assert!(matches!(e, RecordError::NoRecord { .. }), "{e}");
            assert!(
                e.to_string().starts_with("new.jsonl holds no run record"),
                "{e}"
            );
        }
    }

    // Catches: a run killed mid-write taken for garbage (or compared as if finished).
    #[test]
    fn a_last_line_cut_short_says_so_with_its_line() {
        let whole = "{\"file\":\"a.krr\",\"verdict\":\"matched\"}\n";
        let torn = format!("{whole}{{\"file\":\"b.krr\",\"verd");
        let e = parse_runs("new.jsonl", &torn).unwrap_err();
        assert!(matches!(e, RecordError::CutShort { line: 2, .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("new.jsonl:2: the last line is cut short"),
            "{e}"
        );
        // The same line ended by a newline was written whole: it is damage, not a cut.
        let e = parse_runs("new.jsonl", &format!("{torn}\n")).unwrap_err();
        assert!(matches!(e, RecordError::NotARecord { line: 2, .. }), "{e}");
        // Garbage at the end is not a record cut short.
        let e = parse_runs("new.jsonl", &format!("{whole}garbage")).unwrap_err();
        assert!(matches!(e, RecordError::NotARecord { line: 2, .. }), "{e}");
    }

    #[test]
    fn an_unknown_verdict_or_a_missing_file_is_refused() {
        let e = parse_runs("r", "{\"file\":\"a\",\"verdict\":\"maybe\"}\n").unwrap_err();
        assert!(e.to_string().contains("maybe"), "{e}");
        let e = parse_runs("r", "{\"verdict\":\"matched\"}").unwrap_err();
        assert!(e.to_string().contains("file"), "{e}");
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
