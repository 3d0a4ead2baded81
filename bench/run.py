#!/usr/bin/env python3
"""dlam benchmark suite: times dlam against its peers in one invocation.

Usage:  python3 bench/run.py [--runs N] [--only NAME[,NAME...]] [--dlam PATH]
                             [--quick] [--list] [--json FILE] [--strict] ...

Every command is run as a fresh process; wall time is measured around
fork/exec/wait and peak memory is the child's ru_maxrss from os.wait4.
Runs are interleaved round-robin across the commands of a workload so that
drift in machine load affects every peer alike; the median is reported.

Group `gradients` (reverse-mode AD against hand-written C++, ADOL-C and
PyTorch scalar autograd) times repeated computations inside one process: each
program takes MODE N REPS and is run with REPS and with a small base count, and
the difference gives the time per operation (see Rep below); it also prints the
cost ratios gradient/function and the memory checks.

Adding a workload: append a Workload(...) to WORKLOADS with one entry per peer
key in `impls` (a source file relative to bench/, or a callable returning an
argv; for group `gradients`, a Rep).  Adding a peer: append a Peer(...) to PEERS (with an `available` check
and, for compiled peers under bench/peers/, a `prepare` step that builds it).
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)


# --------------------------------------------------------------------------
# Peers: how to run a source file (or an argv) for each implementation.
# --------------------------------------------------------------------------

@dataclass
class Peer:
    key: str                 # registry key, used in Workload.impls
    label: str               # column header
    # argv for running a source file (absolute path), given the options
    argv: Callable[[argparse.Namespace, str], list]
    # returns None if usable, else a short reason
    available: Callable[[argparse.Namespace], Optional[str]]
    # optional build step (compiled peers); returns None or an error string
    prepare: Optional[Callable[[argparse.Namespace], Optional[str]]] = None
    subject: bool = False    # True for dlam: the thing being measured
    # argv for a repeated-computation program (group `gradients`):
    # (opts, prog, mode, n, reps) -> argv; see Rep below
    rep_argv: Optional[Callable[..., list]] = None


def _which(prog: str) -> Callable[[argparse.Namespace], Optional[str]]:
    def check(_opts):
        return None if shutil.which(prog) else f"{prog} not found"
    return check


def _dlam_available(opts) -> Optional[str]:
    p = opts.dlam
    if not os.path.isfile(p):
        return f"missing ({os.path.relpath(p, ROOT) if p.startswith(ROOT) else p})"
    if not os.access(p, os.X_OK):
        return "not executable"
    return None


def cache_dir() -> str:
    """Where the launcher and the compiled peers are cached."""
    base = os.environ.get("XDG_CACHE_HOME") or tempfile.gettempdir()
    d = os.path.join(base, f"dlam-bench-{os.getuid()}")
    os.makedirs(d, exist_ok=True)
    return d


def _openblas_flags() -> list:
    """Compile and link flags for OpenBLAS's serial build, the BLAS dlam's `dot` calls
    (Debian's libopenblas-serial-dev keeps it, and its cblas.h, in directories of their
    own; see CMakeLists.txt). Empty if it is not there: the peer then fails to build."""
    import glob
    libs = sorted(glob.glob("/usr/lib/*/openblas-serial/libopenblas.so"))
    incs = sorted(glob.glob("/usr/include/*/openblas-serial/cblas.h"))
    if not libs or not incs:
        return []
    lib, inc = os.path.dirname(libs[0]), os.path.dirname(incs[0])
    return [f"-I{inc}", f"-L{lib}", "-lopenblas", f"-Wl,-rpath,{lib}"]


# Compiled peers of the gradient workloads: binary name -> (source under
# bench/peers/, link flags).  Built with g++ -O2 into cache_dir(), keyed by a
# hash of the source and common.h, so an edit rebuilds.
CXX_PEERS = {
    "rosenbrock": ("rosenbrock.cpp", []),
    "logistic": ("logistic.cpp", []),
    "mlp": ("mlp.cpp", []),
    "mlp784": ("mlp784.cpp", _openblas_flags()),
    "rosen_array": ("rosen_array.cpp", []),
    "rosenbrock_adolc": ("rosenbrock_adolc.cpp", ["-ladolc"]),
    "mlp_adolc": ("mlp_adolc.cpp", ["-ladolc"]),
}
CXX_FLAGS = ["-O2", "-std=c++20"]
_BUILT: dict = {}   # binary name -> path


def _build_cxx(names):
    def prepare(_opts) -> Optional[str]:
        import hashlib
        cxx = shutil.which("g++") or shutil.which("c++")
        if not cxx:
            return "no C++ compiler (g++)"
        for name in names:
            if name in _BUILT:
                continue
            src, libs = CXX_PEERS[name]
            srcp = os.path.join(BENCH, "peers", src)
            h = hashlib.sha1(" ".join(CXX_FLAGS + libs).encode())
            for p in (srcp, os.path.join(BENCH, "peers", "common.h")):
                with open(p, "rb") as f:
                    h.update(f.read())
            exe = os.path.join(cache_dir(), f"{name}-{h.hexdigest()[:12]}")
            if not os.access(exe, os.X_OK):
                tmp = exe + f".tmp{os.getpid()}"
                r = subprocess.run([cxx] + CXX_FLAGS + ["-o", tmp, srcp] + libs,
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    return f"{src} did not compile: " + first_line(r.stderr, 100)
                os.replace(tmp, exe)
            _BUILT[name] = exe
        return None
    return prepare


def _adolc_available(_opts) -> Optional[str]:
    if not (shutil.which("g++") or shutil.which("c++")):
        return "no C++ compiler (g++)"
    if not any(os.path.isfile(os.path.join(d, "adolc", "adolc.h"))
               for d in ("/usr/include", "/usr/local/include")):
        return "ADOL-C not installed (apt-get install -y libadolc-dev)"
    return None


# PyTorch is Debian's python3-torch, so it is the system interpreter's module.
TORCH_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
_torch_check: list = []


def _torch_available(_opts) -> Optional[str]:
    if not _torch_check:
        try:
            r = subprocess.run([TORCH_PYTHON, "-c", "import torch"], capture_output=True,
                               text=True, timeout=120)
            _torch_check.append(None if r.returncode == 0 else
                                f"{TORCH_PYTHON} cannot import torch (apt-get install -y python3-torch)")
        except (OSError, subprocess.TimeoutExpired) as e:
            _torch_check.append(f"{TORCH_PYTHON}: {e}")
    return _torch_check[0]


def _dlam_rep(o, prog, mode, n, reps):
    path = os.path.join(BENCH, "dlam", prog + ".dlam").replace("\\", "\\\\").replace('"', '\\"')
    return [o.dlam, "-e", f'(define MODE "{mode}") (define N {n}) (define REPS {reps}) '
                          f'(include "{path}")']


def _no_source(_o, _src):
    raise ValueError("this peer only runs gradient workloads (Rep)")


PEERS = [
    Peer("dlam", "dlam", lambda o, src: [o.dlam, src], _dlam_available, subject=True,
         rep_argv=_dlam_rep),
    Peer("lua", "lua5.4", lambda o, src: ["lua5.4", src], _which("lua5.4"),
         rep_argv=lambda o, prog, mode, n, reps:
             ["lua5.4", os.path.join(BENCH, "lua", prog + ".lua"), mode, str(n), str(reps)]),
    Peer("luajit", "luajit -joff", lambda o, src: ["luajit", "-joff", src], _which("luajit")),
    # Gradient peers (group `gradients`): each program takes MODE N REPS.
    Peer("cpp", "C++ hand", _no_source, _which("g++"),
         prepare=_build_cxx(["rosenbrock", "logistic", "mlp", "mlp784"]),
         rep_argv=lambda o, prog, mode, n, reps: [_BUILT[prog], mode, str(n), str(reps)]),
    # NumPy-style C++ (bench/peers/rosen_array.cpp): a loop and a new std::vector per
    # array operation, the gradient as whole-array reverse rules (array workloads).
    Peer("cpp-np", "C++ NumPy-style", _no_source, _which("g++"),
         prepare=_build_cxx(["rosen_array"]),
         rep_argv=lambda o, prog, mode, n, reps: [_BUILT[prog], mode, str(n), str(reps)]),
    Peer("adolc", "ADOL-C retape", _no_source, _adolc_available,
         prepare=_build_cxx(["rosenbrock_adolc", "mlp_adolc"]),
         rep_argv=lambda o, prog, mode, n, reps: [_BUILT[prog + "_adolc"], mode, str(n), str(reps)]),
    Peer("adolc-replay", "ADOL-C replay", _no_source, _adolc_available,
         prepare=_build_cxx(["rosenbrock_adolc", "mlp_adolc"]),
         rep_argv=lambda o, prog, mode, n, reps: [_BUILT[prog + "_adolc"], mode, str(n), str(reps)]),
    Peer("torch", "PyTorch", _no_source, _torch_available,
         rep_argv=lambda o, prog, mode, n, reps:
             [TORCH_PYTHON, "-B", os.path.join(BENCH, "python", prog + "_torch.py"), mode, str(n), str(reps)]),
]
PEER = {p.key: p for p in PEERS}

# An implementation is a path relative to bench/ (run with the peer's argv)
# or a callable (opts) -> argv for anything else (e.g. `dlam -e 1`).
Impl = Union[str, Callable[[argparse.Namespace], list]]


@dataclass
class Workload:
    name: str
    group: str               # tables are printed per group
    desc: str
    impls: dict              # peer key -> Impl
    expect: Optional[str] = None   # expected stdout (stripped); None: outputs must agree
    ratios_vs: Sequence[str] = ()  # peers the subject is divided by (default: all)
    reference: bool = False  # shown, but not one of the headline comparisons
    runs_factor: int = 1     # multiply --runs (cheap workloads, e.g. startup)
    mem_target: Optional[float] = None   # max dlam/lua5.4 ratio of peak RSS
    time_target_ms: Optional[float] = None  # absolute target for dlam
    # per peer: the largest dlam/peer ratio of the time per operation (issue targets)
    peer_targets: dict = field(default_factory=dict)


def _src(name: str) -> dict:
    return {"dlam": f"dlam/{name}.dlam", "lua": f"lua/{name}.lua", "luajit": f"lua/{name}.lua"}


WORKLOADS = [
    Workload("startup", "eval",
             "process start-up: `dlam -e 1` vs `lua5.4 -e ''` / `luajit -joff -e ''`",
             {"dlam": lambda o: [o.dlam, "-e", "1"],
              "lua": lambda o: ["lua5.4", "-e", ""],
              "luajit": lambda o: ["luajit", "-joff", "-e", ""]},
             expect=None, runs_factor=4, time_target_ms=10.0),
    Workload("fib", "eval", "naive recursive fib(30): non-tail calls and arithmetic",
             _src("fib"), expect="832040"),
    Workload("closure", "eval",
             "iota 10^6, map a capturing closure, fold-left +: allocation, GC, calls from map",
             _src("closure"), expect="1499998500000", mem_target=2.0),
    Workload("loop", "eval", "10^7-iteration tail-recursive loop (tail call per iteration on both sides)",
             _src("loop"), expect="49999995000000"),
    Workload("loop-for", "eval",
             "reference: dlam named let vs Lua's idiomatic numeric for (no call per iteration)",
             _src("loop-for"), expect="49999995000000", reference=True),
    Workload("binary-trees", "eval",
             "make and walk 3.2 M tree nodes (pairs / tables): allocation, GC, non-tail recursion",
             _src("binary-trees"), expect="3156655"),
    Workload("nbody", "eval",
             "functional 5-body simulation over lists, 10^4 steps: new lists per step, map/fold",
             _src("nbody"), expect="-1650714266"),
    Workload("deriv", "eval",
             "symbolic differentiator over lists and symbols, 400 rounds of a second derivative",
             _src("deriv"), expect="2625600"),
    Workload("strings", "eval",
             "join 10^4 numbers into a string, split it, read the fields back: 30 rounds",
             _src("strings"), expect="23249523928"),
    Workload("errors", "eval",
             "3*10^5 entries validated, two thirds raising (raise, error) and caught by a "
             "guard (Lua: error and pcall)",
             _src("errors"), expect="15000050000"),
]
# startup: dlam prints "1", Lua prints nothing -- check per peer instead.
STARTUP_EXPECT = {"dlam": "1", "lua": "", "luajit": ""}


# --------------------------------------------------------------------------
# Group `gradients`: repeated computations inside one process.
#
# Each implementation is a program PROG (bench/dlam/PROG.dlam,
# bench/peers/PROG.cpp or PROG_adolc.cpp, bench/python/PROG_torch.py,
# bench/lua/PROG.lua) run with MODE N REPS: it builds its input, repeats the
# computation REPS times and prints the result once ("value checksum").  It is
# run with REPS and with `base` repetitions, and the time per operation is
#     (median wall(REPS) - median wall(base)) / (REPS - base),
# so start-up, building the input (and, for PyTorch, `import torch`, ~1.5 s)
# cancel out.  Outputs are compared numerically (relative `rtol`) with the first
# peer of CHECK_ORDER that ran.
# --------------------------------------------------------------------------

@dataclass
class Rep:
    prog: str
    mode: str
    n: int
    reps: int
    base: Optional[int] = 1      # None: no subtraction, the time is wall(REPS) / REPS
    runs: Optional[int] = None   # at most this many timed runs (slow peers)
    scale: bool = True           # --quick divides REPS by 10

    def eff_reps(self, opts) -> int:
        if not (opts.quick and self.scale):
            return self.reps
        return max(self.reps // 10, (self.base or 0) + 1)


CHECK_ORDER = ["cpp", "cpp-np", "adolc", "adolc-replay", "torch", "lua", "dlam"]
GRAD_RTOL = 1e-9


def _impls(prog, mode, n, modes=None, **reps):
    """impls of one row of PROG: peer=REPS, or peer=Rep(...) for anything special. A peer
    runs MODE unless `modes` names another for it (ADOL-C: its tape modes); PyTorch,
    slow to repeat, runs at most 3 times and REPS is not scaled by --quick."""
    modes = {"adolc": "tape", "adolc-replay": "replay", **(modes or {})}
    def rep(k, v):
        if isinstance(v, Rep):
            return v
        if k == "torch":
            return Rep(prog, modes.get(k, mode), n, v, runs=3, scale=False)
        return Rep(prog, modes.get(k, mode), n, v)
    return {k: rep(k, v) for k, v in reps.items()}


def _rosen(mode, n, modes=None, **reps):
    return _impls("rosenbrock", mode, n, modes, **reps)


def _mlp(mode, **reps):
    return _impls("mlp", mode, 0, **reps)


GRAD = "gradients"
WORKLOADS += [
    Workload("rosen-f-100", GRAD, "extended Rosenbrock n=100, plain evaluation",
             _rosen("f", 100, dlam=60000, cpp=1000000, lua=60000, torch=600)),
    Workload("rosen-f", GRAD, "extended Rosenbrock n=1000, plain evaluation",
             _rosen("f", 1000, dlam=6000, cpp=100000, lua=6000, torch=60)),
    Workload("rosen-f-10k", GRAD, "extended Rosenbrock n=10000, plain evaluation",
             _rosen("f", 10000, dlam=600, cpp=10000, lua=600)),
    Workload("rosen-grad-100", GRAD, "gradient of Rosenbrock n=100",
             _rosen("grad", 100, dlam=15000, cpp=1000000)),
    Workload("rosen-grad", GRAD, "gradient of Rosenbrock n=1000 (ADOL-C: retaping each call / "
             "replaying one tape; PyTorch: scalar autograd)",
             _rosen("grad", 1000, dlam=1800, cpp=100000, adolc=1000, **{"adolc-replay": 3000},
                    torch=10),
             peer_targets={"adolc": 1.0, "torch": 0.01}),
    Workload("rosen-grad-10k", GRAD, "gradient of Rosenbrock n=10000",
             _rosen("grad", 10000, dlam=150, cpp=10000)),
    # The same function on a vector read with vector-ref in a loop (the C++ and Lua
    # peers index an array in both rows): the cost of a gradient of indexing code.
    Workload("rosen-vec-f", GRAD, "extended Rosenbrock n=1000 on a vector read with vector-ref, plain evaluation",
             {"dlam": Rep("rosenbrock-vec", "f", 1000, 6000), "cpp": Rep("rosenbrock", "f", 1000, 100000),
              "lua": Rep("rosenbrock", "f", 1000, 6000)}),
    Workload("rosen-vec-grad", GRAD, "gradient of the vector Rosenbrock n=1000 (ADOL-C: retaping each call)",
             {"dlam": Rep("rosenbrock-vec", "grad", 1000, 1200), "cpp": Rep("rosenbrock", "grad", 1000, 100000),
              "adolc": Rep("rosenbrock", "tape", 1000, 1000)}),
    Workload("rosen-hvp", GRAD, "Hessian-vector product of Rosenbrock n=100: dlam reverse over "
             "reverse, PyTorch create_graph=True, ADOL-C hess_vec on one tape, C++ by hand",
             _rosen("hvp", 100, dlam=4000, cpp=1000000,
                    **{"adolc-replay": Rep("rosenbrock", "hvp", 100, 10000)}, torch=100)),
    Workload("rosen-hvp-fr", GRAD, "Hessian-vector product of Rosenbrock n=100 by the library's "
             "hvp, forward over reverse (C++: the hand gradient on dual numbers; PyTorch: "
             "double backward, as in rosen-hvp)",
             _rosen("hvp-fr", 100, {"cpp": "hvp-dual", "torch": "hvp"},
                    dlam=4000, cpp=1000000, torch=100)),
    Workload("rosen-jvp", GRAD, "directional derivative of Rosenbrock n=1000 by forward mode "
             "(jvp-forward): the cost of bundles (C++: dual numbers; PyTorch: forward_ad)",
             _rosen("jvp", 1000, dlam=1800, cpp=100000, torch=10)),
    Workload("rosen-hvp-fr-1000", GRAD, "Hessian-vector product of Rosenbrock n=1000 by the "
             "library's hvp, forward over reverse (peers as in rosen-hvp-fr)",
             _rosen("hvp-fr", 1000, {"cpp": "hvp-dual", "torch": "hvp"},
                    dlam=400, cpp=100000, torch=10)),
    Workload("rosen-hessian", GRAD, "Hessian of Rosenbrock n=100 by the library's hessian "
             "(forward over reverse: n Hessian-vector products; C++: the tridiagonal formulas "
             "into a dense matrix; PyTorch: n backward passes over the gradient's graph)",
             _rosen("hessian", 100, dlam=60, cpp=100000, torch=3)),
    # A real function of one real (bench/dlam/logistic.dlam: the logistic map iterated
    # 1000 times): its derivative by forward mode and by reverse mode. C++
    # (bench/peers/logistic.cpp): by hand, on dual numbers, and with a hand tape.
    Workload("logistic-f", GRAD, "logistic map x <- r x (1 - x), 1000 steps, as a function of r: "
             "plain evaluation",
             _impls("logistic", "f", 1000, dlam=20000, cpp=1000000, torch=20)),
    Workload("logistic-derivative", GRAD, "d/dr of the logistic map by `derivative` (forward "
             "mode; C++: a dual number; PyTorch: forward_ad)",
             _impls("logistic", "derivative", 1000, dlam=8000, cpp=1000000, torch=10)),
    Workload("logistic-grad", GRAD, "d/dr of the logistic map by `gradient` (reverse mode; C++: "
             "a hand tape; PyTorch: autograd.grad)",
             _impls("logistic", "grad", 1000, dlam=3000, cpp=1000000, torch=10)),
    # memory: one derivative of 10^6 and of 10^7 steps (peak RSS; time incl. start-up):
    # forward mode keeps no tape (TAPE_CHECKS). (Below 10^6 steps the peak still grows
    # as the collector's young space fills with dead bundles: 5.1 MB at 10^3, 8.6 MB at
    # 10^5, 9.3 MB from 10^6 on; a gradient of 10^5 steps peaks at 38 MB.)
    Workload("logistic-derivative-1e6", GRAD, "memory: one derivative of the logistic map, "
             "10^6 steps (wall incl. start-up)",
             {"dlam": Rep("logistic", "derivative", 10**6, 1, base=None)}),
    Workload("logistic-derivative-1e7", GRAD, "memory: one derivative of the logistic map, "
             "10^7 steps (wall incl. start-up)",
             {"dlam": Rep("logistic", "derivative", 10**7, 1, base=None)}),
    Workload("mlp-f", GRAD, "MLP 2-16-16-1 tanh, MSE over 256 samples, scalar ops: evaluation",
             _mlp("f", dlam=90, cpp=2000, lua=100, torch=3)),
    Workload("mlp-grad", GRAD, "MLP loss: gradient w.r.t. the 337 weights",
             _mlp("grad", dlam=18, cpp=1500, adolc=30, **{"adolc-replay": 60}, torch=2),
             peer_targets={"adolc": 5.0, "torch": 0.01}),
    # The same MLP written with arrays (bench/dlam/mlp-array.dlam), against PyTorch
    # vectorized (whole-tensor matmul and tanh, bench/python/mlp_array_torch.py) and the
    # hand gradient in C++, with the same data and loss (the checksums agree).
    Workload("mlp-array-f", GRAD, "MLP 2-16-16-1 written with arrays (dot, tanh over whole arrays): "
             "evaluation; PyTorch vectorized",
             {"dlam": Rep("mlp-array", "f", 0, 3000), "cpp": Rep("mlp", "f", 0, 2000),
              "torch": Rep("mlp_array", "f", 0, 3000)}),
    Workload("mlp-array-grad", GRAD, "MLP with arrays: gradient w.r.t. the three weight arrays; "
             "PyTorch vectorized autograd",
             {"dlam": Rep("mlp-array", "grad", 0, 1500), "cpp": Rep("mlp", "grad", 0, 1500),
              "torch": Rep("mlp_array", "grad", 0, 1500)},
             peer_targets={"torch": 1.0}),
    # An MLP of MNIST's shape, 784-128-10 over a batch of 128 (tanh, softmax
    # cross-entropy written with logsumexp; bench/dlam/mlp-784.dlam): the matrix-matrix
    # products dominate. The C++ peer (bench/peers/mlp784.cpp) backpropagates by hand
    # with the same serial OpenBLAS dgemm as dlam's `dot`; PyTorch is vectorized.
    Workload("mlp-784-f", GRAD, "MLP 784-128-10, batch 128, tanh, softmax cross-entropy (logsumexp), "
             "arrays: evaluation",
             {"dlam": Rep("mlp-784", "f", 0, 1000), "cpp": Rep("mlp784", "f", 0, 1000),
              "torch": Rep("mlp_784", "f", 0, 1000, runs=3)}),
    Workload("mlp-784-grad", GRAD, "MLP 784-128-10: gradient w.r.t. W1, b1, W2, b2 (101770 weights)",
             {"dlam": Rep("mlp-784", "grad", 0, 400), "cpp": Rep("mlp784", "grad", 0, 600),
              "torch": Rep("mlp_784", "grad", 0, 400, runs=3)},
             peer_targets={"torch": 1.2}),
    # Rosenbrock over one 10^6-element array with array operations (slice, *, -, sum;
    # bench/dlam/rosen-array.dlam), against the fused hand-written loops of
    # bench/peers/rosenbrock.cpp, the same array operations in NumPy-style C++ (a loop
    # and a new temporary per operation: bench/peers/rosen_array.cpp) and PyTorch
    # vectorized: time and peak RSS. Issue #29: the gradient within 2x NumPy-style C++.
    Workload("rosen-array-1e6-f", GRAD, "Rosenbrock n=10^6 with array operations: evaluation",
             {"dlam": Rep("rosen-array", "f", 10**6, 40), "cpp": Rep("rosenbrock", "f", 10**6, 200),
              "cpp-np": Rep("rosen_array", "f", 10**6, 100),
              "torch": Rep("rosen_array", "f", 10**6, 60, runs=3)}),
    Workload("rosen-array-1e6-grad", GRAD, "Rosenbrock n=10^6 with array operations: gradient",
             {"dlam": Rep("rosen-array", "grad", 10**6, 30), "cpp": Rep("rosenbrock", "grad", 10**6, 300),
              "cpp-np": Rep("rosen_array", "grad", 10**6, 60),
              "torch": Rep("rosen_array", "grad", 10**6, 30, runs=3)},
             peer_targets={"cpp-np": 2.0}),
    Workload("rosen-f-1e5", GRAD, "memory: one evaluation of Rosenbrock n=10^5 (wall incl. start-up)",
             _rosen("f", 100000, dlam=Rep("rosenbrock", "f", 100000, 1, base=None),
                    cpp=Rep("rosenbrock", "f", 100000, 1, base=None),
                    lua=Rep("rosenbrock", "f", 100000, 1, base=None))),
    Workload("rosen-grad-1e5", GRAD, "memory: one gradient of Rosenbrock n=10^5 (wall incl. start-up)",
             _rosen("grad", 100000, dlam=Rep("rosenbrock", "grad", 100000, 1, base=None),
                    cpp=Rep("rosenbrock", "grad", 100000, 1, base=None),
                    adolc=Rep("rosenbrock", "tape", 100000, 1, base=None),
                    torch=Rep("rosenbrock", "grad", 100000, 1, base=None, runs=1))),
    Workload("rosen-grad-growth", GRAD, "memory growth: 1000 vs 100 gradients of Rosenbrock n=1000 "
             "in one process",
             _rosen("grad", 1000, dlam=Rep("rosenbrock", "grad", 1000, 1000, base=100, scale=False),
                    adolc=Rep("rosenbrock", "tape", 1000, 1000, base=100, scale=False))),
    # The row above includes the warm-up of the collector's policy (a full collection is
    # due when the old bytes have doubled: the first comes after some hundreds of
    # gradients, and the peak heap grows until then); this one starts after it.
    Workload("rosen-grad-growth-warm", GRAD, "memory growth after warm-up: 3000 vs 1000 gradients "
             "of Rosenbrock n=1000 in one process",
             _rosen("grad", 1000, dlam=Rep("rosenbrock", "grad", 1000, 3000, base=1000, scale=False),
                    adolc=Rep("rosenbrock", "tape", 1000, 3000, base=1000, scale=False))),
]

# Group `nested`: the published nested-derivative benchmarks of Siskind and
# Pearlmutter (tests/lang/ad/inc/argmin.dlam), whole programs, one run each:
# gradient descent whose objective takes gradients (particle: d/dw of an ODE
# solution whose every step is a gradient; saddle: min of a max).
NESTED = "nested"
WORKLOADS += [
    Workload("saddle", NESTED, "saddle point of x1²+y1²-x2²-y2², argmin of argmax "
             "(PyTorch: create_graph=True)",
             {"dlam": Rep("nested", "saddle", 0, 1, base=None),
              "torch": Rep("nested", "saddle", 0, 1, base=None, runs=1)}),
    Workload("particle", NESTED, "particle: argmin over w of an Euler solution taking a "
             "gradient per step",
             {"dlam": Rep("nested", "particle", 0, 1, base=None, runs=3),
              "torch": Rep("nested", "particle", 0, 1, base=None, runs=1)}),
]
# The same two with the mode of each level chosen (tests/lang/ad/inc/argmin_modes.dlam):
# XY = the outer optimiser's gradient, then the inner one's, F forward (a jvp per
# coordinate) or R reverse.
WORKLOADS += [
    Workload(f"{prog}-{mode}", NESTED, f"{prog}, outer gradient by {kinds[mode[0]]}, inner by "
             f"{kinds[mode[1]]}",
             {"dlam": Rep("nested", f"{prog}-{mode}", 0, 1, base=None, runs=3)})
    for kinds in [{"F": "forward mode", "R": "reverse mode"}]
    for prog in ("particle", "saddle") for mode in ("FF", "FR", "RF", "RR")
]


@dataclass
class CostRatio:
    """time per op of `num` / time per op of `den`, per peer (the cheap-gradient ratio)."""
    label: str
    num: str
    den: str
    target: Optional[float] = None
    # the denominator of a peer without its own plain evaluation
    den_peer: dict = field(default_factory=lambda: {"adolc": "cpp", "adolc-replay": "cpp"})
    den_times: int = 1  # the denominator is this many operations of `den`


@dataclass
class Flatness:
    """cost ratio `a` / cost ratio `b` (how the ratio grows with n)."""
    label: str
    a: str
    b: str
    target: Optional[float] = None


COST_RATIOS = [
    CostRatio("rosen grad/f, n=100", "rosen-grad-100", "rosen-f-100"),
    CostRatio("rosen grad/f, n=1000", "rosen-grad", "rosen-f", target=4.0),
    CostRatio("rosen grad/f, n=10000", "rosen-grad-10k", "rosen-f-10k"),
    Flatness("  growth of grad/f, n=100 -> 1000", "rosen grad/f, n=1000", "rosen grad/f, n=100",
             target=1.2),
    Flatness("  growth of grad/f, n=100 -> 10000", "rosen grad/f, n=10000", "rosen grad/f, n=100",
             target=1.2),
    CostRatio("rosen-vec grad/f, n=1000", "rosen-vec-grad", "rosen-vec-f"),
    CostRatio("mlp grad/f", "mlp-grad", "mlp-f", target=4.0),
    CostRatio("mlp-array grad/f", "mlp-array-grad", "mlp-array-f"),
    CostRatio("mlp-784 grad/f", "mlp-784-grad", "mlp-784-f"),
    CostRatio("rosen-array grad/f, n=10^6", "rosen-array-1e6-grad", "rosen-array-1e6-f",
              target=3.0),
    CostRatio("rosen hvp/f, n=100", "rosen-hvp", "rosen-f-100", target=12.0),
    # issue #30's targets: hvp (forward over reverse) <= 6x the function at n = 100 and
    # 1000, the Hessian <= 1.2x n hvps, a derivative of R -> R <= 3x the function, a
    # nested benchmark with both levels forward faster than with both reverse
    CostRatio("rosen hvp-fr/f, n=100", "rosen-hvp-fr", "rosen-f-100", target=6.0),
    CostRatio("rosen hvp-fr/f, n=1000", "rosen-hvp-fr-1000", "rosen-f", target=6.0),
    CostRatio("rosen hessian / (n hvp-fr), n=100", "rosen-hessian", "rosen-hvp-fr", target=1.2,
              den_times=100),
    CostRatio("rosen jvp/f, n=1000", "rosen-jvp", "rosen-f", target=3.0),
    CostRatio("logistic derivative/f", "logistic-derivative", "logistic-f", target=3.0),
    CostRatio("logistic grad/f", "logistic-grad", "logistic-f"),
    CostRatio("particle FF/RR", "particle-FF", "particle-RR", target=1.0),
    CostRatio("saddle FF/RR", "saddle-FF", "saddle-RR", target=1.0),
]
# dlam peak RSS after REPS vs after `base` repetitions in one process: at most this ratio
GROWTH_CHECKS = [("rosen-grad-growth", 1.05), ("rosen-grad-growth-warm", 1.05)]
# dlam peak RSS of one workload vs another (the same computation, more operations): at
# most this ratio. Issue #30: a forward pass allocates no tape.
TAPE_CHECKS = [("forward pass, 10^7 vs 10^6 steps", "logistic-derivative-1e7",
                "logistic-derivative-1e6", 1.05)]
# With the first of them, dlam's live heap after a full collection, after `base` and
# after REPS gradients (MODE live): what repeated gradients keep, without the garbage
# the collector's pace lets accumulate (which peak RSS counts). It must not grow.
LIVE_CHECK = "rosen-grad-growth"


def live_heap_line(opts, w) -> Optional[str]:
    """The dlam line of the live-heap check for workload w (None if it cannot run)."""
    rep = w.impls.get("dlam")
    if not isinstance(rep, Rep) or rep.base is None:
        return None
    live = []
    for reps in (rep.base, rep.eff_reps(opts)):
        try:
            out = subprocess.run(_dlam_rep(opts, rep.prog, "live", rep.n, reps), capture_output=True,
                                 text=True, timeout=600, stdin=subprocess.DEVNULL)
            live.append(int(out.stdout.split()[-1]) if out.returncode == 0 else None)
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            live.append(None)
    if None in live:
        return "- dlam: live heap after a full collection: could not be measured"
    grown = live[1] - live[0]
    return (f"- dlam: live heap after a full collection after {rep.base} gradients {live[0]} bytes, "
            f"after {rep.eff_reps(opts)}: {live[1]} bytes ({grown:+d} bytes; target: no growth): "
            f"{'PASS' if grown <= 0 else 'MISS'}")


# --------------------------------------------------------------------------
# Running one process
# --------------------------------------------------------------------------

@dataclass
class Run:
    ok: bool
    wall_ms: float
    maxrss_kb: int
    rc: int
    out: str
    err: str
    cpu_ms: float = float("nan")   # user + system CPU time of the child

    def time_ms(self, opts) -> float:
        return self.cpu_ms if opts.cpu_time else self.wall_ms


# Why a C launcher: on Linux, exec records the pre-exec address space's RSS
# high-water mark in the child's ru_maxrss, so a child forked from this Python
# process reports at least Python's own RSS (10-20 MB) however small it is.
# The launcher (a ~1 MB process) forks, execs the command, wait4()s it and
# reports wall time and ru_maxrss.  It is compiled once with `cc` into a cache
# directory; without a C compiler we fall back to os.wait4 here, and say so.
LAUNCHER_C = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>
int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: launcher REPORT CMD [ARG...]\n"); return 125; }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) { perror("fork"); return 125; }
  if (pid == 0) { execvp(argv[2], argv + 2); perror(argv[2]); _exit(127); }
  int st; struct rusage ru;
  if (wait4(pid, &st, 0, &ru) < 0) { perror("wait4"); return 125; }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long long ns = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  FILE *f = fopen(argv[1], "w");
  if (!f) { perror(argv[1]); return 125; }
  long long cpu = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL
                  + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
  fprintf(f, "%d %lld %ld %lld\n", code, ns, ru.ru_maxrss, cpu);
  fclose(f);
  return 0;
}
"""


