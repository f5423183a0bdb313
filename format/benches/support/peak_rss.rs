//! The stream bench's peak-RSS figure, measured by the child itself.
//!
//! The child reads its own high-water mark, `VmHWM` in `/proc/self/status`: the peak resident
//! set of the memory map it runs in, which `exec` replaced with a fresh one. Not
//! `getrusage`: `RUSAGE_CHILDREN` in the parent is the largest of all its children so far, and
//! a child spawned with `vfork`/`posix_spawn` (as `std::process::Command` does) shares the
//! parent's map until `exec`, which folds that map's high-water mark into the process's
//! `ru_maxrss` (`exec_mmap` in fs/exec.c), so even `RUSAGE_SELF` in the child would report
//! the parent's resident set. The child prints one line, [`report_line`], that the parent
//! reads back with [`parse_report`]; a missing or garbled figure is an error, never 0.
//! Tested in `tests/bench_peak_rss.rs`.

/// What starts the child's report line on its stdout.
pub const REPORT_PREFIX: &str = "kreplay-bench-child peak-rss-kib ";

/// `VmHWM` in KiB from the text of a `/proc/<pid>/status`.
pub fn vm_hwm_kib(status: &str) -> Result<u64, String> {
    let mut found = None;
    for line in status.lines() {
        let Some(rest) = line.strip_prefix("VmHWM:") else {
            continue;
        };
        if found.is_some() {
            return Err("VmHWM appears twice".into());
        }
        let mut words = rest.split_whitespace();
        let (Some(n), Some("kB"), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("VmHWM line is not `<n> kB`: {line:?}"));
        };
        let kib = n.parse::<u64>().map_err(|e| format!("VmHWM {n:?}: {e}"))?;
        found = Some(kib);
    }
    found.ok_or_else(|| "no VmHWM line".into())
}

/// This process's own peak resident set in KiB (`VmHWM` of `/proc/self/status`).
pub fn own_peak_kib() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("/proc/self/status: {e}"))?;
    vm_hwm_kib(&status)
}

/// The line the child prints: its peak resident set in KiB.
pub fn report_line(kib: u64) -> String {
    format!("{REPORT_PREFIX}{kib}")
}

/// The child's peak in KiB from its stdout: exactly one [`report_line`], a decimal count.
pub fn parse_report(stdout: &str) -> Result<u64, String> {
    let mut lines = stdout.lines().filter_map(|l| l.strip_prefix(REPORT_PREFIX));
    let Some(n) = lines.next() else {
        return Err(format!(
            "the child printed no `{}` line",
            REPORT_PREFIX.trim_end()
        ));
    };
    if lines.next().is_some() {
        return Err("the child printed its peak twice".into());
    }
    n.trim()
        .parse::<u64>()
        .map_err(|e| format!("the child's peak {n:?}: {e}"))
}
