"""Extended Rosenbrock with PyTorch *scalar* autograd: every x_i is its own 0-dim
float64 tensor and the function is built from scalar operations (no vectorised
kernels), the way dlam sees it.

Usage: python3 rosenbrock_torch.py MODE N REPS, MODE =
  f     -- evaluate on 0-dim tensors under torch.no_grad()
  grad  -- torch.autograd.grad(f(x), x)
  hvp   -- reverse over reverse: g = grad(f, x, create_graph=True), then grad(g . v, x)
  hessian -- g as for hvp, then one grad(g_i, x) per row (double backward, n passes)
  jvp   -- forward mode: f on dual tensors x + eps v (torch.autograd.forward_ad)
Prints "f" (f), "f checksum" (hessian: of the rows' checksums) or "f jvp" (jvp), like
bench/peers/rosenbrock.cpp.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import torch.autograd.forward_ad as fwad  # noqa: E402

from common import args, checksum, hvp_v, print_result, rosen_x  # noqa: E402

torch.set_num_threads(1)


def rosen(x):
    acc = 0.0
    for i in range(len(x) - 1):
        t = x[i + 1] - x[i] * x[i]
        u = 1 - x[i]
        acc = acc + 100 * (t * t) + u * u
    return acc


def main():
    mode, n, reps = args(("f", "grad", "hvp", "hessian", "jvp"))
    xs = rosen_x(n)
    x = [torch.tensor(v, dtype=torch.float64, requires_grad=(mode not in ("f", "jvp")))
         for v in xs]
    if mode == "f":
        with torch.no_grad():
            for _ in range(reps):
                y = rosen(x)
        print_result(float(y))
        return
    v = [torch.tensor(vi, dtype=torch.float64) for vi in hvp_v(n)]
    if mode == "jvp":
        with torch.no_grad():
            for _ in range(reps):
                with fwad.dual_level():
                    y = rosen([fwad.make_dual(xi, vi) for xi, vi in zip(x, v)])
                    value, tangent = fwad.unpack_dual(y)
        print(f"{float(value):.17g} {float(tangent):.17g}")
        return
    if mode == "hessian":
        zero = torch.zeros((), dtype=torch.float64)
        for _ in range(reps):
            y = rosen(x)
            g = torch.autograd.grad(y, x, create_graph=True)
            rows = []
            for gi in g:
                row = torch.autograd.grad(gi, x, retain_graph=True, allow_unused=True)
                rows.append([float(zero if h is None else h) for h in row])
        print_result(float(y), [checksum(row) for row in rows])
        return
    for _ in range(reps):
        y = rosen(x)
        g = torch.autograd.grad(y, x, create_graph=(mode == "hvp"))
        if mode == "hvp":
            dot = 0.0
            for gi, vi in zip(g, v):
                dot = dot + gi * vi
            g = torch.autograd.grad(dot, x)
    print_result(float(y), [float(gi) for gi in g])


main()
