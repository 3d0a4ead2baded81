"""bench_call.py — what calling a trivial function from Python costs: a dlam procedure
(lambda (x) (+ x 1)) through the dlam package against the same Lua function through lupa
(Debian's python3-lupa), in the same process, median of several rounds; the rounds of the two
alternate, so that a change in the machine's load falls on both, and are timed in the CPU time
of the calling thread (time.thread_time: a round preempted by another process on a busy machine
does not count the time it waited; all the work of a call runs on this thread). Prints the time per
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


def one_round(f):
    t0 = time.thread_time()
    for _ in range(N):
        f(1.5)
    return (time.thread_time() - t0) / N


def per_call(fs):
    """The median time per call of each function in fs, their rounds interleaved."""
    times = [[] for _ in fs]
    for _ in range(ROUNDS):
        for f, t in zip(fs, times):
            t.append(one_round(f))
    return [sorted(t)[len(t) // 2] for t in times]


vm = dlam.VM()
inc = vm.eval("(lambda (x) (+ x 1))")
assert inc(1.5) == 2.5
try:
    import lupa
    lua = lupa.LuaRuntime()
    peer = lua.eval("function(x) return x + 1 end")
    assert peer(1.5) == 2.5
    name = "lupa"
except ImportError:
    floor = dlam._exit_code
    h = vm._vm
    peer = lambda _x: floor(h)  # noqa: E731
    name = "ctypes"
ours, theirs = per_call([inc, peer])
print("dlam: %.0f ns per call" % (ours * 1e9))
if name == "lupa":
    print("lupa: %.0f ns per call" % (theirs * 1e9))
else:
    print("lupa not installed; a bare ctypes call: %.0f ns" % (theirs * 1e9))
print("ratio %.3f %s" % (ours / theirs, name))
