//! `kreplay profile --trace FILE.json`: the profiled dispatches' timed passes as a trace in the
//! Chrome trace-event format (the one `play --trace` writes, checked by `verify-trace`).
//!
//! One process per profiled context of each application process (its pid, rank and device in
//! the name). In it: a thread per application stream with each dispatch's pass 0 (the
//! application's own launch); "kreplay passes" with the further passes (they run on a stream
//! of kreplay's, the variant's beside the original's with `--variant`); "restore" with the
//! restores and L2 flushes before them (outside the timed windows); counters (`--metrics`) as
//! counter tracks over each timed pass of their dispatch. Times are the recorder's
//! (`PassTimeline`): GPU time from CUDA events on the context's axis, each length the figure
//! the report gives. Dispatches that were not profiled are listed in the metadata.

use std::collections::BTreeMap;

use kreplay_player::trace_build::{metric_track_name, names, stream_name, Tracks};
use kreplay_player::trace_events::{Trace, TraceEvent};
use kreplay_player::GpuSpan;
use kreplay_protocol::config::{demangle, short_kernel_name};
use kreplay_protocol::report::{PassTimeline, ProfileRow, TimedPass};
use serde_json::{Map, Value};

/// The restore and L2-flush thread of each process.
const RESTORE_TID: u32 = 1;
/// The further passes' thread (kreplay's own streams).
const PASSES_TID: u32 = 2;
/// The first application stream's thread (streams follow in the order their first pass came).
const FIRST_STREAM_TID: u32 = 10;

/// One traced context of one application process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct ContextKey {
    rank: Option<u32>,
    pid: u32,
    context: u32,
    device: u32,
}

/// The trace of `rows` (as the report lists them) of a run of `command`.
pub fn trace(rows: &[ProfileRow], command: &str) -> Trace {
    let mut contexts: BTreeMap<ContextKey, Vec<(&ProfileRow, &PassTimeline)>> = BTreeMap::new();
    for r in rows {
        if let Some(t) = &r.timeline {
            let key = ContextKey {
                rank: r.rank,
                pid: r.pid,
                context: t.context,
                device: t.device,
            };
            contexts.entry(key).or_default().push((r, t));
        }
    }
    let mut events = Vec::new();
    let mut described = Vec::new();
    for (i, (key, dispatches)) in contexts.iter().enumerate() {
        let pid = i as u32 + 1;
        events.extend(process(pid, key, dispatches, command));
        described.push(context_metadata(key, dispatches));
    }
    Trace {
        events,
        display_time_unit: "ns",
        metadata: metadata(rows, command, described),
    }
}

/// A slice to place: where, what, and its arguments.
struct Placed<'a> {
    tid: u32,
    span: GpuSpan,
    name: String,
    category: &'static str,
    row: &'a ProfileRow,
    pass: &'a TimedPass,
}

