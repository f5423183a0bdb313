//! One replay from capture to report, as `kreplay play` and `kreplay.play()` both run it:
//! refuse what cannot be replayed, check the metric names before anything is uploaded, open
//! the session, run the timed passes, save the output, collect the counters. What is printed,
//! and how, stays with the front end (a progress bar, stdout kept for the report).

use kreplay_engine::counters::{MetricRequest, MetricsReport};
use kreplay_engine::tool::{CTool, ToolError};
use kreplay_engine::verify::VerifyOutcome;
use kreplay_engine::PlayError;
use kreplay_format::Capture;

use crate::play_options::PlayOptions;
use crate::report::PlayJson;
use crate::save::SavedOutput;
use crate::save_step::{save_step_problem, SavedStep};
use crate::session::{FilePages, PlayReport, Session};

/// What the front end hears while a replay runs; every method does nothing unless overridden.
pub trait PlayObserver {
    /// `done` of `total` bytes of captured memory are on the device.
    fn loading(&mut self, _done: u64, _total: u64) {}
    /// The memory is on the device: loading is over.
    fn loaded(&mut self) {}
    /// Something the user should know before the replay runs (also kept in the outcome).
    fn warning(&mut self, _text: &str) {}
}

/// An observer that hears nothing.
impl PlayObserver for () {}

/// What a replay produced.
#[derive(Debug)]
pub struct PlayOutcome {
    pub report: PlayReport,
    /// With `metrics` asked for.
    pub metrics: Option<MetricsReport>,
    /// With `save_output` asked for.
    pub saved: Option<SavedOutput>,
    /// With `save_step` asked for.
    pub saved_step: Option<SavedStep>,
    /// What was told to the observer's `warning`, in order.
    pub warnings: Vec<String>,
}

impl PlayOutcome {
    /// The `kreplay play --json` object.
    pub fn json(&self) -> PlayJson<'_> {
        PlayJson::new(&self.report, self.metrics.as_ref(), self.saved.as_ref())
            .with_saved_step(self.saved_step.as_ref())
    }

    /// Whether the replay's output is wrong: see `verification_failed`.
    pub fn verification_failed(&self) -> bool {
        verification_failed(&self.report.verify)
    }
}

/// Whether a verification says the output is wrong (`kreplay play` exits 1). A
/// non-deterministic kernel is reported as such, not as wrong.
pub fn verification_failed(v: &VerifyOutcome) -> bool {
    v.checked && !v.matched && v.deterministic
}

