#!/usr/bin/env bash
# bench-core.sh: the side-by-side benchmark of the core issue.
#
# Targets (run interleaved, one session): xfs and ext4 on loop devices, shoal (store on
# the scratch disk), shoal --memory, and reference-memfs (the minimal fuser in-memory FS,
# the FUSE ceiling). Workloads: fs_mark -s 0, fs_mark -s 100, tar xf of a ~100k-entry
# source-like tree, find -ls cold and warm, rm -rf. Writes a Markdown report.
#
# Every workload group runs on a FRESH filesystem: for each run, workload group and target
# the target is created, mounted, measured, unmounted and destroyed (new sparse image +
# mkfs for xfs/ext4, new store for shoal, new process for the in-memory ones). The groups
# are: fs_mark -s 0 | fs_mark -s 100 | tree (tar xf -> sync -> find -ls cold -> warm -> rm -rf,
# in that order on the same filesystem).
#
# Order: for each run, for each group, targets in the order given (A B C D A B C D ...), so
# slow drift of the machine hits every target alike. Medians and min-max over the runs.
#
# Run as root from anywhere:  scripts/bench-core.sh [options]   (see --help)
set -euo pipefail
export LC_ALL=C

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
quote_args() {   # shell-quote only what needs it
    local a out=""
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./,:=+@%-]+$ ]]; then out+="$a "; else out+="$(printf '%q' "$a") "; fi
    done
    echo "${out% }"
}
COMMAND_LINE=$(quote_args "$0" "$@")

# ---------------------------------------------------------------- options

ALL_TARGETS="xfs,ext4,shoal,shoal-memory,reference-memfs"
ALL_GROUPS="fsmark0,fsmark100,tree"
RUNS=3
QUICK=0
TARGETS=$ALL_TARGETS
GROUPS_SEL=$ALL_GROUPS
OUT=./docs/bench/core.md
SHOAL=$REPO/target/release/shoal
MEMFS=$REPO/target/release/reference-memfs
MEMFS_THREADS=2
SCRATCH_PARENT=/var/tmp
IMG_SIZE=8G
FILES=""          # fs_mark -n (files per thread); default 100000, quick 10000
TREE_ENTRIES=""   # default 100000, quick 10000
TIMEOUT=600
KEEP=0
RUNS_SET=0

usage() {
    cat <<EOF
usage: $0 [options]            (run as root)

  --runs N            runs per target and workload (default 3; --quick: 1)
  --quick             smoke test: fs_mark -n 10000, 10k-entry tree, runs=1
  --targets LIST      comma list from: $ALL_TARGETS (default: all)
  --workloads LIST    comma list from: $ALL_GROUPS (default: all)
  --out FILE          Markdown report (default ./docs/bench/core.md)
  --shoal PATH        shoal binary (default target/release/shoal)
  --memfs PATH        reference-memfs binary (default target/release/reference-memfs)
  --memfs-threads N   reference-memfs --threads (default 2)
  --files N           fs_mark -n, files per thread; 2 threads (default 100000)
  --tree-entries N    entries in the tar tree (default 100000)
  --scratch DIR       where scratch space is made (default /var/tmp; must be on a disk,
                      not tmpfs: it holds the loop images and the shoal store)
  --img-size SIZE     sparse loop image size (default 8G)
  --timeout SEC       per-workload timeout (default 600)
  --keep              keep the scratch directory (logs) on exit
EOF
}

die() { echo "bench-core: error: $*" >&2; exit 1; }
log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }

while [[ $# -gt 0 ]]; do
    case $1 in
        --runs) RUNS=${2:?}; RUNS_SET=1; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --targets) TARGETS=${2:?}; shift 2 ;;
        --workloads) GROUPS_SEL=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        --shoal) SHOAL=${2:?}; shift 2 ;;
        --memfs) MEMFS=${2:?}; shift 2 ;;
        --memfs-threads) MEMFS_THREADS=${2:?}; shift 2 ;;
        --files) FILES=${2:?}; shift 2 ;;
        --tree-entries) TREE_ENTRIES=${2:?}; shift 2 ;;
        --scratch) SCRATCH_PARENT=${2:?}; shift 2 ;;
        --img-size) IMG_SIZE=${2:?}; shift 2 ;;
        --timeout) TIMEOUT=${2:?}; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" ;;
    esac
done

