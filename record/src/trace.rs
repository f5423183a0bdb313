//! `KREPLAY_DEBUG_PROFILE=1`: a trace of the recorder's steps on stderr (in-place replay, the
//! walk, counter batches), with the time since the process's first step.
//! `KREPLAY_DEBUG_PROFILE=buffered`: the same steps kept in memory (no write and no fault count
//! per step: a system call each cost more than some of the steps it timed) and printed when a
//! capture's stall has ended (`flush`). Each step carries the CPU its thread ran on, and the
//! buffered print says where that changes, with the CPU's NUMA node (the same build's pointer
//! table stalled 3.2 to 6.2 ms on H100 hosts, every host step alike slower: whether a slow run
//! moved between CPUs or ran on another node than its pages is what the CPU tells).

use std::sync::Mutex;
use std::time::Instant;

/// How steps are traced, read once.
enum Mode {
    /// Each step printed as it happens, with the thread's faults.
    Lines(Instant),
    /// Each step kept, printed by `flush`.
    Buffered(Instant),
}

fn mode() -> Option<&'static Mode> {
    static ON: std::sync::OnceLock<Option<Mode>> = std::sync::OnceLock::new();
    ON.get_or_init(|| {
        let v = std::env::var_os("KREPLAY_DEBUG_PROFILE")?;
        let t0 = Instant::now();
        // The chunk kernels' own steps (upload, launch, wait, read-back) join the trace.
        kreplay_cuda::steps::set_hook(trace);
        Some(if v == "buffered" {
            Mode::Buffered(t0)
        } else {
            Mode::Lines(t0)
        })
    })
    .as_ref()
}

/// A step the buffered mode kept: ms since the first step, the thread and the CPU it ran on.
struct Kept {
    at: f64,
    thread: std::thread::ThreadId,
    cpu: i32,
    step: String,
}

/// Steps kept by the buffered mode.
static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// The CPU the calling thread runs on (-1: unknown); through the vDSO, no system call.
fn cpu_now() -> i32 {
    // SAFETY: no argument; returns the CPU or -1.
    unsafe { libc::sched_getcpu() }
}

/// The NUMA node of `cpu`, from sysfs (`/sys/devices/system/cpu/cpuN/nodeM`); `None` when it
/// cannot be told.
fn node_of(cpu: i32) -> Option<u32> {
    let dir = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}")).ok()?;
    dir.flatten()
        .find_map(|e| node_number(&e.file_name().to_string_lossy()))
}

/// `M` of a sysfs entry named `nodeM`.
fn node_number(name: &str) -> Option<u32> {
    name.strip_prefix("node")?.parse().ok()
}

/// What `flush` says before a step whose CPU is not its thread's previous step's (`previous`):
/// `[cpu N, node M] `.
fn cpu_mark(cpu: i32, previous: Option<i32>, mut node: impl FnMut(i32) -> Option<u32>) -> String {
    if previous == Some(cpu) {
        return String::new();
    }
    match node(cpu) {
        Some(n) => format!("[cpu {cpu}, node {n}] "),
        None => format!("[cpu {cpu}] "),
    }
}

/// `KREPLAY_DEBUG_PROFILE=1`: each step of in-place replay on stderr, with the time since the
/// process's first step (a diagnosis aid for a dispatch that does not come back).
pub(crate) fn trace_with(step: impl FnOnce() -> String) {
    match mode() {
        None => {}
        Some(Mode::Lines(t0)) => {
            // With the thread's minor page faults so far: first touches of fresh pages cost
            // about 2 us each on the H200 machine, a large share of a pointer table's stall.
            // And the bytes the recorder's allocator has carved for captures (`retaining_alloc`).
            let carved = crate::retaining_alloc::carved();
            crate::diag!(
                "kreplay: profile: {:>10.3} ms [{:>7} faults, {:>6} KiB carved, cpu {:>3}] {}",
                t0.elapsed().as_secs_f64() * 1e3,
                minor_faults(),
                carved >> 10,
                cpu_now(),
                step()
            );
        }
        Some(Mode::Buffered(t0)) => {
            let at = t0.elapsed().as_secs_f64() * 1e3;
            // The writers' steps interleave with the capture's: told apart, so a gap in a
            // stall is read between the capture's own steps.
            let step = match std::thread::current().name() {
                Some(n @ "kreplay-writer") => format!("[{n}] {}", step()),
                _ => step(),
            };
            let kept = Kept {
                at,
                thread: std::thread::current().id(),
                cpu: cpu_now(),
                step,
            };
            KEPT.lock().unwrap_or_else(|e| e.into_inner()).push(kept);
        }
    }
}

