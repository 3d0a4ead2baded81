#!/usr/bin/env python3
"""Compares dlam's gradients with the hand-written C++ ones element by element.

run.py checks each row by its "value checksum" line; this runs the array programs in
MODE dump (the value, then every gradient element, one a line) under dlam and under
their C++ peer, and requires every element to agree to a relative 1e-9.

Usage: python3 bench/check_gradients.py [--dlam PATH] [--rtol R]
Exits 1 if a program fails or an element differs.
"""

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402

# (dlam program, C++ peer, N)
CASES = [("mlp-784", "mlp784", 0), ("rosen-array", "rosenbrock", 10**6)]


def numbers(argv):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)[:80]}: exit {out.returncode}: {run.first_line(out.stderr)}")
    return [float(t) for t in out.stdout.split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dlam", default=os.path.join(run.ROOT, "build", "dlam"))
    ap.add_argument("--rtol", type=float, default=run.GRAD_RTOL)
    opts = ap.parse_args()
    opts.dlam = os.path.abspath(opts.dlam)
    why = run._build_cxx([cpp for _, cpp, _ in CASES])(opts)
    if why:
        sys.exit(f"C++ peers: {why}")
    bad = 0
    for prog, cpp, n in CASES:
        try:
            d = numbers(run._dlam_rep(opts, prog, "dump", n, 2))
            c = numbers([run._BUILT[cpp], "dump", str(n), "2"])
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            print(f"{prog}: FAILED: {e}")
            bad += 1
            continue
        if len(d) != len(c):
            print(f"{prog}: FAILED: {len(d) - 1} gradient elements from dlam, {len(c) - 1} from C++")
            bad += 1
            continue

        def rel(p, q):
            return 0.0 if p == q else abs(p - q) / max(abs(p), abs(q))
        worst = max(range(1, len(d)), key=lambda i: rel(d[i], c[i]))
        wrong = sum(1 for i in range(1, len(d)) if rel(d[i], c[i]) > opts.rtol)
        ok = wrong == 0 and rel(d[0], c[0]) <= opts.rtol
        bad += not ok
        print(f"{prog}: {'ok' if ok else 'WRONG'}: value {d[0]!r} (C++ {c[0]!r}); "
              f"{len(d) - 1} gradient elements, {wrong} differ by more than {opts.rtol:g}; "
              f"largest relative difference {rel(d[worst], c[worst]):.2g} "
              f"(element {worst - 1}: {d[worst]!r} vs {c[worst]!r})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
