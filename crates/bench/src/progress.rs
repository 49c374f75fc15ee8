//! Progress on stderr: an indicatif bar on a terminal, plain log lines otherwise.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    /// Without a terminal, progress messages are rate-limited log lines.
    last_line: Mutex<Option<Instant>>,
    quiet: bool,
}

/// Seconds between two plain progress lines when not on a terminal.
const PLAIN_LINE_EVERY_S: u64 = 10;

impl Progress {
    /// A bar only when stderr is a terminal; `quiet` silences the plain lines.
    pub fn new(quiet: bool) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(0);
            let style = ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} samples  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar
        });
        Progress {
            bar,
            last_line: Mutex::new(None),
            quiet,
        }
    }

    pub fn start(&self, total: usize) {
        if let Some(bar) = &self.bar {
            bar.set_length(total as u64);
        }
    }

    pub fn message(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(text.to_string()),
            None if !self.quiet => {
                let Ok(mut last) = self.last_line.lock() else {
                    return;
                };
                let due = last.is_none_or(|t| t.elapsed().as_secs() >= PLAIN_LINE_EVERY_S)
                    || text.starts_with("run ");
                if due {
                    eprintln!("shoal bench: {text}");
                    *last = Some(Instant::now());
                }
            }
            None => {}
        }
    }

    /// A line that stays (above the bar on a terminal).
    pub fn log(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("shoal bench: {text}")),
            None => eprintln!("shoal bench: {text}"),
        }
    }

    pub fn inc(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
