//! The sections of the man pages that `--help` does not have: EXAMPLES, EXIT STATUS,
//! FILES and SEE ALSO, so that an installed page reads whole without the repository.
//! The rest of each page comes from the command-line definition (`docs_cmd`).

use std::fmt::Write as _;

/// Examples of one page: (what it does, the command line).
type Examples = &'static [(&'static str, &'static str)];

/// The examples of the page `name` (`shoal`, `shoal-mount`, `shoal-quota-set`, ...).
fn examples(name: &str) -> Examples {
    match name {
        "shoal" => &[
            ("Format a store, mount it, look at it live, unmount it:", "shoal mkfs /srv/shoal/store\nmkdir -p /mnt/data\nshoal mount /srv/shoal/store /mnt/data\nshoal stats /mnt/data\nshoal umount /mnt/data"),
        ],
        "shoal-mkfs" => &[
            ("A new store with a label:", "shoal mkfs -L photos /srv/photos/store"),
        ],
        "shoal-mount" => &[
            ("Mount with a 2 s commit interval, a 512 MiB cache and metrics on 127.0.0.1:10190:", "shoal mount -o commit=2s,cache=512M,metrics /srv/shoal/store /mnt/data"),
            ("The same through mount(8), and as an /etc/fstab line:", "mount -t fuse.shoal /srv/shoal/store /mnt/data -o commit=2s\n/srv/shoal/store /mnt/data fuse.shoal nofail,commit=2s 0 0"),
            ("Read-only and back; nosuid, nodev and the other flags stay as they were:", "mount -o remount,ro /mnt/data\nmount -o remount,rw /mnt/data"),
            ("Let other users in (needs user_allow_other in /etc/fuse.conf for non-root mounts):", "shoal mount -o allow_other /srv/shoal/store /mnt/data"),
        ],
        "shoal-umount" => &[("Make everything durable and unmount:", "shoal umount /mnt/data")],
        "shoal-fsck" => &[
            ("Check an unmounted store; exit 0 if clean:", "shoal fsck /srv/shoal/store"),
            ("Check only the usage counters of a live mount:", "shoal fsck --counters /mnt/data"),
            ("Repair in place (also writes a lost FORMAT or IDENTITY again):", "shoal fsck --repair /srv/shoal/store"),
        ],
        "shoal-info" => &[
            ("What a mount is and holds, in human units; as JSON:", "shoal info --human /mnt/data\nshoal info --json /srv/shoal/store"),
        ],
        "shoal-backup" => &[
            ("Back up a live mount into a file, or to another host:", "shoal backup /mnt/data /backup/data.shoal\nshoal backup /mnt/data - | ssh backup-host 'cat > data.shoal'"),
        ],
        "shoal-restore" => &[
            ("Make a new store from a backup file, or from a pipe:", "shoal restore /backup/data.shoal /srv/restored/store\nssh backup-host cat data.shoal | shoal restore - /srv/restored/store"),
        ],
        "shoal-quota" | "shoal-quota-report" => &[
            ("Usage and limits of users, in human units; of projects as JSON:", "shoal quota report --human /mnt/data\nshoal quota report -p --json /mnt/data"),
        ],
        "shoal-quota-set" => &[
            ("A hard byte limit of 10 GiB and a soft inode limit for user 1000:", "shoal quota set -u 1000 --bhard 10G --isoft 100000 /mnt/data"),
        ],
        "shoal-quota-config" => &[("A 7-day grace period for byte limits:", "shoal quota config --bytes-grace 7d /mnt/data")],
        "shoal-quota-project" | "shoal-quota-project-set" => &[("Count a tree against project 42:", "shoal quota project set /mnt/data/teams/blue 42")],
        "shoal-quota-project-clear" => &[("Move a tree back to project 0:", "shoal quota project clear /mnt/data/teams/blue")],
        "shoal-stats" => &[
            ("Watch a mount; save a JSON snapshot every 5 s:", "shoal stats /mnt/data\nshoal stats --json --interval 5 /mnt/data > stats.jsonl"),
        ],
        "shoal-du" => &[("Recursive usage of two directories, at once:", "shoal du /mnt/data/projects /mnt/data/home")],
        "shoal-rmtree" => &[("Remove a tree at once, then wait for its space:", "shoal rmtree --wait /mnt/data/old-build")],
        "shoal-import" => &[
            ("Unpack a compressed tarball (gzip, zstd or xz) into a new directory:", "shoal import --from src.tar.zst /mnt/data/src\ncurl -s https://example.org/src.tar.gz | shoal import /mnt/data/src"),
        ],
        "shoal-export" => &[("Archive a tree to another host:", "shoal export /mnt/data/src | ssh host tar xf - -C /srv")],
        "shoal-run" => &[
            ("Unpack an archive onto a mount on the fast path:", "shoal run -- tar xf src.tar -C /mnt/data"),
            ("Copy a tree, then see which calls the daemon served and which went to the kernel:", "shoal run --stats -- cp -a /mnt/data/src /mnt/data/copy"),
            ("The same library without shoal run, for one program:", "LD_PRELOAD=/usr/local/lib/shoal/libshoal_preload.so make -C /mnt/data/src"),
        ],
        "shoal-gen-tree" => &[("A source-like tree of 5000 files:", "shoal gen-tree --files 5000 /tmp/tree")],
        "shoal-bench" => &[
            ("Creates on XFS, ext4 and shoal side by side, with a report:", "shoal bench --make xfs,ext4,shoal --size small --runs 3 --report /tmp/bench create"),
        ],
        _ => &[],
    }
}

