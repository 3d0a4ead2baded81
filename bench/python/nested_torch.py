"""Siskind and Pearlmutter's nested-derivative benchmarks (saddle, particle) with
PyTorch scalar autograd, float64, mirroring tests/lang/ad/inc/argmin.dlam step for
step: gradients inside differentiated code use create_graph=True.

Usage: python3 nested_torch.py MODE N REPS, MODE = saddle | particle (N ignored).
Prints the saddle point's four coordinates, or the particle's w*.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from common import args  # noqa: E402

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)


def leaf(v):
    if torch.is_tensor(v) and v.requires_grad:
        return v
    return torch.as_tensor(v, dtype=torch.float64).clone().requires_grad_(True)


def gradient(f):
    """Gradient of f: list of scalars -> scalar, differentiable again."""
    def g(x):
        xs = [leaf(v) for v in x]
        return list(torch.autograd.grad(f(xs), xs, create_graph=True))
    return g


def magnitude(v):
    return math.sqrt(sum(float(a) ** 2 for a in v))


def argmin(f, x, outermost=False):
    """outermost: nothing differentiates the result, so the iterates are plain numbers
    (as they are in dlam, where only values under a gradient carry a tag); otherwise
    they keep their graph, for the derivative of the result."""
    g0 = gradient(f)
    g = (lambda x: [float(v) for v in g0(x)]) if outermost else g0
    fx, gx, eta, i = f(x), g(x), 1e-5, 0
    while True:
        if magnitude(gx) <= 1e-5:
            return x
        if i == 10:
            eta, i = 2.0 * eta, 0
            continue
        xp = [x[k] - eta * gx[k] for k in range(len(x))]
        if magnitude([x[k] - xp[k] for k in range(len(x))]) <= 1e-5:
            return x
        fxp = f(xp)
        if float(fxp) < float(fx):
            x, fx, gx, i = xp, fxp, g(xp), i + 1
        else:
            eta, i = eta / 2.0, 0


def argmax(f, x, outermost=False):
    return argmin(lambda x: -f(x), x, outermost)


def vmax(f, x):
    return f(argmax(f, x))


def saddle():
    def F(x1, y1, x2, y2):
        return (x1 * x1 + y1 * y1) - (x2 * x2 + y2 * y2)
    start = [torch.tensor(1.0), torch.tensor(1.0)]
    p1 = argmin(lambda p1: vmax(lambda p2: F(p1[0], p1[1], p2[0], p2[1]), start), start, True)
    p1 = [float(a) for a in p1]
    p2 = argmax(lambda p2: F(p1[0], p1[1], p2[0], p2[1]), start, True)
    return p1 + [float(a) for a in p2]


def naive_euler(w):
    charges = [[10.0, 10.0 - w], [10.0, 0.0]]
    x, xdot, dt = [0.0, 8.0], [0.75, 0.0], 0.1

    def p(x):
        s = 0.0
        for c in charges:
            s = s + 1.0 / torch.sqrt((x[0] - c[0]) ** 2 + (x[1] - c[1]) ** 2)
        return s
    while True:
        xddot = [-1.0 * gi for gi in gradient(p)(x)]
        xnew = [x[i] + dt * xdot[i] for i in range(2)]
        if float(xnew[1]) > 0:
            x, xdot = xnew, [xdot[i] + dt * xddot[i] for i in range(2)]
        else:
            dtf = (0.0 - x[1]) / xdot[1]
            xtf = [x[i] + dtf * xdot[i] for i in range(2)]
            return xtf[0] * xtf[0]


def particle():
    return [float(v) for v in argmin(lambda w: naive_euler(w[0]), [0.0], True)]


def main():
    mode, _n, reps = args(("saddle", "particle"))
    for _ in range(reps):
        r = saddle() if mode == "saddle" else particle()
    print(" ".join(f"{v:.17g}" for v in r))


if __name__ == "__main__":
    main()
