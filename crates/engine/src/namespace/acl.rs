//! POSIX ACLs, kept as the xattrs `system.posix_acl_access` and `system.posix_acl_default`
//! in the kernel's own encoding (so getfacl/setfacl values pass through untouched). The
//! kernel enforces them (`default_permissions` with FUSE_POSIX_ACL); what falls to the
//! filesystem, as to ext4, is keeping them in step with the mode:
//! - setting an access ACL sets the mode's bits from it (and an ACL the mode alone can say
//!   is not stored at all);
//! - chmod changes the ACL's owner, mask (or group) and other entries;
//! - a new inode in a directory with a default ACL gets that ACL cut down by the mode it
//!   was created with, instead of the umask; a new directory inherits the default too.

use crate::engine::Txn;
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::records::inode::{FileKind, Inode};
use crate::store::Space;

pub const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
pub const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

/// `POSIX_ACL_XATTR_VERSION`: the header of every ACL value.
const XATTR_VERSION: u32 = 2;
const HEADER_BYTES: usize = 4;
const ENTRY_BYTES: usize = 8;

const TAG_USER_OBJ: u16 = 0x01;
const TAG_USER: u16 = 0x02;
const TAG_GROUP_OBJ: u16 = 0x04;
const TAG_GROUP: u16 = 0x08;
const TAG_MASK: u16 = 0x10;
const TAG_OTHER: u16 = 0x20;

const PERMISSION_BITS: u16 = 0o777;

