//! Command-line interface. Every flag is documented where it is defined; `--help` shows it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kreplay_protocol::config::{BoundaryRange, KeyBy, LaunchRange, MemoryScope};
use kreplay_protocol::each_kernel::parse_size;

/// The main description. The indented lines are examples: `--help` prints them as they are,
/// and the man page renders them as an example block (`cmd::man::blocks`).
const LONG_ABOUT: &str = "Record one GPU kernel dispatch out of a running, unmodified CUDA \
application into a single .krr file (kernel arguments, code object, the device memory it reads \
and writes), then inspect it without a GPU, or replay it N times on a GPU to time, verify or \
profile it.

  kreplay list ./app args                           # which kernels does it launch?
  kreplay record -k saxpy -o saxpy.krr ./app args   # capture the first saxpy dispatch
  kreplay info saxpy.krr                            # what is inside (no GPU needed)
  kreplay play saxpy.krr --passes 8 --verify        # replay, time, check outputs";

#[derive(Parser)]
#[command(
    name = "kreplay",
    version,
    about = "Record one GPU kernel dispatch out of a running application and replay it anywhere.",
    long_about = LONG_ABOUT
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Colour the verdicts of play, info, verify, diff and profile (matched, intact, identical
    /// and their opposites): `auto` when stdout is a terminal and NO_COLOR is unset. Given
    /// before or after the command.
    #[arg(long, global = true, value_enum, default_value_t = crate::output::ColorChoice::Auto)]
    pub color: crate::output::ColorChoice,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run an application and capture matching kernel dispatches into .krr files.
    Record(RecordArgs),
    /// Run an application and list every kernel it launches (name, count, grid, block).
    List(ListArgs),
    /// Run an application and time matching dispatches where they happen: each runs several
    /// times in place (memory restored between passes), then the application continues with
    /// one run's result.
    Profile(ProfileArgs),
    /// Replay a capture on a GPU: N timed passes, memory restored between them.
    Play(PlayArgs),
    /// Describe a capture: kernel, launch, parameters, regions, module, device (no GPU needed).
    Info(InfoArgs),
    /// Check every checksum, the END event and the trailer of a capture.
    Verify(VerifyArgs),
    /// Unpack a capture: cubin, argument bytes, each region as a raw file, a JSON description.
    Extract(ExtractArgs),
    /// Compare two captures: which regions and chunks differ, and by how much as numbers.
    Diff(DiffArgs),
    /// Compare two runs of a corpus (the JSON lines `kreplay play --json-lines` writes): each
    /// capture's time ratio with its noise and verdict change, the geometric mean, the worst
    /// regressions; exit 1 on a regression, for CI to gate on; exit 2 when a run cannot be
    /// read, holds no record, or ends in a line cut short (an unfinished run).
    Compare(CompareArgs),
    /// Rewrite a capture for sharing: smaller (--drop-post, --level) or without the
    /// application's data (--redact).
    Pack(PackArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(CompletionsArgs),
    /// Write the man pages (roff): one per command (kreplay.1, kreplay-record.1, ...) into
    /// DIR, or the main page on stdout without DIR.
    Man(ManArgs),
    /// Check trace files (`play --trace`) against the trace-event format kreplay writes and
    /// print what each holds as one JSON line; exit 1 naming every defect. For the GPU
    /// suite and for debugging, so not listed.
    #[command(hide = true)]
    VerifyTrace(VerifyTraceArgs),
}

#[derive(Args)]
pub struct ManArgs {
    /// The folder to write every page into (created if missing), such as
    /// ~/.local/share/man/man1; the files written are listed on stdout.
    pub dir: Option<PathBuf>,
}

/// Subcommands whose output colours verdicts (`output::verdict`): their help lists `--color`
/// with a pointer to `kreplay --help`, which documents it. Elsewhere it is still accepted
/// (it is global) but hidden, since it changes nothing there.
const COLOURS_VERDICTS: &[&str] = &["play", "info", "verify", "diff", "profile"];

/// `--color` as subcommand `sub` shows it (`global` is the main command's).
fn color_in(sub: &str, global: &clap::Arg) -> clap::Arg {
    let local = global.clone().global(false);
    if COLOURS_VERDICTS.contains(&sub) {
        local
            .help("Colour verdicts (auto, always, never): see `kreplay --help`")
            .long_help(None)
            .hide_possible_values(true)
    } else {
        local.hide(true)
    }
}

/// The command line as kreplay parses, documents and completes it: `Cli`'s, with each
/// subcommand's own `--color` (clap copies a global flag's whole help into every subcommand
/// unless the subcommand has one of the same id; values still reach `Cli::color`).
pub fn command() -> clap::Command {
    let cmd = <Cli as clap::CommandFactory>::command();
    let Some(color) = cmd.get_arguments().find(|a| a.get_id() == "color").cloned() else {
        return cmd;
    };
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    names.iter().fold(cmd, |c, name| {
        c.mut_subcommand(name, |s| s.arg(color_in(name, &color)))
    })
}

#[derive(Args)]
pub struct CompareArgs {
    /// The reference run's JSON-lines file (one record per capture; shards concatenated).
    pub base: PathBuf,
    /// The run to judge: another driver, GPU, compiler or kreplay, on the same corpus.
    pub new: PathBuf,
    /// A capture is slower or faster when its median time changed by more than PCT percent
    /// and by more than the two runs' combined pass spread (noise).
    #[arg(long, value_name = "PCT", default_value_t = 5.0, value_parser = threshold_value)]
    pub threshold: f64,
    /// How many of the worst regressions and best improvements the text lists (0: all);
    /// --csv and --json hold every capture.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// One CSV row per capture (paired, added, removed) instead of text.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// The whole comparison as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write the comparison as one self-contained HTML page to FILE (replaced if it
    /// exists): the summary, a chart of each capture's time ratio NEW/BASE sorted with its noise
    /// band and the threshold, the regressions and verdict changes, and a row per paired
    /// capture. Nothing in it is fetched from elsewhere; stdout and the exit status are
    /// unchanged.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// A threshold in percent: finite and not negative.
fn threshold_value(s: &str) -> Result<f64, String> {
    let pct: f64 = s
        .trim_end_matches('%')
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage"))?;
    if !pct.is_finite() || pct < 0.0 {
        return Err(format!("{s}: a threshold is a percentage of 0 or more"));
    }
    Ok(pct)
}

#[derive(Args)]
pub struct DiffArgs {
    /// The first capture.
    pub a: PathBuf,
    /// The second capture (of the same kernel: another GPU, driver, run, or a --module
    /// variant recorded in its place).
    pub b: PathBuf,
    /// Compare the memory as the kernel left it (`post`, default: the results) or as it found
    /// it (`pre`: the inputs).
    #[arg(long, value_enum, default_value_t = DiffState::default())]
    pub state: DiffState,
    /// Read differing bytes as this element type for the error figures.
    #[arg(long = "as", value_enum, default_value_t = kreplay_player::compare::Element::default())]
    pub r#as: kreplay_player::compare::Element,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub use kreplay_player::diff::DiffState;

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell: `kreplay completions bash > /etc/bash_completion.d/kreplay`,
    /// `kreplay completions zsh > ~/.zfunc/_kreplay`, `kreplay completions fish >
    /// ~/.config/fish/completions/kreplay.fish`.
    pub shell: clap_complete::Shell,
}

/// A whole number from 1, or what is wrong with `s` (`zero` says why 0 is not one).
fn from_one(s: &str, zero: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err(zero.to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number, from 1".to_string()),
    }
}

/// `--nth N`: 1 is the first matching dispatch.
fn nth_value(s: &str) -> Result<u64, String> {
    from_one(
        s,
        "--nth counts from 1 (--nth 1 is the first matching dispatch)",
    )
}

/// `--count M` / `-c M`: how many, at least one.
fn count_value(s: &str) -> Result<u64, String> {
    from_one(s, "the count is at least 1")
}

/// `--launch-index I`: 1 is the process's first kernel launch.
fn launch_index_value(s: &str) -> Result<u64, String> {
    from_one(
        s,
        "--launch-index counts from 1 (1 is the process's first kernel launch)",
    )
}

/// `--launch-range I:J`: launches I through J, 1-based, I <= J.
fn launch_range_value(s: &str) -> Result<LaunchRange, String> {
    LaunchRange::parse(s)
}

/// `--nvtx-range [DOMAIN@]RANGE[/RANGE...]`, checked as `--nvtx-include` is.
fn nvtx_range_value(s: &str) -> Result<String, String> {
    BoundaryRange::nvtx("--nvtx-range", s, 1).map(|_| s.to_string())
}

#[derive(Args)]
pub struct RecordArgs {
    /// Kernel to capture, as ncu takes it: a plain name matches the kernel's function name
    /// (demangled, without namespace, template arguments or parameters: `saxpy`, `Kernel2`)
    /// or its mangled name (`_Z5saxpyifPKfPf`) exactly; `regex:RE` searches the demangled and
    /// the mangled name (`regex:gemm|xmma`).
    #[arg(
        short = 'k',
        long = "kernel",
        value_name = "NAME|regex:RE",
        required_unless_present_any = ["launch_index", "launch_range", "nvtx_range", "profiler_range", "each_kernel"]
    )]
    pub kernel: Option<String>,
    /// Capture the Nth matching dispatch (1-based); with --nvtx-range or --profiler-range, the
    /// Nth instance of the range.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = nth_value, conflicts_with = "launch_skip")]
    pub nth: u64,
    /// Capture M consecutive matching dispatches, starting at --nth; one file each.
    #[arg(long, default_value_t = 1, value_name = "M", value_parser = count_value, conflicts_with = "launch_count")]
    pub count: u64,
    /// ncu's form of --nth: skip N matching dispatches (capture the N+1th).
    #[arg(short = 's', long, value_name = "N")]
    pub launch_skip: Option<u64>,
    /// ncu's form of --count: capture N matching dispatches.
    #[arg(short = 'c', long, value_name = "N", value_parser = count_value)]
    pub launch_count: Option<u64>,
    /// Capture the launch with this 1-based index among all kernel launches of the process,
    /// whatever its kernel (the `first` column of `kreplay list` gives each kernel's first).
    /// With -k, the launch must also match it.
    #[arg(long, value_name = "I", value_parser = launch_index_value)]
    pub launch_index: Option<u64>,
    /// Capture launches I through J of the process (the 1-based indices `kreplay list`
    /// counts, as for --launch-index) as ONE range capture: their kernels in order, the memory
    /// they read at the range's start and what the range wrote. `kreplay play FILE --passes N
    /// --verify` replays and times the whole range. All launches must be on one stream; a
    /// memcpy, memset, event, allocation, free or graph launch inside the range makes the
    /// capture refuse (the application runs on unchanged).
    #[arg(
        long,
        value_name = "I:J",
        value_parser = launch_range_value,
        conflicts_with_all = ["kernel", "launch_index", "nth", "count", "launch_skip", "launch_count", "nvtx_include"]
    )]
    pub launch_range: Option<LaunchRange>,
    /// Capture ONE range: what the application issues inside the Nth instance (--nth,
    /// default 1) of this NVTX push/pop range (`torch.cuda.nvtx.range`, `nvtxRangePushA`,
    /// `nvtxRangePushEx`, `nvtxDomainRangePushEx`), from its push to its own pop, on any
    /// thread: `RANGE`, `DOMAIN@RANGE`, or `OUTER/INNER` for a range opened directly inside
    /// another, matched as --nvtx-include matches. `kreplay list --ranges` shows each
    /// instance with its launches. The capture says where it came from (`nvtx-range RANGE
    /// #N`); a range that never opens or never closes is reported, and the application runs
    /// on unchanged.
    #[arg(
        long,
        value_name = "[DOMAIN@]RANGE",
        value_parser = nvtx_range_value,
        conflicts_with_all = ["kernel", "launch_index", "launch_range", "count", "launch_skip", "launch_count", "nvtx_include", "profiler_range"]
    )]
    pub nvtx_range: Option<String>,
    /// Capture ONE range: what the application issues between its Nth (--nth, default 1)
    /// `cuProfilerStart` (`cudaProfilerStart`) and the `cuProfilerStop` after it, the range
    /// ncu's range replay takes by default. A start while started and a stop while stopped
    /// change nothing.
    #[arg(
        long,
        conflicts_with_all = ["kernel", "launch_index", "launch_range", "count", "launch_skip", "launch_count", "nvtx_include"]
    )]
    pub profiler_range: bool,
    /// With -k: capture ONE range, the whole launch of the CUDA graph (`cudaGraphLaunch`,
    /// `torch.cuda.CUDAGraph.replay`, `torch.compile(mode="reduce-overhead")`) that holds the
    /// Nth (--nth) execution of the matching kernel: every enabled node of that launch,
    /// kernels, memsets and 1D memcpys, as the capture's steps on the launch's stream in an
    /// order that respects the graph's edges (independent nodes run one after the other on
    /// replay). A graph with host, event, memory allocation or free, conditional or other
    /// nodes, or 2D/3D copies, is refused naming the node; a match that is not inside a graph
    /// launch is not captured. The application runs on unchanged. The capture says where it
    /// came from (`graph-launch KERNEL #N (graph launch G)`).
    #[arg(
        long,
        requires = "kernel",
        conflicts_with_all = ["launch_index", "launch_range", "nvtx_range", "profiler_range", "count", "launch_count"]
    )]
    pub graph_launch: bool,
    /// Only launches made inside an NVTX push/pop range (`torch.cuda.nvtx.range`,
    /// `nvtxRangePush`): `RANGE`, `DOMAIN@RANGE`, or `OUTER/INNER` for a range opened directly
    /// inside another (a subset of ncu's syntax). --nth counts only those launches.
    #[arg(long, value_name = "RANGE")]
    pub nvtx_include: Option<String>,
    /// Capture a corpus: the first --per-kernel executions (default 1) of every distinct
    /// kernel the application runs (with -k, of those it matches; with --nvtx-include, only
    /// launches inside that range), graph nodes included, one file each, into the folder -o
    /// names (`-o DIR/`), as `I-KERNEL-E-PID.krr` (I: the kernel's index in its process, first
    /// launched first; E: which of its executions). At the end kreplay writes
    /// `DIR/corpus.json`: for each capture its file (relative to DIR), kernel short and mangled
    /// name, grid, block, launch index, innermost NVTX range, whether it ran in a CUDA graph,
    /// bytes stored, in-app µs and the SHA-256 of the file; the kernels left out and why; the
    /// run's device, driver, host and command. `kreplay play DIR/corpus.json` replays it.
    #[arg(
        long,
        conflicts_with_all = ["launch_index", "launch_range", "nvtx_range", "profiler_range", "graph_launch", "nth", "count", "launch_skip", "launch_count"]
    )]
    pub each_kernel: bool,
    /// With --each-kernel: how many executions of each distinct kernel to capture, the first
    /// ones.
    #[arg(long, value_name = "N", requires = "each_kernel", value_parser = count_value)]
    pub per_kernel: Option<u64>,
    /// With --each-kernel: what tells two kernels apart. `name`: the mangled name; `shape`:
    /// also the grid, the block and the size of the argument bytes (a GEMM at two sizes is two
    /// kernels).
    #[arg(long, value_enum, value_name = "name|shape", requires = "each_kernel")]
    pub by: Option<KeyBy>,
    /// With --each-kernel: bound the corpus to SIZE bytes of capture files (`500M`, `2G`,
    /// `1.5GiB`; K, M, G, T are powers of 1000, KiB, MiB, GiB, TiB of 1024). When the next
    /// capture would pass it, its file is removed and capturing stops; corpus.json lists the
    /// kernels left out and why. The application's results stay the same.
    #[arg(long, value_name = "SIZE", requires = "each_kernel", value_parser = parse_size)]
    pub max_bytes: Option<u64>,
    /// Output file. `%p` pid, `%r` MPI/torchrun rank, `%h` host, `%n` match index, `%k` short
    /// kernel name, `%%` a percent sign. Use `%p` or `%r` when the app starts several processes,
    /// `%n` with --count above 1. With --each-kernel, the corpus folder: `DIR/` (created when
    /// missing) or an existing directory. Checked before the application starts.
    #[arg(
        short = 'o',
        long = "output",
        default_value = kreplay_protocol::config::DEFAULT_OUTPUT,
        value_name = "PATH"
    )]
    pub output: String,
    /// Which device memory to capture: `reachable` = every allocation reachable from the
    /// arguments (following pointers stored in captured memory) plus module globals; `all` =
    /// every live allocation as well (cudaMalloc, stream-ordered, managed and VMM mappings);
    /// `touched` = the reachable allocations, but only the 4 KiB pages the dispatch reads or
    /// writes are stored (the recorder runs the dispatch once more, instrumented through the
    /// Compute Sanitizer API, to find them; the application's own launch runs as it would);
    /// a range capture stores the union of its steps' pages (each kernel step run once more,
    /// each op's device spans). Falls back to `reachable`, saying why, where the Sanitizer API
    /// cannot be used.
    #[arg(long, value_enum, default_value_t = MemoryScope::Reachable)]
    pub memory: MemoryScope,
    /// Print the result summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Replace output files that already exist (without it, a capture whose file exists is
    /// not written, and the application runs on).
    #[arg(long)]
    pub force: bool,
    /// No per-capture summary lines on stderr; errors and why nothing was captured still
    /// print.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// The application and its arguments: the first argument that is not one of kreplay's
    /// options, and everything after it, belong to the application (`--` before it is
    /// optional: `kreplay record -k foo ./app -k bar` passes `-k bar` to the app).
    #[arg(
        required = true,
        trailing_var_arg = true,
        num_args = 1..,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

