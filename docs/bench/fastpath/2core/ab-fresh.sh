#!/bin/bash
# A/B of shoal builds through the fast path, alternating builds on a fresh store each
# round (this VM moves one build's figures by 10-20% between runs; alternating fresh
# stores is what tells two builds apart). As root.
#
#   ab-fresh.sh ROUNDS TREE.tar BUILD...
#
# BUILD: a directory holding a `shoal` binary and its `libshoal_preload.so` (copy them out
# of target/release for each commit). TREE.tar: a tarball of a source tree (the figures in
# docs/fastpath.md used the bench's 30k-file tree). Each round, per build: a store in
# $SCRATCH, mounted; ../calls.c getxattr and utimens (200k each, µs per round trip);
# ../tcreate.c of 20000 100-byte files, one thread (files/s); `tar x` of TREE.tar, `sync`,
# `rm -rf` of it (ms); every program under the library. Prints each build's medians, then
# every round. (ab-command.sh compares one command on one warm store.)
set -euo pipefail
rounds=$1 tree=$2; shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
SCRATCH=${SCRATCH:-/var/tmp/shoal-ab}
bin=$SCRATCH/bin; mkdir -p "$bin"
cc -O2 -o "$bin/calls" "$here/calls.c"
cc -O2 -pthread -o "$bin/tcreate" "$here/tcreate.c"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
for _ in $(seq "$rounds"); do
  for build in "$@"; do
    shoal=$build/shoal; lib=$build/libshoal_preload.so
    mnt=$SCRATCH/mnt store=$SCRATCH/store
    "$shoal" umount "$mnt" >/dev/null 2>&1 || true
    rm -rf "$store"; mkdir -p "$mnt"
    "$shoal" mkfs "$store" >/dev/null
    "$shoal" mount "$store" "$mnt"
    run() { LD_PRELOAD=$lib "$@"; }
    g=$(run "$bin/calls" "$mnt" 200000 getxattr | awk '{print $2}')
    u=$(run "$bin/calls" "$mnt" 200000 utimens | awk '{print $2}')
    mkdir "$mnt/c"
    c=$(run "$bin/tcreate" "$mnt/c" 1 20000 100 | awk '{print $3}')
    mkdir "$mnt/t"
    t=$(date +%s%N); run tar xf "$tree" -C "$mnt/t"; tx=$(ms "$t")
    t=$(date +%s%N); run sync -f "$mnt"; sy=$(ms "$t")
    t=$(date +%s%N); run rm -rf "$mnt/t"; rm_=$(ms "$t")
    echo "$(basename "$build") $g $u $c $tx $sy $rm_"
    "$shoal" umount "$mnt"
  done
done | python3 -c '
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in sys.stdin:
    build, *fields = line.split()
    rows[build].append([float(f) for f in fields])
names = ["getxattr us", "utimens us", "create files/s", "tar x ms", "sync ms", "rm -rf ms"]
for build, runs in rows.items():
    medians = [statistics.median(col) for col in zip(*runs)]
    print(build, "  ".join(f"{n} {m:g}" for n, m in zip(names, medians)), f"(medians of {len(runs)})")
for build, runs in rows.items():
    print(build, runs)
'
