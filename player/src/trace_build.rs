//! A replay's passes as a trace (`play --trace`): one process for the replay; a "restore"
//! thread with each pass's restore and L2 flush (outside the timed window); for one
//! dispatch, a thread for its stream with one slice per pass; for a range, a "range passes"
//! thread with each pass's timed window and, with `--per-step`, one thread per recorded
//! stream with one slice per timed step per pass; counters (with `--metrics`) as counter
//! tracks over each pass's timed window.
//!
//! The time axis is the engine's (`kreplay_engine::pass_trace`): GPU time since an origin
//! event recorded before the first timed pass, each start read from that pass's own events.
//! `cuEventElapsedTime` has about half a microsecond of resolution, so two spans that ran
//! back to back on one stream can read as overlapping by that much: a slice that would start
//! before the previous one on its track ended starts at that end instead (its length, the
//! figure the report gives, is never changed).

use std::collections::BTreeMap;

use kreplay_engine::pass_trace::{GpuSpan, PassRecord};
use serde_json::{Map, Value};

use crate::trace_events::{Trace, TraceEvent};

/// The one process of a replay's trace.
pub const PID: u32 = 1;
/// The restore and L2-flush thread.
pub const RESTORE_TID: u32 = 1;
/// A range's whole-pass thread.
pub const PASSES_TID: u32 = 2;
/// The first stream thread (streams follow in the order their first step comes).
pub const FIRST_STREAM_TID: u32 = 10;

/// A step of the replay as the trace names it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepLabel {
    /// The demangled kernel, or the step's kind (`copy-dtod`...).
    pub name: String,
    /// The application's stream handle it was recorded on (`None`: a single capture's
    /// dispatch, whose stream is not recorded).
    pub stream: Option<u64>,
    /// The step's counters (with `--metrics`), shown in its slices' arguments.
    pub metrics: BTreeMap<String, f64>,
}

/// A counter the trace shows over each timed window.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterLabel {
    pub metric: String,
    pub unit: String,
    pub value: f64,
}

/// What a trace is of, beside its passes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TraceSubject {
    /// The process's name (`kreplay play FILE`).
    pub title: String,
    /// A range capture's (else one dispatch's).
    pub range: bool,
    /// The range's steps, or the one dispatch.
    pub steps: Vec<StepLabel>,
    pub counters: Vec<CounterLabel>,
    /// The capture's origin and the replay's device, for the metadata.
    pub origin: Map<String, Value>,
}

/// How a counter track is named: the metric and its unit.
pub fn counter_name(c: &CounterLabel) -> String {
    metric_track_name(&c.metric, &c.unit)
}

/// A metric's counter track name: the metric and its unit (`dram__bytes_read.sum [byte]`).
pub fn metric_track_name(metric: &str, unit: &str) -> String {
    match unit.is_empty() {
        true => metric.to_string(),
        false => format!("{metric} [{unit}]"),
    }
}

/// A recorded stream handle as a thread name.
pub fn stream_name(handle: Option<u64>) -> String {
    match handle {
        None => "replay stream".to_string(),
        Some(0) => "stream 0 (legacy default)".to_string(),
        Some(2) => "stream 2 (per-thread default)".to_string(),
        Some(h) => format!("stream {h:#x}"),
    }
}

/// The stream threads: each distinct recorded stream, in the order of its first step.
fn stream_tids(steps: &[StepLabel]) -> Vec<Option<u64>> {
    let mut seen = Vec::new();
    for s in steps {
        if !seen.contains(&s.stream) {
            seen.push(s.stream);
        }
    }
    seen
}

/// Lays slices on one thread each, none starting before the previous one's end.
#[derive(Default)]
pub struct Tracks {
    ends: BTreeMap<u32, u64>,
}

impl Tracks {
    /// `span` placed on thread `tid`: its start, moved to the previous slice's end if need be.
    pub fn place(&mut self, tid: u32, span: GpuSpan) -> u64 {
        let end = self.ends.entry(tid).or_insert(0);
        let start = span.start_ns.max(*end);
        *end = start.saturating_add(span.dur_ns);
        start
    }
}