#[derive(Args)]
pub struct ProfileArgs {
    /// Kernel to profile, as `record -k` takes it: a plain name (function name or mangled
    /// name, exactly) or `regex:RE`.
    #[arg(short = 'k', long = "kernel", value_name = "NAME|regex:RE")]
    pub kernel: String,
    /// The first matching dispatch to profile (1-based).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = nth_value)]
    pub nth: u64,
    /// Profile M consecutive matching dispatches from --nth.
    #[arg(long, default_value_t = 1, value_name = "M", value_parser = count_value, conflicts_with = "all")]
    pub count: u64,
    /// Profile every matching dispatch from --nth on.
    #[arg(long)]
    pub all: bool,
    /// Timed passes per dispatch, the application's own launch the first of them (kreplay's
    /// own timing; a --tool decides instead). Default: 5, or 1 with --metrics (the counters
    /// then cost the only extra passes, as under ncu).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=kreplay_protocol::config::MAX_PASSES as i64))]
    pub passes: Option<u32>,
    /// Hardware counters per dispatch (CUPTI metric names, as ncu's --metrics;
    /// `kreplay play --list-metrics` lists them). CUPTI says how many passes the set needs;
    /// they run after the timed passes, each on restored memory with the L2 emptied first
    /// (under --cache flush), and are never timed.
    #[arg(long, value_delimiter = ',', value_name = "METRIC,...")]
    pub metrics: Vec<String>,
    /// `flush`: L2 emptied before every pass (as ncu's cache control); `keep`: as the
    /// previous pass left it.
    #[arg(long, value_enum, default_value_t = CacheMode::Flush)]
    pub cache: CacheMode,
    /// What is restored between passes: `reachable` (default) = the 4 MiB chunks of the
    /// reachable memory that the application's launch changed; `touched` = only the 4 KiB
    /// pages it changed (pages it wrote with their own values need no restore), found by the
    /// same GPU compare of the pristine copy, so counters and --variant work as before. Past
    /// 64 separate runs in one region the smallest gaps between them are restored too (a copy
    /// call costs about as much as copying 4 MiB); over a region above 1 GiB the page widens
    /// so its compare keeps at most 2^18 chunks. The row's `restore_chunk_bytes` says which.
    /// Everything reachable is still copied aside once: which pages the kernel writes is
    /// known only after it ran.
    #[arg(long, value_enum, default_value_t = ProfileMemory::Reachable)]
    pub memory: ProfileMemory,
    /// Only launches made inside an NVTX push/pop range (as `record --nvtx-include`).
    #[arg(long, value_name = "RANGE")]
    pub nvtx_include: Option<String>,
    /// A tool library (`kreplay_tool.h`): it decides each dispatch's passes and sees each one
    /// begin and end.
    #[arg(long, value_name = "LIB.so")]
    pub tool: Option<PathBuf>,
    /// A variant of the kernel (a cubin, or PTX the driver compiles when it loads it) run
    /// beside the original at every profiled dispatch, on the same restored inputs with the
    /// same grid, block, shared memory and arguments: --passes timed passes each, alternating
    /// (the application's launch is the original's first), then its output compared with the
    /// original's over the dispatch's write set. Its parameter layout must be the original's
    /// (checked before any variant launch; refused naming the first parameter that differs).
    #[arg(long, value_name = "FILE.cubin|FILE.ptx", conflicts_with_all = ["tool", "metrics"])]
    pub variant: Option<PathBuf>,
    /// With --variant: the variant's function name (mangled, as `cuobjdump -symbols` lists
    /// it), when it is not the original's.
    #[arg(long, value_name = "NAME", requires = "variant")]
    pub variant_kernel: Option<String>,
    /// With --variant: the variant's output may differ from the original's by at most ABS +
    /// REL x |original| per element read as DTYPE (f32, f16, bf16, i32, as `kreplay diff --as`
    /// reads them), such as `f32:1e-5,1e-4`; the verdict is then `within tolerance`. Default:
    /// bit for bit.
    #[arg(long, value_name = "DTYPE:ABS[,REL]", requires = "variant", value_parser = tolerance_value)]
    pub tolerance: Option<String>,
    /// With --variant: whose output the application goes on with: `original` (default: its
    /// results as in a plain run) or `variant` (the variant's last pass's, to see its effect
    /// on the application's own output in the same run).
    #[arg(
        long,
        value_enum,
        value_name = "original|variant",
        requires = "variant"
    )]
    pub keep: Option<Keep>,
    /// Print one JSON object per dispatch on stdout (the table still goes to stderr).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV on stdout: a header and one row per dispatch.
    #[arg(long)]
    pub csv: bool,
    /// Write the report to a file instead of stdout: JSON or CSV as --json/--csv or the
    /// name's extension (`.json`, `.csv`) say, else the table. `%p` pid, `%r` MPI/torchrun
    /// rank, `%h` host (`mpirun -n 2 kreplay profile ... -o prof-%r.json`: one per rank).
    #[arg(short = 'o', long = "output", value_name = "REPORT")]
    pub output: Option<String>,
    /// Write the profiled dispatches' timed passes as a trace to FILE.json (Chrome
    /// trace-event format: open it in ui.perfetto.dev or chrome://tracing): a process per
    /// profiled GPU context of each application process, pass 0 (the application's launch)
    /// on a thread per application stream, the further passes on kreplay's, restores and L2
    /// flushes (outside the timed windows) on a "restore" thread, --metrics counters as
    /// counter tracks. Every time is GPU time from CUDA events, never a host clock. `%p`,
    /// `%r` and `%h` as in -o (`--trace trace-%r.json`: one per rank).
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// Replace the --trace file when it exists.
    #[arg(long, requires = "trace")]
    pub force: bool,
    /// No table on stderr.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// The application and its arguments (`--` before it is optional).
    #[arg(
        required = true,
        trailing_var_arg = true,
        num_args = 1..,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

