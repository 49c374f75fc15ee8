//! Progress bars for long runs (backup, restore), on stderr and only on a terminal: in a
//! pipe or a log they would be noise.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar counting bytes towards `total`, or a spinner counting bytes when the total is
/// unknown; hidden when stderr is not a terminal.
pub fn bytes(what: &str, total: Option<u64>) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let (bar, template) = match total {
        Some(total) => (
            ProgressBar::new(total),
            "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        ),
        None => (
            ProgressBar::new_spinner(),
            "{prefix} {spinner} {bytes} {bytes_per_sec} {elapsed}",
        ),
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A spinner counting `unit`s (pairs, inodes) whose total is not known in advance.
pub fn count(what: &str, unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    let template = format!("{{prefix}} {{spinner}} {{human_pos}} {unit} {{per_sec}} {{elapsed}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar.set_prefix(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A spinner while `shoal mount` waits for its daemon: opening the store replays its
/// journal, which after a crash with a big `journal=` takes a while.
pub fn opening(store: Option<&std::path::Path>) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let journal = store.map_or(0, shoal_engine::store_dir::journal_bytes);
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{prefix} {spinner} {msg} {elapsed}") {
        bar.set_style(style);
    }
    bar.set_message(format!(
        "opening the store (up to {} of journal to replay)",
        crate::units::human_bytes(journal)
    ));
    bar.set_prefix("mount");
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
