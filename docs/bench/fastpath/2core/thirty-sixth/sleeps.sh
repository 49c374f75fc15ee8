#!/usr/bin/env bash
# sleeps.sh CMD ARGS...: how often, and how long in all, CMD (run under the fast path
# library beside the shoal binary) was off its CPU asleep (preemptions not counted), from
# sched_switch events of the whole machine: a program waiting on the daemon sleeps on the
# channel's futex, where a quick answer finds it spinning.
#   sleeps.sh find /mnt/shoal/tree
set -eu
lib=${SHOAL_PRELOAD:-$(cd "$(dirname "$0")/../../../../.." && pwd)/target/release/libshoal_preload.so}
data=$(mktemp)
trap 'rm -f "$data"' EXIT
perf record -q -e sched:sched_switch -a -o "$data" env LD_PRELOAD="$lib" "$@" >/dev/null 2>&1
perf script -i "$data" -F comm,tid,cpu,time,trace 2>/dev/null | python3 -c '
import re, sys
comm = sys.argv[1][:15]
out, slept = None, []
for line in sys.stdin:
    m = re.search(r" (\d+\.\d+):", line)
    if not m:
        continue
    t = float(m.group(1))
    if "prev_comm=" + comm + " " in line and "prev_state=R" not in line:
        out = t
    elif "next_comm=" + comm + " " in line and out is not None:
        slept.append((t - out) * 1e6)
        out = None
print(f"{len(slept)} sleeps, {sum(slept):.0f} us in all")
' "$(basename "$1")"
