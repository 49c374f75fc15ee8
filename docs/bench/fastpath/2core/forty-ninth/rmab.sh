#!/bin/bash
# rmab.sh ROUNDS: old (worktree build) vs new (main build): rm -rf of a cp -a copy of c1, under shoal run
cd "${WORK:?a directory holding an unmounted store st (shoal mkfs st), the mount point mnt, and in the store the tree: c1 for rmab.sh and batches.sh (a git work tree of 32k entries), gt for cpab.sh (shoal gen-tree --files 30000, tar x under shoal run)}"
for r in $(seq 1 $1); do
 for v in old new; do
  if [ $v = old ]; then B=${OLD:?build directory of the old binaries}; else B=${NEW:?build directory of the new binaries}; fi
  S=$B/shoal; export SHOAL_PRELOAD=$B/libshoal_preload.so
  $S mount st mnt || exit 1
  $S run -- cp -a mnt/c1 mnt/t
  sync; sleep 2
  D=$(pgrep -f "shoal mount st mnt" | head -1)
  a=$(awk '{print $14+$15}' /proc/$D/stat)
  out=$( { /usr/bin/time -f "%e %U %S" $S run -- rm -rf mnt/t; } 2>&1 | tail -1)
  b=$(awk '{print $14+$15}' /proc/$D/stat)
  set -- $out
  echo "$v rm-rf wall $1 tool_cpu $(echo "$2 + $3" | bc) daemon_cpu $(echo "($b - $a)/100" | bc -l | cut -c1-5) total $(echo "$2 + $3 + ($b - $a)/100" | bc -l | cut -c1-5)"
  $S umount mnt
 done
done