#[derive(Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Also list each NVTX push/pop range instance with the launches made inside it, what
    /// `record --nvtx-range RANGE --nth N` captures: lines `nvtx-range RANGE #N  launches
    /// I..J` (or `no launches`) after the table; with --json an object `{"kernels": [...],
    /// "ranges": [{domain, name, instance, first_launch, last_launch, closed, pid}]}` instead
    /// of the array of kernels.
    #[arg(long, conflicts_with = "csv")]
    pub ranges: bool,
    /// Print CSV instead of a table (count, first_launch, grid, block, name, demangled).
    #[arg(long)]
    pub csv: bool,
    /// The application and its arguments: the first argument that is not one of kreplay's
    /// options, and everything after it, belong to the application (`--` before it is
    /// optional: `kreplay record -k foo ./app -k bar` passes `-k bar` to the app).
    #[arg(
        required = true,
        trailing_var_arg = true,
        num_args = 1..,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

/// `profile --keep`: whose output the application continues with.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Keep {
    /// The original kernel's (the application's results as in a plain run).
    Original,
    /// The variant's.
    Variant,
}

/// `--tolerance DTYPE:ABS[,REL]`, checked as the recorder reads it.
fn tolerance_value(s: &str) -> Result<String, String> {
    kreplay_player::compare::Tolerance::parse(s).map(|_| s.to_string())
}

