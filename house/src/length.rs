//! The length of every function outside test code, from its `fn` line to its closing brace.

use std::path::{Path, PathBuf};

use syn::visit::{self, Visit};
use syn::{ImplItemFn, Item, ItemFn, ItemImpl, ItemMod, ItemTrait, TraitItemFn, Type};

use crate::attrs::{is_cfg_test, is_test_code};

/// The most lines a function may have.
pub const LIMIT: usize = 100;

/// Folders whose code is test, benchmark, example or fuzzing code, wherever they sit.
const EXEMPT_DIRS: [&str; 4] = ["tests", "benches", "examples", "fuzz"];

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FnLength {
    pub file: PathBuf,
    /// Qualified inside its file: inline modules, then `Type::` or `Trait::`, then outer
    /// functions of a nested one (`outer::inner`).
    pub name: String,
    /// Line of the `fn` keyword.
    pub line: usize,
    pub lines: usize,
}

impl FnLength {
    /// How the allowlist names it.
    pub fn key(&self) -> String {
        format!("{}::{}", self.file.display(), self.name)
    }
}

/// Whether the rules skip `file` for its folder.
pub fn exempt(file: &Path) -> bool {
    file.components()
        .any(|c| EXEMPT_DIRS.iter().any(|d| c.as_os_str() == *d))
}

/// Every function of a file, test code left out.
pub fn functions(file: &Path, ast: &syn::File) -> Vec<FnLength> {
    let mut measure = Measure {
        file,
        scope: Vec::new(),
        found: Vec::new(),
    };
    measure.visit_file(ast);
    measure.found
}

struct Measure<'a> {
    file: &'a Path,
    scope: Vec<String>,
    found: Vec<FnLength>,
}

impl Measure<'_> {
    fn record(&mut self, ident: &syn::Ident, fn_token: &syn::token::Fn, block: &syn::Block) {
        let start = fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        let name = self
            .scope
            .iter()
            .chain(std::iter::once(&ident.to_string()))
            .cloned()
            .collect::<Vec<_>>()
            .join("::");
        self.found.push(FnLength {
            file: self.file.to_path_buf(),
            name,
            line: start,
            lines: end + 1 - start,
        });
    }

    fn scoped(&mut self, name: String, walk: impl FnOnce(&mut Self)) {
        self.scope.push(name);
        walk(self);
        self.scope.pop();
    }
}

/// The last path segment of an impl's self type (`impl<T> Foo<T>` → `Foo`).
fn type_name(ty: &Type) -> String {
    match ty {
        Type::Path(p) => p
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        Type::Reference(r) => type_name(&r.elem),
        _ => "impl".to_string(),
    }
}

impl<'ast> Visit<'ast> for Measure<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        let skip = match item {
            Item::Mod(m) => is_cfg_test(&m.attrs),
            Item::Fn(f) => is_test_code(&f.attrs),
            Item::Impl(i) => is_cfg_test(&i.attrs),
            Item::Trait(t) => is_cfg_test(&t.attrs),
            _ => false,
        };
        if !skip {
            visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast ItemMod) {
        self.scoped(m.ident.to_string(), |s| visit::visit_item_mod(s, m));
    }

    fn visit_item_fn(&mut self, f: &'ast ItemFn) {
        self.record(&f.sig.ident, &f.sig.fn_token, &f.block);
        self.scoped(f.sig.ident.to_string(), |s| visit::visit_item_fn(s, f));
    }

    fn visit_item_impl(&mut self, i: &'ast ItemImpl) {
        self.scoped(type_name(&i.self_ty), |s| visit::visit_item_impl(s, i));
    }

    fn visit_impl_item_fn(&mut self, f: &'ast ImplItemFn) {
        if is_test_code(&f.attrs) {
            return;
        }
        self.record(&f.sig.ident, &f.sig.fn_token, &f.block);
        self.scoped(f.sig.ident.to_string(), |s| visit::visit_impl_item_fn(s, f));
    }

    fn visit_item_trait(&mut self, t: &'ast ItemTrait) {
        self.scoped(t.ident.to_string(), |s| visit::visit_item_trait(s, t));
    }

    fn visit_trait_item_fn(&mut self, f: &'ast TraitItemFn) {
        if is_test_code(&f.attrs) {
            return;
        }
        if let Some(block) = &f.default {
            self.record(&f.sig.ident, &f.sig.fn_token, block);
        }
        self.scoped(f.sig.ident.to_string(), |s| {
            visit::visit_trait_item_fn(s, f)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function of exactly `lines` lines, `fn` line and closing brace included.
    fn function(name: &str, lines: usize) -> String {
        let body = "    let _ = 1;\n".repeat(lines - 2);
        format!("fn {name}() {{\n{body}}}\n")
    }

    fn lengths(text: &str) -> Vec<(String, usize)> {
        let ast = syn::parse_file(text).expect("test source parses");
        functions(Path::new("c/src/x.rs"), &ast)
            .into_iter()
            .map(|f| (f.name, f.lines))
            .collect()
    }

    #[test]
    fn lines_run_from_fn_to_the_closing_brace() {
        let text = format!(
            "/// doc\n#[inline]\n{}{}",
            function("long", 101),
            function("edge", 100)
        );
        assert_eq!(
            lengths(&text),
            [("long".to_string(), 101), ("edge".to_string(), 100)]
        );
    }

    #[test]
    fn impl_trait_and_nested_functions_are_qualified() {
        let text = "mod m { impl<T> S<T> { fn a(&self) {} } }\n\
                    trait T { fn b() {} fn c(); }\n\
                    fn outer() { fn inner() {} }";
        let names: Vec<_> = lengths(text).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["m::S::a", "T::b", "outer", "outer::inner"]);
    }

    #[test]
    fn test_modules_and_test_functions_are_left_out() {
        let text = format!(
            "#[cfg(test)] mod tests {{ {} }}\n#[test]\n{}#[cfg(test)] impl S {{ fn h() {{}} }}\n\
             impl S {{ #[test] fn i() {{}} fn kept() {{}} }}",
            function("in_tests", 150),
            function("a_test", 150)
        );
        assert_eq!(lengths(&text), [("S::kept".to_string(), 1)]);
    }

    #[test]
    fn test_bench_example_and_fuzz_folders_are_exempt() {
        assert!(exempt(Path::new("tools/tests/cli.rs")));
        assert!(exempt(Path::new("fuzz/fuzz_targets/parse.rs")));
        assert!(exempt(Path::new("format/benches/read.rs")));
        assert!(!exempt(Path::new("tools/src/cmd/info.rs")));
    }
}
