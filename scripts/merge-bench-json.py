#!/usr/bin/env python3
"""merge-bench-json.py: joins the JSON of `shoal bench` runs made one after another in one
session (e.g. shoal for hours, then XFS for minutes) into one report, as if one command had
run both, so `shoal bench --from-json` draws their curves on one chart.

  scripts/merge-bench-json.py FIRST.json SECOND.json [...] > merged.json
  shoal bench --from-json merged.json --report DIR

Targets keep their order (the first is what the `vs first` column compares against);
each target's label must appear in one file only.
"""
import json
import sys


def merge(reports):
    merged = dict(reports[0])
    labels = [t["label"] for r in reports for t in r["targets"]]
    if len(set(labels)) != len(labels):
        sys.exit(f"merge-bench-json: a target appears in more than one file: {labels}")
    merged["command"] = " ; ".join(r["command"] for r in reports)
    merged["targets"] = [t for r in reports for t in r["targets"]]
    merged["samples"] = [s for r in reports for s in r["samples"]]
    merged["workloads"] = sorted({w for r in reports for w in r["workloads"]})
    objects_minutes = [m for r in reports for m in r["params"].get("objects_minutes", [])]
    merged["params"] = dict(reports[0]["params"], objects_minutes=objects_minutes)
    first = labels[0]
    baseline = {(s["workload"], s["metric"]): s["median"]
                for s in reports[0]["summary"] if s["target"] == first}
    summary = []
    for r in reports:
        for s in r["summary"]:
            s = dict(s)
            base = baseline.get((s["workload"], s["metric"]))
            if s["target"] != first and base:
                s["ratio_to_first"] = s["median"] / base
            summary.append(s)
    merged["summary"] = summary
    return merged


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    reports = []
    for path in argv[1:]:
        with open(path) as f:
            reports.append(json.load(f))
    json.dump(merge(reports), sys.stdout)
    print()


if __name__ == "__main__":
    main(sys.argv)