/// `profile --memory`: what the restores between passes copy.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum ProfileMemory {
    /// The 4 MiB chunks the application's launch changed.
    Reachable,
    /// The 4 KiB pages it changed.
    Touched,
}

impl From<ProfileMemory> for MemoryScope {
    /// The recorder's scope of the same name (its environment word is the one `record` sets).
    fn from(m: ProfileMemory) -> MemoryScope {
        match m {
            ProfileMemory::Reachable => MemoryScope::Reachable,
            ProfileMemory::Touched => MemoryScope::Touched,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CacheMode {
    /// Empty L2 before every pass, outside the timed window: a read-only sweep over 4 x the L2
    /// size writes dirty lines back, then (sm_80 and later) the sweep's own lines are
    /// discarded, so the kernel starts with an empty L2 as under ncu's cache control.
    Flush,
    /// Leave caches as the previous pass left them.
    Keep,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("saved").multiple(true).args(["save_output", "save_step", "trace"])))]
pub struct PlayArgs {
    /// The capture to replay; or many: several files, a directory (every *.krr under it,
    /// recursively, sorted), or a corpus manifest (corpus.json), each replayed in a child
    /// process of its own with a table, a summary and --json-lines.
    #[arg(required_unless_present = "list_metrics", num_args = 1.., value_name = "FILE|DIR|corpus.json")]
    pub files: Vec<PathBuf>,
    /// Timed passes; written memory is restored before each one.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub passes: u32,
    /// A tool library written against `engine/include/kreplay_tool.h` (as `kreplay profile
    /// --tool` takes it) decides the timed passes and sees each begin and end: its CONFIG's
    /// answer is the pass count (at most 1000; "until stop" runs until it says stop), so an
    /// explicit --passes is refused with it, not silently overridden. --warmup passes run
    /// first, unseen by the tool; --verify checks the tool's passes (each END tells it whether
    /// the pass's output matched the first's); --metrics counter passes run after the tool's,
    /// as many as CUPTI needs, and the tool does not see them. The library is loaded (its
    /// `kreplay_tool_init` run) before any GPU work; one that cannot be loaded is an error.
    #[arg(long, value_name = "LIB.so", conflicts_with = "passes")]
    pub tool: Option<PathBuf>,
    /// Untimed passes run first.
    #[arg(long, default_value_t = 0)]
    pub warmup: u32,
    /// Compare every region with the recorded post-dispatch state after the first pass (bit
    /// for bit) and check that all passes produce identical output.
    #[arg(long)]
    pub verify: bool,
    /// Print one JSON object instead of the table.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print the report as CSV (a header and one row: the JSON fields, nested ones joined
    /// with `_`, lists with `;`), for spreadsheets and scripts that collect many replays.
    #[arg(long)]
    pub csv: bool,
    /// Print nothing but errors (the exit status says how it went); --json and --csv still
    /// print their report.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// CUDA device ordinal to replay on.
    #[arg(long, default_value_t = 0)]
    pub device: i32,
    /// L2 cache handling before each pass. Default: keep for timed passes, flush for counter
    /// passes (as ncu does), so counters see the dispatch's own DRAM traffic.
    #[arg(long, value_enum)]
    pub cache: Option<CacheMode>,
    /// Hardware counters to collect on the replayed dispatch, comma-separated (e.g.
    /// dram__bytes_read.sum,sm__cycles_elapsed.avg). CUPTI's range profiler decides how many
    /// passes they need; each runs on restored memory, after (never during) the timed passes.
    #[arg(long, value_delimiter = ',', value_name = "METRIC,...")]
    pub metrics: Vec<String>,
    /// List the base metrics of the device (name, kind, unit, description) and exit.
    #[arg(long)]
    pub list_metrics: bool,
    /// Replay this cubin instead of the captured one; it must define the same kernel with the
    /// same parameter layout.
    #[arg(long, value_name = "FILE.cubin")]
    pub module: Option<PathBuf>,
    /// Map memory at new addresses and rewrite every known pointer (argument pointers and
    /// pointers the recorder found in captured memory), even when the original addresses are
    /// free. Without it, relocation happens only when the original addresses are taken.
    #[arg(long)]
    pub relocate: bool,
    /// After the passes, write the replay's result as a capture to FILE: the input as
    /// recorded, and device memory as the replay left it as the post-dispatch state, for
    /// `kreplay diff CAPTURE FILE` (the recorded output against this GPU's, driver's or
    /// --module variant's).
    #[arg(long, value_name = "FILE.krr")]
    pub save_output: Option<PathBuf>,
    /// Replace the --save-output, --save-step or --trace file when it exists.
    #[arg(long, requires = "saved")]
    pub force: bool,
    /// Range captures: time each kernel step too (events around it, on its stream); the
    /// report gives each step's median over the timed passes.
    #[arg(long)]
    pub per_step: bool,
    /// Range captures: replay steps 0..K-1 from the restored input, then write step K (a
    /// 0-based kernel step index, as `kreplay info` lists them) as a single-dispatch capture
    /// to OUT.krr, which `play` replays like any other.
    #[arg(long, num_args = 2, value_names = ["K", "OUT.krr"])]
    pub save_step: Option<Vec<String>>,
    /// Write the timed passes as a trace to FILE.json (Chrome trace-event format: open it in
    /// ui.perfetto.dev or chrome://tracing): a thread per stream with one slice per pass (a
    /// range: per pass, and with --per-step per kernel step on its recorded stream), timed by
    /// the passes' CUDA events on the GPU's clock; the restores and L2 flushes outside the
    /// timed window on a "restore" thread; --metrics counters as counter tracks; the
    /// capture's origin in the metadata. The timed window is the same with it or without.
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// Compile the captured PTX with the driver's JIT instead of loading the captured cubin
    /// (automatic when the GPU is of another architecture than the capture's).
    #[arg(long, conflicts_with = "module")]
    pub ptx: bool,
    #[command(flatten)]
    pub many: ManyArgs,
    /// Many captures: the GPUs to replay on, as ordinals this process sees (default: every
    /// visible GPU); each child gets one through CUDA_VISIBLE_DEVICES. An ordinal past the
    /// GPUs the driver lists is refused before any replay (with no driver: taken as given).
    #[arg(long, value_name = "0,1,...", help_heading = "Many captures")]
    pub devices: Option<String>,
    /// Many captures: a correctness sweep: each capture plays one verified pass (--passes 1
    /// --warmup 0 --verify), and --jobs may put several children on one GPU.
    #[arg(long, help_heading = "Many captures", conflicts_with_all = ["passes", "warmup", "tool", "metrics", "per_step"])]
    pub no_timing: bool,
    /// Many captures: kill a capture's replay (its whole process group) after SECONDS and
    /// report it as `timeout`.
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds, help_heading = "Many captures")]
    pub timeout: Option<f64>,
}

