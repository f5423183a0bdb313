//! The recorder's settings, handed over by `kreplay record` / `kreplay list` through the
//! environment (the only channel into an injected library): the names, the parsing, and the
//! naming of outputs, shared by both sides.

use std::path::PathBuf;

use regex::Regex;

pub use crate::boundary::BoundaryRange;
pub use crate::each_kernel::{EachKernel, KeyBy};

/// Environment variable names, shared with the CLI.
pub mod env {
    pub const MODE: &str = "KREPLAY_MODE";
    pub const KERNEL: &str = "KREPLAY_KERNEL";
    pub const NTH: &str = "KREPLAY_NTH";
    pub const COUNT: &str = "KREPLAY_COUNT";
    pub const OUTPUT: &str = "KREPLAY_OUTPUT";
    pub const MEMORY: &str = "KREPLAY_MEMORY";
    pub const REPORT_DIR: &str = "KREPLAY_REPORT_DIR";
    /// `1`: replace existing output files (`kreplay record --force`).
    pub const FORCE: &str = "KREPLAY_FORCE";
    /// Capture the launch with this 1-based index among all launches (`--launch-index`).
    pub const LAUNCH_INDEX: &str = "KREPLAY_LAUNCH_INDEX";
    /// Capture launches I through J (1-based, inclusive, `I:J`) as one range capture
    /// (`--launch-range`).
    pub const LAUNCH_RANGE: &str = "KREPLAY_LAUNCH_RANGE";
    /// Capture the Nth (`KREPLAY_NTH`) instance of this NVTX push/pop range,
    /// `[DOMAIN@]RANGE`, as one range capture (`--nvtx-range`).
    pub const NVTX_RANGE: &str = "KREPLAY_NVTX_RANGE";
    /// `1`: capture the Nth (`KREPLAY_NTH`) `cuProfilerStart`..`cuProfilerStop` pair as one
    /// range capture (`--profiler-range`).
    pub const PROFILER_RANGE: &str = "KREPLAY_PROFILER_RANGE";
    /// `1`: with `KREPLAY_KERNEL`, capture the whole launch of the CUDA graph that holds the
    /// Nth matching execution, every node, as one range capture (`--graph-launch`).
    pub const GRAPH_LAUNCH: &str = "KREPLAY_GRAPH_LAUNCH";
    /// `1`: list mode also reports each NVTX range instance with its launches
    /// (`kreplay list --ranges`).
    pub const LIST_RANGES: &str = "KREPLAY_LIST_RANGES";
    /// `1`: no per-capture summary lines (`kreplay record -q`).
    pub const QUIET: &str = "KREPLAY_QUIET";
    /// Only launches inside this NVTX push/pop range (`--nvtx-include`).
    pub const NVTX_INCLUDE: &str = "KREPLAY_NVTX_INCLUDE";
    /// Profile mode: timed passes per dispatch (`kreplay profile --passes`).
    pub const PASSES: &str = "KREPLAY_PASSES";
    /// Profile mode: `flush` (L2 emptied before each pass) or `keep`.
    pub const CACHE: &str = "KREPLAY_CACHE";
    /// Profile mode: a tool library (`kreplay_tool.h`) deciding the passes (`--tool`).
    pub const TOOL: &str = "KREPLAY_TOOL";
    /// Profile mode: hardware counters per dispatch, comma-separated (`--metrics`).
    pub const METRICS: &str = "KREPLAY_METRICS";
    /// Profile mode: `1`: each profiled dispatch's passes placed on the GPU's time axis, for
    /// the trace `kreplay profile --trace` writes.
    pub const PROFILE_TRACE: &str = "KREPLAY_PROFILE_TRACE";
    /// Profile mode, `--variant` and its options (defined beside their parsing).
    pub use crate::variant::env::{KEEP, TOLERANCE, VARIANT, VARIANT_KERNEL};
    /// `1`: capture the first `KREPLAY_PER_KERNEL` executions of every distinct kernel, a
    /// corpus (`kreplay record --each-kernel`).
    pub const EACH_KERNEL: &str = "KREPLAY_EACH_KERNEL";
    /// Each-kernel mode: executions captured per distinct kernel (`--per-kernel`, default 1).
    pub const PER_KERNEL: &str = "KREPLAY_PER_KERNEL";
    /// Each-kernel mode: `name` (the mangled name) or `shape` (also grid, block and argument
    /// size) tells kernels apart (`--by`).
    pub const EACH_BY: &str = "KREPLAY_EACH_BY";
    /// Each-kernel mode: the corpus's bound in stored bytes (`--max-bytes`).
    pub const MAX_BYTES: &str = "KREPLAY_MAX_BYTES";
}

/// Where, inside the report directory, the recorder notes each `.partial` file it creates, so
/// `kreplay record` can remove what an application that died (signal, `_exit`, `exec`) left.
pub const PARTIALS_DIR: &str = "partials";

/// Where, inside the report directory, the recorder notes its start in a process (a file
/// named by the pid), so that `kreplay record` can tell a recorder that started in an
/// application killed before it reported from one that never started.
pub const STARTED_DIR: &str = "started";

/// Where, inside the report directory, each finished capture's summary is written as soon as
/// the file is complete: the process report is written at exit, which `_exit` and `exec` skip.
pub const CAPTURES_DIR: &str = "captures";

/// What the recorder does in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Count every launch by kernel name (`kreplay list`).
    List,
    /// Capture matching dispatches (`kreplay record`).
    Record,
    /// Replay matching dispatches in place, timed (`kreplay profile`).
    Profile,
}

/// Which memory a capture takes (`--memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum MemoryScope {
    /// Regions reachable from the arguments, transitively, plus module globals.
    Reachable,
    /// Every live allocation as well (tracked through the allocation entry points).
    All,
    /// The reachable regions, holding only the 4 KiB pages the dispatch reads or writes (found
    /// by running it once more, instrumented through the Compute Sanitizer API); the rest of
    /// each region is stored absent.
    Touched,
}

crate::env_word::env_words!(MemoryScope, "KREPLAY_MEMORY", {
    Reachable => "reachable",
    All => "all",
    Touched => "touched",
});

/// Which kernels `-k` selects, in ncu's forms: a plain name is the kernel's function name
/// (the demangled base name: no namespace, template arguments, parameters or return type) or
/// its mangled name, exactly; `regex:RE` searches the demangled and the mangled name.
#[derive(Debug, Clone)]
pub enum KernelFilter {
    Name(String),
    Regex(Regex),
}