def build_launcher() -> tuple:
    """Returns (path or None, note)."""
    import hashlib
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return None, "no C compiler: peak RSS from os.wait4 includes this Python's RSS as a floor"
    tag = hashlib.sha1(LAUNCHER_C.encode()).hexdigest()[:12]
    exe = os.path.join(cache_dir(), f"launcher-{tag}")
    if os.access(exe, os.X_OK):
        return exe, ""
    src = exe + ".c"
    with open(src, "w") as f:
        f.write(LAUNCHER_C)
    tmp = exe + f".tmp{os.getpid()}"
    r = subprocess.run([cc, "-O2", "-o", tmp, src], capture_output=True, text=True)
    if r.returncode != 0:
        return None, "launcher did not compile (" + first_line(r.stderr) + "); using os.wait4"
    os.replace(tmp, exe)
    return exe, ""


def run_once(argv: list, timeout: float, cpu: Optional[int], launcher: Optional[str]) -> Run:
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe, \
            tempfile.NamedTemporaryFile("r", suffix=".rep") as rep:
        pre = None
        if cpu is not None:
            def pre():
                os.sched_setaffinity(0, {cpu})
        full = [launcher, rep.name] + list(argv) if launcher else list(argv)
        try:
            t0 = time.perf_counter()
            # own session, so a timeout can kill the launcher and its child together
            p = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                                 preexec_fn=pre, cwd=BENCH, start_new_session=True)
        except OSError as e:
            return Run(False, float("nan"), 0, -1, "", f"cannot start: {e}")
        timed_out = []

        def kill():
            timed_out.append(True)
            try:
                os.killpg(p.pid, 9)
            except OSError:
                pass
        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
            t1 = time.perf_counter()
        finally:
            timer.cancel()
        rc = os.waitstatus_to_exitcode(status)
        p.returncode = rc  # we reaped it; keep Popen from waiting again
        wall_ms, maxrss = (t1 - t0) * 1000.0, ru.ru_maxrss
        cpu_ms = (ru.ru_utime + ru.ru_stime) * 1000.0
        fo.seek(0)
        fe.seek(0)
        out = fo.read().decode("utf-8", "replace")
        err = fe.read().decode("utf-8", "replace")
        if launcher and not timed_out:
            fields = rep.read().split()
            if rc != 0 or len(fields) != 4:
                return Run(False, float("nan"), 0, rc, out, "launcher failed: " + err)
            rc, wall_ms, maxrss = int(fields[0]), int(fields[1]) / 1e6, int(fields[2])
            cpu_ms = int(fields[3]) / 1e6
        if timed_out:
            err = f"timed out after {timeout:g} s\n" + err
        return Run(rc == 0 and not timed_out, wall_ms, maxrss, rc, out, err, cpu_ms)


# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------

@dataclass
class Result:
    peer: str
    status: str = "ok"       # ok | unavailable | failed | wrong
    note: str = ""
    times: list = field(default_factory=list)
    rss: list = field(default_factory=list)
    output: str = ""

    @property
    def ok(self):
        return self.status == "ok"

    @property
    def median_ms(self):
        return statistics.median(self.times) if self.ok and self.times else None

    @property
    def peak_kb(self):
        return max(self.rss) if self.ok and self.rss else None


def impl_argv(opts, w: Workload, key: str) -> list:
    impl = w.impls[key]
    if callable(impl):
        return impl(opts)
    return PEER[key].argv(opts, os.path.join(BENCH, impl))


def first_line(s: str, n=70) -> str:
    for line in s.splitlines():
        if line.strip():
            return line.strip()[:n]
    return ""


def bench_workload(opts, w: Workload, unavailable: dict) -> dict:
    keys = [k for k in PEER if k in w.impls]
    results = {k: Result(k) for k in keys}
    live = []
    for k in keys:
        if k in unavailable:
            results[k].status, results[k].note = "unavailable", unavailable[k]
        else:
            live.append(k)
    runs = max(1, opts.runs * w.runs_factor)
    warm = 0 if opts.quick else 1
    for i in range(warm + runs):
        for k in list(live):
            r = run_once(impl_argv(opts, w, k), opts.timeout, opts.cpu, opts.launcher)
            res = results[k]
            if not r.ok:
                res.status = "failed"
                why = f"exit {r.rc}" if r.rc >= 0 else f"signal {-r.rc}"
                msg = first_line(r.err) or first_line(r.out)
                res.note = why + (f": {msg}" if msg else "")
                live.remove(k)
                continue
            out = r.out.strip()
            expect = STARTUP_EXPECT.get(k) if w.name == "startup" else w.expect
            if expect is not None and out != expect:
                res.status = "wrong"
                res.note = f"printed {first_line(out, 40)!r}, expected {expect!r}"
                live.remove(k)
                continue
            res.output = out
            if i >= warm:
                res.times.append(r.time_ms(opts))
                res.rss.append(r.maxrss_kb)
    if w.expect is None and w.name != "startup":
        outs = {k: r.output for k, r in results.items() if r.ok}
        if len(set(outs.values())) > 1:
            for k, r in results.items():
                if r.ok:
                    r.status, r.note = "wrong", f"outputs disagree: {r.output[:30]!r}"
    return results


