//! The one pass loop, and the pass API (`include/kreplay_tool.h`) it is built on.
//!
//! Who decides the passes is a `PassTool`: a fixed count (`FixedPasses`: `play --passes`,
//! `profile --passes`), the counters (`counters::CounterPasses`: passes until CUPTI's range
//! profiler has all it needs), or a library's (`CTool`: `--tool LIB.so`). How a pass restores,
//! launches and times is a `PassRunner`: the player's (`passes`), the application's process's
//! (`kreplay profile`, `record::profile`), a counter batch's (`record::counter_batch`).
//! `drive` is the loop's control flow, pure (warm-up, restore before every run that follows
//! another, cache preparation before BEGIN, stop and cap), so it is tested on the CPU with a
//! fake runner, the C example tool among the tools.

use std::ffi::{c_char, c_void, CString};
use std::path::Path;

/// `KREPLAY_TOOL_API_VERSION`.
pub const API_VERSION: u32 = 1;
/// `KREPLAY_PASSES_UNTIL_STOP`.
pub const PASSES_UNTIL_STOP: u32 = u32::MAX;

/// What a tool asks for a dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassRequest {
    /// Run it once, as the application would, without the tool.
    Skip,
    Passes(u32),
    /// Until the tool says stop (or the cap).
    UntilStop,
}

impl PassRequest {
    fn from_raw(n: u32) -> PassRequest {
        match n {
            0 => PassRequest::Skip,
            PASSES_UNTIL_STOP => PassRequest::UntilStop,
            n => PassRequest::Passes(n),
        }
    }
}

/// `kreplay_tool_flow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

