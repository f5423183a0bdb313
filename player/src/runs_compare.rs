//! `kreplay compare BASE.jsonl NEW.jsonl`: two runs of a corpus (the JSON lines `kreplay play`
//! writes with `--json-lines`) compared capture by capture, for CI to gate on. Pure: the
//! caller reads the files and prints.

mod html;
mod pairing;
mod records;
mod report;
mod timing;
mod verdicts;

pub use html::{comparison_html, ratio_chart};
pub use pairing::PairedBy;
pub use records::{parse_runs, RecordError, RunRecord, Verdict};
pub use report::{compare_runs, run_side, CapturePair, RunSide, RunsComparison, Summary, Unpaired};
pub use timing::{TimeChange, TimeClass};
pub use verdicts::VerdictChange;
