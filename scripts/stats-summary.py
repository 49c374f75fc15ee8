#!/usr/bin/env python3
"""stats-summary.py: condenses the samples of a long run, saved by
`shoal stats --json --interval 5 MOUNT > FILE` (one JSON object per line), into the
figures docs/bench/ quotes. SAMPLES is that file.

  scripts/stats-summary.py SAMPLES csv        one line per sample: objects, memory, store, maxima
  scripts/stats-summary.py SAMPLES latency    request latency table of the last sample (since mount)
  scripts/stats-summary.py SAMPLES rates [N]  create rate per N objects (default 1,000,000)
  scripts/stats-summary.py SAMPLES memory BUDGET_MIB   RSS range, samples and episodes over budget
  scripts/stats-summary.py SAMPLES slow [MS]  per sample, requests newly over MS (default 50)
"""
import json
import sys

# Bucket layout of crates/engine/src/store/histogram.rs: 2^SUB_BITS sub-buckets per power of two.
SUB_BITS = 3
SUB = 1 << SUB_BITS


def bucket_lower_ns(index):
    if index < SUB:
        return index
    exponent = index // SUB + SUB_BITS - 1
    return (1 << exponent) + ((index % SUB) << (exponent - SUB_BITS))


def samples(path):
    with open(path) as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def ops(sample):
    return {o["op"]: o for o in sample["ops"]}


def creates(sample):
    return ops(sample).get("create", {}).get("count", 0)


def over(latency, ms):
    return sum(n for i, n in latency["buckets"] if bucket_lower_ns(i) >= ms * 1e6)


def csv(samples_file):
    print("uptime_s,objects_created,rss_mib,lookup_table_mib,referenced_inodes,evictions,"
          "store_disk_mib,l0_tables,compactions,write_slowdowns,staged_kib,held_writes,max_checkpoint_write_ms,"
          "heap_trims,max_heap_trim_ms,"
          "max_lookup_ms,max_getattr_ms,max_create_ms,max_rename_ms,max_setattr_ms,max_forget_ms")
    for s in samples(samples_file):
        m, st, o = s["memory"], s["store"], ops(s)
        maxima = [o.get(op, {}).get("latency", {}).get("max_ns", 0) / 1e6
                  for op in ("lookup", "getattr", "create", "rename", "setattr", "forget")]
        print(",".join(str(v) for v in [
            round(s["uptime_ns"] / 1e9, 1), creates(s), m["rss_bytes"] >> 20,
            m["lookup_table_bytes"] >> 20, m["referenced_inodes"], m["evictions"],
            st["disk_bytes"] >> 20, st["l0_table_count"], st["compactions_completed"],
            s["engine"]["write_slowdowns"], st.get("staged_bytes", 0) >> 10,
            st.get("held_writes", 0), round(st.get("checkpoint_write_max_ns", 0) / 1e6, 1),
            m.get("heap_trims", 0), round(m.get("heap_trim_max_ns", 0) / 1e6, 1),
        ] + [f"{x:.1f}" for x in maxima]))


def latency(samples_file):
    last = None
    for last in samples(samples_file):
        pass
    if last is None:
        sys.exit(f"{samples_file}: no samples")
    print(f"uptime {last['uptime_ns'] / 1e9:.0f} s, {creates(last)} creates")
    print("| request | count | p50 µs | p99 µs | p99.9 µs | max ms | over 10 ms | over 50 ms | over 100 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    totals = [0, 0, 0]
    for o in last["ops"]:
        l = o["latency"]
        if l["count"] == 0:
            continue
        counts = [over(l, ms) for ms in (10, 50, 100)]
        totals = [a + b for a, b in zip(totals, counts)]
        print(f"| {o['op']} | {l['count']} | {l['p50_ns'] / 1e3:.0f} | {l['p99_ns'] / 1e3:.0f} | "
              f"{l['p999_ns'] / 1e3:.0f} | {l['max_ns'] / 1e6:.1f} | {counts[0]} | {counts[1]} | {counts[2]} |")
    print(f"all requests over 10/50/100 ms: {totals}")
    engine = last["engine"]
    for name in ("commit_latency", "batch_write_latency"):
        l = engine[name]
        print(f"{name}: count {l['count']}, p99.9 {l['p999_ns'] / 1e3:.0f} µs, max {l['max_ns'] / 1e6:.1f} ms, "
              f"over 100 ms {over(l, 100)}")
    print("engine:", {k: v for k, v in engine.items() if not isinstance(v, dict)})
    print("store:", last["store"])
    print("memory:", last["memory"])


def rates(samples_file, step):
    previous, mark = None, step
    for s in samples(samples_file):
        point = (creates(s), s["uptime_ns"] / 1e9)
        if previous is None:
            previous = point
            continue
        if point[0] >= mark:
            rate = (point[0] - previous[0]) / max(point[1] - previous[1], 1e-9)
            print(f"{previous[0]:>10} - {point[0]:>10}: {rate:6.0f}/s")
            previous, mark = point, mark + step


def memory(samples_file, budget_mib):
    rss = [(creates(s), s["memory"]["rss_bytes"] >> 20) for s in samples(samples_file)]
    busy = [r for c, r in rss if c > 0]
    over_budget = [(c, r) for c, r in rss if r > budget_mib]
    episodes = sum(1 for i, (c, r) in enumerate(rss)
                   if r > budget_mib and (i == 0 or rss[i - 1][1] <= budget_mib))
    print(f"{len(rss)} samples, RSS {min(busy, default=0)}-{max(busy, default=0)} MiB while writing; "
          f"over {budget_mib} MiB in {len(over_budget)} samples, {episodes} episodes")
    for c, r in over_budget:
        print(f"  at {c} objects: {r} MiB")


def slow(samples_file, ms):
    previous, held = None, 0
    for s in samples(samples_file):
        current = {o["op"]: dict(map(tuple, o["latency"]["buckets"])) for o in s["ops"]}
        for name in ("commit_latency", "batch_write_latency"):
            current[name] = dict(map(tuple, s["engine"][name]["buckets"]))
        if previous is not None:
            new = []
            for op, buckets in current.items():
                before = previous.get(op, {})
                for i, n in buckets.items():
                    if bucket_lower_ns(i) >= ms * 1e6 and n > before.get(i, 0):
                        new.append(f"{op} {bucket_lower_ns(i) / 1e6:.0f}ms x{n - before.get(i, 0)}")
            now_held = s["store"].get("held_writes", 0)
            if now_held > held:
                new.append(f"held writes x{now_held - held} "
                           f"(longest so far {s['store']['held_write_max_ns'] / 1e6:.0f}ms)")
            if new:
                print(f"{s['uptime_ns'] / 1e9:8.1f}s {creates(s):>10} objects: {', '.join(new)}")
        previous, held = current, s["store"].get("held_writes", 0)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    samples_file, command = argv[1], argv[2]
    if command == "csv":
        csv(samples_file)
    elif command == "latency":
        latency(samples_file)
    elif command == "rates":
        rates(samples_file, int(argv[3]) if len(argv) > 3 else 1_000_000)
    elif command == "memory" and len(argv) > 3:
        memory(samples_file, int(argv[3]))
    elif command == "slow":
        slow(samples_file, float(argv[3]) if len(argv) > 3 else 50)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
