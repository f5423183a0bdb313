//! `kreplay-house check`: the house rules on the checkout it is run in (CI runs it from the
//! repository root through scripts/test.sh). Exit 0 when they hold, 1 when not, 2 when the
//! tree cannot be read.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kreplay_house::check::ALLOWLIST;
use kreplay_house::sources::Disk;
use kreplay_house::workspace::crate_roots;

const USAGE: &str = "usage: kreplay-house check [REPO_ROOT]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let repo = match args.as_slice() {
        [cmd] if cmd == "check" => PathBuf::from("."),
        [cmd, root] if cmd == "check" => PathBuf::from(root),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&repo) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(message) => {
            eprintln!("house check: {message}");
            ExitCode::from(2)
        }
    }
}

/// Whether the rules hold; the report goes to stdout (failures to stderr).
fn run(repo: &Path) -> Result<bool, String> {
    let roots = crate_roots(repo).map_err(|e| e.to_string())?;
    let allow_path = repo.join(ALLOWLIST);
    let allow = std::fs::read_to_string(&allow_path)
        .map_err(|e| format!("cannot read {}: {e}", allow_path.display()))?;
    let sources = Disk {
        root: repo.to_path_buf(),
    };
    let report = kreplay_house::check(&sources, &roots, &allow).map_err(|e| e.to_string())?;
    if report.passed() {
        println!("{report}");
    } else {
        eprintln!("{report}");
    }
    Ok(report.passed())
}