impl KernelFilter {
    pub fn parse(text: &str) -> Result<KernelFilter, String> {
        match text.strip_prefix("regex:") {
            Some(re) => Regex::new(re)
                .map(KernelFilter::Regex)
                .map_err(|e| format!("-k {text}: not a valid regular expression: {e}")),
            None if text.is_empty() => Err("-k needs a kernel name".into()),
            None => Ok(KernelFilter::Name(text.to_string())),
        }
    }

    pub fn matches(&self, mangled: &str, demangled: &str) -> bool {
        match self {
            KernelFilter::Name(n) => n == mangled || *n == base_name(demangled),
            KernelFilter::Regex(r) => r.is_match(mangled) || r.is_match(demangled),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub mode: Mode,
    pub kernel: Option<KernelFilter>,
    pub kernel_text: String,
    pub nth: u64,
    pub count: u64,
    pub output: String,
    pub memory: MemoryScope,
    pub report_dir: Option<PathBuf>,
    /// Replace existing output files.
    pub force: bool,
    /// Capture the launch with this 1-based index among all launches of the process.
    pub launch_index: Option<u64>,
    /// Capture these launches of the process as one range capture.
    pub launch_range: Option<LaunchRange>,
    /// Capture what the application issues between two boundaries (an NVTX range's push and
    /// pop, `cuProfilerStart` and `cuProfilerStop`) as one range capture.
    pub boundary_range: Option<BoundaryRange>,
    /// With `kernel`: the match selects a CUDA graph launch, captured whole as one range
    /// capture (a match outside a graph is not captured).
    pub graph_launch: bool,
    /// List mode: report each NVTX range instance with its launches.
    pub list_ranges: bool,
    /// No per-capture summary lines.
    pub quiet: bool,
    /// Only launches inside this NVTX range.
    pub nvtx: Option<crate::nvtx::NvtxFilter>,
    /// Capture the first executions of every distinct kernel (`--each-kernel`).
    pub each_kernel: Option<EachKernel>,
    /// Profile mode: passes per dispatch, L2 emptied before each, a tool library.
    pub passes: u32,
    pub cache_flush: bool,
    pub tool: Option<PathBuf>,
    /// Profile mode: counters collected per dispatch (CUPTI metric names).
    pub metrics: Vec<String>,
    /// Profile mode: a variant kernel run beside the original (`--variant`).
    pub variant: Option<crate::variant::VariantConfig>,
    /// Profile mode: place each dispatch's passes on the GPU's time axis (`--trace`).
    pub trace: bool,
}

/// Passes per dispatch `kreplay profile` runs by default.
pub const DEFAULT_PASSES: u32 = 5;
/// The most passes in-process replay runs for one dispatch (a tool asking for more, or "until
/// stop", is stopped there).
pub const MAX_PASSES: u32 = 1000;

pub const DEFAULT_OUTPUT: &str = "%k-%p-%n.krr";

impl Config {
    /// Reads the settings; `None` when this process was not started by kreplay.
    pub fn from_env() -> Result<Option<Config>, String> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Config>, String> {
        let mode = match get(env::MODE).as_deref() {
            None | Some("") => return Ok(None),
            Some("list") => Mode::List,
            Some("record") => Mode::Record,
            Some("profile") => Mode::Profile,
            Some(other) => {
                return Err(format!(
                    "{}={other}: expected list, record or profile",
                    env::MODE
                ))
            }
        };
        // First: its refusals name the flags the user typed beside --each-kernel.
        let each_kernel = each_kernel_from(&get, &mode)?;
        let kernel_text = get(env::KERNEL).unwrap_or_default();
        let kernel = if kernel_text.is_empty() {
            None
        } else {
            Some(KernelFilter::parse(&kernel_text).map_err(|e| format!("{}: {e}", env::KERNEL))?)
        };
        let launch_index = match get(env::LAUNCH_INDEX).filter(|v| !v.is_empty()) {
            None => None,
            Some(v) => Some(v.parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                format!("{}={v}: expected a whole number >= 1", env::LAUNCH_INDEX)
            })?),
        };
        let graph_launch = graph_launch_from(&get, &mode, kernel.is_some())?;
        let launch_range =
            launch_range_from(&get, &mode, kernel.is_some() || launch_index.is_some())?;
        let num = |k: &str, default: u64| number_from(&get, k, default);
        let boundary_range = boundary_range_from(
            &get,
            &mode,
            num(env::NTH, 1)?,
            Selected {
                kernel: kernel.is_some(),
                launch_index: launch_index.is_some(),
                launch_range: launch_range.is_some(),
            },
        )?;
        let selected = kernel.is_some()
            || launch_index.is_some()
            || launch_range.is_some()
            || boundary_range.is_some()
            || each_kernel.is_some();
        require_selection(&mode, selected)?;
        let memory = match get(env::MEMORY).as_deref() {
            None | Some("") => MemoryScope::Reachable,
            Some(v) => MemoryScope::from_env(v).ok_or_else(|| {
                format!("{}={v}: expected reachable, all or touched", env::MEMORY)
            })?,
        };
        touched_fits(memory, &mode)?;
        let list_ranges = mode == Mode::List && get(env::LIST_RANGES).as_deref() == Some("1");
        let variant = variant_from(&get, &mode)?;
        Ok(Some(Config {
            mode,
            kernel,
            kernel_text,
            nth: num(env::NTH, 1)?,
            count: num(env::COUNT, 1)?,
            output: get(env::OUTPUT)
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| DEFAULT_OUTPUT.to_string()),
            memory,
            report_dir: get(env::REPORT_DIR)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            force: get(env::FORCE).as_deref() == Some("1"),
            launch_index,
            launch_range,
            boundary_range,
            graph_launch,
            each_kernel,
            list_ranges,
            quiet: get(env::QUIET).as_deref() == Some("1"),
            nvtx: match get(env::NVTX_INCLUDE).filter(|v| !v.is_empty()) {
                Some(v) => Some(crate::nvtx::NvtxFilter::parse(&v)?),
                None => None,
            },
            passes: num(env::PASSES, DEFAULT_PASSES as u64)?.min(MAX_PASSES as u64) as u32,
            cache_flush: match get(env::CACHE).as_deref() {
                None | Some("") | Some("flush") => true,
                Some("keep") => false,
                Some(v) => return Err(format!("{}={v}: expected flush or keep", env::CACHE)),
            },
            tool: get(env::TOOL).filter(|s| !s.is_empty()).map(PathBuf::from),
            metrics: get(env::METRICS)
                .map(|v| split_metrics(&v))
                .unwrap_or_default(),
            variant,
            trace: get(env::PROFILE_TRACE).as_deref() == Some("1"),
        }))
    }
}

