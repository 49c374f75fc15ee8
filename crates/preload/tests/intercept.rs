//! Installs the interception in this test process (which links libc dynamically, as the
//! programs under `shoal run` do) and checks that libc's internal system calls reach the
//! handler, that results pass through or are rewritten as the handler says, and that
//! process creation still works.
//!
//! `install` must run while the process has one thread, so this file has its own `main`
//! (harness = false) that installs first and then runs each check in turn.

use std::ffi::{CStr, CString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use shoal_preload::intercept::{
    install, observe_reentered, raw_syscall, InstallError, InstallReport,
};

/// Paths containing this make the handler answer ENOENT although the file exists.
const FAKE_ENOENT: &[u8] = b"shoal-fake-enoent";
/// Paths containing this make the handler answer EACCES.
const FAKE_EACCES: &[u8] = b"shoal-fake-eacces";
/// A `read` of exactly this many bytes makes the handler answer EIO.
const FAKE_EIO_COUNT: i64 = 7777;
/// What getppid returns while `FAKE_PPID` is set.
const FAKE_PPID_VALUE: i64 = 4242;

static COUNTS: [AtomicUsize; 512] = [const { AtomicUsize::new(0) }; 512];
static FAKE_PPID: AtomicBool = AtomicBool::new(false);
/// Makes the getppid handler call libc's getppid itself (must then go to the kernel).
static REENTER: AtomicBool = AtomicBool::new(false);

const NUMBERS: [i64; 7] = [
    libc::SYS_read,
    libc::SYS_openat,
    libc::SYS_newfstatat,
    libc::SYS_getdents64,
    libc::SYS_getppid,
    libc::SYS_execve,
    libc::SYS_open,
];

/// getppid calls the observer saw (`observe_reentered`).
static OBSERVED: AtomicUsize = AtomicUsize::new(0);

fn observer(nr: i64, args: [i64; 6]) -> i64 {
    OBSERVED.fetch_add(1, Ordering::SeqCst);
    // SAFETY: exactly the call the handler made.
    unsafe { raw_syscall(nr, args) }
}

fn count(nr: i64) -> usize {
    COUNTS[nr as usize].load(Ordering::SeqCst)
}

/// Whether the C string at `ptr` (may be null) contains `needle`.
fn path_has(ptr: i64, needle: &[u8]) -> bool {
    if ptr == 0 {
        return false;
    }
    // SAFETY: openat/newfstatat pass a NUL-terminated path in this argument.
    let path = unsafe { CStr::from_ptr(ptr as *const libc::c_char) }.to_bytes();
    path.windows(needle.len()).any(|w| w == needle)
}

fn handler(nr: i64, args: [i64; 6]) -> i64 {
    COUNTS[nr as usize].fetch_add(1, Ordering::SeqCst);
    match nr {
        libc::SYS_getppid if FAKE_PPID.load(Ordering::SeqCst) => return FAKE_PPID_VALUE,
        libc::SYS_getppid if REENTER.load(Ordering::SeqCst) => {
            // SAFETY: getppid has no arguments and no effects.
            return i64::from(unsafe { libc::getppid() });
        }
        libc::SYS_openat | libc::SYS_newfstatat if path_has(args[1], FAKE_ENOENT) => {
            return -i64::from(libc::ENOENT)
        }
        libc::SYS_openat if path_has(args[1], FAKE_EACCES) => return -i64::from(libc::EACCES),
        libc::SYS_read if args[2] == FAKE_EIO_COUNT => return -i64::from(libc::EIO),
        _ => {}
    }
    // SAFETY: exactly the call the program made.
    unsafe { raw_syscall(nr, args) }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn cstring(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("test paths have no NUL")
}

fn real_ppid() -> i64 {
    // SAFETY: getppid has no arguments and no effects.
    unsafe { raw_syscall(libc::SYS_getppid, [0; 6]) }
}

/// Runs `f` and returns how many times each of `nrs` reached the handler meanwhile.
fn counted<const N: usize, T>(nrs: [i64; N], f: impl FnOnce() -> T) -> (T, [usize; N]) {
    let before = nrs.map(count);
    let out = f();
    let mut after = nrs.map(count);
    for (a, b) in after.iter_mut().zip(before) {
        *a -= b;
    }
    (out, after)
}

fn refuses_dangerous_numbers() {
    for nr in [
        libc::SYS_vfork,
        libc::SYS_clone,
        libc::SYS_clone3,
        libc::SYS_exit_group,
    ] {
        assert_eq!(
            install(handler, &[nr]).err(),
            Some(InstallError::RefusedNumber(nr))
        );
    }
    assert_eq!(
        install(handler, &[9999]).err(),
        Some(InstallError::BadNumber(9999))
    );
}

fn report_covers_requested_calls(report: &InstallReport) {
    for nr in [
        libc::SYS_openat,
        libc::SYS_newfstatat,
        libc::SYS_getdents64,
        libc::SYS_getppid,
        libc::SYS_execve,
    ] {
        assert!(
            report.patched(nr) > 0,
            "no site patched for {nr}:\n{report}"
        );
    }
    for function in ["syscall", "read", "__read_nocancel"] {
        assert!(
            report.entry_hooked(function),
            "{function} not hooked:\n{report}"
        );
    }
    assert!(report.to_string().contains("openat (257)"), "{report}");
    assert_eq!(report.missed(libc::SYS_read), 0, "{report}");
    assert_eq!(
        install(handler, &NUMBERS).err(),
        Some(InstallError::AlreadyInstalled)
    );
}

fn handler_result_replaces_kernel_result() {
    let real = real_ppid();
    assert_ne!(real, FAKE_PPID_VALUE);
    FAKE_PPID.store(true, Ordering::SeqCst);
    // SAFETY: getppid has no arguments and no effects.
    let (got, [n]) = counted([libc::SYS_getppid], || unsafe { libc::getppid() });
    // SAFETY: as above, through libc's syscall().
    let via_syscall_fn = unsafe { libc::syscall(libc::SYS_getppid) };
    let via_std = std::os::unix::process::parent_id();
    FAKE_PPID.store(false, Ordering::SeqCst);
    assert_eq!((i64::from(got), n), (FAKE_PPID_VALUE, 1));
    assert_eq!(via_syscall_fn, FAKE_PPID_VALUE);
    assert_eq!(i64::from(via_std), FAKE_PPID_VALUE);
    // SAFETY: as above.
    assert_eq!(i64::from(unsafe { libc::getppid() }), real);
}

fn nested_call_goes_to_kernel() {
    REENTER.store(true, Ordering::SeqCst);
    let observed = OBSERVED.load(Ordering::SeqCst);
    // SAFETY: getppid has no arguments and no effects.
    let (got, [n]) = counted([libc::SYS_getppid], || unsafe { libc::getppid() });
    REENTER.store(false, Ordering::SeqCst);
    assert_eq!(
        (i64::from(got), n),
        (real_ppid(), 1),
        "the handler's own getppid must not re-enter it"
    );
    assert_eq!(
        OBSERVED.load(Ordering::SeqCst) - observed,
        1,
        "the observer sees the handler's own getppid, and only that one"
    );
}

fn std_file_open_passes_through(dir: &Path) {
    let path = dir.join("plain.txt");
    std::fs::write(&path, "hello shoal").expect("write test file");
    let (text, [n, reads]) = counted([libc::SYS_openat, libc::SYS_read], || {
        let mut text = String::new();
        let mut file = std::fs::File::open(&path).expect("open test file");
        file.read_to_string(&mut text).expect("read test file");
        text
    });
    assert_eq!(text, "hello shoal");
    assert!(n >= 1, "File::open did not reach the handler");
    assert!(reads >= 2, "File::read reached the handler {reads} time(s)");
}

fn read_results_come_from_handler(dir: &Path) {
    let file = std::fs::File::open(dir.join("plain.txt")).expect("open test file");
    let mut buf = vec![0u8; FAKE_EIO_COUNT as usize];
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: `buf` holds FAKE_EIO_COUNT bytes.
    let rc = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(
        (rc, errno()),
        (-1, libc::EIO),
        "the handler's EIO was ignored"
    );
    // SAFETY: as above, one byte less: the handler passes it through.
    let rc = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len() - 1) };
    assert_eq!(rc, 11);
}

