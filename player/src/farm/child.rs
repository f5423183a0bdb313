//! One capture replayed in a child process of its own: a kernel fault or a poisoned context
//! ends that child, not the run. The child is this same executable (`kreplay play FILE --json
//! ...`), pinned to its GPU by `CUDA_VISIBLE_DEVICES`, in a process group of its own so a
//! timeout kills whatever it started too.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::farm::outcome::ChildEnd;

/// How children are started: `program play FILE --json ARGS...`.
#[derive(Debug, Clone)]
pub struct ChildCommand {
    pub program: PathBuf,
    /// The options every child's `play` takes after the file.
    pub args: Vec<OsString>,
}

/// A child's end, reported by its waiting thread under the slot it was started in.
pub struct ChildEvent {
    pub slot: usize,
    pub end: ChildEnd,
}

impl ChildCommand {
    fn command(&self, file: &Path, visible: Option<&str>) -> Command {
        let mut c = Command::new(&self.program);
        c.arg("play")
            .arg(file)
            .arg("--json")
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(v) = visible {
            c.env("CUDA_VISIBLE_DEVICES", v);
        }
        // In a process group of its own, the child does not hear the terminal's ^C (nor a
        // kill of the farm's group): it is told to die with the farm instead.
        let farm = std::process::id();
        // SAFETY: the closure runs in the forked child before exec and calls only prctl(2),
        // getppid(2) and _exit(2), which are async-signal-safe; it allocates nothing.
        unsafe {
            c.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The farm may have died between fork and prctl: then nobody would kill us.
                if libc::getppid() as u32 != farm {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        c
    }

    /// Starts `file`'s child here (so its process group is known before anything else
    /// happens) and waits for it on a thread that hands its end, under `slot`, to `ended`;
    /// the child's pid, or why it could not start.
    pub fn spawn(
        &self,
        slot: usize,
        file: &Path,
        visible: Option<&str>,
        ended: impl FnOnce(ChildEvent) + Send + 'static,
    ) -> Result<i32, ChildEnd> {
        let child = self
            .command(file, visible)
            .spawn()
            .map_err(|e| not_started(format!("cannot start the replay's process: {e}")))?;
        let pid = i32::try_from(child.id()).unwrap_or(0);
        std::thread::spawn(move || {
            let end = match child.wait_with_output() {
                Ok(out) => ChildEnd {
                    code: out.status.code(),
                    signal: out.status.signal(),
                    timed_out: None,
                    stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                },
                Err(e) => not_started(format!("lost the replay's process: {e}")),
            };
            ended(ChildEvent { slot, end });
        });
        Ok(pid)
    }
}

fn not_started(why: String) -> ChildEnd {
    ChildEnd {
        code: None,
        signal: None,
        timed_out: None,
        stdout: String::new(),
        stderr: format!("kreplay: error: {why}"),
    }
}

/// Kills process group `pid` (the child and whatever it started).
pub fn kill_group(pid: i32) {
    if pid <= 0 {
        // Never signal group 0 (our own) or every process (-1).
        return;
    }
    // SAFETY: kill(2) takes plain integers; a negative pid names the child's own process
    // group, made by `process_group(0)` at spawn, so nothing of ours is signalled.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}
