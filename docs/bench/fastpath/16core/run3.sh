#!/usr/bin/env bash
# The session's last build on 16 cores: the tree (30k entries, shoal import) with the door and
# shoal-run; 100-byte creates at 1, 8, 16 threads; fsync'd 4 KiB creates at 8, 16, 32.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export PATH=$D/bin:$PATH LD_LIBRARY_PATH=$D/lib
chmod +x "$D"/bin/*
S=/var/tmp/b3; mkdir -p $S
echo 1 > /sys/module/fuse/parameters/enable_uring 2>/dev/null
b() { local t=$1 make=$2; shift 2; timeout "$t" "$D/bin/shoal" bench --make $make --scratch $S/b "$@" 2>&1 | grep -v -E '^shoal bench: (run|making)'; }
echo "== fsync $(date +%T)"
for t in 8 16 32; do b 45 xfs,shoal,shoal-run --runs 3 --threads $t --files 300 --file-size 4096 --fsync --json "$OUT/fsync$t.json" create | grep -E "rate|daemon CPU|spin CPU"; done
echo "== create $(date +%T)"
for t in 1 8 16; do files=$([ $t = 1 ] && echo 20000 || echo 5000)
  b 45 xfs,shoal-run --runs 3 --threads $t --files $files --file-size 100 --json "$OUT/create$t.json" create | grep -E "rate|daemon CPU"; done
echo "== tree $(date +%T)"
b 190 xfs,shoal,shoal-run --runs 3 --tree-files 30000 --json "$OUT/tree.json" tree | grep -E "tar x|cp -a |rm -rf |import|find|du -s|tar c" | grep -v -E "requests|spin CPU|rate"
echo "== done $(date +%T)"
