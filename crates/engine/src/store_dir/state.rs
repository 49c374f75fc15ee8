//! What a store must hold, recorded outside its key-value store, and the checks a mount
//! and fsck make before trusting the store.
//!
//! `STATE` says whether the store was cleanly closed, and then which journal files it
//! had and how many readable bytes each held, and a seal of each other key-value file
//! (`store_seal`). Nothing changes a closed store's files, so a journal missing or holding
//! fewer readable bytes at the next open was deleted, cut short or damaged (fjall's
//! recovery would drop its batches without a word), and so was a file whose seal breaks. While a store
//! is open (`STATE` says so), fjall deletes journals it has flushed, and a crash may tear
//! the newest one's tail: then only damage inside the journals is found
//! (`journal_check`). fjall's sequence numbers cannot serve: a compaction resets them.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use crate::store::journal_check::{check_journals, JournalDamage, JournalFile};
use crate::store_dir::seal::{check_seals, seal_files, FileSeal};

const STATE_FILE: &str = "STATE";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreState {
    /// Opened read-write and not (yet) closed cleanly.
    Open,
    /// Closed cleanly with these journals (file name and readable bytes) and these other
    /// key-value files (`store_seal`).
    Clean {
        journals: Vec<(String, u64)>,
        files: Vec<FileSeal>,
    },
}

/// The line prefix of a sealed file in `STATE`.
const FILE_LINE: &str = "file ";

/// The recorded state; `None` for a store that has none (made before it existed).
pub fn read_state(dir: &Path) -> io::Result<Option<StoreState>> {
    let text = match fs::read_to_string(dir.join(STATE_FILE)) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let unreadable = || io::Error::new(io::ErrorKind::InvalidData, "unreadable STATE file");
    let mut lines = text.lines();
    match lines.next() {
        Some("open") => Ok(Some(StoreState::Open)),
        Some("clean") => {
            let mut journals = Vec::new();
            let mut files = Vec::new();
            for line in lines {
                if let Some(seal) = line.strip_prefix(FILE_LINE) {
                    files.push(FileSeal::parse(seal).ok_or_else(unreadable)?);
                    continue;
                }
                let (name, bytes) = line.split_once(' ').ok_or_else(unreadable)?;
                let bytes = bytes.parse().map_err(|_| unreadable())?;
                journals.push((name.to_string(), bytes));
            }
            Ok(Some(StoreState::Clean { journals, files }))
        }
        _ => Err(unreadable()),
    }
}

/// Records the state durably (a new file renamed over the old, then the directory
/// synced).
pub fn write_state(dir: &Path, state: &StoreState) -> io::Result<()> {
    let mut text = String::new();
    match state {
        StoreState::Open => text.push_str("open\n"),
        StoreState::Clean { journals, files } => {
            text.push_str("clean\n");
            for (name, bytes) in journals {
                text.push_str(&format!("{name} {bytes}\n"));
            }
            for seal in files {
                text.push_str(&format!("{FILE_LINE}{seal}\n"));
            }
        }
    }
    let temporary = dir.join(format!("{STATE_FILE}.new"));
    let mut file = super::access::create_private_file(&temporary)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    fs::rename(&temporary, dir.join(STATE_FILE))?;
    fs::File::open(dir)?.sync_all()
}

/// The clean state of the journals and other files in `kv_dir` as they are now.
pub fn clean_state(kv_dir: &Path) -> io::Result<StoreState> {
    let journals = check_journals(kv_dir)?
        .into_iter()
        .map(|file| (file_name(&file), file.valid_bytes))
        .collect();
    let files = seal_files(kv_dir)?;
    Ok(StoreState::Clean { journals, files })
}

fn file_name(file: &JournalFile) -> String {
    file.path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Findings {
    /// Everything that is damage.
    pub fn all_problems(&self) -> impl Iterator<Item = &String> {
        self.problems.iter().chain(&self.changed_files)
    }
}

/// What a look at a store before opening it found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Damage in the journals: a mount refuses the store, fsck exits 1.
    pub problems: Vec<String>,
    /// Other key-value files gone or changed since the clean close (`store_seal`): damage
    /// too, kept apart because a repair cannot undo it, only record what is there now.
    pub changed_files: Vec<String>,
    /// Normal after a crash, reported but not damage (a torn tail).
    pub notes: Vec<String>,
}

/// Reads the journals of the store in `dir` without changing them, and compares them and
/// the other key-value files with what `STATE` recorded at a clean close.
pub fn check_store_journals(dir: &Path, kv_dir: &Path) -> io::Result<Findings> {
    let mut findings = Findings::default();
    let files = check_journals(kv_dir)?;
    for file in &files {
        match file.damage {
            None => {}
            Some(JournalDamage::TornTail { .. }) => findings.notes.push(file.to_string()),
            Some(JournalDamage::Corrupt { .. }) => findings.problems.push(file.to_string()),
        }
    }
    let state = match read_state(dir) {
        Ok(state) => state,
        Err(error) => {
            findings.problems.push(format!("{STATE_FILE}: {error}"));
            None
        }
    };
    if let Some(StoreState::Clean {
        journals,
        files: sealed,
    }) = state
    {
        findings.changed_files = check_seals(kv_dir, &sealed)?;
        for (name, bytes) in journals {
            let found = files.iter().find(|file| file_name(file) == name);
            match found {
                None => findings.problems.push(format!(
                    "journal {name} held {bytes} bytes at the last clean unmount and is \
                     gone (deleted?): its batches are lost"
                )),
                Some(file) if file.valid_bytes < bytes => findings.problems.push(format!(
                    "journal {name} holds {} readable bytes, {bytes} at the last clean \
                     unmount (cut short or damaged): the batches after are lost",
                    file.valid_bytes
                )),
                Some(_) => {}
            }
        }
    }
    Ok(findings)
}

/// For a repair: cuts the first damaged journal at its damage and removes the journals
/// after it, so recovery keeps every batch before the damage (a prefix of the history)
/// and nothing after it. Says what went.
pub fn cut_at_damage(kv_dir: &Path) -> io::Result<Vec<String>> {
    let mut dropped = Vec::new();
    let mut cut = false;
    for file in check_journals(kv_dir)? {
        if cut {
            fs::remove_file(&file.path)?;
            dropped.push(format!(
                "{}: removed whole ({} batches after the damage)",
                file.path.display(),
                file.batches
            ));
        } else if let Some(JournalDamage::Corrupt { offset, .. }) = file.damage {
            let journal = fs::OpenOptions::new().write(true).open(&file.path)?;
            journal.set_len(offset)?;
            journal.sync_all()?;
            dropped.push(file.to_string());
            cut = true;
        }
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_an_unreadable_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_state(dir.path()).unwrap(), None);
        for state in [
            StoreState::Open,
            StoreState::Clean {
                journals: vec![("0.jnl".into(), 42), ("1.jnl".into(), 7)],
                files: vec![FileSeal {
                    path: "keyspaces/0/current".into(),
                    bytes: 25,
                    hash: 0xfeed,
                }],
            },
            StoreState::Clean {
                journals: Vec::new(),
                files: Vec::new(),
            },
        ] {
            write_state(dir.path(), &state).unwrap();
            assert_eq!(read_state(dir.path()).unwrap(), Some(state));
        }
        fs::write(dir.path().join(STATE_FILE), "garbage").unwrap();
        assert!(read_state(dir.path()).is_err());
    }
}
