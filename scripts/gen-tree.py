#!/usr/bin/env python3
"""Write a deterministic, source-like tree straight into a tar archive.

Stand-in for `shoal gen-tree` until that exists. Same --entries and --seed always give
the same archive, byte for byte (fixed mtimes, owners, contents, order).

Shape: about 1 directory per 10 entries, directories created breadth first with up to
--fanout subdirectories each (so depth grows like log_fanout(dirs)); files spread randomly
over the directories; sizes 0..8 KiB skewed small (like source files); about 1% of the
non-directory entries are relative symlinks to a sibling file. Names look like source
files (module_123.c, include, ...).

Prints the number of entries in the archive (directories + files + symlinks, including
the top directory) on stdout.
"""
import argparse
import io
import random
import sys
import tarfile

MTIME = 1_700_000_000  # fixed: 2023-11-14
EXTS = [".c", ".h", ".rs", ".py", ".go", ".md", ".txt", ".json", ".S", ".toml"]
DIRNAMES = ["src", "include", "lib", "drivers", "net", "fs", "tests", "docs", "tools",
            "arch", "core", "util", "mm", "kernel", "scripts", "crypto"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=100_000, help="total entries (default 100000)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    ap.add_argument("--fanout", type=int, default=10, help="max subdirectories per directory")
    ap.add_argument("--max-size", type=int, default=8192, help="largest file, bytes")
    ap.add_argument("--top", default="tree", help="name of the top directory in the archive")
    ap.add_argument("--out", required=True, help="output .tar path")
    a = ap.parse_args()

    rng = random.Random(a.seed)
    n_dirs = max(1, a.entries // 10)
    n_other = max(0, a.entries - n_dirs)

    # Directories, breadth first: dirs[0] is the top.
    dirs = [a.top]
    children = [[]]
    queue = [0]
    qi = 0
    while len(dirs) < n_dirs:
        pi = queue[qi]
        parent = dirs[pi]
        qi += 1
        k = rng.randint(max(1, a.fanout // 2), a.fanout)
        for i in range(k):
            if len(dirs) >= n_dirs:
                break
            name = f"{rng.choice(DIRNAMES)}{i}"
            dirs.append(f"{parent}/{name}")
            children.append([])
            children[pi].append(len(dirs) - 1)
            queue.append(len(dirs) - 1)

    # Files (and a few symlinks) assigned to directories.
    per_dir = [[] for _ in dirs]
    for i in range(n_other):
        per_dir[rng.randrange(len(dirs))].append(i)

    # A small pool of content to slice from keeps generation fast and deterministic.
    pool = bytes(rng.getrandbits(8) for _ in range(1 << 16))
    pool = pool.replace(b"\0", b" ")

    count = 0
    with tarfile.open(a.out, "w", format=tarfile.GNU_FORMAT) as tar:
        def add(info, data=None):
            nonlocal count
            info.mtime = MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
            count += 1

        # Depth first, as `tar cf` of a real tree would order it: a directory, its
        # files, then each subdirectory in turn.
        stack = [0]
        while stack:
            d = stack.pop()
            stack.extend(reversed(children[d]))
            path = dirs[d]
            ti = tarfile.TarInfo(path)
            ti.type = tarfile.DIRTYPE
            ti.mode = 0o755
            add(ti)
            last_file = None
            for i in per_dir[d]:
                if last_file is not None and rng.random() < 0.01:
                    ti = tarfile.TarInfo(f"{path}/link_{i}")
                    ti.type = tarfile.SYMTYPE
                    ti.linkname = last_file
                    ti.mode = 0o777
                    add(ti)
                    continue
                name = f"file_{i}{rng.choice(EXTS)}"
                size = int(a.max_size * rng.random() ** 2)
                off = rng.randrange(len(pool) - a.max_size) if size else 0
                ti = tarfile.TarInfo(f"{path}/{name}")
                ti.size = size
                ti.mode = 0o755 if name.endswith(".py") and rng.random() < 0.3 else 0o644
                add(ti, pool[off:off + size])
                last_file = name
    print(count)


if __name__ == "__main__":
    sys.exit(main())
