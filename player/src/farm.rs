//! Many captures at once (`kreplay play DIR | FILE... | corpus.json`, `kreplay verify` of the
//! same forms): which captures (`inputs`), which of them this process takes (`shard`,
//! `resume`), where and how many at once (`schedule`, `gpus`), each replay in a child process
//! of its own (`child`, `play_many`, with the manifest's `checksum`s checked `ahead` of it) or
//! each verification here (`verify_many`), and what the children's ends mean (`outcome`).
//! Results are `RunRecord`s, one JSON line each; `html` makes a finished run's report page.

mod ahead;
mod checksum;
mod child;
mod gpus;
mod html;
mod inputs;
mod outcome;
mod play_many;
mod resume;
mod schedule;
mod shard;
mod verify_many;

pub use child::ChildCommand;
pub use gpus::{describe as describe_gpus, visible_count, Gpu};
pub use html::{farm_html, median_chart, FarmRun};
pub use inputs::{expand, is_manifest, names_many, Entry, InputError};
pub use outcome::{count_line, exit_status, record_of, ChildEnd};
pub use play_many::{play_many, PlayFarm};
pub use resume::{tail_repair, Done, Tail};
pub use schedule::{child_visible, choose_devices, job_count, parse_devices, DeviceChoice, Slots};
pub use shard::Shard;
pub use verify_many::{verify_many, verify_one};
