"""MLP 784-128-10 over a batch of 128 (as bench/peers/mlp784.cpp, same data) with PyTorch
vectorized autograd: h = tanh(X @ W1 + b1), z = h @ W2 + b2, loss = (sum of
logsumexp(z, 1) - sum of the labels' logits) / 128, in float64 on one thread.

Usage: python3 mlp_784_torch.py MODE N REPS (N ignored), MODE =
  f     -- evaluate under torch.no_grad()
  grad  -- torch.autograd.grad(loss, (W1, b1, W2, b2))
Prints "loss" (f) or "loss checksum" (the checksum over W1, b1, W2, b2 flattened).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from common import N_BATCH, N_CLS, N_HID, N_IMG, args, mlp784_data, print_result  # noqa: E402

torch.set_num_threads(1)


def loss(w1, b1, w2, b2, x, y):
    h = torch.tanh(x @ w1 + b1)
    z = h @ w2 + b2
    return (torch.logsumexp(z, 1).sum() - (z * y).sum()) / N_BATCH


def main():
    mode, _n, reps = args(("f", "grad"))
    w1, b1, w2, b2, xs, labels = mlp784_data()
    grad = mode != "f"
    d = torch.float64
    w1 = torch.tensor(w1, dtype=d).reshape(N_IMG, N_HID).requires_grad_(grad)
    b1 = torch.tensor(b1, dtype=d).requires_grad_(grad)
    w2 = torch.tensor(w2, dtype=d).reshape(N_HID, N_CLS).requires_grad_(grad)
    b2 = torch.tensor(b2, dtype=d).requires_grad_(grad)
    x = torch.tensor(xs, dtype=d).reshape(N_BATCH, N_IMG)
    y = torch.zeros(N_BATCH, N_CLS, dtype=d)
    y[torch.arange(N_BATCH), torch.tensor(labels)] = 1.0
    if mode == "f":
        with torch.no_grad():
            for _ in range(reps):
                v = loss(w1, b1, w2, b2, x, y)
        print_result(float(v))
        return
    for _ in range(reps):
        v = loss(w1, b1, w2, b2, x, y)
        g = torch.autograd.grad(v, (w1, b1, w2, b2))
    flat = torch.cat([gi.reshape(-1) for gi in g])
    print_result(float(v), flat.tolist())


main()
