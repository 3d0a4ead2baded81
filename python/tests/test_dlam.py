"""test_dlam.py — the Python package: configuration, conversion both ways, calls, gradients
against analytic values and central differences, host functions with their vjp inside dlam,
errors both ways, captured output, interrupts from another thread, and bad input."""
import math
import threading
import time

import numpy as np
import pytest

import dlam


@pytest.fixture
def vm():
    v = dlam.VM()
    yield v
    v.close()


def central(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


# ---- configuration -----------------------------------------------------------------------

def test_config_keywords_take_effect():
    vm = dlam.VM(heap_limit_mb=16, instruction_limit=100000, stack_limit=1000)
    with pytest.raises(dlam.LimitError, match="instruction limit exceeded"):
        vm.eval("(let loop () (loop))")
    vm.eval("(define (count n) (if (= n 0) 0 (+ 1 (count (- n 1)))))")
    assert vm.eval("(count 900)") == 900.0
    with pytest.raises(dlam.LimitError, match="stack overflow"):
        vm.eval("(count 100000)")
    vm2 = dlam.VM(heap_limit_mb=16)
    with pytest.raises(dlam.LimitError, match=r"heap limit exceeded \(16 MB\)"):
        vm2.eval("(let loop ((acc '())) (loop (cons 1 acc)))")
    assert vm2.eval("(+ 1 2)") == 3.0


def test_config_ffi_and_lua_file(tmp_path):
    vm = dlam.VM(ffi={"enabled": True, "libraries": ["libm.so.6"]})
    erf = vm.eval("(foreign-function \"libm.so.6\" \"erf\" '(double) 'double)")
    assert erf(0.5) == pytest.approx(math.erf(0.5), abs=1e-15)
    with pytest.raises(dlam.RuntimeError, match="foreign calls are disabled"):
        dlam.VM().eval("(foreign-function \"libm.so.6\" \"erf\" '(double) 'double)")
    cfg = tmp_path / "c.lua"
    cfg.write_text("instruction_limit = 50000\n")
    with pytest.raises(dlam.LimitError, match="instruction limit"):
        dlam.VM(config=str(cfg)).eval("(let loop () (loop))")
    cfg.write_text("stack_limit = 100\nheap_limt_mb = 3\n")
    with pytest.raises(dlam.ConfigError, match=r"c\.lua:2:1: error: unknown configuration key "
                                                r"'heap_limt_mb'"):
        dlam.VM(config=str(cfg))


@pytest.mark.parametrize("kw, message", [
    ({"heap_limit_mb": 0}, "heap_limit_mb must be an integer >= 1, got 0"),
    ({"heap_limit_mb": "big"}, "heap_limit_mb must be an integer"),
    ({"stack_limit": -5}, "stack_limit must be an integer >= 1"),
    ({"instruction_limit": 1.5}, "instruction_limit must be an integer >= 0"),
    ({"include_path": "."}, "include_path must be a list of strings"),
    ({"ffi_enabled": 1}, "ffi_enabled must be True or False"),
    ({"file_io": None}, "file_io must be True or False"),
    ({"ffi": {"enable": True}}, "ffi must be a dict with keys enabled and libraries"),
    ({"heap_limt_mb": 5}, "unknown configuration key 'heap_limt_mb'"),
])
def test_bad_config_is_config_error(kw, message):
    with pytest.raises(dlam.ConfigError, match=message):
        dlam.VM(**kw)
    assert issubclass(dlam.ConfigError, dlam.Error)


# ---- values and calls --------------------------------------------------------------------

def test_conversions(vm):
    assert vm.eval("(+ 1 2)") == 3.0
    assert vm.eval("(list 1 2.5)") == [1.0, 2.5]
    v = vm.eval("(vector 1 2 3)")
    assert isinstance(v, np.ndarray) and v.dtype == np.float64 and list(v) == [1, 2, 3]
    assert vm.eval("#t") is True and vm.eval("#f") is False
    assert vm.eval("\"a\\\"b\"") == 'a"b'
    assert vm.eval("'()") == []
    assert vm.eval("(define x 1)") is None
    sym = vm.eval("'(a (b))")
    assert isinstance(sym, dlam.Value) and str(sym) == "(a (b))"
    f = vm.eval("(lambda (x y) (list (vector-ref x 1) (car y) (if z 1 0)))")
    vm["z"] = True
    assert f(np.array([4.0, 5.0]), [7, 8]) == [5.0, 7.0, 1.0]
    vm["w"] = [1, 2, 3]
    assert vm.eval("(apply + w)") == 6.0
    assert vm["w"] == [1.0, 2.0, 3.0]
    vm["nested"] = [1, [2, 3.5], True]
    assert str(vm["nested"]) == "(1 (2 3.5) #t)"
    with pytest.raises(KeyError):
        vm["undefined-thing"]


def test_calls_from_python(vm):
    vm.eval("(define (f x) (vector-dot x x)) (define (g x y) (* x (sin y)))")
    f, g = vm["f"], vm["g"]
    assert f(np.arange(3.0)) == 5.0
    assert g(2, 0.5) == pytest.approx(2 * math.sin(0.5), abs=1e-15)
    assert vm.call("g", 2.0, 0.0) == 0.0
    assert vm["car"]([3, 4]) == 3.0


def test_value_and_grad(vm):
    vm.eval("(define (f x) (vector-dot x x))")
    v, g = vm.value_and_grad(vm["f"], np.arange(3.0))
    assert v == 5.0 and list(g) == [0.0, 2.0, 4.0]
    vm.eval("(define (h x) (* x (sin x)))")
    y, d = vm.value_and_grad(vm["h"], 0.7)
    assert y == pytest.approx(0.7 * math.sin(0.7), abs=1e-15)
    assert d == pytest.approx(math.sin(0.7) + 0.7 * math.cos(0.7), abs=1e-14)
    assert d == pytest.approx(central(lambda t: t * math.sin(t), 0.7), abs=1e-8)
    v, g = vm.value_and_grad("f", [1.0, -2.0])
    assert v == 5.0 and list(g) == [2.0, -4.0]


# ---- host functions ----------------------------------------------------------------------

def test_register_with_vjp_differentiates_in_dlam(vm):
    vm.register("hostf", lambda x: x ** 3, vjp=lambda x, ybar: 3 * x * x * ybar)
    assert vm.eval("(hostf 2)") == 8.0
    # a closure capturing the differentiated variable, first order against analytic and
    # central differences
    vm.eval("(define (k a) ((gradient (lambda (x) (* a (hostf x)))) a))")
    assert vm.eval("(k 1.5)") == pytest.approx(1.5 * 3 * 1.5 ** 2, abs=1e-13)
    assert vm.eval("(k 1.5)") == pytest.approx(
        central(lambda x: 1.5 * x ** 3, 1.5), abs=1e-6)
    vm.register("hyp", lambda x, y: math.hypot(x, y),
                vjp=lambda x, y, ybar: (ybar * x / math.hypot(x, y), ybar * y / math.hypot(x, y)))
    v, g = vm.value_and_grad(vm.eval("(lambda (v) (hyp (vector-ref v 0) (vector-ref v 1)))"),
                             np.array([3.0, 4.0]))
    assert v == 5.0 and g[0] == pytest.approx(0.6) and g[1] == pytest.approx(0.8)
    # forward mode (derivative, jvp) through the same vjp, transposed: d/dx hyp(x, 2x) = √5
    assert vm.eval("((derivative (lambda (x) (hyp x (* 2 x)))) 0.7)") == pytest.approx(
        math.sqrt(5), abs=1e-13)
    assert vm.eval("(cdr (jvp (lambda (x) (* x (hostf x))) 1.5 1))") == pytest.approx(
        4 * 1.5 ** 3, abs=1e-12)
    # the second derivative through a host vjp is an error naming the function
    with pytest.raises(dlam.RuntimeError, match="%hyp-primal: has no derivative"):
        vm.eval("((gradient (lambda (x) ((gradient (lambda (y) (hyp x y))) x))) 1.0)")


def test_host_function_returning_none_returns_void(vm, capsys):
    seen = []
    vm.register("note", lambda x: seen.append(x))
    assert vm.eval("(note 4)") is None
    assert seen == [4.0]
    vm.eval("(display (list (note 5)))")
    assert capsys.readouterr().out == "(#<void>)"


def test_register_without_vjp_cannot_be_differentiated(vm):
    vm.register("plain", lambda x: 2 * x)
    assert vm.eval("(plain 4)") == 8.0
    with pytest.raises(dlam.RuntimeError, match="plain"):
        vm.eval("((gradient (lambda (x) (plain x))) 1.0)")


def test_python_exception_in_host_function_comes_back(vm):
    def bad(x):
        raise ValueError("boom %s" % x)

    vm.register("bad", bad)
    with pytest.raises(dlam.RuntimeError, match=r"b\.dlam:1:6: error: bad: ValueError: boom 2") \
            as info:
        vm.eval("(+ 1 (bad 2))", "b.dlam")
    assert isinstance(info.value.__cause__, ValueError)
    assert vm.eval("(+ 1 2)") == 3.0
    # a host function returning something that does not convert
    vm.register("weird", lambda: object())
    with pytest.raises(dlam.RuntimeError, match="TypeError"):
        vm.eval("(weird)")
    # a dlam error inside a call a host function makes
    vm.register("reenter", lambda: vm.eval("(car 1)", "inner.dlam"))
    with pytest.raises(dlam.RuntimeError, match="inner.dlam:1:1") as info:
        vm.eval("(reenter)")
    assert isinstance(info.value.__cause__, dlam.RuntimeError)
    assert vm.eval("(* 6 7)") == 42.0


def test_errors_map_to_classes(vm):
    with pytest.raises(dlam.SyntaxError, match=r"s\.dlam:1:1: error: unterminated list \(opened here\)"):
        vm.eval("(+ 1", "s.dlam")
    with pytest.raises(dlam.RuntimeError, match=r"<eval>:1:1: error: car: expected pair"):
        vm.eval("(car 5)")
    with pytest.raises(dlam.Exit) as info:
        vm.eval("(exit 3)")
    assert info.value.code == 3
    for cls in (dlam.SyntaxError, dlam.RuntimeError, dlam.LimitError, dlam.ConfigError):
        assert issubclass(cls, dlam.Error)
    assert vm.eval("(+ 1 2)") == 3.0


# ---- output and threads ------------------------------------------------------------------

def test_output_goes_to_sys_stdout(vm, capsys):
    vm.eval("(display \"hello\") (newline) (print (list 1 2))")
    assert capsys.readouterr().out == "hello\n(1 2)\n"


def test_interrupt_from_another_thread(vm):
    timer = threading.Timer(0.2, vm.interrupt)
    timer.start()
    start = time.monotonic()
    with pytest.raises(dlam.LimitError, match="interrupted"):
        vm.eval("(let loop () (loop))")
    assert time.monotonic() - start < 10
    timer.join()
    assert vm.eval("(+ 1 2)") == 3.0
    threading.Timer(0.2, dlam.interrupt, args=(vm,)).start()
    with pytest.raises(dlam.LimitError, match="interrupted"):
        vm.eval("(let loop () (loop))")


def test_gil_is_released_while_dlam_runs(vm):
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    vm.eval("(let loop ((i 0)) (if (< i 3000000) (loop (+ i 1)) i))")
    done.set()
    t.join()
    assert len(ticks) > 5


# ---- bad input ---------------------------------------------------------------------------

def test_bad_input_leaves_the_vm_usable(vm):
    other = dlam.VM()
    theirs = other.eval("(lambda (x) x)")
    with pytest.raises(dlam.ApiError, match="another VM"):
        vm.call(theirs, 1.0)
    with pytest.raises(dlam.ApiError, match="another VM"):
        vm["x"] = theirs
    f = vm.eval("(lambda (x) x)")
    f.release()
    with pytest.raises(dlam.ApiError, match="released"):
        f(1.0)
    with pytest.raises(TypeError):
        vm.call(None, 1.0)
    with pytest.raises(TypeError):
        vm["car"](object())
    with pytest.raises(TypeError):
        vm["vector-length"](np.zeros(()))
    with pytest.raises(TypeError):
        vm.value_and_grad(None, 1.0)
    with pytest.raises(dlam.RuntimeError, match="expected a procedure"):
        vm.value_and_grad(vm.eval("'a"), 1.0)
    with pytest.raises(dlam.RuntimeError, match="not a number"):
        vm.value_and_grad(vm.eval("(lambda (x) (list x))"), 1.0)
    with pytest.raises(TypeError):
        vm.register("x", 5)
    with pytest.raises(TypeError):
        vm.eval(None)
    assert vm.eval("(+ 1 2)") == 3.0
    other.close()
    with pytest.raises(dlam.ApiError, match="closed"):
        other.eval("1")
    with pytest.raises(dlam.ApiError, match="closed"):
        theirs(1.0)


# ---- the example -------------------------------------------------------------------------

def test_example_fit_py():
    import os
    import subprocess
    import sys
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "python"))
    out = subprocess.run([sys.executable, os.path.join(root, "examples", "embed", "fit.py")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("a = 0.8000, b = 1.7000")


# ---- the direct call path (dlam._core) -----------------------------------------------------

def test_calls_take_the_direct_path_or_the_general_one(vm):
    add = vm.eval("(lambda (x y) (+ x y))")
    assert add(1, 2.5) == 3.5 and type(add(1, 2)) is float
    assert vm.eval("(lambda (x) (list x x))")(2.0) == [2.0, 2.0]  # not a number: converted
    assert vm.eval("(lambda args (length args))")(*range(12)) == 12.0  # past the direct path
    assert add(np.float64(2.0), 1) == 3.0  # a float subclass
    assert add(np.int64(2), np.float32(1.5)) == 3.5  # other NumPy scalars: the general path
    assert vm.eval("(lambda (v) (vector-ref v 1))")(np.array([4.0, 5.0])) == 5.0
    with pytest.raises(dlam.RuntimeError, match=r"c\.dlam:1:13: error: car: expected pair"):
        vm.eval("(lambda (x) (car x))", "c.dlam")(5.0)
    with pytest.raises(dlam.RuntimeError, match=r"\+: expected number"):
        add(True, 1)  # a bool is dlam's #t, not 1
    with pytest.raises(OverflowError):
        add(10 ** 400, 1)
    with pytest.raises(TypeError):
        add(1, y=2)
    assert vm.eval("(+ 1 2)") == 3.0


def test_direct_call_releases_the_gil_and_is_interrupted(vm):
    spin = vm.eval("(lambda (n) (let loop ((i 0)) (if (< i n) (loop (+ i 1)) i)))")
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    assert spin(3000000) == 3000000.0
    done.set()
    t.join()
    assert len(ticks) > 5
    timer = threading.Timer(0.2, dlam.interrupt, args=(vm,))
    timer.start()
    with pytest.raises(dlam.LimitError, match="interrupted"):
        spin(1e15)
    timer.join()
    assert spin(10) == 10.0


def test_values_freed_on_another_thread_wait_for_the_run(vm):
    # The garbage collector may free a Value on any thread, also while another thread runs
    # its VM with the GIL released: its handle is released when that run ends, not during it.
    values = [vm.eval("(lambda (x) %d)" % i) for i in range(100)]
    kept = values[7]
    started = threading.Event()
    seen = []
    vm.register("started", started.set)

    def drop():
        started.wait()
        values.clear()
        seen.append(vm._deferred)
        vm.interrupt()

    t = threading.Thread(target=drop)
    t.start()
    with pytest.raises(dlam.LimitError, match="interrupted"):
        vm.eval("(begin (started) (let loop () (loop)))")
    t.join()
    assert seen == [99] and vm._deferred == 0
    assert kept(0.0) == 7.0 and vm.eval("(+ 1 2)") == 3.0
    # freed inside a host function (the same thread, dlam running): also after the run
    doomed = [vm.eval("(lambda () 1)") for _ in range(3)]
    counts = []

    def drop_now():
        doomed.clear()
        counts.append(vm._deferred)
    vm.register("drop-now", drop_now)
    vm.eval("(drop-now)")
    assert counts == [3] and vm._deferred == 0


# ---- errors that cross both ways -------------------------------------------------------------

def test_host_exceptions_leave_nothing_behind(vm):
    def bad(x):
        raise ValueError("boom")

    vm.register("bad", bad)
    # caught by dlam: the call succeeds, and the next error is not chained to it
    assert vm.eval("(guard (e (#t 0)) (bad 1))") == 0.0
    with pytest.raises(dlam.RuntimeError) as info:
        vm.eval("(car 5)")
    assert info.value.__cause__ is None
    # through the direct path: the dlam error, caused by the Python exception
    f = vm.eval("(lambda (x) (+ 1 (bad x)))", "d.dlam")
    with pytest.raises(dlam.RuntimeError, match=r"d\.dlam:1:18: error: bad: ValueError: boom") \
            as info:
        f(2.0)
    assert isinstance(info.value.__cause__, ValueError)

    # a host function that catches the dlam error of a nested call and goes on
    def careful():
        try:
            vm.eval("(car 1)", "inner.dlam")
        except dlam.RuntimeError as e:
            return len(str(e).splitlines()[0])
    vm.register("careful", careful)
    assert vm.eval("(careful)") == len("inner.dlam:1:1: error: car: expected pair as argument 1, "
                                       "got 1")
    # Ctrl-C in a host function is not dlam's to wrap: it comes back as itself
    def ctrl_c():
        raise KeyboardInterrupt
    vm.register("ctrl-c", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        vm.eval("(+ 1 (ctrl-c))")
    assert vm.eval("(+ 1 2)") == 3.0


def test_error_port_goes_to_sys_stderr(vm, capsys):
    vm.eval("(display \"out\") (display \"err\" (current-error-port))"
            " (write (list 1 \"s\") (current-error-port)) (newline)")
    captured = capsys.readouterr()
    assert captured.out == "out\n"
    assert captured.err == "err(1 \"s\")"


# ---- NumPy arrays --------------------------------------------------------------------------

def test_numpy_arrays_in_any_layout(vm):
    f = vm.eval("(lambda (v) (vector-dot v (vector 1 10 100)))")
    a = np.arange(6.0)
    assert f(a[::2]) == 0 + 20 + 400  # strided
    assert f(np.array([1, 2, 3], dtype=np.int32)) == 321
    assert f(np.array([1, 2, 3], dtype=np.float32)) == 321
    r = vm.eval("(lambda (v) (vector-map (lambda (x) (* 2 x)) v))")(a[1::2])
    assert isinstance(r, np.ndarray) and r.dtype == np.float64 and list(r) == [2.0, 6.0, 10.0]
    assert r.flags.writeable and r.flags.c_contiguous
    v, g = vm.value_and_grad(vm.eval("(lambda (v) (vector-dot v v))"), a[::-2])
    assert v == 25 + 9 + 1 and list(g) == [10.0, 6.0, 2.0]
    assert list(a) == [0, 1, 2, 3, 4, 5]  # the caller's array is not touched
    with pytest.raises(TypeError, match="0-dimensional"):
        f(np.zeros(()))
    with pytest.raises(TypeError):
        f(np.array(["a", "b"]))


# ---- bad input to every entry point ----------------------------------------------------------

def test_bad_arguments_to_each_entry_point(vm):
    f = vm.eval("(lambda (x) (* x x))")
    bad_calls = [
        (TypeError, lambda: vm.eval(b"(+ 1 2)")),
        (TypeError, lambda: vm.eval("1", None)),
        (TypeError, lambda: vm.run_file(None)),
        (dlam.SyntaxError, lambda: vm.run_file("/nonexistent/x.dlam")),
        (TypeError, lambda: vm[None]),
        (TypeError, lambda: vm.__setitem__(3, 1.0)),
        (TypeError, lambda: vm.__setitem__("x", {"a": 1})),
        (TypeError, lambda: vm.__setitem__("x", [1, object()])),
        (TypeError, lambda: vm.call(3.0)),
        (KeyError, lambda: vm.call("no-such-procedure-here", 1.0)),
        (TypeError, lambda: vm.call("car", object())),
        (dlam.RuntimeError, lambda: vm.call(vm.eval("'sym"), 1.0)),
        (TypeError, lambda: vm.value_and_grad(f, "1.0")),
        (TypeError, lambda: vm.value_and_grad(f, np.zeros(()))),
        (TypeError, lambda: vm.value_and_grad(5.0, 1.0)),
        (dlam.RuntimeError, lambda: vm.value_and_grad(f, [1.0, 2.0])),  # f of a number
        (TypeError, lambda: vm.register(None, abs)),
        (TypeError, lambda: vm.register("g", abs, vjp=3)),
        (TypeError, lambda: dlam.interrupt(None)),
        (TypeError, lambda: dlam.Value(None, 1)),
    ]
    for cls, call in bad_calls:
        with pytest.raises(cls):
            call()
        assert f(3.0) == 9.0 and vm.eval("(+ 1 2)") == 3.0


def test_values_of_another_vm_or_released_or_closed(vm):
    other = dlam.VM()
    theirs = other.eval("(lambda (x) x)")
    mine = vm.eval("(lambda (x) x)")
    for use in (lambda v: vm.call(v, 1.0), lambda v: vm.__setitem__("x", v),
                lambda v: vm.value_and_grad(v, 1.0), lambda v: vm.value_and_grad(v, [1.0]),
                lambda v: vm.call("list", v)):
        with pytest.raises(dlam.ApiError, match="another VM"):
            use(theirs)
        gone = vm.eval("(lambda (x) x)")
        gone.release()
        with pytest.raises(dlam.ApiError, match="released"):
            use(gone)
        assert mine(4.0) == 4.0
    gone.release()  # twice: nothing happens
    assert repr(gone) == "<dlam.Value released>"
    assert theirs(2.0) == 2.0  # the other VM is fine
    other.close()
    other.close()  # twice: nothing happens
    assert repr(theirs) == "<dlam.Value of a closed VM>"
    for use in (lambda: theirs(1.0), lambda: other.eval("1"), lambda: other.run_file("x.dlam"),
                lambda: other["car"], lambda: other.__setitem__("x", 1.0),
                lambda: other.call(theirs, 1.0), lambda: other.value_and_grad(theirs, 1.0),
                lambda: other.register("h", abs)):
        with pytest.raises(dlam.ApiError, match="closed"):
            use()
    other.interrupt()  # a closed VM: nothing to stop
    theirs.release()
    assert mine(5.0) == 5.0


def test_a_running_vm_is_not_closed(vm):
    def closer():
        vm.close()
    vm.register("closer", closer)
    with pytest.raises(dlam.RuntimeError, match="closer: ApiError: error: the VM is running") \
            as info:
        vm.eval("(closer)")
    assert isinstance(info.value.__cause__, dlam.ApiError)
    assert vm.eval("(+ 1 2)") == 3.0
    vm.close()
    with pytest.raises(dlam.ApiError, match="closed"):
        vm.eval("1")


def test_host_function_returning_a_bad_value(vm):
    other = dlam.VM()
    theirs = other.eval("(lambda (x) x)")
    gone = vm.eval("(lambda (x) x)")
    gone.release()
    for name, value, why in (("leak", theirs, "a value of another VM"),
                             ("stale", gone, "a released value")):
        vm.register(name, lambda v=value: v)
        with pytest.raises(dlam.RuntimeError,
                           match=r"r\.dlam:1:6: error: %s: ApiError: error: %s" % (name, why)) \
                as info:
            vm.eval("(+ 1 (%s))" % name, "r.dlam")
        assert isinstance(info.value.__cause__, dlam.ApiError)
        assert vm.eval("(+ 1 2)") == 3.0
    other.close()


def test_nd_arrays_cross_both_ways(vm):
    m = np.arange(6.0).reshape(2, 3)
    double = vm.eval("(lambda (a) (* 2 a))")
    out = double(m)
    assert isinstance(out, np.ndarray) and out.shape == (2, 3)
    assert (out == 2 * m).all()
    # the shape arrives in dlam, any layout or number type first made C-contiguous float64
    assert vm.eval("(lambda (a) (array-shape a))")(m) == [2.0, 3.0]
    assert (double(np.asfortranarray(m)) == 2 * m).all()
    assert (double(np.arange(24).reshape(2, 3, 4)) == 2 * np.arange(24.0).reshape(2, 3, 4)).all()
    gram = vm.eval("(lambda (a) (dot a (transpose a)))")(m)
    assert (gram == m @ m.T).all()
    # the gradient with respect to a matrix is a matrix
    v, g = vm.value_and_grad(vm.eval("(lambda (w) (sum (* w w)))"), m)
    assert v == 55.0 and g.shape == (2, 3) and (g == 2 * m).all()
    # a host function receives a matrix as a NumPy array of its shape
    seen = []
    vm.register("peek", lambda a: seen.append(a.shape) or float(a.sum()))
    assert vm.eval("(peek (list->array '((1 2) (3 4) (5 6))))") == 21.0
    assert seen == [(3, 2)]
    with pytest.raises(TypeError, match="0-dimensional"):
        double(np.zeros(()))