impl Flow {
    fn from_raw(v: i32) -> Flow {
        if v == 1 {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

/// What a pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassOutcome {
    pub index: u32,
    pub duration_ns: u64,
    /// Whether its output equals the first pass's (`None`: not checked).
    pub matches_first: Option<bool>,
}

/// Whether every checked pass of `outcomes` wrote the same bytes as the first (`None`: none
/// was checked): `LoopSummary::deterministic`, for the pass loop and for passes a caller ran
/// in a loop of its own (`profile --variant`'s alternation).
pub fn deterministic(outcomes: &[PassOutcome]) -> Option<bool> {
    let checked: Vec<bool> = outcomes.iter().filter_map(|o| o.matches_first).collect();
    (!checked.is_empty()).then(|| checked.iter().all(|&m| m))
}

/// A dispatch as tools see it (owned; `raw` lends the C view of it).
#[derive(Debug, Clone)]
pub struct DispatchView {
    kernel: CString,
    demangled: CString,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub cluster: [u32; 3],
    pub dynamic_shared_bytes: u32,
    pub arg_bytes: Vec<u8>,
    pub stream: u64,
    pub launch_index: u64,
    pub match_index: u64,
    pub write_set_bytes: u64,
    pub max_passes: u32,
}

/// `kreplay_dispatch`.
#[repr(C)]
pub struct RawDispatch {
    struct_size: u32,
    kernel: *const c_char,
    demangled: *const c_char,
    grid: [u32; 3],
    block: [u32; 3],
    cluster: [u32; 3],
    dynamic_shared_bytes: u32,
    arg_bytes: *const u8,
    arg_len: u64,
    stream: u64,
    launch_index: u64,
    match_index: u64,
    write_set_bytes: u64,
    max_passes: u32,
}

/// `kreplay_pass`.
#[repr(C)]
pub struct RawPass {
    struct_size: u32,
    index: u32,
    duration_ns: u64,
    output_matches_first: i32,
}

impl RawPass {
    fn new(index: u32, outcome: Option<&PassOutcome>) -> RawPass {
        RawPass {
            struct_size: std::mem::size_of::<RawPass>() as u32,
            index,
            duration_ns: outcome.map_or(0, |o| o.duration_ns),
            output_matches_first: match outcome.and_then(|o| o.matches_first) {
                Some(true) => 1,
                Some(false) => 0,
                None => -1,
            },
        }
    }
}

type ConfigFn = unsafe extern "C" fn(*mut c_void, *const RawDispatch) -> u32;
type PassFn = unsafe extern "C" fn(*mut c_void, *const RawDispatch, *const RawPass) -> i32;
type FinishFn = unsafe extern "C" fn(*mut c_void, *const RawDispatch, u32, i32);

/// `kreplay_tool`.
#[repr(C)]
pub struct RawTool {
    struct_size: u32,
    user: *mut c_void,
    config: Option<ConfigFn>,
    begin: Option<PassFn>,
    end: Option<PassFn>,
    finish: Option<FinishFn>,
}

type InitFn = unsafe extern "C" fn(u32, *mut RawTool) -> i32;

impl DispatchView {
    /// Names with a NUL byte are cut at it (C strings cannot carry one).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kernel: &str,
        demangled: &str,
        grid: [u32; 3],
        block: [u32; 3],
        cluster: [u32; 3],
        dynamic_shared_bytes: u32,
        arg_bytes: Vec<u8>,
        max_passes: u32,
    ) -> DispatchView {
        let c = |s: &str| CString::new(s.split('\0').next().unwrap_or("")).unwrap_or_default();
        DispatchView {
            kernel: c(kernel),
            demangled: c(demangled),
            grid,
            block,
            cluster,
            dynamic_shared_bytes,
            arg_bytes,
            stream: 0,
            launch_index: 0,
            match_index: 0,
            write_set_bytes: 0,
            max_passes: max_passes.max(1),
        }
    }

    pub fn kernel(&self) -> &str {
        self.kernel.to_str().unwrap_or("")
    }

    pub fn demangled(&self) -> &str {
        self.demangled.to_str().unwrap_or("")
    }

    /// The C view; it borrows `self`.
    fn raw(&self) -> RawDispatch {
        RawDispatch {
            struct_size: std::mem::size_of::<RawDispatch>() as u32,
            kernel: self.kernel.as_ptr(),
            demangled: self.demangled.as_ptr(),
            grid: self.grid,
            block: self.block,
            cluster: self.cluster,
            dynamic_shared_bytes: self.dynamic_shared_bytes,
            arg_bytes: self.arg_bytes.as_ptr(),
            arg_len: self.arg_bytes.len() as u64,
            stream: self.stream,
            launch_index: self.launch_index,
            match_index: self.match_index,
            write_set_bytes: self.write_set_bytes,
            max_passes: self.max_passes,
        }
    }
}

/// A tool: kreplay's own (timing, counters) or a library's (`CTool`).
pub trait PassTool {
    /// CONFIG: how many passes `d` runs.
    fn config(&mut self, d: &DispatchView) -> PassRequest;
    fn begin(&mut self, _d: &DispatchView, _pass: u32) -> Flow {
        Flow::Continue
    }
    fn end(&mut self, _d: &DispatchView, _outcome: &PassOutcome) -> Flow {
        Flow::Continue
    }
    fn finish(&mut self, _d: &DispatchView, _passes: u32, _deterministic: Option<bool>) {}
}

/// kreplay's own timing as a tool: a fixed number of passes (at least one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedPasses(pub u32);

impl PassTool for FixedPasses {
    fn config(&mut self, _d: &DispatchView) -> PassRequest {
        PassRequest::Passes(self.0.max(1))
    }
}

/// The GPU side of the loop.
pub trait PassRunner {
    type Error;
    /// Puts back the memory the kernel writes: before every pass or warm-up run that follows
    /// another run of the kernel, so each sees the captured input. Never inside a pass's
    /// measured window.
    fn restore(&mut self) -> Result<(), Self::Error>;
    /// Readies pass `pass` once its memory is in place, before the tool's BEGIN (the L2 is
    /// emptied here, so a tool that starts counters at BEGIN sees the dispatch alone).
    fn prepare(&mut self, _pass: u32) -> Result<(), Self::Error> {
        Ok(())
    }
    /// Runs the dispatch once, as pass `pass`.
    fn run(&mut self, pass: u32) -> Result<PassOutcome, Self::Error>;
    /// An untimed run before the passes (`--warmup`), after a restore when `restore_first`;
    /// no tool sees it. By default: a pass whose outcome is dropped.
    fn warm_up(&mut self, restore_first: bool) -> Result<(), Self::Error> {
        if restore_first {
            self.restore()?;
        }
        self.run(0).map(|_| ())
    }
}

/// How `drive_from` starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Start {
    /// Untimed runs before pass 0, unseen by the tool.
    pub warmup: u32,
    /// The kernel ran on this memory before the loop (earlier passes of another loop), so
    /// even the first run restores first.
    pub ran_before: bool,
}

