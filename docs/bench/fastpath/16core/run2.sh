#!/usr/bin/env bash
# Many-thread rows only: 100-byte creates at 1, 8, 16 threads; fsync'd 4 KiB creates at 16, 32.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export PATH=$D/bin:$PATH LD_LIBRARY_PATH=$D/lib
chmod +x "$D"/bin/*
S=/var/tmp/b2; mkdir -p $S
b() { local t=$1; shift; timeout "$t" "$D/bin/shoal" bench --make xfs,shoal,shoal-run --scratch $S/b "$@" 2>&1 | grep -v -E '^shoal bench: (run|making)' | grep -E "rate|daemon CPU|create CPU|workload"; }
echo "== $(date +%T)"
for t in 8 16; do b 90 --runs 3 --threads $t --files 5000 --file-size 100 --json "$OUT/create$t.json" create; done
echo "== $(date +%T)"
for t in 16 32; do b 70 --runs 3 --threads $t --files 300 --file-size 4096 --fsync --json "$OUT/fsync$t.json" create; done
echo "== $(date +%T)"
b 60 --runs 3 --threads 1 --files 20000 --file-size 100 --json "$OUT/create1.json" create
echo "== done $(date +%T)"
