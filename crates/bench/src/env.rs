//! The machine a report was measured on: kernel, CPUs, memory, tool versions, load.

use std::fs;

use serde::{Deserialize, Serialize};

use shoal_sys::identity::is_root;

use crate::cpu::system_total_bytes;
use crate::tools::{has_tool, version_line};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Environment {
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_bytes: u64,
    pub root: bool,
    /// 1, 5 and 15 minute load averages when the session started.
    pub load_average: String,
    pub shoal_version: String,
    pub tools: Vec<ToolVersion>,
    pub started_unix_s: u64,
    pub note: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ToolVersion {
    pub tool: String,
    /// None: not installed (or prints no version).
    pub version: Option<String>,
}

fn first_line(path: &str) -> String {
    fs::read_to_string(path)
        .map(|text| text.lines().next().unwrap_or("").trim().to_string())
        .unwrap_or_default()
}

fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_default()
}

pub fn collect(shoal_version: &str) -> Environment {
    let tools = ["tar", "cp", "find", "du", "rm", "fs_mark", "bonnie++"]
        .iter()
        .map(|&tool| ToolVersion {
            tool: tool.to_string(),
            version: match tool {
                // Neither prints a version with --version; presence is what matters.
                "fs_mark" | "bonnie++" => has_tool(tool).then(|| "installed".to_string()),
                _ => version_line(tool),
            },
        })
        .collect();
    Environment {
        kernel: first_line("/proc/sys/kernel/osrelease"),
        cpu_model: cpu_model(),
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        memory_bytes: system_total_bytes().unwrap_or(0),
        root: is_root(),
        load_average: first_line("/proc/loadavg"),
        shoal_version: shoal_version.to_string(),
        tools,
        started_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        note: "CPU per operation = this process and its children (user + system, so kernel \
               filesystem work inside syscalls counts) + the shoal daemon's user + system time. \
               Kernel background threads (kworker, xfsaild, jbd2, btrfs workers) are not counted."
            .to_string(),
    }
}
