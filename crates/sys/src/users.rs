//! The passwd and group databases (NSS: /etc/passwd, LDAP, ...), by name and by id.

use std::ffi::CStr;

use crate::c_path::c_string;

/// Room for one passwd/group entry; glibc asks for about 1 KiB, big group lists need more.
const ENTRY_BUFFER_BYTES: usize = 64 * 1024;

/// The uid of user `name`, `None` if the database has no such user.
pub fn user_id(name: &str) -> Option<u32> {
    let c_name = c_string(name.as_bytes()).ok()?;
    // SAFETY: passwd is plain data (integers and pointers); all-zero is a valid value.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; ENTRY_BUFFER_BYTES];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: a NUL-terminated name, writable out-parameters and a buffer of the stated
    // length, all alive for the call.
    let status = unsafe {
        libc::getpwnam_r(
            c_name.as_ptr(),
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    (status == 0 && !found.is_null()).then_some(entry.pw_uid)
}

/// The gid of group `name`, `None` if the database has no such group.
pub fn group_id(name: &str) -> Option<u32> {
    let c_name = c_string(name.as_bytes()).ok()?;
    // SAFETY: group is plain data (integers and pointers); all-zero is a valid value.
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; ENTRY_BUFFER_BYTES];
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in `user_id`.
    let status = unsafe {
        libc::getgrnam_r(
            c_name.as_ptr(),
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    (status == 0 && !found.is_null()).then_some(entry.gr_gid)
}

/// The name of user `id`, `None` if the database has no such user.
pub fn user_name(id: u32) -> Option<String> {
    // SAFETY: passwd is plain data (integers and pointers); all-zero is a valid value.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; ENTRY_BUFFER_BYTES];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: writable out-parameters and a buffer of the stated length, alive for the call.
    let status = unsafe {
        libc::getpwuid_r(
            id,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if status != 0 || found.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points to a NUL-terminated string inside `buffer`, which
    // lives until the end of this function.
    let name = unsafe { CStr::from_ptr(entry.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// The name of group `id`, `None` if the database has no such group.
pub fn group_name(id: u32) -> Option<String> {
    // SAFETY: group is plain data (integers and pointers); all-zero is a valid value.
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; ENTRY_BUFFER_BYTES];
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in `user_name`.
    let status = unsafe {
        libc::getgrgid_r(
            id,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if status != 0 || found.is_null() {
        return None;
    }
    // SAFETY: on success gr_name points to a NUL-terminated string inside `buffer`, which
    // lives until the end of this function.
    let name = unsafe { CStr::from_ptr(entry.gr_name) };
    Some(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_found_both_ways_and_unknown_names_are_none() {
        assert_eq!(user_id("root"), Some(0));
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(group_name(0).as_deref(), Some("root"));
        assert_eq!(user_id("no-such-user-shoal"), None);
        assert_eq!(group_id("no-such-group-shoal"), None);
        assert_eq!(user_id("a\0b"), None);
    }
}
