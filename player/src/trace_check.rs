//! Whether a file is a trace as `play --trace` promises it (`kreplay verify-trace`, the GPU
//! suite, the builder's tests): the Chrome trace-event "JSON Object Format" with the fields
//! each phase needs (name, ph, ts, pid, tid; dur for slices; args for counters), times that
//! never go back on a track, slices that do not overlap on their thread, and a name for every
//! thread and process an event is on. Also a summary of what it holds, for tests to check.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

/// Slices that touch within this many µs do not overlap (times are decimal fractions of µs).
const TOLERANCE_US: f64 = 1e-6;

/// What is wrong with a trace.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraceDefect {
    #[error("not a trace object: the top level must be an object with a `traceEvents` array")]
    NotATrace,
    #[error("event {index}: {what}")]
    Field { index: usize, what: String },
    #[error("event {index} ({name}): phase {ph:?} is not one a kreplay trace uses (X, C, M)")]
    Phase {
        index: usize,
        name: String,
        ph: String,
    },
    #[error(
        "event {index} ({name}): ts {ts} µs is before the previous event's {before} µs on {track}"
    )]
    Backwards {
        index: usize,
        name: String,
        ts: f64,
        before: f64,
        track: String,
    },
    #[error("event {index} ({name}): starts at {ts} µs, before the previous slice on {track} ends at {end} µs")]
    Overlap {
        index: usize,
        name: String,
        ts: f64,
        end: f64,
        track: String,
    },
    #[error("thread {tid} of process {pid} has events but no thread_name metadata")]
    UnnamedThread { pid: u64, tid: u64 },
    #[error("process {pid} has events but no process_name metadata")]
    UnnamedProcess { pid: u64 },
}

/// What a valid trace holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceSummary {
    pub events: usize,
    /// Complete slices per thread name.
    pub slices: BTreeMap<String, usize>,
    /// Slices per name (a kernel, a step, `restore`...).
    pub slice_names: BTreeMap<String, usize>,
    /// Samples per counter name.
    pub counters: BTreeMap<String, usize>,
    pub thread_names: Vec<String>,
    pub process_names: Vec<String>,
}

/// One event's fields as the checks need them.
struct Fields<'a> {
    name: &'a str,
    ph: &'a str,
    ts: f64,
    pid: u64,
    tid: u64,
    dur: Option<f64>,
    args: Option<&'a serde_json::Map<String, Value>>,
}

fn fields(index: usize, e: &Value) -> Result<Fields<'_>, TraceDefect> {
    let missing = |what: &str| TraceDefect::Field {
        index,
        what: what.to_string(),
    };
    let name = e["name"]
        .as_str()
        .ok_or_else(|| missing("no `name` string"))?;
    let ph = e["ph"].as_str().ok_or_else(|| missing("no `ph` string"))?;
    let ts = e["ts"].as_f64().filter(|t| t.is_finite() && *t >= 0.0);
    let ts = ts.ok_or_else(|| missing("no `ts` (µs, a number at least 0)"))?;
    let pid = e["pid"]
        .as_u64()
        .ok_or_else(|| missing("no `pid` integer"))?;
    let tid = e["tid"]
        .as_u64()
        .ok_or_else(|| missing("no `tid` integer"))?;
    let dur = e
        .get("dur")
        .map(|d| d.as_f64().filter(|d| d.is_finite() && *d >= 0.0));
    let dur = match (ph, dur) {
        ("X", None | Some(None)) => return Err(missing("slice without `dur` (µs, at least 0)")),
        (_, d) => d.flatten(),
    };
    let args = e["args"].as_object();
    if ph == "C" && !args.is_some_and(|a| !a.is_empty() && a.values().all(Value::is_number)) {
        return Err(missing("counter without `args` of numbers"));
    }
    if ph == "M" && !args.is_some_and(|a| a.contains_key("name") || a.contains_key("sort_index")) {
        return Err(missing("metadata without `args`"));
    }
    Ok(Fields {
        name,
        ph,
        ts,
        pid,
        tid,
        dur,
        args,
    })
}