/// Prints the steps the buffered mode kept (call where the application no longer waits).
pub(crate) fn flush() {
    if !matches!(mode(), Some(Mode::Buffered(_))) {
        return;
    }
    let kept = std::mem::take(&mut *KEPT.lock().unwrap_or_else(|e| e.into_inner()));
    let marks = cpu_marks(kept.iter().map(|k| (k.thread, k.cpu)), node_of);
    let mut last = None;
    for (k, mark) in kept.iter().zip(marks) {
        let since = last.map_or(0.0, |l| k.at - l);
        last = Some(k.at);
        crate::diag!(
            "kreplay: profile: {:>10.3} ms (+{since:>7.3}) {mark}{}",
            k.at,
            k.step
        );
    }
}

/// `cpu_mark` of each step, each thread's CPU compared with its own previous step's (the
/// writers' steps are among the capture's); each CPU's `node` asked once.
fn cpu_marks<T: PartialEq + Copy>(
    steps: impl Iterator<Item = (T, i32)>,
    node: impl Fn(i32) -> Option<u32>,
) -> Vec<String> {
    let mut cpus: Vec<(T, i32)> = Vec::new();
    let mut nodes: Vec<(i32, Option<u32>)> = Vec::new();
    steps
        .map(|(thread, cpu)| {
            let previous = match cpus.iter_mut().find(|(t, _)| *t == thread) {
                Some((_, c)) => Some(std::mem::replace(c, cpu)),
                None => {
                    cpus.push((thread, cpu));
                    None
                }
            };
            cpu_mark(cpu, previous, |c| {
                if let Some(&(_, n)) = nodes.iter().find(|(k, _)| *k == c) {
                    return n;
                }
                let n = node(c);
                nodes.push((c, n));
                n
            })
        })
        .collect()
}

/// `trace_with` for a fixed message.
pub(crate) fn trace(step: &str) {
    trace_with(|| step.to_string());
}

/// Minor page faults of the calling thread so far (`KREPLAY_DEBUG_STALL`,
/// `KREPLAY_DEBUG_PROFILE`: a walk that builds megabytes of tables in fresh pages pays a fault
/// a page, dear in a virtual machine).
pub(crate) fn minor_faults() -> u64 {
    // SAFETY: getrusage writes one rusage into a zeroed local.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is the calling thread.
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    if r == 0 {
        u.ru_minflt.max(0) as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: the CPU said on every line (the trace unreadable) or never again after the
    // first (a migration in a stall hidden), or a sysfs entry other than `nodeM` taken for
    // the node.
    #[test]
    fn the_cpu_is_said_where_it_changes_with_its_node() {
        let node = |cpu: i32| (cpu >= 0).then_some(cpu as u32 / 8);
        assert_eq!(cpu_mark(3, None, node), "[cpu 3, node 0] ");
        assert_eq!(cpu_mark(3, Some(3), node), "");
        assert_eq!(cpu_mark(9, Some(3), node), "[cpu 9, node 1] ");
        assert_eq!(cpu_mark(-1, Some(3), node), "[cpu -1] ");
        // Two threads interleaved: each compared with its own steps; a node asked once.
        let asked = std::cell::Cell::new(0);
        let marks = cpu_marks(
            [
                ("capture", 3),
                ("writer", 7),
                ("capture", 3),
                ("writer", 7),
                ("capture", 9),
            ]
            .into_iter(),
            |c| {
                asked.set(asked.get() + 1);
                Some(c as u32 / 8)
            },
        );
        assert_eq!(
            marks,
            [
                "[cpu 3, node 0] ",
                "[cpu 7, node 0] ",
                "",
                "",
                "[cpu 9, node 1] "
            ]
        );
        assert_eq!(asked.get(), 3, "cpus 3, 7 and 9, once each");
        assert_eq!(node_number("node1"), Some(1));
        assert_eq!(node_number("node"), None);
        assert_eq!(node_number("topology"), None);
        assert_eq!(node_number("nodes"), None);
    }
}
