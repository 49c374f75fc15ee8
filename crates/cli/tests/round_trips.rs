//! What the kernel sends for everyday tools, counted with `shoal stats --json`: requests the
//! daemon made unnecessary must not come back, and what the kernel then serves from its
//! own caches must still be right.

mod common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::path::Path;

use common::{shoal_ok, Mounted};
use serde_json::Value;

fn stats_json(mnt: &Path) -> Value {
    let out = shoal_ok(&[OsStr::new("stats"), OsStr::new("--json"), mnt.as_os_str()]);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.describe()))
}

fn count(stats: &Value, name: &str) -> u64 {
    stats["ops"]
        .as_array()
        .expect("ops array")
        .iter()
        .find(|op| op["op"] == name)
        .and_then(|op| op["count"].as_u64())
        .unwrap_or_else(|| panic!("no op {name} in {stats}"))
}

/// Requests of each named type sent while `work` ran.
fn requests_during(mnt: &Path, names: &[&str], work: impl FnOnce()) -> Vec<u64> {
    let before = stats_json(mnt);
    work();
    let after = stats_json(mnt);
    names
        .iter()
        .map(|name| count(&after, name) - count(&before, name))
        .collect()
}

fn listing(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect()
}

#[test]
fn a_warm_listing_is_served_by_the_kernel_and_follows_changes() {
    let m = Mounted::new();
    let dir = m.path("d");
    fs::create_dir(&dir).unwrap();
    let mut expected = BTreeSet::new();
    for i in 0..2_000 {
        let name = format!("file-{i:05}");
        File::create(dir.join(&name)).unwrap();
        expected.insert(name);
    }
    assert_eq!(listing(&dir), expected, "first listing");
    let dir_requests = ["opendir", "readdir", "readdirplus", "releasedir"];
    let sent = requests_during(m.path("").as_path(), &dir_requests, || {
        assert_eq!(listing(&dir), expected, "warm listing");
    });
    assert_eq!(sent, vec![0; 4], "a warm listing sends {dir_requests:?}");

    // A change through the mount drops the cached listing: the next one shows it.
    File::create(dir.join("new")).unwrap();
    fs::remove_file(dir.join("file-00007")).unwrap();
    expected.insert("new".into());
    expected.remove("file-00007");
    assert_eq!(listing(&dir), expected, "listing after changes");
    m.finish();
}

/// seekdir to an offset handed out by an earlier open of the directory continues right
/// after that entry, even once the entry itself is gone (offsets name positions).
#[test]
fn offsets_from_an_earlier_open_resume_after_their_entry() {
    let m = Mounted::new();
    let dir = m.path("d");
    fs::create_dir(&dir).unwrap();
    for i in 0..300 {
        File::create(dir.join(format!("e{i:03}"))).unwrap();
    }
    let (first_names, offset) = names_up_to(&dir, "e149");
    fs::remove_file(dir.join("e149")).unwrap();
    let rest = names_after_offset(&dir, offset);
    let mut all: Vec<String> = first_names;
    all.extend(rest);
    let listed: BTreeSet<_> = all.iter().cloned().collect();
    assert_eq!(listed.len(), all.len(), "no entry twice");
    let expected: BTreeSet<_> = (0..300)
        .map(|i| format!("e{i:03}"))
        .filter(|name| name != "e149")
        .chain(["e149".to_string()])
        .collect();
    assert_eq!(
        listed, expected,
        "every entry once (e149 from the first open)"
    );
    m.finish();
}

/// Names read by one opendir stream up to and including `last`, and telldir after it.
fn names_up_to(dir: &Path, last: &str) -> (Vec<String>, libc::c_long) {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    let mut names = Vec::new();
    // SAFETY: a valid C string; the stream is closed below.
    let stream = unsafe { libc::opendir(path.as_ptr()) };
    assert!(!stream.is_null());
    loop {
        // SAFETY: a live stream.
        let entry = unsafe { libc::readdir(stream) };
        assert!(!entry.is_null(), "{last} never listed");
        // SAFETY: readdir returned a valid entry.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        if name == "." || name == ".." {
            continue;
        }
        names.push(name.clone());
        if name == last {
            // SAFETY: a live stream.
            let offset = unsafe { libc::telldir(stream) };
            // SAFETY: a live stream, closed once.
            unsafe { libc::closedir(stream) };
            return (names, offset);
        }
    }
}

fn names_after_offset(dir: &Path, offset: libc::c_long) -> Vec<String> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string; the stream is closed below.
    let stream = unsafe { libc::opendir(path.as_ptr()) };
    assert!(!stream.is_null());
    // SAFETY: a live stream; the offset came from telldir on this directory.
    unsafe { libc::seekdir(stream, offset) };
    let mut names = Vec::new();
    loop {
        // SAFETY: a live stream.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: readdir returned a valid entry.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
    }
    // SAFETY: a live stream, closed once.
    unsafe { libc::closedir(stream) };
    names
}
