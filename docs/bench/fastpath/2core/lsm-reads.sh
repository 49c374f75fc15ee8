#!/bin/bash
# Point reads of the LSM (`FjallStore::get`, the read cache's misses) per step of the
# bench's tree steps, counted with a uprobe on a build's shoal binary. As root, with perf.
#
#   lsm-reads.sh TREE.tar BUILD...
#
# BUILD as in tree-steps.sh (a build with symbols: the release profile keeps them). Per
# build: a fresh store in $SCRATCH (default /var/tmp/shoal-lsm-reads); under the library
# `tar x` of TREE.tar and `sync` (not counted), then `cp -a`, `find -ls` and `rm -rf` of the
# tree, each counted system-wide.
set -u
tree=${1:?tarball}; shift
scratch=${SCRATCH:-/var/tmp/shoal-lsm-reads}
mnt=$scratch/mnt; mkdir -p "$mnt"
for b in "$@"; do
    symbol=$(nm "$b/shoal" | awk '/FjallStore.u20.as.u20.shoal_engine..store..Store.GT.3get17h/ { print $3; exit }')
    [ -n "$symbol" ] || { echo "$b/shoal: no FjallStore::get symbol" >&2; exit 1; }
    perf probe -q -d 'probe_shoal:lsmget' 2>/dev/null
    perf probe -q -x "$b/shoal" --no-demangle -a "lsmget=$symbol" || exit 1
    "$b/shoal" umount "$mnt" >/dev/null 2>&1
    rm -rf "$scratch/store"
    "$b/shoal" mkfs "$scratch/store" >/dev/null && "$b/shoal" mount "$scratch/store" "$mnt" || exit 1
    L=(env "LD_PRELOAD=$b/libshoal_preload.so")
    mkdir "$mnt/t"; "${L[@]}" tar xf "$tree" -C "$mnt/t"; sync -f "$mnt"
    line=$b
    for step in "cp -a $mnt/t $mnt/c" "find $mnt/t -ls" "rm -rf $mnt/t"; do
        counted=$(perf stat -a -x, -e probe_shoal:lsmget -- "${L[@]}" $step 2>&1 >/dev/null |
            awk -F, '/lsmget/ { print $1 }')
        line="$line | ${step%% *}: $counted"
    done
    echo "$line"
    "$b/shoal" umount "$mnt"
    perf probe -q -d 'probe_shoal:lsmget'
done