/// What `play` and `verify` of many captures share.
#[derive(Args, Debug, Default, Clone)]
pub struct ManyArgs {
    /// Take this process's part of the corpus: I/N (0 <= I < N; a capture's shard is a hash
    /// of its path relative to the folder or manifest), or `auto`: from Slurm job arrays
    /// (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT) or Kubernetes Indexed Jobs
    /// (JOB_COMPLETION_INDEX, JOB_COMPLETIONS). Shards' --json-lines files concatenate.
    #[arg(long, value_name = "I/N|auto", help_heading = "Many captures")]
    pub shard: Option<String>,
    /// Append one JSON object per capture to FILE as each finishes (file, kernel, device,
    /// verdict, times, error: see the README).
    #[arg(long, value_name = "FILE", help_heading = "Many captures")]
    pub json_lines: Option<PathBuf>,
    /// Skip the captures --json-lines FILE already answers (same path relative to the folder
    /// or manifest, wherever it is mounted, and same SHA-256 when both know one), appending the
    /// rest (a last line cut short by a killed run is removed first).
    #[arg(long, requires = "json_lines", help_heading = "Many captures")]
    pub resume: bool,
    /// How many captures at once (play: default one per GPU, more only with --no-timing;
    /// verify: default one per CPU core).
    #[arg(long, value_name = "N", help_heading = "Many captures")]
    pub jobs: Option<usize>,
    /// When the run finishes, write it as one self-contained HTML page to FILE (replaced if it
    /// exists): the verdicts, a chart of the median times sorted with their pass spread, and a
    /// row per capture (verdict, median, first and in-app µs, spread, error), failures first.
    #[arg(long, value_name = "FILE", help_heading = "Many captures")]
    pub html: Option<PathBuf>,
}

