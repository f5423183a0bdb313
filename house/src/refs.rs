//! The paths a file names, outside test code: `use` trees, paths in code and types, and
//! `a::b` sequences in macro arguments (which syn leaves as tokens).

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};
use syn::{ImplItemFn, Item, ItemMod, ItemUse, TraitItemFn, UseTree};

use crate::attrs::is_test_code;
use crate::modtree::ModPath;

/// What a `use` leaf binds in its module (so `crate::Name` can be followed to where `Name`
/// is defined).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Binding {
    Name(String),
    Glob,
    /// `#[macro_export] macro_rules! name`: rustc puts `name` at the crate root, though it is
    /// defined here (so `crate::name!` depends on this file, not on the root's).
    Exported(String),
}

/// One path as written, in the module it is written in.
#[derive(Clone, Debug)]
pub struct Reference {
    /// The (possibly inline) module the path is written in.
    pub module: ModPath,
    pub segments: Vec<String>,
    pub line: usize,
    /// `Some` for a `use` leaf.
    pub binding: Option<Binding>,
}

/// Every reference of a file whose top is module `module`.
pub fn collect(ast: &syn::File, module: &ModPath) -> Vec<Reference> {
    let mut collector = Collector {
        module: module.clone(),
        refs: Vec::new(),
    };
    collector.visit_file(ast);
    collector.refs
}

struct Collector {
    module: ModPath,
    refs: Vec<Reference>,
}

impl Collector {
    fn push(&mut self, segments: Vec<String>, line: usize, binding: Option<Binding>) {
        self.refs.push(Reference {
            module: self.module.clone(),
            segments,
            line,
            binding,
        });
    }

    fn flatten_use(&mut self, tree: &UseTree, prefix: &mut Vec<String>) {
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.flatten_use(&p.tree, prefix);
                prefix.pop();
            }
            UseTree::Name(n) => {
                let line = n.ident.span().start().line;
                let (segments, name) = leaf(prefix, &n.ident.to_string());
                self.push(segments, line, Some(Binding::Name(name)));
            }
            UseTree::Rename(r) => {
                let line = r.ident.span().start().line;
                let (segments, _) = leaf(prefix, &r.ident.to_string());
                self.push(segments, line, Some(Binding::Name(r.rename.to_string())));
            }
            UseTree::Glob(g) => {
                let line = g.star_token.spans[0].start().line;
                self.push(prefix.clone(), line, Some(Binding::Glob));
            }
            UseTree::Group(g) => {
                for item in &g.items {
                    self.flatten_use(item, prefix);
                }
            }
        }
    }

    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.scan_tokens(g.stream()),
                TokenTree::Ident(first) => {
                    let line = first.span().start().line;
                    let mut segments = vec![first.to_string()];
                    while let Some(TokenTree::Ident(next)) = tokens.get(i + 3) {
                        if !is_path_sep(&tokens[i + 1..i + 3]) {
                            break;
                        }
                        segments.push(next.to_string());
                        i += 3;
                    }
                    if segments.len() > 1 {
                        self.push(segments, line, None);
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// `self` in a group (`use a::{self, b}`) names the prefix itself.
fn leaf(prefix: &[String], ident: &str) -> (Vec<String>, String) {
    if ident == "self" {
        let name = prefix.last().cloned().unwrap_or_default();
        (prefix.to_vec(), name)
    } else {
        let mut segments = prefix.to_vec();
        segments.push(ident.to_string());
        (segments, ident.to_string())
    }
}

fn is_path_sep(tokens: &[TokenTree]) -> bool {
    matches!(tokens, [TokenTree::Punct(a), TokenTree::Punct(b)]
        if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
}

fn item_attrs(item: &Item) -> &[syn::Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, item: &'ast Item) {
        if !is_test_code(item_attrs(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast ImplItemFn) {
        if !is_test_code(&f.attrs) {
            visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_trait_item_fn(&mut self, f: &'ast TraitItemFn) {
        if !is_test_code(&f.attrs) {
            visit::visit_trait_item_fn(self, f);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast ItemMod) {
        // A `mod x;` file is read on its own, as module `x`.
        if let Some((_, items)) = &m.content {
            self.module.push(m.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast ItemUse) {
        // `use ::x` names an external crate.
        if u.leading_colon.is_none() {
            self.flatten_use(&u.tree, &mut Vec::new());
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let line = path.segments[0].ident.span().start().line;
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.push(segments, line, None);
        }
        visit::visit_path(self, path);
    }

    fn visit_item_macro(&mut self, item: &'ast syn::ItemMacro) {
        let exported = item.attrs.iter().any(|a| a.path().is_ident("macro_export"));
        if let (true, Some(name)) = (exported, &item.ident) {
            let line = name.span().start().line;
            let segments = vec!["self".to_string(), name.to_string()];
            self.push(segments, line, Some(Binding::Exported(name.to_string())));
        }
        visit::visit_item_macro(self, item);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.scan_tokens(mac.tokens.clone());
        visit::visit_macro(self, mac);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(text: &str) -> Vec<(String, usize, Option<Binding>)> {
        let ast = syn::parse_file(text).expect("test source parses");
        collect(&ast, &vec!["m".to_string()])
            .into_iter()
            .map(|r| (r.segments.join("::"), r.line, r.binding))
            .collect()
    }

    fn name(n: &str) -> Option<Binding> {
        Some(Binding::Name(n.to_string()))
    }

    #[test]
    fn use_trees_are_flattened_with_what_they_bind() {
        let found = refs("use crate::a::{self, b as c, d::*};\nuse super::e;");
        assert_eq!(
            found,
            vec![
                ("crate::a".to_string(), 1, name("a")),
                ("crate::a::b".to_string(), 1, name("c")),
                ("crate::a::d".to_string(), 1, Some(Binding::Glob)),
                ("super::e".to_string(), 2, name("e")),
            ]
        );
    }

    #[test]
    fn code_and_macro_paths_are_found_and_test_code_is_not() {
        let found = refs(
            "fn f() {\n crate::a::g();\n println!(\"{}\", self::b::C);\n}\n\
             #[cfg(test)] mod tests { use crate::z::Z; }\n#[test] fn t() { crate::y::h(); }",
        );
        let paths: Vec<_> = found.iter().map(|(p, l, _)| (p.as_str(), *l)).collect();
        assert_eq!(paths, vec![("crate::a::g", 2), ("self::b::C", 3)]);
    }

    #[test]
    fn exported_macros_are_bindings_at_the_root() {
        let found = refs(
            "#[macro_export]\nmacro_rules! warn { () => {} }\nmacro_rules! local { () => {} }",
        );
        assert_eq!(
            found,
            vec![(
                "self::warn".to_string(),
                2,
                Some(Binding::Exported("warn".into()))
            )]
        );
    }

    #[test]
    fn inline_modules_record_their_own_module() {
        let ast = syn::parse_file("mod inner { use super::x::Y; }").expect("parses");
        let found = collect(&ast, &vec![]);
        assert_eq!(found[0].module, vec!["inner".to_string()]);
    }
}