/// What the command's exit status means.
fn exit_status(name: &str) -> &'static str {
    match name {
        "shoal-fsck" => "0: the store is clean (orphans a crash left, awaiting the next mount, included). 1: it is damaged or an invariant fails; the report lists what. 2: the directory is not a store fsck can check (missing, foreign, of a newer format, in use, or its FORMAT lost: fsck --repair writes it again).",
        "shoal-mount" => "0: the filesystem is mounted and served. 1: it is not; the reason is on standard error. Run as mount.fuse.shoal by mount(8): 0, or 32 (mount failure).",
        _ => "0: success. 1: the command failed; the reason is on standard error. 2: the command line could not be parsed.",
    }
}

/// The files of a store and of the installation, on every page.
const FILES: &[(&str, &str)] = &[
    ("STORE_DIR/FORMAT", "The store's format version (shoal-store 2). Without it no command touches the store; fsck --repair writes it again from the store."),
    ("STORE_DIR/IDENTITY", "UUID, label and creation time, shown by shoal info and used as the uuid label of the metrics."),
    ("STORE_DIR/kv/", "The key-value store: journals, tables and blob files holding every file's data."),
    ("STORE_DIR/lock", "The pid of the process that holds the store (a mount's daemon, or an offline command)."),
    ("/sbin/mount.fuse.shoal", "The mount helper (a link to shoal) that mount(8) runs for type fuse.shoal, remounts included."),
    ("/etc/fstab", "Lines of type fuse.shoal mount stores at boot (nofail, x-systemd.* and the options of shoal mount -o)."),
];

/// A note for FILES: a store holds every file's bytes.
const FILES_NOTE: &str = "Everything in STORE_DIR is private to its owner (directories 0700, files 0600); every shoal command that writes into a store keeps it so.";

/// Text as roff prints it literally: backslashes escaped, and `-` as a real hyphen-minus
/// (what a reader types), with no line starting as a request.
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    escaped
        .lines()
        .map(|line| {
            if line.starts_with('.') || line.starts_with('\'') {
                format!("\\&{line}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The roff of EXAMPLES, EXIT STATUS, FILES and SEE ALSO for the page `name`; `pages`
/// are the names of every page (for SEE ALSO).
pub fn render(name: &str, pages: &[String]) -> String {
    let mut roff = String::new();
    let examples = examples(name);
    if !examples.is_empty() {
        roff.push_str(".SH EXAMPLES\n");
        for (what, command) in examples {
            let _ = writeln!(
                roff,
                ".PP\n{}\n.PP\n.nf\n.RS 4\n{}\n.RE\n.fi",
                roff_text(what),
                roff_text(command)
            );
        }
    }
    let _ = writeln!(
        roff,
        ".SH \"EXIT STATUS\"\n{}",
        roff_text(exit_status(name))
    );
    roff.push_str(".SH FILES\n");
    let log = (
        format!(
            "STORE_DIR/shoal.log, shoal.log.1 .. shoal.log.{}",
            crate::log_file::LOG_KEPT_FILES
        ),
        format!(
            "The daemon's log, rotated at {} MiB (SHOAL_LOG sets what it logs).",
            crate::log_file::LOG_ROTATE_BYTES >> 20
        ),
    );
    let files = FILES
        .iter()
        .map(|(path, what)| ((*path).to_string(), (*what).to_string()))
        .chain([log]);
    for (path, what) in files {
        let _ = writeln!(
            roff,
            ".TP\n\\fB{}\\fR\n{}",
            roff_text(&path),
            roff_text(&what)
        );
    }
    let _ = writeln!(roff, ".PP\n{}", roff_text(FILES_NOTE));
    let see_also: Vec<String> = pages
        .iter()
        .filter(|page| page.as_str() != name)
        .map(|page| format!("\\fB{}\\fR(8)", roff_text(page)))
        .chain(
            [
                "\\fBmount\\fR(8)",
                "\\fBfstab\\fR(5)",
                "\\fBfusermount3\\fR(1)",
            ]
            .map(String::from),
        )
        .collect();
    let _ = writeln!(roff, ".SH \"SEE ALSO\"\n{}", see_also.join(", "));
    roff
}

/// Pages that have examples, for the test that every page has them.
#[cfg(test)]
pub fn has_examples(name: &str) -> bool {
    !examples(name).is_empty()
}
