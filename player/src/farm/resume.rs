//! `--resume`: captures already answered in the JSON-lines file are not run again. A capture
//! is done when a line names it and, when both sides know one, with the same SHA-256 (a
//! capture rewritten since is run again). A line names it by its key (its path relative to
//! the folder or manifest, so a run resumed with the corpus mounted elsewhere skips what is
//! done) when the key names one capture only, else by the path shown (lines of older
//! versions carry no key). A line that does not read (the last one, torn when the previous
//! run was killed mid-write) answers nothing.

use std::collections::HashMap;

use crate::farm::Entry;
use crate::run_record::RunRecord;

/// The SHA-256s seen for one name (None: unknown).
type Seen = Vec<Option<String>>;

/// What an earlier run's lines answered, by the shown path and by the key.
#[derive(Debug, Default)]
pub struct Done {
    files: HashMap<String, Seen>,
    /// Key → the shown paths of its lines and their SHA-256s.
    keys: HashMap<String, (Vec<String>, Seen)>,
    /// Lines that did not read as a record.
    pub unreadable: usize,
}

/// Whether a line's SHA-256 `seen` answers a capture whose checksum is `sha256`.
fn same_content(seen: &Seen, sha256: Option<&str>) -> bool {
    seen.iter().any(|s| match (s.as_deref(), sha256) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    })
}

impl Done {
    /// The answers in the JSON-lines `text`.
    pub fn from_lines(text: &str) -> Done {
        let mut done = Done::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<RunRecord>(line) {
                Ok(r) => {
                    if let Some(key) = r.key {
                        let (files, shas) = done.keys.entry(key).or_default();
                        if !files.contains(&r.file) {
                            files.push(r.file.clone());
                        }
                        shas.push(r.sha256.clone());
                    }
                    done.files.entry(r.file).or_default().push(r.sha256);
                }
                Err(_) => done.unreadable += 1,
            }
        }
        done
    }

    /// Whether `e` (with `sha256` when its checksum is known) was answered; `key_is_unique`:
    /// no other capture of this run has its key.
    pub fn answered(&self, e: &Entry, sha256: Option<&str>, key_is_unique: bool) -> bool {
        let by_file = self
            .files
            .get(&e.shown)
            .is_some_and(|seen| same_content(seen, sha256));
        // A key the earlier lines give to captures at several paths named several captures
        // there (two folders holding `a.krr`): it cannot say which.
        let by_key = key_is_unique
            && self
                .keys
                .get(&e.key)
                .is_some_and(|(files, seen)| files.len() == 1 && same_content(seen, sha256));
        by_file || by_key
    }

    /// The entries still to run, and how many were skipped.
    pub fn remaining(&self, entries: Vec<Entry>) -> (Vec<Entry>, usize) {
        let before = entries.len();
        let mut per_key: HashMap<&str, usize> = HashMap::new();
        for e in &entries {
            *per_key.entry(e.key.as_str()).or_default() += 1;
        }
        let answered: Vec<bool> = entries
            .iter()
            .map(|e| self.answered(e, e.sha256.as_deref(), per_key[e.key.as_str()] == 1))
            .collect();
        let left: Vec<Entry> = entries
            .into_iter()
            .zip(answered)
            .filter_map(|(e, done)| (!done).then_some(e))
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
    /// Its last line is cut short (a run killed mid-write: the JSON ends before its value
    /// does, the rule `kreplay compare` calls "cut short" too) and answers nothing (its
    /// capture runs again): cut the file to this many bytes, the whole lines before it.
    CutTo(u64),
}

