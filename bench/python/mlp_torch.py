"""MLP 2-16-16-1 loss (as bench/peers/mlp.cpp) with PyTorch *scalar* autograd:
each of the 337 weights is a 0-dim float64 tensor and the network is built from
scalar multiply/add/tanh, not matrix kernels.

Usage: python3 mlp_torch.py MODE N REPS (N ignored), MODE =
  f     -- evaluate under torch.no_grad()
  grad  -- torch.autograd.grad(loss(w), w)
Prints "loss" (f) or "loss checksum".
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from common import N_H, N_IN, N_SAMPLES, args, mlp_data, print_result  # noqa: E402

torch.set_num_threads(1)
L2 = N_H * (N_IN + 1)
L3 = L2 + N_H * (N_H + 1)


def loss(w, xs, ts):
    acc = 0.0
    for (x0, x1), t in zip(xs, ts):
        x = (x0, x1)
        h1 = []
        for j in range(N_H):
            o = j * (N_IN + 1)
            s = 0.0
            for i in range(N_IN):
                s = s + w[o + i] * x[i]
            h1.append(torch.tanh(s + w[o + N_IN]))
        h2 = []
        for j in range(N_H):
            o = L2 + j * (N_H + 1)
            s = 0.0
            for i in range(N_H):
                s = s + w[o + i] * h1[i]
            h2.append(torch.tanh(s + w[o + N_H]))
        s = 0.0
        for i in range(N_H):
            s = s + w[L3 + i] * h2[i]
        e = (s + w[L3 + N_H]) - t
        acc = acc + e * e
    return acc / N_SAMPLES


def main():
    mode, _n, reps = args(("f", "grad"))
    w0, xs, ts = mlp_data()
    w = [torch.tensor(v, dtype=torch.float64, requires_grad=(mode != "f")) for v in w0]
    if mode == "f":
        with torch.no_grad():
            for _ in range(reps):
                y = loss(w, xs, ts)
        print_result(float(y))
        return
    for _ in range(reps):
        y = loss(w, xs, ts)
        g = torch.autograd.grad(y, w)
    print_result(float(y), [float(gi) for gi in g])


main()
