//! `kreplay play DIR`: every capture replayed in a child of its own, `jobs` at once, spread
//! over the GPUs, each killed after `timeout`. Records are handed out as captures finish.
//! The manifest's checksums are checked ahead of the dispatch, on a thread of their own
//! (`ahead`), so a large file being hashed never holds up the collection of finished
//! children nor the killing of overdue ones.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::farm::ahead::{self, Check, Checked, Credits};
use crate::farm::checksum;
use crate::farm::child::{kill_group, ChildCommand, ChildEvent};
use crate::farm::gpus::Gpu;
use crate::farm::outcome::record_of;
use crate::farm::schedule::Slots;
use crate::farm::Entry;
use crate::run_record::{RunRecord, Verdict};

/// How many captures the checksums may be checked ahead of the dispatch: the next ones are
/// ready when slots free, and a run reads little more than it is about to replay.
const CHECKED_AHEAD: usize = 4;

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

/// What the dispatcher hears (a refusal's record, boxed, is most of a `Checked`).
enum Event {
    Child(ChildEvent),
    Checked(Box<Checked>),
}

/// What the dispatcher does with the first checked entry in line.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Its refusal is its record: reported at once, it needs no slot.
    Report,
    Spawn,
    /// Nothing checked yet, or every slot is busy.
    Wait,
}

/// The dispatcher's next step, with `front` first in line and `running` of `jobs` slots
/// busy. Entries leave the line in their order, so records of refusals keep their place
/// among the replays started, as when the checksum was checked on the dispatch loop.
fn step(front: Option<&Checked>, running: usize, jobs: usize) -> Step {
    match front {
        None => Step::Wait,
        Some(c) if c.refusal.is_some() => Step::Report,
        Some(_) if running < jobs.max(1) => Step::Spawn,
        Some(_) => Step::Wait,
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

type Report<'r> = dyn FnMut(&RunRecord) -> std::io::Result<()> + 'r;

/// One run's dispatch: the checked entries in line, the children in flight, the verdicts.
struct Dispatch<'a> {
    farm: &'a PlayFarm,
    entries: &'a [Entry],
    events: Sender<Event>,
    slots: Slots,
    flight: InFlight,
    line: VecDeque<Checked>,
    credits: Credits,
    /// Entries that left the line (started, or reported).
    taken: usize,
    verdicts: Vec<Verdict>,
}

impl Dispatch<'_> {
    fn done(&self) -> bool {
        self.taken >= self.entries.len() && self.flight.0.is_empty()
    }

    fn record(&mut self, r: &RunRecord, report: &mut Report<'_>) -> std::io::Result<()> {
        report(r)?;
        self.verdicts.push(r.verdict);
        Ok(())
    }

    /// Takes entries off the line while `step` says so.
    fn dispatch(&mut self, report: &mut Report<'_>) -> std::io::Result<()> {
        while step(self.line.front(), self.flight.0.len(), self.farm.jobs) != Step::Wait {
            let Some(c) = self.line.pop_front() else {
                break;
            };
            self.taken += 1;
            self.credits.taken();
            match c.refusal {
                Some(r) => self.record(&r, report)?,
                None => self.spawn(c.index, report)?,
            }
        }
        Ok(())
    }

    fn spawn(&mut self, index: usize, report: &mut Report<'_>) -> std::io::Result<()> {
        let e = &self.entries[index];
        let gpu = self.slots.take();
        let visible = self.farm.gpus.get(gpu).and_then(|g| g.visible.as_deref());
        let started = Instant::now();
        let events = self.events.clone();
        let ended = move |ev| {
            // Gone: the run ended early and killed this child.
            let _ = events.send(Event::Child(ev));
        };
        match self.farm.child.spawn(index, &e.path, visible, ended) {
            Ok(pid) => {
                let run = Running {
                    gpu,
                    pid,
                    started,
                    killed: false,
                };
                self.flight.0.insert(index, run);
                Ok(())
            }
            Err(end) => {
                self.slots.give_back(gpu);
                let r = record_of(base_record(e, self.farm.gpus.get(gpu)), &end);
                self.record(&r, report)
            }
        }
    }

    fn collect(&mut self, ev: ChildEvent, report: &mut Report<'_>) -> std::io::Result<()> {
        let ChildEvent { slot, mut end } = ev;
        let Some(run) = self.flight.0.remove(&slot) else {
            return Ok(());
        };
        self.slots.give_back(run.gpu);
        if run.killed {
            end.timed_out = self.farm.timeout.map(|t| t.as_secs_f64());
        }
        let base = base_record(&self.entries[slot], self.farm.gpus.get(run.gpu));
        let mut r = record_of(base, &end);
        r.wall_s = run.started.elapsed().as_secs_f64();
        self.record(&r, report)
    }
}

/// Replays `entries`, handing each record to `report` as its capture finishes (in finishing
/// order); the verdicts, or the first error `report` returned.
pub fn play_many(
    farm: &PlayFarm,
    entries: &[Entry],
    report: &mut Report<'_>,
) -> std::io::Result<Vec<Verdict>> {
    play_checked(farm, entries, checksum::refusal, report)
}

