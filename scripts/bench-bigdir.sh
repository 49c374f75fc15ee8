#!/usr/bin/env bash
# bench-bigdir.sh: one directory grown to FILES empty files, on XFS, ext4 (fresh loop
# filesystems) and shoal (fresh store, default mount). Shows whether the cost per create
# grows with the directory: fs_mark -S0 -k -L LOOPS -n FILES/LOOPS -s 0 adds FILES/LOOPS
# files per loop to the same directory and prints the rate of each loop. Then, timed:
# `ls -f | wc -l` of the directory (warm), `stat` of 10000 names picked at random, and
# `rm -rf` of it. RUNS runs per target, alternating targets; medians are printed with
# min-max. Root only. Usage: scripts/bench-bigdir.sh [FILES] [LOOPS] [RUNS] [SCRATCH]
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-1000000}
LOOPS=${2:-10}
RUNS=${3:-3}
SCRATCH=${4:-/var/tmp/shoal-bigdir}
for n in "$FILES" "$LOOPS" "$RUNS"; do
    [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || { echo "FILES, LOOPS and RUNS must be positive numbers, not '$n'" >&2; exit 2; }
done
(( FILES % LOOPS == 0 )) || { echo "FILES ($FILES) must be a multiple of LOOPS ($LOOPS)" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "needs root (loop devices)" >&2; exit 2; }
command -v fs_mark >/dev/null || { echo "needs fs_mark (Debian package fsmark)" >&2; exit 2; }

PER_LOOP=$(( FILES / LOOPS ))
SHOAL=$PWD/target/release/shoal
LOOP="" MNT="$SCRATCH/mnt" RESULTS="$SCRATCH/results.tsv"
cleanup() {
    if mountpoint -q "$MNT" 2>/dev/null; then
        "$SHOAL" umount "$MNT" 2>/dev/null || umount "$MNT" || umount -l "$MNT"
    fi
    [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null
    [[ -n ${KEEP_RESULTS:-} ]] || rm -rf "$SCRATCH"
}
trap cleanup EXIT
rm -rf "$SCRATCH" && mkdir -p "$MNT"
cargo build --release -q -p shoal
: >"$RESULTS"

mount_target() {   # $1 = xfs | ext4 | shoal
    case $1 in
        shoal)
            "$SHOAL" mkfs "$SCRATCH/store" >/dev/null
            "$SHOAL" mount "$SCRATCH/store" "$MNT" ;;
        *)
            truncate -s 32G "$SCRATCH/img"
            LOOP=$(losetup -f --show "$SCRATCH/img")
            if [[ $1 == xfs ]]; then mkfs.xfs -q -f "$LOOP"; else mkfs.ext4 -q -F "$LOOP"; fi
            mount "$LOOP" "$MNT" ;;
    esac
}

unmount_target() {
    case $1 in
        shoal) "$SHOAL" umount "$MNT"; rm -rf "$SCRATCH/store" ;;
        *) umount "$MNT"; losetup -d "$LOOP"; LOOP=""; rm -f "$SCRATCH/img" ;;
    esac
}

seconds() { local start=$1; awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }'; }

run_target() {   # $1 = target, $2 = run number
    local target=$1 run=$2 start
    mount_target "$target"
    # Rows of fs_mark's table: FSUse% Count Size Files/sec App-overhead.
    (cd "$SCRATCH" && fs_mark -S0 -k -L "$LOOPS" -n "$PER_LOOP" -s 0 -d "$MNT/big") |
        awk -v t="$target" -v r="$run" '$2 ~ /^[0-9]+$/ && NF == 5 { print t "\t" r "\tcreate files/s at " $2 "\t" $4 }' >>"$RESULTS"
    start=$(date +%s.%N)
    local listed
    listed=$(ls -f "$MNT/big" | wc -l)
    (( listed == FILES + 2 )) || { echo "$target: ls -f listed $listed entries, expected $((FILES + 2))" >&2; exit 1; }
    printf '%s\t%s\tls -f (all names), s\t%s\n' "$target" "$run" "$(seconds "$start")" >>"$RESULTS"
    start=$(date +%s.%N)
    python3 - "$MNT/big" <<'EOF'
import os, random, sys
names = os.listdir(sys.argv[1])
random.seed(1)
for name in random.sample(names, min(10000, len(names))):
    os.stat(os.path.join(sys.argv[1], name))
EOF
    printf '%s\t%s\tlistdir + stat of 10000 random names, s\t%s\n' "$target" "$run" "$(seconds "$start")" >>"$RESULTS"
    start=$(date +%s.%N)
    rm -rf "$MNT/big"
    printf '%s\t%s\trm -rf, s\t%s\n' "$target" "$run" "$(seconds "$start")" >>"$RESULTS"
    unmount_target "$target"
}

for run in $(seq 1 "$RUNS"); do
    for target in xfs ext4 shoal; do
        echo "run $run: $target" >&2
        run_target "$target" "$run"
    done
done

echo "# one directory grown to $FILES files"
echo
echo '```'
echo "scripts/bench-bigdir.sh $FILES $LOOPS $RUNS"
echo '```'
echo
echo "$(uname -r), $(nproc) CPUs; median of $RUNS runs (min-max); xfs and ext4 on loop devices."
echo
python3 - "$RESULTS" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    target, run, metric, value = line.rstrip("\n").split("\t")
    rows.setdefault(metric, {}).setdefault(target, []).append(float(value))
targets = ["xfs", "ext4", "shoal"]
print("| metric | " + " | ".join(targets) + " |")
print("|---|" + "---:|" * len(targets))
for metric, by_target in rows.items():
    cells = []
    for t in targets:
        values = by_target.get(t, [])
        if not values:
            cells.append("-")
            continue
        fmt = "{:.0f}" if "files/s" in metric else "{:.2f}"
        cells.append(fmt.format(statistics.median(values)) + " (" + fmt.format(min(values)) + "-" + fmt.format(max(values)) + ")")
    print("| " + metric + " | " + " | ".join(cells) + " |")
EOF
