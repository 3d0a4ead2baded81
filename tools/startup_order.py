#!/usr/bin/env python3
"""startup_order.py — writes the link order of the functions `dlam -e 1` runs.

The start-up of `dlam` touches some 160 functions spread over the whole binary; the
kernel maps each page fault's 64 KiB neighbourhood, so scattered code costs resident
memory (1.6 MB of text for 400 KB of code run). Built with -ffunction-sections and
linked by gold with --section-ordering-file (CMakeLists.txt, DLAM_STARTUP_ORDER), the
functions listed here are placed together.

    tools/startup_order.py build/dlam > cli/startup.order

runs `dlam -e 1` under valgrind's callgrind and lists the dlam functions it ran, in the
order first run, as the section names GCC and clang give them (.text.NAME, plus the hot,
unlikely and startup variants; a constructor or destructor under the name of the
variant that has the code, C2/D2). A name that no longer exists is ignored by the
linker, so a stale list costs only memory, never correctness.
"""
import os
import re
import subprocess
import sys
import tempfile


def functions_run(binary):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", "--demangle=no",
                        f"--callgrind-out-file={out}", binary, "-e", "1"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        lines = open(out).read().split("\n")
    # Callgrind names an object (ob=) or a function (fn=) in full the first time, by its
    # number after that; the c- forms (cob=, cfn=) name a callee, not what follows.
    tables = {"ob": {}, "fn": {}}
    current = {"ob": None, "fn": None}
    seen, order = set(), []
    for line in lines:
        m = re.match(r"(c?)(ob|fn)=\((\d+)\)(?: (.*))?", line)
        if not m:
            continue
        callee, kind, number, name = m.groups()
        if name:
            tables[kind][number] = name
        if callee:
            continue
        current[kind] = tables[kind].get(number)
        fn, obj = current["fn"], current["ob"]
        if kind == "fn" and obj and os.path.basename(obj) == os.path.basename(binary) \
                and fn not in seen and not fn.startswith("0x"):
            seen.add(fn)
            order.append(fn)
    return order


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: startup_order.py DLAM_BINARY > ORDER_FILE")
    out = []
    for fn in functions_run(sys.argv[1]):
        # complete-object constructors and destructors are aliases of the base-object
        # ones, whose section holds the code
        variants = {fn, re.sub(r"C1E", "C2E", fn), re.sub(r"D1E", "D2E", fn)}
        for v in sorted(variants):
            for prefix in (".text.", ".text.hot.", ".text.unlikely.", ".text.startup."):
                out.append(prefix + v)
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
