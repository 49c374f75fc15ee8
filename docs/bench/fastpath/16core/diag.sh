#!/usr/bin/env bash
# Diagnosis on the 16-core machine: does the engine scale with writers (in process), and where
# do 8-thread creates spend their CPU through the kernel door and under shoal run (perf).
# Carried in .dev/ beside prepare.sh's files, plus: bin/shoal with its symbols (strip
# --strip-debug), bin/libshoal_preload.so, bin/library_rate (the engine example), bin/tcreate
# (docs/bench/fastpath/tcreate.c) and
# bin/roundtrip (docs/bench/fastpath/roundtrip.c), bin/perf with its libraries in perflib/.
# Run as `bash .dev/diag.sh` (N, PER: engine files in all, tcreate files per thread).
set -u
D=$(cd "$(dirname "$0")" && pwd)
export PATH=$D/bin:$PATH LD_LIBRARY_PATH=$D/lib
chmod +x "$D"/bin/*
OUT=${OUT:-/tmp/diagout}; mkdir -p $OUT
N=${N:-200000}; PER=${PER:-5000}
S=/var/tmp/diag; rm -rf $S; mkdir -p $S
perf() { LD_LIBRARY_PATH=$D/perflib "$D/bin/perf" "$@"; }
echo "== probe $(date +%T)"; uname -r; nproc
cat /sys/devices/system/cpu/cpuidle/current_governor /sys/devices/system/cpu/cpuidle/current_driver /sys/module/haltpoll/parameters/guest_halt_poll_ns 2>&1
echo "== engine in process $(date +%T)"
for t in 1 2 4 8 16; do timeout 60 library_rate $S/lr$t $N $t | tr '\n' ' '; echo; rm -rf $S/lr$t; done
echo "== mounts $(date +%T)"
truncate -s 8G $S/x.img && mkfs.xfs -q -f $S/x.img && mkdir -p $S/xfs && mount -o loop $S/x.img $S/xfs
shoal mkfs --force $S/st >/dev/null && mkdir -p $S/m && shoal mount -o allow_other $S/st $S/m || echo "MOUNT FAILED"
shoal stats --count 1 $S/m 2>&1 | grep -E "busy-wait|ring_threads"
run_create() { # LABEL DIR THREADS [WRAPPER...]
  local label=$1 dir=$2 t=$3; shift 3
  mkdir -p $dir/$label; timeout 60 "$@" tcreate $dir/$label $t $PER 100 | sed "s/^/$label /"
}
echo "== creates $(date +%T)"
for t in 1 8 16; do
  run_create xfs$t $S/xfs $t
  run_create door$t $S/m $t
  run_create run$t $S/m $t shoal run --
done
echo "== perf $(date +%T)"
for way in door run; do
  mkdir -p $S/m/p$way
  wrap=(); [ $way = run ] && wrap=(shoal run --)
  perf record -a -F 1999 -o $S/perf.$way -- timeout 60 "${wrap[@]}" tcreate $S/m/p$way 8 $((PER * 2)) 100 2>&1 | tail -3
  perf report -i $S/perf.$way --no-children --sort comm,dso,sym --percent-limit 0.4 --stdio 2>/dev/null | grep -v '^$' | head -90 > $OUT/perf-$way.txt
  perf report -i $S/perf.$way --no-children --sort comm --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -20 >> $OUT/perf-$way.txt
  head -40 $OUT/perf-$way.txt
done
echo "== round trips $(date +%T)"
mkdir -p $S/xfs/rt $S/m/rt $S/m/rtk
roundtrip $S/xfs/rt 20000 | sed 's/^/xfs /'
roundtrip $S/m/rtk 20000 | sed 's/^/door /'
shoal run -- roundtrip $S/m/rt 20000 | sed 's/^/run /'
shoal stats --json $S/m > $OUT/stats.json 2>&1; shoal stats --count 1 $S/m 2>&1 | grep -E "busy-wait|spin|follow"
shoal umount $S/m; umount $S/xfs
echo "== done $(date +%T)"