fn fopen_reaches_handler_and_sees_its_errors(dir: &Path) {
    let path = cstring(&dir.join("plain.txt"));
    // SAFETY: valid C strings; the stream is closed below.
    let (file, [n]) = counted([libc::SYS_openat], || unsafe {
        libc::fopen(path.as_ptr(), c"r".as_ptr())
    });
    assert!(
        !file.is_null() && n >= 1,
        "fopen: file {file:?}, {n} call(s)"
    );
    let mut buf = [0u8; 64];
    // SAFETY: `buf` holds 64 bytes; `file` is open.
    let (line, [reads]) = counted([libc::SYS_read], || unsafe {
        libc::fgets(buf.as_mut_ptr().cast(), 64, file)
    });
    assert!(
        reads >= 1,
        "fgets's internal read did not reach the handler"
    );
    assert!(!line.is_null());
    assert_eq!(
        // SAFETY: fgets NUL-terminated what it read into `buf`.
        unsafe { CStr::from_ptr(buf.as_ptr().cast()) }.to_bytes(),
        b"hello shoal"
    );
    // SAFETY: `file` is open and not used again.
    unsafe { libc::fclose(file) };

    let denied = cstring(&dir.join("shoal-fake-eacces.txt"));
    // SAFETY: valid C strings.
    let file = unsafe { libc::fopen(denied.as_ptr(), c"r".as_ptr()) };
    assert!(file.is_null(), "the handler's EACCES was ignored");
    assert_eq!(errno(), libc::EACCES);
}