impl ManyArgs {
    /// Whether any of these flags was given (they ask for a run of many even on one file).
    pub fn given(&self) -> bool {
        self.shard.is_some()
            || self.json_lines.is_some()
            || self.resume
            || self.jobs.is_some()
            || self.html.is_some()
    }
}

/// `--timeout SECONDS`: above zero.
fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err("expected seconds above zero (such as 30 or 2.5)".to_string()),
    }
}

#[derive(Args)]
pub struct VerifyTraceArgs {
    /// The trace files to check.
    #[arg(required = true, num_args = 1.., value_name = "TRACE.json")]
    pub files: Vec<PathBuf>,
}

#[derive(Args)]
pub struct InfoArgs {
    /// The captures to describe.
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Print the stable JSON description (see docs/FORMAT.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct VerifyArgs {
    /// The captures to check: files, directories (every *.krr under them, recursively,
    /// sorted) or corpus manifests (corpus.json: each file's SHA-256 is checked too).
    #[arg(required = true, num_args = 1.., value_name = "FILE|DIR|corpus.json")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub many: ManyArgs,
    /// When the capture is incomplete or damaged, write its intact part as a complete capture
    /// to OUT (regions whose memory was cut are dropped, and what refers to them). OUT is
    /// written only when the result verifies; it must not be the input.
    #[arg(long, value_name = "OUT")]
    pub salvage: Option<PathBuf>,
    /// Replace OUT when it exists.
    #[arg(long, requires = "salvage")]
    pub force: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ExtractArgs {
    /// The capture to unpack.
    pub file: PathBuf,
    /// Directory to write into (created if missing; must be empty unless --force).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "DIR",
        required_unless_present = "repro"
    )]
    pub output: Option<PathBuf>,
    /// Write into a non-empty directory (replacing files of the same names), and write
    /// regions even when they add up to more than 16 x the capture's size (at least 256 MiB);
    /// extracted memory is written at its full size (zero chunks as sparse holes).
    #[arg(long)]
    pub force: bool,
    /// Write a standalone reproducer into DIR (created if missing; must be empty unless
    /// --force): one C++ file on the CUDA driver API, a Makefile, the code objects and the
    /// region files. `make -C DIR && DIR/repro` replays, times and verifies the dispatch with
    /// nvcc and a GPU alone, no kreplay.
    #[arg(long, value_name = "DIR")]
    pub repro: Option<PathBuf>,
}

#[derive(Args)]
pub struct PackArgs {
    /// The capture to rewrite (left as it is).
    pub file: PathBuf,
    /// The new capture (written to OUT.partial, renamed once it verifies).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    /// Replace every region's contents with deterministic pseudo-random data of the same
    /// size, keeping pointer words, texture handles, module globals and `__constant__` data,
    /// the argument bytes, and which chunks were all zeros. The output is dropped with the
    /// data (`play --verify` then checks determinism only). Kernels whose control flow
    /// depends on the data (indices, lengths, sparse structure) may take another path or
    /// fault on redacted data.
    #[arg(long)]
    pub redact: bool,
    /// Keep only where the kernel writes, not what it wrote: no reference output for
    /// `play --verify` (it checks determinism instead), a smaller file.
    #[arg(long)]
    pub drop_post: bool,
    /// zstd level for memory (1-22). Default: 19 (the smallest files) for captures of up to
    /// 1 GiB of memory, 3 above (19 takes minutes per GiB of float-like data).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=22))]
    pub level: Option<i32>,
    /// Replace OUT when it exists.
    #[arg(long)]
    pub force: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threshold_is_a_percentage_of_zero_or_more() {
        assert_eq!(threshold_value("5"), Ok(5.0));
        assert_eq!(threshold_value("2.5%"), Ok(2.5));
        assert_eq!(threshold_value("0"), Ok(0.0));
        for bad in ["-1", "nan", "inf", "five", ""] {
            assert!(threshold_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn colour_commands_are_real_subcommands() {
        let cmd = command();
        for name in COLOURS_VERDICTS {
            assert!(cmd.find_subcommand(name).is_some(), "{name}");
        }
    }

    #[test]
    fn color_is_shown_where_it_colours_and_hidden_elsewhere() {
        let cmd = command();
        let color = |sub: &str| {
            let s = cmd.find_subcommand(sub).expect("subcommand");
            let a = s.get_arguments().find(|a| a.get_id() == "color");
            a.map(|a| a.is_hide_set()).expect("--color accepted")
        };
        assert!(!color("play"));
        assert!(!color("diff"));
        assert!(color("man"));
        assert!(color("completions"));
    }

    #[test]
    fn color_given_after_a_subcommand_reaches_the_cli() {
        use clap::FromArgMatches;
        for args in [
            &["kreplay", "info", "--color", "never", "x.krr"][..],
            &["kreplay", "--color", "never", "info", "x.krr"][..],
            &["kreplay", "man", "--color", "never"][..],
        ] {
            let m = command().try_get_matches_from(args).expect("parses");
            let cli = Cli::from_arg_matches(&m).expect("a Cli");
            assert_eq!(cli.color, crate::output::ColorChoice::Never, "{args:?}");
        }
        let m = command()
            .try_get_matches_from(["kreplay", "info", "x.krr"])
            .expect("parses");
        let cli = Cli::from_arg_matches(&m).expect("a Cli");
        assert_eq!(cli.color, crate::output::ColorChoice::Auto);
    }

    fn record(args: &[&str]) -> RecordArgs {
        let mut v = vec!["kreplay", "record"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v).map(|c| c.command) {
            Ok(Command::Record(a)) => a,
            Ok(_) => panic!("not a record command"),
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    #[test]
    fn the_application_needs_no_double_dash() {
        let a = record(&["-k", "saxpy", "--nth", "2", "./app", "1M"]);
        assert_eq!(a.kernel.as_deref(), Some("saxpy"));
        assert_eq!(a.nth, 2);
        assert_eq!(a.command, ["./app", "1M"]);
    }

    #[test]
    fn double_dash_still_works() {
        let a = record(&["-k", "saxpy", "-o", "x.krr", "--", "./app", "--size", "1M"]);
        assert_eq!(a.output, "x.krr");
        assert_eq!(a.command, ["./app", "--size", "1M"]);
    }

    #[test]
    fn options_after_the_command_belong_to_the_application() {
        let a = record(&["-k", "foo", "./app", "-k", "bar", "--json", "--nth", "7"]);
        assert_eq!(a.kernel.as_deref(), Some("foo"));
        assert_eq!(a.nth, 1);
        assert!(!a.json);
        assert_eq!(a.command, ["./app", "-k", "bar", "--json", "--nth", "7"]);
    }

    #[test]
    fn an_application_named_like_a_flag_goes_after_double_dash() {
        let a = record(&["-k", "foo", "--", "--weird-app", "x"]);
        assert_eq!(a.command, ["--weird-app", "x"]);
    }

    #[test]
    fn list_takes_the_same_forms() {
        for args in [
            &["kreplay", "list", "./app", "--json"][..],
            &["kreplay", "list", "--", "./app", "--json"][..],
        ] {
            match Cli::try_parse_from(args).map(|c| c.command) {
                Ok(Command::List(a)) => {
                    assert!(!a.json, "{args:?}");
                    assert_eq!(a.command, ["./app", "--json"]);
                }
                _ => panic!("{args:?} did not parse as list"),
            }
        }
        match Cli::try_parse_from(["kreplay", "list", "--json", "./app"]).map(|c| c.command) {
            Ok(Command::List(a)) => assert!(a.json),
            _ => panic!("list --json ./app did not parse"),
        }
    }

    #[test]
    fn a_missing_command_or_kernel_is_refused() {
        assert!(Cli::try_parse_from(["kreplay", "record", "-k", "foo"]).is_err());
        assert!(Cli::try_parse_from(["kreplay", "record", "./app"]).is_err());
        assert!(Cli::try_parse_from(["kreplay", "list"]).is_err());
        // An unknown kreplay option before the command is an error, not the application.
        assert!(
            Cli::try_parse_from(["kreplay", "record", "-k", "foo", "--bogus", "./app"]).is_err()
        );
    }

    #[test]
    fn ncu_selection_flags() {
        let a = record(&["-k", "regex:gemm", "-s", "3", "-c", "2", "./app"]);
        assert_eq!(a.launch_skip, Some(3));
        assert_eq!(a.launch_count, Some(2));
        let a = record(&["--launch-index", "42", "./app"]);
        assert_eq!(a.kernel, None);
        assert_eq!(a.launch_index, Some(42));
        // ncu's and kreplay's forms of the same thing do not mix.
        assert!(Cli::try_parse_from([
            "kreplay", "record", "-k", "f", "--nth", "2", "-s", "1", "./app"
        ])
        .is_err());
        assert!(Cli::try_parse_from([
            "kreplay", "record", "-k", "f", "--count", "2", "-c", "1", "./app"
        ])
        .is_err());
        assert!(Cli::try_parse_from(["kreplay", "record", "-k", "f", "-c", "0", "./app"]).is_err());
        assert!(
            Cli::try_parse_from(["kreplay", "record", "--launch-index", "0", "./app"]).is_err()
        );
    }

    #[test]
    fn launch_range_stands_alone() {
        let a = record(&["--launch-range", "2:4", "-o", "r.krr", "--", "./app"]);
        assert_eq!(a.launch_range, Some(LaunchRange { first: 2, last: 4 }));
        assert_eq!(a.kernel, None);
        for bad in ["0:3", "4:2", "3"] {
            assert!(
                Cli::try_parse_from(["kreplay", "record", "--launch-range", bad, "./app"]).is_err(),
                "{bad}"
            );
        }
        for other in [
            &["-k", "f"][..],
            &["--launch-index", "3"],
            &["--nth", "2"],
            &["--count", "2"],
            &["-c", "2"],
            &["--nvtx-include", "layer"],
        ] {
            let mut args = vec!["kreplay", "record", "--launch-range", "1:2"];
            args.extend_from_slice(other);
            args.push("./app");
            assert!(Cli::try_parse_from(&args).is_err(), "{other:?}");
        }
    }

    #[test]
    fn graph_launch_takes_a_kernel_and_nth_and_no_other_range() {
        let a = record(&["-k", "regex:flash", "--graph-launch", "--nth", "2", "./app"]);
        assert!(a.graph_launch);
        assert_eq!((a.nth, a.kernel.as_deref()), (2, Some("regex:flash")));
        assert!(Cli::try_parse_from(["kreplay", "record", "--graph-launch", "./app"]).is_err());
        for other in [
            &["--launch-index", "3"][..],
            &["--launch-range", "1:2"],
            &["--nvtx-range", "x"],
            &["--profiler-range"],
            &["--count", "2"],
            &["-c", "2"],
        ] {
            let mut args = vec!["kreplay", "record", "-k", "f", "--graph-launch"];
            args.extend_from_slice(other);
            args.push("./app");
            assert!(Cli::try_parse_from(&args).is_err(), "{other:?}");
        }
    }

    #[test]
    fn boundary_ranges_take_nth_and_stand_alone() {
        let a = record(&["--nvtx-range", "mydomain@layer.2", "--nth", "3", "./app"]);
        assert_eq!(a.nvtx_range.as_deref(), Some("mydomain@layer.2"));
        assert_eq!((a.nth, a.kernel.as_deref()), (3, None));
        let a = record(&["--profiler-range", "./app"]);
        assert!(a.profiler_range && a.nvtx_range.is_none());
        assert_eq!(a.nth, 1);
        for bad in ["", "a//b", "@x"] {
            assert!(
                Cli::try_parse_from(["kreplay", "record", "--nvtx-range", bad, "./app"]).is_err(),
                "{bad:?}"
            );
        }
        for range in [&["--nvtx-range", "layer"][..], &["--profiler-range"]] {
            for other in [
                &["-k", "f"][..],
                &["--launch-index", "3"],
                &["--launch-range", "1:2"],
                &["--count", "2"],
                &["-s", "1"],
                &["-c", "2"],
                &["--nvtx-include", "layer"],
                &["--nvtx-range", "x"],
                &["--profiler-range"],
            ] {
                if other[0] == range[0] {
                    continue;
                }
                let mut args = vec!["kreplay", "record"];
                args.extend_from_slice(range);
                args.extend_from_slice(other);
                args.push("./app");
                assert!(Cli::try_parse_from(&args).is_err(), "{range:?} {other:?}");
            }
        }
    }

    #[test]
    fn list_ranges_is_a_table_or_json_addition() {
        match Cli::try_parse_from(["kreplay", "list", "--ranges", "--json", "./app"])
            .map(|c| c.command)
        {
            Ok(Command::List(a)) => assert!(a.ranges && a.json),
            _ => panic!("list --ranges --json ./app did not parse"),
        }
        assert!(Cli::try_parse_from(["kreplay", "list", "--ranges", "--csv", "./app"]).is_err());
    }
}
