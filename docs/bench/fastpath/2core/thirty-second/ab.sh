#!/bin/bash
# ab.sh N "CMD" BUILD_A BUILD_B: one mount per build (fresh store, TREE extracted under the
# fast path, one warm-up `find -ls`), then CMD (DIR names the tree) run N times on each
# under the build's library, alternating; medians and quartiles in ms.
# Env: TREE (a tarball of the tree), SCRATCH (default /var/tmp/shoal-ab).
n=$1; cmd=$2; shift 2
tree=${TREE:?a tarball of the tree}; scratch=${SCRATCH:-/var/tmp/shoal-ab}
i=0; for b in "$@"; do
  i=$((i+1)); m=$scratch/m$i; s=$scratch/st$i
  $b/shoal umount $m >/dev/null 2>&1; rm -rf $s; mkdir -p $m
  $b/shoal mkfs $s >/dev/null && $b/shoal mount $s $m || exit 1
  mkdir $m/t; LD_PRELOAD=$b/libshoal_preload.so tar xf "$tree" -C $m/t; sync -f $m
  LD_PRELOAD=$b/libshoal_preload.so find $m/t -ls >/dev/null
done
for r in $(seq $n); do
  i=0; for b in "$@"; do
    i=$((i+1)); DIR=$scratch/m$i/t
    s=$(date +%s%N); LD_PRELOAD=$b/libshoal_preload.so bash -c "${cmd//DIR/$DIR}" >/dev/null 2>&1; e=$(date +%s%N)
    echo "$i $(( (e-s)/1000 ))"
  done
done > $scratch/ab.out
i=0; for b in "$@"; do i=$((i+1)); awk -v i=$i '$1==i {print $2}' $scratch/ab.out | sort -n | awk -v b=$b '{a[NR]=$1} END {printf "%s: q1 %.1f median %.1f q3 %.1f ms (n=%d)\n", b, a[int(NR/4)+1]/1000, a[int(NR/2)+1]/1000, a[int(3*NR/4)+1]/1000, NR}'; done
i=0; for b in "$@"; do i=$((i+1)); $b/shoal umount $scratch/m$i; done
