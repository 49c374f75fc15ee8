#!/usr/bin/env bash
# bench-quota.sh: quota limits on and off, and per-user usage against a cold scan, side by side in one session.
#
# 1. Limits on vs off: fs_mark -S0 -k -n FILES -s 0 (2 threads) on fresh shoal stores,
#    interleaved: "off" = no limits (the counters are still kept: they are part of shoal's
#    format, not an option), "on" = limits enforced for the creating user (root, with
#    enforce_root on) so every create passes the limit check. XFS and ext4 rows for scale.
# 2. Usage of every user on a POPULATION-file filesystem made by fs_mark (2 directories):
#    shoal: `shoal quota report -u` live on the mount and offline on the store, and
#    `shoal fsck --counters` online and offline (inodes/s). XFS/ext4 (this kernel has no
#    quota support, so no quotacheck): a cold parallel-free scan `find -printf '%U %b'` summed
#    per uid, which is what getting the same figures costs without counters.
#
# Run as root:  scripts/bench-quota.sh [--runs N] [--files N] [--population N] [--out FILE]
set -euo pipefail
export LC_ALL=C

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
COMMAND_LINE="$0 $*"
RUNS=3
FILES=100000
POPULATION=1000000
OUT=""
SHOAL=$REPO/target/release/shoal

while [[ $# -gt 0 ]]; do
    case $1 in
        --runs) RUNS=$2; shift 2 ;;
        --files) FILES=$2; shift 2 ;;
        --population) POPULATION=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "bench-quota: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ && $FILES =~ ^[1-9][0-9]*$ && $POPULATION =~ ^[1-9][0-9]*$ ]] \
    || { echo "bench-quota: --runs, --files, --population take positive integers" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "bench-quota: run as root (loop devices, drop_caches)" >&2; exit 1; }
command -v fs_mark >/dev/null || { echo "bench-quota: needs fs_mark (apt install fsmark)" >&2; exit 1; }
[[ -x $SHOAL ]] || cargo build --release -p shoal --manifest-path "$REPO/Cargo.toml"