/// Per track, the last start and the last slice's end.
#[derive(Default)]
struct Timeline {
    last: BTreeMap<String, (f64, f64)>,
}

impl Timeline {
    fn step(&mut self, index: usize, f: &Fields<'_>, track: String) -> Result<(), TraceDefect> {
        let (last_ts, end) = self.last.get(&track).copied().unwrap_or((0.0, 0.0));
        if f.ts + TOLERANCE_US < last_ts {
            return Err(TraceDefect::Backwards {
                index,
                name: f.name.to_string(),
                ts: f.ts,
                before: last_ts,
                track,
            });
        }
        if f.ph == "X" && f.ts + TOLERANCE_US < end {
            return Err(TraceDefect::Overlap {
                index,
                name: f.name.to_string(),
                ts: f.ts,
                end,
                track,
            });
        }
        let end = end.max(f.ts + f.dur.unwrap_or(0.0));
        self.last.insert(track, (f.ts, end));
        Ok(())
    }
}

/// Checks `trace` (a parsed trace file); every defect found, or what it holds.
pub fn check_trace(trace: &Value) -> Result<TraceSummary, Vec<TraceDefect>> {
    let Some(events) = trace.get("traceEvents").and_then(Value::as_array) else {
        return Err(vec![TraceDefect::NotATrace]);
    };
    let mut defects = Vec::new();
    let mut parsed = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match fields(i, e) {
            Ok(f) if !matches!(f.ph, "X" | "C" | "M") => defects.push(TraceDefect::Phase {
                index: i,
                name: f.name.to_string(),
                ph: f.ph.to_string(),
            }),
            Ok(f) => parsed.push((i, f)),
            Err(d) => defects.push(d),
        }
    }
    let summary = summarise(&parsed, events.len(), &mut defects);
    match defects.is_empty() {
        true => Ok(summary),
        false => Err(defects),
    }
}

