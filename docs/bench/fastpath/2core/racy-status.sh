#!/usr/bin/env bash
# `git status` with every index entry racy (the files and the index touched to one second,
# as after a clone that finished within a second), five times: git then hashes every file
# again, as the first `git status` after a clone does for those written in its last second.
#   racy-status.sh REPO shoal SHOAL_DIR SCRATCH   a fresh store under SCRATCH, mounted by
#                                                 SHOAL_DIR/shoal, the tools under `shoal run`
#   racy-status.sh REPO plain DIR                 in DIR (an XFS or ext4 mount), no library
set -eu
repo=${1:?bare repository} how=${2:?shoal or plain}
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
run=()
if [ "$how" = shoal ]; then
    dir=${3:?SHOAL_DIR} scratch=${4:?SCRATCH}
    "$dir/shoal" umount "$scratch/mnt" 2>/dev/null || true
    rm -rf "$scratch" && mkdir -p "$scratch/mnt"
    "$dir/shoal" mkfs "$scratch/store" >/dev/null
    "$dir/shoal" mount "$scratch/store" "$scratch/mnt"
    work=$scratch/mnt/clone run=("$dir/shoal" run --)
else
    work=${3:?DIR}/racy-clone
    rm -rf "$work"
fi
"${run[@]}" git clone -q --no-hardlinks "$repo" "$work"
"${run[@]}" sync -f "$work"
sleep 2
times=""
for _ in 1 2 3 4 5; do
    second=$(date +%s)
    (cd "$work" && git ls-files -z | "${run[@]}" xargs -0 touch -d "@$second" &&
        touch -d "@$second" .git/index)
    start=$(date +%s%N)
    "${run[@]}" git -C "$work" status --porcelain >/dev/null
    end=$(date +%s%N)
    times="$times $(( (end - start) / 1000000 ))"
done
echo "$how: git status, every entry racy (ms):$times"
if [ "$how" = shoal ]; then "$dir/shoal" umount "$scratch/mnt"; else rm -rf "$work"; fi
