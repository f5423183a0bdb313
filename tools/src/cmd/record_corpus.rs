//! `kreplay record --each-kernel -o DIR/`: the corpus folder, checked before the application
//! starts, what the recorder is told, and `DIR/corpus.json`, written at the end from what
//! every process reported.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use kreplay_format::Capture;
use kreplay_protocol::config::{env, host_name, DEFAULT_OUTPUT};
use kreplay_protocol::corpus::{
    merge, CorpusCapture, Manifest, CAPTURE_NAME, MANIFEST_NAME, MANIFEST_VERSION,
};
use kreplay_protocol::report::{CaptureSummary, ProcessReport};

use crate::cli::RecordArgs;

/// The corpus folder of a run.
pub(crate) struct CorpusDir {
    pub dir: PathBuf,
}

/// The folder `-o` names for --each-kernel: `DIR/` or an existing directory, with no
/// placeholder (the manifest goes into it). `Err` says what to write instead.
pub(crate) fn folder_of(output: &str, is_dir: bool) -> Result<PathBuf, String> {
    if output.contains('%') {
        return Err(format!(
            "-o {output}: --each-kernel takes a folder with no placeholder (kreplay names the captures {CAPTURE_NAME} inside it)"
        ));
    }
    if !(output.ends_with('/') || is_dir) {
        return Err(format!(
            "-o {output}: --each-kernel writes a folder of captures and its {MANIFEST_NAME}: name a folder, e.g. -o {}/",
            output.trim_end_matches(".krr")
        ));
    }
    Ok(PathBuf::from(output.trim_end_matches('/')).join(""))
}

impl CorpusDir {
    /// Checks `-o` and makes the folder, before the application starts: it must be writable,
    /// and hold no manifest already (unless --force).
    pub(crate) fn prepare(a: &RecordArgs) -> anyhow::Result<CorpusDir> {
        if a.output == DEFAULT_OUTPUT {
            bail!("--each-kernel needs -o DIR/: the folder the corpus is written into (its captures and {MANIFEST_NAME})");
        }
        let dir =
            folder_of(&a.output, Path::new(&a.output).is_dir()).map_err(anyhow::Error::msg)?;
        super::check_output_dir(&dir, &format!("-o {}", a.output))?;
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // The application may change directory: its captures are named from the root.
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        let manifest = dir.join(MANIFEST_NAME);
        if manifest.exists() && !a.force {
            bail!(
                "-o {}: {} already exists (a corpus was recorded there): pass --force to replace it, or choose another folder",
                a.output,
                manifest.display()
            );
        }
        Ok(CorpusDir { dir })
    }

    pub(crate) fn manifest_path(&self) -> String {
        self.dir.join(MANIFEST_NAME).display().to_string()
    }

    /// The recorder's output pattern.
    fn pattern(&self) -> String {
        self.dir.join(CAPTURE_NAME).display().to_string()
    }

