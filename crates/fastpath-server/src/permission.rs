//! Permission checks as the kernel makes them for a `default_permissions` FUSE mount
//! (`generic_permission`), for the cases the fast path decides itself. Every check answers
//! only "granted" or "not granted here": a refusal falls back to the kernel, which gives
//! the exact errno and knows the rules kept out of here (POSIX ACLs for everyone but the
//! owner, partial capability sets).

use shoal_engine::{Engine, FileKind, Inode};

use crate::credentials::Credentials;
use crate::refusal::{require_permission, Served};

pub const MAY_EXEC: u16 = 1;
pub const MAY_WRITE: u16 = 2;
pub const MAY_READ: u16 = 4;

const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
pub const S_ISVTX: u16 = 0o1000;

/// Whether `caller` may access `inode` with `mask` (MAY_* bits), by its mode bits and, for
/// a privileged caller, CAP_DAC_OVERRIDE's rules.
pub fn granted(engine: &Engine, caller: &Credentials, inode: &Inode, mask: u16) -> bool {
    if caller.privileged {
        // CAP_DAC_OVERRIDE: read and write anything, execute what anyone may execute.
        return mask & MAY_EXEC == 0
            || inode.kind == FileKind::Directory
            || inode.perm & 0o111 != 0;
    }
    let bits = if caller.uid == inode.uid {
        inode.perm >> 6
    } else if has_access_acl(engine, inode) {
        // Named users and groups and the mask rule here: the kernel decides.
        return false;
    } else if caller.in_group(inode.gid) {
        inode.perm >> 3
    } else {
        inode.perm
    };
    bits & mask & 0o7 == mask
}

/// `granted`, or fall back.
pub fn check(engine: &Engine, caller: &Credentials, inode: &Inode, mask: u16) -> Served<()> {
    require_permission(granted(engine, caller, inode, mask))
}

fn has_access_acl(engine: &Engine, inode: &Inode) -> bool {
    // An inode that never had an xattr has no ACL; others are asked (an error counts as
    // "maybe", which falls back).
    inode.may_have_xattrs
        && !matches!(
            engine.getxattr(inode.ino, ACL_ACCESS),
            Err(shoal_engine::FsError::NoXattr)
        )
}

/// The owner, or CAP_FOWNER.
pub fn owns(caller: &Credentials, inode: &Inode) -> bool {
    caller.privileged || caller.uid == inode.uid
}

/// May `caller` remove or replace `victim` in directory `dir` (write and search on `dir`,
/// and the sticky bit's owner rule)?
pub fn may_remove(
    engine: &Engine,
    caller: &Credentials,
    dir: &Inode,
    victim: &Inode,
) -> Served<()> {
    may_remove_owned_by(engine, caller, dir, || Ok(victim.uid))
}

/// `may_remove`, the victim's owner read (`victim_uid`) only where the sticky bit asks.
pub fn may_remove_owned_by(
    engine: &Engine,
    caller: &Credentials,
    dir: &Inode,
    victim_uid: impl FnOnce() -> Served<u32>,
) -> Served<()> {
    check(engine, caller, dir, MAY_WRITE | MAY_EXEC)?;
    let sticky_applies = dir.perm & S_ISVTX != 0 && !caller.privileged && caller.uid != dir.uid;
    if sticky_applies {
        require_permission(caller.uid == victim_uid()?)
    } else {
        Ok(())
    }
}
