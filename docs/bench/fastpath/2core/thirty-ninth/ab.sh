#!/bin/bash
# ab.sh CLONE N LIB_A LIB_B: warm `git status --porcelain` of CLONE (on a shoal mount) under
# two builds of the fast path library, alternating, N rounds; median and least wall time (µs).
D=${1:?clone}; N=${2:-15}; A=${3:?library A}; B=${4:?library B}
mnt=$(cd "$D" && df --output=target . | tail -1)
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
for i in $(seq "$N"); do
    for k in A B; do
        lib=$A; [ $k = B ] && lib=$B
        s=$(date +%s%N)
        LD_PRELOAD=$lib SHOAL_RUN_MOUNT=$mnt git -C "$D" status --porcelain >/dev/null
        e=$(date +%s%N)
        echo "$k $(( (e - s) / 1000 ))"
    done
done | python3 -c '
import sys, statistics as st
d = {}
for line in sys.stdin:
    k, v = line.split(); d.setdefault(k, []).append(int(v))
for k in sorted(d): print(k, "median", int(st.median(d[k])), "min", min(d[k]), "n", len(d[k]))'
