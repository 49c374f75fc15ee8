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
//! (`journal_check`). fjall's sequence numbers cannot serve for the tables (a compaction
//! resets them), but a journal's last batch number is recorded: a flip there passes every
//! checksum and the order of the batches before it.

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
    /// Closed cleanly with these journals and these other key-value files
    /// (`store_seal`).
    Clean {
        journals: Vec<JournalSeal>,
        files: Vec<FileSeal>,
    },
}

/// A journal as a clean close left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalSeal {
    pub name: String,
    pub readable_bytes: u64,
    /// The sequence number of its last batch; `None` when it has none, or in a state
    /// written before the number was recorded.
    pub last_seqno: Option<u64>,
}

impl JournalSeal {
    /// `name bytes [last seqno]`, as `STATE` holds it.
    fn parse(line: &str) -> Option<Self> {
        let mut fields = line.split(' ');
        let name = fields.next()?.to_string();
        let readable_bytes = fields.next()?.parse().ok()?;
        let last_seqno = match fields.next() {
            None => None,
            Some(seqno) => Some(seqno.parse().ok()?),
        };
        fields.next().is_none().then_some(Self {
            name,
            readable_bytes,
            last_seqno,
        })
    }

    fn line(&self) -> String {
        match self.last_seqno {
            Some(seqno) => format!("{} {} {seqno}", self.name, self.readable_bytes),
            None => format!("{} {}", self.name, self.readable_bytes),
        }
    }
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
                journals.push(JournalSeal::parse(line).ok_or_else(unreadable)?);
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
            for journal in journals {
                text.push_str(&format!("{}\n", journal.line()));
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
        .map(|file| JournalSeal {
            name: file_name(&file),
            readable_bytes: file.valid_bytes,
            last_seqno: file.last_seqno,
        })
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
        for journal in journals {
            if let Some(problem) = against_seal(&journal, &files) {
                findings.problems.push(problem);
            }
        }
    }
    Ok(findings)
}

/// What is wrong with a journal that a clean close sealed as `seal`, now that the
/// journals read as `files`.
fn against_seal(seal: &JournalSeal, files: &[JournalFile]) -> Option<String> {
    let JournalSeal {
        name,
        readable_bytes: bytes,
        last_seqno,
    } = seal;
    let Some(file) = files.iter().find(|file| file_name(file) == *name) else {
        return Some(format!(
            "journal {name} held {bytes} bytes at the last clean unmount and is gone \
             (deleted?): its batches are lost"
        ));
    };
    if file.valid_bytes < *bytes {
        return Some(format!(
            "journal {name} holds {} readable bytes, {bytes} at the last clean unmount (cut \
             short or damaged): the batches after are lost",
            file.valid_bytes
        ));
    }
    let moved =
        last_seqno.is_some() && file.valid_bytes == *bytes && file.last_seqno != *last_seqno;
    moved.then(|| {
        format!(
            "journal {name}: its last batch is numbered {:?}, {last_seqno:?} at the last clean \
             unmount (damaged): recovery would order it wrongly against every later write",
            file.last_seqno
        )
    })
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

    /// A flip in the last batch's sequence number passes the checksum and the order of
    /// the batches before it; the number a clean close recorded catches it.
    #[test]
    fn a_clean_journal_whose_last_number_moved_is_damage() {
        use crate::store::journal_check::{batch_starts, SEQNO_OFFSET};
        use crate::store::{Batch, FjallStore, FjallTuning, Space, Store};
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path(), &FjallTuning::default()).unwrap();
        for round in 0..5u32 {
            let mut batch = Batch::default();
            batch.put(Space::Meta, round.to_be_bytes().to_vec(), vec![7; 100]);
            store.write(batch).unwrap();
        }
        store.sync().unwrap();
        drop(store);
        write_state(dir.path(), &clean_state(dir.path()).unwrap()).unwrap();
        let findings = check_store_journals(dir.path(), dir.path()).unwrap();
        assert_eq!(findings.all_problems().count(), 0, "{findings:?}");
        let journal = check_journals(dir.path()).unwrap().pop().unwrap().path;
        let mut bytes = fs::read(&journal).unwrap();
        let last = *batch_starts(&bytes).last().unwrap();
        bytes[last + SEQNO_OFFSET] ^= 0x5a;
        fs::write(&journal, &bytes).unwrap();
        let findings = check_store_journals(dir.path(), dir.path()).unwrap();
        let problems: Vec<_> = findings.all_problems().collect();
        assert!(
            problems
                .iter()
                .any(|problem| problem.contains("last batch is numbered")),
            "{problems:?}"
        );
    }

    #[test]
    fn state_round_trips_and_an_unreadable_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_state(dir.path()).unwrap(), None);
        for state in [
            StoreState::Open,
            StoreState::Clean {
                journals: vec![
                    JournalSeal {
                        name: "0.jnl".into(),
                        readable_bytes: 42,
                        last_seqno: Some(9),
                    },
                    JournalSeal {
                        name: "1.jnl".into(),
                        readable_bytes: 7,
                        last_seqno: None,
                    },
                ],
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
        // A state written before the last batch's number was recorded still reads.
        fs::write(dir.path().join(STATE_FILE), "clean\n0.jnl 42\n").unwrap();
        let Some(StoreState::Clean { journals, .. }) = read_state(dir.path()).unwrap() else {
            panic!("not clean");
        };
        assert_eq!(journals[0].last_seqno, None);
        for garbage in ["garbage", "clean\n0.jnl 42 x\n", "clean\n0.jnl 42 1 2\n"] {
            fs::write(dir.path().join(STATE_FILE), garbage).unwrap();
            assert!(read_state(dir.path()).is_err(), "{garbage}");
        }
    }
}
