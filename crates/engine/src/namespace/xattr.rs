//! Extended attributes in the `user.`, `trusted.` and `security.` namespaces, and the two
//! POSIX ACLs of `system.` (see `acl`); other `system.` names are refused with "not
//! supported", which `cp -a` and `tar` accept quietly.

use crate::engine::Engine;
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::limits::{XATTR_NAME_MAX_BYTES, XATTR_VALUE_MAX_BYTES};
use crate::stats::Op;
use crate::store::{Scan, Space};

/// How setxattr treats an existing attribute (XATTR_CREATE / XATTR_REPLACE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XattrMode {
    Either,
    CreateOnly,
    ReplaceOnly,
}

pub(crate) fn check_xattr_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() {
        return Err(FsError::Invalid("empty xattr name"));
    }
    if name.len() > XATTR_NAME_MAX_BYTES {
        return Err(FsError::Range);
    }
    let supported = [&b"user."[..], b"trusted.", b"security."];
    if crate::namespace::acl::is_acl_name(name)
        || supported
            .iter()
            .any(|prefix| name.starts_with(prefix) && name.len() > prefix.len())
    {
        Ok(())
    } else {
        Err(FsError::XattrNotSupported)
    }
}

impl Engine {
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], mode: XattrMode) -> FsResult<()> {
        self.setxattr_killing_sgid(ino, name, value, mode, false)
    }

    /// `setxattr`, and when `kill_sgid` an access ACL (which sets the mode) also clears
    /// the set-gid bit: the caller is outside the inode's group and may not keep it, as a
    /// chmod by them would clear it (the kernel says so: FUSE_SETXATTR_ACL_KILL_SGID).
    pub fn setxattr_killing_sgid(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
        kill_sgid: bool,
    ) -> FsResult<()> {
        self.stats().count(Op::Xattr);
        check_xattr_name(name)?;
        if value.len() > XATTR_VALUE_MAX_BYTES {
            return Err(FsError::Range);
        }
        let mut txn = self.begin()?;
        let mut inode = txn.inode(ino)?;
        let key = keys::xattr_key(ino, name);
        let exists = txn.get(Space::Meta, &key)?.is_some();
        match (mode, exists) {
            (XattrMode::CreateOnly, true) => return Err(FsError::Exists),
            (XattrMode::ReplaceOnly, false) => return Err(FsError::NoXattr),
            _ => {}
        }
        if crate::namespace::acl::is_acl_name(name) {
            txn.set_acl(&mut inode, name, value)?;
            if kill_sgid && name == crate::namespace::acl::ACL_ACCESS {
                inode.perm &= !crate::records::inode::S_ISGID;
            }
        } else {
            txn.put(Space::Meta, key, value.to_vec());
            inode.may_have_xattrs = true;
        }
        inode.ctime = txn.now;
        txn.put_inode(&inode);
        txn.inode_changed(&inode, inode.size)?;
        txn.commit()
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        self.stats().count(Op::Xattr);
        if let Some(value) = self.virtual_xattr(ino, name) {
            return value;
        }
        check_xattr_name(name).map_err(|error| match error {
            FsError::XattrNotSupported => FsError::NoXattr,
            other => other,
        })?;
        // Most inodes have no xattr at all (the kernel asks for `security.capability` on
        // a file's first write, `cp -a` for ACLs): their flag answers without a lookup.
        if !self.read_inode(ino)?.may_have_xattrs {
            return Err(FsError::NoXattr);
        }
        self.store()
            .get(Space::Meta, &keys::xattr_key(ino, name))?
            .ok_or(FsError::NoXattr)
    }

    /// Attribute names of `ino`, in order.
    pub fn listxattr(&self, ino: u64) -> FsResult<Vec<Vec<u8>>> {
        self.stats().count(Op::Xattr);
        // The flag spares the range scan (the cost of a store iterator) for the common
        // inode without xattrs: `cp -a` lists each source file's twice.
        if !self.read_inode(ino)?.may_have_xattrs {
            return Ok(Vec::new());
        }
        let (start, end) = keys::xattr_range(ino);
        let mut names = Vec::new();
        self.store()
            .scan(Space::Meta, &start, &end, &mut |key, _| {
                if let Ok((_, name)) = keys::decode_xattr_key(key) {
                    names.push(name.to_vec());
                }
                Scan::Continue
            })?;
        Ok(names)
    }

    pub fn removexattr(&self, ino: u64, name: &[u8]) -> FsResult<()> {
        self.stats().count(Op::Xattr);
        check_xattr_name(name).map_err(|error| match error {
            FsError::XattrNotSupported => FsError::NoXattr,
            other => other,
        })?;
        let mut txn = self.begin()?;
        let mut inode = txn.inode(ino)?;
        let key = keys::xattr_key(ino, name);
        if txn.get(Space::Meta, &key)?.is_none() {
            return Err(FsError::NoXattr);
        }
        txn.delete(Space::Meta, key);
        inode.ctime = txn.now;
        txn.put_inode(&inode);
        txn.inode_changed(&inode, inode.size)?;
        txn.commit()
    }
}