if [[ $QUICK == 1 ]]; then
    FILES=${FILES:-10000}
    TREE_ENTRIES=${TREE_ENTRIES:-10000}
    [[ $RUNS_SET == 1 ]] || RUNS=1
fi
FILES=${FILES:-100000}
TREE_ENTRIES=${TREE_ENTRIES:-100000}

IFS=, read -r -a TARGET_LIST <<<"$TARGETS"
IFS=, read -r -a GROUP_LIST <<<"$GROUPS_SEL"
for t in "${TARGET_LIST[@]}"; do
    [[ ,$ALL_TARGETS, == *",$t,"* ]] || die "unknown target '$t' (known: $ALL_TARGETS)"
done
for g in "${GROUP_LIST[@]}"; do
    [[ ,$ALL_GROUPS, == *",$g,"* ]] || die "unknown workload '$g' (known: $ALL_GROUPS)"
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive integer"
[[ $FILES =~ ^[1-9][0-9]*$ ]] || die "--files must be a positive integer"
[[ $TREE_ENTRIES =~ ^[1-9][0-9]*$ ]] || die "--tree-entries must be a positive integer"
has_target() { [[ ,$TARGETS, == *",$1,"* ]]; }
has_group() { [[ ,$GROUPS_SEL, == *",$1,"* ]]; }

# ---------------------------------------------------------------- preflight

[[ $(id -u) == 0 ]] || die "must run as root (loop devices, mount, drop_caches)"
need() { command -v "$1" >/dev/null 2>&1 || die "missing tool '$1'${2:+ (package: $2)}"; }
for t in timeout awk sort sync mount umount mountpoint find tar python3 date; do need "$t"; done
need fs_mark fsmark
if has_target xfs || has_target ext4; then need losetup mount; fi
has_target xfs && need mkfs.xfs xfsprogs
has_target ext4 && need mkfs.ext4 e2fsprogs
if has_target shoal || has_target shoal-memory || has_target reference-memfs; then
    need fusermount3 fuse3
    [[ -e /dev/fuse ]] || die "/dev/fuse missing (modprobe fuse)"
