#!/usr/bin/env bash
# Carried in .dev/ beside prepare.sh's files, plus bin/cpuloop and bin/pagetouch (cpuloop.c,
# pagetouch.c here, gcc -O2) and bin/library_rate (the engine example, stripped).
# Why shoal's code runs slower per thread on the 16-core guest: raw CPU speed, the cost of a
# page fault on fresh and on recycled memory, the engine in process run twice, and the
# busy-wait decision of four fresh mounts.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export PATH=$D/bin:$PATH LD_LIBRARY_PATH=$D/lib
chmod +x "$D"/bin/*
S=/var/tmp/d2; rm -rf $S; mkdir -p $S
echo "== probe $(date +%T)"; uname -r; nproc; grep -m1 "model name" /proc/cpuinfo
cat /sys/devices/system/cpu/cpuidle/current_governor /sys/devices/system/cpu/cpuidle/current_driver /sys/module/haltpoll/parameters/guest_halt_poll_ns 2>&1
ls /sys/devices/system/cpu/cpu0/cpuidle/ 2>&1; free -g | head -2
echo "== cpu"; cpuloop
echo "== page faults"; pagetouch 2048 3
echo "== engine in process $(date +%T)"
for t in 1 1 8; do timeout 60 library_rate $S/lr$t 200000 $t | tr '\n' ' '; echo; rm -rf $S/lr$t; done
echo "== mounts $(date +%T)"
for i in 1 2 3 4; do shoal mkfs --force $S/st$i >/dev/null && mkdir -p $S/m$i && shoal mount $S/st$i $S/m$i && shoal stats --count 1 $S/m$i 2>&1 | grep -E "busy-wait"; done
for i in 1 2 3 4; do shoal umount $S/m$i; done
echo "== page faults after $(date +%T)"; pagetouch 2048 2
echo "== done $(date +%T)"
