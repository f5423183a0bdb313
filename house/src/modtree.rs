//! A crate's module tree, the way rustc finds it: from the root file, every `mod x;` (at
//! `x.rs`, `x/mod.rs` or its `#[path]`) and every inline `mod x { }`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use syn::Item;

use crate::attrs::{is_cfg_test, path_attr};
use crate::error::HouseError;
use crate::sources::{normal, Sources};

/// A module path inside its crate, without the leading `crate` (the root is empty).
pub type ModPath = Vec<String>;

/// One file of a crate.
pub struct SourceFile {
    pub path: PathBuf,
    pub text: String,
    pub ast: syn::File,
    /// The module the file defines.
    pub module: ModPath,
    /// Declared under `#[cfg(test)]` (itself or an ancestor): the rules leave it alone.
    pub test_only: bool,
}

/// Where a module is defined: its own file, or inline in another module's file.
pub struct Module {
    pub file: PathBuf,
    pub test_only: bool,
}

pub struct CrateTree {
    pub root: PathBuf,
    pub files: Vec<SourceFile>,
    pub modules: BTreeMap<ModPath, Module>,
}

/// A `mod x;` waiting for its file to be read.
struct Pending {
    file: PathBuf,
    module: ModPath,
    test_only: bool,
    /// Where the file's own `mod y;` files lie.
    children: PathBuf,
}

/// Where the module declarations of one level of a file resolve.
struct Level<'a> {
    file: &'a Path,
    module: &'a ModPath,
    test_only: bool,
    /// Directory of `mod y;` files declared at this level.
    children: PathBuf,
    /// Directory a `#[path]` at this level is relative to.
    path_base: PathBuf,
}

impl CrateTree {
    /// Reads the crate whose root file (`src/lib.rs`, `src/main.rs`, `src/bin/x.rs`) is `root`.
    pub fn load(sources: &dyn Sources, root: &Path) -> Result<CrateTree, HouseError> {
        let root = normal(root);
        let mut tree = CrateTree {
            root: root.clone(),
            files: Vec::new(),
            modules: BTreeMap::new(),
        };
        let mut queue = vec![Pending {
            children: parent(&root),
            file: root,
            module: Vec::new(),
            test_only: false,
        }];
        while let Some(next) = queue.pop() {
            tree.load_file(sources, next, &mut queue)?;
        }
        tree.files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(tree)
    }

    fn load_file(
        &mut self,
        sources: &dyn Sources,
        pending: Pending,
        queue: &mut Vec<Pending>,
    ) -> Result<(), HouseError> {
        let text = sources
            .read(&pending.file)
            .ok_or_else(|| HouseError::Read(pending.file.clone()))?;
        let ast = syn::parse_file(&text).map_err(|e| HouseError::Parse {
            path: pending.file.clone(),
            line: e.span().start().line,
            message: e.to_string(),
        })?;
        self.modules.insert(
            pending.module.clone(),
            Module {
                file: pending.file.clone(),
                test_only: pending.test_only,
            },
        );
        let level = Level {
            file: &pending.file,
            module: &pending.module,
            test_only: pending.test_only,
            path_base: parent(&pending.file),
            children: pending.children.clone(),
        };
        self.declare(sources, &ast.items, &level, queue)?;
        self.files.push(SourceFile {
            path: pending.file,
            text,
            ast,
            module: pending.module,
            test_only: pending.test_only,
        });
        Ok(())
    }

    fn declare(
        &mut self,
        sources: &dyn Sources,
        items: &[Item],
        level: &Level,
        queue: &mut Vec<Pending>,
    ) -> Result<(), HouseError> {
        for item in items {
            let Item::Mod(decl) = item else { continue };
            let name = decl.ident.to_string();
            let mut module = level.module.clone();
            module.push(name.clone());
            let test_only = level.test_only || is_cfg_test(&decl.attrs);
            let explicit = path_attr(&decl.attrs);
            match &decl.content {
                Some((_, inner)) => {
                    self.modules.insert(
                        module.clone(),
                        Module {
                            file: level.file.to_path_buf(),
                            test_only,
                        },
                    );
                    let dir = level.children.join(&name);
                    let inner_level = Level {
                        file: level.file,
                        module: &module,
                        test_only,
                        path_base: dir.clone(),
                        children: dir,
                    };
                    self.declare(sources, inner, &inner_level, queue)?;
                }
                None => {
                    // Beside a `#[path]` file, as beside a `mod.rs` (rustc's rule); in `x/`
                    // for both `x.rs` and `x/mod.rs`.
                    let (file, children) = match explicit {
                        Some(path) => {
                            let file = normal(&level.path_base.join(path));
                            let children = parent(&file);
                            (file, children)
                        }
                        None => (
                            module_file(sources, level, &name)?,
                            level.children.join(&name),
                        ),
                    };
                    queue.push(Pending {
                        children,
                        file,
                        module,
                        test_only,
                    });
                }
            }
        }
        Ok(())
    }