impl Start {
    /// Whether warm-up run `w` restores memory first.
    pub fn restores_before_warmup(&self, w: u32) -> bool {
        w > 0 || self.ran_before
    }

    /// Whether pass 0 restores memory first.
    pub fn restores_before_first_pass(&self) -> bool {
        self.warmup > 0 || self.ran_before
    }
}

/// What `drive` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopSummary {
    /// Times the dispatch ran (at least once: the application needs its effect).
    pub passes: u32,
    /// The tool skipped the dispatch.
    pub skipped: bool,
    /// The tool asked to stop (from BEGIN or END).
    pub stopped_by_tool: bool,
    /// The loop ended at `max_passes` while the tool wanted more.
    pub capped: bool,
    /// Every checked pass wrote the same bytes as the first (`None`: none checked).
    pub deterministic: Option<bool>,
    pub outcomes: Vec<PassOutcome>,
}

/// The pass loop, split where the first pass runs: in-process replay (`kreplay profile`) lets
/// the application's own launch be the first pass, between `PassLoop::begin` (at the launch's
/// callback, before it) and `PassLoop::after_first` (after it completed). `drive` is both
/// halves around a pass the runner makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassLoop {
    wanted: u32,
    until_stop: bool,
    cap: u32,
    /// BEGIN of pass 0 asked for no pass after it.
    last: bool,
}

impl PassLoop {
    /// CONFIG, then BEGIN of pass 0; `None` when the tool skips the dispatch (it runs once,
    /// untouched by the tool).
    pub fn begin(tool: &mut dyn PassTool, d: &DispatchView) -> Option<PassLoop> {
        let (wanted, until_stop) = match tool.config(d) {
            PassRequest::Skip => return None,
            PassRequest::Passes(n) => (n, false),
            PassRequest::UntilStop => (u32::MAX, true),
        };
        let last = tool.begin(d, 0) == Flow::Stop;
        Some(PassLoop {
            wanted,
            until_stop,
            cap: d.max_passes.max(1),
            last,
        })
    }

    /// END of pass 0 (which ran with outcome `first`), the further passes through `runner`
    /// (memory restored before each), and FINISH.
    pub fn after_first<R: PassRunner>(
        self,
        tool: &mut dyn PassTool,
        d: &DispatchView,
        first: PassOutcome,
        runner: &mut R,
    ) -> Result<LoopSummary, R::Error> {
        let mut outcomes = vec![first];
        let mut pass = 1u32;
        let mut stopped = tool.end(d, &first) == Flow::Stop || self.last;
        while !stopped && pass < self.wanted.min(self.cap) {
            runner.restore()?;
            runner.prepare(pass)?;
            let last = tool.begin(d, pass) == Flow::Stop;
            let o = runner.run(pass)?;
            outcomes.push(o);
            pass += 1;
            if tool.end(d, &o) == Flow::Stop || last {
                stopped = true;
            }
        }
        let deterministic = deterministic(&outcomes);
        tool.finish(d, pass, deterministic);
        Ok(LoopSummary {
            passes: pass,
            skipped: false,
            stopped_by_tool: stopped,
            capped: !stopped && (self.until_stop || self.wanted > self.cap) && pass == self.cap,
            deterministic,
            outcomes,
        })
    }
}

/// Runs the dispatch as `tool` asks, on memory as the kernel found it. Memory is restored
/// before each pass after the first, so the memory after the last pass is one run's effect,
/// as the application expects.
pub fn drive<R: PassRunner>(
    tool: &mut dyn PassTool,
    d: &DispatchView,
    runner: &mut R,
) -> Result<LoopSummary, R::Error> {
    drive_from(tool, d, runner, Start::default())
}

/// `drive` after `start.warmup` untimed runs, and on memory an earlier run changed when
/// `start.ran_before`: every run but a very first restores memory before it.
pub fn drive_from<R: PassRunner>(
    tool: &mut dyn PassTool,
    d: &DispatchView,
    runner: &mut R,
    start: Start,
) -> Result<LoopSummary, R::Error> {
    for w in 0..start.warmup {
        runner.warm_up(start.restores_before_warmup(w))?;
    }
    if start.restores_before_first_pass() {
        runner.restore()?;
    }
    runner.prepare(0)?;
    match PassLoop::begin(tool, d) {
        None => {
            let o = runner.run(0)?;
            Ok(LoopSummary {
                passes: 1,
                skipped: true,
                stopped_by_tool: false,
                capped: false,
                deterministic: o.matches_first.map(|_| true),
                outcomes: vec![o],
            })
        }
        Some(l) => {
            let first = runner.run(0)?;
            l.after_first(tool, d, first, runner)
        }
    }
}

