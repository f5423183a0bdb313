//! Command-line interface. Every flag is documented where it is defined; `--help` shows it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "kreplay",
    version,
    about = "Record one GPU kernel dispatch out of a running application and replay it anywhere.",
    long_about = "Record one GPU kernel dispatch out of a running, unmodified CUDA application into a \
single .krr file (kernel arguments, code object, the device memory it reads and writes), then \
inspect it without a GPU, or replay it N times on a GPU to time, verify or profile it.\n\n\
  kreplay list -- ./app args                        # which kernels does it launch?\n\
  kreplay record -k saxpy -o saxpy.krr -- ./app     # capture the first saxpy dispatch\n\
  kreplay info saxpy.krr                            # what is inside (no GPU needed)\n\
  kreplay play saxpy.krr --passes 8 --verify        # replay, time, check outputs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run an application and capture matching kernel dispatches into .krr files.
    Record(RecordArgs),
    /// Run an application and list every kernel it launches (name, count, grid, block).
    List(ListArgs),
    /// Replay a capture on a GPU: N timed passes, memory restored between them.
    Play(PlayArgs),
    /// Describe a capture: kernel, launch, parameters, regions, module, device (no GPU needed).
    Info(InfoArgs),
    /// Check every checksum, the END event and the trailer of a capture.
    Verify(VerifyArgs),
    /// Unpack a capture: cubin, argument bytes, each region as a raw file, a JSON description.
    Extract(ExtractArgs),
}

#[derive(Args)]
pub struct RecordArgs {
    /// Kernel to capture: a regular expression searched in the demangled and in the mangled
    /// name (e.g. `saxpy`, `^gemm`, `_Z5saxpy`).
    #[arg(short = 'k', long = "kernel", value_name = "REGEX")]
    pub kernel: String,
    /// Capture the Nth matching dispatch (1-based).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub nth: u64,
    /// Capture M consecutive matching dispatches, starting at --nth; one file each.
    #[arg(long, default_value_t = 1, value_name = "M", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: u64,
    /// Output file. `%p` pid, `%r` MPI/torchrun rank, `%h` host, `%n` match index, `%k` short
    /// kernel name, `%%` a percent sign. Use `%p` or `%r` when the app starts several processes.
    #[arg(
        short = 'o',
        long = "output",
        default_value = "%k-%p-%n.krr",
        value_name = "PATH"
    )]
    pub output: String,
    /// Which device memory to capture: `reachable` = every allocation reachable from the
    /// arguments (following pointers stored in captured memory) plus module globals; `all` =
    /// every live allocation as well (cudaMalloc, stream-ordered, managed and VMM mappings).
    #[arg(long, value_enum, default_value_t = MemoryScope::Reachable)]
    pub memory: MemoryScope,
    /// Print the result summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// The application and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum MemoryScope {
    Reachable,
    All,
}

#[derive(Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The application and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CacheMode {
    /// Evict L2 before every pass (writes a 512 MiB buffer, outside the timed window).
    Flush,
    /// Leave caches as the previous pass left them.
    Keep,
}

#[derive(Args)]
pub struct PlayArgs {
    /// The capture to replay.
    #[arg(required_unless_present = "list_metrics")]
    pub file: Option<PathBuf>,
    /// Timed passes; written memory is restored before each one.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub passes: u32,
    /// Untimed passes run first.
    #[arg(long, default_value_t = 0)]
    pub warmup: u32,
    /// Compare every region with the recorded post-dispatch state after the first pass (bit
    /// for bit) and check that all passes produce identical output.
    #[arg(long)]
    pub verify: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
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
    /// Compile the captured PTX with the driver's JIT instead of loading the captured cubin
    /// (automatic when the GPU is of another architecture than the capture's).
    #[arg(long, conflicts_with = "module")]
    pub ptx: bool,
}

#[derive(Args)]
pub struct InfoArgs {
    /// The capture to describe.
    pub file: PathBuf,
    /// Print the stable JSON description (see docs/FORMAT.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct VerifyArgs {
    /// The capture to check.
    pub file: PathBuf,
    /// When the capture is incomplete or damaged, write its intact part as a complete capture
    /// to OUT (regions whose memory was cut are dropped).
    #[arg(long, value_name = "OUT")]
    pub salvage: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ExtractArgs {
    /// The capture to unpack.
    pub file: PathBuf,
    /// Directory to write into (created if missing).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: PathBuf,
}