/// The repair the end of `text` needs before records are appended to it.
pub fn tail_repair(text: &[u8]) -> Tail {
    if text.is_empty() || text.ends_with(b"\n") {
        return Tail::Whole;
    }
    let start = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let last = &text[start..];
    match serde_json::from_slice::<RunRecord>(last) {
        Err(e) if e.is_eof() => Tail::CutTo(start as u64),
        // A record, or a whole line that is not one of ours (a newer kreplay's, anything
        // else): kept, never cut; `compare` names a line it cannot read.
        _ => Tail::AddNewline,
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

    /// A line of a capture at `root`/`key`, as a directory run writes it.
    fn keyed_line(root: &str, key: &str) -> String {
        let mut r = RunRecord::new(format!("{root}/{key}"), Verdict::Matched);
        r.key = Some(key.into());
        r.to_line()
    }

    fn keyed(root: &str, key: &str) -> Entry {
        Entry {
            path: format!("{root}/{key}").into(),
            shown: format!("{root}/{key}"),
            key: key.into(),
            sha256: None,
        }
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
        assert!(done.answered(&entry("a.krr", None), Some("11"), true));
        assert!(!done.answered(&entry("a.krr", None), Some("22"), true));
        assert!(done.answered(&entry("a.krr", None), None, true));
        assert!(done.answered(&entry("b.krr", None), Some("33"), true));
    }

    #[test]
    fn a_torn_last_line_answers_nothing_and_is_counted() {
        let mut text = line("a.krr", None);
        text.push('\n');
        text.push_str(&line("b.krr", None)[..10]);
        let done = Done::from_lines(&text);
        assert_eq!(done.unreadable, 1);
        assert!(done.answered(&entry("a.krr", None), None, true));
        assert!(!done.answered(&entry("b.krr", None), None, true));
    }

    // Catches: --resume appending after a torn last line, gluing the next record onto it
    // (both lost), or cutting a whole record that only lacks its newline.
    #[test]
    fn a_torn_tail_is_cut_and_a_record_without_its_newline_kept() {
        let a = line("a.krr", None);
        assert_eq!(tail_repair(b""), Tail::Whole);
        assert_eq!(tail_repair(format!("{a}\n").as_bytes()), Tail::Whole);
        assert_eq!(tail_repair(a.as_bytes()), Tail::AddNewline);
        let torn = format!("{a}\n{}", &a[..12]);
        assert_eq!(
            tail_repair(torn.as_bytes()),
            Tail::CutTo(a.len() as u64 + 1)
        );
        assert_eq!(tail_repair(&a.as_bytes()[..5]), Tail::CutTo(0));
        let other = format!("{a}\n[\"a whole line, not a record\"]");
        assert_eq!(
            tail_repair(other.as_bytes()),
            Tail::AddNewline,
            "a whole line that is not a record is not ours to delete"
        );
    }

    // Catches: a corpus resumed under another mount point run again from the start.
    #[test]
    fn a_run_under_another_root_is_answered_by_the_key() {
        let text = [
            keyed_line("/mnt/a", "k/1.krr"),
            keyed_line("/mnt/a", "2.krr"),
        ]
        .join("\n");
        let done = Done::from_lines(&text);
        let (left, skipped) = done.remaining(vec![
            keyed("/mnt/b", "k/1.krr"),
            keyed("/mnt/b", "2.krr"),
            keyed("/mnt/b", "3.krr"),
        ]);
        let keys: Vec<&str> = left.iter().map(|e| e.key.as_str()).collect();
        assert_eq!((keys, skipped), (vec!["3.krr"], 2));
    }

    // Catches: two folders' `a.krr` (one key, two captures) taken for each other.
    #[test]
    fn a_key_naming_several_captures_answers_by_path_only() {
        let done = Done::from_lines(&keyed_line("/x", "a.krr"));
        let (left, skipped) = done.remaining(vec![keyed("/x", "a.krr"), keyed("/y", "a.krr")]);
        assert_eq!(skipped, 1);
        assert_eq!(left[0].shown, "/y/a.krr");
        let both = [keyed_line("/x", "a.krr"), keyed_line("/y", "a.krr")].join("\n");
        let done = Done::from_lines(&both);
        assert!(!done.answered(&keyed("/z", "a.krr"), None, true));
        assert!(done.answered(&keyed("/y", "a.krr"), None, true));
    }
}
