#!/bin/bash
# ab-tree-steps.sh N BUILD_A BUILD_B: alternating fresh mounts of two builds (shoal and the library
# beside it): tar x + sync, tar c cold, cp -a, rm -rf of TREE (a tarball of the bench tree), in ms
N=$1; BA=$2; BB=$3; tree=${TREE:?a tarball of the tree}; scratch=${SCRATCH:-/var/tmp/shoal-ab}; M=$scratch/mnt; S=$scratch/st

ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
for i in $(seq $N); do for B in $BA $BB; do L="env LD_PRELOAD=$B/libshoal_preload.so"
  $B/shoal umount $M >/dev/null 2>&1; rm -rf $S; mkdir -p $M; $B/shoal mkfs $S >/dev/null
  $B/shoal mount $S $M || exit 1
  mkdir $M/w; cat "$tree" >/dev/null; sync
  s=$(date +%s%N); $L tar xf "$tree" -C $M/w; $L sync -f $M/w; tx=$(ms $s)
  echo 3 > /proc/sys/vm/drop_caches; $L tar cf - -C $M/w . | cat >/dev/null
  s=$(date +%s%N); $L cp -a $M/w $M/c; cp=$(ms $s)
  s=$(date +%s%N); $L rm -rf $M/w; rm=$(ms $s)
  P=$(pgrep -f "shoal mount $S"); rss=$(awk '/VmHWM/ {print $2}' /proc/$P/status)
  echo "[$B] tarx+sync $tx cp-a $cp rm-rf $rm hwm_kb $rss"
done; done
$BA/shoal umount $M