/// One context's events: names, then every slice and counter sample in time order per track.
fn process(
    pid: u32,
    key: &ContextKey,
    dispatches: &[(&ProfileRow, &PassTimeline)],
    command: &str,
) -> Vec<TraceEvent> {
    let mut streams: Vec<u64> = Vec::new();
    for (_, t) in dispatches {
        if !streams.contains(&t.app_stream) {
            streams.push(t.app_stream);
        }
    }
    let stream_tid =
        |s: u64| FIRST_STREAM_TID + streams.iter().position(|x| *x == s).unwrap_or(0) as u32;
    let mut slices = Vec::new();
    for (row, t) in dispatches {
        for p in &t.passes {
            for (name, span) in [("restore", p.restore), ("L2 flush", p.flush)] {
                if let Some((start_ns, dur_ns)) = span {
                    slices.push(Placed {
                        tid: RESTORE_TID,
                        span: GpuSpan { start_ns, dur_ns },
                        name: name.to_string(),
                        category: "outside timed window",
                        row,
                        pass: p,
                    });
                }
            }
            let (tid, name) = match (p.pass, p.variant) {
                (0, _) => (stream_tid(t.app_stream), row.short_name.clone()),
                (_, false) => (PASSES_TID, row.short_name.clone()),
                (_, true) => (PASSES_TID, variant_name(row)),
            };
            slices.push(Placed {
                tid,
                span: GpuSpan {
                    start_ns: p.start_ns,
                    dur_ns: p.dur_ns,
                },
                name,
                category: "timed pass",
                row,
                pass: p,
            });
        }
    }
    // Each track in time order (a restore before its pass's flush when they start together).
    slices.sort_by_key(|s| (s.span.start_ns, s.tid, s.category == "timed pass"));
    let mut threads = vec![
        (RESTORE_TID, "restore".to_string()),
        (PASSES_TID, "kreplay passes (its own stream)".to_string()),
    ];
    threads.extend(streams.iter().map(|s| {
        (
            stream_tid(*s),
            format!("{} (application)", stream_name(Some(*s))),
        )
    }));
    let mut out = names(pid, &process_name(key, command), &threads);
    let mut tracks = Tracks::default();
    let mut samples = Vec::new();
    for s in &slices {
        let start = tracks.place(s.tid, s.span);
        out.push(slice_event(pid, s, start));
        if s.category == "timed pass" {
            for m in &s.row.metrics {
                let n = metric_track_name(&m.name, &m.unit);
                samples.push((start, n.clone(), m.value));
                samples.push((start.saturating_add(s.span.dur_ns), n, 0.0));
            }
        }
    }
    // A counter's samples in time order (a drop to 0 before a rise at the same instant).
    samples.sort_by(|a, b| a.0.cmp(&b.0).then(a.2.total_cmp(&b.2)));
    for (at, n, v) in samples {
        out.push(TraceEvent::counter(&n, pid, PASSES_TID, at, v));
    }
    out
}

fn slice_event(pid: u32, s: &Placed<'_>, start: u64) -> TraceEvent {
    let r = s.row;
    let e = TraceEvent::slice(&s.name, pid, s.tid, start, s.span.dur_ns)
        .with_category(s.category)
        .with_arg("pass", s.pass.pass)
        .with_arg("launch_index", r.launch_index)
        .with_arg("match_index", r.match_index)
        .with_arg("duration_ns", s.span.dur_ns);
    if s.category != "timed pass" {
        return e;
    }
    let mut e = e
        .with_arg("kernel", r.kernel.clone())
        .with_arg("grid", Value::from(r.grid.to_vec()))
        .with_arg("block", Value::from(r.block.to_vec()))
        .with_arg("write_set_bytes", r.write_set_bytes)
        .with_arg("variant", s.pass.variant);
    if let Some(d) = r.deterministic {
        e = e.with_arg("deterministic", d);
    }
    for m in &r.metrics {
        e = e.with_arg(&metric_track_name(&m.name, &m.unit), m.value);
    }
    e
}

/// The variant's short name (its function's, demangled), marked as the variant's.
fn variant_name(row: &ProfileRow) -> String {
    let name = match &row.variant {
        Some(v) if !v.kernel.is_empty() => short_kernel_name(&demangle(&v.kernel)),
        _ => row.short_name.clone(),
    };
    format!("{name} (variant)")
}

fn process_name(key: &ContextKey, command: &str) -> String {
    let rank = key.rank.map(|r| format!(" rank {r}")).unwrap_or_default();
    let context = match key.context {
        0 => String::new(),
        c => format!(" context {c}"),
    };
    format!(
        "kreplay profile {command}: pid {}{rank} GPU {}{context}",
        key.pid, key.device
    )
}

fn context_metadata(key: &ContextKey, dispatches: &[(&ProfileRow, &PassTimeline)]) -> Value {
    serde_json::json!({
        "pid": key.pid,
        "rank": key.rank,
        "device": key.device,
        "context": key.context,
        "origin_unix_ns": dispatches.first().map_or(0, |(_, t)| t.origin_unix_ns),
        "dispatches": dispatches.len(),
    })
}

