#!/usr/bin/env bash
# bench-store-bytes.sh: metadata bytes per empty file, shoal against XFS and ext4.
# Each target gets FILES empty files, 1000 to a directory, 32-hex-digit names (an object
# store's layout). xfs/ext4: fresh loop filesystems with default mkfs options; bytes = `df`
# used after sync minus used before. shoal: the same files through the library
# (examples/store_bytes: the keys are the ones a mount writes), sizes after the writes and
# after a full compaction. Root only. Usage: scripts/bench-store-bytes.sh [FILES] [SCRATCH]
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-1000000}
SCRATCH=${2:-/var/tmp/shoal-store-bytes}
[[ $FILES =~ ^[0-9]+$ && $FILES -gt 0 ]] || { echo "FILES must be a positive number, not '$FILES'" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "needs root (loop devices)" >&2; exit 2; }

LOOP="" MNT="$SCRATCH/mnt"
cleanup() {
    mountpoint -q "$MNT" 2>/dev/null && umount "$MNT"
    [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null
    rm -rf "$SCRATCH"
}
trap cleanup EXIT
rm -rf "$SCRATCH" && mkdir -p "$MNT"

make_files() {   # $1 = directory; FILES empty files, 1000 per directory
    python3 - "$1" "$FILES" <<'EOF'
import os, sys
root, files = sys.argv[1], int(sys.argv[2])
for i in range(files):
    if i % 1000 == 0:
        d = os.path.join(root, "%03x" % (i // 1000))
        os.mkdir(d)
    name = "%032x" % ((i * 0x9E3779B97F4A7C15F39CC0605CEDC835) % (1 << 128))
    os.close(os.open(os.path.join(d, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
EOF
}

used_bytes() { sync; df -B1 --output=used "$MNT" | tail -1 | tr -d ' '; }

echo "# metadata bytes per empty file ($FILES files, 1000 per directory)"
echo
echo '```'
echo "scripts/bench-store-bytes.sh $FILES"
echo '```'
echo
echo "| target | bytes per file | how |"
echo "|---|---:|---|"
for fs in xfs ext4; do
    truncate -s 16G "$SCRATCH/img"
    LOOP=$(losetup -f --show "$SCRATCH/img")
    if [[ $fs == xfs ]]; then mkfs.xfs -q -f "$LOOP"; else mkfs.ext4 -q -F "$LOOP"; fi
    mount "$LOOP" "$MNT"
    before=$(used_bytes)
    make_files "$MNT"
    after=$(used_bytes)
    how="df used after sync, minus before (inodes allocated on demand, 512 B each)"
    [[ $fs == ext4 ]] && how="df used after sync, minus before: directory blocks only; the 256 B inodes sit in tables that mkfs preallocated, counted as used before"
    awk -v b="$before" -v a="$after" -v n="$FILES" -v fs="$fs" -v how="$how" \
        'BEGIN { printf "| %s | %.1f | %s |\n", fs, (a - b) / n, how }'
    umount "$MNT"; losetup -d "$LOOP"; LOOP=""; rm -f "$SCRATCH/img"
done
cargo build --release -q -p shoal-engine --example store_bytes
out=$(./target/release/examples/store_bytes "$SCRATCH/store" "$FILES")
written=$(echo "$out" | sed -n 's/^after the writes: .*; \([0-9.]*\) store bytes per file, \([0-9.]*\) table bytes.*/\1 \2/p')
settled=$(echo "$out" | sed -n 's/^after compaction: .*; \([0-9.]*\) store bytes per file, \([0-9.]*\) table bytes.*/\1 \2/p')
read -r w_store w_tables <<<"$written"
read -r s_store s_tables <<<"$settled"
echo "| shoal, after the writes | $w_tables | tables; with the journal: $w_store |"
echo "| shoal, after compaction | $s_tables | tables; with the journal: $s_store |"
echo
echo "shoal's journal is a fixed-size file set (64 MiB here), not a per-file cost. Raw output:"
echo
echo '```'
echo "$out"
echo '```'