fi
abspath() { [[ $1 == /* ]] && echo "$1" || echo "$PWD/$1"; }
SHOAL=$(abspath "$SHOAL"); MEMFS=$(abspath "$MEMFS"); OUT=$(abspath "$OUT")
if has_target shoal || has_target shoal-memory; then
    [[ -x $SHOAL ]] || die "shoal binary not found at $SHOAL (cargo build --release -p shoal, or --shoal PATH, or leave shoal targets out of --targets)"
fi
if has_target reference-memfs; then
    [[ -x $MEMFS ]] || die "reference-memfs not found at $MEMFS (cargo build --release -p reference-memfs, or --memfs PATH)"
fi
[[ -d $SCRATCH_PARENT ]] || die "scratch parent $SCRATCH_PARENT does not exist"
fstype() { df --output=fstype "$1" | tail -1; }
[[ $(fstype "$SCRATCH_PARENT") != tmpfs ]] || die "--scratch $SCRATCH_PARENT is tmpfs; give a directory on a disk"
[[ -d $(dirname "$OUT") ]] || die "output directory $(dirname "$OUT") does not exist"

# ---------------------------------------------------------------- scratch and cleanup

# State for the exit trap: our directories, and the target currently set up.
SCRATCH=""; MNT_ROOT=""; TARDIR=""; WL_PID=""
CUR_TARGET=""; MNT=""; LOOP=""; IMG=""; DAEMON_PID=""; SHOAL_DAEMON=""; STORE=""

cleanup() {
    local rc=$? m
    set +e
    cd /
    if [[ -n $WL_PID ]] && kill -0 "$WL_PID" 2>/dev/null; then
        log "cleanup: stopping the running workload ($WL_PID)"
        kill "$WL_PID" 2>/dev/null
        wait_gone "$WL_PID" 10
    fi
    if [[ -n $CUR_TARGET ]]; then
        log "cleanup: tearing down $CUR_TARGET"
        teardown_target force
    fi
    # Anything still mounted under our directories (deepest first).
    for m in $(awk -v s="${SCRATCH:-/nonexistent}/" -v r="${MNT_ROOT:-/nonexistent}/" \
                   'index($2, s) == 1 || index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
        fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
    done
    [[ -n $MNT_ROOT ]] && rm -rf --one-file-system "$MNT_ROOT"
    if [[ -n $SCRATCH ]]; then
        if [[ $KEEP == 1 ]]; then
            log "scratch kept: $SCRATCH"
        else
            rm -rf --one-file-system "$SCRATCH"
        fi
    fi
    [[ $TARDIR == /dev/shm/* ]] && rm -rf "$TARDIR"
    exit $rc
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM HUP

SCRATCH=$(mktemp -d "$SCRATCH_PARENT/shoal-bench.XXXXXX")
mkdir -p "$SCRATCH/store" "$SCRATCH/logs"
cd "$SCRATCH/logs"   # all paths below are absolute; fs_mark leaves its fs_log.txt here
# Mount points get a short path of their own: fs_mark refuses -d paths of 40 bytes or more.
mkdir -p /mnt
MNT_ROOT=$(mktemp -d /mnt/sb.XXXXXX)
# The tar archive lives on tmpfs when there is room: drop_caches cannot evict it, so every
# timed `tar xf` reads its input from memory and only the target's write path is measured.
if [[ -d /dev/shm ]] && (( $(df -k --output=avail /dev/shm | tail -1) > TREE_ENTRIES * 8 + 65536 )); then
    TARDIR=$(mktemp -d /dev/shm/shoal-bench-tar.XXXXXX)
else
    TARDIR=$SCRATCH/tar; mkdir -p "$TARDIR"
fi
TARBALL=$TARDIR/tree.tar

# ---------------------------------------------------------------- helpers

now() { echo "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# wait_mounted DIR [PID]: poll until DIR is a mount point (up to 30 s). If PID (the
# process that is to mount it) exits non-zero first, fail at once.
wait_mounted() {
    local dir=$1 pid=${2:-} i st
    for ((i = 0; i < 300; i++)); do
        mountpoint -q "$dir" && return 0
        if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
            st=0; wait "$pid" || st=$?
            [[ $st == 0 ]] || return 1
            pid=""   # exited 0: it daemonized; keep polling
        fi
        sleep 0.1
    done
    return 1
}

# wait_gone PID SECONDS: wait for a child to exit; kill it if it does not.
wait_gone() {
    local pid=$1 secs=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.1
    done
    log "process $pid still alive ${secs}s after unmount; killing it"
    kill "$pid" 2>/dev/null; sleep 1; kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
    return 1
}

# umount_retry DIR: plain umount, retried while busy; lazy as the last resort.
umount_retry() {
    local i
    for ((i = 0; i < 20; i++)); do
        umount "$1" 2>/dev/null && return 0
        sleep 0.5
    done
    log "umount $1 failed repeatedly; lazy unmount"
    umount -l "$1"
}

# ---------------------------------------------------------------- targets

# Note: setup functions run inside `if ! setup_target`, where bash ignores `set -e`, so every
# step checks its own status.
setup_loopfs() {   # $1 = xfs | ext4
    IMG=$SCRATCH/$1.img
    truncate -s "$IMG_SIZE" "$IMG" || return 1
    LOOP=$(losetup -f --show "$IMG") || { LOOP=""; return 1; }
    case $1 in
        xfs) mkfs.xfs -q -f "$LOOP" || return 1 ;;
        # Initialise inode tables and journal now, so no ext4lazyinit thread runs during
        # the measurements.
        ext4) mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP" || return 1 ;;
    esac
    mount "$LOOP" "$MNT"
}
teardown_loopfs() {
    if mountpoint -q "$MNT"; then umount_retry "$MNT"; fi
    if [[ -n $LOOP ]]; then losetup -d "$LOOP" || log "losetup -d $LOOP failed"; fi
    rm -f "$IMG"
    LOOP=""; IMG=""
}

# find_daemon: pids of the shoal processes serving $MNT (argv0 named shoal*, $MNT among
# their arguments), or nothing. `shoal mount` detaches a daemon we are not the parent of.
find_daemon() {
    local d pid argv
    for d in /proc/[0-9]*; do
        pid=${d#/proc/}
        [[ $pid == "$$" ]] && continue
        mapfile -d "" -t argv 2>/dev/null <"$d/cmdline" || continue
        (( ${#argv[@]} > 1 )) || continue
        [[ ${argv[0]##*/} == shoal* ]] || continue
        local a
        for a in "${argv[@]:1}"; do
            if [[ $a == "$MNT" ]]; then echo "$pid"; break; fi
        done
    done
}