SCRATCH=$(mktemp -d /var/tmp/shoal-bq.XXXXXX)
MNT=/mnt/bq.$$   # fs_mark refuses -d paths of 40 bytes or more
mkdir -p "$MNT" "$SCRATCH/logs"
LOOP=""
cleanup() {
    if mountpoint -q "$MNT"; then "$SHOAL" umount "$MNT" 2>/dev/null || umount "$MNT" 2>/dev/null || umount -l "$MNT"; fi
    [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null
    rm -rf "$SCRATCH"; rmdir "$MNT" 2>/dev/null || true
}
trap cleanup EXIT
log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
cd "$SCRATCH/logs"

make_fs() {   # $1 = xfs | ext4 | shoal
    case $1 in
        xfs|ext4)
            truncate -s 16G "$SCRATCH/img"
            LOOP=$(losetup -f --show "$SCRATCH/img")
            if [[ $1 == xfs ]]; then mkfs.xfs -q -f "$LOOP"; else mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP"; fi
            mount "$LOOP" "$MNT" ;;
        shoal)
            rm -rf "$SCRATCH/store"
            "$SHOAL" mkfs "$SCRATCH/store" >/dev/null
            "$SHOAL" mount "$SCRATCH/store" "$MNT" ;;
    esac
}
drop_fs() {   # $1 = xfs | ext4 | shoal
    case $1 in
        xfs|ext4) umount "$MNT"; losetup -d "$LOOP"; LOOP=""; rm -f "$SCRATCH/img" ;;
        shoal) "$SHOAL" umount "$MNT"; rm -rf "$SCRATCH/store" ;;
    esac
}
fsmark_rate() {   # $1 = files per thread; prints files/s
    fs_mark -S0 -k -L1 -n "$1" -s 0 -d "$MNT/A" -d "$MNT/B" >"$SCRATCH/logs/fsmark.log" 2>&1
    awk '/^FSUse%/ { h = 1; next } h && $1 ~ /^[0-9]+$/ && NF >= 5 { print $4; exit }' "$SCRATCH/logs/fsmark.log"
}
seconds() {   # run "$@" quietly; print wall seconds
    local start=$EPOCHREALTIME
    "$@" >/dev/null
    awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
minmax() { tr ' ' '\n' | grep -v '^$' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo "-" hi }'; }
counters_rate() {   # shoal fsck --counters output -> inodes/s
    "$SHOAL" fsck --counters "$1" | sed -n 's/.*(\([0-9]*\) inodes\/s).*/\1/p'
}
scan_usage() {   # what a per-user usage figure costs without counters: a cold full scan
    sync; echo 3 >/proc/sys/vm/drop_caches
    find "$MNT" -xdev -printf '%U %b\n' | awk '{ n[$1]++; b[$1] += $2 } END { for (u in n) print u, n[u], b[u] * 512 }'
}

declare -A RATE
# ---- 1. limits on vs off
for run in $(seq "$RUNS"); do
    for variant in xfs ext4 shoal-off shoal-on; do
        fs=${variant%%-*}
        make_fs "$fs"
        if [[ $variant == shoal-on ]]; then
            "$SHOAL" quota config --enforce-root on "$MNT" >/dev/null
            "$SHOAL" quota set -u 0 --ihard 100000000 --bhard 1t "$MNT" >/dev/null
        fi
        rate=$(fsmark_rate "$FILES")
        log "run $run $variant: fs_mark $rate files/s"
        RATE[$variant]="${RATE[$variant]:-} $rate"
        drop_fs "$fs"
    done
done

# ---- 2. usage report on a populated filesystem
declare -A USAGE
per_thread=$((POPULATION / 2))
for fs in xfs ext4 shoal; do
    make_fs "$fs"
    log "$fs: populating $POPULATION files"
    USAGE[$fs-populate]=$(fsmark_rate "$per_thread")
    if [[ $fs == shoal ]]; then
        live=""; online=""; offline=""; offline_report=""
        for _ in $(seq 5); do live+=" $(seconds "$SHOAL" quota report -u "$MNT")"; done
        for _ in $(seq "$RUNS"); do online+=" $(counters_rate "$MNT")"; done
        "$SHOAL" umount "$MNT"
        for _ in $(seq "$RUNS"); do offline+=" $(counters_rate "$SCRATCH/store")"; done
        for _ in $(seq "$RUNS"); do offline_report+=" $(seconds "$SHOAL" quota report -u "$SCRATCH/store")"; done
        "$SHOAL" quota report -u "$SCRATCH/store" >"$SCRATCH/logs/report.txt"
        USAGE[live]=$live; USAGE[online]=$online; USAGE[offline]=$offline; USAGE[offline_report]=$offline_report
        rm -rf "$SCRATCH/store"
    else
        scans=""
        for _ in $(seq "$RUNS"); do scans+=" $(seconds scan_usage)"; done
        USAGE[$fs-scan]=$scans
        drop_fs "$fs"
    fi
    log "$fs done"
done

report() {
    echo "## Quotas"
    echo
    echo "Command: \`${COMMAND_LINE}\` ($(date -u +%F), $(nproc) cores, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg) at the end)."
    echo
    echo "fs_mark -S0 -k -L1 -n $FILES -s 0 -d MNT/A -d MNT/B (2 threads), fresh filesystem per run, interleaved; median (min-max) of $RUNS:"
    echo
    echo "| target | files/s |"
    echo "|---|---|"
    for variant in xfs ext4 shoal-off shoal-on; do
        echo "| $variant | $(median <<<"${RATE[$variant]}") ($(minmax <<<"${RATE[$variant]}")) |"
    done
    off=$(median <<<"${RATE[shoal-off]}"); on=$(median <<<"${RATE[shoal-on]}")
    echo
    echo "shoal with limits enforced / without: $(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.3f", a / b }') (xfs, ext4: no quota support in this kernel, rows for scale)."
    echo
    echo "Per-user usage on $POPULATION files (made by fs_mark -n $per_thread x 2 threads, -s 0): median (min-max)"
    echo
    echo "| target | how | seconds | inodes/s |"
    echo "|---|---|---|---|"
    for fs in xfs ext4; do
        echo "| $fs | cold \`find -printf '%U %b'\` summed per uid | $(median <<<"${USAGE[$fs-scan]}") ($(minmax <<<"${USAGE[$fs-scan]}")) | |"
    done
    echo "| shoal | \`shoal quota report -u MNT\` (live, 5 runs) | $(median <<<"${USAGE[live]}") ($(minmax <<<"${USAGE[live]}")) | |"
    echo "| shoal | \`shoal quota report -u STORE\` (offline: opens the store) | $(median <<<"${USAGE[offline_report]}") ($(minmax <<<"${USAGE[offline_report]}")) | |"
    echo "| shoal | \`shoal fsck --counters MNT\` (online, snapshot) | | $(median <<<"${USAGE[online]}") ($(minmax <<<"${USAGE[online]}")) |"
    echo "| shoal | \`shoal fsck --counters STORE\` (offline) | | $(median <<<"${USAGE[offline]}") ($(minmax <<<"${USAGE[offline]}")) |"
    echo
    echo "Population rates (fs_mark files/s): xfs ${USAGE[xfs-populate]}, ext4 ${USAGE[ext4-populate]}, shoal ${USAGE[shoal-populate]}."
}
if [[ -n $OUT ]]; then report | tee "$OUT"; else report; fi
