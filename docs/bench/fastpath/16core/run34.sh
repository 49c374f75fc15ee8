#!/usr/bin/env bash
# Issue #34/#32 lines on the 16-core machine (fsync'd creates at 8, 16, 32 threads; 100-byte
# creates at 1, 8, 16; the tree with `shoal import`): shoal bench with the shoal-run target (the
# fast path library beside the shoal binary in .dev/bin), against XFS and ext4 on loop devices.
# Steps (STEPS): probe tree fsync create git. JSON under $OUT.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export PATH=$D/bin:$PATH LD_LIBRARY_PATH=$D/lib
chmod +x "$D"/bin/*
S=/var/tmp/b34; mkdir -p $S
echo 1 > /sys/module/fuse/parameters/enable_uring 2>/dev/null
b() { local t=$1; shift; timeout "$t" "$D/bin/shoal" bench --make xfs,ext4,shoal,shoal-run --scratch $S/b "$@" 2>&1 | grep -v -E '^shoal bench: (run|making)'; }
for step in ${STEPS:-probe tree fsync create}; do
  echo "== $step $(date +%T)"
  case $step in
    probe) uname -r; nproc; cat /sys/devices/system/cpu/cpuidle/current_governor 2>&1; ls -la $D/bin ;;
    # Files per thread: 20000 on one thread, 5000 on 8 and 16 (8 x 20000 did not finish
    # within one call's time through the kernel door).
    create) for t in 1 8 16; do files=$([ $t = 1 ] && echo 20000 || echo 5000)
            b 100 --runs 3 --threads $t --files $files --file-size 100 --json "$OUT/create$t.json" create; done ;;
    fsync) for t in 8 16 32; do b 80 --runs 3 --threads $t --files 300 --file-size 4096 --fsync --json "$OUT/fsync$t.json" create; done ;;
    tree) b 240 --runs 3 --tree-files 30000 --json "$OUT/tree.json" tree ;;
    # git as carried: one binary (and libpcre2 in lib/), its helpers as links to it.
    git) mkdir -p $S/gitexec && for c in git git-upload-pack git-receive-pack git-upload-archive; do ln -sf "$D/bin/git" $S/gitexec/$c; done
         GIT_EXEC_PATH=$S/gitexec b 200 --runs 3 --json "$OUT/git.json" git ;;
  esac
done
echo "== done $(date +%T)"
