#!/bin/bash
# ab-mounts.sh ROUNDS "CMD" A B...: one mount per build (TREE, a tarball, extracted once under /var/tmp/s42w-NAME); CMD (DIR = the tree) alternating across builds, ROUNDS times; median ms per build
R=$1; CMD=$2; shift 2
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
med() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
declare -A T
for B in "$@"; do n=$(basename $B); M=/var/tmp/s42w-$n/mnt; S=/var/tmp/s42w-$n/st
  if ! mountpoint -q $M; then rm -rf $S; mkdir -p $M; $B/shoal mkfs $S >/dev/null; $B/shoal mount $S $M || exit 1
    mkdir $M/w; LD_PRELOAD=$B/libshoal_preload.so tar xf "${TREE:?a tarball of the tree}" -C $M/w; sync; fi
  LD_PRELOAD=$B/libshoal_preload.so find $M/w > /dev/null
done
for i in $(seq $R); do for B in "$@"; do n=$(basename $B); M=/var/tmp/s42w-$n/mnt
  c=${CMD//DIR/$M/w}; s=$(date +%s%N); LD_PRELOAD=$B/libshoal_preload.so $c >/dev/null; T[$n]="${T[$n]} $(ms $s)"; done; done
for B in "$@"; do n=$(basename $B); echo "$n median $(echo ${T[$n]} | med) : ${T[$n]}"; done
