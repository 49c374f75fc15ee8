//! FUSE_FALLOCATE: preallocation, PUNCH_HOLE and ZERO_RANGE (see the engine's
//! `fallocate`); other modes answer EOPNOTSUPP.

use fuser::Errno;
use shoal_engine::Fallocate;

use super::ShoalFs;
use crate::errno::errno;

impl ShoalFs {
    pub(super) fn fallocate_range(
        &self,
        ino: u64,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        let op = Fallocate::from_mode(mode).ok_or(Errno::EOPNOTSUPP)?;
        self.engine
            .fallocate(ino, offset, length, op)
            .map_err(|error| errno(&error))
    }
}