/// Why a tool library was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("cannot load the tool {path}: {why}")]
    Load { path: String, why: String },
    #[error("the tool {path} exports no kreplay_tool_init (see kreplay_tool.h)")]
    NoInit { path: String },
    #[error("the tool {path} declined to start (kreplay_tool_init returned {code})")]
    Declined { path: String, code: i32 },
}

/// A tool from a shared library exporting `kreplay_tool_init`.
pub struct CTool {
    table: RawTool,
    // Unloaded last: the callbacks live in it.
    _lib: libloading::Library,
}

// SAFETY: the table holds the tool's callbacks and its `user` pointer, which kreplay_tool.h
// lets kreplay call from whichever application thread launched the kernel; kreplay calls them
// one at a time (the tool is behind a lock), never concurrently.
unsafe impl Send for CTool {}

impl CTool {
    pub fn load(path: &Path) -> Result<CTool, ToolError> {
        let name = path.display().to_string();
        // SAFETY: loading a library runs its initialisers; the user named this library as the
        // tool to run in this process, as with any LD_PRELOAD or plugin.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| ToolError::Load {
            path: name.clone(),
            why: e.to_string(),
        })?;
        // SAFETY: the symbol's type is the header's kreplay_tool_init_fn.
        let init: libloading::Symbol<'_, InitFn> = unsafe { lib.get(b"kreplay_tool_init\0") }
            .map_err(|_| ToolError::NoInit { path: name.clone() })?;
        let mut table = RawTool {
            struct_size: std::mem::size_of::<RawTool>() as u32,
            user: std::ptr::null_mut(),
            config: None,
            begin: None,
            end: None,
            finish: None,
        };
        // SAFETY: `table` is a valid, initialised kreplay_tool the tool may fill.
        let code = unsafe { init(API_VERSION, &mut table) };
        if code != 0 {
            return Err(ToolError::Declined { path: name, code });
        }
        Ok(CTool { table, _lib: lib })
    }
}

impl PassTool for CTool {
    fn config(&mut self, d: &DispatchView) -> PassRequest {
        let Some(f) = self.table.config else {
            return PassRequest::Passes(1);
        };
        let raw = d.raw();
        // SAFETY: the tool's own callback with its own user pointer and a dispatch view that
        // lives until the call returns.
        PassRequest::from_raw(unsafe { f(self.table.user, &raw) })
    }

    fn begin(&mut self, d: &DispatchView, pass: u32) -> Flow {
        let Some(f) = self.table.begin else {
            return Flow::Continue;
        };
        let (raw, p) = (d.raw(), RawPass::new(pass, None));
        // SAFETY: as in `config`; both views live until the call returns.
        Flow::from_raw(unsafe { f(self.table.user, &raw, &p) })
    }

    fn end(&mut self, d: &DispatchView, o: &PassOutcome) -> Flow {
        let Some(f) = self.table.end else {
            return Flow::Continue;
        };
        let (raw, p) = (d.raw(), RawPass::new(o.index, Some(o)));
        // SAFETY: as in `begin`.
        Flow::from_raw(unsafe { f(self.table.user, &raw, &p) })
    }