setup_shoal() {    # $1 = disk | memory
    local log=$SCRATCH/logs/$CUR_TARGET.log
    if [[ $1 == disk ]]; then
        STORE=$SCRATCH/store/shoal
        rm -rf "$STORE" || return 1
        "$SHOAL" mkfs "$STORE" >>"$log" 2>&1 || { tail -n 5 "$log" >&2; return 1; }
        "$SHOAL" mount "$STORE" "$MNT" >>"$log" 2>&1 &
    else
        "$SHOAL" mount --memory "$MNT" >>"$log" 2>&1 &
    fi
    DAEMON_PID=$!
    # `shoal mount` may stay in the foreground or detach; wait_mounted handles both.
    wait_mounted "$MNT" "$DAEMON_PID" || { tail -n 5 "$log" >&2; return 1; }
    SHOAL_DAEMON=$(find_daemon | tr '\n' ' ') || true
    log "  shoal daemon pid(s): ${SHOAL_DAEMON:-none found}"
}
teardown_shoal() {
    local p
    if mountpoint -q "$MNT"; then
        # `shoal umount` makes everything durable and waits for the daemon to finish.
        if ! "$SHOAL" umount "$MNT" >>"$SCRATCH/logs/$CUR_TARGET.log" 2>&1; then
            log "  shoal umount failed ($(tail -n 1 "$SCRATCH/logs/$CUR_TARGET.log")); fusermount3 -u instead"
            fusermount3 -u "$MNT" || fusermount3 -uz "$MNT"
        fi
    fi
    # Whatever served the mount must be gone before the next target starts (it may still
    # be flushing: allow a minute).
    if [[ -n $DAEMON_PID ]]; then wait_gone "$DAEMON_PID" 60 || true; fi
    for p in $SHOAL_DAEMON; do wait_gone "$p" 60 || true; done
    if [[ -n $STORE ]]; then rm -rf "$STORE"; fi
    DAEMON_PID=""; SHOAL_DAEMON=""; STORE=""
}

setup_memfs() {
    "$MEMFS" "$MNT" --threads "$MEMFS_THREADS" >>"$SCRATCH/logs/reference-memfs.log" 2>&1 &
    DAEMON_PID=$!
    wait_mounted "$MNT" "$DAEMON_PID" || { tail -n 5 "$SCRATCH/logs/reference-memfs.log" >&2; return 1; }
}
teardown_memfs() {
    if mountpoint -q "$MNT"; then fusermount3 -u "$MNT" || fusermount3 -uz "$MNT"; fi
    if [[ -n $DAEMON_PID ]]; then wait_gone "$DAEMON_PID" 30 || true; fi
    DAEMON_PID=""
}

# setup_target NAME: make and mount a fresh instance of target NAME at $MNT.
setup_target() {
    CUR_TARGET=$1
    MNT=$MNT_ROOT/$1
    mkdir -p "$MNT" || return 1
    sync
    case $1 in
        xfs|ext4) setup_loopfs "$1" ;;
        shoal) setup_shoal disk ;;
        shoal-memory) setup_shoal memory ;;
        reference-memfs) setup_memfs ;;
    esac
}

# teardown_target [force]: unmount and destroy the current target.
teardown_target() {
    local p
    [[ -n $CUR_TARGET ]] || return 0
    if [[ ${1:-} == force ]]; then
        # From the exit trap: the daemon may be gone or the mount stale.
        case $CUR_TARGET in
            shoal|shoal-memory|reference-memfs)
                if mountpoint -q "$MNT" || grep -q " $MNT " /proc/mounts; then
                    fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" 2>/dev/null
                fi
                for p in $DAEMON_PID $SHOAL_DAEMON; do
                    if kill -0 "$p" 2>/dev/null; then wait_gone "$p" 10; fi
                done ;;
            *) umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
               [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null
               rm -f "$IMG" ;;
        esac
    else
        case $CUR_TARGET in
            xfs|ext4) teardown_loopfs ;;
            shoal|shoal-memory) teardown_shoal ;;
            reference-memfs) teardown_memfs ;;
        esac
    fi
    CUR_TARGET=""; LOOP=""; IMG=""; DAEMON_PID=""; SHOAL_DAEMON=""; STORE=""
}

