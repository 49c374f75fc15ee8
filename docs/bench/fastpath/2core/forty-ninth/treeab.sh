#!/bin/bash
# treeab.sh ROUNDS TARBALL: old (OLD build dir) vs new (NEW build dir), alternating: tar x + sync,
# cp -a, rm -rf of the tree under shoal run, on the store WORK/st mounted at WORK/mnt;
# wall, tool CPU and daemon CPU (from /proc/PID/stat) of each.
cd "${WORK:?a directory holding an unmounted store st and the mount point mnt}"
tarball=${2:?tarball}
run() { # label cmd...
  local D=$(pgrep -f "shoal mount st mnt" | head -1)
  local a=$(awk '{print $14+$15}' /proc/$D/stat)
  local out=$( { /usr/bin/time -f "%e %U %S" $S run -- "${@:2}"; } 2>&1 | tail -1)
  local b=$(awk '{print $14+$15}' /proc/$D/stat)
  set -- $1 $out
  echo "$v $1 wall $2 tool_cpu $(echo "$3 + $4" | bc) daemon_cpu $(echo "($b - $a)/100" | bc -l | cut -c1-5) total $(echo "$3 + $4 + ($b - $a)/100" | bc -l | cut -c1-5)"
}
for r in $(seq 1 $1); do
 for v in old new; do
  if [ $v = old ]; then B=${OLD:?}; else B=${NEW:?}; fi
  S=$B/shoal; export SHOAL_PRELOAD=$B/libshoal_preload.so
  $S mount st mnt || exit 1
  mkdir -p mnt/tx; sync; sleep 2
  run tar-x-sync bash -c "tar xf $tarball -C mnt/tx && sync"
  sync; sleep 2
  run cp-a cp -a mnt/tx mnt/cx
  sync; sleep 2
  run rm-rf rm -rf mnt/cx
  $S run -- rm -rf mnt/tx
  $S umount mnt
 done
done
