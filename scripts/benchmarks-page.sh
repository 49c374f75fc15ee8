#!/usr/bin/env bash
# benchmarks-page.sh: assembles BENCHMARKS.md from the reports under docs/bench/, each
# produced by the command at its own top (they are not rerun here):
#   docs/bench/fastpath.md   the fast path (`shoal run`) on 2 and 16 cores (JSON under fastpath/)
#   docs/bench/many-cores.md busy-waiting and the journal on 2 and 16 cores (issue 32)
#   docs/bench/everyday.md   shoal bench of the everyday tools and creates (commands at its
#                            bottom; tables rendered by scripts/everyday-page.py)
#   docs/bench/follow.md     follow=on against follow=off (reports under follow/)
#   docs/bench/whole-trees/rmtree-1m/  shoal bench --make xfs,shoal --runs 1 --threads 2 --files 500000 rmtree
#   docs/bench/churn/        shoal bench --make xfs,shoal --runs 1 --churn-seconds 150 churn
#   docs/bench/objects-0aa6cdf/  the 20M-object run, shoal then XFS, joined by
#                            scripts/merge-bench-json.py (+ notes.md)
#   docs/bench/stalls.md     request latency over that run, and at a small memory budget
#   docs/bench/quota.md      shoal bench ... quota, and ... quotacheck
#   docs/bench/store-bytes.md  shoal bench ... store-bytes
#   docs/bench/bigdir.md     shoal bench ... bigdir (one directory grown to 1M files)
#   docs/bench/history.md    one line per earlier headline measurement, with its commit
# A generated report enters the page as its command and summary tables; its environment,
# charts, curves and notes stay in the report, which the page links.
# Usage: scripts/benchmarks-page.sh > BENCHMARKS.md
set -euo pipefail
cd "$(dirname "$0")/.."

# A generated report cut to its command and its summary tables, headings one level down,
# with a link to the whole report.
embed() {   # $1 = report directory, $2 = section title
    echo "## $2"
    echo
    echo "The whole report (environment, charts, every run): [$1/BENCHMARKS.md]($1/BENCHMARKS.md)."
    echo
    awk '
        /^# / { next }
        /^Produced by:/ { mode = "command" }
        /^## Environment/ { mode = "skip"; next }
        /^## / { print "#" $0; print ""; mode = "table"; rows = 0; next }
        mode == "command" { print; if (/^```$/ && ++fences == 2) { print ""; mode = "skip" } next }
        mode == "table" && /^\|/ { print; rows++; next }
        mode == "table" && rows > 0 { print ""; mode = "skip" }
    ' "$1/BENCHMARKS.md"
}

# A hand-written page with its headings pushed one level down, under an anchor.
section() {   # $1 = anchor, $2 = file
    echo "<a id=\"$1\"></a>"
    echo
    sed -e 's/^#/##/' "$2"
    echo
}

cat <<'EOF'
# shoal benchmarks

The current figures, each with the command that made it, run side by side in one session
with XFS and ext4 on loop devices (2 cores, a VM, unless a section says otherwise: absolute
figures drift ±30% between runs; compare within a table). `scripts/benchmarks-page.sh`
assembles this page from the reports under `docs/bench/`; earlier headline figures are in
the [history](#history) at the end, one line each with the commit measured.

- [the fast path, `shoal run`, against the kernel door and XFS, on 2 and 16 cores](#fastpath): `docs/bench/fastpath.md`, `docs/bench/fastpath/`
- [many cores: busy-waiting decided by the machine, fsync'd creates and bulk work on 2 and 16 cores](#many-cores): `docs/bench/many-cores.md`
- [everyday tools against XFS: time, requests per entry, daemon CPU](#everyday): `docs/bench/everyday.md`, `docs/bench/everyday/` (why: [docs/kernel-door.md](docs/kernel-door.md))
- [following a lone caller: `follow=on` against `follow=off`](#follow): `docs/bench/follow.md`, `docs/bench/follow/`
- [whole trees: `shoal rmtree` and `shoal du` of a 1M-entry tree, with XFS](#whole-trees): `docs/bench/whole-trees/`
- [space amplification under churn, with XFS](#churn): `docs/bench/churn/`
- [objects: 20 million Swift-pattern objects, with XFS](#objects): `docs/bench/objects-0aa6cdf/`
- [stalls: request latency over a sustained run](#stalls): `docs/bench/stalls.md`
- [quotas](#quotas): `docs/bench/quota.md`
- [metadata bytes per empty file](#store-bytes): `docs/bench/store-bytes.md`
- [one directory grown to a million files](#bigdir): `docs/bench/bigdir.md`
- [against the FUSE ceiling](#fuse-ceiling): how to measure shoal against `shoal mount --memory`
  and the minimal fuser filesystem
- [history](#history): earlier headline measurements, one line each, with the commit
- before and after a change, both orders: [docs/bench/engine-layers-ab.md](docs/bench/engine-layers-ab.md) (issue 31, `scripts/bench-ab`)

EOF
section fastpath docs/bench/fastpath.md
section many-cores docs/bench/many-cores.md
section everyday docs/bench/everyday.md
section follow docs/bench/follow.md
echo '<a id="whole-trees"></a>'
echo
embed docs/bench/whole-trees/rmtree-1m "Whole trees of 1M entries (rm -rf against shoal rmtree; du -s cold against shoal du)"
echo '<a id="churn"></a>'
echo
embed docs/bench/churn "Space amplification under churn"
echo '<a id="objects"></a>'
echo
embed docs/bench/objects-0aa6cdf "20 million objects (shoal, then XFS)"
echo "The commands (shoal, then XFS for 8 minutes, merged), the daemon's samples and what the run"
echo "shows (rate per million, memory, latency, store size, XFS's decline): [docs/bench/objects-0aa6cdf/notes.md](docs/bench/objects-0aa6cdf/notes.md)."
echo
section stalls docs/bench/stalls.md
echo '<a id="quotas"></a>'
echo
cat docs/bench/quota.md
echo
section store-bytes docs/bench/store-bytes.md
section bigdir docs/bench/bigdir.md
cat <<'EOF'
<a id="fuse-ceiling"></a>

## Against the FUSE ceiling

shoal against `shoal mount --memory` (the same daemon without the store) and
`reference-memfs` (`crates/reference-memfs`, the minimal fuser in-memory filesystem: the
kernel round trip alone), XFS and ext4 for scale, a new filesystem per sample: `shoal bench
--make xfs,ext4,shoal,shoal-memory,reference-memfs --fresh --runs 3 --files 100000
[--tree-files 90000 | --file-size 100] --report DIR create [tree]`.
The last figures of this comparison (at 7255dba) are in the history below.

EOF
section history docs/bench/history.md
