//! The README's commands that need no GPU work as shown (issue 36): every ```console block is
//! run and its output compared with what the README prints.
//!
//! The convention (CONTRIBUTING.md says it for writers): in a ```console block, a line
//! `$ COMMAND` is a command and the lines after it, up to the next `$ ` line or the end of the
//! block, are its output (stdout and stderr together, as a terminal shows them). The command
//! must exit 0, unless it ends in a shell comment `# exit N`. A block right after the line
//! `<!-- readme-test: without-driver -->` shows what a machine without the CUDA driver says,
//! and runs only where `libcuda.so` cannot be loaded. Other blocks (```, ```python...) are
//! not run.
//!
//! The commands run through `sh`, in order, in one scratch directory (so a later command reads
//! what an earlier one wrote) holding a `testdata` link to the repository's, with the built
//! `kreplay` first on `PATH`. Normalised before comparing, and nothing else: trailing
//! whitespace on each line (editors strip it), and the scratch directory's and the
//! repository's absolute paths (removed, leaving the relative path). No timings are
//! normalised: the commands run here print none (a capture's recorded duration is data).

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

/// When a block runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Condition {
    Always,
    /// Only on a machine where the CUDA driver library cannot be loaded.
    WithoutDriver,
}

/// One `$ command` of a console block and what the README says it prints.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Example {
    command: String,
    expected: String,
    status: i32,
    condition: Condition,
    /// The `## ` section it is in, and its line in the README (1-based), for messages.
    section: String,
    line: usize,
}

const MARKER_WITHOUT_DRIVER: &str = "<!-- readme-test: without-driver -->";

/// The exit status a command line declares with a trailing `# exit N` (0 without one).
fn expected_status(command: &str) -> Result<i32, String> {
    let Some((_, comment)) = command.rsplit_once('#') else {
        return Ok(0);
    };
    let Some(n) = comment.trim().strip_prefix("exit ") else {
        return Ok(0);
    };
    n.trim()
        .parse()
        .map_err(|_| format!("`# exit {n}` is not a number: {command}"))
}

/// Every command of the README's console blocks, in order.
fn examples(readme: &str) -> Result<Vec<Example>, String> {
    let mut out: Vec<Example> = Vec::new();
    let mut section = String::new();
    // The open block's condition and how many commands came before it.
    let mut block: Option<(Condition, usize)> = None;
    let mut previous = "";
    for (i, line) in readme.lines().enumerate() {
        match block {
            None => {
                if let Some(h) = line.strip_prefix("## ") {
                    section = h.trim().to_string();
                } else if line.trim_end() == "```console" {
                    let condition = if previous.trim() == MARKER_WITHOUT_DRIVER {
                        Condition::WithoutDriver
                    } else {
                        Condition::Always
                    };
                    block = Some((condition, out.len()));
                }
            }
            Some(_) if line.trim_end() == "```" => block = None,
            Some((condition, before)) => {
                if let Some(command) = line.strip_prefix("$ ") {
                    out.push(Example {
                        command: command.to_string(),
                        expected: String::new(),
                        status: expected_status(command)?,
                        condition,
                        section: section.clone(),
                        line: i + 1,
                    });
                } else if let Some(last) = out[before..].last_mut() {
                    last.expected.push_str(line);
                    last.expected.push('\n');
                } else {
                    return Err(format!(
                        "README line {}: a console block must start with a `$ ` command",
                        i + 1
                    ));
                }
            }
        }
        if !line.trim().is_empty() {
            previous = line;
        }
    }
    if block.is_some() {
        return Err("README: a console block is not closed".into());
    }
    Ok(out)
}

/// Output as compared: absolute paths made relative, trailing whitespace dropped.
fn normalise(text: &str, absolute: &[&Path]) -> String {
    let mut t = text.to_string();
    for dir in absolute {
        t = t.replace(&format!("{}/", dir.display()), "");
    }
    t.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_string()
}

/// Whether this machine's CUDA driver library cannot be loaded (as on CI).
fn no_driver() -> bool {
    ["libcuda.so.1", "libcuda.so"].iter().all(|name| {
        let c = std::ffi::CString::new(*name).expect("name");
        // SAFETY: dlopen with a valid C string; the handle is closed at once.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        if !h.is_null() {
            // SAFETY: a handle dlopen returned.
            unsafe { libc::dlclose(h) };
        }
        h.is_null()
    })
}

fn repo_root() -> PathBuf {
    let tools = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    tools
        .parent()
        .expect("tools/ has a parent")
        .canonicalize()
        .expect("repository root")
}

