#!/usr/bin/env python3
"""Renders the tables of docs/bench/everyday.md from the bench.json files under docs/bench/everyday/
(run from the repository root once the commands listed at the page's bottom have run)."""
import json, statistics, collections, os, sys
ROOT = "docs/bench/everyday"
RUNS = ["tree", "create-1t-0", "create-2t-0", "create-1t-100", "create-2t-100", "create-fsync-8t", "bonnie", "unlink-1t"]
TARGETS = ["xfs", "ext4", "shoal", "shoal-memory"]

def load(run):
    path = os.path.join(ROOT, run, "bench.json")
    if not os.path.exists(path):
        return None
    d = json.load(open(path))
    med = collections.defaultdict(list)
    reqs = collections.defaultdict(list)
    errors = []
    for s in d["samples"]:
        if s.get("error"):
            errors.append((s["target"], s["error"][:160])); continue
        for m in s["metrics"]:
            med[(m["name"], s["target"])].append(m["value"])
        for k, v in s.get("counts", {}).items():
            if k.startswith("requests "):
                reqs[(s["target"], k[len("requests "):])].append(v)
    return d, {k: statistics.median(v) for k, v in med.items()}, {k: statistics.median(v) for k, v in reqs.items()}, errors

def fmt(v):
    if v is None: return "-"
    if v >= 1000: return "%.0f" % v
    if v >= 10: return "%.1f" % v
    if v >= 1: return "%.2f" % v
    return "%.3f" % v

out = []
rows = [
    ("tree", "tar x + sync", "s", "lower"), ("tree", "tar x", "s", "lower"), ("tree", "cp -a", "s", "lower"),
    ("tree", "find cold", "s", "lower"), ("tree", "find warm", "s", "lower"),
    ("tree", "find -ls cold", "s", "lower"), ("tree", "find -ls warm", "s", "lower"),
    ("tree", "du -s", "s", "lower"), ("tree", "rm -rf", "s", "lower"),
    ("create-1t-0", "create rate", "files/s", "higher"), ("create-2t-0", "create rate", "files/s", "higher"),
    ("create-1t-100", "create rate", "files/s", "higher"), ("create-2t-100", "create rate", "files/s", "higher"),
    ("unlink-1t", "unlink rate", "files/s", "higher"),
    ("create-fsync-8t", "create rate", "files/s", "higher"),
    ("bonnie", "sequential create rate", "files/s", "higher"), ("bonnie", "sequential delete rate", "files/s", "higher"),
    ("bonnie", "random create rate", "files/s", "higher"), ("bonnie", "random delete rate", "files/s", "higher"),
]
data = {run: load(run) for run in RUNS}
out.append("| run | metric | " + " | ".join(TARGETS) + " | shoal / XFS |")
out.append("|---|---|" + "---:|" * (len(TARGETS) + 1))
for run, name, unit, better in rows:
    if not data.get(run): continue
    _, med, _, _ = data[run]
    vals = [med.get((name, t)) for t in TARGETS]
    x, s = med.get((name, "xfs")), med.get((name, "shoal"))
    ratio = "-"
    if x and s:
        ratio = ("%.2fx time" % (s / x)) if better == "lower" else ("%.2fx rate" % (s / x))
    out.append("| %s | %s (%s) | %s | %s |" % (run, name, unit, " | ".join(fmt(v) for v in vals), ratio))
print("\n".join(out))
print()
# requests per entry and CPU on shoal
print("| run | tool | requests/entry | breakdown (per entry) | daemon CPU µs/op | spin CPU µs/op |")
print("|---|---|---:|---|---:|---:|")
for run in RUNS:
    if not data.get(run): continue
    d, med, reqs, _ = data[run]
    entries = None
    tools = sorted({k[1].rsplit(" ", 1)[0] for k in reqs if k[0] == "shoal"})
    for tool in tools:
        total = med.get((tool + " requests", "shoal"))
        if total is None: continue
        ops = {k[1].rsplit(" ", 1)[1]: v for k, v in reqs.items() if k[0] == "shoal" and k[1].rsplit(" ", 1)[0] == tool}
        tot_count = sum(ops.values())
        per = ", ".join("%s %.2f" % (op, v / tot_count * total) for op, v in sorted(ops.items(), key=lambda kv: -kv[1]) if tot_count and v / tot_count * total >= 0.01)
        print("| %s | %s | %s | %s | %s | %s |" % (run, tool, fmt(total), per or "-", fmt(med.get((tool + " daemon CPU", "shoal"))), fmt(med.get((tool + " spin CPU", "shoal")))))
print()
for run in RUNS:
    if data.get(run):
        d = data[run][0]
        print("- `%s`: `%s`" % (run, d.get("command")))
        for t, e in data[run][3]:
            print("  - error on %s: %s" % (t, e))
