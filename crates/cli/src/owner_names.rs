//! Users, groups and projects by name or number, as `xfs_quota` accepts them: a number is
//! always an id; a name must exist (the passwd/group databases, `/etc/projid`).

use std::ffi::{CStr, CString};

use anyhow::{bail, Context, Result};

const PROJID_FILE: &str = "/etc/projid";

/// Room for one passwd/group entry; glibc asks for about 1 KiB, big group lists need more.
const ENTRY_BUFFER_BYTES: usize = 64 * 1024;

pub fn user_id(name: &str) -> Result<u32> {
    if let Ok(id) = name.parse::<u32>() {
        return Ok(id);
    }
    let c_name = c_string(name)?;
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; ENTRY_BUFFER_BYTES];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: valid C string, out-parameters and buffer of the stated length.
    let status = unsafe {
        libc::getpwnam_r(
            c_name.as_ptr(),
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if status != 0 || found.is_null() {
        bail!("no such user: {name:?} (give a name from the passwd database or a numeric uid)");
    }
    Ok(entry.pw_uid)
}

pub fn group_id(name: &str) -> Result<u32> {
    if let Ok(id) = name.parse::<u32>() {
        return Ok(id);
    }
    let c_name = c_string(name)?;
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
    if status != 0 || found.is_null() {
        bail!("no such group: {name:?} (give a name from the group database or a numeric gid)");
    }
    Ok(entry.gr_gid)
}

pub fn project_id(name: &str) -> Result<u32> {
    if let Ok(id) = name.parse::<u32>() {
        return Ok(id);
    }
    match projects().into_iter().find(|(known, _)| known == name) {
        Some((_, id)) => Ok(id),
        None => bail!("no such project: {name:?} (give a name from {PROJID_FILE} or a numeric id)"),
    }
}

pub fn user_name(id: u32) -> Option<String> {
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; ENTRY_BUFFER_BYTES];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: out-parameters and buffer of the stated length.
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
    // SAFETY: on success pw_name points to a NUL-terminated string inside `buffer`.
    Some(
        unsafe { CStr::from_ptr(entry.pw_name) }
            .to_string_lossy()
            .into_owned(),
    )
}

pub fn group_name(id: u32) -> Option<String> {
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
    // SAFETY: on success gr_name points to a NUL-terminated string inside `buffer`.
    Some(
        unsafe { CStr::from_ptr(entry.gr_name) }
            .to_string_lossy()
            .into_owned(),
    )
}

pub fn project_name(id: u32) -> Option<String> {
    projects()
        .into_iter()
        .find(|&(_, known)| known == id)
        .map(|(name, _)| name)
}

/// `name:id` lines of /etc/projid (missing file: no names).
fn projects() -> Vec<(String, u32)> {
    let Ok(text) = std::fs::read_to_string(PROJID_FILE) else {
        return Vec::new();
    };
    parse_projid(&text)
}

fn parse_projid(text: &str) -> Vec<(String, u32)> {
    text.lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(|line| {
            let (name, id) = line.split_once(':')?;
            Some((name.trim().to_string(), id.trim().parse().ok()?))
        })
        .collect()
}

fn c_string(name: &str) -> Result<CString> {
    CString::new(name).with_context(|| format!("bad name {name:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_ids_and_root_has_a_name() {
        assert_eq!(user_id("4242").unwrap(), 4242);
        assert_eq!(group_id("0").unwrap(), 0);
        assert_eq!(project_id("17").unwrap(), 17);
        assert_eq!(user_id("root").unwrap(), 0);
        assert_eq!(user_name(0).as_deref(), Some("root"));
    }

    #[test]
    fn unknown_names_are_refused_clearly() {
        let error = user_id("no-such-user-shoal").unwrap_err().to_string();
        assert!(error.contains("no such user"), "{error}");
        assert!(group_id("no-such-group-shoal").is_err());
        assert!(project_id("no-such-project-shoal").is_err());
        assert!(user_id("-5").is_err());
    }

    #[test]
    fn projid_lines_parse() {
        let text = "# comment\nweb:10\n db : 11 \nbroken\nbad:x\n";
        assert_eq!(
            parse_projid(text),
            vec![("web".into(), 10), ("db".into(), 11)]
        );
    }
}
