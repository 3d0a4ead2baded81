"""MLP 2-16-16-1 loss (as bench/peers/mlp.cpp, same data) with PyTorch *vectorized*
autograd: the weights are three float64 matrices with their bias columns, the 256
samples one (256, 2) matrix, the network two matmuls and tanh over whole tensors.

Usage: python3 mlp_array_torch.py MODE N REPS (N ignored), MODE =
  f     -- evaluate under torch.no_grad()
  grad  -- torch.autograd.grad(loss(W), W)
Prints "loss" (f) or "loss checksum" (the checksum over the flat weight order of mlp.cpp).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from common import N_H, N_IN, N_SAMPLES, args, mlp_data, print_result  # noqa: E402

torch.set_num_threads(1)


def loss(w1, w2, w3, x, t):
    h1 = torch.tanh(x @ w1[:, :N_IN].T + w1[:, N_IN])
    h2 = torch.tanh(h1 @ w2[:, :N_H].T + w2[:, N_H])
    out = h2 @ w3[:N_H] + w3[N_H]
    e = out - t
    return (e * e).sum() / N_SAMPLES


def main():
    mode, _n, reps = args(("f", "grad"))
    w0, xs, ts = mlp_data()
    l2 = N_H * (N_IN + 1)
    l3 = l2 + N_H * (N_H + 1)
    grad = mode != "f"
    d = torch.float64
    w1 = torch.tensor(w0[:l2], dtype=d).reshape(N_H, N_IN + 1).requires_grad_(grad)
    w2 = torch.tensor(w0[l2:l3], dtype=d).reshape(N_H, N_H + 1).requires_grad_(grad)
    w3 = torch.tensor(w0[l3:], dtype=d).requires_grad_(grad)
    x = torch.tensor(xs, dtype=d)
    t = torch.tensor(ts, dtype=d)
    if mode == "f":
        with torch.no_grad():
            for _ in range(reps):
                y = loss(w1, w2, w3, x, t)
        print_result(float(y))
        return
    for _ in range(reps):
        y = loss(w1, w2, w3, x, t)
        g = torch.autograd.grad(y, (w1, w2, w3))
    flat = torch.cat([gi.reshape(-1) for gi in g])
    print_result(float(y), [float(v) for v in flat])


main()