fn opendir_readdir_reach_handler(dir: &Path) {
    let sub = dir.join("listing");
    std::fs::create_dir_all(&sub).expect("mkdir");
    for name in ["a", "b", "c"] {
        std::fs::write(sub.join(name), name).expect("write test file");
    }
    let csub = cstring(&sub);
    let (names, [opens, getdents]) = counted([libc::SYS_openat, libc::SYS_getdents64], || {
        let mut names = Vec::new();
        // SAFETY: valid C string; the stream is closed below.
        let d = unsafe { libc::opendir(csub.as_ptr()) };
        assert!(!d.is_null(), "opendir failed: errno {}", errno());
        loop {
            // SAFETY: `d` is an open directory stream.
            let entry = unsafe { libc::readdir(d) };
            if entry.is_null() {
                break;
            }
            // SAFETY: d_name of a returned entry is NUL-terminated.
            let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
            names.push(name.to_string_lossy().into_owned());
        }
        // SAFETY: `d` is open and not used again.
        unsafe { libc::closedir(d) };
        names.sort();
        names
    });
    assert_eq!(names, [".", "..", "a", "b", "c"]);
    assert!(
        opens >= 1 && getdents >= 1,
        "opendir/readdir: {opens} openat, {getdents} getdents64"
    );
}

fn stat_reaches_handler_and_sees_its_errors(dir: &Path) {
    let path = cstring(&dir.join("plain.txt"));
    // SAFETY: an all-zero stat is a valid value for an out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-pointer.
    let (rc, [n]) = counted([libc::SYS_newfstatat], || unsafe {
        libc::stat(path.as_ptr(), &mut st)
    });
    assert_eq!((rc, st.st_size, n), (0, 11, 1));

    let hidden = cstring(&dir.join("shoal-fake-enoent.txt"));
    // SAFETY: valid C string and out-pointer.
    let rc = unsafe { libc::stat(hidden.as_ptr(), &mut st) };
    assert_eq!(
        (rc, errno()),
        (-1, libc::ENOENT),
        "the handler's ENOENT was ignored"
    );
}

fn syscall_fn_converts_errors(dir: &Path) {
    let hidden = cstring(&dir.join("shoal-fake-enoent.txt"));
    let (rc, [n]) = counted([libc::SYS_openat], || {
        // SAFETY: openat with a valid C string; fails (the handler says ENOENT).
        unsafe {
            libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                hidden.as_ptr(),
                libc::O_RDONLY,
            )
        }
    });
    assert_eq!((rc, errno(), n), (-1, libc::ENOENT, 1));
    // Numbers that are not routed go to the kernel, with libc's error convention.
    // SAFETY: closing fd -1 fails with EBADF and has no effect.
    let rc = unsafe { libc::syscall(libc::SYS_close, -1) };
    assert_eq!((rc, errno()), (-1, libc::EBADF));
    assert_eq!(
        // SAFETY: getpid has no effects.
        unsafe { libc::syscall(libc::SYS_getpid) },
        i64::from(std::process::id())
    );
}

/// `nftw`'s callback (the libc crate has no binding for nftw).
type NftwFn = extern "C" fn(
    *const libc::c_char,
    *const libc::stat,
    libc::c_int,
    *mut libc::c_void,
) -> libc::c_int;
const FTW_PHYS: libc::c_int = 1;
extern "C" {
    fn nftw(
        dir: *const libc::c_char,
        f: NftwFn,
        nopenfd: libc::c_int,
        flags: libc::c_int,
    ) -> libc::c_int;
}

extern "C" fn nftw_visit(
    _: *const libc::c_char,
    _: *const libc::stat,
    _: libc::c_int,
    _: *mut libc::c_void,
) -> libc::c_int {
    NFTW_SEEN.fetch_add(1, Ordering::SeqCst);
    0
}
static NFTW_SEEN: AtomicUsize = AtomicUsize::new(0);

