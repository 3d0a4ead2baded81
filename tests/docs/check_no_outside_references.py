#!/usr/bin/env python3
"""check_no_outside_references.py — the repository documents itself: no file in it may cite
a document that is not in it (a specification or papers kept elsewhere, an absolute path of
the machine it was written on). Reads the files git tracks (or, outside a git checkout, the
source tree without build directories) and fails listing every line that does.

Usage: check_no_outside_references.py ROOT
"""
import os
import re
import subprocess
import sys

# A specification outside the repository, the folder of papers beside it, and absolute
# paths of the machine the project was written on.
PATTERNS = [re.compile(p) for p in (r"\bSPEC\b", r"\bSPEC\.md\b", r"shared/papers",
                                    r"\.\./shared\b", r"/work/")]
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache"}
SELF = os.path.abspath(__file__)


def source_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                             check=True).stdout.decode()
        return [os.path.join(root, f) for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
            files += [os.path.join(d, n) for n in sorted(names) if n != ".git"]
        return files


def main():
    root = os.path.abspath(sys.argv[1])
    found = []
    for path in source_files(root):
        if os.path.abspath(path) == SELF or not os.path.isfile(path):
            continue
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue  # binary data
        for n, line in enumerate(text.split("\n"), 1):
            if any(p.search(line) for p in PATTERNS):
                found.append(f"{os.path.relpath(path, root)}:{n}: {line.strip()}")
    for f in found:
        print(f)
    print(f"{len(found)} references to documents outside the repository")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
