//! Quotas through the engine API: limits, grace, projects, the counter verifier.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use common::*;
use shoal_engine::{QuotaKind, QuotaLimits, QuotaSettings};

fn limit_inodes(fs: &Engine, kind: QuotaKind, id: u32, soft: u64, hard: u64) {
    let limits = QuotaLimits {
        inodes_soft: soft,
        inodes_hard: hard,
        ..QuotaLimits::default()
    };
    fs.set_quota_limits(kind, id, limits).unwrap();
}

fn limit_bytes(fs: &Engine, kind: QuotaKind, id: u32, hard: u64) {
    let limits = QuotaLimits {
        bytes_hard: hard,
        ..QuotaLimits::default()
    };
    fs.set_quota_limits(kind, id, limits).unwrap();
}

fn names(fs: &Engine, dir: u64) -> Vec<Vec<u8>> {
    fs.readdir(dir, None, 10_000)
        .unwrap()
        .into_iter()
        .map(|entry| entry.name)
        .collect()
}

both_backends! {
    fn an_inode_hard_limit_is_reached_exactly_and_the_refusal_changes_nothing(fs) {
        limit_inodes(fs, QuotaKind::User, ME.uid, 0, 3);
        for name in [b"a", b"b", b"c"] {
            mkfile(fs, ROOT_INO, name);
        }
        let before = names(fs, ROOT_INO);
        assert_err!(fs.create(ROOT_INO, b"d", &regular(), ME), FsError::QuotaExceeded);
        assert_err!(fs.mkdir(ROOT_INO, b"e", 0o755, ME), FsError::QuotaExceeded);
        assert_err!(fs.symlink(ROOT_INO, b"f", b"t", ME), FsError::QuotaExceeded);
        assert_eq!(names(fs, ROOT_INO), before);
        assert_eq!(fs.usage(UsageOwner::User(ME.uid)).unwrap().inodes, 3);
        // Other users are not affected; freeing one inode makes room for one.
        fs.create(ROOT_INO, b"other", &regular(), OTHER).unwrap();
        fs.unlink(ROOT_INO, b"a").unwrap();
        mkfile(fs, ROOT_INO, b"d");
        assert!(fs.verify_counters(2).unwrap().is_clean());
    }

    fn a_byte_hard_limit_refuses_the_write_that_would_pass_it(fs) {
        limit_bytes(fs, QuotaKind::Group, ME.gid, 100_000);
        let file = mkfile(fs, ROOT_INO, b"f");
        fs.write(file.ino, 0, &vec![7u8; 100_000]).unwrap();
        assert_err!(fs.write(file.ino, 100_000, b"x"), FsError::QuotaExceeded);
        assert_eq!(fs.getattr(file.ino).unwrap().size, 100_000);
        // Overwriting allocated bytes allocates nothing; a hole beyond EOF costs nothing.
        fs.write(file.ino, 10, b"overwrite").unwrap();
        let set_size = SetAttr { size: Some(10_000_000), ..SetAttr::default() };
        fs.setattr(file.ino, &set_size).unwrap();
        assert_eq!(fs.usage(UsageOwner::Group(ME.gid)).unwrap().bytes, 100_000);
        assert_err!(fs.write(file.ino, 5_000_000, b"y"), FsError::QuotaExceeded);
        // Truncating frees bytes, which makes room again.
        let shrink = SetAttr { size: Some(50_000), ..SetAttr::default() };
        fs.setattr(file.ino, &shrink).unwrap();
        fs.write(file.ino, 50_000, &vec![1u8; 50_000]).unwrap();
        assert!(fs.verify_counters(1).unwrap().is_clean());
    }

    fn a_soft_limit_is_enforced_once_its_grace_runs_out(fs) {
        fs.set_quota_settings(QuotaSettings { inodes_grace_secs: 0, ..QuotaSettings::default() })
            .unwrap();
        limit_inodes(fs, QuotaKind::User, ME.uid, 2, 0);
        mkfile(fs, ROOT_INO, b"a");
        mkfile(fs, ROOT_INO, b"b");
        // Going over the soft limit is allowed once: it starts the (zero-length) grace.
        mkfile(fs, ROOT_INO, b"c");
        let entry = fs.quota_entry(QuotaKind::User, ME.uid);
        assert!(entry.record.inodes_grace_ends.is_some());
        assert_err!(fs.create(ROOT_INO, b"d", &regular(), ME), FsError::QuotaExceeded);
        fs.unlink(ROOT_INO, b"c").unwrap();
        assert_eq!(fs.quota_entry(QuotaKind::User, ME.uid).record.inodes_grace_ends, None);
    }

    fn a_long_grace_lets_usage_stay_over_the_soft_limit(fs) {
        limit_inodes(fs, QuotaKind::User, ME.uid, 1, 0);
        for name in [b"a", b"b", b"c"] {
            mkfile(fs, ROOT_INO, name);
        }
        let ends = fs.quota_entry(QuotaKind::User, ME.uid).record.inodes_grace_ends.unwrap();
        assert!(ends > Timestamp::now().secs + 6 * 24 * 3600);
    }

    fn root_is_limited_only_when_configured(fs) {
        limit_inodes(fs, QuotaKind::User, 0, 0, 1);
        // The root directory already uses root's one inode.
        fs.mkdir(ROOT_INO, b"d", 0o755, Caller::ROOT).unwrap();
        fs.set_quota_settings(QuotaSettings { enforce_root: true, ..QuotaSettings::default() })
            .unwrap();
        assert_err!(fs.mkdir(ROOT_INO, b"e", 0o755, Caller::ROOT), FsError::QuotaExceeded);
    }

    fn chown_moves_usage_even_past_a_limit(fs) {
        limit_inodes(fs, QuotaKind::User, OTHER.uid, 0, 1);
        let a = mkfile_with(fs, ROOT_INO, b"a", b"12345");
        let b = mkfile(fs, ROOT_INO, b"b");
        let to_other = SetAttr { uid: Some(OTHER.uid), ..SetAttr::default() };
        fs.setattr(a.ino, &to_other).unwrap();
        fs.setattr(b.ino, &to_other).unwrap();
        assert_eq!(fs.usage(UsageOwner::User(OTHER.uid)).unwrap(), Usage { inodes: 2, bytes: 5 });
        assert_eq!(fs.usage(UsageOwner::User(ME.uid)).unwrap(), Usage { inodes: 0, bytes: 0 });
        assert_err!(fs.create(ROOT_INO, b"c", &regular(), OTHER), FsError::QuotaExceeded);
    }

    fn hard_links_count_once(fs) {
        limit_inodes(fs, QuotaKind::User, ME.uid, 0, 1);
        let file = mkfile(fs, ROOT_INO, b"a");
        fs.link(file.ino, ROOT_INO, b"b").unwrap();
        fs.link(file.ino, ROOT_INO, b"c").unwrap();
        assert_eq!(fs.usage(UsageOwner::User(ME.uid)).unwrap().inodes, 1);
    }

    fn projects_are_inherited_and_tagged_trees_move_usage(fs) {
        let top = mkdir(fs, ROOT_INO, b"top");
        let sub = mkdir(fs, top.ino, b"sub");
        mkfile_with(fs, sub.ino, b"f", b"hello");
        assert_eq!(fs.set_project_tree(top.ino, 42).unwrap(), 3);
        assert_eq!(fs.usage(UsageOwner::Project(42)).unwrap(), Usage { inodes: 3, bytes: 5 });
        let new = mkfile(fs, sub.ino, b"g");
        assert_eq!(new.project, 42);
        assert_eq!(fs.usage(UsageOwner::Project(42)).unwrap().inodes, 4);
        // Re-tagging is idempotent; clearing moves everything back to project 0.
        assert_eq!(fs.set_project_tree(top.ino, 42).unwrap(), 0);
        assert_eq!(fs.set_project_tree(top.ino, 0).unwrap(), 4);
        assert_eq!(fs.usage(UsageOwner::Project(42)).unwrap(), Usage::default());
        assert!(fs.verify_counters(2).unwrap().is_clean());
    }

    fn moves_into_another_project_are_refused_with_exdev(fs) {
        let tagged = mkdir(fs, ROOT_INO, b"tagged");
        fs.set_project_tree(tagged.ino, 7).unwrap();
        let outside = mkfile(fs, ROOT_INO, b"outside");
        assert_err!(
            fs.rename(ROOT_INO, b"outside", tagged.ino, b"in", RenameMode::Replace),
            FsError::CrossProject
        );
        assert_err!(fs.link(outside.ino, tagged.ino, b"link"), FsError::CrossProject);
        // Out of a project into an untagged directory is allowed (the inode keeps it), and
        // moves inside one directory never cross anything.
        mkfile(fs, tagged.ino, b"inside");
        fs.rename(tagged.ino, b"inside", tagged.ino, b"renamed", RenameMode::Replace).unwrap();
        fs.rename(tagged.ino, b"renamed", ROOT_INO, b"moved", RenameMode::Replace).unwrap();
        assert_eq!(fs.lookup(ROOT_INO, b"moved").unwrap().project, 7);
    }

    fn a_project_limit_applies_to_everyone_and_statfs_sees_it(fs) {
        let tagged = mkdir(fs, ROOT_INO, b"p");
        fs.set_project_tree(tagged.ino, 9).unwrap();
        limit_inodes(fs, QuotaKind::Project, 9, 0, 3);
        fs.create(tagged.ino, b"a", &regular(), ME).unwrap();
        fs.create(tagged.ino, b"b", &regular(), OTHER).unwrap();
        assert_err!(fs.create(tagged.ino, b"c", &regular(), ME), FsError::QuotaExceeded);
        fs.create(ROOT_INO, b"c", &regular(), ME).unwrap();
        let project = fs.project_quota(tagged.ino).unwrap().unwrap();
        assert_eq!(project.project, 9);
        assert_eq!(project.usage.inodes, 3);
        assert_eq!(project.limits.inodes_hard, 3);
        assert_eq!(fs.project_quota(ROOT_INO).unwrap(), None);
    }

    fn limits_below_usage_are_accepted_and_enforced_from_then_on(fs) {
        for name in [b"a", b"b", b"c"] {
            mkfile(fs, ROOT_INO, name);
        }
        limit_inodes(fs, QuotaKind::User, ME.uid, 1, 2);
        let entry = fs.quota_entry(QuotaKind::User, ME.uid);
        assert_eq!(entry.usage.inodes, 3);
        assert!(entry.record.inodes_grace_ends.is_some(), "over soft: grace starts now");
        assert_err!(fs.create(ROOT_INO, b"d", &regular(), ME), FsError::QuotaExceeded);
        fs.unlink(ROOT_INO, b"a").unwrap();
        // Removing limits deletes the record.
        fs.set_quota_limits(QuotaKind::User, ME.uid, QuotaLimits::default()).unwrap();
        assert!(fs.quota_report(QuotaKind::User).iter().all(|e| e.record.limits.is_unlimited()));
        mkfile(fs, ROOT_INO, b"d");
    }

    fn the_report_lists_every_id_with_usage_or_limits(fs) {
        mkfile(fs, ROOT_INO, b"mine");
        fs.create(ROOT_INO, b"theirs", &regular(), OTHER).unwrap();
        limit_inodes(fs, QuotaKind::User, 4242, 10, 20);
        let ids: Vec<u32> = fs.quota_report(QuotaKind::User).iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![0, ME.uid, OTHER.uid, 4242]);
        let groups: Vec<u32> = fs.quota_report(QuotaKind::Group).iter().map(|e| e.id).collect();
        assert_eq!(groups, vec![0, ME.gid, OTHER.gid]);
    }
}