def is_rep(w: Workload) -> bool:
    return any(isinstance(v, Rep) for v in w.impls.values())


@dataclass
class RepResult(Result):
    reps: int = 0
    base: Optional[int] = None
    base_times: list = field(default_factory=list)
    base_rss: list = field(default_factory=list)

    @property
    def per_op_ms(self):
        """(median wall(REPS) - median wall(base)) / (REPS - base), or wall/REPS without base."""
        if not self.ok or not self.times:
            return None
        t = statistics.median(self.times)
        if self.base is None:
            return t / self.reps
        if not self.base_times:
            return None
        return (t - statistics.median(self.base_times)) / (self.reps - self.base)

    @property
    def base_peak_kb(self):
        return max(self.base_rss) if self.ok and self.base_rss else None


def _numbers(s: str):
    try:
        return [float(t) for t in s.split()]
    except ValueError:
        return None


def outputs_agree(a: str, b: str, rtol: float) -> bool:
    if a == b:
        return True
    x, y = _numbers(a), _numbers(b)
    if x is None or y is None or len(x) != len(y):
        return False
    return all(abs(p - q) <= rtol * max(abs(p), abs(q)) for p, q in zip(x, y))


class _RepBench:
    """The runs of one Rep workload, taken a round at a time (see bench_rep_workloads)."""

    def __init__(self, opts, w: Workload, unavailable: dict):
        self.opts, self.w = opts, w
        self.results = {}
        self.live = []
        for k in [k for k in PEER if k in w.impls]:
            rep = w.impls[k]
            res = RepResult(k, reps=rep.eff_reps(opts), base=rep.base)
            self.results[k] = res
            if k in unavailable:
                res.status, res.note = "unavailable", unavailable[k]
            else:
                self.live.append(k)

    def argv(self, k, reps):
        rep = self.w.impls[k]
        return PEER[k].rep_argv(self.opts, rep.prog, rep.mode, rep.n, reps)

    def one(self, k, reps):
        """Runs one command; returns its Run, or None after marking the result failed/wrong."""
        opts, res = self.opts, self.results[k]
        r = run_once(self.argv(k, reps), opts.timeout, opts.cpu, opts.launcher)
        if not r.ok:
            res.status = "failed"
            why = f"exit {r.rc}" if r.rc >= 0 else f"signal {-r.rc}"
            msg = first_line(r.err) or first_line(r.out)
            res.note = why + (f": {msg}" if msg else "") + f"  [{shlex.join(self.argv(k, reps))}]"
            return None
        out = r.out.strip()
        if res.output and not outputs_agree(out, res.output, GRAD_RTOL):
            res.status = "wrong"
            res.note = f"printed {first_line(out, 40)!r} after {reps} reps, {res.output!r} before"
            return None
        res.output = res.output or out
        return r

    def warm_up(self):
        """One base run each (file cache, shared libraries), skipped for base-less rows."""
        for k in list(self.live):
            if self.w.impls[k].base is not None and self.one(k, self.w.impls[k].base) is None:
                self.live.remove(k)

    def round(self, i):
        """The i-th timed run of every implementation still running."""
        for k in list(self.live):
            rep, res = self.w.impls[k], self.results[k]
            if rep.runs is not None and i >= rep.runs:
                continue
            if rep.base is not None:
                rb = self.one(k, rep.base)
                if rb is None:
                    self.live.remove(k)
                    continue
                res.base_times.append(rb.time_ms(self.opts))
                res.base_rss.append(rb.maxrss_kb)
            r = self.one(k, res.reps)
            if r is None:
                self.live.remove(k)
                continue
            res.times.append(r.time_ms(self.opts))
            res.rss.append(r.maxrss_kb)

    def finish(self) -> dict:
        """All implementations must agree with the reference (first of CHECK_ORDER that ran)."""
        results = self.results
        ok = [k for k in CHECK_ORDER if k in results and results[k].ok]
        if ok:
            ref = results[ok[0]]
            for k in ok[1:]:
                r = results[k]
                if not outputs_agree(r.output, ref.output, GRAD_RTOL):
                    r.status = "wrong"
                    r.note = (f"printed {r.output[:40]!r}, {PEER[ref.peer].label} printed "
                              f"{ref.output[:40]!r}")
        return results


