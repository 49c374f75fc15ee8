//! Finding damage in an open key-value store, and the vocabulary of a salvage: why a read
//! failed and which keys were lost. `fsck --repair` salvages a damaged store by reading
//! its files block by block (`raw_salvage`), whether fjall opens it or not: a damaged
//! block costs exactly the records it held, even with two damaged blocks close together.

use super::{FjallStore, Space, StoreError};

/// Why a read failed: damage (a checksum, an undecodable block or blob) is skipped; any
/// other error (EIO, a full device) stops the salvage.
#[derive(Debug)]
pub enum ReadFailure {
    Damaged(String),
    Other(StoreError),
}

impl From<fjall::Error> for ReadFailure {
    fn from(error: fjall::Error) -> Self {
        if is_damage(&error) {
            ReadFailure::Damaged(error.to_string())
        } else {
            ReadFailure::Other(error.into())
        }
    }
}

/// Checksums, headers, tags, decompression: the bytes are there but wrong.
fn is_damage(error: &fjall::Error) -> bool {
    use std::io::ErrorKind;
    match error {
        fjall::Error::Storage(fjall::LsmError::Io(io)) | fjall::Error::Io(io) => {
            matches!(io.kind(), ErrorKind::InvalidData | ErrorKind::UnexpectedEof)
        }
        fjall::Error::Storage(_)
        | fjall::Error::Decompress(_)
        | fjall::Error::InvalidTrailer
        | fjall::Error::InvalidTag(_) => true,
        _ => false,
    }
}

impl FjallStore {
    /// The first damage a full read of every key and value meets, if any: whether the
    /// store needs salvaging rather than repair in place.
    pub fn first_damage(&self) -> Result<Option<String>, StoreError> {
        for space in [Space::Meta, Space::Data] {
            for guard in self.keyspace(space).iter() {
                match guard.into_inner().map_err(ReadFailure::from) {
                    Ok(_) => {}
                    Err(ReadFailure::Damaged(what)) => return Ok(Some(what)),
                    Err(ReadFailure::Other(error)) => return Err(error),
                }
            }
        }
        Ok(None)
    }
}

/// Keys lost to damage: every key after `after` and before `before` (`None`: the start or
/// the end of the key space), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub after: Option<Vec<u8>>,
    pub before: Option<Vec<u8>>,
    pub error: String,
}
