//! Man pages and shell completions, generated from the command-line definition so they
//! never drift from `--help` (scripts/install runs these hidden subcommands).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Command;
use clap_complete::Shell;

/// `shoal man DIR`: shoal.8 and one page per subcommand (shoal-quota-report.8, ...).
#[derive(clap::Args)]
pub struct ManArgs {
    /// Where to write the pages (created if missing).
    dir: PathBuf,
}

/// `shoal completions SHELL`: the completion script on standard output.
#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    shell: Shell,
}

/// Section 8: system administration commands, as mkfs.xfs(8) and mount(8).
const SECTION: &str = "8";

pub fn man(command: Command, args: &ManArgs) -> Result<ExitCode> {
    fs::create_dir_all(&args.dir).with_context(|| format!("{}", args.dir.display()))?;
    let mut command = command;
    command.build();
    let mut written = 0;
    write_pages(&command, "shoal", &args.dir, &mut written)?;
    println!("shoal: {written} man pages in {}", args.dir.display());
    Ok(ExitCode::SUCCESS)
}

/// Writes `name.8` for `command`, then one page for each visible subcommand, named after
/// its path (`shoal-quota-report`), as git and cargo name theirs.
fn write_pages(command: &Command, name: &str, dir: &Path, written: &mut usize) -> Result<()> {
    let page = command
        .clone()
        .name(name.to_string())
        .bin_name(name.replace('-', " "));
    let mut roff = Vec::new();
    clap_mangen::Man::new(page)
        .section(SECTION)
        .render(&mut roff)
        .with_context(|| format!("rendering {name}"))?;
    let path = dir.join(format!("{name}.{SECTION}"));
    fs::write(&path, roff).with_context(|| format!("{}", path.display()))?;
    *written += 1;
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}

pub fn completions(command: Command, args: &CompletionsArgs) -> Result<ExitCode> {
    let mut command = command;
    clap_complete::generate(args.shell, &mut command, "shoal", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    /// docs/monitoring.md's glossary has one row per metric the endpoint serves, with the
    /// type and help text of the metric tables (`stats_report`, `shoal_engine::STORE_METRICS`):
    /// the tables are the home of that text, the page its copy; and no row for a metric
    /// that is gone.
    #[test]
    fn the_metrics_glossary_matches_the_tables() {
        let glossary = include_str!("../../../docs/monitoring.md");
        let families = crate::metrics_http::families();
        let mut missing = Vec::new();
        for (name, kind, help) in &families {
            if !glossary.contains(&format!("| `{name}` | {kind} | {help} |")) {
                missing.push(*name);
            }
        }
        assert!(
            missing.is_empty(),
            "docs/monitoring.md lacks or misquotes: {missing:?}"
        );
        let documented: Vec<&str> = glossary
            .lines()
            .filter_map(|line| line.strip_prefix("| `shoal_"))
            .filter_map(|rest| rest.split_once('`'))
            .map(|(name, _)| name)
            .collect();
        let stale: Vec<&&str> = documented
            .iter()
            .filter(|name| !families.iter().any(|(family, ..)| family[6..] == ***name))
            .collect();
        assert!(
            stale.is_empty(),
            "docs/monitoring.md lists gone metrics: {stale:?}"
        );
        // The endpoint describes exactly these families.
        let exposition = crate::metrics_http::render(&crate::stats_report::StatsReport::default());
        let described = exposition
            .lines()
            .filter(|line| line.starts_with("# HELP "))
            .count();
        assert_eq!(described, families.len());
    }
}
