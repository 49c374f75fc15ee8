//! The records stored in the key-value store, as the engine works with them: inodes and
//! their usage, quota limits and settings. `keys` encodes and decodes them; nothing here
//! knows how they are laid out on disk.

pub(crate) mod inode;
pub(crate) mod quota;