# ---------------------------------------------------------------- results

declare -A RES    # RES[metric|target] = "v1 v2 ..." ("fail" for a failed run)
declare -A LOAD   # LOAD[group|target] = 1-minute load average before each run
record() { RES[$1|$2]="${RES[$1|$2]:-}$3 "; }
record_load() { LOAD[$1|$2]="${LOAD[$1|$2]:-}$(cut -d' ' -f1 /proc/loadavg) "; }

# Metric metadata: title, unit, which way is better, entries for an entries/s column.
METRICS=()
declare -A TITLE UNIT BETTER PER_ENTRY SHORT GROUP_OF
# def_metric KEY GROUP SHORT-NAME TITLE UNIT high|low [1 = add an entries/s column]
def_metric() {
    METRICS+=("$1"); GROUP_OF[$1]=$2; SHORT[$1]=$3; TITLE[$1]=$4; UNIT[$1]=$5; BETTER[$1]=$6
    PER_ENTRY[$1]=${7:-0}
}
if has_group fsmark0; then
    def_metric fsmark0 fsmark0 "fs_mark -s 0" "fs_mark -S0 -k -L1 -n $FILES -s 0 -d MNT/A -d MNT/B (2 threads, $((2 * FILES)) empty files)" files/s high
fi
if has_group fsmark100; then
    def_metric fsmark100 fsmark100 "fs_mark -s 100" "fs_mark -S0 -k -L1 -n $FILES -s 100 -d MNT/A -d MNT/B (2 threads, $((2 * FILES)) files of 100 B)" files/s high
fi
if has_group tree; then
    def_metric tar tree "tar xf" "tar xf of the tree (caches dropped first; no sync inside the timing)" s low 1
    def_metric tar_sync tree "sync after tar xf" "sync right after tar xf (writeback of what tar left dirty)" s low
    def_metric find_cold tree "find -ls cold" "find -ls, cold (sync + drop_caches first; FUSE daemons keep their own caches)" s low
    def_metric find_warm tree "find -ls warm" "find -ls, warm (immediately again)" s low
    def_metric rm tree "rm -rf" "rm -rf of the tree (warm: right after find)" s low 1
fi

# ---------------------------------------------------------------- workloads

# run_bg CMD...: run CMD under the timeout in the background and wait for it, so that a
# signal to this script is handled at once (the exit trap kills $WL_PID). Returns its status.
WL_PID=""
run_bg() {
    local st=0
    timeout "$TIMEOUT" "$@" &
    WL_PID=$!
    wait "$WL_PID" || st=$?
    WL_PID=""
    return $st
}

# timed CMD...: run CMD (stdout to /dev/null); set TIMED to the seconds taken, or "fail".
TIMED=""
timed() {
    local t0 t1
    t0=$(now)
    if run_bg "$@" >/dev/null; then
        t1=$(now); TIMED=$(elapsed "$t0" "$t1")
    else
        TIMED=fail
    fi
}

# fs_mark SIZE METRIC: two threads, one directory each, no sync; records files/s.
wl_fsmark() {
    local size=$1 metric=$2 rate logf
    logf=$SCRATCH/logs/fsmark-$CUR_TARGET-$size.log
    # (fs_mark writes fs_log.txt into the working directory, which is $SCRATCH/logs.)
    if ! run_bg fs_mark -S0 -k -L1 -n "$FILES" -s "$size" -d "$MNT/A" -d "$MNT/B" >"$logf" 2>&1; then
        log "  $metric on $CUR_TARGET FAILED (exit or timeout); see $logf"
        record "$metric" "$CUR_TARGET" fail
        return
    fi
    # The table: "FSUse%  Count  Size  Files/sec  App Overhead", then one line per loop.
    rate=$(awk '/^FSUse%/ { h = 1; next } h && $1 ~ /^[0-9]+$/ && NF >= 5 { print $4; exit }' "$logf")
    if [[ -z $rate ]]; then
        log "  could not parse fs_mark output; see $logf"
        rate=fail
    fi
    log "  $metric $CUR_TARGET: $rate files/s"
    record "$metric" "$CUR_TARGET" "$rate"
}

