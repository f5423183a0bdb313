//! The import graph of a crate: file → file for every module reference, and its cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::modtree::{CrateTree, ModPath};
use crate::refs::{collect, Binding, Reference};
use crate::tarjan;

/// Where a reference was seen: the first one (by line) for each edge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    pub line: usize,
    pub text: String,
}

/// Files that import each other, with the edges between them.
#[derive(Debug)]
pub struct Cycle {
    pub files: Vec<PathBuf>,
    pub edges: Vec<(PathBuf, PathBuf, Evidence)>,
}

/// The file → file edges of a crate, with one piece of evidence each.
pub type Edges = BTreeMap<(PathBuf, PathBuf), Evidence>;

/// How far `use` re-exports are followed before giving up (a re-export loop does not compile,
/// but the check must not hang on one).
const MAX_REEXPORT_DEPTH: usize = 8;

struct Resolver<'a> {
    tree: &'a CrateTree,
    /// `(module, name)` → the path that `use` binds to `name` in `module`.
    bindings: BTreeMap<(ModPath, String), (ModPath, Vec<String>)>,
}

impl Resolver<'_> {
    /// An absolute module path (no leading `crate`) for `segments` as written in `module`, or
    /// `None` for a path that leaves the crate (another crate, `std`, a local name).
    fn absolute(&self, module: &[String], segments: &[String]) -> Option<ModPath> {
        let (first, rest) = segments.split_first()?;
        match first.as_str() {
            "crate" => Some(rest.to_vec()),
            "self" => Some([module, rest].concat()),
            "super" => {
                let mut base = module.to_vec();
                base.pop()?;
                let mut rest = rest;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                Some([base.as_slice(), rest].concat())
            }
            _ => {
                // 2018 paths: a child module's name starts a path relative to here.
                let child = [module, std::slice::from_ref(first)].concat();
                self.tree
                    .is_module(&child)
                    .then(|| [module, segments].concat())
            }
        }
    }

    /// The module whose file defines what `path` names: the longest module prefix, then
    /// through the `use` that binds the next segment there (re-exports lead to the definition).
    fn target(&self, path: &[String], depth: usize) -> Option<ModPath> {
        let known = (0..=path.len())
            .rev()
            .find(|&n| self.tree.is_module(&path[..n]))?;
        let module = &path[..known];
        if let (Some(name), true) = (path.get(known), depth < MAX_REEXPORT_DEPTH) {
            if let Some((ctx, bound)) = self.bindings.get(&(module.to_vec(), name.clone())) {
                let next = self.absolute(ctx, bound)?;
                return self.target(&[next.as_slice(), &path[known + 1..]].concat(), depth + 1);
            }
        }
        Some(module.to_vec())
    }
}

/// The edges between the non-test files of a crate.
pub fn edges(tree: &CrateTree) -> Edges {
    let per_file: Vec<(&Path, &str, Vec<Reference>)> = tree
        .files
        .iter()
        .filter(|f| !f.test_only)
        .map(|f| {
            (
                f.path.as_path(),
                f.text.as_str(),
                collect(&f.ast, &f.module),
            )
        })
        .collect();
    let mut bindings = BTreeMap::new();
    for reference in per_file.iter().flat_map(|(_, _, refs)| refs) {
        let key = match &reference.binding {
            Some(Binding::Name(name)) => (reference.module.clone(), name.clone()),
            Some(Binding::Exported(name)) => (Vec::new(), name.clone()),
            _ => continue,
        };
        bindings.insert(key, (reference.module.clone(), reference.segments.clone()));
    }
    let resolver = Resolver { tree, bindings };
    let mut found = Edges::new();
    for (from, text, refs) in &per_file {
        for reference in refs {
            let Some(to) = resolve(&resolver, reference) else {
                continue;
            };
            if to == *from {
                continue;
            }
            let evidence = Evidence {
                line: reference.line,
                text: line_text(text, reference.line),
            };
            found
                .entry((from.to_path_buf(), to.to_path_buf()))
                .and_modify(|e| {
                    if evidence.line < e.line {
                        *e = evidence.clone();
                    }
                })
                .or_insert(evidence);
        }
    }
    found
}

fn resolve<'a>(resolver: &Resolver<'a>, reference: &Reference) -> Option<&'a Path> {
    let absolute = resolver.absolute(&reference.module, &reference.segments)?;
    // A glob imports from the module it names, not from an item of it.
    let depth = match reference.binding {
        Some(Binding::Glob) => MAX_REEXPORT_DEPTH,
        _ => 0,
    };
    let module = resolver.target(&absolute, depth)?;
    let info = resolver.tree.modules.get(&module)?;
    (!info.test_only).then_some(info.file.as_path())
}

