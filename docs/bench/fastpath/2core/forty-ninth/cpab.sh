#!/bin/bash
# cpab.sh ROUNDS: old (worktree build) vs new (main build): cp -a of the gen-tree copy mnt/gt, then rm -rf of the copy, under shoal run
cd "${WORK:?a directory holding an unmounted store st (shoal mkfs st), the mount point mnt, and in the store the tree: c1 for rmab.sh and batches.sh (a git work tree of 32k entries), gt for cpab.sh (shoal gen-tree --files 30000, tar x under shoal run)}"
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
  if [ $v = old ]; then B=${OLD:?build directory of the old binaries}; else B=${NEW:?build directory of the new binaries}; fi
  S=$B/shoal; export SHOAL_PRELOAD=$B/libshoal_preload.so
  $S mount st mnt || exit 1
  sync; sleep 2
  run cp-a cp -a mnt/gt mnt/cpt
  sync; sleep 2
  run rm-rf rm -rf mnt/cpt
  $S umount mnt
 done
done
