//! The command line of `shoal quota`: its subcommands, options and their help.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use crate::quota_cmd;
use crate::quota_protocol::{LimitsChange, QuotaKindArg, SettingsChange};
use crate::units;

#[derive(Subcommand)]
pub enum QuotaCommand {
    /// Usage, limits and grace of every id with usage or limits (default: users).
    // `-h` is help, as everywhere in shoal; human units are --human only.
    Report {
        /// Report users (the default when no kind is given).
        #[arg(short = 'u', long = "user")]
        user: bool,
        /// Report groups.
        #[arg(short = 'g', long = "group")]
        group: bool,
        /// Report projects.
        #[arg(short = 'p', long = "project")]
        project: bool,
        /// Sizes and counts in human units (256M, 1.5k) instead of bytes and inodes.
        #[arg(long = "human")]
        human: bool,
        /// Print the report as JSON (bytes and counts, never human units).
        #[arg(long)]
        json: bool,
        /// A shoal mountpoint (the daemon answers) or an unmounted store directory.
        target: PathBuf,
    },
    /// Set limits of one user, group or project; 0 removes a limit.
    Set {
        /// The user (name or uid) whose limits to set.
        #[arg(short = 'u', long = "user", value_name = "USER", group = "owner")]
        user: Option<String>,
        /// The group (name or gid) whose limits to set.
        #[arg(short = 'g', long = "group", value_name = "GROUP", group = "owner")]
        group: Option<String>,
        /// The project (number or name from /etc/projid) whose limits to set.
        #[arg(short = 'p', long = "project", value_name = "PROJECT", group = "owner")]
        project: Option<String>,
        /// Soft limit on bytes (grace applies once over it). SIZE: plain bytes, or a K, M,
        /// G, T suffix (binary): 512M, 10G. Default: unchanged; 0 removes it.
        #[arg(long, value_name = "SIZE", value_parser = bytes)]
        bsoft: Option<u64>,
        /// Hard limit on bytes (writes past it fail with EDQUOT). SIZE as for --bsoft.
        /// Default: unchanged; 0 removes it.
        #[arg(long, value_name = "SIZE", value_parser = bytes)]
        bhard: Option<u64>,
        /// Soft limit on inodes (files, directories, links). Default: unchanged; 0 removes it.
        #[arg(long, value_name = "N", value_parser = quota_cmd::parse_count)]
        isoft: Option<u64>,
        /// Hard limit on inodes (creates past it fail with EDQUOT). Default: unchanged; 0
        /// removes it.
        #[arg(long, value_name = "N", value_parser = quota_cmd::parse_count)]
        ihard: Option<u64>,
        /// Print the resulting line as JSON.
        #[arg(long)]
        json: bool,
        /// A shoal mountpoint (the daemon answers) or an unmounted store directory.
        target: PathBuf,
    },
    /// Show or change grace periods and whether id 0 is limited.
    Config {
        /// How long a soft byte limit may be exceeded before it acts as a hard one.
        /// DURATION: seconds, or a number with s, m, h or d (90, 15m, 7d). Default 7d.
        #[arg(long, value_name = "DURATION", value_parser = units::parse_duration_secs)]
        bytes_grace: Option<u64>,
        /// As --bytes-grace, for the soft inode limit. Default 7d.
        #[arg(long, value_name = "DURATION", value_parser = units::parse_duration_secs)]
        inodes_grace: Option<u64>,
        /// Whether root (uid/gid 0) is held to its limits, as other ids. Default off.
        #[arg(long, value_name = "on|off", value_parser = quota_cmd::parse_on_off)]
        enforce_root: Option<bool>,
        /// Print the settings as JSON.
        #[arg(long)]
        json: bool,
        /// A shoal mountpoint (the daemon answers) or an unmounted store directory.
        target: PathBuf,
    },
    /// Tag a directory tree in a mount with a project (children inherit it), or clear it.
    #[command(subcommand)]
    Project(ProjectCommand),
}

#[derive(Subcommand)]
pub enum ProjectCommand {
    /// Tag DIR and everything below it with project ID (a number or a name from /etc/projid).
    Set {
        /// A directory inside a shoal mount.
        dir: PathBuf,
        /// A project number or a name from /etc/projid.
        project: String,
    },
    /// Move DIR and everything below it back to project 0.
    Clear {
        /// A directory inside a shoal mount.
        dir: PathBuf,
    },
}

/// Quota limits: plain numbers are bytes (as in xfs_quota's `bhard=`).
fn bytes(text: &str) -> Result<u64, String> {
    units::parse_size(text)
}

/// The kinds `quota report` lists, from its -u, -g and -p flags.
fn report_kinds(user: bool, group: bool, project: bool) -> Vec<QuotaKindArg> {
    [
        (user, QuotaKindArg::User),
        (group, QuotaKindArg::Group),
        (project, QuotaKindArg::Project),
    ]
    .into_iter()
    .filter_map(|(wanted, kind)| wanted.then_some(kind))
    .collect()
}

/// The one owner `quota set` changes: exactly one of -u, -g and -p.
fn whose_limits(
    user: Option<String>,
    group: Option<String>,
    project: Option<String>,
) -> anyhow::Result<(QuotaKindArg, String)> {
    Ok(match (user, group, project) {
        (Some(name), None, None) => (QuotaKindArg::User, name),
        (None, Some(name), None) => (QuotaKindArg::Group, name),
        (None, None, Some(name)) => (QuotaKindArg::Project, name),
        _ => anyhow::bail!("say whose limits: one of -u USER, -g GROUP, -p PROJECT"),
    })
}

pub fn run(command: QuotaCommand) -> anyhow::Result<ExitCode> {
    match command {
        QuotaCommand::Report {
            user,
            group,
            project,
            human,
            json,
            target,
        } => quota_cmd::report(&quota_cmd::ReportArgs {
            kinds: report_kinds(user, group, project),
            human,
            json,
            target,
        }),
        QuotaCommand::Set {
            user,
            group,
            project,
            bsoft,
            bhard,
            isoft,
            ihard,
            json,
            target,
        } => {
            let (kind, name) = whose_limits(user, group, project)?;
            let change = LimitsChange {
                bytes_soft: bsoft,
                bytes_hard: bhard,
                inodes_soft: isoft,
                inodes_hard: ihard,
            };
            quota_cmd::set(&quota_cmd::SetArgs {
                kind,
                name,
                change,
                json,
                target,
            })
        }
        QuotaCommand::Config {
            bytes_grace,
            inodes_grace,
            enforce_root,
            json,
            target,
        } => {
            let change = SettingsChange {
                bytes_grace_secs: bytes_grace,
                inodes_grace_secs: inodes_grace,
                enforce_root,
            };
            quota_cmd::config(change, json, &target)
        }
        QuotaCommand::Project(ProjectCommand::Set { dir, project }) => {
            quota_cmd::project(&dir, Some(&project))
        }
        QuotaCommand::Project(ProjectCommand::Clear { dir }) => quota_cmd::project(&dir, None),
    }
}
