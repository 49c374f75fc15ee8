#!/usr/bin/env bash
# A/B of one command under the fast path, two builds alternated on one store, warm:
# medians of N runs (after one untimed) with each build's own daemon and library.
#   A=DIR_A B=DIR_B ab-command.sh STORE MOUNTPOINT 'CMD'   (CMD may use $M, the mountpoint)
# DIR_A and DIR_B each hold a `shoal` and its `libshoal_preload.so`.
set -u
store=${1:?store}
export M=${2:?mountpoint}
cmd=${3:?command}
n=${N:-7}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for round in 1 2; do
    for v in A B; do
        dir=${!v}
        umount "$M" 2>/dev/null; sleep 0.3
        "$dir/shoal" mount "$store" "$M" || exit 1
        export LD_PRELOAD=$dir/libshoal_preload.so SHOAL_RUN_MOUNT=$M
        bash -c "$cmd" >/dev/null 2>&1
        ms=$(for _ in $(seq "$n"); do
            s=$(date +%s%N); bash -c "$cmd" >/dev/null 2>&1; e=$(date +%s%N)
            echo $(( (e - s) / 1000000 ))
        done | median)
        unset LD_PRELOAD SHOAL_RUN_MOUNT
        echo "round $round $v: $ms ms"
    done
done
umount "$M"