/// The summary of `parsed`, adding the defects of order and names to `defects`.
fn summarise(
    parsed: &[(usize, Fields<'_>)],
    events: usize,
    defects: &mut Vec<TraceDefect>,
) -> TraceSummary {
    let name_of = |f: &Fields<'_>| {
        f.args
            .and_then(|a| a["name"].as_str())
            .map(str::to_string)
            .unwrap_or_default()
    };
    let threads: BTreeMap<(u64, u64), String> = parsed
        .iter()
        .filter(|(_, f)| f.ph == "M" && f.name == "thread_name")
        .map(|(_, f)| ((f.pid, f.tid), name_of(f)))
        .collect();
    let processes: BTreeMap<u64, String> = parsed
        .iter()
        .filter(|(_, f)| f.ph == "M" && f.name == "process_name")
        .map(|(_, f)| (f.pid, name_of(f)))
        .collect();
    let mut s = TraceSummary {
        events,
        thread_names: threads.values().cloned().collect(),
        process_names: processes.values().cloned().collect(),
        ..TraceSummary::default()
    };
    let mut timeline = Timeline::default();
    let mut unnamed = BTreeSet::new();
    for (i, f) in parsed.iter().filter(|(_, f)| f.ph != "M") {
        let thread = threads.get(&(f.pid, f.tid));
        if thread.is_none() && unnamed.insert((f.pid, f.tid)) {
            defects.push(TraceDefect::UnnamedThread {
                pid: f.pid,
                tid: f.tid,
            });
        }
        if !processes.contains_key(&f.pid) && unnamed.insert((f.pid, u64::MAX)) {
            defects.push(TraceDefect::UnnamedProcess { pid: f.pid });
        }
        // Counters are the process's (Perfetto keys them by name), slices the thread's.
        let track = match f.ph {
            "C" => format!("counter {:?} of process {}", f.name, f.pid),
            _ => format!("thread {} of process {}", f.tid, f.pid),
        };
        if let Err(d) = timeline.step(*i, f, track) {
            defects.push(d);
        }
        match f.ph {
            "C" => *s.counters.entry(f.name.to_string()).or_default() += 1,
            _ => {
                let t = thread.cloned().unwrap_or_else(|| format!("tid {}", f.tid));
                *s.slices.entry(t).or_default() += 1;
                *s.slice_names.entry(f.name.to_string()).or_default() += 1;
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace_build::tests::{range, range_passes, single, span};
    use crate::trace_build::{build, CounterLabel};
    use kreplay_engine::pass_trace::{GpuSpan, PassRecord, StepSpan};
    use proptest::prelude::*;
    use serde_json::json;

    fn named() -> Vec<Value> {
        vec![
            json!({"name": "process_name", "ph": "M", "ts": 0, "pid": 1, "tid": 0, "args": {"name": "p"}}),
            json!({"name": "thread_name", "ph": "M", "ts": 0, "pid": 1, "tid": 5, "args": {"name": "t"}}),
        ]
    }

    fn slice(ts: f64, dur: f64) -> Value {
        json!({"name": "k", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 5})
    }

    fn check(events: Vec<Value>) -> Result<TraceSummary, Vec<TraceDefect>> {
        check_trace(&json!({ "traceEvents": events }))
    }

    fn with(extra: Vec<Value>) -> Vec<Value> {
        named().into_iter().chain(extra).collect()
    }

    fn only_defect(events: Vec<Value>) -> TraceDefect {
        let d = check(events).expect_err("accepted");
        assert_eq!(d.len(), 1, "{d:?}");
        d.into_iter().next().unwrap()
    }

    #[test]
    fn a_file_without_trace_events_is_not_a_trace() {
        assert_eq!(
            check_trace(&json!([slice(0.0, 1.0)])),
            Err(vec![TraceDefect::NotATrace])
        );
    }

    // Catches: any one required field not checked.
    #[test]
    fn each_required_field_is_required() {
        for field in ["name", "ph", "ts", "pid", "tid", "dur"] {
            let mut e = slice(0.0, 1.0);
            e.as_object_mut().unwrap().remove(field);
            match only_defect(with(vec![e])) {
                TraceDefect::Field { index: 2, what } => assert!(what.contains(field), "{what}"),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_counter_needs_numeric_args() {
        for args in [json!(null), json!({}), json!({"value": "x"})] {
            let c = json!({"name": "c", "ph": "C", "ts": 0, "pid": 1, "tid": 5, "args": args});
            assert!(matches!(
                only_defect(with(vec![c])),
                TraceDefect::Field { .. }
            ));
        }
    }

    #[test]
    fn a_phase_kreplay_does_not_write_is_refused() {
        let b = json!({"name": "k", "ph": "B", "ts": 0, "pid": 1, "tid": 5});
        assert!(matches!(
            only_defect(with(vec![b])),
            TraceDefect::Phase { .. }
        ));
    }

    #[test]
    fn time_going_back_on_a_track_is_refused() {
        let d = only_defect(with(vec![slice(10.0, 1.0), slice(5.0, 1.0)]));
        assert!(
            matches!(d, TraceDefect::Backwards { index: 3, .. }),
            "{d:?}"
        );
        let c = |ts| json!({"name": "c", "ph": "C", "ts": ts, "pid": 1, "tid": 5, "args": {"value": 1}});
        let d = only_defect(with(vec![c(3.0), c(2.0)]));
        assert!(matches!(d, TraceDefect::Backwards { .. }), "{d:?}");
    }

    // Catches: overlap checked against the previous start instead of its end, or touching
    // slices (decimal µs) refused.
    #[test]
    fn overlapping_slices_on_a_thread_are_refused() {
        let d = only_defect(with(vec![slice(1.0, 2.0), slice(2.5, 1.0)]));
        assert!(matches!(d, TraceDefect::Overlap { index: 3, .. }), "{d:?}");
        assert!(check(with(vec![slice(0.1, 0.2), slice(0.3, 1.0)])).is_ok());
    }

    #[test]
    fn slices_on_another_thread_may_overlap() {
        let mut other = slice(1.5, 1.0);
        other["tid"] = json!(6);
        let mut events = with(vec![slice(1.0, 2.0), other]);
        events.push(json!({"name": "thread_name", "ph": "M", "ts": 0, "pid": 1, "tid": 6, "args": {"name": "u"}}));
        assert!(check(events).is_ok());
    }

    #[test]
    fn a_thread_without_a_name_is_refused() {
        let mut e = slice(0.0, 1.0);
        e["tid"] = json!(9);
        assert_eq!(
            only_defect(with(vec![e])),
            TraceDefect::UnnamedThread { pid: 1, tid: 9 }
        );
    }

    #[test]
    fn a_process_without_a_name_is_refused() {
        let events = vec![named()[1].clone(), slice(0.0, 1.0)];
        assert_eq!(only_defect(events), TraceDefect::UnnamedProcess { pid: 1 });
    }

    // Catches: the builder and the checker disagreeing on the format, or the summary
    // miscounting what the GPU suite checks (a slice per kernel per pass, the restore track,
    // the counters).
    #[test]
    fn the_builders_traces_pass_and_are_summarised() {
        let counter = CounterLabel {
            metric: "m".into(),
            unit: "byte".into(),
            value: 1.0,
        };
        let passes: Vec<PassRecord> = (0..3u32)
            .map(|p| PassRecord {
                pass: p,
                restore: (p > 0).then(|| span(p as u64 * 1_000, 100)),
                flush: None,
                timed: span(p as u64 * 1_000 + 200, 300),
                steps: vec![],
            })
            .collect();
        let t = serde_json::from_slice(&build(&single(vec![counter]), &passes).to_json()).unwrap();
        let s = check_trace(&t).expect("valid");
        assert_eq!(s.slices["replay stream"], 3);
        assert_eq!(s.slices["restore"], 2);
        assert_eq!(s.counters["m [byte]"], 6);
        let r = serde_json::from_slice(&build(&range(), &range_passes()).to_json()).unwrap();
        let s = check_trace(&r).expect("valid");
        assert_eq!((s.slices["range passes"], s.slices["stream 0x10"]), (2, 4));
        assert_eq!(s.slice_names["a"], 2);
    }

    fn pass_records() -> impl Strategy<Value = Vec<PassRecord>> {
        let span = (0u64..1 << 40, 0u64..1 << 30)
            .prop_map(|(start_ns, dur_ns)| GpuSpan { start_ns, dur_ns });
        let step = (0usize..5, span.clone()).prop_map(|(step, span)| StepSpan { step, span });
        let pass = (
            proptest::option::of(span.clone()),
            proptest::option::of(span.clone()),
            span,
            proptest::collection::vec(step, 0..6),
        );
        proptest::collection::vec(pass, 0..8).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (restore, flush, timed, steps))| PassRecord {
                    pass: i as u32,
                    restore,
                    flush,
                    timed,
                    steps,
                })
                .collect()
        })
    }

    proptest! {
        // Any records (starts in any order, steps beyond the range's, spans that overlap)
        // make a trace the checker accepts.
        #[test]
        fn any_pass_records_make_a_valid_trace(passes in pass_records(), is_range: bool) {
            let subject = if is_range { range() } else { single(vec![CounterLabel {
                metric: "m".into(), unit: String::new(), value: 2.5 }]) };
            let json: Value = serde_json::from_slice(&build(&subject, &passes).to_json()).unwrap();
            prop_assert!(check_trace(&json).is_ok(), "{:?}", check_trace(&json));
        }
    }
}
