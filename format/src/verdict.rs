//! What `kreplay verify` and Python's `kreplay.verify` say about one file: intact with its
//! counts, or damaged with the kind, offset and text of the first damage. One type, so the
//! CLI's `--json` line and Python's dict are the same fields.

use serde::Serialize;

use crate::error::FormatError;
use crate::reader::VerifyReport;

/// The verdict on one capture file. Fields are declared in the order `verify --json` has
/// always printed them (alphabetical), so the line stays byte for byte what it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Verdict {
    Intact {
        chunks: u64,
        events: u64,
        file: String,
        /// Always true (the JSON says it, so readers need not tell the forms apart by keys).
        intact: bool,
        raw_bytes: u64,
        stored_bytes: u64,
    },
    Damaged {
        /// [`FormatError::kind`]: `truncated`, `checksum`, `incomplete`, ...
        error: &'static str,
        file: String,
        /// Always false.
        intact: bool,
        message: String,
        /// Where in the file the damage is, when the error says.
        offset: Option<u64>,
    },
}

impl Verdict {
    /// The verdict on `file` (its name as shown) from what verification returned.
    pub fn of(file: &str, verified: &Result<VerifyReport, FormatError>) -> Verdict {
        match verified {
            Ok(r) => Verdict::Intact {
                chunks: r.chunks,
                events: r.events,
                file: file.to_string(),
                intact: true,
                raw_bytes: r.raw_bytes,
                stored_bytes: r.stored_bytes,
            },
            Err(e) => Verdict::Damaged {
                error: e.kind(),
                file: file.to_string(),
                intact: false,
                message: e.to_string(),
                offset: e.offset(),
            },
        }
    }

    pub fn is_intact(&self) -> bool {
        matches!(self, Verdict::Intact { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_intact_file_serializes_as_verify_json_always_printed_it() {
        let r = VerifyReport {
            events: 29,
            chunks: 15,
            raw_bytes: 100,
            stored_bytes: 7,
        };
        let v = Verdict::of("a.krr", &Ok(r));
        assert!(v.is_intact());
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"chunks":15,"events":29,"file":"a.krr","intact":true,"raw_bytes":100,"stored_bytes":7}"#
        );
    }

    #[test]
    fn a_damaged_file_names_the_kind_offset_and_text_of_its_damage() {
        let bytes = b"not a capture at all, not even close to a header".to_vec();
        let verified = crate::verify(&bytes);
        let e = verified.as_ref().unwrap_err();
        let v = Verdict::of("b.krr", &verified);
        assert!(!v.is_intact());
        let expected = format!(
            r#"{{"error":"{}","file":"b.krr","intact":false,"message":{},"offset":{}}}"#,
            e.kind(),
            serde_json::to_string(&e.to_string()).unwrap(),
            serde_json::to_string(&e.offset()).unwrap()
        );
        assert_eq!(serde_json::to_string(&v).unwrap(), expected);
    }
}
