"""bench_call.py — what calling a trivial function from Python costs: a dlam procedure
(lambda (x) (+ x 1)) through the dlam package against the same Lua function through lupa
(Debian's python3-lupa), in the same process, median of several rounds. Prints the time per
call of each and a line "ratio R lupa" (dlam / lupa) that bench/run.py reads; without lupa,
the floor of a ctypes call into libdlam (dlam_exit_code) stands in ("ratio R ctypes").

    usage: python3 python/bench_call.py [--lib PATH/libdlam.so] [--quick]
"""
import os
import sys
import time

args = sys.argv[1:]
if "--lib" in args:
    os.environ["DLAM_LIBRARY"] = os.path.abspath(args[args.index("--lib") + 1])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlam  # noqa: E402

N = 20000 if "--quick" in args else 200000
ROUNDS = 3 if "--quick" in args else 7


def per_call(f):
    best = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for i in range(N):
            f(1.5)
        best.append((time.perf_counter() - t0) / N)
    best.sort()
    return best[len(best) // 2]


vm = dlam.VM()
inc = vm.eval("(lambda (x) (+ x 1))")
assert inc(1.5) == 2.5
ours = per_call(inc)
print("dlam: %.0f ns per call" % (ours * 1e9))
try:
    import lupa
    lua = lupa.LuaRuntime()
    linc = lua.eval("function(x) return x + 1 end")
    assert linc(1.5) == 2.5
    peer = per_call(linc)
    print("lupa: %.0f ns per call" % (peer * 1e9))
    print("ratio %.3f lupa" % (ours / peer))
except ImportError:
    floor = dlam._exit_code
    h = vm._vm
    peer = per_call(lambda _x: floor(h))
    print("lupa not installed; a bare ctypes call: %.0f ns" % (peer * 1e9))
    print("ratio %.3f ctypes" % (ours / peer))