/// `--variant` and its options, for profile mode only, and never beside a tool or counters
/// (the variant's passes are its own: `kreplay profile` refuses `--variant` with `--tool` or
/// `--metrics` too).
fn variant_from(
    get: &impl Fn(&str) -> Option<String>,
    mode: &Mode,
) -> Result<Option<crate::variant::VariantConfig>, String> {
    let variant = crate::variant::VariantConfig::from_lookup(get)?;
    if variant.is_some() && *mode != Mode::Profile {
        return Err(format!("{} is for profile mode only", env::VARIANT));
    }
    if variant.is_some() {
        for other in [env::TOOL, env::METRICS] {
            if get(other).is_some_and(|v| !v.is_empty()) {
                return Err(format!(
                    "{} cannot be combined with {other}: the variant's passes are its own",
                    env::VARIANT
                ));
            }
        }
    }
    Ok(variant)
}

/// Record and profile modes need something that selects launches.
/// `--memory touched` in record mode runs the recorder on the Compute Sanitizer API instead of
/// CUPTI (the two cannot share a process); in profile mode it only makes the restores between
/// passes page by page (the GPU's compare finds the pages; profile stays on CUPTI). List mode
/// captures nothing, so it is refused before the application starts.
fn touched_fits(memory: MemoryScope, mode: &Mode) -> Result<(), String> {
    if memory == MemoryScope::Touched && *mode == Mode::List {
        return Err(
            "--memory touched is a `record` and `profile` option (list captures no memory)".into(),
        );
    }
    Ok(())
}

fn require_selection(mode: &Mode, selected: bool) -> Result<(), String> {
    if *mode == Mode::List || selected {
        return Ok(());
    }
    Err(format!(
        "{}, {}, {}, {}, {} or {} is required in record and profile modes",
        env::KERNEL,
        env::EACH_KERNEL,
        env::LAUNCH_INDEX,
        env::LAUNCH_RANGE,
        env::NVTX_RANGE,
        env::PROFILER_RANGE
    ))
}

/// Launches `first..=last` of the process (the 1-based indices `kreplay list` shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchRange {
    pub first: u64,
    pub last: u64,
}

impl LaunchRange {
    /// Parses `I:J` with `1 <= I <= J`.
    pub fn parse(text: &str) -> Result<LaunchRange, String> {
        let bad = || format!("{text}: expected I:J, two launch indices with 1 <= I <= J");
        let (i, j) = text.split_once(':').ok_or_else(bad)?;
        let first: u64 = i.trim().parse().map_err(|_| bad())?;
        let last: u64 = j.trim().parse().map_err(|_| bad())?;
        if first == 0 || last < first {
            return Err(bad());
        }
        Ok(LaunchRange { first, last })
    }

    /// The value `parse` reads back.
    pub fn env_value(self) -> String {
        format!("{}:{}", self.first, self.last)
    }

    pub fn contains(self, launch_index: u64) -> bool {
        (self.first..=self.last).contains(&launch_index)
    }
}

/// The launch range of record mode, refused next to another launch selection (a range is
/// one capture of its own) and in the other modes.
fn launch_range_from(
    get: &impl Fn(&str) -> Option<String>,
    mode: &Mode,
    other_selection: bool,
) -> Result<Option<LaunchRange>, String> {
    let Some(v) = get(env::LAUNCH_RANGE).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let range = LaunchRange::parse(&v).map_err(|e| format!("{}={e}", env::LAUNCH_RANGE))?;
    if *mode != Mode::Record {
        return Err(format!("{} is for record mode only", env::LAUNCH_RANGE));
    }
    if other_selection {
        return Err(format!(
            "{} cannot be combined with {} or {}",
            env::LAUNCH_RANGE,
            env::KERNEL,
            env::LAUNCH_INDEX
        ));
    }
    Ok(Some(range))
}

/// `KREPLAY_GRAPH_LAUNCH` of record mode: it needs a kernel filter (the match names the graph
/// launch) and is refused beside the other selections of launches and ranges (the graph launch
/// is the process's one range capture, and `--launch-index` would select a single launch).
fn graph_launch_from(
    get: &impl Fn(&str) -> Option<String>,
    mode: &Mode,
    kernel: bool,
) -> Result<bool, String> {
    match get(env::GRAPH_LAUNCH).as_deref() {
        None | Some("") | Some("0") => return Ok(false),
        Some("1") => {}
        Some(v) => return Err(format!("{}={v}: expected 0 or 1", env::GRAPH_LAUNCH)),
    }
    if *mode != Mode::Record {
        return Err(format!("{} is for record mode only", env::GRAPH_LAUNCH));
    }
    if !kernel {
        return Err(format!(
            "{} needs {}: the Nth matching execution names the graph launch",
            env::GRAPH_LAUNCH,
            env::KERNEL
        ));
    }
    let set = |k: &str| get(k).is_some_and(|v| !v.is_empty() && v != "0");
    let clash = [
        env::LAUNCH_INDEX,
        env::LAUNCH_RANGE,
        env::NVTX_RANGE,
        env::PROFILER_RANGE,
    ];
    if let Some(other) = clash.iter().find(|k| set(k)) {
        return Err(format!(
            "{} cannot be combined with {other}: a process records one range",
            env::GRAPH_LAUNCH
        ));
    }
    Ok(true)
}

/// A whole number >= 1 from variable `k`, `default` when it is not set.
fn number_from(
    get: &impl Fn(&str) -> Option<String>,
    k: &str,
    default: u64,
) -> Result<u64, String> {
    // Empty is unset, as the CLI passes a number it does not set (`--each-kernel`: no --nth).
    match get(k).filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("{k}={v}: expected a whole number >= 1")),
    }
}

/// The other selections set beside a boundary range.
struct Selected {
    kernel: bool,
    launch_index: bool,
    launch_range: bool,
}

