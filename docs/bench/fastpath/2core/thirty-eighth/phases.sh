#!/bin/bash
# phases.sh XFS_CLONE SHOAL_CLONE [N]: warm `git status --porcelain` of the same clone on XFS
# and under the fast path library, alternating, N rounds; medians (µs) of the wall time and of
# git's own phases from GIT_TRACE2_PERF: the index threads' stats ("preload"), the search for
# untracked files ("read_directory"), when the index read starts (git's start-up: finding the
# repository) and git's whole run. LIB names the library (default: beside SHOAL's binary).
S=${SHOAL:-shoal}
lib=${LIB:-$(dirname "$(command -v "$S")")/libshoal_preload.so}
xfs=${1:?XFS clone}; run=${2:?shoal clone}; n=${3:-9}
mnt=$(cd "$run" && df --output=target . | tail -1)
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
trace=$(mktemp)
for i in $(seq "$n"); do
    for k in xfs run; do
        rm -f "$trace"
        s=$(date +%s%N)
        if [ $k = xfs ]; then
            GIT_TRACE2_PERF=$trace git -C "$xfs" status --porcelain >/dev/null
        else
            GIT_TRACE2_PERF=$trace LD_PRELOAD=$lib SHOAL_RUN_MOUNT=$mnt \
                git -C "$run" status --porcelain >/dev/null
        fi
        e=$(date +%s%N)
        phase() { grep "region_leave.*label:$1" "$trace" | awk -F'|' '{printf "%d", $7 * 1e6}'; }
        start=$(grep 'region_enter.*do_read_index' "$trace" | awk -F'|' '{printf "%d", $6 * 1e6}')
        total=$(grep 'atexit' "$trace" | awk -F'|' '{printf "%d", $6 * 1e6}')
        echo "$k $(( (e - s) / 1000 )) $(phase preload) $(phase read_directory) $start $total"
    done
done | python3 -c '
import sys, statistics as st
d = {}
for line in sys.stdin:
    k, *v = line.split(); d.setdefault(k, []).append([int(x) for x in v])
print("         wall  preload  read_directory  index-read-at  git-total  (medians, us)")
for k, v in d.items(): print(k.ljust(6), *[str(int(st.median(c))).rjust(8) for c in zip(*v)])'
rm -f "$trace"