#[test]
fn limits_settings_and_timers_survive_reopen() {
    let fs = disk();
    fs.set_quota_settings(QuotaSettings {
        bytes_grace_secs: 60,
        inodes_grace_secs: 30,
        enforce_root: false,
    })
    .unwrap();
    limit_inodes(&fs, QuotaKind::User, ME.uid, 1, 5);
    mkfile(&fs, ROOT_INO, b"a");
    mkfile(&fs, ROOT_INO, b"b");
    let before = fs.quota_entry(QuotaKind::User, ME.uid);
    assert!(before.record.inodes_grace_ends.is_some());
    let closed = fs.close();
    let engine = closed.open();
    assert_eq!(engine.quota_entry(QuotaKind::User, ME.uid), before);
    assert_eq!(engine.quota_settings().inodes_grace_secs, 30);
    for name in [b"c", b"d", b"e"] {
        engine.create(ROOT_INO, name, &regular(), ME).unwrap();
    }
    assert_err!(
        engine.create(ROOT_INO, b"f", &regular(), ME),
        FsError::QuotaExceeded
    );
}

#[test]
fn the_counter_verifier_finds_a_damaged_counter_and_counts_every_inode() {
    let fs = disk();
    let dir = mkdir(&fs, ROOT_INO, b"d");
    for i in 0..500u32 {
        mkfile_with(&fs, dir.ino, format!("f{i}").as_bytes(), &i.to_be_bytes());
    }
    let report = fs.verify_counters(2).unwrap();
    assert!(report.is_clean(), "{}", report.summary());
    assert_eq!(report.inodes_scanned, 502);
    let closed = fs.close();
    // Damage one counter behind the engine's back, then check offline.
    {
        use shoal_engine::internals::store::{Batch, FjallStore, FjallTuning, Space, Store};
        let store = FjallStore::open(&closed.store.join("kv"), &FjallTuning::default()).unwrap();
        let mut batch = Batch::default();
        let owners = UsageKey {
            uid: ME.uid,
            gid: ME.gid,
            project: 0,
        };
        batch.put(
            Space::Meta,
            shoal_engine::internals::keys::counter_key(owners),
            shoal_engine::internals::keys::encode_usage(Usage {
                inodes: 3,
                bytes: 0,
            }),
        );
        store.write(batch).unwrap();
        store.sync().unwrap();
    }
    let report = shoal_engine::verify_counters_store_dir(&closed.store, 2).unwrap();
    assert_eq!(report.mismatch_count, 1, "{}", report.summary());
    assert!(
        report.mismatches[0].contains("counter says 3 inodes"),
        "{}",
        report.summary()
    );
}

#[test]
fn the_online_verifier_sees_a_consistent_snapshot_while_writers_run() {
    let fs = memory();
    let engine = fs.engine.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..3000u32 {
            let name = format!("f{i}");
            engine
                .create(ROOT_INO, name.as_bytes(), &regular(), ME)
                .unwrap();
            if i % 3 == 0 {
                engine.unlink(ROOT_INO, name.as_bytes()).unwrap();
            }
        }
    });
    let mut checks = 0;
    while !writer.is_finished() || checks == 0 {
        let report = fs.verify_counters(2).unwrap();
        assert!(report.is_clean(), "{}", report.summary());
        checks += 1;
    }
    writer.join().unwrap();
    assert!(fs.verify_counters(2).unwrap().is_clean());
}
