use fuser::{FileAttr, FileType, INodeNo};
use shoal_engine::{FileKind, Inode};

pub const BLOCK_BYTES: u32 = 4096;

pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Regular => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

pub fn file_attr(inode: &Inode) -> FileAttr {
    FileAttr {
        ino: INodeNo(inode.ino),
        size: inode.size,
        blocks: inode.blocks(),
        atime: inode.atime.to_system_time(),
        mtime: inode.mtime.to_system_time(),
        ctime: inode.ctime.to_system_time(),
        crtime: inode.ctime.to_system_time(),
        kind: file_type(inode.kind),
        perm: inode.perm,
        nlink: inode.nlink,
        uid: inode.uid,
        gid: inode.gid,
        rdev: inode.rdev,
        blksize: BLOCK_BYTES,
        flags: 0,
    }
}