    pub fn is_module(&self, path: &[String]) -> bool {
        self.modules.contains_key(path)
    }

    /// The file that defines module `path`.
    pub fn file_of(&self, path: &[String]) -> Option<&Path> {
        self.modules.get(path).map(|m| m.file.as_path())
    }
}

/// `x.rs` or `x/mod.rs` in the level's children directory.
fn module_file(sources: &dyn Sources, level: &Level, name: &str) -> Result<PathBuf, HouseError> {
    let tried = vec![
        normal(&level.children.join(format!("{name}.rs"))),
        normal(&level.children.join(name).join("mod.rs")),
    ];
    tried
        .iter()
        .find(|p| sources.read(p).is_some())
        .cloned()
        .ok_or_else(|| HouseError::MissingModule {
            from: level.file.to_path_buf(),
            name: name.to_string(),
            tried,
        })
}

fn parent(file: &Path) -> PathBuf {
    file.parent().map(Path::to_path_buf).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Memory;

    fn modules(tree: &CrateTree) -> Vec<(String, String)> {
        tree.modules
            .iter()
            .map(|(k, v)| (k.join("::"), v.file.display().to_string()))
            .collect()
    }

    #[test]
    fn follows_file_inline_nested_and_path_modules() {
        let src = Memory::default()
            .with(
                "c/src/lib.rs",
                "mod a; mod b { mod inner; } #[path = \"other/p.rs\"] mod p;",
            )
            .with("c/src/a.rs", "mod deep;")
            .with("c/src/a/deep.rs", "")
            .with("c/src/b/inner.rs", "")
            .with("c/src/other/p.rs", "mod q;")
            .with("c/src/other/q.rs", "");
        let tree = CrateTree::load(&src, Path::new("c/src/lib.rs")).expect("loads");
        assert_eq!(
            modules(&tree),
            [
                ("", "c/src/lib.rs"),
                ("a", "c/src/a.rs"),
                ("a::deep", "c/src/a/deep.rs"),
                ("b", "c/src/lib.rs"),
                ("b::inner", "c/src/b/inner.rs"),
                ("p", "c/src/other/p.rs"),
                ("p::q", "c/src/other/q.rs"),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
    }

    #[test]
    fn mod_rs_children_lie_beside_it_and_test_modules_are_marked() {
        let src = Memory::default()
            .with("c/src/main.rs", "mod cmd; #[cfg(test)] mod tests;")
            .with("c/src/cmd/mod.rs", "mod play;")
            .with("c/src/cmd/play.rs", "")
            .with("c/src/tests.rs", "");
        let tree = CrateTree::load(&src, Path::new("c/src/main.rs")).expect("loads");
        assert_eq!(
            tree.file_of(&["cmd".into(), "play".into()]),
            Some(Path::new("c/src/cmd/play.rs"))
        );
        assert!(tree.modules[&vec!["tests".to_string()]].test_only);
        assert!(!tree.modules[&vec!["cmd".to_string()]].test_only);
    }

    #[test]
    fn a_missing_module_file_is_an_error_naming_both_candidates() {
        let src = Memory::default().with("c/src/lib.rs", "mod gone;");
        let err = CrateTree::load(&src, Path::new("c/src/lib.rs"))
            .err()
            .expect("fails");
        let text = err.to_string();
        assert!(
            text.contains("c/src/gone.rs") && text.contains("c/src/gone/mod.rs"),
            "{text}"
        );
    }
}
