#!/usr/bin/env bash
# Warm `git status` of a fresh clone, per build and on a plain directory: the clone of
# REPO (a bare repository) under `shoal run` on a fresh store, `sync`, two untimed
# `git status` (the first hashes the entries written in the clone's last second), then
# five timed ones (ms). As root.
#   warm-status.sh REPO SCRATCH BUILD...   BUILD: a directory with `shoal` and
#                                          `libshoal_preload.so`; a store under SCRATCH
#   warm-status.sh REPO plain DIR          in DIR (an XFS or ext4 mount), no library
set -u
repo=${1:?bare repository}
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
timed_status() { # WORKDIR RUN...
    local work=$1 times="" start
    shift
    for _ in 1 2; do "$@" git -C "$work" status --porcelain >/dev/null; done
    for _ in 1 2 3 4 5; do
        start=$(date +%s%N)
        "$@" git -C "$work" status --porcelain >/dev/null
        times="$times $((($(date +%s%N) - start) / 1000000))"
    done
    echo "$times"
}
if [ "${2:?SCRATCH or plain}" = plain ]; then
    work=${3:?DIR}/warm-status-clone
    rm -rf "$work"
    git clone -q --no-hardlinks "$repo" "$work" && sync -f "$work"
    echo "plain $3: git status, warm (ms):$(timed_status "$work")"
    rm -rf "$work"
    exit
fi
scratch=$2; shift 2
mkdir -p "$scratch/mnt"
for build in "$@"; do
    "$build/shoal" umount "$scratch/mnt" 2>/dev/null
    rm -rf "$scratch/store"
    "$build/shoal" mkfs "$scratch/store" >/dev/null
    "$build/shoal" mount "$scratch/store" "$scratch/mnt" || exit 1
    run=("$build/shoal" run --)
    "${run[@]}" git clone -q --no-hardlinks "$repo" "$scratch/mnt/clone"
    "${run[@]}" sync -f "$scratch/mnt/clone"
    echo "$build: git status, warm (ms):$(timed_status "$scratch/mnt/clone" "${run[@]}")"
    "$build/shoal" umount "$scratch/mnt"
done
