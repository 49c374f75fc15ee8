#!/usr/bin/env bash
# Issue #34/#32 lines on the 2-core machine: shoal bench with the shoal-run target (the
# fast path library beside the shoal binary), side by side with XFS and ext4 on loop
# devices, medians of 3. Usage: run.sh OUTDIR [STEPS] (steps: tree create fsync git).
set -u
out=${1:?output directory}
steps=${2:-tree create fsync git}
shoal=${SHOAL:-$(cd "$(dirname "$0")/../../../.." && pwd)/target/release/shoal}
mkdir -p "$out"
b() { "$shoal" bench --make xfs,ext4,shoal,shoal-run --scratch /var/tmp/shoal-bench-2core "$@"; }
for step in $steps; do
    echo "== $step $(date +%T)"
    case $step in
        tree) b --runs 3 --tree-files 30000 --json "$out/tree.json" tree ;;
        create)
            for t in 1 2; do
                for size in 0 100; do
                    b --runs 3 --threads $t --files 20000 --file-size $size \
                        --json "$out/create$t-$size.json" create
                done
            done ;;
        fsync) b --runs 3 --threads 8 --files 300 --file-size 4096 --fsync --json "$out/fsync8.json" create ;;
        git) b --runs 3 --json "$out/git.json" git ;;
    esac
done
echo "== done $(date +%T)"
