//! What a user installs and reads first: `kreplay --version`, the man pages `kreplay man DIR`
//! writes (rendered with `man -l`, as a user would read them), and `--color` documented once.
//! No GPU needed; on a machine without a driver `--version` says so.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

mod common;
use common::{kreplay, scratch};

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[test]
fn version_names_the_version_the_commit_the_driver_and_cupti() {
    for flag in ["--version", "-V"] {
        let (code, out, err) = kreplay(&[flag]);
        assert_eq!(code, 0, "{err}");
        let l = lines(&out);
        let head = format!("kreplay {} (commit ", env!("CARGO_PKG_VERSION"));
        assert!(l[0].starts_with(&head) && l[0].ends_with(')'), "{out}");
        let commit = &l[0][head.len()..l[0].len() - 1];
        assert!(
            commit == "unknown"
                || (commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit())),
            "{out}"
        );
        let here = Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output();
        if let Some(o) = here.ok().filter(|o| o.status.success()) {
            assert_eq!(commit, String::from_utf8_lossy(&o.stdout).trim(), "{out}");
        }
        let driver = l[1].strip_prefix("CUDA driver: ").expect("a driver line");
        let cupti = l[2].strip_prefix("CUPTI: ").expect("a CUPTI line");
        let no_driver = driver.starts_with("no CUDA driver found");
        let a_release = driver
            .split(' ')
            .next()
            .is_some_and(|r| r.split('.').all(|n| n.parse::<u32>().is_ok()));
        assert!(no_driver || a_release, "{out}");
        assert!(
            cupti.starts_with("CUPTI not found") || cupti.starts_with("CUDA "),
            "{out}"
        );
        // Machines without the NVIDIA driver (CI, this one) must be told so, not fail.
        if !Path::new("/proc/driver/nvidia").exists() {
            assert!(no_driver, "{out}");
        }
    }
}

/// The subcommands `kreplay --help` lists (clap's `help` has no page).
fn listed_commands() -> Vec<String> {
    let (code, out, _) = kreplay(&["--help"]);
    assert_eq!(code, 0);
    let after = out.split("Commands:\n").nth(1).expect("a Commands list");
    after
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect()
}

/// Every `--flag` and `-x` the command's `--help` lists, except `--help` itself.
fn help_flags(args: &[&str]) -> BTreeSet<String> {
    let mut a = args.to_vec();
    a.push("--help");
    let (code, out, err) = kreplay(&a);
    assert_eq!(code, 0, "{err}");
    let mut flags = BTreeSet::new();
    for l in out
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
    {
        for word in l.split([' ', ',', '=']).filter(|w| w.starts_with('-')) {
            if word != "-h" && word != "--help" {
                flags.insert(word.to_string());
            }
        }
    }
    flags
}

/// `man -l FILE` rendered at 100 columns, or None (with the reason printed) without `man`.
fn render(page: &Path) -> Option<String> {
    let out = match Command::new("man")
        .arg("-l")
        .arg(page)
        .env("MANWIDTH", "100")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            println!("skipped rendering {}: no `man` here ({e})", page.display());
            return None;
        }
    };
    assert!(out.status.success(), "man -l {}: {:?}", page.display(), out);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!text.trim().is_empty(), "{} renders empty", page.display());
    Some(text)
}

#[test]
fn man_writes_one_page_per_command_with_every_flag() {
    let dir = scratch("man-pages").join("man1");
    let (code, out, err) = kreplay(&["man", dir.to_str().expect("utf-8 temp dir")]);
    assert_eq!(code, 0, "{err}");
    let commands = listed_commands();
    let mut expected: BTreeSet<String> =
        commands.iter().map(|c| format!("kreplay-{c}.1")).collect();
    expected.insert("kreplay.1".into());
    let written: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("DIR created")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(written, expected);
    assert_eq!(
        out.lines().count(),
        expected.len(),
        "each file named: {out}"
    );
    for c in std::iter::once(None).chain(commands.iter().map(Some)) {
        let (file, args) = match c {
            None => ("kreplay.1".to_string(), vec![]),
            Some(c) => (format!("kreplay-{c}.1"), vec![c.as_str()]),
        };
        let Some(text) = render(&dir.join(&file)) else {
            return;
        };
        for flag in help_flags(&args) {
            assert!(text.contains(&flag), "{file} does not document {flag}");
        }
        // SEE ALSO and SUBCOMMANDS cite only pages that were written.
        for word in text.split(|c: char| c.is_whitespace() || c == ',') {
            if let Some(name) = word.strip_suffix("(1)") {
                if name.starts_with("kreplay") {
                    assert!(
                        written.contains(&format!("{name}.1")),
                        "{file} cites {word}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_main_page_keeps_its_examples_one_a_line() {
    let dir = scratch("man-main");
    let (code, page, err) = kreplay(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(page.contains(".TH kreplay 1"), "{page}");
    let file = dir.join("kreplay.1");
    std::fs::write(&file, &page).expect("write the page");
    let Some(text) = render(&file) else {
        return;
    };
    let l = lines(&text);
    let at = l
        .iter()
        .position(|l| l.trim_start().starts_with("kreplay list ./app args"))
        .unwrap_or_else(|| panic!("no example line: {text}"));
    assert!(l[at].ends_with("# which kernels does it launch?"), "{text}");
    assert!(
        l[at + 1]
            .trim_start()
            .starts_with("kreplay record -k saxpy"),
        "{text}"
    );
    assert!(
        l[at + 3].trim_start().starts_with("kreplay play saxpy.krr"),
        "{text}"
    );
}

fn count(text: &str, word: &str) -> usize {
    text.matches(word).count()
}

#[test]
fn color_is_documented_once_and_hidden_where_it_does_nothing() {
    let (_, main_help, _) = kreplay(&["--help"]);
    assert_eq!(count(&main_help, "--color"), 1, "{main_help}");
    assert!(main_help.contains("NO_COLOR"), "{main_help}");
    for quiet in ["man", "completions", "extract", "pack", "record", "list"] {
        let (code, help, _) = kreplay(&[quiet, "--help"]);
        assert_eq!(code, 0);
        assert_eq!(count(&help, "--color"), 0, "{quiet}: {help}");
    }
    for coloured in ["play", "info", "verify", "diff", "profile"] {
        let (_, help, _) = kreplay(&[coloured, "--help"]);
        assert_eq!(count(&help, "--color"), 1, "{coloured}: {help}");
        assert!(help.contains("see `kreplay --help`"), "{coloured}: {help}");
        assert!(
            !help.contains("NO_COLOR"),
            "{coloured} repeats the block: {help}"
        );
    }
    // Hidden is not refused: the flag is global, wherever it is written.
    let (code, _, err) = kreplay(&["man", "--color", "never"]);
    assert_eq!(code, 0, "{err}");
}
