#!/bin/bash
# batches.sh : engine batches and log bytes of rm -rf (under shoal run) of a cp -a copy of c1, old and new builds
cd "${WORK:?a directory holding an unmounted store st (shoal mkfs st), the mount point mnt, and in the store the tree: c1 for rmab.sh and batches.sh (a git work tree of 32k entries), gt for cpab.sh (shoal gen-tree --files 30000, tar x under shoal run)}"
for v in old new; do
  if [ $v = old ]; then B=${OLD:?}; else B=${NEW:?}; fi
  S=$B/shoal; export SHOAL_PRELOAD=$B/libshoal_preload.so
  $S mount st mnt || exit 1
  $S run -- cp -a mnt/c1 mnt/t; sync; sleep 2
  a=$($S stats --json mnt | python3 -c "import json,sys; d=json.load(sys.stdin)['engine']; print(d['batches'], d['log_bytes'])")
  $S run -- rm -rf mnt/t
  b=$($S stats --json mnt | python3 -c "import json,sys; d=json.load(sys.stdin)['engine']; print(d['batches'], d['log_bytes'])")
  echo "$v batches/log_bytes before $a after $b"
  $S umount mnt
done