/// Runs `command` through `sh` in `dir`: (exit status, stdout and stderr as one stream).
fn run_shell(dir: &Path, command: &str) -> (i32, String) {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_kreplay"));
    let bin = exe.parent().expect("kreplay's directory");
    let path = match std::env::var_os("PATH") {
        Some(p) => format!("{}:{}", bin.display(), p.to_string_lossy()),
        None => bin.display().to_string(),
    };
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 2>&1\n{command}"))
        .current_dir(dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        // `record` and `list` look for the recorder library before the application runs; any
        // file stands for it where no driver could load it (as in the other CLI tests).
        .env("KREPLAY_RECORD_LIB", &exe)
        .output()
        .expect("run sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn every_console_command_of_the_readme_prints_what_the_readme_shows() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let all = examples(&readme).expect("README console blocks");
    let quickstart = all.iter().filter(|e| e.section == "Quickstart").count();
    assert_eq!(quickstart, 4, "the quickstart shows four commands");
    let scratch = common::scratch("readme").canonicalize().expect("scratch");
    std::os::unix::fs::symlink(root.join("testdata"), scratch.join("testdata"))
        .expect("link testdata");
    let without_driver = no_driver();
    let mut failures = Vec::new();
    let mut ran = 0;
    for e in &all {
        if e.condition == Condition::WithoutDriver && !without_driver {
            continue;
        }
        ran += 1;
        let (status, output) = run_shell(&scratch, &e.command);
        let got = normalise(&output, &[&scratch, &root]);
        let want = normalise(&e.expected, &[]);
        if status != e.status || got != want {
            failures.push(format!(
                "README line {} ({}): $ {}\n  exit {status}, README says {}\n--- README shows:\n{want}\n--- it printed:\n{got}\n",
                e.line, e.section, e.command, e.status
            ));
        }
    }
    assert!(ran >= 4, "only {ran} README commands ran");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

mod parsing {
    use super::*;

    const SAMPLE: &str = "# t\n## Quickstart\n\n```console\n$ kreplay verify a.krr\na.krr: intact   \n$ kreplay diff a b   # exit 1\nresult    different\n```\n\n```\n$ not run\n```\n## Troubleshooting\n<!-- readme-test: without-driver -->\n```console\n$ kreplay play a.krr # exit 2\nkreplay: error: no driver\n```\n";

    #[test]
    fn commands_outputs_statuses_and_conditions_come_from_console_blocks_only() {
        let got = examples(SAMPLE).expect("parse");
        let summary: Vec<_> = got
            .iter()
            .map(|e| {
                (
                    e.command.as_str(),
                    e.expected.as_str(),
                    e.status,
                    e.condition,
                    e.section.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "kreplay verify a.krr",
                    "a.krr: intact   \n",
                    0,
                    Condition::Always,
                    "Quickstart"
                ),
                (
                    "kreplay diff a b   # exit 1",
                    "result    different\n",
                    1,
                    Condition::Always,
                    "Quickstart"
                ),
                (
                    "kreplay play a.krr # exit 2",
                    "kreplay: error: no driver\n",
                    2,
                    Condition::WithoutDriver,
                    "Troubleshooting"
                ),
            ]
        );
        assert_eq!(got[0].line, 5);
    }

    #[test]
    fn a_console_block_without_a_command_or_unclosed_is_an_error() {
        assert!(examples("```console\noutput first\n```\n").is_err());
        let after_another = "```console\n$ a\n```\n```console\nstray\n```\n";
        assert!(examples(after_another).is_err());
        assert!(examples("```console\n$ kreplay info a\n").is_err());
        assert!(examples("```console\n$ kreplay info a # exit x\n```\n").is_err());
    }

    #[test]
    fn a_hash_that_is_not_an_exit_comment_leaves_the_status_at_zero() {
        assert_eq!(expected_status("kreplay info a.krr"), Ok(0));
        assert_eq!(expected_status("echo '#1'"), Ok(0));
        assert_eq!(expected_status("kreplay diff a b  # exit 1"), Ok(1));
    }

    #[test]
    fn only_absolute_paths_and_trailing_whitespace_are_normalised() {
        let dir = Path::new("/tmp/x");
        assert_eq!(
            normalise("/tmp/x/a.krr: intact  \nno   \n\n", &[dir]),
            "a.krr: intact\nno"
        );
        assert_eq!(normalise("20.2 us", &[dir]), "20.2 us");
        assert_ne!(normalise("a  b", &[dir]), normalise("a b", &[dir]));
    }
}