def bench_rep_workloads(opts, ws: list, unavailable: dict) -> dict:
    """Times the Rep workloads `ws` (one group) in rounds: each round runs every
    workload's every implementation once, so that a drift of the machine's speed
    (tens of percent over minutes on a shared host) falls on the numerator and the
    denominator of a cost ratio alike, as it does on the peers of one workload."""
    benches = [_RepBench(opts, w, unavailable) for w in ws]
    if not opts.quick:
        for b in benches:
            b.warm_up()
    for i in range(opts.runs):
        for b in benches:
            b.round(i)
    return {b.w.name: b.finish() for b in benches}


# --------------------------------------------------------------------------
# Table printing
# --------------------------------------------------------------------------

def fmt_ms(v):
    if v is None:
        return "—"
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def fmt_mb(kb):
    return "—" if kb is None else f"{kb / 1024:.1f}"


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.2f}×"


def cell(res: Result, val: str) -> str:
    if res.status == "ok":
        return val
    if res.status == "unavailable":
        return "n/a"
    return res.status.upper()  # FAILED / WRONG


def print_table(headers, rows):
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    def line(cells):
        return "| " + " | ".join(str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i])
                                 for i, c in enumerate(cells)) + " |"
    print(line(headers))
    print("|" + "|".join(("-" * (w + 1) + ":") if i else (":" + "-" * (w + 1))
                         for i, w in enumerate(widths)) + "|")
    for r in rows:
        print(line(r))


