//! Who a store is: a UUID, an optional label and its creation time, written by mkfs into the
//! store directory's `IDENTITY` file (`key=value` lines) and shown by `shoal info`.
//!
//! Stores made before the file existed have none; they stay readable and report no
//! identity. The file sits next to `FORMAT`, not in the key-value store, so reading it
//! needs no lock and works while the store is mounted.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;

use crate::store_dir::StoreDirError;

const IDENTITY_FILE: &str = "IDENTITY";
/// As ext4 and XFS bound theirs loosely; a label is for people, not paths.
pub const MAX_LABEL_BYTES: usize = 255;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreIdentity {
    /// RFC 4122 version 4, lower-case with hyphens.
    pub uuid: String,
    pub label: Option<String>,
    /// Seconds since the Unix epoch.
    pub created_secs: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    #[error("label is longer than {MAX_LABEL_BYTES} bytes")]
    TooLong,
    #[error("label must not contain control characters (newlines, tabs)")]
    ControlCharacter,
}

impl StoreIdentity {
    /// A fresh identity: a random UUID and the current time.
    pub fn new(label: Option<&str>) -> Result<StoreIdentity, StoreDirError> {
        if let Some(label) = label {
            check_label(label)
                .map_err(|error| StoreDirError::BadLabel(label.to_string(), error))?;
        }
        let random = random_bytes()
            .map_err(|error| StoreDirError::Io(Path::new("/dev/urandom").to_path_buf(), error))?;
        Ok(StoreIdentity {
            uuid: uuid_v4(random),
            label: label.map(str::to_string),
            created_secs: crate::Timestamp::now().secs,
        })
    }

    fn encode(&self) -> String {
        let mut text = format!("uuid={}\ncreated={}\n", self.uuid, self.created_secs);
        if let Some(label) = &self.label {
            text.push_str(&format!("label={label}\n"));
        }
        text
    }

    fn decode(text: &str) -> Option<StoreIdentity> {
        let fields = Fields::read(text);
        Some(StoreIdentity {
            uuid: fields.uuid?,
            label: fields.label,
            created_secs: fields.created_secs?,
        })
    }
}

/// The fields of an `IDENTITY` text that read as what they should be; a damaged file
/// keeps those for `rebuild`.
#[derive(Default)]
struct Fields {
    uuid: Option<String>,
    label: Option<String>,
    created_secs: Option<i64>,
}

impl Fields {
    fn read(text: &str) -> Fields {
        let mut fields = Fields::default();
        for line in text.lines() {
            // Unknown keys are a newer shoal's additions: skipped, not an error.
            match line.split_once('=') {
                Some(("uuid", value)) if is_uuid(value) => fields.uuid = Some(value.into()),
                Some(("created", value)) => fields.created_secs = value.parse().ok(),
                Some(("label", value)) if check_label(value).is_ok() => {
                    fields.label = Some(value.into());
                }
                _ => {}
            }
        }
        fields
    }
}

/// Lower-case hex in the 8-4-4-4-12 groups `uuid_v4` writes.
fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|group| group.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|group| {
            group
                .bytes()
                .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
        })
}

/// An `IDENTITY` written again by `rebuild`, and what it kept of the old one.
#[derive(Debug)]
pub struct Rebuilt {
    pub identity: StoreIdentity,
    /// "missing" or "damaged".
    pub why: &'static str,
    pub kept_uuid: bool,
    pub kept_created: bool,
}

/// Writes `IDENTITY` again when it is missing or does not read whole (`fsck --repair`):
/// fields that still read are kept, a lost UUID is made anew, a lost creation time is
/// `created_fallback`. `None` when the file is whole.
pub fn rebuild(dir: &Path, created_fallback: i64) -> Result<Option<Rebuilt>, StoreDirError> {
    let path = dir.join(IDENTITY_FILE);
    let (fields, why) = match fs::read(&path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            if StoreIdentity::decode(&text).is_some() {
                return Ok(None);
            }
            (Fields::read(&text), "damaged")
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            (Fields::default(), "missing")
        }
        Err(error) => return Err(StoreDirError::Io(path, error)),
    };
    let fresh = StoreIdentity::new(None)?;
    let rebuilt = Rebuilt {
        kept_uuid: fields.uuid.is_some(),
        kept_created: fields.created_secs.is_some(),
        identity: StoreIdentity {
            uuid: fields.uuid.unwrap_or(fresh.uuid),
            label: fields.label,
            created_secs: fields.created_secs.unwrap_or(created_fallback),
        },
        why,
    };
    write(dir, &rebuilt.identity)?;
    Ok(Some(rebuilt))
}

pub fn check_label(label: &str) -> Result<(), LabelError> {
    if label.len() > MAX_LABEL_BYTES {
        return Err(LabelError::TooLong);
    }
    if label.chars().any(char::is_control) {
        return Err(LabelError::ControlCharacter);
    }
    Ok(())
}

fn random_bytes() -> std::io::Result<[u8; 16]> {
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

fn uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // variant RFC 4122
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Written (and synced) by mkfs before `FORMAT`, so every store that has `FORMAT` and was
/// made by this version has its identity.
pub fn write(dir: &Path, identity: &StoreIdentity) -> Result<(), StoreDirError> {
    let path = dir.join(IDENTITY_FILE);
    let io = |error| StoreDirError::Io(path.clone(), error);
    let mut file = super::access::create_private_file(&path).map_err(io)?;
    file.write_all(identity.encode().as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

/// The store's identity; `None` for a store made before identities existed (or whose
/// file is unreadable as one).
pub fn read(dir: &Path) -> Result<Option<StoreIdentity>, StoreDirError> {
    let path = dir.join(IDENTITY_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => Ok(StoreIdentity::decode(&text)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(StoreDirError::Io(path, error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_round_trips_and_uuids_are_version_4() {
        let identity = StoreIdentity::new(Some("photos 2026")).unwrap();
        assert_eq!(identity.uuid.len(), 36);
        assert_eq!(&identity.uuid[14..15], "4");
        assert!(matches!(&identity.uuid[19..20], "8" | "9" | "a" | "b"));
        assert_eq!(
            StoreIdentity::decode(&identity.encode()),
            Some(identity.clone())
        );
        let unlabelled = StoreIdentity::new(None).unwrap();
        assert_ne!(unlabelled.uuid, identity.uuid);
        assert_eq!(
            StoreIdentity::decode(&unlabelled.encode()),
            Some(unlabelled)
        );
        assert_eq!(StoreIdentity::decode("garbage"), None);
    }

    #[test]
    fn labels_are_checked() {
        assert!(StoreIdentity::new(Some("a\nb")).is_err());
        assert!(StoreIdentity::new(Some(&"x".repeat(256))).is_err());
        assert!(StoreIdentity::new(Some(&"x".repeat(255))).is_ok());
    }

    #[test]
    fn a_store_without_identity_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        let identity = StoreIdentity::new(Some("l")).unwrap();
        write(dir.path(), &identity).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(identity));
    }
}
