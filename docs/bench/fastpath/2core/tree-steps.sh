#!/bin/bash
# A/B of shoal builds through the bench's tree steps, in the bench's order, alternating
# builds on a fresh store each round (see ab-fresh.sh for why). As root.
#
#   tree-steps.sh ROUNDS TREE.tar BUILD...
#
# BUILD: a directory holding `shoal` and `libshoal_preload.so`. Each round, per build: a
# store in $SCRATCH (default /var/tmp/shoal-tree-steps), mounted; under the library `tar x`
# of TREE.tar and `sync`, `cp -a` of the tree, `find`, `find -ls`, `du -s` of it, then
# `rm -rf` of it (the copy stays, as in `shoal bench ... tree`). Prints ms per step and
# round, then each build's medians.
set -u
rounds=${1:?rounds} tree=${2:?tarball}; shift 2
scratch=${SCRATCH:-/var/tmp/shoal-tree-steps}
mnt=$scratch/mnt; mkdir -p "$mnt"
steps="tarx cp find findls du rm"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
timed() { local t; t=$(date +%s%N); "$@" >/dev/null; ms "$t"; }
out=$(mktemp)
for _ in $(seq "$rounds"); do
    for b in "$@"; do
        "$b/shoal" umount "$mnt" >/dev/null 2>&1
        rm -rf "$scratch/store"
        "$b/shoal" mkfs "$scratch/store" >/dev/null && "$b/shoal" mount "$scratch/store" "$mnt" || exit 1
        L=(env "LD_PRELOAD=$b/libshoal_preload.so")
        mkdir "$mnt/t"
        t=$(date +%s%N); "${L[@]}" tar xf "$tree" -C "$mnt/t"; sync -f "$mnt"; x=$(ms "$t")
        c=$(timed "${L[@]}" cp -a "$mnt/t" "$mnt/c")
        f=$(timed "${L[@]}" find "$mnt/t")
        fl=$(timed "${L[@]}" find "$mnt/t" -ls)
        d=$(timed "${L[@]}" du -s "$mnt/t")
        r=$(timed "${L[@]}" rm -rf "$mnt/t")
        echo "$b $x $c $f $fl $d $r" | tee -a "$out"
        "$b/shoal" umount "$mnt"
    done
done
for b in "$@"; do
    printf '%s medians of %s:' "$b" "$rounds"
    i=2
    for step in $steps; do
        m=$(awk -v b="$b" -v i="$i" '$1 == b { print $i }' "$out" | sort -n |
            awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
        printf ' %s %s ms' "$step" "$m"; i=$((i + 1))
    done
    echo
done
rm -f "$out"
