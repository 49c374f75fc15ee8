//! Cross-check with the tools users know: Debian's `fs_mark` and `bonnie++`, run with the
//! parameters of the built-in `create` and `bonnie` workloads where they are installed.
//! Their figures go next to the built-in ones, named "fs_mark ..." and "bonnie++ ...".

use std::fs;
use std::path::Path;

use shoal_sys::identity::is_root;

use crate::error::{BenchError, IoContext, Result};
use crate::tools::{has_tool, run_capture};
use crate::workload::{Better, Ctx, Outcome};

/// fs_mark 3.3 overflows a buffer (and aborts) with `-d` paths of 39 bytes or more: it is
/// given paths relative to its working directory, the sample's.
const FS_MARK_DIR: &str = "fsmark";

/// fs_mark -S0 (or -S1 with --fsync) -k -L1 -n N -s S [-D D -N files/D] -d DIR/0 -d DIR/1 ...
/// One `-d` per thread, as the built-in create gives each thread its own directory (fs_mark's
/// `-t T` would put T threads in one directory, contending on its lock).
pub fn fs_mark(ctx: &Ctx, outcome: &mut Outcome) -> Result<()> {
    if !has_tool("fs_mark") {
        outcome
            .notes
            .push("fs_mark not installed: no cross-check".into());
        return Ok(());
    }
    let params = ctx.params;
    let dir = ctx.dir.join(FS_MARK_DIR);
    fs::create_dir(&dir).context(|| format!("mkdir {}", dir.display()))?;
    let mut cmd = ctx.tool("fs_mark");
    cmd.current_dir(&ctx.dir) // it leaves fs_log.txt in its working directory
        .arg(if params.fsync { "-S1" } else { "-S0" })
        .args(["-k", "-L", "1"])
        .args(["-n", &params.files_per_thread.to_string()])
        .args(["-s", &params.file_size_bytes.to_string()]);
    if params.dirs_per_thread > 1 {
        let per_dir = params.files_per_thread.div_ceil(params.dirs_per_thread);
        cmd.args(["-D", &params.dirs_per_thread.to_string()])
            .args(["-N", &per_dir.to_string()]);
    }
    for thread in 0..params.threads {
        cmd.arg("-d")
            .arg(Path::new(FS_MARK_DIR).join(thread.to_string()));
    }
    let output = run_capture(&mut cmd)?;
    let rate = parse_fs_mark(&output).ok_or_else(|| BenchError::Tool {
        command: "fs_mark".into(),
        detail: format!("no result line in its output:\n{output}"),
    })?;
    outcome.metric("fs_mark create rate", "file/s", Better::Higher, rate);
    Ok(())
}

/// Files/sec of the first result line, below the "FSUse%  Count  Size  Files/sec" header.
pub fn parse_fs_mark(output: &str) -> Option<f64> {
    let mut header_seen = false;
    for line in output.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first() == Some(&"FSUse%") {
            header_seen = true;
        } else if header_seen && fields.len() >= 5 && fields[0].parse::<u64>().is_ok() {
            return fields[3].parse().ok();
        }
    }
    None
}

/// bonnie++ -s 0 -n K:0:0:1 (K x 1024 files, empty, one directory), CSV output.
pub fn bonnie(ctx: &Ctx, files: usize, outcome: &mut Outcome) -> Result<()> {
    if !has_tool("bonnie++") {
        outcome
            .notes
            .push("bonnie++ not installed: no cross-check".into());
        return Ok(());
    }
    let dir = ctx.dir.join("bonnie++");
    fs::create_dir(&dir).context(|| format!("mkdir {}", dir.display()))?;
    let kilo_files = files.div_ceil(1024).max(1);
    let mut cmd = ctx.tool("bonnie++");
    cmd.arg("-d").arg(&dir).args([
        "-s",
        "0",
        "-n",
        &format!("{kilo_files}:0:0:1"),
        "-q",
        "-x",
        "1",
    ]);
    if is_root() {
        // bonnie++ refuses to run as root unless told which user to be.
        cmd.args(["-u", "0"]);
    }
    let output = run_capture(&mut cmd)?;
    let figures = parse_bonnie_csv(&output).ok_or_else(|| BenchError::Tool {
        command: "bonnie++".into(),
        detail: format!("no CSV line in its output:\n{output}"),
    })?;
    outcome.count("bonnie++_files", kilo_files as u64 * 1024);
    for (name, value) in figures {
        match value {
            Some(rate) => outcome.metric(
                &format!("bonnie++ {name} rate"),
                "file/s",
                Better::Higher,
                rate,
            ),
            // "+++++": the phase took under 500 ms, too short for bonnie++ to report.
            None => outcome
                .notes
                .push(format!("bonnie++ {name}: too fast to measure (+++++)")),
        }
    }
    Ok(())
}

/// The six file-test rates of a bonnie++ 1.98-format CSV line.
pub fn parse_bonnie_csv(output: &str) -> Option<Vec<(&'static str, Option<f64>)>> {
    let line = output.lines().rev().find(|line| line.starts_with("1.9"))?;
    let fields: Vec<&str> = line.split(',').collect();
    let phases = [
        ("sequential create", 26),
        ("sequential stat", 28),
        ("sequential delete", 30),
        ("random create", 32),
        ("random stat", 34),
        ("random delete", 36),
    ];
    phases
        .iter()
        .map(|&(name, index)| {
            fields
                .get(index)
                .map(|v| (name, v.trim().parse::<f64>().ok()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fs_mark_table() {
        let output = "\
#  fs_mark  -S0 -k -n 1000 -d /mnt/a
#\tVersion 3.3, 1 thread(s) starting at Mon
FSUse%        Count         Size    Files/sec     App Overhead
     2         1000            0      45123.4             8421
";
        assert_eq!(parse_fs_mark(output), Some(45123.4));
        assert_eq!(parse_fs_mark("nothing here"), None);
    }

    #[test]
    fn parses_bonnie_csv() {
        let line = "1.98,2.00a,vm,1,1795320654,,,,,,,,,,,,,,,,,1,,,,,12000,50,+++++,+++,9000,40,+++++,+++,+++++,+++,8000,30,,,,,,,8167us,80us";
        let figures = parse_bonnie_csv(line).unwrap();
        assert_eq!(figures[0], ("sequential create", Some(12000.0)));
        assert_eq!(figures[1], ("sequential stat", None));
        assert_eq!(figures[5], ("random delete", Some(8000.0)));
    }
}
