//! Man pages and shell completions, generated from the command-line definition so they
//! never drift from `--help` (scripts/install runs these hidden subcommands).

use std::fs;
use std::path::PathBuf;
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
    let pages = pages(&command, "shoal");
    for (name, page) in &pages {
        let path = args.dir.join(format!("{name}.{SECTION}"));
        fs::write(&path, page).with_context(|| format!("{}", path.display()))?;
    }
    println!("shoal: {} man pages in {}", pages.len(), args.dir.display());
    Ok(ExitCode::SUCCESS)
}

/// Every page: `shoal` and one for each visible subcommand, named after its path
/// (`shoal-quota-report`), as git and cargo name theirs; (name, roff).
pub fn pages(command: &Command, name: &str) -> Vec<(String, Vec<u8>)> {
    let mut commands = Vec::new();
    collect(command, name, &mut commands);
    let names: Vec<String> = commands.iter().map(|(name, _)| name.clone()).collect();
    commands
        .into_iter()
        .map(|(name, command)| {
            let page = render_page(&command, &name, &names);
            (name, page)
        })
        .collect()
}

fn collect(command: &Command, name: &str, out: &mut Vec<(String, Command)>) {
    let page = command
        .clone()
        .name(name.to_string())
        .bin_name(name.replace('-', " "));
    out.push((name.to_string(), page));
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        if sub.get_name() != "help" {
            collect(sub, &format!("{name}-{}", sub.get_name()), out);
        }
    }
}

/// clap_mangen's page from the definition, with our sections (`man_sections`: EXAMPLES,
/// EXIT STATUS, FILES, SEE ALSO) before its VERSION section, or at the end.
fn render_page(command: &Command, name: &str, names: &[String]) -> Vec<u8> {
    let mut roff = Vec::new();
    // Writing into a Vec cannot fail.
    let rendered = clap_mangen::Man::new(command.clone())
        .section(SECTION)
        .render(&mut roff);
    debug_assert!(rendered.is_ok());
    let ours = crate::man_sections::render(name, names);
    let text = String::from_utf8_lossy(&roff).into_owned();
    let page = match text.find("\n.SH VERSION") {
        Some(at) => format!("{}\n{}{}", &text[..at], ours.trim_end(), &text[at..]),
        None => format!("{text}{ours}"),
    };
    page.into_bytes()
}

pub fn completions(command: Command, args: &CompletionsArgs) -> Result<ExitCode> {
    let mut command = command;
    clap_complete::generate(args.shell, &mut command, "shoal", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// The completion scripts offer the options of `shoal mount -o`.
    #[test]
    fn completions_offer_the_mount_options() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut crate::Cli::command(), "shoal", &mut script);
            let script = String::from_utf8(script).unwrap();
            for word in [
                "allow_other",
                "commit=",
                "cache=",
                "writeback=off",
                "metrics",
                "nosuid",
            ] {
                assert!(script.contains(word), "{shell}: no {word}");
            }
        }
    }

    /// Every installed page has EXAMPLES (each command that does something), EXIT STATUS,
    /// FILES and SEE ALSO, and none sends the reader to the repository's docs/.
    #[test]
    fn man_pages_read_whole_without_the_repository() {
        let mut command = crate::Cli::command();
        command.build();
        let pages = super::pages(&command, "shoal");
        assert!(pages.len() > 15, "{}", pages.len());
        for (name, roff) in &pages {
            let text = String::from_utf8_lossy(roff);
            for section in [
                ".SH EXIT STATUS",
                ".SH FILES",
                ".SH SEE ALSO",
                ".SH SYNOPSIS",
            ] {
                let section = section
                    .replace("EXIT STATUS", "\"EXIT STATUS\"")
                    .replace("SEE ALSO", "\"SEE ALSO\"");
                assert!(text.contains(&section), "{name} lacks {section}");
            }
            assert!(
                crate::man_sections::has_examples(name) && text.contains(".SH EXAMPLES"),
                "{name} has no EXAMPLES"
            );
            assert!(!text.contains("docs/"), "{name} points into the repository");
        }
    }

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