/// The boundary range of record mode (`KREPLAY_NVTX_RANGE` or `KREPLAY_PROFILER_RANGE`, the
/// instance from `KREPLAY_NTH`): refused in the other modes, next to the other one, and next
/// to another selection of launches (the range takes every launch between its boundaries,
/// and is the process's one capture).
fn boundary_range_from(
    get: &impl Fn(&str) -> Option<String>,
    mode: &Mode,
    nth: u64,
    others: Selected,
) -> Result<Option<BoundaryRange>, String> {
    let nvtx = get(env::NVTX_RANGE).filter(|v| !v.is_empty());
    let profiler = match get(env::PROFILER_RANGE).as_deref() {
        None | Some("") | Some("0") => false,
        Some("1") => true,
        Some(v) => return Err(format!("{}={v}: expected 0 or 1", env::PROFILER_RANGE)),
    };
    let (name, range) = match (nvtx, profiler) {
        (None, false) => return Ok(None),
        (Some(_), true) => {
            return Err(format!(
                "{} and {} cannot be combined: a process records one range",
                env::NVTX_RANGE,
                env::PROFILER_RANGE
            ))
        }
        (Some(text), false) => (
            env::NVTX_RANGE,
            BoundaryRange::nvtx(env::NVTX_RANGE, &text, nth)?,
        ),
        (None, true) => (env::PROFILER_RANGE, BoundaryRange::Profiler { nth }),
    };
    if *mode != Mode::Record {
        return Err(format!("{name} is for record mode only"));
    }
    let clash = [
        (others.kernel, env::KERNEL),
        (others.launch_index, env::LAUNCH_INDEX),
        (others.launch_range, env::LAUNCH_RANGE),
        (
            get(env::NVTX_INCLUDE).is_some_and(|v| !v.is_empty()),
            env::NVTX_INCLUDE,
        ),
    ];
    if let Some((_, other)) = clash.iter().find(|(set, _)| *set) {
        return Err(format!(
            "{name} cannot be combined with {other}: a range capture takes every launch between its boundaries"
        ));
    }
    Ok(Some(range))
}

/// The variables that select launches some other way, refused beside each-kernel mode (it
/// chooses its own executions, and writes single-dispatch captures only), with the flag each
/// comes from.
const EACH_KERNEL_CLASHES: [(&str, &str); 7] = [
    (env::LAUNCH_INDEX, "--launch-index"),
    (env::LAUNCH_RANGE, "--launch-range"),
    (env::NVTX_RANGE, "--nvtx-range"),
    (env::PROFILER_RANGE, "--profiler-range"),
    (env::GRAPH_LAUNCH, "--graph-launch"),
    (env::COUNT, "--count"),
    (env::NTH, "--nth"),
];

/// Each-kernel mode from the environment: `None` when `KREPLAY_EACH_KERNEL` is unset, empty or
/// `0`. Record mode only; combines with `KREPLAY_KERNEL` and `KREPLAY_NVTX_INCLUDE` (they
/// narrow which kernels count), refused beside the other selections.
fn each_kernel_from(
    get: &impl Fn(&str) -> Option<String>,
    mode: &Mode,
) -> Result<Option<EachKernel>, String> {
    match get(env::EACH_KERNEL).as_deref() {
        None | Some("") | Some("0") => return Ok(None),
        Some("1") => {}
        Some(v) => return Err(format!("{}={v}: expected 0 or 1", env::EACH_KERNEL)),
    }
    if *mode != Mode::Record {
        return Err(format!("{} is for record mode only", env::EACH_KERNEL));
    }
    // Unset, empty and "0" are how the CLI passes a flag it was not given.
    let set = |k: &str| get(k).is_some_and(|v| !v.is_empty() && v != "0");
    if let Some((var, flag)) = EACH_KERNEL_CLASHES.iter().find(|(k, _)| set(k)) {
        return Err(format!(
            "{} (--each-kernel) cannot be combined with {var} ({flag}): each-kernel mode captures the first --per-kernel executions of every kernel, one file each",
            env::EACH_KERNEL
        ));
    }
    let per_kernel = number_from(get, env::PER_KERNEL, 1)?;
    let by = match get(env::EACH_BY).filter(|v| !v.is_empty()) {
        None => KeyBy::Name,
        Some(v) => KeyBy::from_env(&v)
            .ok_or_else(|| format!("{}={v}: expected name or shape", env::EACH_BY))?,
    };
    let max_bytes = match get(env::MAX_BYTES).filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => Some(
            v.parse::<u64>()
                .map_err(|_| format!("{}={v}: expected a number of bytes", env::MAX_BYTES))?,
        ),
    };
    Ok(Some(EachKernel {
        per_kernel,
        by,
        max_bytes,
    }))
}

/// Metric names from a comma-separated list (blanks around names and empty entries dropped).
pub fn split_metrics(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .collect()
}

/// This machine's name, for `%h` in output names.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// The rank of this process in an MPI / torchrun job, if any.
pub fn rank_from(get: impl Fn(&str) -> Option<String>) -> Option<u32> {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"]
        .iter()
        .find_map(|k| get(k).and_then(|v| v.trim().parse().ok()))
}

/// Expands `%p`, `%r`, `%h`, `%n`, `%k` and `%%` in an output pattern.
pub fn expand_output(
    pattern: &str,
    pid: u32,
    rank: Option<u32>,
    host: &str,
    index: u64,
    kernel: &str,
) -> String {
    crate::placeholders::expand(pattern, |x| match x {
        'p' => Some(pid.to_string()),
        'r' => Some(rank.map_or_else(|| "0".to_string(), |r| r.to_string())),
        'h' => Some(host.to_string()),
        'n' => Some(index.to_string()),
        'k' => Some(kernel.to_string()),
        '%' => Some("%".to_string()),
        _ => None,
    })
}

/// The placeholders `kreplay record -o` expands, with what each stands for.
pub const RECORD_PLACEHOLDERS: &[(char, &str)] = &[
    ('p', "pid"),
    ('r', "MPI/torchrun rank"),
    ('h', "host"),
    ('n', "match index"),
    ('k', "short kernel name"),
    ('%', "a percent sign"),
];

/// The placeholders `kreplay profile -o` expands (one report per process: no match index and
/// no kernel name).
pub const REPORT_PLACEHOLDERS: &[(char, &str)] = &[
    ('p', "pid"),
    ('r', "MPI/torchrun rank"),
    ('h', "host"),
    ('%', "a percent sign"),
];