    /// What the recorder is told: `record`'s settings with this folder's names and no
    /// --nth or --count (each-kernel mode picks its own executions), and the corpus's own.
    pub(crate) fn apply(&self, a: &RecordArgs, vars: &mut Vec<(&'static str, String)>) {
        vars.retain(|(k, _)| ![env::OUTPUT, env::NTH, env::COUNT].contains(k));
        vars.extend([
            (env::OUTPUT, self.pattern()),
            (env::NTH, String::new()),
            (env::COUNT, String::new()),
        ]);
        vars.extend(self.vars(a));
    }

    fn vars(&self, a: &RecordArgs) -> Vec<(&'static str, String)> {
        vec![
            (env::EACH_KERNEL, "1".to_string()),
            (env::PER_KERNEL, a.per_kernel.unwrap_or(1).to_string()),
            (
                env::EACH_BY,
                a.by.unwrap_or(kreplay_protocol::config::KeyBy::Name)
                    .env_value()
                    .to_string(),
            ),
            (
                env::MAX_BYTES,
                a.max_bytes.map_or(String::new(), |m| m.to_string()),
            ),
        ]
    }

    /// Writes `DIR/corpus.json` from every process's reports (and the captures of processes
    /// that left none), and says on stderr what the corpus holds.
    pub(crate) fn write_manifest(
        &self,
        a: &RecordArgs,
        reports: &[ProcessReport],
        orphans: &[CaptureSummary],
    ) -> anyhow::Result<Manifest> {
        let entries: Vec<CorpusCapture> = reports
            .iter()
            .flat_map(|r| &r.captures)
            .chain(orphans)
            .filter_map(|c| c.corpus.clone())
            .collect();
        let left = reports.iter().flat_map(|r| r.left_out.clone()).collect();
        let (captures, left_out) = merge(&self.dir, entries, left);
        let (device, driver) = captures
            .first()
            .and_then(|c| device_of(&self.dir.join(&c.file)))
            .unwrap_or((serde_json::Value::Null, String::new()));
        let manifest = Manifest {
            version: MANIFEST_VERSION,
            device,
            driver,
            host: host_name(),
            command: a.command.clone(),
            captures,
            left_out,
        };
        let path = self.dir.join(MANIFEST_NAME);
        let mut f = std::fs::File::create(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        serde_json::to_writer_pretty(&mut f, &manifest)?;
        writeln!(f)?;
        if !a.quiet || !manifest.left_out.is_empty() {
            crate::warn!("kreplay: {}", summary_line(&manifest, &path));
        }
        Ok(manifest)
    }
}

/// The device (as `info --json` describes it) and driver version a capture was taken with.
fn device_of(path: &Path) -> Option<(serde_json::Value, String)> {
    let file = kreplay_format::file::MappedFile::open(path).ok()?;
    let cap = Capture::parse(file.bytes()).ok()?;
    let device = kreplay_player::describe::describe(&path.display().to_string(), &cap).device?;
    let driver = device.driver_version.clone();
    Some((serde_json::to_value(device).ok()?, driver))
}

/// `corpus DIR/corpus.json: 12 captures of 11 kernels, 40.2 MiB stored; 3 kernels left out`.
fn summary_line(m: &Manifest, path: &Path) -> String {
    let kernels: std::collections::HashSet<&str> =
        m.captures.iter().map(|c| c.mangled.as_str()).collect();
    let stored: u64 = m.captures.iter().map(|c| c.bytes_stored).sum();
    let mut line = format!(
        "corpus {}: {} capture(s) of {} kernel(s), {} stored",
        crate::output::printable(&path.display().to_string()),
        m.captures.len(),
        kernels.len(),
        kreplay_format::units::bytes(stored)
    );
    if let Some(first) = m.left_out.first() {
        line += &format!(
            "; {} kernel(s) left out ({}: {})",
            m.left_out.len(),
            first.kernel,
            first.why
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_protocol::corpus::LeftOut;

    #[test]
    fn each_kernel_output_must_name_a_folder_without_placeholders() {
        assert_eq!(folder_of("corpus/", false), Ok(PathBuf::from("corpus/")));
        assert_eq!(folder_of("out", true), Ok(PathBuf::from("out/")));
        let e = folder_of("%k-%p-%n.krr", false).unwrap_err();
        assert!(e.contains("no placeholder"), "{e}");
        let e = folder_of("x.krr", false).unwrap_err();
        assert!(e.contains("-o x/"), "{e}");
        assert!(folder_of("d/%h/", false).is_err());
    }

    #[test]
    fn the_summary_counts_kernels_bytes_and_what_was_left_out() {
        let capture = |mangled: &str, bytes: u64| CorpusCapture {
            mangled: mangled.into(),
            bytes_stored: bytes,
            ..Default::default()
        };
        let mut m = Manifest {
            captures: vec![capture("a", 1024), capture("a", 1024), capture("b", 0)],
            ..Default::default()
        };
        let line = summary_line(&m, Path::new("d/corpus.json"));
        assert!(
            line.starts_with("corpus d/corpus.json: 3 capture(s) of 2 kernel(s), 2.0 KiB"),
            "{line}"
        );
        assert!(!line.contains("left out"), "{line}");
        m.left_out.push(LeftOut {
            kernel: "c".into(),
            mangled: "c".into(),
            why: "full".into(),
        });
        assert!(summary_line(&m, Path::new("x")).ends_with("1 kernel(s) left out (c: full)"));
    }
}