/// The metadata events naming process `pid` (`title`) and each of its threads (with its place
/// in the list): what every kreplay trace opens with (`play --trace`, `profile --trace`).
pub fn names(pid: u32, title: &str, threads: &[(u32, String)]) -> Vec<TraceEvent> {
    let named = |n: &str| {
        let mut m = Map::new();
        m.insert("name".into(), Value::from(n));
        m
    };
    let mut out = vec![TraceEvent::metadata("process_name", pid, 0, named(title))];
    for (tid, name) in threads {
        out.push(TraceEvent::metadata("thread_name", pid, *tid, named(name)));
        let mut order = Map::new();
        order.insert("sort_index".into(), Value::from(*tid));
        out.push(TraceEvent::metadata("thread_sort_index", pid, *tid, order));
    }
    out
}

/// The trace of `passes` of `subject`.
pub fn build(subject: &TraceSubject, passes: &[PassRecord]) -> Trace {
    let streams = stream_tids(&subject.steps);
    // A step the subject does not list (none in a real replay) goes on the first stream's.
    let stream_tid = |handle: Option<u64>| {
        let i = streams.iter().position(|s| *s == handle).unwrap_or(0);
        FIRST_STREAM_TID + i as u32
    };
    // One dispatch: its stream carries the timed windows. A range: its own thread does,
    // and the stream threads carry the steps.
    let timed_tid = match subject.range {
        true => PASSES_TID,
        false => FIRST_STREAM_TID,
    };
    let mut threads = vec![(RESTORE_TID, "restore".to_string())];
    if subject.range {
        threads.push((PASSES_TID, "range passes".to_string()));
    }
    let per_step = passes.iter().any(|p| !p.steps.is_empty());
    if !subject.range || per_step {
        threads.extend(streams.iter().map(|s| (stream_tid(*s), stream_name(*s))));
    }
    let mut events = names(PID, &subject.title, &threads);
    let mut tracks = Tracks::default();
    for p in passes {
        events.extend(outside_window(p, &mut tracks));
        events.extend(timed_window(subject, p, timed_tid, &mut tracks));
        for s in &p.steps {
            let label = subject.steps.get(s.step);
            let tid = stream_tid(label.and_then(|l| l.stream));
            let start = tracks.place(tid, s.span);
            let name = label.map_or("step", |l| l.name.as_str());
            let mut e = TraceEvent::slice(name, PID, tid, start, s.span.dur_ns)
                .with_category("step")
                .with_arg("pass", p.pass)
                .with_arg("step", s.step)
                .with_arg("duration_ns", s.span.dur_ns);
            for (m, v) in label.map(|l| &l.metrics).into_iter().flatten() {
                e = e.with_arg(m, *v);
            }
            events.push(e);
        }
    }
    Trace {
        events,
        display_time_unit: "ns",
        metadata: metadata(subject),
    }
}

/// Pass `p`'s restore and flush slices on the restore thread.
fn outside_window(p: &PassRecord, tracks: &mut Tracks) -> Vec<TraceEvent> {
    [("restore", p.restore), ("L2 flush", p.flush)]
        .into_iter()
        .filter_map(|(name, span)| {
            let span = span?;
            let start = tracks.place(RESTORE_TID, span);
            Some(
                TraceEvent::slice(name, PID, RESTORE_TID, start, span.dur_ns)
                    .with_category("outside timed window")
                    .with_arg("pass", p.pass)
                    .with_arg("duration_ns", span.dur_ns),
            )
        })
        .collect()
}

