//! What an item's attributes say about it: test-only, or loaded from another path.

use syn::{Attribute, Expr, Lit, Meta};

/// `#[cfg(test)]` (also `#[cfg(all(test, ..))]`): code that exists only in the test build.
pub fn is_cfg_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let Meta::List(list) = &attr.meta else {
            return false;
        };
        if !list.path.is_ident("cfg") {
            return false;
        }
        let tokens: String = list
            .tokens
            .to_string()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        tokens == "test" || tokens.starts_with("all(test,")
    })
}

/// `#[test]` and the test attributes of other harnesses (`#[tokio::test]`).
pub fn is_test_fn(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| match &attr.meta {
        Meta::Path(path) => path.segments.last().is_some_and(|s| s.ident == "test"),
        _ => false,
    })
}

/// Code the rules leave alone: test modules and test functions.
pub fn is_test_code(attrs: &[Attribute]) -> bool {
    is_cfg_test(attrs) || is_test_fn(attrs)
}

/// The file named by `#[path = "..."]`, if any.
pub fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            Expr::Lit(lit) => match &lit.lit {
                Lit::Str(s) => Some(s.value()),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs_of(item: &str) -> Vec<Attribute> {
        let item: syn::ItemFn = syn::parse_str(item).expect("test item parses");
        item.attrs
    }

    #[test]
    fn cfg_test_is_test_code_and_cfg_not_test_is_not() {
        assert!(is_cfg_test(&attrs_of("#[cfg(test)] fn f() {}")));
        assert!(is_cfg_test(&attrs_of("#[cfg(all(test, unix))] fn f() {}")));
        assert!(!is_cfg_test(&attrs_of("#[cfg(not(test))] fn f() {}")));
        assert!(!is_cfg_test(&attrs_of("#[cfg(unix)] fn f() {}")));
    }

    #[test]
    fn test_attributes_of_any_harness_mark_test_fns() {
        assert!(is_test_fn(&attrs_of("#[test] fn f() {}")));
        assert!(is_test_fn(&attrs_of("#[tokio::test] fn f() {}")));
        assert!(!is_test_fn(&attrs_of("#[inline] fn f() {}")));
    }

    #[test]
    fn path_attribute_is_read() {
        let item: syn::ItemMod = syn::parse_str("#[path = \"x/y.rs\"] mod y;").expect("parses");
        assert_eq!(path_attr(&item.attrs).as_deref(), Some("x/y.rs"));
    }
}
