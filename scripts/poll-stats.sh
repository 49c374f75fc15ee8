#!/usr/bin/env bash
# poll-stats.sh: saves `shoal stats --json` of a shoal mount every few seconds, for the
# curves of a long benchmark (latency maxima, memory, engine activity as the run goes on).
# Waits for MOUNT to become a shoal mount and stops once it is gone again.
# Usage: scripts/poll-stats.sh MOUNT OUTDIR [SECONDS]   (output: OUTDIR/NNNNNN.json)
set -euo pipefail
mount=${1:?usage: poll-stats.sh MOUNT OUTDIR [SECONDS]}
out=${2:?usage: poll-stats.sh MOUNT OUTDIR [SECONDS]}
every=${3:-5}
shoal=${SHOAL:-$(dirname "$0")/../target/release/shoal}
mkdir -p "$out"
is_shoal() { findmnt -n --mountpoint "$mount" -o SOURCE 2>/dev/null | grep -q shoal; }
until is_shoal; do sleep 1; done
n=0
while is_shoal; do
    if "$shoal" stats --json "$mount" >"$out/tmp.json" 2>/dev/null; then
        mv "$out/tmp.json" "$(printf '%s/%06d.json' "$out" "$n")"
        n=$((n + 1))
    fi
    sleep "$every"
done
rm -f "$out/tmp.json"
echo "poll-stats: $n samples in $out"
