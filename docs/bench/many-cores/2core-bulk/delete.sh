#!/usr/bin/env bash
# delete.sh SHOAL [ROUNDS]: bytes read from disk to delete one 1 GiB file, and the time rm
# takes, on shoal (a store on /var/tmp, mounted by SHOAL; the daemon's read_bytes, counted
# until its purge of the file's chunks is done) and on XFS and ext4 (loop devices on
# /var/tmp; the loop device's sectors read). Page cache dropped before each rm.
set -eu
shoal=${1:?shoal binary}; rounds=${2:-3}
work=/var/tmp/shoal-delete-bench; mkdir -p "$work"; cd "$work"
settle() { sync; sleep 3; echo 3 > /proc/sys/vm/drop_caches; }
for round in $(seq 1 "$rounds"); do
    rm -rf st m; mkdir -p m
    "$shoal" mkfs st >/dev/null; "$shoal" mount st m
    head -c 1G /dev/urandom > m/big; settle
    pid=$(pgrep -f "mount st m" | head -1)
    before=$(awk '/^read_bytes/ {print $2}' /proc/$pid/io)
    start=$(date +%s.%N); rm m/big; end=$(date +%s.%N)
    sleep 5   # the purge of a file past one batch's chunks runs after the unlink's commit
    after=$(awk '/^read_bytes/ {print $2}' /proc/$pid/io)
    echo "shoal rm $(echo "$end - $start" | bc) s, read $(( (after - before) / 1048576 )) MiB"
    "$shoal" umount m
    for fs in xfs ext4; do
        rm -f img; truncate -s 3G img
        if [ $fs = xfs ]; then mkfs.xfs -q -f img; else mkfs.ext4 -q -F img; fi
        dev=$(losetup -f --show img); mount "$dev" m
        head -c 1G /dev/urandom > m/big; settle
        name=$(basename "$dev"); sectors() { awk '{print $3}' /sys/block/$name/stat; }
        before=$(sectors); start=$(date +%s.%N); rm m/big; sync; end=$(date +%s.%N)
        after=$(sectors)
        echo "$fs rm+sync $(echo "$end - $start" | bc) s, read $(( (after - before) * 512 / 1048576 )) MiB"
        umount m; losetup -d "$dev"
    done
done
rm -rf "$work"
