#!/bin/bash
# git-status.sh XFS_CLONE SHOAL_CLONE [N]: warm `git status --porcelain` of the same clone on
# XFS, under `shoal run` and under `shoal run` with core.preloadIndex=false, alternating, N
# rounds; medians in ms. SHOAL names the binary (default: shoal on PATH).
S=${SHOAL:-shoal}
xfs=${1:?XFS clone}; run=${2:?shoal clone}; n=${3:-9}
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
for i in $(seq "$n"); do
  for k in xfs run runnp; do
    case $k in
      xfs) cmd=(git -C "$xfs" status --porcelain);;
      run) cmd=("$S" run -- git -C "$run" status --porcelain);;
      runnp) cmd=("$S" run -- git -c core.preloadIndex=false -C "$run" status --porcelain);;
    esac
    s=$(date +%s%N); "${cmd[@]}" >/dev/null; e=$(date +%s%N)
    echo "$k $(( (e-s)/1000000 ))"
  done
done | python3 -c '
import sys, statistics as st
d = {}
for line in sys.stdin:
    k, v = line.split(); d.setdefault(k, []).append(int(v))
for k, v in d.items(): print(k, "median", st.median(v), "ms", sorted(v))'