/// Pass `p`'s timed window on `tid`, and each counter's value over it.
fn timed_window(
    subject: &TraceSubject,
    p: &PassRecord,
    tid: u32,
    tracks: &mut Tracks,
) -> Vec<TraceEvent> {
    let start = tracks.place(tid, p.timed);
    let name = match (subject.range, subject.steps.first()) {
        (false, Some(k)) => k.name.clone(),
        _ => format!("pass {}", p.pass),
    };
    let mut out = vec![TraceEvent::slice(&name, PID, tid, start, p.timed.dur_ns)
        .with_category("timed pass")
        .with_arg("pass", p.pass)
        .with_arg("duration_ns", p.timed.dur_ns)];
    let end = start.saturating_add(p.timed.dur_ns);
    for c in &subject.counters {
        let n = counter_name(c);
        out.push(TraceEvent::counter(&n, PID, tid, start, c.value));
        out.push(TraceEvent::counter(&n, PID, tid, end, 0.0));
    }
    out
}

/// The origin, and how to read the axis and the counters.
fn metadata(subject: &TraceSubject) -> Map<String, Value> {
    let mut m = subject.origin.clone();
    m.insert(
        "time_axis".into(),
        Value::from(
            "GPU time from CUDA events: each slice starts at cuEventElapsedTime(origin, its \
             start event), origin recorded on the pass stream before the first timed pass; \
             its length is the time kreplay reports (timed window, restore, flush, step)",
        ),
    );
    if !subject.counters.is_empty() {
        m.insert(
            "counters".into(),
            Value::from(
                "collected over separate counter passes after the timed ones; each value is \
                 shown over every timed window (0 between)",
            ),
        );
    }
    m
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kreplay_engine::pass_trace::StepSpan;
    use serde_json::json;

    pub(crate) fn span(start_ns: u64, dur_ns: u64) -> GpuSpan {
        GpuSpan { start_ns, dur_ns }
    }

    pub(crate) fn single(counters: Vec<CounterLabel>) -> TraceSubject {
        TraceSubject {
            title: "kreplay play saxpy.krr".into(),
            range: false,
            steps: vec![StepLabel {
                name: "saxpy".into(),
                stream: None,
                metrics: BTreeMap::new(),
            }],
            counters,
            origin: Map::new(),
        }
    }

    /// A range of three steps on two streams: a kernel on 0x10, a copy on 0x20, a kernel
    /// on 0x10.
    pub(crate) fn range() -> TraceSubject {
        let label = |name: &str, stream| StepLabel {
            name: name.into(),
            stream: Some(stream),
            metrics: BTreeMap::new(),
        };
        let mut steps = vec![label("a", 0x10), label("copy-dtod", 0x20), label("b", 0x10)];
        steps[2].metrics.insert("m".into(), 7.0);
        TraceSubject {
            title: "kreplay play r.krr".into(),
            range: true,
            steps,
            counters: Vec::new(),
            origin: Map::new(),
        }
    }

    /// Two passes of a range timed step by step (steps 0 and 2 timed).
    pub(crate) fn range_passes() -> Vec<PassRecord> {
        (0..2u32)
            .map(|p| {
                let base = p as u64 * 10_000;
                PassRecord {
                    pass: p,
                    restore: (p > 0).then(|| span(base, 1_000)),
                    flush: None,
                    timed: span(base + 2_000, 5_000),
                    steps: vec![
                        StepSpan {
                            step: 0,
                            span: span(base + 2_100, 1_000),
                        },
                        StepSpan {
                            step: 2,
                            span: span(base + 4_000, 2_500),
                        },
                    ],
                }
            })
            .collect()
    }

    fn events(t: &Trace) -> Vec<Value> {
        t.events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect()
    }

    // Catches: a slice per pass missing or doubled, host-side or reordered times, the restore
    // and flush put on the kernel's thread (they are outside the timed window), a first pass
    // given a restore it did not have, counters missing their unit or their drop to 0.
    #[test]
    fn one_dispatch_is_its_passes_on_its_stream_and_restores_apart() {
        let counter = CounterLabel {
            metric: "dram__bytes_read.sum".into(),
            unit: "byte".into(),
            value: 4096.0,
        };
        let passes = vec![
            PassRecord {
                pass: 0,
                restore: None,
                flush: Some(span(0, 800)),
                timed: span(1_000, 2_500),
                steps: vec![],
            },
            PassRecord {
                pass: 1,
                restore: Some(span(4_000, 1_500)),
                flush: Some(span(5_500, 800)),
                timed: span(7_000, 2_000),
                steps: vec![],
            },
        ];
        let t = build(&single(vec![counter]), &passes);
        let c = "dram__bytes_read.sum [byte]";
        let expected = json!([
            {"name": "process_name", "ph": "M", "ts": 0.0, "pid": 1, "tid": 0, "args": {"name": "kreplay play saxpy.krr"}},
            {"name": "thread_name", "ph": "M", "ts": 0.0, "pid": 1, "tid": 1, "args": {"name": "restore"}},
            {"name": "thread_sort_index", "ph": "M", "ts": 0.0, "pid": 1, "tid": 1, "args": {"sort_index": 1}},
            {"name": "thread_name", "ph": "M", "ts": 0.0, "pid": 1, "tid": 10, "args": {"name": "replay stream"}},
            {"name": "thread_sort_index", "ph": "M", "ts": 0.0, "pid": 1, "tid": 10, "args": {"sort_index": 10}},
            {"name": "L2 flush", "ph": "X", "ts": 0.0, "dur": 0.8, "pid": 1, "tid": 1, "cat": "outside timed window", "args": {"pass": 0, "duration_ns": 800}},
            {"name": "saxpy", "ph": "X", "ts": 1.0, "dur": 2.5, "pid": 1, "tid": 10, "cat": "timed pass", "args": {"pass": 0, "duration_ns": 2500}},
            {"name": c, "ph": "C", "ts": 1.0, "pid": 1, "tid": 10, "args": {"value": 4096.0}},
            {"name": c, "ph": "C", "ts": 3.5, "pid": 1, "tid": 10, "args": {"value": 0.0}},
            {"name": "restore", "ph": "X", "ts": 4.0, "dur": 1.5, "pid": 1, "tid": 1, "cat": "outside timed window", "args": {"pass": 1, "duration_ns": 1500}},
            {"name": "L2 flush", "ph": "X", "ts": 5.5, "dur": 0.8, "pid": 1, "tid": 1, "cat": "outside timed window", "args": {"pass": 1, "duration_ns": 800}},
            {"name": "saxpy", "ph": "X", "ts": 7.0, "dur": 2.0, "pid": 1, "tid": 10, "cat": "timed pass", "args": {"pass": 1, "duration_ns": 2000}},
            {"name": c, "ph": "C", "ts": 7.0, "pid": 1, "tid": 10, "args": {"value": 4096.0}},
            {"name": c, "ph": "C", "ts": 9.0, "pid": 1, "tid": 10, "args": {"value": 0.0}},
        ]);
        assert_eq!(Value::from(events(&t)), expected);
        assert_eq!(t.display_time_unit, "ns");
        assert!(t.metadata.contains_key("time_axis") && t.metadata.contains_key("counters"));
    }

    // Catches: steps put on the pass stream instead of their recorded one, a stream thread
    // per step instead of per stream, untimed steps given slices, step counters lost, or the
    // whole-pass window missing (the median is over it).
    #[test]
    fn a_range_has_its_passes_and_each_stream_its_steps() {
        let t = build(&range(), &range_passes());
        let threads: Vec<(u32, String)> = t
            .events
            .iter()
            .filter(|e| e.name == "thread_name")
            .map(|e| (e.tid, e.args["name"].as_str().unwrap().to_string()))
            .collect();
        assert_eq!(
            threads,
            vec![
                (1, "restore".into()),
                (2, "range passes".into()),
                (10, "stream 0x10".into()),
                (11, "stream 0x20".into()),
            ]
        );
        let slices: Vec<(&str, u32, f64, f64)> = t
            .events
            .iter()
            .filter(|e| e.ph == crate::trace_events::Phase::Complete)
            .map(|e| (e.name.as_str(), e.tid, e.ts, e.dur.unwrap()))
            .collect();
        assert_eq!(
            slices,
            vec![
                ("pass 0", 2, 2.0, 5.0),
                ("a", 10, 2.1, 1.0),
                ("b", 10, 4.0, 2.5),
                ("restore", 1, 10.0, 1.0),
                ("pass 1", 2, 12.0, 5.0),
                ("a", 10, 12.1, 1.0),
                ("b", 10, 14.0, 2.5),
            ]
        );
        let b = t.events.iter().find(|e| e.name == "b").unwrap();
        assert_eq!(
            (b.args["m"].as_f64(), b.args["step"].as_u64()),
            (Some(7.0), Some(2))
        );
    }

    // Catches: a range played without --per-step given empty stream threads.
    #[test]
    fn a_range_without_step_times_has_no_stream_threads() {
        let mut passes = range_passes();
        passes.iter_mut().for_each(|p| p.steps.clear());
        let t = build(&range(), &passes);
        assert!(!t.events.iter().any(|e| e.tid >= FIRST_STREAM_TID));
    }

    // Catches: spans that read as overlapping (event resolution) written as overlapping
    // slices, or moved by changing their length (the reported figure).
    #[test]
    fn a_slice_starting_before_the_last_one_ended_starts_at_its_end() {
        let passes = vec![
            PassRecord {
                pass: 0,
                timed: span(1_000, 2_000),
                ..PassRecord::default()
            },
            PassRecord {
                pass: 1,
                restore: Some(span(2_500, 100)),
                timed: span(2_900, 1_000),
                ..PassRecord::default()
            },
        ];
        let t = build(&single(vec![]), &passes);
        let kernel: Vec<(f64, f64)> = t
            .events
            .iter()
            .filter(|e| e.name == "saxpy")
            .map(|e| (e.ts, e.dur.unwrap()))
            .collect();
        assert_eq!(kernel, vec![(1.0, 2.0), (3.0, 1.0)]);
    }

    // Catches: recorded handles 0 and 2 (the default streams) shown as bare numbers.
    #[test]
    fn default_streams_are_named_as_such() {
        assert_eq!(stream_name(Some(0)), "stream 0 (legacy default)");
        assert_eq!(stream_name(Some(2)), "stream 2 (per-thread default)");
        assert_eq!(stream_name(Some(0x7f00)), "stream 0x7f00");
        assert_eq!(stream_name(None), "replay stream");
    }
}