fn metadata(rows: &[ProfileRow], command: &str, contexts: Vec<Value>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("command".into(), Value::from(command));
    m.insert(
        "tool_version".into(),
        Value::from(env!("CARGO_PKG_VERSION")),
    );
    m.insert(
        "time_axis".into(),
        Value::from(
            "GPU time from CUDA events, per context: each slice starts at its start event's \
             cuEventElapsedTime from an anchor event recorded before its dispatch's passes, \
             plus the anchor's from the context's origin event (recorded before its first \
             profiled dispatch, at origin_unix_ns host time), each anchor read against the \
             previous one; its length is the time kreplay reports (the pass, the restore, the \
             flush). Each process has its own axis: two processes (ranks) are not aligned",
        ),
    );
    m.insert("contexts".into(), Value::from(contexts));
    m.insert(
        "profiled_dispatches".into(),
        Value::from(rows.iter().filter(|r| r.timeline.is_some()).count()),
    );
    let skipped: Vec<Value> = rows
        .iter()
        .filter(|r| r.timeline.is_none())
        .map(|r| {
            serde_json::json!({
                "kernel": r.short_name,
                "launch_index": r.launch_index,
                "pid": r.pid,
                "why": r.skipped.clone().or_else(|| r.timeline_error.clone())
                    .unwrap_or_else(|| "no timeline was recorded".into()),
            })
        })
        .collect();
    if !skipped.is_empty() {
        m.insert("not_in_trace".into(), Value::from(skipped));
    }
    if rows.iter().any(|r| !r.metrics.is_empty()) {
        m.insert(
            "counters".into(),
            Value::from(
                "collected over separate counter passes after the timed ones; each \
                 dispatch's value is shown over each of its timed passes (0 between)",
            ),
        );
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_player::trace_check::check_trace;
    use kreplay_protocol::report::MetricValue;

    fn pass(pass: u32, start_ns: u64, dur_ns: u64, variant: bool) -> TimedPass {
        TimedPass {
            pass,
            variant,
            start_ns,
            dur_ns,
            restore: (pass > 0).then_some((start_ns - 3_000, 1_000)),
            flush: Some((start_ns - 2_000, 1_500)),
        }
    }

    /// A dispatch profiled with `n` passes from `at` ns, 10 µs apart, on `stream`.
    fn row(launch_index: u64, at: u64, n: u32, stream: u64) -> ProfileRow {
        ProfileRow {
            kernel: "_Z4axpyPfS_f".into(),
            short_name: "axpy".into(),
            launch_index,
            match_index: launch_index,
            pid: 42,
            durations_ns: vec![4_000; n as usize],
            timeline: Some(PassTimeline {
                context: 0,
                device: 0,
                app_stream: stream,
                origin_unix_ns: 1,
                passes: (0..n)
                    .map(|p| pass(p, at + p as u64 * 10_000, 4_000, false))
                    .collect(),
            }),
            ..Default::default()
        }
    }

    fn json(t: &Trace) -> Value {
        serde_json::from_slice(&t.to_json()).unwrap()
    }

    fn slices_on(t: &Value, tid: u64) -> Vec<&Value> {
        t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["tid"] == tid)
            .collect()
    }

    // Catches: pass 0 (the application's launch) not on the application's stream, further
    // passes or restores on the wrong thread, a pass missing or doubled, a trace the checker
    // (the same as `verify-trace`'s) refuses.
    #[test]
    fn each_dispatch_is_pass_0_on_its_stream_and_the_rest_on_kreplays() {
        let rows = vec![row(3, 100_000, 3, 0x77), row(9, 500_000, 3, 0x77)];
        let t = json(&trace(&rows, "./app"));
        let summary = check_trace(&t).expect("a valid trace");
        assert_eq!(summary.process_names.len(), 1);
        let app = slices_on(&t, FIRST_STREAM_TID as u64);
        assert_eq!(app.len(), 2, "one pass 0 per dispatch");
        assert!(app
            .iter()
            .all(|e| e["args"]["pass"] == 0 && e["name"] == "axpy"));
        let further = slices_on(&t, PASSES_TID as u64);
        assert_eq!(further.len(), 4);
        assert!(further.iter().all(|e| e["args"]["pass"] != 0));
        let restore = slices_on(&t, RESTORE_TID as u64);
        // 2 restores and 3 flushes per dispatch.
        assert_eq!(restore.len(), 10);
        assert!(summary
            .thread_names
            .iter()
            .any(|n| n == "stream 0x77 (application)"));
        // GPU times: pass 1 of the second dispatch starts at 510 µs.
        assert!(further
            .iter()
            .any(|e| e["args"]["launch_index"] == 9 && e["ts"].as_f64() == Some(510.0)));
    }

    // Catches: the variant's passes named as the original, counters without their drop to 0
    // or out of time order, a skipped dispatch lost instead of listed.
    #[test]
    fn variants_counters_and_skipped_dispatches_are_shown() {
        let mut r = row(1, 50_000, 3, 0);
        if let Some(t) = &mut r.timeline {
            t.passes[1].variant = true;
        }
        r.variant = Some(kreplay_protocol::variant::VariantResult {
            kernel: "_Z7axpy_v2Pff".into(),
            ..Default::default()
        });
        r.metrics = vec![MetricValue {
            name: "dram__bytes_read.sum".into(),
            value: 4096.0,
            unit: "byte".into(),
        }];
        let skipped = ProfileRow {
            short_name: "tex".into(),
            skipped: Some("it reaches CUDA arrays".into()),
            ..Default::default()
        };
        let t = json(&trace(&[r, skipped], "./app"));
        let summary = check_trace(&t).expect("a valid trace");
        assert_eq!(summary.slice_names.get("axpy_v2 (variant)"), Some(&1));
        assert_eq!(
            summary.counters.get("dram__bytes_read.sum [byte]"),
            Some(&6)
        );
        assert_eq!(
            t["metadata"]["not_in_trace"][0]["why"],
            "it reaches CUDA arrays"
        );
        assert_eq!(t["metadata"]["profiled_dispatches"], 1);
    }

    // Catches: two ranks (or two GPUs) folded into one process, or their tracks mixed.
    #[test]
    fn each_rank_and_context_is_its_own_process() {
        let mut a = row(1, 10_000, 2, 0);
        a.rank = Some(0);
        let mut b = row(1, 10_000, 2, 0);
        b.rank = Some(1);
        b.pid = 43;
        let mut c = row(2, 90_000, 2, 0);
        c.rank = Some(1);
        c.pid = 43;
        if let Some(t) = &mut c.timeline {
            t.context = 1;
            t.device = 1;
        }
        let t = json(&trace(&[a, b, c], "mpirun ./app"));
        let summary = check_trace(&t).expect("a valid trace");
        assert_eq!(summary.process_names.len(), 3);
        assert!(summary
            .process_names
            .iter()
            .any(|n| n.ends_with("pid 43 rank 1 GPU 1 context 1")));
        assert_eq!(t["metadata"]["contexts"].as_array().unwrap().len(), 3);
    }

    // Catches: the builder changing what a real profile's rows become (the H200 training
    // step's 16 GEMM dispatches, checked in with the trace that was written from them, which
    // Perfetto's UI opens in scripts/test.sh), or rows with timelines no longer read.
    #[test]
    fn the_h200_training_steps_rows_give_the_checked_in_trace() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/traces/");
        let rows: Vec<ProfileRow> =
            std::fs::read_to_string(format!("{dir}profile-train.rows.jsonl"))
                .expect("rows")
                .lines()
                .map(|l| serde_json::from_str(l).expect("a row"))
                .collect();
        assert_eq!(rows.iter().filter(|r| r.timeline.is_some()).count(), 16);
        let written: Value = serde_json::from_slice(
            &std::fs::read(format!("{dir}profile-train.trace.json")).expect("trace"),
        )
        .expect("JSON");
        let command = "python3 /work/main/testdata/apps/torch_train_app.py 2";
        let rebuilt = json(&trace(&rows, command));
        assert_eq!(rebuilt["traceEvents"], written["traceEvents"]);
        assert!(check_trace(&rebuilt).is_ok());
    }

    // Catches: slices of one track overlapping when the event reads put two passes closer
    // than their lengths (cuEventElapsedTime's half-microsecond resolution).
    #[test]
    fn passes_read_closer_than_their_length_do_not_overlap() {
        let mut r = row(1, 100_000, 3, 0);
        if let Some(t) = &mut r.timeline {
            t.passes[2].start_ns = t.passes[1].start_ns + 3_500;
        }
        let t = json(&trace(&[r], "./app"));
        assert!(check_trace(&t).is_ok());
    }
}
