#!/usr/bin/env bash
# fsck-ab.sh OLD NEW TARBALL [ROUNDS]: a whole check of the same tree on each filesystem,
# alternating: `shoal fsck` by two shoal binaries (OLD, NEW) of one store made by `tar x`
# through a mount of NEW and unmounted, `xfs_repair -n` and `e2fsck -fn` of XFS and ext4
# images (loop files on /var/tmp) holding the same tree. Wall seconds, page cache warm.
# The store is checked twice over: as `tar x` left it ("fresh": its journals hold what
# tar wrote) and after a mount and unmount ("remounted": fjall flushed them at the mount).
set -eu
old=${1:?old shoal}; new=${2:?new shoal}; tarball=${3:?tarball}; rounds=${4:-5}
work=/var/tmp/shoal-fsck-bench; rm -rf "$work"; mkdir -p "$work/m"; cd "$work"
"$new" mkfs st >/dev/null; "$new" mount st m; tar xf "$tarball" -C m; "$new" umount m
truncate -s 3G x.img e.img; mkfs.xfs -q -f x.img; mkfs.ext4 -q -F e.img
for img in x e; do mount -o loop $img.img m; tar xf "$tarball" -C m; umount m; done
seconds() { local s=$(date +%s.%N); "$@" >/dev/null 2>&1 || echo -n "(exit $?) "; echo "$(date +%s.%N) - $s" | bc; }
run() {
    for round in $(seq 1 "$rounds"); do
        echo "$1 shoal-old $(seconds "$old" fsck st)"
        echo "$1 shoal-new $(seconds "$new" fsck st)"
        echo "$1 xfs_repair-n $(seconds xfs_repair -n x.img)"
        echo "$1 e2fsck-fn $(seconds e2fsck -fn e.img)"
    done
}
run fresh
"$new" mount st m; "$new" umount m
run remounted
cd /; rm -rf "$work"