def fmt_dur(ms):
    if ms is None:
        return "—"
    if ms <= 0:
        return "<noise"
    if ms < 1e-3:
        return f"{ms * 1e6:.0f} ns"
    if ms < 1:
        return f"{ms * 1e3:.3g} µs"
    if ms < 1000:
        return f"{ms:.3g} ms"
    return f"{ms / 1000:.3g} s"


def fmt_x(v):
    if v is None:
        return "—"
    if v >= 100:
        return f"{v:.0f}×"
    return f"{v:.2f}×" if v >= 0.1 else f"{v:.2g}×"


# column order of the gradient tables
GRAD_COLUMNS = ["dlam", "cpp", "cpp-np", "adolc", "adolc-replay", "torch", "lua", "luajit"]


def report_rep_group(opts, g, ws, all_results):
    cols = [PEER[k] for k in GRAD_COLUMNS if any(k in w.impls for w in ws)]
    s, others = cols[0], cols[1:]   # dlam first
    headers = ["workload"] + [p.label for p in cols] + [f"{s.label}/{p.label}" for p in others]

    def name(w):
        return w.name + (" †" if all(r.base is None for r in w.impls.values()) else "")

    rows, mrows = [], []
    for w in ws:
        res = all_results[w.name]
        row, mrow = [name(w)], [w.name]
        for p in cols:
            r = res.get(p.key)
            row.append(cell(r, fmt_dur(r.per_op_ms)) if r else "")
            mrow.append(cell(r, fmt_mb(r.peak_kb)) if r else "")
        rs = res.get(s.key)
        for p in others:
            rp = res.get(p.key)
            if rs is None or rp is None:
                row.append("")
                mrow.append("")
                continue
            a, b = rs.per_op_ms, rp.per_op_ms
            row.append(fmt_x(a / b) if a is not None and b is not None and a > 0 and b > 0 else "—")
            mrow.append(fmt_ratio(rs.peak_kb, rp.peak_kb))
        rows.append(row)
        mrows.append(mrow)
    clock = "cpu" if opts.cpu_time else "wall"
    print(f"\n### time ({g}): per operation = (median {clock}(REPS) - median {clock}(base)) / (REPS - base), "
          f"median of {opts.runs} run(s) (PyTorch: at most 3)" + ("" if opts.quick else ", after 1 warm-up")
          + "\n")
    print_table(headers, rows)
    print(f"\n† one run of one operation: {'CPU' if opts.cpu_time else 'wall'} time including start-up "
          "(memory rows)")

    print(f"\n### peak memory ({g}): max RSS (MB) of the REPS runs\n")
    print_table(["peak RSS"] + headers[1:], mrows)

    # cost ratios
    per = {}
    crow = []
    rpeers = [p for p in cols if p.key not in ("lua", "luajit")]
    for c in COST_RATIOS:
        vals = {}
        if isinstance(c, Flatness):
            for p in rpeers:
                a, b = per.get((c.a, p.key)), per.get((c.b, p.key))
                vals[p.key] = a / b if a and b else None
        else:
            # (each ratio belongs to the group of its workloads)
            if c.num not in all_results or c.den not in all_results or not any(w.name == c.num for w in ws):
                continue
            for p in rpeers:
                rn = all_results[c.num].get(p.key)
                rd = all_results[c.den].get(c.den_peer.get(p.key, p.key))
                a = rn.per_op_ms if rn else None
                b = rd.per_op_ms if rd else None
                vals[p.key] = (a / (b * c.den_times) if a is not None and b is not None and a > 0
                               and b > 0 else None)
        for k, v in vals.items():
            per[(c.label, k)] = v
        if all(v is None for v in vals.values()):
            continue
        d = vals.get("dlam")
        verdict = "" if c.target is None else ("—" if d is None else ("PASS" if d <= c.target else "MISS"))
        crow.append([c.label] + [fmt_x(vals.get(p.key)) if p.key in vals else "" for p in rpeers]
                    + ["" if c.target is None else f"≤ {c.target:g}×", verdict])
    if crow:
        print(f"\n### cost ratios ({g}): time per op of the gradient / of the plain evaluation "
              "(ADOL-C: over the C++ evaluation)\n")
        print_table(["ratio"] + [p.label for p in rpeers] + ["target", "dlam"], crow)

    lines = []
    for wname, limit in GROWTH_CHECKS:
        if wname not in all_results or not any(x.name == wname for x in ws):
            continue
        for k, r in all_results[wname].items():
            if not r.ok or not r.peak_kb or not r.base_peak_kb:
                continue
            ratio = r.peak_kb / r.base_peak_kb
            verdict = ("PASS" if ratio <= limit else "MISS") if k == "dlam" else "(reference)"
            lines.append(f"- {PEER[k].label}: peak RSS after {r.base} operations "
                         f"{fmt_mb(r.base_peak_kb)} MB, after {r.reps}: {fmt_mb(r.peak_kb)} MB "
                         f"({ratio:.2f}×; target ≤ {limit:g}×): {verdict}")
            if k == "dlam" and wname == LIVE_CHECK:
                line = live_heap_line(opts, next(x for x in ws if x.name == wname))
                if line:
                    lines.append(line)
    for label, big, small, limit in TAPE_CHECKS:
        if not any(x.name == big for x in ws):
            continue
        rb, rs = all_results.get(big, {}).get("dlam"), all_results.get(small, {}).get("dlam")
        if not (rb and rs and rb.ok and rs.ok and rb.peak_kb and rs.peak_kb):
            continue
        ratio = rb.peak_kb / rs.peak_kb
        lines.append(f"- dlam, {label}: peak RSS {fmt_mb(rs.peak_kb)} MB -> {fmt_mb(rb.peak_kb)} MB "
                     f"({ratio:.2f}×; target ≤ {limit:g}×): {'PASS' if ratio <= limit else 'MISS'}")
    if lines:
        names = [n for n, _ in GROWTH_CHECKS] + [big for _, big, _, _ in TAPE_CHECKS]
        names = [n for n in names if any(x.name == n for x in ws)]
        print(f"\n### memory growth ({g}): {', '.join(names)}\n")
        print("\n".join(lines))


