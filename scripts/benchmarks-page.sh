#!/usr/bin/env bash
# benchmarks-page.sh: assembles BENCHMARKS.md from the generated reports under docs/bench/,
# each produced by the command at its own top (they are not rerun here):
#   docs/bench/small/    shoal bench --make xfs,ext4,shoal,shoal-memory --size small --runs 3 ...
#   docs/bench/crosscheck/  shoal bench --make ... --runs 5 --external create (+ notes.md)
#   docs/bench/objects/  shoal bench --make shoal,xfs --objects-count N --keep objects (docs/bench/objects-a3b0fbb/: the first run; docs/bench/objects-af2b663/: the third, shoal only;
#                        docs/bench/objects-a722864/: the fourth, shoal then XFS, joined by scripts/merge-bench-json.py;
#                        docs/bench/objects-04be2fe/: the fifth, the same way;
#                        docs/bench/objects-0aa6cdf/: the sixth, the same way)
#   docs/bench/quota.md  scripts/bench-quota.sh
#   docs/bench/store-bytes.md  scripts/bench-store-bytes.sh
#   docs/bench/bigdir.md  scripts/bench-bigdir.sh (one directory grown to 1M files)
#   docs/bench/core.md   scripts/bench-core.sh (fs_mark, tar, find -ls, rm -rf vs the FUSE ceiling)
#   docs/bench/stalls.md  a sustained objects run with stats polled (latency maxima), by hand
#   docs/bench/everyday.md  shoal bench of the everyday tools and creates (its commands at its
#                        bottom; tables rendered by scripts/everyday-page.py)
# Usage: scripts/benchmarks-page.sh > BENCHMARKS.md
set -euo pipefail
cd "$(dirname "$0")/.."

# A generated page with its chart links made relative to the repository root, and its
# headings pushed one level down.
embed() {   # $1 = report directory, $2 = section title
    sed -e "s|](charts/|]($1/charts/|g" -e 's/^#/##/' -e "1s/^## shoal bench\$/## $2/" "$1/BENCHMARKS.md"
}

# A later run of a report above: anchor, the generated page, and its notes.
embed_run() {   # $1 = report directory, $2 = anchor, $3 = section title
    echo "<a id=\"$2\"></a>"
    echo
    embed "$1" "$3"
    echo
    cat "$1/notes.md"
    echo
}

cat <<'EOF'
# shoal benchmarks

Every figure below comes from a command in this repository, run side by side in one session
with XFS and ext4 on loop devices (2 cores, a VM: absolute figures drift ±30% between runs;
compare within a table). Each section names its command; `scripts/benchmarks-page.sh`
assembles this page from the reports under `docs/bench/`.

- [everyday tools against XFS: time, requests per entry, daemon CPU (current)](#everyday): `docs/bench/everyday.md`, `docs/bench/everyday/`
- [shoal bench, all workloads (small size)](#all-workloads): `docs/bench/small/`
- [cross-check of create against fs_mark](#cross-check) (bonnie++ against bonnie: in the first section): `docs/bench/crosscheck/`
- [objects: the Swift pattern as the file count grows](#objects-curve): `docs/bench/objects/`
- [objects: the third 20M run, shoal only](#objects-third-run): `docs/bench/objects-af2b663/`
- [objects: the fourth 20M run, session 10, with XFS](#objects-fourth-run): `docs/bench/objects-a722864/`
- [objects: the fifth 20M run, session 11 (jemalloc, no request over 100 ms), with XFS](#objects-fifth-run): `docs/bench/objects-04be2fe/`
- [objects: the sixth 20M run, session 12 (the lookup table counted as allocated), with XFS](#objects-sixth-run): `docs/bench/objects-0aa6cdf/`
- [stalls: request latency maxima over a sustained run, before and after the lsm-tree fix](#stalls): `docs/bench/stalls.md`
- [quotas](#quotas-issue-4): `docs/bench/quota.md`
- [metadata bytes per empty file](#store-bytes): `docs/bench/store-bytes.md`
- [one directory grown to a million files](#bigdir): `docs/bench/bigdir.md`
- core benchmark against the FUSE ceiling (fs_mark, tar xf, find -ls, rm -rf vs `shoal mount
  --memory` and a minimal fuser FS): [`docs/bench/core.md`](docs/bench/core.md)

EOF
echo '<a id="everyday"></a>'
echo
sed -e 's/^#/##/' docs/bench/everyday.md
echo
echo '<a id="all-workloads"></a>'
echo
if [[ -f docs/bench/small/BENCHMARKS.md ]]; then
    echo '> This run predates two fixes to the create cross-check: its `fs_mark create rate` rows'
    echo '> come from `fs_mark -t 2 -d DIR` (two threads in one directory, where the built-in gives'
    echo '> each thread its own), and its built-in create used shorter names and `O_EXCL` without'
    echo '> fs_mark'"'"'s per-file `mkdir`. The cross-check section below is the matching comparison.'
    echo
    embed docs/bench/small "shoal bench: all workloads"
    echo
fi
echo '<a id="cross-check"></a>'
echo
if [[ -f docs/bench/crosscheck/BENCHMARKS.md ]]; then embed docs/bench/crosscheck "shoal bench: cross-check of create with fs_mark"; echo; fi
if [[ -f docs/bench/crosscheck/notes.md ]]; then cat docs/bench/crosscheck/notes.md; echo; fi
echo '<a id="objects-curve"></a>'
echo
embed docs/bench/objects "shoal bench: objects curve"
echo
if [[ -f docs/bench/objects/notes.md ]]; then cat docs/bench/objects/notes.md; echo; fi
embed_run docs/bench/objects-af2b663 objects-third-run "shoal bench: objects curve, third run (shoal only)"
embed_run docs/bench/objects-a722864 objects-fourth-run "shoal bench: objects curve, fourth run (shoal, then XFS)"
embed_run docs/bench/objects-04be2fe objects-fifth-run "shoal bench: objects curve, fifth run (shoal, then XFS)"
embed_run docs/bench/objects-0aa6cdf objects-sixth-run "shoal bench: objects curve, sixth run (shoal, then XFS)"
if [[ -f docs/bench/stalls.md ]]; then
    echo '<a id="stalls"></a>'
    echo
    sed -e 's/^#/##/' docs/bench/stalls.md
    echo
fi
cat docs/bench/quota.md
echo
echo '<a id="store-bytes"></a>'
echo
sed -e 's/^#/##/' docs/bench/store-bytes.md
if [[ -f docs/bench/bigdir.md ]]; then
    echo
    echo '<a id="bigdir"></a>'
    echo
    sed -e 's/^#/##/' docs/bench/bigdir.md
fi