/// `play_many` with `check` deciding which entries are refused before any replay.
fn play_checked(
    farm: &PlayFarm,
    entries: &[Entry],
    check: Check,
    report: &mut Report<'_>,
) -> std::io::Result<Vec<Verdict>> {
    let (events, inbox) = channel();
    let to_dispatch = events.clone();
    let credits = ahead::start(entries.to_vec(), check, CHECKED_AHEAD, move |c| {
        to_dispatch.send(Event::Checked(Box::new(c))).is_ok()
    });
    let mut d = Dispatch {
        farm,
        entries,
        events,
        slots: Slots::new(farm.gpus.len()),
        flight: InFlight::default(),
        line: VecDeque::new(),
        credits,
        taken: 0,
        verdicts: Vec::with_capacity(entries.len()),
    };
    loop {
        d.dispatch(report)?;
        if d.done() {
            return Ok(d.verdicts);
        }
        match inbox.recv_timeout(until_next_deadline(&d.flight.0, farm.timeout)) {
            Ok(Event::Checked(c)) => d.line.push_back(*c),
            Ok(Event::Child(ev)) => d.collect(ev, report)?,
            Err(RecvTimeoutError::Timeout) => {}
            // `d.events` lives here: cannot happen.
            Err(RecvTimeoutError::Disconnected) => return Ok(d.verdicts),
        }
        // On every wake, not only on a quiet timeout: a stream of other events must not
        // postpone a kill.
        kill_overdue(&mut d.flight.0, farm.timeout);
    }
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

    /// A checksum check that takes 3 s on `*bigfile*` (a multi-GiB file) and refuses
    /// `*badsum*`.
    fn slow_check(e: &Entry) -> Option<RunRecord> {
        if e.shown.contains("bigfile") {
            std::thread::sleep(Duration::from_secs(3));
        }
        e.shown
            .contains("badsum")
            .then(|| checksum::damaged(e, "bad checksum".into()))
    }

    /// Each record with when it arrived, counted from the start of the run.
    fn run_timed(f: &PlayFarm, entries: &[Entry]) -> HashMap<String, (RunRecord, Duration)> {
        let started = Instant::now();
        let mut got = HashMap::new();
        play_checked(f, entries, slow_check, &mut |r| {
            let at = started.elapsed();
            assert!(
                got.insert(r.file.clone(), (r.clone(), at)).is_none(),
                "twice"
            );
            Ok(())
        })
        .expect("run");
        got
    }

    // Catches: hashing on the dispatch loop, which leaves a finished child uncollected and a
    // hanging one unkilled until the hash of a large file is over.
    #[test]
    fn a_slow_checksum_delays_neither_the_collection_nor_the_timeout_of_running_children() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = farm(
            d.path(),
            vec![gpu("0")],
            3,
            Some(Duration::from_millis(300)),
        );
        let entries = [
            entry(d.path(), "a-hang.krr"),
            entry(d.path(), "b-ok.krr"),
            entry(d.path(), "c-bigfile.krr"),
        ];
        let got = run_timed(&f, &entries);
        let (hang, hang_at) = &got["a-hang.krr"];
        assert_eq!(hang.verdict, Verdict::Timeout);
        assert!(*hang_at < Duration::from_secs(2), "killed at {hang_at:?}");
        let (ok, ok_at) = &got["b-ok.krr"];
        assert_eq!(ok.verdict, Verdict::Matched);
        assert!(*ok_at < Duration::from_secs(2), "collected at {ok_at:?}");
        let (slow, slow_at) = &got["c-bigfile.krr"];
        assert_eq!(slow.verdict, Verdict::Matched, "replayed once checked");
        assert!(*slow_at >= Duration::from_secs(3), "{slow_at:?}");
    }

    // Catches: a refusal lost on its way from the checking thread, or a refused capture
    // replayed anyway.
    #[test]
    fn refused_captures_are_reported_and_never_replayed() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = farm(d.path(), vec![gpu("0")], 1, None);
        let entries = [
            entry(d.path(), "gpu-a-badsum.krr"),
            entry(d.path(), "gpu-b.krr"),
            entry(d.path(), "gpu-c-bigfile-badsum.krr"),
            entry(d.path(), "gpu-d-badsum.krr"),
        ];
        let got = run_timed(&f, &entries);
        assert_eq!(got.len(), 4);
        for name in [
            "gpu-a-badsum.krr",
            "gpu-c-bigfile-badsum.krr",
            "gpu-d-badsum.krr",
        ] {
            let (r, _) = &got[name];
            assert_eq!(r.verdict, Verdict::Damaged, "{name}");
            assert_eq!(r.error.as_deref(), Some("bad checksum"), "{name}");
            assert!(!d.path().join(name).exists(), "{name} was replayed");
        }
        assert_eq!(got["gpu-b.krr"].0.verdict, Verdict::Matched);
        assert!(
            d.path().join("gpu-b.krr").exists(),
            "gpu-b was not replayed"
        );
    }

    fn checked(index: usize, refused: bool) -> Checked {
        Checked {
            index,
            refusal: refused.then(|| RunRecord::new("x", Verdict::Damaged)),
        }
    }

    // Catches: a refusal held back behind busy slots, or a replay started past `jobs`.
    #[test]
    fn refusals_need_no_slot_and_replays_wait_for_one() {
        assert_eq!(step(None, 0, 2), Step::Wait);
        assert_eq!(step(Some(&checked(0, true)), 2, 2), Step::Report);
        assert_eq!(step(Some(&checked(0, false)), 1, 2), Step::Spawn);
        assert_eq!(step(Some(&checked(0, false)), 2, 2), Step::Wait);
        assert_eq!(step(Some(&checked(0, false)), 0, 0), Step::Spawn);
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
