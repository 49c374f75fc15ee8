#!/bin/bash
# abso.sh ROUNDS "CMD" MNT SO_A SO_B...: same mount, preload libraries alternating; median ms
R=$1; CMD=$2; M=$3; shift 3
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
med() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
declare -A T
c=${CMD//DIR/$M}
for i in $(seq $R); do for L in "$@"; do s=$(date +%s%N); LD_PRELOAD=$L $c >/dev/null; T[$L]="${T[$L]} $(ms $s)"; done; done
for L in "$@"; do echo "$L median $(echo ${T[$L]} | med) : ${T[$L]}"; done
