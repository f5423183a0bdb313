//! Progress on stderr for long work (verifying, loading, writing a capture, the recorder's
//! background write): a bar when stderr is a terminal and the work is large enough to take more
//! than about a second; nothing otherwise (logs and pipes get no control characters).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Work below this many bytes finishes in well under a second: no bar.
const WORTH_A_BAR: u64 = 512 << 20;

/// A byte-counting bar, or nothing.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar for `total` bytes of `what`, when stderr is a terminal and the work is large.
    pub fn bytes(what: &str, total: u64) -> Progress {
        if total < WORTH_A_BAR || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(8));
        bar.set_style(
            ProgressStyle::with_template(
                "{msg:>12} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(what.to_string());
        Progress(Some(bar))
    }

    /// `done` of `total` bytes of `what` (a new stage may change both).
    pub fn set(&self, what: &str, done: u64, total: u64) {
        if let Some(b) = &self.0 {
            if b.length() != Some(total) {
                b.set_length(total);
                b.set_message(what.to_string());
            }
            b.set_position(done);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