# tree: tar xf -> sync -> find -ls cold -> find -ls warm -> rm -rf, on one filesystem.
wl_tree() {
    local n m
    drop_caches
    timed tar xf "$TARBALL" -C "$MNT"; record tar "$CUR_TARGET" "$TIMED"; log "  tar xf: $TIMED s"
    if [[ $TIMED == fail ]]; then
        for m in tar_sync find_cold find_warm rm; do record "$m" "$CUR_TARGET" fail; done
        return
    fi
    timed sync; record tar_sync "$CUR_TARGET" "$TIMED"; log "  sync: $TIMED s"
    drop_caches
    timed find "$MNT/tree" -ls; record find_cold "$CUR_TARGET" "$TIMED"; log "  find -ls cold: $TIMED s"
    timed find "$MNT/tree" -ls; record find_warm "$CUR_TARGET" "$TIMED"; log "  find -ls warm: $TIMED s"
    # Untimed check that the extraction is complete.
    n=$(find "$MNT/tree" | wc -l) || true
    [[ $n == "$ENTRIES" ]] || log "  WARNING: $CUR_TARGET has $n entries after tar xf, expected $ENTRIES"
    timed rm -rf "$MNT/tree"; record rm "$CUR_TARGET" "$TIMED"; log "  rm -rf: $TIMED s"
    [[ ! -e $MNT/tree ]] || log "  WARNING: $MNT/tree still exists after rm -rf"
}

run_group() {   # $1 = group
    case $1 in
        fsmark0) wl_fsmark 0 fsmark0 ;;
        fsmark100) wl_fsmark 100 fsmark100 ;;
        tree) wl_tree ;;
    esac
}

group_metrics() {
    case $1 in
        fsmark0) echo fsmark0 ;;
        fsmark100) echo fsmark100 ;;
        tree) echo tar tar_sync find_cold find_warm rm ;;
    esac
}

# ---------------------------------------------------------------- statistics and report

# stats "v1 v2 ...": prints "median min max nok nfail" (median etc. "-" if none ok).
stats() {
    tr ' ' '\n' <<<"$1" | awk '
        $0 == "" { next }
        $0 == "fail" { f++; next }
        { v[n++] = $0 + 0 }
        END {
            if (n == 0) { print "- - - 0", f + 0; exit }
            for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
            m = (n % 2) ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2
            print m, v[0], v[n - 1], n, f + 0
        }'
}
median_of() { local s; s=$(stats "${RES[$1|$2]:-}"); echo "${s%% *}"; }

fmt() {   # fmt UNIT VALUE
    [[ $2 == - ]] && { echo "–"; return; }
    case $1 in
        files/s) awk -v v="$2" 'BEGIN { printf "%.0f", v }' ;;
        *) awk -v v="$2" 'BEGIN { printf (v < 10 ? "%.3f" : "%.2f"), v }' ;;
    esac
}

# slowdown METRIC X Y: how many times slower X is than Y (>1 = X slower), or "-".
slowdown() {
    local mx my
    mx=$(median_of "$1" "$2"); my=$(median_of "$1" "$3")
    [[ $mx == - || $my == - ]] && { echo -; return; }
    awk -v x="$mx" -v y="$my" -v b="${BETTER[$1]}" 'BEGIN {
        if (x <= 0 || y <= 0) { print "-"; exit }
        printf "%.2f", (b == "high") ? y / x : x / y }'
}

