//! What a run of many captures shows: a row per capture as it finishes (file, kernel, verdict,
//! median and in-app µs; an error's text on the line below), a progress bar on stderr when it
//! is a terminal, and the summary line.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kreplay::figures::micros_or_dash;
use kreplay_player::farm::{count_line, Entry};
use kreplay_player::run_record::{RunRecord, Severity, Verdict};

use crate::out;
use crate::output::printable;

pub struct Table {
    file_width: usize,
    quiet: bool,
    header_done: bool,
    /// stdout's reader went away: nothing more is printed there.
    closed: bool,
    bar: Option<ProgressBar>,
}

/// Widest a file column gets; longer names push their row's other columns right.
const MAX_FILE_WIDTH: usize = 48;

impl Table {
    pub fn new(entries: &[Entry], quiet: bool) -> Table {
        let widest = entries.iter().map(|e| e.shown.chars().count()).max();
        let bar = (!quiet && std::io::stderr().is_terminal() && !entries.is_empty()).then(|| {
            let bar = ProgressBar::with_draw_target(
                Some(entries.len() as u64),
                ProgressDrawTarget::stderr_with_hz(8),
            );
            bar.set_style(
                ProgressStyle::with_template("{pos}/{len} [{bar:30}] {elapsed} eta {eta} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar
        });
        Table {
            file_width: widest.unwrap_or(4).clamp(4, MAX_FILE_WIDTH),
            quiet,
            header_done: false,
            closed: false,
            bar,
        }
    }

    /// No more rows nor summary on stdout (its reader went away); the bar still counts.
    pub fn stop_printing(&mut self) {
        self.closed = true;
    }

    /// Prints `r`'s row (the bar steps aside while it does).
    pub fn row(&mut self, r: &RunRecord) -> std::io::Result<()> {
        if let Some(bar) = &self.bar {
            bar.inc(1);
            bar.set_message(printable(&r.file).into_owned());
        }
        if self.quiet || self.closed {
            return Ok(());
        }
        let lines = self.lines(r);
        let print = || -> std::io::Result<()> {
            let stdout = std::io::stdout();
            let mut w = stdout.lock();
            for l in &lines {
                writeln!(w, "{l}")?;
            }
            w.flush()
        };
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    fn lines(&mut self, r: &RunRecord) -> Vec<String> {
        let width = self.file_width;
        let mut lines = Vec::new();
        if !self.header_done {
            self.header_done = true;
            lines.push(format!(
                "{:<width$}  {:<24}  {:<16}  {:>11}  {:>11}",
                "file", "kernel", "verdict", "median µs", "in-app µs"
            ));
        }
        let verdict = crate::output::verdict(
            &format!("{:<16}", r.verdict.name()),
            r.verdict.severity() == Severity::Good,
        );
        lines.push(format!(
            "{:<width$}  {:<24}  {verdict}  {:>11}  {:>11}",
            printable(&r.file),
            printable(r.kernel.as_deref().unwrap_or("-")),
            micros_or_dash(r.median_us),
            micros_or_dash(r.in_app_us),
        ));
        if let Some(e) = &r.error {
            lines.push(format!("    {}", printable(e)));
        }
        lines
    }

    /// The closing line on stdout: counts per verdict, captures skipped, wall time.
    pub fn summary(
        &mut self,
        verdicts: &[Verdict],
        skipped: usize,
        wall: Duration,
    ) -> anyhow::Result<()> {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if self.closed {
            return Ok(());
        }
        let stdout = std::io::stdout();
        let mut w = stdout.lock();
        let resumed = if skipped > 0 {
            format!(" ({skipped} already answered, skipped)")
        } else {
            String::new()
        };
        out!(
            w,
            "{} capture(s): {}{resumed}; {:.1} s",
            verdicts.len(),
            count_line(verdicts),
            wall.as_secs_f64()
        );
        Ok(())
    }
}
