//! The stream bench's peak-RSS helper (`benches/support/peak_rss.rs`), tested here: a bench
//! built with `harness = false` runs no `#[test]`.

#[path = "../benches/support/peak_rss.rs"]
mod peak_rss;

use peak_rss::*;

// A trimmed /proc/self/status of a Linux 6.x process.
const STATUS: &str = "Name:\tthroughput-1a2b\nUmask:\t0022\nState:\tR (running)\n\
    Pid:\t4242\nVmPeak:\t 4382116 kB\nVmSize:\t 4382116 kB\nVmLck:\t       0 kB\n\
    VmHWM:\t  193536 kB\nVmRSS:\t   94208 kB\nRssAnon:\t   65536 kB\nThreads:\t2\n";

#[test]
fn vm_hwm_is_read_from_a_status_text() {
    assert_eq!(vm_hwm_kib(STATUS), Ok(193_536));
}

#[test]
fn a_status_without_a_sound_vm_hwm_is_an_error() {
    let without = STATUS.replace("VmHWM:\t  193536 kB\n", "");
    assert!(vm_hwm_kib(&without).is_err());
    for bad in [
        "VmHWM:\t\n",
        "VmHWM:\t 12x kB\n",
        "VmHWM:\t 12 MB\n",
        "VmHWM:\t 12\n",
    ] {
        assert!(vm_hwm_kib(bad).is_err(), "{bad:?}");
    }
    assert!(vm_hwm_kib("VmHWM: 1 kB\nVmHWM: 2 kB\n").is_err());
    assert!(vm_hwm_kib("").is_err());
}

#[test]
fn own_peak_is_at_least_the_current_resident_set() {
    assert!(own_peak_kib().expect("VmHWM of this process") > 0);
    // One reading of the status file: the peak and the resident set of the same moment (the
    // other tests' threads allocate meanwhile).
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let peak = vm_hwm_kib(&status).expect("VmHWM");
    let rss: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    assert!(
        peak > 0 && peak >= rss,
        "peak {peak} KiB, resident {rss} KiB"
    );
}

#[test]
fn the_report_line_round_trips() {
    assert_eq!(parse_report(&report_line(193_536)), Ok(193_536));
    let out = format!("something else\n{}\n", report_line(7));
    assert_eq!(parse_report(&out), Ok(7));
}

#[test]
fn a_missing_twice_or_garbled_report_is_an_error_not_zero() {
    assert!(parse_report("").is_err());
    assert!(parse_report("peak 193536\n").is_err());
    assert!(parse_report(&format!("{REPORT_PREFIX}\n")).is_err());
    assert!(parse_report(&format!("{REPORT_PREFIX}-1\n")).is_err());
    assert!(parse_report(&format!("{REPORT_PREFIX}12 kB\n")).is_err());
    let twice = format!("{}\n{}\n", report_line(1), report_line(2));
    assert!(parse_report(&twice).is_err());
}

/// Tells this test binary, run again as a child by `child_peak_mib`, how many MiB to hold.
const CHILD_MIB_VAR: &str = "KREPLAY_PEAK_RSS_CHILD_MIB";

/// The child's side of `a_child_reports_its_own_peak_not_its_parents`: holds the MiB the
/// variable names, every page written, then prints its own peak as the bench's child does.
#[test]
#[ignore = "the child of a_child_reports_its_own_peak_not_its_parents, which runs it"]
fn peak_rss_child() {
    let mib: usize = std::env::var(CHILD_MIB_VAR)
        .expect("run by a_child_reports_its_own_peak_not_its_parents")
        .parse()
        .expect("MiB");
    let mut held = vec![0u8; mib << 20];
    // calloc'd pages are not resident until written.
    for page in held.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(&held);
    println!("{}", report_line(own_peak_kib().expect("own peak")));
}

/// The peak in MiB that a child of this process holding `mib` MiB reports.
fn child_peak_mib(mib: usize) -> u64 {
    let exe = std::env::current_exe().expect("this test binary");
    let out = std::process::Command::new(exe)
        .args(["--ignored", "--exact", "peak_rss_child", "--nocapture"])
        .env(CHILD_MIB_VAR, mib.to_string())
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_report(&stdout).expect("the child's report") / 1024
}

// Catches: a figure that is the parent's (getrusage(RUSAGE_CHILDREN) in the parent, or
// RUSAGE_SELF in a child spawned sharing the parent's map) or one that misses the child's
// own allocations.
#[test]
fn a_child_reports_its_own_peak_not_its_parents() {
    const PARENT_MIB: usize = 384;
    const CHILD_MIB: usize = 192;
    // The parent grows first, as the in-process benches grow the bench before its children.
    let parent = vec![1u8; PARENT_MIB << 20];
    std::hint::black_box(&parent);
    let idle = child_peak_mib(0);
    let busy = child_peak_mib(CHILD_MIB);
    drop(parent);
    assert!(
        busy >= CHILD_MIB as u64,
        "a child holding {CHILD_MIB} MiB reported {busy} MiB"
    );
    assert!(
        idle < 64,
        "a child holding nothing reported {idle} MiB (the parent holds {PARENT_MIB} MiB)"
    );
}