fn line_text(text: &str, line: usize) -> String {
    text.lines()
        .nth(line.saturating_sub(1))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// The cycles among `edges`, each with the edges that stay inside it.
pub fn cycles(edges: &Edges) -> Vec<Cycle> {
    let files: Vec<PathBuf> = edges
        .keys()
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let index: BTreeMap<&PathBuf, usize> = files.iter().enumerate().map(|(i, f)| (f, i)).collect();
    let mut graph = vec![Vec::new(); files.len()];
    for (a, b) in edges.keys() {
        graph[index[a]].push(index[b]);
    }
    tarjan::cycles(&graph)
        .into_iter()
        .map(|component| {
            let members: Vec<PathBuf> = component.iter().map(|&i| files[i].clone()).collect();
            let inside = edges
                .iter()
                .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                .map(|((a, b), e)| (a.clone(), b.clone(), e.clone()))
                .collect();
            Cycle {
                files: members,
                edges: inside,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Memory;

    fn tree(files: &[(&str, &str)]) -> CrateTree {
        let src = files
            .iter()
            .fold(Memory::default(), |m, (p, t)| m.with(p, t));
        CrateTree::load(&src, Path::new("c/src/lib.rs")).expect("test crate loads")
    }

    fn edge_list(tree: &CrateTree) -> Vec<(String, String, usize)> {
        edges(tree)
            .into_iter()
            .map(|((a, b), e)| (a.display().to_string(), b.display().to_string(), e.line))
            .collect()
    }

    #[test]
    fn a_cycle_through_use_and_code_paths_is_found_with_its_lines() {
        let t = tree(&[
            ("c/src/lib.rs", "mod a;\nmod b;"),
            ("c/src/a.rs", "use crate::b::B;\npub struct A;"),
            (
                "c/src/b.rs",
                "pub struct B;\nfn f() { let _ = super::a::A; }",
            ),
        ]);
        let found = cycles(&edges(&t));
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].files,
            [PathBuf::from("c/src/a.rs"), PathBuf::from("c/src/b.rs")]
        );
        let lines: Vec<_> = found[0]
            .edges
            .iter()
            .map(|(_, _, e)| (e.line, e.text.as_str()))
            .collect();
        assert_eq!(
            lines,
            [
                (1, "use crate::b::B;"),
                (2, "fn f() { let _ = super::a::A; }")
            ]
        );
    }

    #[test]
    fn a_one_way_dependency_is_no_cycle() {
        let t = tree(&[
            ("c/src/lib.rs", "mod a;\nmod b;\npub use a::A;"),
            ("c/src/a.rs", "use crate::b::B;\npub struct A;"),
            ("c/src/b.rs", "pub struct B;"),
        ]);
        assert!(cycles(&edges(&t)).is_empty());
    }

    #[test]
    fn a_reexport_from_the_root_leads_to_the_defining_file() {
        // lib.rs re-exports a's item; b using `crate::A` depends on a.rs, not on lib.rs, so
        // lib.rs ↔ b.rs is no cycle although lib.rs also uses b.
        let t = tree(&[
            (
                "c/src/lib.rs",
                "mod a;\nmod b;\npub use a::A;\npub use b::g;",
            ),
            ("c/src/a.rs", "pub struct A;"),
            ("c/src/b.rs", "use crate::A;\npub fn g() {}"),
        ]);
        assert_eq!(
            edge_list(&t),
            [
                ("c/src/b.rs".into(), "c/src/a.rs".into(), 1),
                ("c/src/lib.rs".into(), "c/src/a.rs".into(), 3),
                ("c/src/lib.rs".into(), "c/src/b.rs".into(), 4),
            ]
        );
        assert!(cycles(&edges(&t)).is_empty());
    }

    #[test]
    fn an_exported_macro_is_a_dependency_on_its_defining_file() {
        let t = tree(&[
            (
                "c/src/lib.rs",
                "mod out;\nmod cmd;\nfn main() { cmd::run(); }",
            ),
            (
                "c/src/out.rs",
                "#[macro_export]\nmacro_rules! warn { () => {} }",
            ),
            ("c/src/cmd.rs", "pub fn run() { crate::warn!(); }"),
        ]);
        assert_eq!(
            edge_list(&t),
            [
                ("c/src/cmd.rs".into(), "c/src/out.rs".into(), 1),
                ("c/src/lib.rs".into(), "c/src/cmd.rs".into(), 3),
            ]
        );
    }

    #[test]
    fn test_modules_make_no_edges() {
        let t = tree(&[
            ("c/src/lib.rs", "mod a;\nmod b;\n#[cfg(test)] mod fixtures;"),
            (
                "c/src/a.rs",
                "use crate::b::B;\n#[cfg(test)] mod tests { use crate::fixtures::F; }",
            ),
            (
                "c/src/b.rs",
                "pub struct B;\n#[cfg(test)] mod tests { use crate::a::*; }",
            ),
            ("c/src/fixtures.rs", "use crate::a::*;"),
        ]);
        assert_eq!(
            edge_list(&t),
            [("c/src/a.rs".into(), "c/src/b.rs".into(), 1)]
        );
    }

    #[test]
    fn relative_child_paths_and_inline_modules_resolve() {
        let t = tree(&[
            ("c/src/lib.rs", "mod cmd;"),
            (
                "c/src/cmd.rs",
                "mod play;\nmod info;\nfn run() { play::go(); }",
            ),
            (
                "c/src/cmd/play.rs",
                "pub fn go() {}\nmod inner { use super::super::info::I; }",
            ),
            ("c/src/cmd/info.rs", "pub struct I;"),
        ]);
        assert_eq!(
            edge_list(&t),
            [
                // Paths sort by component: `cmd/…` before `cmd.rs`.
                ("c/src/cmd/play.rs".into(), "c/src/cmd/info.rs".into(), 2),
                ("c/src/cmd.rs".into(), "c/src/cmd/play.rs".into(), 3),
            ]
        );
    }
}
