//! `kreplay play DIR`: every capture replayed in a child of its own, `jobs` at once, spread
//! over the GPUs, each killed after `timeout`. Records are handed out as captures finish.

use std::collections::HashMap;
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::farm::checksum;
use crate::farm::child::{kill_group, ChildCommand, ChildEvent};
use crate::farm::gpus::Gpu;
use crate::farm::outcome::record_of;
use crate::farm::schedule::Slots;
use crate::farm::Entry;
use crate::run_record::{RunRecord, Verdict};

/// How a run of many replays runs.
#[derive(Debug, Clone)]
pub struct PlayFarm {
    pub child: ChildCommand,
    /// At least one (see `gpus::describe`).
    pub gpus: Vec<Gpu>,
    pub jobs: usize,
    pub timeout: Option<Duration>,
}

/// A child in flight.
struct Running {
    gpu: usize,
    pid: i32,
    started: Instant,
    killed: bool,
}

/// The children in flight, by entry index. Dropped early (a record that cannot be written
/// ends the run), it kills those still running: none outlives the run.
#[derive(Default)]
struct InFlight(HashMap<usize, Running>);

impl Drop for InFlight {
    fn drop(&mut self) {
        for r in self.0.values() {
            kill_group(r.pid);
        }
    }
}

/// The record a capture starts from: its name, checksum and GPU.
fn base_record(e: &Entry, gpu: Option<&Gpu>) -> RunRecord {
    let mut r = RunRecord::new(e.shown.clone(), Verdict::Error);
    r.key = Some(e.key.clone());
    r.sha256 = e.sha256.clone();
    r.device_uuid = gpu.and_then(|g| g.uuid.clone());
    r.driver = gpu.and_then(|g| g.driver.clone());
    r
}

/// A capture the manifest's checksum refuses before any replay (None: go ahead).
pub fn checksum_refusal(e: &Entry) -> Option<RunRecord> {
    let want = e.sha256.as_deref()?;
    let started = Instant::now();
    let mut r = base_record(e, None);
    match checksum::mismatch(&e.path, want) {
        Ok(None) => return None,
        Ok(Some(why)) => {
            r.verdict = Verdict::Damaged;
            r.error = Some(why);
        }
        Err(err) => r.error = Some(format!("cannot read {}: {err}", e.shown)),
    }
    r.wall_s = started.elapsed().as_secs_f64();
    Some(r)
}