/// Checks an output pattern before anything runs: every `%` starts a placeholder of `known`
/// (`%%` for a percent sign), and the pattern names a file, not a directory. The message says
/// what is wrong and what to write instead.
pub fn check_pattern(pattern: &str, known: &[(char, &str)]) -> Result<(), String> {
    let list = || {
        known
            .iter()
            .map(|(c, what)| format!("%{c} {what}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if pattern.is_empty() {
        return Err("-o needs a file name".into());
    }
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        match chars.next() {
            Some(x) if known.iter().any(|(k, _)| *k == x) => {}
            Some(x) => {
                return Err(format!(
                    "-o {pattern}: unknown placeholder %{x} (known: {})",
                    list()
                ))
            }
            None => {
                return Err(format!(
                    "-o {pattern}: ends with a lone %: write %% for a percent sign (known: {})",
                    list()
                ))
            }
        }
    }
    if pattern.ends_with('/') || matches!(pattern.rsplit('/').next(), Some(".") | Some("..")) {
        return Err(format!(
            "-o {pattern}: names a directory, not a file (e.g. {}%k-%p-%n.krr)",
            pattern.trim_end_matches('/').to_string() + "/"
        ));
    }
    Ok(())
}

/// Whether `pattern` uses placeholder `%c` (not counting `%%`).
pub fn uses_placeholder(pattern: &str, c: char) -> bool {
    let mut chars = pattern.chars();
    while let Some(x) = chars.next() {
        if x == '%' && chars.next() == Some(c) {
            return true;
        }
    }
    false
}

/// Checks `kreplay record -o PATTERN` for `--count count`: its placeholders, and that the
/// `count` captures of one process get names of their own (`%n`).
pub fn check_record_output(pattern: &str, count: u64) -> Result<(), String> {
    check_pattern(pattern, RECORD_PLACEHOLDERS)?;
    if count > 1 && !uses_placeholder(pattern, 'n') {
        let suggestion = match pattern.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() && !ext.contains('/') => {
                format!("{stem}-%n.{ext}")
            }
            _ => format!("{pattern}-%n"),
        };
        return Err(format!(
            "--count {count} writes {count} captures, but -o {pattern} has no %n (the match index): they would all get the same name; use e.g. -o {suggestion}"
        ));
    }
    Ok(())
}

