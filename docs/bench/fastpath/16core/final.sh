#!/usr/bin/env bash
# The busy-wait decision of three fresh mounts, then run34.sh (STEPS), logs under $OUT.
D=$(cd "$(dirname "$0")" && pwd)
export PATH=$D/bin:$PATH LD_LIBRARY_PATH=$D/lib
chmod +x "$D"/bin/*
S=/var/tmp/fin; rm -rf $S; mkdir -p $S
for i in 1 2 3; do shoal mkfs --force $S/st$i >/dev/null && mkdir -p $S/m$i && shoal mount $S/st$i $S/m$i && shoal stats --count 1 $S/m$i 2>&1 | grep -E "busy-wait"; shoal umount $S/m$i; done
STEPS="${STEPS:-probe fsync tree create}" bash "$D/run34.sh"
for i in 1 2 3; do shoal mkfs --force $S/st$i >/dev/null && shoal mount $S/st$i $S/m$i && shoal stats --count 1 $S/m$i 2>&1 | grep -E "busy-wait"; shoal umount $S/m$i; done