/// Replays `entries`, handing each record to `report` as its capture finishes (in finishing
/// order); the verdicts, or the first error `report` returned.
pub fn play_many(
    farm: &PlayFarm,
    entries: &[Entry],
    report: &mut dyn FnMut(&RunRecord) -> std::io::Result<()>,
) -> std::io::Result<Vec<Verdict>> {
    let (events, inbox) = channel();
    let mut slots = Slots::new(farm.gpus.len());
    let mut flight = InFlight::default();
    let running = &mut flight.0;
    let mut verdicts = Vec::with_capacity(entries.len());
    let mut next = 0;
    while next < entries.len() || !running.is_empty() {
        while running.len() < farm.jobs.max(1) && next < entries.len() {
            let e = &entries[next];
            if let Some(r) = checksum_refusal(e) {
                report(&r)?;
                verdicts.push(r.verdict);
                next += 1;
                continue;
            }
            let gpu = slots.take();
            let visible = farm.gpus.get(gpu).and_then(|g| g.visible.as_deref());
            let started = Instant::now();
            match farm.child.spawn(next, &e.path, visible, events.clone()) {
                Ok(pid) => {
                    let run = Running {
                        gpu,
                        pid,
                        started,
                        killed: false,
                    };
                    running.insert(next, run);
                }
                Err(end) => {
                    slots.give_back(gpu);
                    let r = record_of(base_record(e, farm.gpus.get(gpu)), &end);
                    report(&r)?;
                    verdicts.push(r.verdict);
                }
            }
            next += 1;
        }
        if running.is_empty() {
            continue;
        }
        match inbox.recv_timeout(until_next_deadline(running, farm.timeout)) {
            Ok(ChildEvent { slot, mut end }) => {
                let Some(run) = running.remove(&slot) else {
                    continue;
                };
                slots.give_back(run.gpu);
                if run.killed {
                    end.timed_out = farm.timeout.map(|t| t.as_secs_f64());
                }
                let base = base_record(&entries[slot], farm.gpus.get(run.gpu));
                let mut r = record_of(base, &end);
                r.wall_s = run.started.elapsed().as_secs_f64();
                report(&r)?;
                verdicts.push(r.verdict);
            }
            Err(RecvTimeoutError::Timeout) => kill_overdue(running, farm.timeout),
            // Every sender is a clone of `events`, which lives here: cannot happen.
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    Ok(verdicts)
}

/// How long until the next child passes its timeout (long without one).
fn until_next_deadline(running: &HashMap<usize, Running>, timeout: Option<Duration>) -> Duration {
    let Some(t) = timeout else {
        return Duration::from_secs(3600);
    };
    running
        .values()
        .filter(|r| !r.killed)
        .map(|r| t.saturating_sub(r.started.elapsed()))
        .min()
        .unwrap_or(t)
}

fn kill_overdue(running: &mut HashMap<usize, Running>, timeout: Option<Duration>) {
    let Some(t) = timeout else { return };
    for r in running.values_mut() {
        if !r.killed && r.started.elapsed() >= t {
            kill_group(r.pid);
            r.killed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// A stand-in for `kreplay`: a shell script that acts by the capture's file name.
    fn fake_kreplay(dir: &Path) -> PathBuf {
        let report = r#"{"kernel":"_Z5saxpyifPKfPf","device":"gpu","passes":1,"durations_ns":[1000],"min_ns":1000,"median_ns":1000,"max_ns":1000,"original_ns":null,"verify":{"checked":true,"reference":"recorded","matched":true,"deterministic":true}}"#;
        let script = format!(
            "#!/bin/sh\n\
             case \"$2\" in\n\
             *hang*) echo $$ > \"$2.pid\"; sleep 30 & wait ;;\n\
             *crash*) kill -SEGV $$ ;;\n\
             *slow*) sleep 0.5; echo '{report}' ;;\n\
             *gpu*) echo \"$CUDA_VISIBLE_DEVICES\" >> \"$2\"; echo '{report}' ;;\n\
             *) echo '{report}' ;;\n\
             esac\n"
        );
        let path = dir.join("fake-kreplay");
        std::fs::write(&path, script).expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    fn entry(dir: &Path, name: &str) -> Entry {
        let path = dir.join(name);
        Entry {
            shown: name.into(),
            key: name.into(),
            path,
            sha256: None,
        }
    }

    fn gpu(visible: &str) -> Gpu {
        Gpu {
            visible: Some(visible.into()),
            uuid: Some(format!("GPU-{visible}")),
            driver: Some("580".into()),
        }
    }

    fn farm(dir: &Path, gpus: Vec<Gpu>, jobs: usize, timeout: Option<Duration>) -> PlayFarm {
        PlayFarm {
            child: ChildCommand {
                program: fake_kreplay(dir),
                args: Vec::new(),
            },
            gpus,
            jobs,
            timeout,
        }
    }

    fn run(f: &PlayFarm, entries: &[Entry]) -> Vec<RunRecord> {
        let mut got = Vec::new();
        play_many(f, entries, &mut |r| {
            got.push(r.clone());
            Ok(())
        })
        .expect("run");
        got.sort_by(|a, b| a.file.cmp(&b.file));
        got
    }

    // Catches: a hang that stalls the run, or a kill that misses what the child started
    // (its pipes would stay open until the grandchild's sleep ended, 30 s).
    #[test]
    fn a_hang_is_killed_with_its_process_group_and_a_crash_ends_one_capture() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = farm(
            d.path(),
            vec![gpu("0")],
            3,
            Some(Duration::from_millis(300)),
        );
        let entries = [
            entry(d.path(), "a-hang.krr"),
            entry(d.path(), "b-crash.krr"),
            entry(d.path(), "c-ok.krr"),
        ];
        let started = Instant::now();
        let got = run(&f, &entries);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        let verdicts: Vec<Verdict> = got.iter().map(|r| r.verdict).collect();
        assert_eq!(
            verdicts,
            [Verdict::Timeout, Verdict::Error, Verdict::Matched]
        );
        assert!(
            got[1]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("signal 11")),
            "{:?}",
            got[1].error
        );
        assert_eq!(got[2].device_uuid.as_deref(), Some("GPU-0"));
        assert_eq!(got[2].kernel.as_deref(), Some("saxpy"));
    }

    // Catches: a run that stops on a failed write leaving its other children running.
    #[test]
    fn a_run_that_cannot_write_a_record_kills_the_children_in_flight() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = farm(d.path(), vec![gpu("0")], 2, None);
        // The other capture answers late enough for the hanging one to have written its pid.
        let entries = [entry(d.path(), "a-hang.krr"), entry(d.path(), "b-slow.krr")];
        let full = || Err(std::io::Error::other("disk full"));
        let e = play_many(&f, &entries, &mut |_| full()).expect_err("the write failed");
        assert_eq!(e.to_string(), "disk full");
        let pid_file = d.path().join("a-hang.krr.pid");
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            let pid = std::fs::read_to_string(&pid_file).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()));
            // Gone, or a zombie its waiting thread has yet to reap.
            !pid.trim().is_empty() && stat.map_or(true, |s| s.contains(") Z "))
        });
        assert!(gone, "the hanging child still runs");
    }

    #[test]
    fn each_child_is_pinned_to_one_gpu_and_the_gpus_share_the_work() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = farm(d.path(), vec![gpu("3"), gpu("5")], 2, None);
        let entries: Vec<Entry> = (0..4)
            .map(|i| entry(d.path(), &format!("gpu-{i}.krr")))
            .collect();
        let got = run(&f, &entries);
        assert!(got.iter().all(|r| r.verdict == Verdict::Matched));
        let mut seen: Vec<String> = entries
            .iter()
            .map(|e| {
                std::fs::read_to_string(&e.path)
                    .expect("written")
                    .trim()
                    .to_string()
            })
            .collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen, ["3", "5"]);
    }

    #[test]
    fn a_checksum_mismatch_is_damaged_and_never_replayed() {
        let d = tempfile::tempdir().expect("tempdir");
        let mut e = entry(d.path(), "gpu-x.krr");
        std::fs::write(&e.path, b"").expect("write");
        e.sha256 = Some("00".into());
        let got = run(&farm(d.path(), vec![gpu("0")], 1, None), &[e.clone()]);
        assert_eq!(got[0].verdict, Verdict::Damaged);
        assert_eq!(
            std::fs::read(&e.path).expect("read"),
            b"",
            "the child never ran"
        );
    }
}