    fn finish(&mut self, d: &DispatchView, passes: u32, deterministic: Option<bool>) {
        let Some(f) = self.table.finish else {
            return;
        };
        let raw = d.raw();
        let det = deterministic.map_or(-1, i32::from);
        // SAFETY: as in `config`.
        unsafe { f(self.table.user, &raw, passes, det) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_are_deterministic_when_every_checked_one_matches_the_first() {
        let pass = |matches_first| PassOutcome {
            index: 0,
            duration_ns: 1,
            matches_first,
        };
        assert_eq!(deterministic(&[]), None);
        assert_eq!(deterministic(&[pass(None), pass(None)]), None);
        assert_eq!(deterministic(&[pass(None), pass(Some(true))]), Some(true));
        assert_eq!(
            deterministic(&[pass(Some(true)), pass(None), pass(Some(false))]),
            Some(false)
        );
    }

    /// A runner that records what the loop asked of the GPU (a stand-in for the GPU in these
    /// CPU tests of the control flow only). Its log is shared with `Logged`, so the order of
    /// the runner's and the tool's steps shows.
    struct Recorded {
        log: Log,
        durations: Vec<u64>,
        differs_at: Option<u32>,
        /// Whether passes check their output (as the player's under --verify).
        checks: bool,
    }

    type Log = std::rc::Rc<std::cell::RefCell<Vec<String>>>;

    impl Recorded {
        fn log(&self) -> Vec<String> {
            self.log.borrow().clone()
        }
    }

    impl PassRunner for Recorded {
        type Error = String;
        fn restore(&mut self) -> Result<(), String> {
            self.log.borrow_mut().push("restore".into());
            Ok(())
        }
        fn prepare(&mut self, pass: u32) -> Result<(), String> {
            self.log.borrow_mut().push(format!("prepare {pass}"));
            Ok(())
        }
        fn run(&mut self, pass: u32) -> Result<PassOutcome, String> {
            self.log.borrow_mut().push(format!("run {pass}"));
            Ok(PassOutcome {
                index: pass,
                duration_ns: self.durations.get(pass as usize).copied().unwrap_or(100),
                matches_first: self.checks.then_some(self.differs_at != Some(pass)),
            })
        }
        fn warm_up(&mut self, restore_first: bool) -> Result<(), String> {
            let what = if restore_first {
                "warm restored"
            } else {
                "warm"
            };
            self.log.borrow_mut().push(what.into());
            Ok(())
        }
    }

    fn runner() -> Recorded {
        Recorded {
            log: Log::default(),
            durations: vec![],
            differs_at: None,
            checks: true,
        }
    }

    fn view(max: u32) -> DispatchView {
        DispatchView::new(
            "_Z5saxpyifPKfPf",
            "saxpy(int, float, float const*, float*)",
            [4, 1, 1],
            [256, 1, 1],
            [0; 3],
            0,
            vec![1, 2, 3],
            max,
        )
    }

    struct Fixed(PassRequest, Option<u32>);

    impl PassTool for Fixed {
        fn config(&mut self, _: &DispatchView) -> PassRequest {
            self.0
        }
        fn end(&mut self, _: &DispatchView, o: &PassOutcome) -> Flow {
            if Some(o.index) == self.1 {
                Flow::Stop
            } else {
                Flow::Continue
            }
        }
    }

    #[test]
    fn passes_are_restored_between_and_counted() {
        let mut r = runner();
        let s = drive(&mut Fixed(PassRequest::Passes(3), None), &view(100), &mut r).unwrap();
        assert_eq!(
            r.log(),
            [
                "prepare 0",
                "run 0",
                "restore",
                "prepare 1",
                "run 1",
                "restore",
                "prepare 2",
                "run 2"
            ]
        );
        assert_eq!((s.passes, s.stopped_by_tool, s.capped), (3, false, false));
        assert_eq!(s.deterministic, Some(true));
    }

    #[test]
    fn skip_runs_once_and_until_stop_ends_at_the_tool_or_the_cap() {
        let mut r = runner();
        let s = drive(&mut Fixed(PassRequest::Skip, None), &view(100), &mut r).unwrap();
        assert_eq!((s.passes, s.skipped), (1, true));
        assert_eq!(r.log(), ["prepare 0", "run 0"]);
        let mut r = runner();
        let s = drive(
            &mut Fixed(PassRequest::UntilStop, Some(4)),
            &view(100),
            &mut r,
        )
        .unwrap();
        assert_eq!((s.passes, s.stopped_by_tool, s.capped), (5, true, false));
        let mut r = runner();
        let s = drive(&mut Fixed(PassRequest::UntilStop, None), &view(7), &mut r).unwrap();
        assert_eq!((s.passes, s.stopped_by_tool, s.capped), (7, false, true));
        let mut r = runner();
        let s = drive(&mut Fixed(PassRequest::Passes(50), None), &view(7), &mut r).unwrap();
        assert_eq!((s.passes, s.capped), (7, true));
    }

    #[test]
    fn a_pass_that_differs_makes_the_dispatch_nondeterministic() {
        let mut r = runner();
        r.differs_at = Some(2);
        let s = drive(&mut Fixed(PassRequest::Passes(4), None), &view(100), &mut r).unwrap();
        assert_eq!(s.deterministic, Some(false));
    }

    /// A tool that logs its callbacks into the runner's log; it asks `request` and says stop
    /// at BEGIN of `stop_at_begin` or at END of `stop_at_end` (as the counters do when the
    /// range profiler fails to start, or has every pass).
    struct Logged {
        log: Log,
        request: PassRequest,
        stop_at_begin: Option<u32>,
        stop_at_end: Option<u32>,
        finished: Option<(u32, Option<bool>)>,
    }

    fn logged(log: &Log, request: PassRequest) -> Logged {
        Logged {
            log: log.clone(),
            request,
            stop_at_begin: None,
            stop_at_end: None,
            finished: None,
        }
    }

    impl PassTool for Logged {
        fn config(&mut self, _: &DispatchView) -> PassRequest {
            self.log.borrow_mut().push("config".into());
            self.request
        }
        fn begin(&mut self, _: &DispatchView, pass: u32) -> Flow {
            self.log.borrow_mut().push(format!("begin {pass}"));
            if self.stop_at_begin == Some(pass) {
                Flow::Stop
            } else {
                Flow::Continue
            }
        }
        fn end(&mut self, _: &DispatchView, o: &PassOutcome) -> Flow {
            self.log.borrow_mut().push(format!("end {}", o.index));
            if self.stop_at_end == Some(o.index) {
                Flow::Stop
            } else {
                Flow::Continue
            }
        }
        fn finish(&mut self, _: &DispatchView, passes: u32, deterministic: Option<bool>) {
            self.finished = Some((passes, deterministic));
        }
    }

    // Catches: a restore or the L2 preparation after BEGIN (inside a tool's measurement:
    // the counters would count the sweep), or END before the pass ran.
    #[test]
    fn memory_and_cache_are_ready_before_the_tool_sees_a_pass_begin() {
        let mut r = runner();
        let mut t = logged(&r.log, PassRequest::Passes(2));
        drive(&mut t, &view(100), &mut r).unwrap();
        assert_eq!(
            r.log(),
            [
                "prepare 0",
                "config",
                "begin 0",
                "run 0",
                "end 0",
                "restore",
                "prepare 1",
                "begin 1",
                "run 1",
                "end 1"
            ]
        );
        assert_eq!(t.finished, Some((2, Some(true))));
    }

    // Catches: warm-up runs seen by the tool or counted as passes, a warm-up that does not
    // restore after the one before it, or pass 0 run on memory a warm-up changed.
    #[test]
    fn warm_up_runs_come_first_unseen_and_every_run_after_another_restores() {
        let mut r = runner();
        let mut t = logged(&r.log, PassRequest::Passes(2));
        let start = Start {
            warmup: 2,
            ran_before: false,
        };
        let s = drive_from(&mut t, &view(100), &mut r, start).unwrap();
        assert_eq!(
            r.log(),
            [
                "warm",
                "warm restored",
                "restore",
                "prepare 0",
                "config",
                "begin 0",
                "run 0",
                "end 0",
                "restore",
                "prepare 1",
                "begin 1",
                "run 1",
                "end 1"
            ]
        );
        assert_eq!((s.passes, s.outcomes.len()), (2, 2));
    }

    // Catches: the counter passes after the timed ones run pass 0 on the timed passes'
    // output (`ran_before` ignored), for a skipping tool too.
    #[test]
    fn a_loop_after_earlier_runs_restores_before_its_first_pass() {
        let start = Start {
            warmup: 0,
            ran_before: true,
        };
        let mut r = runner();
        drive_from(
            &mut Fixed(PassRequest::Passes(1), None),
            &view(9),
            &mut r,
            start,
        )
        .unwrap();
        assert_eq!(r.log(), ["restore", "prepare 0", "run 0"]);
        let mut r = runner();
        let s = drive_from(&mut Fixed(PassRequest::Skip, None), &view(9), &mut r, start).unwrap();
        assert!(s.skipped);
        assert_eq!(r.log(), ["restore", "prepare 0", "run 0"]);
        assert!(start.restores_before_warmup(0) && start.restores_before_first_pass());
        let fresh = Start::default();
        assert!(!fresh.restores_before_warmup(0) && fresh.restores_before_warmup(1));
        assert!(!fresh.restores_before_first_pass());
    }

    // Catches: the counters' loop (until stop, stopped at END when the profiler has every
    // pass) running one pass too many or too few, a BEGIN that says stop not ending the loop
    // after its pass (a failed profiler start), or such a stop reported as capped.
    #[test]
    fn until_stop_ends_after_the_pass_whose_begin_or_end_said_stop() {
        let mut r = runner();
        let mut t = logged(&r.log, PassRequest::UntilStop);
        t.stop_at_end = Some(2);
        let s = drive(&mut t, &view(256), &mut r).unwrap();
        assert_eq!((s.passes, s.stopped_by_tool, s.capped), (3, true, false));
        let mut r = runner();
        let mut t = logged(&r.log, PassRequest::UntilStop);
        t.stop_at_begin = Some(1);
        let s = drive(&mut t, &view(256), &mut r).unwrap();
        assert_eq!((s.passes, s.stopped_by_tool), (2, true));
        assert_eq!(r.log().last().map(String::as_str), Some("end 1"));
        // BEGIN of pass 0 saying stop: pass 0 alone.
        let mut r = runner();
        let mut t = logged(&r.log, PassRequest::UntilStop);
        t.stop_at_begin = Some(0);
        let s = drive(&mut t, &view(256), &mut r).unwrap();
        assert_eq!(s.passes, 1);
        assert!(!r.log().contains(&"restore".to_string()));
    }

    // Catches: `FixedPasses(0)` running no pass (the player's --passes is at least 1, and the
    // application needs its one run), or a fixed count cut or stretched.
    #[test]
    fn fixed_passes_run_exactly_their_count_and_at_least_one() {
        for (n, want) in [(0, 1), (1, 1), (8, 8)] {
            let mut r = runner();
            let s = drive(&mut FixedPasses(n), &view(want), &mut r).unwrap();
            assert_eq!(
                (s.passes, s.stopped_by_tool, s.capped),
                (want, false, false)
            );
        }
    }

    // Catches: determinism claimed for passes that were not checked (counter passes, a
    // runner without verification), or a differing pass not reported.
    #[test]
    fn determinism_is_unknown_when_no_pass_is_checked() {
        let mut r = runner();
        r.checks = false;
        let s = drive(&mut FixedPasses(3), &view(3), &mut r).unwrap();
        assert_eq!(s.deterministic, None);
        let mut r = runner();
        r.differs_at = Some(1);
        let mut t = logged(&r.log, PassRequest::Passes(3));
        let s = drive(&mut t, &view(3), &mut r).unwrap();
        assert_eq!(t.finished, Some((3, Some(false))));
        assert_eq!(s.outcomes[1].matches_first, Some(false));
    }

    /// The example tool of `testdata/tools`, compiled with the system's C compiler against the
    /// header, loaded and driven: it asks for passes until three consecutive durations agree
    /// within 5 %.
    #[test]
    fn the_c_example_tool_decides_the_passes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let src = root.join("../testdata/tools/example_tool.c");
        let dir = std::env::temp_dir().join(format!("kreplay-tool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("libexample_tool.so");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = std::process::Command::new(&cc)
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
            .arg(&lib)
            .arg(&src)
            .arg("-I")
            .arg(root.join("include"))
            .status()
            .unwrap_or_else(|e| panic!("{cc}: {e} (set CC to a C compiler)"));
        assert!(built.success(), "the example tool does not compile");
        // Only this test reads the variable; the tool reads it once, in its init.
        std::env::set_var("KREPLAY_EXAMPLE_TOOL_KERNEL", "saxpy");
        let mut tool = CTool::load(&lib).unwrap();
        let mut r = runner();
        r.durations = vec![900, 400, 120, 100, 101, 103, 100, 100];
        let s = drive(&mut tool, &view(64), &mut r).unwrap();
        // Passes 3, 4, 5 (100, 101, 103 ns) are the first three within 5 % of each other.
        assert_eq!((s.passes, s.stopped_by_tool), (6, true));
        // A kernel it is not interested in is skipped.
        let mut other = view(64);
        other.kernel = CString::new("_Z5otheri").unwrap();
        let mut r = runner();
        let s = drive(&mut tool, &other, &mut r).unwrap();
        assert!(s.skipped);
        // A library without the entry point is refused, saying so.
        let e = CTool::load(Path::new("libc.so.6")).err().unwrap();
        assert!(e.to_string().contains("kreplay_tool_init"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