/// The synthetic traces checked in under `testdata/traces` (for `scripts/perfetto-check.py`
/// and as examples of the format); `KREPLAY_BLESS=1 cargo test -p kreplay-player` rewrites
/// them.
#[cfg(test)]
mod fixtures {
    use super::tests::{range, range_passes, single, span};
    use super::*;

    fn locked(name: &str, trace: &Trace) {
        let path = format!("{}/../testdata/traces/{name}", env!("CARGO_MANIFEST_DIR"));
        let bytes = trace.to_json();
        if std::env::var_os("KREPLAY_BLESS").is_some() {
            std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        let held = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{path}: {e} (KREPLAY_BLESS=1 writes it)"));
        assert!(
            held == bytes,
            "{path} differs from the builder's output (KREPLAY_BLESS=1)"
        );
    }

    // Catches: a change of the trace's layout that the checked-in examples (and the Perfetto
    // check run on them) do not show.
    #[test]
    fn the_checked_in_traces_are_the_builders() {
        let counter = CounterLabel {
            metric: "dram__bytes_read.sum".into(),
            unit: "byte".into(),
            value: 4_194_304.0,
        };
        let passes: Vec<PassRecord> = (0..3u64)
            .map(|p| PassRecord {
                pass: p as u32,
                restore: (p > 0).then(|| span(p * 20_000, 3_000)),
                flush: Some(span(p * 20_000 + 3_500, 6_000)),
                timed: span(p * 20_000 + 10_000, 8_000 + p * 100),
                steps: vec![],
            })
            .collect();
        let mut play = single(vec![counter]);
        play.origin
            .insert("capture_file".into(), "synthetic.krr".into());
        locked("synthetic-play.json", &build(&play, &passes));
        locked("synthetic-range.json", &build(&range(), &range_passes()));
    }
}
