//! Users, groups and projects by name or number, as `xfs_quota` accepts them: a number is
//! always an id; a name must exist (the passwd/group databases, `/etc/projid`).

use anyhow::{bail, Result};
use shoal_sys::users;

const PROJID_FILE: &str = "/etc/projid";

pub fn user_id(name: &str) -> Result<u32> {
    if let Ok(id) = name.parse::<u32>() {
        return Ok(id);
    }
    match users::user_id(name) {
        Some(id) => Ok(id),
        None => {
            bail!("no such user: {name:?} (give a name from the passwd database or a numeric uid)")
        }
    }
}

pub fn group_id(name: &str) -> Result<u32> {
    if let Ok(id) = name.parse::<u32>() {
        return Ok(id);
    }
    match users::group_id(name) {
        Some(id) => Ok(id),
        None => {
            bail!("no such group: {name:?} (give a name from the group database or a numeric gid)")
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_ids_and_root_has_a_name() {
        assert_eq!(user_id("4242").unwrap(), 4242);
        assert_eq!(group_id("0").unwrap(), 0);
        assert_eq!(project_id("17").unwrap(), 17);
        assert_eq!(user_id("root").unwrap(), 0);
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
