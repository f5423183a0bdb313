//! `--resume`: captures already answered in the JSON-lines file are not run again. A capture
//! is done when a line names the same file and, when both sides know one, the same SHA-256
//! (a capture rewritten since is run again). A line that does not read (the last one, torn
//! when the previous run was killed mid-write) answers nothing.

use std::collections::HashMap;

use crate::farm::Entry;
use crate::run_record::RunRecord;

/// What an earlier run's lines answered: file → the SHA-256s seen for it (None: unknown).
#[derive(Debug, Default)]
pub struct Done {
    files: HashMap<String, Vec<Option<String>>>,
    /// Lines that did not read as a record.
    pub unreadable: usize,
}

impl Done {
    /// The answers in the JSON-lines `text`.
    pub fn from_lines(text: &str) -> Done {
        let mut done = Done::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<RunRecord>(line) {
                Ok(r) => done.files.entry(r.file).or_default().push(r.sha256),
                Err(_) => done.unreadable += 1,
            }
        }
        done
    }

    /// Whether `e` (with `sha256` when its checksum is known) was answered.
    pub fn answered(&self, e: &Entry, sha256: Option<&str>) -> bool {
        self.files.get(&e.shown).is_some_and(|seen| {
            seen.iter().any(|s| match (s.as_deref(), sha256) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            })
        })
    }

    /// The entries still to run, and how many were skipped.
    pub fn remaining(&self, entries: Vec<Entry>) -> (Vec<Entry>, usize) {
        let before = entries.len();
        let left: Vec<Entry> = entries
            .into_iter()
            .filter(|e| !self.answered(e, e.sha256.as_deref()))
            .collect();
        let skipped = before - left.len();
        (left, skipped)
    }
}

/// What `--resume` does to the end of the JSON-lines file before appending to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// It ends with a newline (or is empty): append as it is.
    Whole,
    /// Its last line is a record without its newline: add the newline, or the next record
    /// would be glued onto it.
    AddNewline,
    /// Its last line is cut short (a run killed mid-write) and answers nothing (its capture
    /// runs again): cut the file to this many bytes, the whole lines before it.
    CutTo(u64),
}

/// The repair the end of `text` needs before records are appended to it.
pub fn tail_repair(text: &[u8]) -> Tail {
    if text.is_empty() || text.ends_with(b"\n") {
        return Tail::Whole;
    }
    let start = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let last = &text[start..];
    if serde_json::from_slice::<RunRecord>(last).is_ok() {
        Tail::AddNewline
    } else {
        Tail::CutTo(start as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_record::Verdict;

    fn entry(shown: &str, sha: Option<&str>) -> Entry {
        Entry {
            path: shown.into(),
            shown: shown.into(),
            key: shown.into(),
            sha256: sha.map(str::to_string),
        }
    }

    fn line(file: &str, sha: Option<&str>) -> String {
        let mut r = RunRecord::new(file, Verdict::Matched);
        r.sha256 = sha.map(str::to_string);
        r.to_line()
    }

    #[test]
    fn answered_files_are_skipped_and_the_rest_kept_in_order() {
        let text = [line("a.krr", None), line("c.krr", None)].join("\n");
        let done = Done::from_lines(&text);
        let (left, skipped) = done.remaining(vec![
            entry("a.krr", None),
            entry("b.krr", None),
            entry("c.krr", None),
            entry("d.krr", None),
        ]);
        let names: Vec<&str> = left.iter().map(|e| e.shown.as_str()).collect();
        assert_eq!(names, ["b.krr", "d.krr"]);
        assert_eq!(skipped, 2);
    }

    // Catches: a capture rewritten since the last run taken as answered.
    #[test]
    fn a_different_checksum_is_not_an_answer_a_missing_one_is() {
        let done = Done::from_lines(&[line("a.krr", Some("11")), line("b.krr", None)].join("\n"));
        assert!(done.answered(&entry("a.krr", None), Some("11")));
        assert!(!done.answered(&entry("a.krr", None), Some("22")));
        assert!(done.answered(&entry("a.krr", None), None));
        assert!(done.answered(&entry("b.krr", None), Some("33")));
    }

    #[test]
    fn a_torn_last_line_answers_nothing_and_is_counted() {
        let mut text = line("a.krr", None);
        text.push('\n');
        text.push_str(&line("b.krr", None)[..10]);
        let done = Done::from_lines(&text);
        assert_eq!(done.unreadable, 1);
        assert!(done.answered(&entry("a.krr", None), None));
        assert!(!done.answered(&entry("b.krr", None), None));
    }
}
