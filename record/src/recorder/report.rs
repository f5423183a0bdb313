//! Owner of what the process report says: captures written, dispatches profiled, errors.
//! Shared with the sink's writer threads, which add to it.

use std::sync::Mutex;

use kreplay_protocol::report::{CaptureSummary, KernelStat, ProcessReport, ProfileRow};

use super::kernels::Counters;
use super::locking::lock;

#[derive(Debug, Default, Clone)]
struct Entries {
    captures: Vec<CaptureSummary>,
    /// Dispatches profiled in place (`kreplay profile`).
    profiles: Vec<ProfileRow>,
    errors: Vec<String>,
}

/// The owner (see the module comment).
#[derive(Debug, Default)]
pub(super) struct Report {
    entries: Mutex<Entries>,
}

impl Report {
    /// Says `msg` on stderr and keeps it for the report.
    pub(super) fn error(&self, msg: String) {
        crate::diag!("kreplay: {msg}");
        lock(&self.entries).errors.push(msg);
    }

    pub(super) fn capture(&self, summary: CaptureSummary) {
        lock(&self.entries).captures.push(summary);
    }

    pub(super) fn profile(&self, row: ProfileRow) {
        lock(&self.entries).profiles.push(row);
    }

    /// The report of process `pid` (rank `rank`), with the kernels `counts` saw.
    pub(super) fn process_report(
        &self,
        pid: u32,
        rank: Option<u32>,
        counts: &Counters,
    ) -> ProcessReport {
        let entries = lock(&self.entries).clone();
        process_report(pid, rank, counts, entries)
    }
}

/// The process report: kernels most launched first (then by name), profile rows in match
/// order (rows waiting for their counters were reported after later ones).
fn process_report(
    pid: u32,
    rank: Option<u32>,
    counts: &Counters,
    entries: Entries,
) -> ProcessReport {
    let mut kernels: Vec<KernelStat> = counts.stats.clone();
    kernels.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
    let mut profiles = entries.profiles;
    profiles.sort_by_key(|r| r.match_index);
    ProcessReport {
        pid,
        rank,
        launches: counts.launches,
        matches: counts.matches,
        kernels,
        captures: entries.captures,
        profiles,
        errors: entries.errors,
        disabled: None,
        // Added at exit by `list --ranges` (`Recorder::add_range_spans`).
        ranges: Vec::new(),
        ranges_left_out: 0,
        // Added at exit in each-kernel mode, from the corpus's ledger.
        left_out: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(name: &str, count: u64) -> KernelStat {
        KernelStat {
            name: name.into(),
            demangled: name.into(),
            count,
            in_graphs: 0,
            grid: [1; 3],
            block: [1; 3],
            first_launch: 1,
            nvtx: None,
        }
    }

    #[test]
    fn kernels_most_launched_first_and_profiles_in_match_order() {
        let counts = Counters {
            launches: 6,
            matches: 2,
            stats: vec![stat("b", 1), stat("c", 3), stat("a", 1)],
            ..Default::default()
        };
        let row = |i: u64| ProfileRow {
            match_index: i,
            ..Default::default()
        };
        let entries = Entries {
            profiles: vec![row(2), row(1)],
            errors: vec!["e".into()],
            ..Default::default()
        };
        let r = process_report(7, Some(1), &counts, entries);
        let names: Vec<&str> = r.kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["c", "a", "b"]);
        let order: Vec<u64> = r.profiles.iter().map(|p| p.match_index).collect();
        assert_eq!(order, [1, 2]);
        assert_eq!((r.pid, r.rank, r.launches, r.matches), (7, Some(1), 6, 2));
        assert_eq!(r.errors, ["e"]);
        assert!(r.disabled.is_none());
    }
}
