"""Shared set-up of the PyTorch gradient peers (same inputs as bench/peers/common.h)."""

import math
import sys


def args(modes):
    """Command line of every peer: PROG MODE N REPS."""
    if len(sys.argv) != 4 or sys.argv[1] not in modes:
        sys.exit(f"usage: {sys.argv[0]} MODE N REPS   (MODE: {' | '.join(modes)})")
    return sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def rosen_x(n):
    return [0.5 + 0.001 * (i % 1000) for i in range(n)]


def hvp_v(n):
    return [1.0 - 0.01 * (i % 7) for i in range(n)]


def checksum(g):
    c = 0.0
    for i, gi in enumerate(g):
        c += gi * (1 + i % 7)
    return c


class Lcg:
    """Park-Miller: s <- 16807 s mod (2^31 - 1), as doubles (exact)."""

    def __init__(self):
        self.s = 42.0

    def next(self):
        m = 2147483647.0
        p = self.s * 16807.0
        self.s = p - m * math.floor(p / m)
        return self.s / m


N_IN, N_H, N_SAMPLES = 2, 16, 256
N_WEIGHTS = N_H * (N_IN + 1) + N_H * (N_H + 1) + (N_H + 1)  # 337


def mlp_data():
    r = Lcg()
    w = [r.next() - 0.5 for _ in range(N_WEIGHTS)]
    xs, ts = [], []
    for _ in range(N_SAMPLES):
        x0 = 2 * r.next() - 1
        x1 = 2 * r.next() - 1
        xs.append((x0, x1))
        ts.append(math.sin(2 * x0) * math.cos(x1))
    return w, xs, ts


def print_result(value, g=None):
    if g is None:
        print(f"{value:.17g}")
    else:
        print(f"{value:.17g} {checksum(g):.17g}")


# MLP 784-128-10 (bench/peers/common.h, mlp784Data): the same formula, exact in doubles.
N_IMG, N_HID, N_CLS, N_BATCH = 784, 128, 10, 128


def modq(k, a, m):
    return ((k * a) % m) / m


def mlp784_data():
    """W1 (784*128), b1 (128), W2 (128*10), b2 (10), X (128*784) as flat row-major lists,
    and the 128 labels."""
    w1 = [0.1 * (modq(k, 37, 1009) - 0.5) for k in range(N_IMG * N_HID)]
    b1 = [0.01 * (j % 7 - 3) for j in range(N_HID)]
    w2 = [0.2 * (modq(k, 53, 1013) - 0.5) for k in range(N_HID * N_CLS)]
    b2 = [0.02 * (c % 5 - 2) for c in range(N_CLS)]
    x = [((97 * k) % 256) / 255 for k in range(N_BATCH * N_IMG)]
    labels = [(7 * b + 3) % 10 for b in range(N_BATCH)]
    return w1, b1, w2, b2, x, labels
