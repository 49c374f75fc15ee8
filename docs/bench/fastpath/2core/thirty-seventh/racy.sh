#!/bin/bash
# racy.sh CLONE [N]: what `git status` pays for racily clean entries. Sets every work-tree
# file's mtime to one second T, refreshes the index (recording those times), then, N times,
# gives the index the mtime T + 0.5 s, so that every entry is racy (git 2.39 compares
# seconds), and times `git status` (which reads and hashes each file, then writes the index),
# against a warm status with no racy entry. Prefix the git commands with `shoal run --` by
# setting RUN="shoal run --".
set -eu
clone=${1:?clone}; n=${2:-3}; T=1795000000
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
find "$clone" -path "$clone/.git" -prune -o -type f -exec touch -h -d "@$T" {} +
${RUN:-} git -C "$clone" update-index -q --refresh
cp "$clone/.git/index" /tmp/racy.index.$$
ms() { local s e; s=$(date +%s%N); "$@" >/dev/null; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
for i in $(seq "$n"); do
    cp /tmp/racy.index.$$ "$clone/.git/index"; touch -d "@$T.5" "$clone/.git/index"
    racy=$(ms ${RUN:-} git -C "$clone" status --porcelain)
    warm=$(ms ${RUN:-} git -C "$clone" status --porcelain)
    echo "all racy $racy ms, warm $warm ms"
done
rm -f /tmp/racy.index.$$
