#!/bin/bash
# ab-tar.sh N BUILD_A BUILD_B: alternating fresh mounts of two builds: tar x + sync of TREE only (ms),
# then each build's times in run order
N=$1; BA=$2; BB=$3; tree=${TREE:?a tarball of the tree}; scratch=${SCRATCH:-/var/tmp/shoal-ab}; M=$scratch/mnt; S=$scratch/st
for i in $(seq $N); do for B in $BA $BB; do L="env LD_PRELOAD=$B/libshoal_preload.so"
  $B/shoal umount $M >/dev/null 2>&1; rm -rf $S; mkdir -p $M; $B/shoal mkfs $S >/dev/null; $B/shoal mount $S $M || exit 1
  mkdir $M/w; cat "$tree" >/dev/null; sync
  s=$(date +%s%N); $L tar xf "$tree" -C $M/w; $L sync -f $M/w; echo "$B $(( ($(date +%s%N)-s)/1000000 ))"
done; done | awk '{a[$1]=a[$1]" "$2; print} END {for (b in a) print b, "all:", a[b]}'
$BA/shoal umount $M
