"""The logistic map x <- r x (1 - x), 1000 steps from x = 0.5, as a function of r
(bench/dlam/logistic.dlam), with PyTorch on 0-dim float64 tensors.

Usage: python3 logistic_torch.py MODE N REPS, MODE =
  f          -- evaluate under torch.no_grad()
  derivative -- forward mode: the map on the dual tensor r + eps (torch.autograd.forward_ad)
  grad       -- reverse mode: torch.autograd.grad
Prints "value" (f) or "value derivative", like bench/peers/logistic.cpp.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.autograd.forward_ad as fwad  # noqa: E402

from common import args  # noqa: E402

torch.set_num_threads(1)


def logistic(r, n):
    x = 0.5
    for _ in range(n):
        x = r * x * (1 - x)
    return x


def main():
    mode, n, reps = args(("f", "derivative", "grad"))
    r = torch.tensor(3.2, dtype=torch.float64, requires_grad=(mode == "grad"))
    if mode == "f":
        with torch.no_grad():
            for _ in range(reps):
                y = logistic(r, n)
        print(f"{float(y):.17g}")
        return
    if mode == "derivative":
        with torch.no_grad():
            for _ in range(reps):
                with fwad.dual_level():
                    value, d = fwad.unpack_dual(logistic(fwad.make_dual(r, torch.ones_like(r)), n))
    else:
        for _ in range(reps):
            value = logistic(r, n)
            (d,) = torch.autograd.grad(value, r)
    print(f"{float(value):.17g} {float(d):.17g}")


main()
