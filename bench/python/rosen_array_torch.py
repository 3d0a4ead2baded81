"""Extended Rosenbrock over one float64 tensor with PyTorch *vectorized* autograd
(slices and whole-tensor arithmetic, as bench/dlam/rosen-array.dlam), one thread:
  f(x) = sum_{i=0}^{n-2} 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2
at x_i = 0.5 + 0.001 (i mod 1000).

Usage: python3 rosen_array_torch.py MODE N REPS, MODE =
  f     -- evaluate under torch.no_grad()
  grad  -- torch.autograd.grad(f(x), x)
Prints "f" or "f checksum".
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from common import args, print_result  # noqa: E402

torch.set_num_threads(1)


def rosen(x):
    a = x[:-1]
    t = x[1:] - a * a
    u = 1 - a
    return (100 * (t * t) + u * u).sum()


def main():
    mode, n, reps = args(("f", "grad"))
    d = torch.float64
    x = (0.5 + 0.001 * (torch.arange(n, dtype=torch.int64) % 1000).to(d)).requires_grad_(mode != "f")
    if mode == "f":
        with torch.no_grad():
            for _ in range(reps):
                y = rosen(x)
        print_result(float(y))
        return
    for _ in range(reps):
        y = rosen(x)
        (g,) = torch.autograd.grad(y, (x,))
    w = (1 + torch.arange(n, dtype=torch.int64) % 7).to(d)
    print(f"{float(y):.17g} {float((g * w).sum()):.17g}")


main()