pub fn is_acl_name(name: &[u8]) -> bool {
    name == ACL_ACCESS || name == ACL_DEFAULT
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// An ACL as the kernel encodes it: a little-endian version, then (tag, perm, id) entries.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Acl(Vec<Entry>);

impl Acl {
    fn decode(value: &[u8]) -> FsResult<Acl> {
        let bad = || FsError::Invalid("malformed POSIX ACL");
        let header: [u8; HEADER_BYTES] = value
            .get(..HEADER_BYTES)
            .and_then(|header| header.try_into().ok())
            .ok_or_else(bad)?;
        if u32::from_le_bytes(header) != XATTR_VERSION
            || !(value.len() - HEADER_BYTES).is_multiple_of(ENTRY_BYTES)
        {
            return Err(bad());
        }
        let entries = value[HEADER_BYTES..]
            .chunks_exact(ENTRY_BYTES)
            .map(|e| Entry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect::<Vec<_>>();
        let known = [
            TAG_USER_OBJ,
            TAG_USER,
            TAG_GROUP_OBJ,
            TAG_GROUP,
            TAG_MASK,
            TAG_OTHER,
        ];
        if entries
            .iter()
            .any(|e| !known.contains(&e.tag) || e.perm > 0o7)
        {
            return Err(bad());
        }
        Ok(Acl(entries))
    }

    fn encode(&self) -> Vec<u8> {
        let mut value = XATTR_VERSION.to_le_bytes().to_vec();
        for entry in &self.0 {
            value.extend_from_slice(&entry.tag.to_le_bytes());
            value.extend_from_slice(&entry.perm.to_le_bytes());
            value.extend_from_slice(&entry.id.to_le_bytes());
        }
        value
    }

    /// Only owner, group and other: the mode says it all.
    fn is_minimal(&self) -> bool {
        self.0
            .iter()
            .all(|e| matches!(e.tag, TAG_USER_OBJ | TAG_GROUP_OBJ | TAG_OTHER))
    }

    fn perm_of(&self, tag: u16) -> Option<u16> {
        self.0.iter().find(|e| e.tag == tag).map(|e| e.perm)
    }

    /// The group class is the mask when there is one, else the owning group.
    fn group_class_tag(&self) -> u16 {
        if self.perm_of(TAG_MASK).is_some() {
            TAG_MASK
        } else {
            TAG_GROUP_OBJ
        }
    }

    /// The permission bits (0o777) this ACL shows through the mode.
    fn mode_bits(&self) -> u16 {
        let user = self.perm_of(TAG_USER_OBJ).unwrap_or(0);
        let group = self.perm_of(self.group_class_tag()).unwrap_or(0);
        let other = self.perm_of(TAG_OTHER).unwrap_or(0);
        (user << 6) | (group << 3) | other
    }

    /// Applies `op` to the owner, group-class and other entries with the matching three
    /// bits of `perm` (chmod sets them; creation intersects them).
    fn with_mode(&mut self, perm: u16, op: impl Fn(u16, u16) -> u16) {
        let group_class = self.group_class_tag();
        for entry in &mut self.0 {
            let bits = match entry.tag {
                TAG_USER_OBJ => (perm >> 6) & 0o7,
                TAG_OTHER => perm & 0o7,
                tag if tag == group_class => (perm >> 3) & 0o7,
                _ => continue,
            };
            entry.perm = op(entry.perm, bits);
        }
    }
}

impl Txn<'_> {
    fn read_acl(&self, ino: u64, name: &[u8]) -> FsResult<Option<Acl>> {
        match self.get(Space::Meta, &keys::xattr_key(ino, name))? {
            Some(value) => Ok(Some(Acl::decode(&value)?)),
            None => Ok(None),
        }
    }

    /// setxattr of an ACL name on `inode` (written by the caller): stores it, or (an
    /// access ACL the mode can say) only the mode.
    pub(crate) fn set_acl(&mut self, inode: &mut Inode, name: &[u8], value: &[u8]) -> FsResult<()> {
        let acl = Acl::decode(value)?;
        let key = keys::xattr_key(inode.ino, name);
        if name == ACL_ACCESS {
            inode.perm = (inode.perm & !PERMISSION_BITS) | acl.mode_bits();
            if acl.is_minimal() {
                self.delete(Space::Meta, key);
                return Ok(());
            }
        } else {
            if inode.kind != FileKind::Directory {
                // The kernel refuses this first (EACCES); a library caller gets EINVAL.
                return Err(FsError::Invalid("default ACL on a non-directory"));
            }
            if acl.0.is_empty() {
                self.delete(Space::Meta, key);
                return Ok(());
            }
        }
        self.put(Space::Meta, key, acl.encode());
        inode.may_have_xattrs = true;
        Ok(())
    }

    /// chmod of `inode` (its new mode already set): its access ACL follows.
    pub(crate) fn chmod_acl(&mut self, inode: &Inode) -> FsResult<()> {
        if !inode.may_have_xattrs {
            return Ok(());
        }
        if let Some(mut acl) = self.read_acl(inode.ino, ACL_ACCESS)? {
            acl.with_mode(inode.perm, |_, bits| bits);
            self.put(
                Space::Meta,
                keys::xattr_key(inode.ino, ACL_ACCESS),
                acl.encode(),
            );
        }
        Ok(())
    }

    /// A new inode in `parent`: with a default ACL there, it takes that ACL cut down by
    /// its mode (a directory also keeps it as its own default); without one, the umask
    /// applies. Writes the ACL xattrs; the caller writes the inode.
    pub(crate) fn inherit_acls(
        &mut self,
        parent: &Inode,
        inode: &mut Inode,
        umask: u16,
    ) -> FsResult<()> {
        if inode.kind == FileKind::Symlink {
            return Ok(());
        }
        let default = if parent.may_have_xattrs {
            self.read_acl(parent.ino, ACL_DEFAULT)?
        } else {
            None
        };
        let Some(default) = default else {
            inode.perm &= !(umask & PERMISSION_BITS);
            return Ok(());
        };
        let mut access = default.clone();
        access.with_mode(inode.perm, |entry, bits| entry & bits);
        inode.perm = (inode.perm & !PERMISSION_BITS) | access.mode_bits();
        if !access.is_minimal() {
            self.put(
                Space::Meta,
                keys::xattr_key(inode.ino, ACL_ACCESS),
                access.encode(),
            );
            inode.may_have_xattrs = true;
        }
        if inode.kind == FileKind::Directory {
            self.put(
                Space::Meta,
                keys::xattr_key(inode.ino, ACL_DEFAULT),
                default.encode(),
            );
            inode.may_have_xattrs = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Acl {
        Acl(entries
            .iter()
            .map(|&(tag, perm, id)| Entry { tag, perm, id })
            .collect())
    }

    const NONE: u32 = u32::MAX;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let a = acl(&[
            (TAG_USER_OBJ, 7, NONE),
            (TAG_USER, 6, 1000),
            (TAG_GROUP_OBJ, 5, NONE),
            (TAG_MASK, 7, NONE),
            (TAG_OTHER, 0, NONE),
        ]);
        assert_eq!(Acl::decode(&a.encode()).unwrap(), a);
        assert!(Acl::decode(&[2, 0, 0]).is_err());
        assert!(Acl::decode(&[1, 0, 0, 0]).is_err(), "version 1");
        assert!(Acl::decode(&a.encode()[..10]).is_err(), "torn entry");
        assert!(!a.is_minimal());
        assert_eq!(a.mode_bits(), 0o770);
    }

    #[test]
    fn creation_intersects_owner_mask_and_other_with_the_mode() {
        let mut a = acl(&[
            (TAG_USER_OBJ, 7, NONE),
            (TAG_USER, 7, 1000),
            (TAG_GROUP_OBJ, 5, NONE),
            (TAG_MASK, 7, NONE),
            (TAG_OTHER, 5, NONE),
        ]);
        a.with_mode(0o666, |entry, bits| entry & bits);
        assert_eq!(a.mode_bits(), 0o664);
        assert_eq!(
            a.perm_of(TAG_USER),
            Some(7),
            "named entries stay; the mask limits them"
        );
        let mut minimal = acl(&[
            (TAG_USER_OBJ, 7, NONE),
            (TAG_GROUP_OBJ, 7, NONE),
            (TAG_OTHER, 7, NONE),
        ]);
        minimal.with_mode(0o640, |_, bits| bits);
        assert_eq!(minimal.mode_bits(), 0o640);
    }
}