write_report() {   # $1 = runs completed
    local done_runs=$1 tmp=$OUT.tmp.$$ m t med lo hi nok nfail cell range rate vs
    {
        echo "# shoal core benchmark"
        echo
        echo '```'
        echo "$COMMAND_LINE"
        echo '```'
        echo
        [[ $done_runs -lt $RUNS ]] && { echo "**Partial: $done_runs of $RUNS runs done.**"; echo; }
        if awk -v l="$LOAD_START" 'BEGIN { exit !(l > 0.5) }'; then
            echo "**Warning: the machine was not quiet (1-min load average $LOAD_START at the start); other"
            echo "work skews every figure, FUSE targets most (each request is two context switches).**"
            echo
        fi
        echo "## Environment"
        echo
        echo "$ENV_MD"
        echo "- load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo
        echo "## Method"
        echo
        cat <<EOF
- Targets, in this order within each run: ${TARGET_LIST[*]}.
- Every workload group starts on a **fresh filesystem**: new sparse $IMG_SIZE image, \`losetup\`,
  mkfs and mount for xfs/ext4 (default mkfs options; ext4 with lazy init disabled); \`shoal mkfs\` of a
  new store directory on the scratch disk ($SCRATCH_PARENT, $(fstype "$SCRATCH_PARENT")) then \`shoal mount\`
  for shoal; a new process for shoal-memory and reference-memfs (\`--threads $MEMFS_THREADS\`). It is unmounted and
  destroyed after the group. Groups: fs_mark -s 0 | fs_mark -s 100 | tree (tar xf → sync → find -ls cold →
  find -ls warm → rm -rf, one after the other on the same filesystem).
- Interleaved: run 1 does every group on every target, then run 2, and so on. $RUNS run(s); the median,
  min–max over runs. \`speed vs xfs\` = how many times faster than xfs (>1 faster, <1 slower).
- Tree: \`scripts/gen-tree.py --entries $TREE_ENTRIES --seed 1\`: $ENTRIES entries ($TREE_DESC),
  tar of $TAR_MB MiB, read from ${TARBALL_FS}. \`tar xf\` as root (restores owners and mtimes).
  \`sync; echo 3 > /proc/sys/vm/drop_caches\` before tar xf and before the cold find. For FUSE targets
  drop_caches only empties the kernel's caches: the daemon's own caches stay warm.
- No fsync anywhere (fs_mark -S0). Timeout $TIMEOUT s per workload. Loop devices use buffered I/O
  (losetup default), so xfs/ext4 writeback passes through the host page cache of the image file.
EOF
        echo
        echo "## Results"
        local i=0
        for m in "${METRICS[@]}"; do
            i=$((i + 1))
            echo
            echo "### $i. ${TITLE[$m]}"
            echo
            if [[ ${PER_ENTRY[$m]} == 1 ]]; then
                echo "| target | median (${UNIT[$m]}) | min–max | entries/s | speed vs xfs |"
                echo "|---|---:|---:|---:|---:|"
            else
                echo "| target | median (${UNIT[$m]}) | min–max | speed vs xfs |"
                echo "|---|---:|---:|---:|"
            fi
            for t in "${TARGET_LIST[@]}"; do
                read -r med lo hi nok nfail < <(stats "${RES[$m|$t]:-}")
                cell=$(fmt "${UNIT[$m]}" "$med")
                range=–
                [[ $med != - ]] && range="$(fmt "${UNIT[$m]}" "$lo")–$(fmt "${UNIT[$m]}" "$hi")"
                [[ $nfail -gt 0 ]] && cell="$cell ($nfail failed)"
                vs=–
                if has_target xfs && [[ $t != xfs ]]; then
                    vs=$(slowdown "$m" xfs "$t")
                    [[ $vs == - ]] && vs=– || vs="$vs×"
                elif [[ $t == xfs && $med != - ]]; then
                    vs=1.00×
                fi
                if [[ ${PER_ENTRY[$m]} == 1 ]]; then
                    rate=–
                    [[ $med != - ]] && rate=$(awk -v e="$ENTRIES" -v s="$med" 'BEGIN { printf "%.0f", (s > 0 ? e / s : 0) }')
                    echo "| $t | $cell | $range | $rate | $vs |"
                else
                    echo "| $t | $cell | $range | $vs |"
                fi
            done
        done
        echo
        echo "## The issue's targets"
        echo
        echo "Slowdown = how many times slower (median against median; ≤ limit passes, < 1 means faster)."
        echo "The sync after tar xf is left out: \`sync\` does not reach a /dev/fuse daemon on this kernel"
        echo "(no FUSE_SYNCFS outside virtiofs), so for FUSE targets it measures nothing."
        echo
        echo "| workload | shoal vs shoal-memory (≤ 1.3) | shoal-memory vs reference-memfs (≤ 1.2) |"
        echo "|---|---:|---:|"
        local a b
        for m in "${METRICS[@]}"; do
            [[ $m == tar_sync ]] && continue
            a=–; b=–
            if has_target shoal && has_target shoal-memory; then
                a=$(slowdown "$m" shoal shoal-memory)
                [[ $a != - ]] && a="$a $(awk -v v="$a" 'BEGIN { print (v <= 1.3) ? "pass" : "**FAIL**" }')"
            fi
            if has_target shoal-memory && has_target reference-memfs; then
                b=$(slowdown "$m" shoal-memory reference-memfs)
                [[ $b != - ]] && b="$b $(awk -v v="$b" 'BEGIN { print (v <= 1.2) ? "pass" : "**FAIL**" }')"
            fi
            [[ $a == - ]] && a=–
            [[ $b == - ]] && b=–
            echo "| ${SHORT[$m]} | $a | $b |"
        done
        echo
        echo "## Raw values per run"
        echo
        echo "| workload | target | values, run 1..$done_runs | 1-min load average before each |"
        echo "|---|---|---|---|"
        for m in "${METRICS[@]}"; do
            for t in "${TARGET_LIST[@]}"; do
                echo "| ${SHORT[$m]} | $t | ${RES[$m|$t]:-} | ${LOAD[${GROUP_OF[$m]}|$t]:-} |"
            done
        done
    } >"$tmp"
    mv "$tmp" "$OUT"
}

# ---------------------------------------------------------------- environment

env_md() {
    local cpu mem shoalv memfsv git
    cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
    mem=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
    shoalv="not benchmarked"
    if has_target shoal || has_target shoal-memory; then
        shoalv=$("$SHOAL" --version 2>/dev/null | head -1) || shoalv="(--version failed)"
    fi
    memfsv="not benchmarked"
    has_target reference-memfs && memfsv="$MEMFS (fuser 0.18, --threads $MEMFS_THREADS)"
    git=$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)
    cat <<EOF
- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')
- kernel: $(uname -r); nproc: $(nproc); memory: $mem; CPU: ${cpu:-unknown}
- fs_mark: $(dpkg-query -W -f='${Version}' fsmark 2>/dev/null || echo unknown) (Debian fsmark);
  xfsprogs $(dpkg-query -W -f='${Version}' xfsprogs 2>/dev/null || echo '?');
  e2fsprogs $(dpkg-query -W -f='${Version}' e2fsprogs 2>/dev/null || echo '?');
  fuse3 $(dpkg-query -W -f='${Version}' fuse3 2>/dev/null || echo '?'); $(tar --version | head -1)
- fuse io_uring enabled: $(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo n/a)
- shoal: $shoalv ($SHOAL); repo at $git
- reference-memfs: $memfsv
- scratch: $SCRATCH_PARENT on $(df --output=source "$SCRATCH_PARENT" | tail -1) ($(fstype "$SCRATCH_PARENT")); loop images $IMG_SIZE sparse
- load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews every figure)
EOF
}

# ---------------------------------------------------------------- main

log "scratch: $SCRATCH; report: $OUT"
LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$LOAD_START" 'BEGIN { exit !(l > 0.5) }'; then
    log "WARNING: load average is $LOAD_START: the machine is not quiet; figures will be noisy"
fi
log "targets: $TARGETS; workloads: $GROUPS_SEL; runs: $RUNS; fs_mark -n $FILES; tree $TREE_ENTRIES entries"
ENV_MD=$(env_md)

ENTRIES=0; TREE_DESC=""; TAR_MB=0; TARBALL_FS=""
if has_group tree; then
    log "generating the tree archive ($TREE_ENTRIES entries) in $TARDIR"
    ENTRIES=$(python3 "$SCRIPT_DIR/gen-tree.py" --entries "$TREE_ENTRIES" --seed 1 --out "$TARBALL")
    TREE_DESC=$(tar tvf "$TARBALL" | awk '{ c[substr($1, 1, 1)]++ } END { printf "%d dirs, %d files, %d symlinks", c["d"], c["-"], c["l"] }')
    TAR_MB=$(( $(stat -c %s "$TARBALL") / 1048576 ))
    TARBALL_FS=$(fstype "$TARDIR")
    log "tree: $ENTRIES entries ($TREE_DESC), $TAR_MB MiB"
fi

for ((run = 1; run <= RUNS; run++)); do
    for g in "${GROUP_LIST[@]}"; do
        for t in "${TARGET_LIST[@]}"; do
            log "run $run/$RUNS  $g  on $t"
            record_load "$g" "$t"
            if ! setup_target "$t"; then
                log "  setup of $t FAILED; recording failures"
                teardown_target force || true
                for m in $(group_metrics "$g"); do record "$m" "$t" fail; done
                continue
            fi
            run_group "$g"
            teardown_target
        done
    done
    write_report "$run"
done

log "done: $OUT"