def report(opts, selected, all_results):
    groups = []
    for w in selected:
        if w.group not in groups:
            groups.append(w.group)
    notes = []
    for g in groups:
        ws = [w for w in selected if w.group == g]
        if any(is_rep(w) for w in ws):
            report_rep_group(opts, g, ws, all_results)
            continue
        subj = [p for p in PEERS if p.subject and any(p.key in w.impls for w in ws)]
        others = [p for p in PEERS if not p.subject and any(p.key in w.impls for w in ws)]
        s = subj[0] if subj else None
        headers = ["workload"] + [f"{p.label} ms" for p in subj + others]
        if s:
            headers += [f"{s.label}/{p.label}" for p in others]
        rows = []
        for w in ws:
            res = all_results[w.name]
            name = w.name + (" (ref)" if w.reference else "")
            row = [name]
            for p in subj + others:
                r = res.get(p.key)
                row.append(cell(r, fmt_ms(r.median_ms)) if r else "")
            if s:
                rs = res.get(s.key)
                for p in others:
                    rp = res.get(p.key)
                    if rs is None or rp is None or (w.ratios_vs and p.key not in w.ratios_vs):
                        row.append("")
                    else:
                        row.append(fmt_ratio(rs.median_ms, rp.median_ms))
            rows.append(row)
        if s and others:
            # Geometric mean of dlam/peer over the workloads both ran (not the references).
            row = ["geometric mean"] + ["" for _ in subj + others]
            for p in others:
                logs = []
                for w in ws:
                    rs, rp = all_results[w.name].get(s.key), all_results[w.name].get(p.key)
                    if (not w.reference and rs and rp and rs.ok and rp.ok
                            and rs.median_ms > 0 and rp.median_ms > 0
                            and not (w.ratios_vs and p.key not in w.ratios_vs)):
                        logs.append(math.log(rs.median_ms / rp.median_ms))
                row.append(f"{math.exp(sum(logs) / len(logs)):.2f}× ({len(logs)})" if logs else "")
            rows.append(row)
        print(f"\n### time ({g}): median {'CPU' if opts.cpu_time else 'wall'} ms of {opts.runs} run(s)"
              + ("" if opts.quick else ", after 1 warm-up") + "\n")
        print_table(headers, rows)

        # Peak memory: max RSS over the runs, per peer.
        mheaders = ["peak RSS"] + [f"{p.label} MB" for p in subj + others]
        if s:
            mheaders += [f"{s.label}/{p.label}" for p in others]
        mrows = []
        for w in ws:
            res = all_results[w.name]
            row = [w.name]
            for p in subj + others:
                r = res.get(p.key)
                row.append(cell(r, fmt_mb(r.peak_kb)) if r else "")
            if s:
                rs = res.get(s.key)
                for p in others:
                    rp = res.get(p.key)
                    row.append(fmt_ratio(rs.peak_kb, rp.peak_kb) if rs and rp else "")
            mrows.append(row)
        print(f"\n### peak memory ({g}): max RSS (MB)\n")
        print_table(mheaders, mrows)

    # Targets and problems.
    print("\n### targets\n")
    any_target = False
    for w in selected:
        res = all_results[w.name]
        d = res.get("dlam")
        if w.time_target_ms is not None:
            any_target = True
            v = d.median_ms if d else None
            verdict = "—" if v is None else ("PASS" if v < w.time_target_ms else "MISS")
            print(f"- {w.name}: dlam {fmt_ms(v)} ms, target < {w.time_target_ms:g} ms: {verdict}")
        if w.mem_target is not None:
            any_target = True
            l = res.get("lua")
            ratio = (d.peak_kb / l.peak_kb) if d and l and d.peak_kb and l.peak_kb else None
            verdict = "—" if ratio is None else ("PASS" if ratio <= w.mem_target else "MISS")
            rtxt = "—" if ratio is None else f"{ratio:.2f}×"
            print(f"- {w.name}: peak RSS dlam/lua5.4 = {rtxt} "
                  f"({fmt_mb(d.peak_kb if d else None)} / {fmt_mb(l.peak_kb if l else None)} MB), "
                  f"target ≤ {w.mem_target:g}×: {verdict}")
        for peer, most in w.peer_targets.items():
            any_target = True
            p = res.get(peer)
            a = d.per_op_ms if d else None
            b = p.per_op_ms if p else None
            ratio = a / b if a and b else None
            verdict = "—" if ratio is None else ("PASS" if ratio <= most else "MISS")
            rtxt = "—" if ratio is None else f"{ratio:.3g}×"
            print(f"- {w.name}: time per operation dlam/{PEER[peer].label} = {rtxt}, "
                  f"target ≤ {most:g}×: {verdict}")
    if not any_target:
        print("- (none in this selection)")
    problems = [(w.name, r) for w in selected for r in all_results[w.name].values() if not r.ok]
    if problems:
        print("\n### not measured\n")
        seen = set()
        for name, r in problems:
            if r.status == "unavailable":  # same reason for every workload: say it once
                if r.peer not in seen:
                    seen.add(r.peer)
                    print(f"- {PEER[r.peer].label}: unavailable: {r.note}")
            else:
                print(f"- {name} / {PEER[r.peer].label}: {r.status}: {r.note}")
    return problems


# --------------------------------------------------------------------------
# Embedding: the cost of crossing the host boundary (group "embed")
# --------------------------------------------------------------------------

EMBED_GROUP = "embed"
EMBED_GRADIENT_TARGET = 1.2   # dlam_value_and_gradient / (value-and-gradient f) in a dlam loop
EMBED_PYTHON_TARGET = 1.5     # a trivial function called from Python: dlam / lupa


