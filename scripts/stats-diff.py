#!/usr/bin/env python3
"""Per-request daemon time between two `shoal stats --json` snapshots.

usage: shoal stats --json MNT > before.json; WORKLOAD; shoal stats --json MNT > after.json
       scripts/stats-diff.py before.json after.json [ENTRIES]
Prints, per FUSE request type: count, count per entry (ENTRIES, e.g. files created),
summed handler time and its average; then the engine's batches and commits.
"""
import json
import sys


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    before = json.load(open(sys.argv[1]))
    after = json.load(open(sys.argv[2]))
    entries = float(sys.argv[3]) if len(sys.argv) == 4 else 1.0
    previous = {op["op"]: op for op in before["ops"]}
    total_s = 0.0
    for op in after["ops"]:
        then = previous[op["op"]]
        count = op["count"] - then["count"]
        seconds = (op["latency"]["sum_ns"] - then["latency"]["sum_ns"]) / 1e9
        total_s += seconds
        if count:
            print("%-12s %9d  per entry %6.2f  sum %7.2f s  avg %7.1f us"
                  % (op["op"], count, count / entries, seconds, seconds / count * 1e6))
    print("daemon total %.2f s" % total_s)
    e0, e1 = before["engine"], after["engine"]
    print("batches %d, log %.1f MB, commits %d, write slowdowns %d (%.2f s)" % (
        e1["batches"] - e0["batches"], (e1["log_bytes"] - e0["log_bytes"]) / 1e6,
        e1["commits"] - e0["commits"], e1["write_slowdowns"] - e0["write_slowdowns"],
        (e1["write_slowdown_ns"] - e0["write_slowdown_ns"]) / 1e9))


if __name__ == "__main__":
    main()
