//! One line of `--json-lines`: what happened to one capture in a run of many (`kreplay play
//! DIR`, `kreplay verify DIR`). `kreplay compare` reads these lines back, so the field names
//! are a contract (docs/corpus: one object per capture per line); every optional field has a
//! default so lines written by older versions still read.

use serde::{Deserialize, Deserializer, Serialize};

/// What became of one capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Replayed; the output matched the recorded one bit for bit, every pass the same.
    Matched,
    /// Replayed; no recorded output to compare with (dropped or redacted), every pass the same.
    Deterministic,
    /// Replayed; the output differs from the recorded one.
    Mismatch,
    /// Replayed; the passes produced different outputs.
    Nondeterministic,
    /// Could not be replayed or read (the message is in `error`).
    Error,
    /// Killed after `--timeout` seconds.
    Timeout,
    /// `kreplay verify`: every checksum, the END event and the trailer are sound.
    Verified,
    /// `kreplay verify` found damage, or the file is not the one the manifest's SHA-256 names.
    Damaged,
}

/// How a verdict counts towards the run's exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Exit 0.
    Good,
    /// Exit 1: the capture ran (or was read) and the answer is wrong.
    Wrong,
    /// Exit 2: there is no answer.
    Failed,
}

impl Verdict {
    /// Every verdict, in the order summaries list them.
    pub const ALL: [Verdict; 8] = [
        Verdict::Matched,
        Verdict::Deterministic,
        Verdict::Verified,
        Verdict::Mismatch,
        Verdict::Nondeterministic,
        Verdict::Damaged,
        Verdict::Error,
        Verdict::Timeout,
    ];

    /// The word in the JSON line and the table.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Matched => "matched",
            Verdict::Deterministic => "deterministic",
            Verdict::Mismatch => "mismatch",
            Verdict::Nondeterministic => "nondeterministic",
            Verdict::Error => "error",
            Verdict::Timeout => "timeout",
            Verdict::Verified => "verified",
            Verdict::Damaged => "damaged",
        }
    }

    /// Whether the capture did what it should (`kreplay compare`'s passing side): replayed
    /// with the recorded (or, without one, a repeatable) output, or verified intact.
    pub fn passed(self) -> bool {
        self.severity() == Severity::Good
    }

    pub fn severity(self) -> Severity {
        match self {
            Verdict::Matched | Verdict::Deterministic | Verdict::Verified => Severity::Good,
            Verdict::Mismatch | Verdict::Nondeterministic | Verdict::Damaged => Severity::Wrong,
            Verdict::Error | Verdict::Timeout => Severity::Failed,
        }
    }
}

/// One capture's result, as one JSON line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The capture's path as the run named it (as given, or joined to the manifest's folder).
    pub file: String,
    /// Its path relative to the folder or manifest that named it (the path as given for a
    /// capture named on its own): the same wherever the corpus is mounted, so `--resume` and
    /// `kreplay compare` pair runs made under different roots by it. None in older lines.
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub sha256: Option<String>,
    /// Demangled short name.
    #[serde(default)]
    pub kernel: Option<String>,
    #[serde(default)]
    pub mangled: Option<String>,
    /// GPU name.
    #[serde(default)]
    pub device: Option<String>,
    #[serde(default)]
    pub device_uuid: Option<String>,
    #[serde(default)]
    pub driver: Option<String>,
    pub verdict: Verdict,
    /// The median of the timed passes; None when nothing was timed (a replay with no timed
    /// pass, an error; `--no-timing` times its one pass).
    #[serde(default, deserialize_with = "timed_or_none")]
    pub median_us: Option<f64>,
    #[serde(default, deserialize_with = "timed_or_none")]
    pub first_us: Option<f64>,
    #[serde(default)]
    pub in_app_us: Option<f64>,
    #[serde(default)]
    pub passes: Option<u32>,
    /// (max - min) / median of the timed passes, in percent.
    #[serde(default)]
    pub spread_pct: Option<f64>,
    #[serde(default)]
    pub error: Option<String>,
    /// Wall time spent on this capture (its child process, or its verification), seconds.
    #[serde(default)]
    pub wall_s: f64,
}

/// A time as a line holds it: 0 µs (or a figure that is not one) is how older writers said
/// "not timed", so it reads as None and no reader has to know.
fn timed_or_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = Option::<f64>::deserialize(d)?;
    Ok(v.filter(|us| us.is_finite() && *us > 0.0))
}

impl RunRecord {
    /// A record of `file` with `verdict` and nothing else known yet.
    pub fn new(file: impl Into<String>, verdict: Verdict) -> RunRecord {
        RunRecord {
            file: file.into(),
            key: None,
            sha256: None,
            kernel: None,
            mangled: None,
            device: None,
            device_uuid: None,
            driver: None,
            verdict,
            median_us: None,
            first_us: None,
            in_app_us: None,
            passes: None,
            spread_pct: None,
            error: None,
            wall_s: 0.0,
        }
    }