def _embed_run(argv, timeout=600):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if out.returncode != 0:
        return None, first_line(out.stderr or out.stdout)
    return out.stdout, None


def report_embedding(opts):
    """Runs the embedding benchmarks (examples/embed/embed_overhead, python/bench_call.py)
    and prints their figures and targets."""
    import re
    print("\n### embedding\n")
    build = os.path.dirname(os.path.abspath(opts.dlam))
    prog = os.path.join(build, "embed", "examples", "embed_overhead")
    iterations = "20000" if opts.quick else "200000"
    out, why = _embed_run([prog, iterations]) if os.path.exists(prog) else (None, f"{prog} not built")
    if out is None:
        print(f"- dlam_value_and_gradient: not measured: {why}")
    else:
        api = re.search(r"dlam_value_and_gradient\s+(\d+) ns\s+\(([\d.]+)x", out)
        loop = re.search(r"in a loop\s+(\d+) ns", out)
        gcs = re.search(r"collections: (\d+) by dlam_value_and_gradient, (\d+) by the dlam loop",
                        out)
        if not (api and loop and gcs):
            print(f"- dlam_value_and_gradient: not measured: unexpected output {first_line(out)}")
        else:
            ratio = float(api.group(2))
            print(f"- dlam_value_and_gradient {api.group(1)} ns per call, (value-and-gradient f) in "
                  f"a dlam loop {loop.group(1)} ns: {ratio:.2f}x, target <= "
                  f"{EMBED_GRADIENT_TARGET:g}x: {'PASS' if ratio <= EMBED_GRADIENT_TARGET else 'MISS'}")
            print(f"- collections over {iterations} gradients: {gcs.group(1)} from C, "
                  f"{gcs.group(2)} in the dlam loop (target: no more from C): "
                  f"{'PASS' if int(gcs.group(1)) <= int(gcs.group(2)) + 1 else 'MISS'}")
    script = os.path.join(ROOT, "python", "bench_call.py")
    lib = os.path.join(build, "embed", "libdlam.so")
    env_argv = ["/usr/bin/python3", script, "--lib", lib] + (["--quick"] if opts.quick else [])
    out, why = _embed_run(env_argv) if os.path.exists(script) else (None, f"{script} missing")
    if out is None:
        print(f"- Python call overhead: not measured: {why}")
    else:
        for line in out.splitlines():
            m = re.match(r"ratio ([\d.]+) (\S+)", line)
            if m:
                ratio = float(m.group(1))
                print(f"- a trivial function called from Python: dlam/{m.group(2)} = {ratio:.2f}x, "
                      f"target <= {EMBED_PYTHON_TARGET:g}x: "
                      f"{'PASS' if ratio <= EMBED_PYTHON_TARGET else 'MISS'}")
            elif line.strip():
                print(f"  {line}")


# --------------------------------------------------------------------------

def family(name: str) -> Optional[str]:
    """The pair an evaluation/gradient row belongs to: "mlp-784" for "mlp-784-f" and
    "mlp-784-grad", so that `--only mlp-784` selects both (and their cost ratio)."""
    for suffix in ("-f", "-grad"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=None, help="timed runs per command (median; default 5, quick 1)")
    ap.add_argument("--only", action="append", default=[],
                    help="workload name(s), comma-separated or repeated; a group name; or NAME "
                         "for the rows NAME-f and NAME-grad")
    ap.add_argument("--dlam", default=os.path.join(ROOT, "build", "dlam"),
                    help="dlam binary (default: build/dlam in the repo root)")
    ap.add_argument("--quick", action="store_true", help="1 run, no warm-up (smoke test)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run before kill")
    ap.add_argument("--cpu", type=int, default=None, help="pin every child to this CPU")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time = the child's user+system CPU time instead of wall time "
                         "(steadier on a loaded machine; misses time spent waiting)")
    ap.add_argument("--json", metavar="FILE", help="also write raw results as JSON")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 if any available implementation failed or printed a wrong result")
    ap.add_argument("--no-launcher", action="store_true",
                    help="spawn directly from Python (peak RSS then has Python's RSS as a floor)")
    ap.add_argument("--list", action="store_true", help="list workloads and peers, then exit")
    opts = ap.parse_args(argv)
    if opts.runs is None:
        opts.runs = 1 if opts.quick else 5
    if opts.runs < 1:
        ap.error("--runs must be >= 1")
    opts.dlam = os.path.abspath(opts.dlam)

    if opts.list:
        for w in WORKLOADS:
            print(f"{w.name:10} [{w.group}] {w.desc}")
            if is_rep(w):
                for k, r in w.impls.items():
                    print(f"{'':12}{PEER[k].label}: {r.prog} {r.mode} N={r.n} REPS={r.reps}"
                          + (f" base={r.base}" if r.base is not None else "")
                          + (f" runs<={r.runs}" if r.runs else ""))
        print("peers: " + ", ".join(f"{p.key} ({p.label})" for p in PEERS))
        return 0

    names = [n for o in opts.only for n in o.split(",") if n]
    if names:
        known = ({w.name for w in WORKLOADS} | {w.group for w in WORKLOADS}
                 | {family(w.name) for w in WORKLOADS} | {EMBED_GROUP})
        bad = [n for n in names if n not in known]
        if bad:
            ap.error(f"unknown workload(s) {', '.join(bad)}; try --list")
        selected = [w for w in WORKLOADS
                    if w.name in names or w.group in names or family(w.name) in names]
    else:
        selected = WORKLOADS
    embedding = not names or EMBED_GROUP in names

    opts.launcher, launcher_note = (None, "--no-launcher") if opts.no_launcher \
        else build_launcher()
    if launcher_note:
        import resource
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        launcher_note += f"; peak RSS values below {own / 1024:.1f} MB are this Python's, not the child's"

    used = [p for p in PEERS if any(p.key in w.impls for w in selected)]
    unavailable = {}
    for p in used:
        why = p.available(opts)
        if why is None and p.prepare is not None:
            why = p.prepare(opts)
        if why is not None:
            unavailable[p.key] = why

    print(f"# dlam benchmarks — {time.strftime('%Y-%m-%d %H:%M')} on {os.uname().nodename}, "
          f"{os.cpu_count()} CPU(s)" + (f", pinned to CPU {opts.cpu}" if opts.cpu is not None else ""))
    if launcher_note:
        print(f"note: {launcher_note}")
    version = ""
    if "dlam" not in unavailable:
        try:
            v = subprocess.run([opts.dlam, "--version"], capture_output=True, text=True, timeout=5)
            version = first_line(v.stdout) if v.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired):
            pass
    print(f"dlam: {opts.dlam}" + (f" ({version})" if version else "")
          + (f"  [{unavailable['dlam']}]" if "dlam" in unavailable else ""))

    all_results = {}
    # The Rep workloads of a group run together, round by round (bench_rep_workloads).
    batches = []
    for w in selected:
        if is_rep(w) and batches and is_rep(batches[-1][0]) and batches[-1][0].group == w.group:
            batches[-1].append(w)
        else:
            batches.append([w])
    for batch in batches:
        print(f"  running {', '.join(w.name for w in batch)} ...", file=sys.stderr, flush=True)
        if is_rep(batch[0]):
            all_results.update(bench_rep_workloads(opts, batch, unavailable))
        else:
            all_results[batch[0].name] = bench_workload(opts, batch[0], unavailable)

    problems = report(opts, selected, all_results) if selected else []
    if embedding:
        report_embedding(opts)

    if opts.json:
        data = {"when": time.time(), "runs": opts.runs, "dlam": opts.dlam, "workloads": {
            name: {PEER[k].label: dict({"status": r.status, "note": r.note, "times_ms": r.times,
                                        "median_ms": r.median_ms, "maxrss_kb": r.rss},
                                       **({"reps": r.reps, "base": r.base, "base_times_ms": r.base_times,
                                           "base_maxrss_kb": r.base_rss, "per_op_ms": r.per_op_ms,
                                           "output": r.output}
                                          if isinstance(r, RepResult) else {}))
                   for k, r in res.items()}
            for name, res in all_results.items()}}
        with open(opts.json, "w") as f:
            json.dump(data, f, indent=1)

    if opts.strict and any(r.status in ("failed", "wrong") for _, r in problems):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
