//! A trace in the Chrome trace-event format ("JSON Object Format": `traceEvents`,
//! `displayTimeUnit`, `metadata`), which Perfetto and `chrome://tracing` load: the model and
//! its JSON. Only the three phases `play --trace` writes: complete slices (`X`), counters
//! (`C`) and metadata naming the process and its threads (`M`). Times are microseconds as
//! floats, as the format wants.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::units::micros;

/// The event phases written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    /// A slice with a start and a duration.
    #[serde(rename = "X")]
    Complete,
    /// A counter sample: each argument is one series.
    #[serde(rename = "C")]
    Counter,
    /// Names and orders processes and threads.
    #[serde(rename = "M")]
    Metadata,
}

/// One trace event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceEvent {
    pub name: String,
    pub ph: Phase,
    /// Start, µs on the trace's axis.
    pub ts: f64,
    /// Length, µs (complete slices only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    pub pid: u32,
    pub tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cat: Option<&'static str>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub args: Map<String, Value>,
}

impl TraceEvent {
    /// A complete slice from `start_ns` lasting `dur_ns`.
    pub fn slice(name: &str, pid: u32, tid: u32, start_ns: u64, dur_ns: u64) -> TraceEvent {
        TraceEvent {
            name: name.to_string(),
            ph: Phase::Complete,
            ts: micros(start_ns),
            dur: Some(micros(dur_ns)),
            pid,
            tid,
            cat: None,
            args: Map::new(),
        }
    }

    /// A sample of counter `name` (series `value`) from `at_ns` on.
    pub fn counter(name: &str, pid: u32, tid: u32, at_ns: u64, value: f64) -> TraceEvent {
        let mut args = Map::new();
        args.insert("value".into(), Value::from(value));
        TraceEvent {
            name: name.to_string(),
            ph: Phase::Counter,
            ts: micros(at_ns),
            dur: None,
            pid,
            tid,
            cat: None,
            args,
        }
    }

    /// A metadata event (`process_name`, `thread_name`, `thread_sort_index`) with its
    /// arguments.
    pub fn metadata(name: &str, pid: u32, tid: u32, args: Map<String, Value>) -> TraceEvent {
        TraceEvent {
            name: name.to_string(),
            ph: Phase::Metadata,
            ts: 0.0,
            dur: None,
            pid,
            tid,
            cat: None,
            args,
        }
    }

    /// `self` with `key` set in its arguments.
    pub fn with_arg(mut self, key: &str, value: impl Into<Value>) -> TraceEvent {
        self.args.insert(key.to_string(), value.into());
        self
    }

    pub fn with_category(mut self, cat: &'static str) -> TraceEvent {
        self.cat = Some(cat);
        self
    }
}

/// A whole trace file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    #[serde(rename = "traceEvents")]
    pub events: Vec<TraceEvent>,
    /// How viewers show times ("ns": the passes are microseconds or less).
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: &'static str,
    /// Where the replay came from and how the axis was built.
    pub metadata: Map<String, Value>,
}

impl Trace {
    /// The file's bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // A `Trace` is strings, finite numbers and maps with string keys: it always serialises.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: µs written as ns (a trace 1000 times too long), integer truncation of sub-µs
    // kernels, or the phases and field names the viewers look for misspelt.
    #[test]
    fn events_serialise_as_the_format_names_them() {
        let e = TraceEvent::slice("k", 1, 10, 1_500, 250).with_arg("pass", 0);
        let v: Value = serde_json::to_value(&e).unwrap();
        assert_eq!(v["ph"], "X");
        assert_eq!(v["ts"], 1.5);
        assert_eq!(v["dur"], 0.25);
        assert_eq!((v["pid"].as_u64(), v["tid"].as_u64()), (Some(1), Some(10)));
        assert_eq!(v["args"]["pass"], 0);
        let c: Value = serde_json::to_value(TraceEvent::counter("m", 1, 10, 0, 2.0)).unwrap();
        assert_eq!((c["ph"].as_str(), c.get("dur")), (Some("C"), None));
        let t = Trace {
            events: vec![e],
            display_time_unit: "ns",
            metadata: Map::new(),
        };
        let back: Value = serde_json::from_slice(&t.to_json()).unwrap();
        assert_eq!(back["displayTimeUnit"], "ns");
        assert_eq!(back["traceEvents"].as_array().map(Vec::len), Some(1));
    }
}
