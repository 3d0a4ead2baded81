"""Extended Rosenbrock with PyTorch *scalar* autograd: every x_i is its own 0-dim
float64 tensor and the function is built from scalar operations (no vectorised
kernels), the way dlam sees it.

Usage: python3 rosenbrock_torch.py MODE N REPS, MODE =
  f     -- evaluate on 0-dim tensors under torch.no_grad()
  grad  -- torch.autograd.grad(f(x), x)
  hvp   -- reverse over reverse: g = grad(f, x, create_graph=True), then grad(g . v, x)
Prints "f" (f) or "f checksum" like bench/peers/rosenbrock.cpp.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from common import args, hvp_v, print_result, rosen_x  # noqa: E402

torch.set_num_threads(1)


def rosen(x):
    acc = 0.0
    for i in range(len(x) - 1):
        t = x[i + 1] - x[i] * x[i]
        u = 1 - x[i]
        acc = acc + 100 * (t * t) + u * u
    return acc


def main():
    mode, n, reps = args(("f", "grad", "hvp"))
    xs = rosen_x(n)
    x = [torch.tensor(v, dtype=torch.float64, requires_grad=(mode != "f")) for v in xs]
    if mode == "f":
        with torch.no_grad():
            for _ in range(reps):
                y = rosen(x)
        print_result(float(y))
        return
    v = [torch.tensor(vi, dtype=torch.float64) for vi in hvp_v(n)]
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
