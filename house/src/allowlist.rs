//! The functions over the limit that the check tolerates for now, and the entries that have
//! gone stale (so the list can only shrink).

use std::collections::BTreeSet;

use crate::length::{FnLength, LIMIT};

/// An allowlist entry that no longer names a long function.
#[derive(Debug, PartialEq, Eq)]
pub enum Stale {
    /// The function is now within the limit.
    Short { key: String, lines: usize },
    /// No function has that name any more.
    Gone { key: String },
}

/// What the allowlist makes of the functions found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Over the limit and not allowlisted.
    pub long: Vec<FnLength>,
    /// Over the limit and allowlisted.
    pub allowed: usize,
    pub stale: Vec<Stale>,
}

/// The entries of an allowlist file: one `path::function` a line, `#` comments.
pub fn parse(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// Sorts every function found into fine, long, or allowed, and finds the stale entries.
pub fn judge(functions: &BTreeSet<FnLength>, allowed: &BTreeSet<String>) -> Verdict {
    let mut verdict = Verdict::default();
    for f in functions.iter().filter(|f| f.lines > LIMIT) {
        if allowed.contains(&f.key()) {
            verdict.allowed += 1;
        } else {
            verdict.long.push(f.clone());
        }
    }
    for key in allowed {
        let longest = functions
            .iter()
            .filter(|f| f.key() == *key)
            .map(|f| f.lines)
            .max();
        match longest {
            Some(lines) if lines <= LIMIT => verdict.stale.push(Stale::Short {
                key: key.clone(),
                lines,
            }),
            Some(_) => {}
            None => verdict.stale.push(Stale::Gone { key: key.clone() }),
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn f(name: &str, lines: usize) -> FnLength {
        FnLength {
            file: PathBuf::from("c/src/x.rs"),
            name: name.to_string(),
            line: 1,
            lines,
        }
    }

    #[test]
    fn comments_and_blank_lines_are_no_entries() {
        let entries = parse("# must shrink\n\n  c/src/x.rs::a  \n");
        assert_eq!(entries, BTreeSet::from(["c/src/x.rs::a".to_string()]));
    }

    #[test]
    fn a_long_function_is_reported_unless_allowlisted() {
        let found = BTreeSet::from([f("a", 101), f("b", 150), f("c", 100)]);
        let verdict = judge(&found, &parse("c/src/x.rs::b"));
        assert_eq!(verdict.long, [f("a", 101)]);
        assert_eq!(verdict.allowed, 1);
        assert!(verdict.stale.is_empty());
    }

    #[test]
    fn an_entry_for_a_short_or_missing_function_is_stale() {
        let found = BTreeSet::from([f("c", 100)]);
        let verdict = judge(&found, &parse("c/src/x.rs::c\nc/src/x.rs::gone"));
        assert_eq!(
            verdict.stale,
            [
                Stale::Short {
                    key: "c/src/x.rs::c".into(),
                    lines: 100
                },
                Stale::Gone {
                    key: "c/src/x.rs::gone".into()
                }
            ]
        );
    }
}