/// Why a replay stopped, by stage; front ends word it with the capture's name.
#[derive(Debug, thiserror::Error)]
pub enum PlayFailure {
    /// A salvaged capture lost what the dispatch needs (refused before any GPU work).
    #[error("cannot be replayed: {}", .0.join("; "))]
    Blocked(Vec<String>),
    /// The `tool` library could not be loaded or declined to start (before any GPU work).
    #[error(transparent)]
    Tool(ToolError),
    /// The metric names, or the device they are checked on (before any upload).
    #[error("cannot collect counters")]
    Counters(#[source] PlayError),
    /// Opening the session: the device, the memory, the module.
    #[error("cannot replay")]
    Open(#[source] PlayError),
    /// The passes. `heap_note`: the recorder could not capture the device heap the kernel
    /// reads (the likely reason).
    #[error("replay failed")]
    Run {
        #[source]
        source: PlayError,
        heap_note: Option<String>,
    },
    /// Writing `save_output`.
    #[error("cannot save the replay's output")]
    Save(#[source] PlayError),
    /// Writing `save_step`.
    #[error("cannot save the step")]
    SaveStep(#[source] PlayError),
    /// The counter passes.
    #[error("counter collection failed")]
    Metrics(#[source] PlayError),
}

impl PlayFailure {
    /// The cause, when another error is one.
    pub fn cause(&self) -> Option<&PlayError> {
        match self {
            PlayFailure::Blocked(_) | PlayFailure::Tool(_) => None,
            PlayFailure::Counters(e)
            | PlayFailure::Open(e)
            | PlayFailure::Save(e)
            | PlayFailure::SaveStep(e)
            | PlayFailure::Metrics(e)
            | PlayFailure::Run { source: e, .. } => Some(e),
        }
    }
}

/// The annotation the recorder leaves when it could not capture the device heap the kernel
/// reads: the replay will likely fault.
pub fn device_heap_note<'a>(cap: &'a Capture<'_>) -> Option<&'a str> {
    cap.annotations
        .iter()
        .find(|a| a.key == kreplay_format::DEVICE_HEAP_ANNOTATION)
        .map(|a| a.value.as_str())
}

/// `--save-output` and `--save-step` write what the device holds as a capture's input or
/// output; of a capture by touched pages the device holds `ABSENT_FILL` where the capture
/// holds nothing, which a saved capture would take for the application's bytes.
fn absent_output_refusal(cap: &Capture<'_>, options: &PlayOptions) -> Option<String> {
    let option = if options.save_output.is_some() {
        "--save-output"
    } else if options.save_step.is_some() {
        "--save-step"
    } else {
        return None;
    };
    cap.has_extents().then(|| {
        format!(
            "play {option} does not take a capture by touched pages yet: the replay holds its \
             absent bytes as a fill, which the saved capture would take for memory (play it \
             without {option})"
        )
    })
}

/// Replays `cap` as `options` ask. `release` is told which bytes of the capture's file the
/// replay is done with (a capture larger than host memory replays in bounded memory).
pub fn play<'c>(
    cap: &'c Capture<'c>,
    options: &PlayOptions,
    release: FilePages<'c>,
    observer: &mut dyn PlayObserver,
) -> Result<PlayOutcome, PlayFailure> {
    let blockers = kreplay_format::absent::unreplayable(cap);
    if !blockers.is_empty() {
        return Err(PlayFailure::Blocked(blockers));
    }
    if let Some(option) = crate::range::unsupported_option(options) {
        kreplay_format::range::refuse_range(cap, option)
            .map_err(|why| PlayFailure::Blocked(vec![why]))?;
    }
    if let Some(why) = absent_output_refusal(cap, options) {
        return Err(PlayFailure::Blocked(vec![why]));
    }
    if let Some(why) = options
        .save_step
        .as_ref()
        .and_then(|s| save_step_problem(cap, s.index))
    {
        return Err(PlayFailure::Blocked(vec![why]));
    }
    // The tool's initialiser runs before any GPU work: a bad library costs nothing.
    let mut tool = match &options.tool {
        Some(path) => Some((CTool::load(path).map_err(PlayFailure::Tool)?, path)),
        None => None,
    };
    let request = metric_request(options).map_err(PlayFailure::Counters)?;
    let mut session = Session::open_with_progress(
        cap,
        &options.open_options(),
        &mut |done, total| observer.loading(done, total),
        release,
    )
    .map_err(PlayFailure::Open)?;
    observer.loaded();
    let heap_note = device_heap_note(cap).map(str::to_string);
    let warnings: Vec<String> = heap_note.iter().cloned().collect();
    for w in &warnings {
        observer.warning(w);
    }
    let run = options.run_options();
    let ran = match &mut tool {
        Some((t, path)) => session.run_with_tool(&run, t, &path.display().to_string()),
        None => session.run(&run),
    };
    let mut report = ran.map_err(|source| PlayFailure::Run { source, heap_note })?;
    let saved = match &options.save_output {
        Some(s) => Some(
            session
                .save_output(&s.path, s.replace)
                .map_err(PlayFailure::Save)?,
        ),
        None => None,
    };
    let saved_step = match &options.save_step {
        Some(s) => Some(
            session
                .save_step(s.index, &s.path, s.replace)
                .map_err(PlayFailure::SaveStep)?,
        ),
        None => None,
    };
    let metrics = match &request {
        Some(req) => Some(
            session
                .collect_metrics(req, options.counter_cache())
                .map_err(PlayFailure::Metrics)?,
        ),
        None => None,
    };
    // A range's counters also go under its steps in the report (`steps[i].metrics`).
    if let (Some(range), Some(m)) = (report.range.as_mut(), metrics.as_ref()) {
        crate::range_metrics::attach(range, m);
    }
    // The session's context goes before the counters' profiler state.
    drop(session);
    drop(request);
    drop(tool);
    Ok(PlayOutcome {
        report,
        metrics,
        saved,
        saved_step,
        warnings,
    })
}

/// The counters asked for, their names checked on the device; `None` when none are.
fn metric_request(options: &PlayOptions) -> Result<Option<MetricRequest>, PlayError> {
    if options.metrics.is_empty() {
        return Ok(None);
    }
    let device = kreplay_cuda::Device::open(options.device)?;
    Ok(Some(MetricRequest::new(&device, &options.metrics)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_deterministic_mismatch_fails_verification() {
        let v = |checked, matched, deterministic| VerifyOutcome {
            checked,
            matched,
            deterministic,
            ..Default::default()
        };
        assert!(verification_failed(&v(true, false, true)));
        assert!(!verification_failed(&v(true, true, true)));
        assert!(!verification_failed(&v(true, false, false)));
        assert!(!verification_failed(&v(false, false, true)));
    }

    #[test]
    fn the_device_heap_note_is_the_recorders_annotation() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        assert_eq!(device_heap_note(&cap), None);
        cap.annotations.push(kreplay_format::Annotation {
            key: kreplay_format::DEVICE_HEAP_ANNOTATION.to_string(),
            value: "malloc in the kernel".to_string(),
        });
        assert_eq!(device_heap_note(&cap), Some("malloc in the kernel"));
    }

    /// Refused before any GPU work: this test runs on machines without one.
    #[test]
    fn a_capture_that_lost_an_argument_region_is_refused_before_the_gpu() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        let lost = cap.regions.remove(0);
        cap.salvage = Some(kreplay_format::SalvageRecord {
            dropped_regions: vec![lost],
            ..Default::default()
        });
        let options = PlayOptions {
            metrics: vec!["not a metric".into()],
            tool: Some("/nonexistent/tool.so".into()),
            ..PlayOptions::default()
        };
        match play(&cap, &options, &|_, _| {}, &mut ()) {
            Err(PlayFailure::Blocked(why)) => assert!(!why.is_empty()),
            other => panic!("not refused as blocked: {other:?}"),
        }
    }

    /// Not refused: its absent pages are filled by the session. The replay gets as far as
    /// loading the tool (before any GPU work, so this test runs on machines without one).
    // Catches: `unreplayable` counting absent bytes as a reason again.
    #[test]
    fn a_capture_by_touched_pages_is_not_blocked() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        let all = cap.regions.len();
        crate::testdata::touched(&mut cap, all, false);
        let options = PlayOptions {
            tool: Some("/nonexistent/tool.so".into()),
            ..PlayOptions::default()
        };
        match play(&cap, &options, &|_, _| {}, &mut ()) {
            Err(PlayFailure::Tool(_)) => {}
            other => panic!("not stopped at the tool: {other:?}"),
        }
    }

    // Catches: --save-output or --save-step of a capture by touched pages let through (the
    // saved capture would hold the fill as the application's bytes), or refused for a
    // capture of whole regions.
    #[test]
    fn saving_the_output_of_a_capture_by_touched_pages_is_refused() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        let save = PlayOptions {
            save_output: Some(crate::play_options::SaveOutput {
                path: "/nonexistent/out.krr".into(),
                replace: false,
            }),
            ..PlayOptions::default()
        };
        let step = PlayOptions {
            save_step: Some(crate::play_options::SaveStep {
                index: 0,
                path: "/nonexistent/step.krr".into(),
                replace: false,
            }),
            ..PlayOptions::default()
        };
        assert_eq!(absent_output_refusal(&cap, &save), None);
        assert_eq!(absent_output_refusal(&cap, &step), None);
        crate::testdata::touched(&mut cap, 1, true);
        let why = absent_output_refusal(&cap, &save).expect("refused");
        assert!(
            why.contains("--save-output") && why.contains("touched pages"),
            "{why}"
        );
        let why = absent_output_refusal(&cap, &step).expect("refused");
        assert!(why.contains("--save-step"), "{why}");
        assert_eq!(absent_output_refusal(&cap, &PlayOptions::default()), None);
        match play(&cap, &save, &|_, _| {}, &mut ()) {
            Err(PlayFailure::Blocked(why)) => assert!(why[0].contains("--save-output")),
            other => panic!("not refused: {other:?}"),
        }
    }

    /// The tool is loaded before any GPU work, after the capture is found replayable.
    #[test]
    fn a_tool_that_cannot_be_loaded_is_refused_before_the_gpu() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let cap = crate::testdata::parse(&bytes);
        let options = PlayOptions {
            tool: Some("/nonexistent/tool.so".into()),
            ..PlayOptions::default()
        };
        match play(&cap, &options, &|_, _| {}, &mut ()) {
            Err(PlayFailure::Tool(e)) => assert!(e.to_string().contains("/nonexistent/tool.so")),
            other => panic!("not refused for its tool: {other:?}"),
        }
    }

    #[test]
    fn a_blocked_capture_has_no_other_cause() {
        let f = PlayFailure::Blocked(vec!["a".into(), "b".into()]);
        assert!(f.cause().is_none());
        assert_eq!(f.to_string(), "cannot be replayed: a; b");
    }
}