    /// With the kernel `mangled` names: `kernel` is its function name as `record -k` matches
    /// it (no namespace, template arguments or parameters).
    pub fn with_kernel(mut self, mangled: &str) -> RunRecord {
        let demangled = kreplay_protocol::config::demangle(mangled);
        self.kernel = Some(kreplay_protocol::config::base_name(&demangled));
        self.mangled = Some(mangled.to_string());
        self
    }

    /// The record as one line of JSON, without the newline.
    pub fn to_line(&self) -> String {
        // A struct of strings, numbers and options always serialises.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: a field renamed away from the contract, or a verdict spelled otherwise.
    #[test]
    fn a_record_writes_the_contracts_field_names() {
        let mut r = RunRecord::new("a/x.krr", Verdict::Nondeterministic);
        r.median_us = Some(1.5);
        r.wall_s = 0.25;
        let v: serde_json::Value = serde_json::from_str(&r.to_line()).expect("json");
        let keys: Vec<&str> = v
            .as_object()
            .expect("object")
            .keys()
            .map(|k| k.as_str())
            .collect();
        let mut want = vec![
            "file",
            "key",
            "sha256",
            "kernel",
            "mangled",
            "device",
            "device_uuid",
            "driver",
            "verdict",
            "median_us",
            "first_us",
            "in_app_us",
            "passes",
            "spread_pct",
            "error",
            "wall_s",
        ];
        want.sort_unstable();
        let mut got = keys.clone();
        got.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(v["verdict"], "nondeterministic");
        assert_eq!(v["median_us"], 1.5);
        assert!(v["sha256"].is_null());
    }

    #[test]
    fn the_kernel_is_named_by_its_function_name() {
        let r = RunRecord::new("x", Verdict::Matched).with_kernel("_Z5saxpyifPKfPf");
        assert_eq!(r.kernel.as_deref(), Some("saxpy"));
        assert_eq!(r.mangled.as_deref(), Some("_Z5saxpyifPKfPf"));
        let triton = RunRecord::new("x", Verdict::Matched).with_kernel("triton_poi_fused_0");
        assert_eq!(triton.kernel.as_deref(), Some("triton_poi_fused_0"));
    }

    #[test]
    fn a_line_reads_back_as_the_same_record() {
        let mut r = RunRecord::new("x.krr", Verdict::Timeout);
        r.sha256 = Some("ab".into());
        r.error = Some("killed after 5 s".into());
        r.passes = Some(3);
        let back: RunRecord = serde_json::from_str(&r.to_line()).expect("read");
        assert_eq!(back, r);
    }

    // Catches: a newly added field without a default, which would make older lines unreadable.
    #[test]
    fn a_line_with_only_file_and_verdict_still_reads() {
        let r: RunRecord =
            serde_json::from_str(r#"{"file":"x.krr","verdict":"damaged"}"#).expect("read");
        assert_eq!(r, RunRecord::new("x.krr", Verdict::Damaged));
    }

    // Catches: an older writer's `median_us: 0.0` for "not timed" read as a time of 0 µs.
    #[test]
    fn a_zero_time_from_an_older_writer_reads_as_not_timed() {
        let r: RunRecord = serde_json::from_str(
            r#"{"file":"x.krr","verdict":"matched","median_us":0.0,"first_us":0,"in_app_us":2.0}"#,
        )
        .expect("read");
        assert_eq!((r.median_us, r.first_us), (None, None));
        assert_eq!(r.in_app_us, Some(2.0));
        let timed: RunRecord =
            serde_json::from_str(r#"{"file":"x","verdict":"matched","median_us":1.5}"#)
                .expect("read");
        assert_eq!(timed.median_us, Some(1.5));
        let null: RunRecord =
            serde_json::from_str(r#"{"file":"x","verdict":"matched","median_us":null}"#)
                .expect("read");
        assert_eq!(null.median_us, None);
    }

    #[test]
    fn names_match_the_serde_spelling_and_severities_order_the_exit() {
        for v in Verdict::ALL {
            let json = serde_json::to_value(v).expect("json");
            assert_eq!(json, v.name());
        }
        assert_eq!(Verdict::Matched.severity(), Severity::Good);
        assert_eq!(Verdict::Deterministic.severity(), Severity::Good);
        assert_eq!(Verdict::Damaged.severity(), Severity::Wrong);
        assert_eq!(Verdict::Mismatch.severity(), Severity::Wrong);
        assert_eq!(Verdict::Timeout.severity(), Severity::Failed);
        assert!(Severity::Failed > Severity::Wrong && Severity::Wrong > Severity::Good);
    }
}
