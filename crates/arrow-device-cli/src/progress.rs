//! The progress bar: rows done, on stderr, drawn only on a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar counting rows, or nothing when hidden.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar over `total` rows (a spinner when unknown); hidden unless
    /// `enabled` and stderr is a terminal, so piped output stays clean.
    pub fn new(total: Option<u64>, enabled: bool) -> Self {
        if !enabled || !std::io::stderr().is_terminal() {
            return Self {
                bar: ProgressBar::hidden(),
            };
        }
        let bar = match total {
            Some(total) => ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
                .with_style(
                    ProgressStyle::with_template(
                        "{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} rows ({eta})",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                ),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {human_pos} rows {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        Self { bar }
    }

    /// Adds `rows` rows done.
    pub fn advance(&self, rows: u64) {
        self.bar.inc(rows);
    }

    /// Shows `message` after the count (on a bar of unknown total: a
    /// spinner), e.g. the batches so far.
    pub fn set_message(&self, message: String) {
        self.bar.set_message(message);
    }

    /// Clears the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    // An error ends the run early: clear the bar so the message stands alone.
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}
