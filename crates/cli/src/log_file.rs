//! The daemon's log file, rotated by the daemon itself: a mount lives for months, and no
//! logrotate configuration should be needed to keep `shoal.log` bounded.
//!
//! When the file passes `max_bytes`, `shoal.log.N-1` becomes `shoal.log.N` (the oldest is
//! dropped), ..., `shoal.log` becomes `shoal.log.1`, and a new `shoal.log` is started. At
//! most `(kept + 1) * max_bytes` (plus one line) are on disk.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Size at which the log is rotated.
pub const LOG_ROTATE_BYTES: u64 = 16 << 20;
/// Rotated files kept next to the current one.
pub const LOG_KEPT_FILES: u32 = 3;

pub struct RotatingLog {
    path: PathBuf,
    file: File,
    written_bytes: u64,
    max_bytes: u64,
    kept: u32,
}

impl RotatingLog {
    /// Opens (appending to) `path`, rotating first if it is already over the size.
    pub fn open(path: &Path, max_bytes: u64, kept: u32) -> io::Result<RotatingLog> {
        let file = open_append(path)?;
        let written_bytes = file.metadata()?.len();
        let mut log = RotatingLog {
            path: path.to_path_buf(),
            file,
            written_bytes,
            max_bytes,
            kept,
        };
        if log.written_bytes >= log.max_bytes {
            log.rotate()?;
        }
        Ok(log)
    }

    fn numbered(&self, n: u32) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    fn rotate(&mut self) -> io::Result<()> {
        if self.kept == 0 {
            self.file.set_len(0)?;
        } else {
            for n in (1..self.kept).rev() {
                let from = self.numbered(n);
                if from.exists() {
                    fs::rename(&from, self.numbered(n + 1))?;
                }
            }
            fs::rename(&self.path, self.numbered(1))?;
            self.file = open_append(&self.path)?;
        }
        self.written_bytes = 0;
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

impl Write for RotatingLog {
    /// tracing writes one whole event per call, so a rotation never splits a line.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written_bytes >= self.max_bytes {
            // A failed rotation must not silence the log: keep writing to the old file.
            let _ = self.rotate();
        }
        let written = self.file.write(buf)?;
        self.written_bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_past_the_size_and_keeps_a_bounded_number_of_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shoal.log");
        let mut log = RotatingLog::open(&path, 100, 2).unwrap();
        for i in 0..50 {
            writeln!(log, "line {i:02} of the daemon's log").unwrap();
        }
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["shoal.log", "shoal.log.1", "shoal.log.2"]);
        for name in &names {
            let len = fs::metadata(dir.path().join(name)).unwrap().len();
            assert!(len <= 100 + 30, "{name}: {len} bytes");
        }
        // The newest lines are in shoal.log, the ones before in .1: nothing reordered.
        let current = fs::read_to_string(&path).unwrap();
        assert!(
            current.ends_with("line 49 of the daemon's log\n"),
            "{current}"
        );
        let previous = fs::read_to_string(dir.path().join("shoal.log.1")).unwrap();
        let last_previous: u32 = previous.lines().last().unwrap()[5..7].parse().unwrap();
        let first_current: u32 = current.lines().next().unwrap()[5..7].parse().unwrap();
        assert_eq!(last_previous + 1, first_current);
        // Reopened over the size (a restart), it rotates before writing.
        drop(log);
        fs::write(&path, vec![b'x'; 150]).unwrap();
        let mut log = RotatingLog::open(&path, 100, 2).unwrap();
        writeln!(log, "after restart").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "after restart\n");
        assert_eq!(
            fs::read(dir.path().join("shoal.log.1")).unwrap(),
            vec![b'x'; 150]
        );
    }
}