/// The leading directories of an output pattern that hold no placeholder (`out/%h/x.krr` →
/// `out`), which must exist or be creatable before the application runs; `None` when the
/// pattern names a file in the current directory or its first directory already holds a
/// placeholder.
pub fn fixed_directory(pattern: &str) -> Option<PathBuf> {
    let (dir, _) = pattern.rsplit_once('/')?;
    let mut out = PathBuf::new();
    if dir.is_empty() {
        return Some(PathBuf::from("/"));
    }
    if pattern.starts_with('/') {
        out.push("/");
    }
    for part in dir.split('/').filter(|p| !p.is_empty()) {
        if part.contains('%') {
            break;
        }
        out.push(part);
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// The demangled form of a (possibly) mangled kernel name; the name itself when it does not
/// demangle (extern "C" kernels, Triton, XLA).
pub fn demangle(name: &str) -> String {
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle(&Default::default()).ok())
        .unwrap_or_else(|| name.to_string())
}

/// The function name of a demangled kernel name: no return type, namespace, template
/// arguments or parameters (`void ns::gemm<float, 128>(int, float*)` → `gemm`), as ncu's
/// `-k` matches it. Brackets are tracked, so template arguments holding parentheses
/// (`f<(unsigned int)512>(...)`) or lambdas do not confuse it.
pub fn base_name(demangled: &str) -> String {
    // The prefix before the top-level parameter list, with template arguments removed.
    let mut angle = 0i32;
    let mut paren = 0i32;
    let mut prefix = String::new();
    for ch in demangled.chars() {
        match ch {
            '<' if paren == 0 => angle += 1,
            '>' if paren == 0 && angle > 0 => angle -= 1,
            '(' if angle == 0 && paren == 0 && !prefix.trim().is_empty() => break,
            '(' => paren += 1,
            ')' => paren -= 1,
            _ if angle == 0 && paren == 0 => prefix.push(ch),
            _ => {}
        }
    }
    let prefix = prefix.trim();
    let last = prefix.rsplit("::").next().unwrap_or(prefix);
    last.rsplit(' ').next().unwrap_or(last).to_string()
}

/// A short, file-name-safe kernel name: the base name, with anything but letters, digits and
/// `_` replaced (`void ns::saxpy<float>(int, float*)` → `saxpy`).
pub fn short_kernel_name(demangled: &str) -> String {
    let cleaned: String = base_name(demangled)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "kernel".into()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn output_pattern_expands() {
        assert_eq!(
            expand_output("%k-%p-%n.krr", 42, None, "h", 3, "saxpy"),
            "saxpy-42-3.krr"
        );
        assert_eq!(
            expand_output("out/%h/r%r_%%_%x%", 1, Some(7), "node1", 1, "k"),
            "out/node1/r7_%_%x%"
        );
    }

    #[test]
    fn output_patterns_are_checked_before_anything_runs() {
        assert_eq!(check_record_output(DEFAULT_OUTPUT, 8), Ok(()));
        assert_eq!(check_record_output("out/%h/r%r_%%.krr", 1), Ok(()));
        let e = check_record_output("x-%x.krr", 1).unwrap_err();
        assert!(e.contains("unknown placeholder %x"), "{e}");
        assert!(e.contains("%n match index"), "{e}");
        let e = check_record_output("x%", 1).unwrap_err();
        assert!(e.contains("lone %"), "{e}");
        let e = check_record_output("capture.krr", 2).unwrap_err();
        assert!(e.contains("no %n"), "{e}");
        assert!(e.contains("-o capture-%n.krr"), "{e}");
        // %%n is a percent sign and an n, not the match index.
        assert!(check_record_output("x%%n.krr", 2).is_err());
        assert_eq!(check_record_output("x%%n.krr", 1), Ok(()));
        assert!(check_record_output("out/", 1).is_err());
        assert!(check_record_output("out/..", 1).is_err());
        assert!(check_record_output("", 1).is_err());
        // A report names no match and no kernel.
        assert!(check_pattern("prof-%r.json", REPORT_PLACEHOLDERS).is_ok());
        assert!(check_pattern("prof-%n.json", REPORT_PLACEHOLDERS).is_err());
    }

    #[test]
    fn the_fixed_directory_of_a_pattern() {
        assert_eq!(fixed_directory("x.krr"), None);
        assert_eq!(fixed_directory("out/x.krr"), Some(PathBuf::from("out")));
        assert_eq!(
            fixed_directory("a/b/%h/c/x.krr"),
            Some(PathBuf::from("a/b"))
        );
        assert_eq!(fixed_directory("%h/x.krr"), None);
        assert_eq!(fixed_directory("/x.krr"), Some(PathBuf::from("/")));
        assert_eq!(fixed_directory("/tmp/%r/x"), Some(PathBuf::from("/tmp")));
    }

    #[test]
    fn short_names() {
        assert_eq!(
            short_kernel_name("saxpy(int, float, float const*, float*)"),
            "saxpy"
        );
        assert_eq!(
            short_kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"),
            "vectorized_elementwise_kernel"
        );
        assert_eq!(
            short_kernel_name("triton_poi_fused_add_0"),
            "triton_poi_fused_add_0"
        );
        assert_eq!(short_kernel_name(""), "kernel");
    }

    #[test]
    fn base_names_as_ncu_matches_them() {
        assert_eq!(
            base_name("saxpy(int, float, float const*, float*)"),
            "saxpy"
        );
        assert_eq!(base_name("void regular_fft_factor<(unsigned int)512, EPT<(unsigned int)8>, float>(kernel_arguments_t<unsigned int>)"), "regular_fft_factor");
        assert_eq!(base_name("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>(cutlass_80_simt_sgemm_128x64_8x5_nn_align1::Params)"), "Kernel2");
        assert_eq!(base_name("fused_axpy_relu"), "fused_axpy_relu");
        assert_eq!(base_name("gather_sum(Batch)"), "gather_sum");
    }

    #[test]
    fn kernel_filters_in_ncu_forms() {
        let exact = KernelFilter::parse("saxpy").unwrap();
        assert!(exact.matches("_Z5saxpyifPKfPf", "saxpy(int, float, float const*, float*)"));
        assert!(!exact.matches("_Z7saxpy2v", "saxpy2()"));
        assert!(!exact.matches("_Z3fooPf", "foo(float*)"));
        // The mangled name, exactly.
        assert!(KernelFilter::parse("_Z5saxpyifPKfPf")
            .unwrap()
            .matches("_Z5saxpyifPKfPf", "saxpy(int, float, float const*, float*)"));
        // regex: searches both names (the behaviour before the ncu forms).
        let re = KernelFilter::parse("regex:sax.y").unwrap();
        assert!(re.matches("_Z7saxpy2v", "saxpy2()"));
        assert!(KernelFilter::parse("regex:(").is_err());
        assert!(KernelFilter::parse("").is_err());
    }

    #[test]
    fn memory_and_each_kernel_settings_travel_as_their_words() {
        for (m, word) in [
            (MemoryScope::Reachable, "reachable"),
            (MemoryScope::All, "all"),
            (MemoryScope::Touched, "touched"),
        ] {
            assert_eq!(m.env_value(), word);
            assert_eq!(MemoryScope::from_env(word), Some(m));
        }
        for (k, word) in [(KeyBy::Name, "name"), (KeyBy::Shape, "shape")] {
            assert_eq!(k.env_value(), word);
            assert_eq!(KeyBy::from_env(word), Some(k));
        }
        assert_eq!(MemoryScope::from_env("pages"), None);
        assert_eq!(KeyBy::from_env("size"), None);
    }

    #[test]
    fn config_from_env() {
        let mut m = HashMap::new();
        assert!(Config::from_lookup(|k| m.get(k).cloned())
            .unwrap()
            .is_none());
        m.insert(env::MODE.to_string(), "record".to_string());
        assert!(Config::from_lookup(|k| m.get(k).cloned()).is_err());
        m.insert(env::KERNEL.to_string(), "regex:sax.y".to_string());
        m.insert(env::NTH.to_string(), "3".to_string());
        let c = Config::from_lookup(|k| m.get(k).cloned()).unwrap().unwrap();
        assert_eq!(c.nth, 3);
        assert_eq!(c.count, 1);
        assert_eq!(c.output, DEFAULT_OUTPUT);
        m.insert(env::NTH.to_string(), "0".to_string());
        assert!(Config::from_lookup(|k| m.get(k).cloned()).is_err());
    }

    // Catches: --memory touched let into list (it captures nothing), refused for profile
    // (whose restores it makes page by page) or for a range capture, which it holds by the
    // union of its steps' pages.
    #[test]
    fn touched_is_a_record_and_profile_option_for_dispatches_and_ranges() {
        let with = |pairs: &[(&str, &str)]| {
            let m: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Config::from_lookup(|k| m.get(k).cloned())
        };
        let c = with(&[
            (env::MODE, "record"),
            (env::MEMORY, "touched"),
            (env::LAUNCH_RANGE, "2:4"),
        ])
        .expect("a touched range")
        .expect("a config");
        assert_eq!(c.memory, MemoryScope::Touched);
        assert!(c.launch_range.is_some());
        let p = with(&[
            (env::MODE, "profile"),
            (env::MEMORY, "touched"),
            (env::KERNEL, "k"),
        ])
        .expect("profile restores by pages")
        .expect("a config");
        assert_eq!(p.memory, MemoryScope::Touched);
        let e = with(&[
            (env::MODE, "list"),
            (env::MEMORY, "touched"),
            (env::KERNEL, "k"),
        ])
        .expect_err("refused");
        assert!(e.contains("list captures no memory"), "{e}");
    }

    #[test]
    fn launch_ranges_parse_and_contain_their_ends() {
        let r = LaunchRange::parse("3:5").unwrap();
        assert_eq!(r, LaunchRange { first: 3, last: 5 });
        assert!(r.contains(3) && r.contains(5) && !r.contains(2) && !r.contains(6));
        assert_eq!(LaunchRange::parse(&r.env_value()), Ok(r));
        assert_eq!(LaunchRange::parse("4:4").unwrap().last, 4);
        for bad in ["", "3", "0:2", "5:3", "a:b", "1:", ":2", "-1:2"] {
            assert!(LaunchRange::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn launch_range_config_is_record_only_and_alone() {
        let mut m = HashMap::new();
        m.insert(env::MODE.to_string(), "record".to_string());
        m.insert(env::LAUNCH_RANGE.to_string(), "2:4".to_string());
        let c = Config::from_lookup(|k| m.get(k).cloned()).unwrap().unwrap();
        assert_eq!(c.launch_range, Some(LaunchRange { first: 2, last: 4 }));
        assert!(c.kernel.is_none() && c.launch_index.is_none());
        m.insert(env::LAUNCH_INDEX.to_string(), "3".to_string());
        let err = Config::from_lookup(|k| m.get(k).cloned()).unwrap_err();
        assert!(err.contains("cannot be combined"), "{err}");
        m.remove(env::LAUNCH_INDEX);
        m.insert(env::MODE.to_string(), "profile".to_string());
        assert!(Config::from_lookup(|k| m.get(k).cloned()).is_err());
        m.insert(env::MODE.to_string(), "record".to_string());
        m.insert(env::LAUNCH_RANGE.to_string(), "4:2".to_string());
        let err = Config::from_lookup(|k| m.get(k).cloned()).unwrap_err();
        assert!(err.contains(env::LAUNCH_RANGE), "{err}");
    }

    #[test]
    fn graph_launch_needs_a_kernel_in_record_mode_and_no_other_range() {
        let with = |extra: &[(&str, &str)]| {
            let mut m: HashMap<String, String> = [
                (env::MODE.to_string(), "record".to_string()),
                (env::GRAPH_LAUNCH.to_string(), "1".to_string()),
            ]
            .into();
            for (k, v) in extra {
                m.insert(k.to_string(), v.to_string());
            }
            Config::from_lookup(|k| m.get(k).cloned())
        };
        let c = with(&[(env::KERNEL, "regex:flash")]).unwrap().unwrap();
        assert!(c.graph_launch && c.kernel.is_some());
        let err = with(&[]).unwrap_err();
        assert!(err.contains("needs KREPLAY_KERNEL"), "{err}");
        for (other, value) in [
            (env::LAUNCH_INDEX, "3"),
            (env::LAUNCH_RANGE, "1:2"),
            (env::NVTX_RANGE, "layer"),
            (env::PROFILER_RANGE, "1"),
        ] {
            let err = with(&[(env::KERNEL, "k"), (other, value)]).unwrap_err();
            assert!(
                err.starts_with(env::GRAPH_LAUNCH) && err.contains(other),
                "{err}"
            );
        }
        let err = with(&[(env::KERNEL, "k"), (env::MODE, "profile")]).unwrap_err();
        assert!(err.contains("record mode only"), "{err}");
        let err = with(&[(env::KERNEL, "k"), (env::GRAPH_LAUNCH, "yes")]).unwrap_err();
        assert!(err.contains("expected 0 or 1"), "{err}");
        let c = with(&[(env::KERNEL, "k"), (env::GRAPH_LAUNCH, "0")])
            .unwrap()
            .unwrap();
        assert!(!c.graph_launch);
    }

    fn lookup(m: &HashMap<String, String>) -> Result<Option<Config>, String> {
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn a_variant_is_for_profile_mode_only() {
        let mut m = HashMap::new();
        m.insert(env::MODE.to_string(), "profile".to_string());
        m.insert(env::KERNEL.to_string(), "k".to_string());
        m.insert(env::VARIANT.to_string(), "/v.cubin".to_string());
        let c = lookup(&m).expect("profile with a variant").expect("config");
        assert_eq!(
            c.variant.map(|v| v.path),
            Some(std::path::PathBuf::from("/v.cubin"))
        );
        m.insert(env::MODE.to_string(), "record".to_string());
        let e = lookup(&m).expect_err("record with a variant");
        assert!(e.contains("profile mode only"), "{e}");
        m.remove(env::VARIANT);
        assert!(lookup(&m)
            .expect("record")
            .expect("config")
            .variant
            .is_none());
    }

    // Catches: a recorder started by hand (or an older CLI) running a variant beside a tool
    // or counter passes, whose passes it does not take into account; empty values (what the
    // CLI sets when a flag is not given) refused as if set.
    #[test]
    fn a_variant_is_refused_beside_a_tool_or_counters() {
        let mut m = HashMap::new();
        m.insert(env::MODE.to_string(), "profile".to_string());
        m.insert(env::KERNEL.to_string(), "k".to_string());
        m.insert(env::VARIANT.to_string(), "/v.cubin".to_string());
        m.insert(env::TOOL.to_string(), String::new());
        m.insert(env::METRICS.to_string(), String::new());
        assert!(lookup(&m).expect("empty values are unset").is_some());
        for (k, v) in [(env::TOOL, "/t.so"), (env::METRICS, "dram__bytes_read.sum")] {
            let mut with = m.clone();
            with.insert(k.to_string(), v.to_string());
            let e = lookup(&with).expect_err("a variant beside it");
            assert!(
                e.contains("cannot be combined with") && e.contains(k),
                "{e}"
            );
        }
    }

    #[test]
    fn boundary_ranges_from_env_take_their_instance_from_nth() {
        let mut m = HashMap::new();
        m.insert(env::MODE.to_string(), "record".to_string());
        m.insert(env::NVTX_RANGE.to_string(), "mydomain@layer.2".to_string());
        let c = lookup(&m).unwrap().unwrap();
        assert_eq!(
            c.boundary_range,
            Some(BoundaryRange::Nvtx {
                domain: Some("mydomain".into()),
                name: "layer.2".into(),
                nth: 1
            })
        );
        assert!(c.kernel.is_none() && c.launch_range.is_none() && c.launch_index.is_none());
        m.insert(env::NTH.to_string(), "3".to_string());
        assert_eq!(
            lookup(&m).unwrap().unwrap().boundary_range.unwrap().nth(),
            3
        );
        m.remove(env::NVTX_RANGE);
        m.insert(env::PROFILER_RANGE.to_string(), "1".to_string());
        let c = lookup(&m).unwrap().unwrap();
        assert_eq!(c.boundary_range, Some(BoundaryRange::Profiler { nth: 3 }));
        // Unset, empty or 0: no range (and then a selection is missing).
        m.insert(env::PROFILER_RANGE.to_string(), "0".to_string());
        let err = lookup(&m).unwrap_err();
        assert!(err.contains(env::PROFILER_RANGE), "{err}");
        m.insert(env::PROFILER_RANGE.to_string(), "yes".to_string());
        let err = lookup(&m).unwrap_err();
        assert!(err.contains("expected 0 or 1"), "{err}");
        m.insert(env::NVTX_RANGE.to_string(), "a//b".to_string());
        m.remove(env::PROFILER_RANGE);
        let err = lookup(&m).unwrap_err();
        assert!(err.starts_with(env::NVTX_RANGE), "{err}");
    }

    #[test]
    fn a_boundary_range_is_record_only_and_alone() {
        let base = |extra: &[(&str, &str)]| {
            let mut m: HashMap<String, String> = [
                (env::MODE.to_string(), "record".to_string()),
                (env::NVTX_RANGE.to_string(), "layer".to_string()),
            ]
            .into();
            for (k, v) in extra {
                m.insert(k.to_string(), v.to_string());
            }
            lookup(&m)
        };
        for (k, v) in [
            (env::KERNEL, "saxpy"),
            (env::LAUNCH_INDEX, "3"),
            (env::LAUNCH_RANGE, "1:2"),
            (env::NVTX_INCLUDE, "model"),
            (env::PROFILER_RANGE, "1"),
        ] {
            let err = base(&[(k, v)]).unwrap_err();
            assert!(err.contains("cannot be combined"), "{k}: {err}");
            assert!(err.contains(k), "{k}: {err}");
        }
        // Empty values are unset, as the CLI passes them.
        let c = base(&[
            (env::KERNEL, ""),
            (env::NVTX_INCLUDE, ""),
            (env::PROFILER_RANGE, ""),
        ]);
        assert!(c.unwrap().unwrap().boundary_range.is_some());
        for mode in ["list", "profile"] {
            let err = base(&[(env::MODE, mode)]).unwrap_err();
            assert!(err.contains("record mode only"), "{mode}: {err}");
        }
    }

    #[test]
    fn list_mode_reports_ranges_only_when_asked() {
        let mut m = HashMap::new();
        m.insert(env::MODE.to_string(), "list".to_string());
        assert!(!lookup(&m).unwrap().unwrap().list_ranges);
        m.insert(env::LIST_RANGES.to_string(), "1".to_string());
        assert!(lookup(&m).unwrap().unwrap().list_ranges);
        m.insert(env::MODE.to_string(), "record".to_string());
        m.insert(env::KERNEL.to_string(), "k".to_string());
        assert!(!lookup(&m).unwrap().unwrap().list_ranges);
    }

    fn each(vars: &[(&str, &str)]) -> Result<Option<EachKernel>, String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        each_kernel_from(&|k: &str| m.get(k).cloned(), &Mode::Record)
    }

    #[test]
    fn defaults_one_per_kernel_by_name_unbounded() {
        assert_eq!(each(&[]), Ok(None));
        assert_eq!(each(&[(env::EACH_KERNEL, "0")]), Ok(None));
        assert_eq!(
            each(&[(env::EACH_KERNEL, "1")]),
            Ok(Some(EachKernel {
                per_kernel: 1,
                by: KeyBy::Name,
                max_bytes: None
            }))
        );
        let e = each(&[
            (env::EACH_KERNEL, "1"),
            (env::PER_KERNEL, "3"),
            (env::EACH_BY, "shape"),
            (env::MAX_BYTES, "1000"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (e.per_kernel, e.by, e.max_bytes),
            (3, KeyBy::Shape, Some(1000))
        );
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (k, v) in [
            (env::EACH_KERNEL, "yes"),
            (env::PER_KERNEL, "0"),
            (env::PER_KERNEL, "x"),
            (env::EACH_BY, "size"),
            (env::MAX_BYTES, "2G"),
        ] {
            let mut vars = vec![(env::EACH_KERNEL, "1")];
            vars.push((k, v));
            let err = each(&vars).unwrap_err();
            assert!(err.starts_with(k), "{k}={v}: {err}");
        }
    }

    #[test]
    fn refused_beside_the_other_selections_and_outside_record_mode() {
        for (var, flag) in EACH_KERNEL_CLASHES {
            let err = each(&[(env::EACH_KERNEL, "1"), (var, "2:3")]).unwrap_err();
            assert!(err.contains(var) && err.contains(flag), "{err}");
            assert!(err.contains("cannot be combined"), "{err}");
        }
        // How the CLI passes flags it was not given.
        let quiet = [
            (env::EACH_KERNEL, "1"),
            (env::LAUNCH_INDEX, ""),
            (env::PROFILER_RANGE, "0"),
            (env::GRAPH_LAUNCH, "0"),
        ];
        assert!(each(&quiet).unwrap().is_some());
        let m: HashMap<&str, &str> = [(env::EACH_KERNEL, "1")].into();
        for mode in [Mode::List, Mode::Profile] {
            let err =
                each_kernel_from(&|k: &str| m.get(k).map(|v| v.to_string()), &mode).unwrap_err();
            assert!(err.contains("record mode only"), "{err}");
        }
    }

    #[test]
    fn each_kernel_alone_is_a_selection_and_combines_with_a_filter() {
        let mut m = HashMap::new();
        m.insert(env::MODE.to_string(), "record".to_string());
        m.insert(env::EACH_KERNEL.to_string(), "1".to_string());
        let c = lookup(&m).unwrap().unwrap();
        assert!(c.each_kernel.is_some() && c.kernel.is_none());
        m.insert(env::KERNEL.to_string(), "regex:gemm".to_string());
        m.insert(env::NVTX_INCLUDE.to_string(), "layer".to_string());
        let c = lookup(&m).unwrap().unwrap();
        assert!(c.each_kernel.is_some() && c.kernel.is_some() && c.nvtx.is_some());
        // The refusal names --each-kernel, not what the other check would have said.
        m.insert(env::GRAPH_LAUNCH.to_string(), "1".to_string());
        let err = lookup(&m).unwrap_err();
        assert!(
            err.contains("--each-kernel") && err.contains("--graph-launch"),
            "{err}"
        );
    }

    #[test]
    fn rank_lookup_order() {
        let m: HashMap<&str, &str> = [("RANK", "5"), ("PMI_RANK", "2")].into();
        assert_eq!(rank_from(|k| m.get(k).map(|s| s.to_string())), Some(2));
        let m: HashMap<&str, &str> = HashMap::new();
        assert_eq!(rank_from(|k| m.get(k).map(|s| s.to_string())), None);
    }
}