fn nftw_reaches_handler(dir: &Path) {
    let sub = cstring(&dir.join("listing"));
    // SAFETY: valid C string and callback.
    let (rc, [opens, stats]) = counted([libc::SYS_openat, libc::SYS_newfstatat], || unsafe {
        nftw(sub.as_ptr(), nftw_visit, 8, FTW_PHYS)
    });
    assert_eq!((rc, NFTW_SEEN.load(Ordering::SeqCst)), (0, 4));
    assert!(
        opens >= 1 && stats >= 1,
        "nftw: {opens} openat, {stats} newfstatat"
    );
}

fn spawn_still_works_and_its_execve_is_seen() {
    let (status, [n]) = counted([libc::SYS_execve], || {
        std::process::Command::new("/bin/true").status()
    });
    assert!(status.expect("spawn /bin/true").success());
    // posix_spawn's child shares our memory until it execs, so its count shows here.
    assert!(n >= 1, "posix_spawn's execve did not reach the handler");

    let missing = std::process::Command::new("/nonexistent/shoal-test").status();
    assert_eq!(
        missing.expect_err("spawning a missing program").kind(),
        std::io::ErrorKind::NotFound
    );

    // SAFETY: builds and frees the argument vector around posix_spawn with valid pointers.
    let (rc, status) = unsafe {
        let argv = [
            c"/bin/true".as_ptr() as *mut libc::c_char,
            std::ptr::null_mut(),
        ];
        let mut pid = 0;
        let rc = libc::posix_spawn(
            &mut pid,
            argv[0],
            std::ptr::null(),
            std::ptr::null(),
            argv.as_ptr(),
            std::ptr::null(),
        );
        let mut status = -1;
        libc::waitpid(pid, &mut status, 0);
        (rc, status)
    };
    assert_eq!((rc, status), (0, 0));
    // The child's successful execve must not leave the handler switched off here.
    FAKE_PPID.store(true, Ordering::SeqCst);
    // SAFETY: getppid has no arguments and no effects.
    let got = unsafe { libc::getppid() };
    FAKE_PPID.store(false, Ordering::SeqCst);
    assert_eq!(
        i64::from(got),
        FAKE_PPID_VALUE,
        "handler switched off after posix_spawn"
    );
}

fn other_threads_are_intercepted() {
    FAKE_PPID.store(true, Ordering::SeqCst);
    // SAFETY: getppid has no arguments and no effects.
    let got = std::thread::spawn(|| unsafe { libc::getppid() })
        .join()
        .expect("thread");
    FAKE_PPID.store(false, Ordering::SeqCst);
    assert_eq!(i64::from(got), FAKE_PPID_VALUE);
}

fn main() {
    // Files whose names make the handler fail: made before it is installed.
    let dir: PathBuf =
        std::env::temp_dir().join(format!("shoal-preload-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir test dir");
    for name in ["shoal-fake-eacces.txt", "shoal-fake-enoent.txt"] {
        std::fs::write(dir.join(name), "x").expect("write test file");
    }
    refuses_dangerous_numbers();
    assert!(observe_reentered(observer, &[libc::SYS_getppid]));
    assert!(
        !observe_reentered(observer, &[libc::SYS_getppid]),
        "set once"
    );
    let report = install(handler, &NUMBERS).expect("install").report();
    println!("{report}");
    let checks: [(&str, &dyn Fn()); 12] = [
        ("refuses_dangerous_numbers", &|| {}),
        ("report_covers_requested_calls", &|| {
            report_covers_requested_calls(&report)
        }),
        (
            "handler_result_replaces_kernel_result",
            &handler_result_replaces_kernel_result,
        ),
        ("nested_call_goes_to_kernel", &nested_call_goes_to_kernel),
        ("std_file_open_passes_through", &|| {
            std_file_open_passes_through(&dir)
        }),
        ("read_results_come_from_handler", &|| {
            read_results_come_from_handler(&dir)
        }),
        ("fopen_reaches_handler_and_sees_its_errors", &|| {
            fopen_reaches_handler_and_sees_its_errors(&dir)
        }),
        ("opendir_readdir_reach_handler", &|| {
            opendir_readdir_reach_handler(&dir)
        }),
        ("stat_reaches_handler_and_sees_its_errors", &|| {
            stat_reaches_handler_and_sees_its_errors(&dir)
        }),
        ("syscall_fn_converts_errors", &|| {
            syscall_fn_converts_errors(&dir)
        }),
        ("nftw_reaches_handler", &|| nftw_reaches_handler(&dir)),
        (
            "spawn_still_works_and_its_execve_is_seen",
            &spawn_still_works_and_its_execve_is_seen,
        ),
    ];
    for (name, check) in checks {
        check();
        println!("test {name} ... ok");
    }
    other_threads_are_intercepted();
    println!("test other_threads_are_intercepted ... ok");
    std::fs::remove_dir_all(&dir).expect("remove test dir");
    println!("\ntest result: ok. 13 passed");
}
