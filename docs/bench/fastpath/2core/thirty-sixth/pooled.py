#!/usr/bin/env python3
"""pooled.py DIR...: medians of every sample of several `run.sh` runs (each a directory of
`shoal bench` JSON reports), XFS against shoal-run, per row: on a host whose runs differ by
more than the rows do, the median of 9 samples says more than three medians of 3.
  pooled.py thirty-sixth/mid thirty-sixth/end thirty-sixth/end2"""
import json
import statistics
import sys
from pathlib import Path

ROWS = {
    "tree": ["tar x + sync", "cp -a", "rm -rf", "find warm", "find -ls warm", "du -s",
             "find cold", "find -ls cold", "tar c cold", "tar x CPU", "rm -rf CPU"],
    "create1-0": ["create rate"], "create1-100": ["create rate"],
    "create2-0": ["create rate"], "create2-100": ["create rate"],
    "fsync8": ["create rate"],
    "git": ["git clone + sync", "git status", "git status again", "git fsck"],
}


def samples(report, target, metric):
    return [m["value"] for s in report["samples"] if s["target"] == target
            for m in s["metrics"] if m["name"] == metric]


for name, metrics in ROWS.items():
    reports = [json.loads(p.read_text()) for d in sys.argv[1:]
               if (p := Path(d) / f"{name}.json").exists()]
    for metric in metrics:
        xfs = [v for r in reports for v in samples(r, "xfs", metric)]
        run = [v for r in reports for v in samples(r, "shoal-run", metric)]
        if not xfs or not run:
            continue
        x, r = statistics.median(xfs), statistics.median(run)
        print(f"{name:12s} {metric:18s} n={len(xfs):2d}  XFS {x:10.4g}  shoal-run {r:10.4g}  {r / x:.2f}x")
