//! The whole check: every crate's import cycles and every long function, as one report.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;

use crate::allowlist::{self, Stale};
use crate::error::HouseError;
use crate::imports::{self, Cycle};
use crate::length::{self, FnLength, LIMIT};
use crate::modtree::CrateTree;
use crate::sources::Sources;

/// The allowlist file, from the repository root (named in the messages).
pub const ALLOWLIST: &str = "house/allow-long-functions.txt";

#[derive(Debug)]
pub struct Report {
    pub crates: usize,
    pub files: usize,
    /// Each cycle with the root file of its crate.
    pub cycles: Vec<(PathBuf, Cycle)>,
    pub long: Vec<FnLength>,
    pub allowed: usize,
    pub stale: Vec<Stale>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.cycles.is_empty() && self.long.is_empty() && self.stale.is_empty()
    }
}

/// Checks the crates whose root files are `roots` against the allowlist text.
pub fn check(
    sources: &dyn Sources,
    roots: &[PathBuf],
    allowlist_text: &str,
) -> Result<Report, HouseError> {
    let mut cycles = Vec::new();
    let mut functions = BTreeSet::new();
    let mut files = BTreeSet::new();
    for root in roots {
        let tree = CrateTree::load(sources, root)?;
        for cycle in imports::cycles(&imports::edges(&tree)) {
            cycles.push((tree.root.clone(), cycle));
        }
        for file in tree.files.iter().filter(|f| !f.test_only) {
            files.insert(file.path.clone());
            if !length::exempt(&file.path) {
                functions.extend(length::functions(&file.path, &file.ast));
            }
        }
    }
    let verdict = allowlist::judge(&functions, &allowlist::parse(allowlist_text));
    Ok(Report {
        crates: roots.len(),
        files: files.len(),
        cycles,
        long: verdict.long,
        allowed: verdict.allowed,
        stale: verdict.stale,
    })
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (root, cycle) in &self.cycles {
            let names: Vec<_> = cycle
                .files
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            writeln!(
                f,
                "import cycle in the crate of {}: {}",
                root.display(),
                names.join(", ")
            )?;
            for (from, to, evidence) in &cycle.edges {
                writeln!(
                    f,
                    "  {} -> {}  ({}:{}: {})",
                    from.display(),
                    to.display(),
                    from.display(),
                    evidence.line,
                    evidence.text
                )?;
            }
        }
        for long in &self.long {
            writeln!(
                f,
                "function over {LIMIT} lines: {}:{} `{}` has {} lines (split it; {ALLOWLIST} is for code not yet split, not for new code)",
                long.file.display(),
                long.line,
                long.name,
                long.lines
            )?;
        }
        for stale in &self.stale {
            match stale {
                Stale::Short { key, lines } => writeln!(
                    f,
                    "{ALLOWLIST}: `{key}` has {lines} lines now, within the limit: remove its entry"
                )?,
                Stale::Gone { key } => writeln!(
                    f,
                    "{ALLOWLIST}: `{key}` names no function any more: remove its entry"
                )?,
            }
        }
        if self.passed() {
            write!(
                f,
                "house check passed: {} crates, {} files, no import cycle, no function over {LIMIT} lines ({} still allowlisted in {ALLOWLIST})",
                self.crates, self.files, self.allowed
            )
        } else {
            write!(
                f,
                "house check failed: {} import cycle(s), {} function(s) over {LIMIT} lines, {} stale allowlist entr(ies)",
                self.cycles.len(),
                self.long.len(),
                self.stale.len()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Memory;

    fn long_fn(name: &str, lines: usize) -> String {
        format!(
            "pub fn {name}() {{\n{}}}\n",
            "    let _ = 1;\n".repeat(lines - 2)
        )
    }

    fn crate_with(a: &str, b: &str) -> Memory {
        Memory::default()
            .with("c/src/lib.rs", "mod a;\nmod b;")
            .with("c/src/a.rs", a)
            .with("c/src/b.rs", b)
    }

    fn run(src: &Memory, allow: &str) -> Report {
        check(src, &[PathBuf::from("c/src/lib.rs")], allow).expect("test crate loads")
    }

    #[test]
    fn a_clean_crate_passes() {
        let src = crate_with("use crate::b::g;", &long_fn("g", 100));
        let report = run(&src, "");
        assert!(report.passed(), "{report}");
        assert_eq!((report.crates, report.files), (1, 3));
    }

    #[test]
    fn a_cycle_fails_and_names_both_use_lines() {
        let src = crate_with(
            "use crate::b::g;\npub fn f() {}",
            "pub fn g() { super::a::f() }",
        );
        let report = run(&src, "");
        assert!(!report.passed());
        let text = report.to_string();
        assert!(text.contains("c/src/a.rs:1: use crate::b::g;"), "{text}");
        assert!(
            text.contains("c/src/b.rs:1: pub fn g() { super::a::f() }"),
            "{text}"
        );
    }

    #[test]
    fn a_long_function_fails_unless_allowlisted_and_the_entry_must_stay_true() {
        let src = crate_with(&long_fn("big", 101), "");
        let report = run(&src, "");
        assert_eq!(report.long.len(), 1);
        assert!(report
            .to_string()
            .contains("c/src/a.rs:1 `big` has 101 lines"));
        assert!(run(&src, "c/src/a.rs::big").passed());
        let shrunk = crate_with(&long_fn("big", 100), "");
        assert!(!run(&shrunk, "c/src/a.rs::big").passed());
    }

    #[test]
    fn test_code_is_exempt_from_both_rules() {
        let tests = format!(
            "#[cfg(test)]\nmod tests {{\n use crate::a::*;\n{}}}",
            long_fn("t", 300)
        );
        let src = crate_with("use crate::b::*;", &tests);
        assert!(run(&src, "").passed());
    }
}
