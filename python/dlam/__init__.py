"""dlam — the dlam language, with first-class reverse-mode differentiation, from Python.

This package drives libdlam (the dlam VM's shared library) through ctypes: no C compiler is
needed to install it. It owns the conversion of values between Python and dlam, the mapping
of dlam's error statuses to exceptions, and host functions written in Python:

    import dlam, numpy as np
    vm = dlam.VM(heap_limit_mb=256)
    vm.eval("(define (f x) (vector-sum (* x x)))")
    f = vm["f"]
    f(np.arange(3.0))                       # 5.0
    vm.value_and_grad(f, np.arange(3.0))    # (5.0, array([0., 2., 4.]))

Python numbers become dlam numbers, lists become dlam lists, NumPy float64 arrays of one
dimension dlam vectors; back from dlam, numbers are floats, vectors NumPy arrays, lists of
numbers Python lists, booleans bools, strings strs, the empty list [], void None, and
anything else (procedures, symbols, lists of other things) a `dlam.Value`.

libdlam is looked for in $DLAM_LIBRARY, next to this file (where the installer copies it),
then in the build tree this source tree belongs to (../../build/embed). The package is two
parts: this module, which calls libdlam through ctypes, and dlam._core (dlam/_core.c, a C
extension built by the installer, or by the CMake build into build/python), which holds
dlam.Value and calls a procedure with numbers in one C call: the path a host takes in a loop.

The GIL is released while dlam runs (by ctypes, and by dlam._core around its call) and taken
again by callbacks into Python (host functions, output). One VM must not be used by two
threads at once; `VM.interrupt` may be called from any thread.
"""

import ctypes as _c
import glob as _glob
import importlib.machinery as _machinery
import importlib.util as _util
import inspect as _inspect
import os as _os
import sys as _sys

try:
    import numpy as _np
except ImportError:  # numbers and lists still work
    _np = None

__all__ = ["VM", "Value", "Error", "SyntaxError", "RuntimeError", "LimitError", "ConfigError",
           "ApiError", "Exit", "interrupt", "library_path"]


# ---- exceptions --------------------------------------------------------------------------

class Error(Exception):
    """A dlam error. str(e) is dlam's message: "FILE:LINE:COL: error: MESSAGE" and a trace."""


class SyntaxError(Error):  # noqa: A001 (the module's own, as dlam.SyntaxError)
    """The source does not read or compile, or a file cannot be opened."""


class RuntimeError(Error):  # noqa: A001
    """A runtime error in dlam code, or in a host function (its Python exception is the cause)."""


class LimitError(Error):
    """The heap limit, stack overflow, the instruction limit, an interrupt, out of memory."""


class ConfigError(Error):
    """An invalid configuration: a bad keyword argument or config file."""


class ApiError(Error):
    """Misuse: a value of another VM, a released value, a VM already closed."""


class Exit(Error):
    """The code called (exit [status]); `code` is the status."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


_OK, _SYNTAX, _RUNTIME, _LIMIT, _CONFIG, _API, _EXIT = range(7)
_ERRORS = {_SYNTAX: SyntaxError, _RUNTIME: RuntimeError, _LIMIT: LimitError,
           _CONFIG: ConfigError, _API: ApiError}
(_T_NUMBER, _T_BOOLEAN, _T_NULL, _T_PAIR, _T_VECTOR, _T_STRING, _T_SYMBOL, _T_PROCEDURE,
 _T_VOID, _T_OTHER) = range(10)


# ---- the library -------------------------------------------------------------------------

def _find_library():
    here = _os.path.dirname(_os.path.abspath(__file__))
    candidates = [_os.environ.get("DLAM_LIBRARY"), _os.path.join(here, "libdlam.so"),
                  _os.path.join(here, "..", "..", "build", "embed", "libdlam.so")]
    for path in candidates:
        if path and _os.path.exists(path):
            return _os.path.abspath(path)
    raise ImportError("dlam: libdlam.so not found (build it with CMake, then install this "
                      "package, or set DLAM_LIBRARY to its path)")


def _load_core():
    """dlam._core: the installed one (next to this file), else the one the CMake build made
    (build/python of the build tree libdlam comes from, or of this source tree)."""
    try:
        from . import _core
        return _core
    except ImportError:
        pass
    here = _os.path.dirname(_os.path.abspath(__file__))
    dirs = [_os.path.join(_os.path.dirname(library_path), "..", "python"),
            _os.path.join(here, "..", "..", "build", "python")]
    for d in dirs:
        for suffix in _machinery.EXTENSION_SUFFIXES:
            for path in _glob.glob(_os.path.join(d, "_core" + suffix)):
                spec = _util.spec_from_file_location(__name__ + "._core", path)
                module = _util.module_from_spec(spec)
                spec.loader.exec_module(module)
                _sys.modules[__name__ + "._core"] = module
                return module
    raise ImportError("dlam: the extension dlam._core is not built (cmake --build build makes "
                      "build/python/_core*.so; pip install ./python builds it in the package)")


library_path = _find_library()
_lib = _c.CDLL(library_path)
_core = _load_core()

_vm_p = _c.c_void_p
_val = _c.c_void_p
_dbl_p = _c.POINTER(_c.c_double)
_WRITE = _c.CFUNCTYPE(None, _c.c_void_p, _c.c_int, _c.POINTER(_c.c_char), _c.c_size_t)
_HOST = _c.CFUNCTYPE(_c.c_int, _vm_p, _c.c_int, _c.POINTER(_val), _c.POINTER(_val), _c.c_void_p)


class _Config(_c.Structure):
    _fields_ = [("heap_limit_mb", _c.c_size_t), ("stack_limit", _c.c_size_t),
                ("instruction_limit", _c.c_uint64),
                ("include_path", _c.POINTER(_c.c_char_p)), ("include_path_len", _c.c_size_t),
                ("ffi_enabled", _c.c_int),
                ("ffi_libraries", _c.POINTER(_c.c_char_p)), ("ffi_libraries_len", _c.c_size_t),
                ("file_io", _c.c_int), ("write", _WRITE), ("write_ud", _c.c_void_p),
                ("loaded_", _c.c_void_p)]


def _sig(name, res, *args):
    f = getattr(_lib, name)
    f.restype = res
    f.argtypes = list(args)
    return f


_st = _c.c_int
_new_with = _sig("dlam_new_with", _vm_p, _c.POINTER(_Config))
_free = _sig("dlam_free", None, _vm_p)
_last_error = _sig("dlam_last_error", _c.c_char_p, _vm_p)
_exit_code = _sig("dlam_exit_code", _c.c_int, _vm_p)
_interrupt = _sig("dlam_interrupt", None, _vm_p)
_eval = _sig("dlam_eval", _st, _vm_p, _c.c_char_p, _c.c_char_p, _c.POINTER(_val))
_run_file = _sig("dlam_run_file", _st, _vm_p, _c.c_char_p, _c.POINTER(_val))
_get_global = _sig("dlam_get_global", _val, _vm_p, _c.c_char_p)
_set_global = _sig("dlam_set_global", _st, _vm_p, _c.c_char_p, _val)
_call = _sig("dlam_call", _st, _vm_p, _val, _c.c_int, _c.POINTER(_val), _c.POINTER(_val))
_call_numbers = _sig("dlam_call_numbers", _st, _vm_p, _val, _c.c_int, _dbl_p, _dbl_p,
                     _c.POINTER(_val))
_number = _sig("dlam_number", _val, _vm_p, _c.c_double)
_boolean = _sig("dlam_boolean", _val, _vm_p, _c.c_int)
_list_of_numbers = _sig("dlam_list_of_numbers", _val, _vm_p, _dbl_p, _c.c_size_t)
_vector_of_numbers = _sig("dlam_vector_of_numbers", _val, _vm_p, _dbl_p, _c.c_size_t)
_array_of_numbers = _sig("dlam_array_of_numbers", _val, _vm_p, _dbl_p, _c.c_size_t,
                         _c.POINTER(_c.c_size_t))
_array_data = _sig("dlam_array_data", _st, _vm_p, _val, _c.POINTER(_dbl_p),
                   _c.POINTER(_c.c_size_t), _c.POINTER(_c.POINTER(_c.c_size_t)))
_to_number = _sig("dlam_to_number", _st, _vm_p, _val, _dbl_p)
_to_numbers = _sig("dlam_to_numbers", _st, _vm_p, _val, _dbl_p, _c.c_size_t,
                   _c.POINTER(_c.c_size_t))
_to_string = _sig("dlam_to_string", _st, _vm_p, _val, _c.c_int, _c.c_char_p, _c.c_size_t,
                  _c.POINTER(_c.c_size_t))
_type_of = _sig("dlam_type_of", _c.c_int, _vm_p, _val)
_release = _sig("dlam_release", None, _vm_p, _val)
_dup = _sig("dlam_dup", _val, _vm_p, _val)
_value_and_gradient = _sig("dlam_value_and_gradient", _st, _vm_p, _val, _c.c_size_t, _dbl_p,
                           _dbl_p, _dbl_p)
_register = _sig("dlam_register", _st, _vm_p, _c.c_char_p, _c.c_int, _HOST, _c.c_void_p)
_set_error = _sig("dlam_set_error", None, _vm_p, _c.c_char_p)
_config_init = _sig("dlam_config_init", None, _c.POINTER(_Config))
_config_load_lua = _sig("dlam_config_load_lua", _st, _c.POINTER(_Config), _c.c_char_p)
_config_error = _sig("dlam_config_error", _c.c_char_p, _c.POINTER(_Config))
_config_free = _sig("dlam_config_free", None, _c.POINTER(_Config))
_core.bind(_c.cast(_call_numbers, _c.c_void_p).value, _c.cast(_release, _c.c_void_p).value)


def interrupt(vm):
    """Asks the code running in vm to stop (from any thread): the run raises LimitError."""
    if not isinstance(vm, VM):
        raise TypeError("dlam.interrupt needs a dlam.VM, got %s" % type(vm).__name__)
    vm.interrupt()


# ---- values ------------------------------------------------------------------------------

# A dlam value the package does not convert (a procedure, a symbol...), kept alive by the VM
# until the Value goes; calling it calls the dlam procedure (dlam/_core.c). Value(vm, handle)
# takes over the handle; `release()` lets the VM collect the value at once.
Value = _core.Value


_CONFIG_KEYS = ("heap_limit_mb", "stack_limit", "instruction_limit", "include_path", "ffi",
                "ffi_enabled", "ffi_libraries", "file_io", "config")


def _natural(key, v, least):
    if isinstance(v, bool) or not isinstance(v, int) or v < least or v >= 2 ** 63:
        raise ConfigError("error: %s must be an integer >= %d, got %r" % (key, least, v))
    return v


def _strings(key, v):
    if isinstance(v, (str, bytes)) or not all(isinstance(s, str) for s in v):
        raise ConfigError("error: %s must be a list of strings, got %r" % (key, v))
    arr = (_c.c_char_p * max(len(v), 1))(*[s.encode() for s in v])
    return arr, len(v)


def _flag(key, v):
    if not isinstance(v, bool):
        raise ConfigError("error: %s must be True or False, got %r" % (key, v))
    return int(v)


class VM(_core.VMBase):
    """A dlam VM with the standard library. Keyword arguments are the configuration keys:
    heap_limit_mb, stack_limit, instruction_limit (per call from Python; 0: none),
    include_path (a list of directories), ffi_enabled / ffi_libraries (or
    ffi={"enabled": ..., "libraries": [...]}), file_io; config="file.lua" reads a Lua
    configuration file first (the keyword arguments then override it). Output (display,
    print...) goes to sys.stdout / sys.stderr as they are when it is written."""

    def __init__(self, config=None, **settings):
        self._vm = None
        self._host = {}    # name -> the ctypes callbacks of a host function (kept alive)
        for key in settings:
            if key not in _CONFIG_KEYS:
                raise ConfigError("error: unknown configuration key '%s'" % key)
        cfg = _Config()
        _config_init(_c.byref(cfg))
        keep = []
        try:
            if config is not None:
                if _config_load_lua(_c.byref(cfg), _os.fsencode(config)) != _OK:
                    raise ConfigError(_config_error(_c.byref(cfg)).decode("utf-8", "replace"))
            ffi = settings.pop("ffi", None)
            if ffi is not None:
                if not isinstance(ffi, dict) or set(ffi) - {"enabled", "libraries"}:
                    raise ConfigError("error: ffi must be a dict with keys enabled and libraries, "
                                      "got %r" % (ffi,))
                if "enabled" in ffi:
                    settings.setdefault("ffi_enabled", ffi["enabled"])
                if "libraries" in ffi:
                    settings.setdefault("ffi_libraries", ffi["libraries"])
            for key, v in settings.items():
                if key == "heap_limit_mb":
                    cfg.heap_limit_mb = _natural(key, v, 1)
                elif key == "stack_limit":
                    cfg.stack_limit = _natural(key, v, 1)
                elif key == "instruction_limit":
                    cfg.instruction_limit = _natural(key, v, 0)
                elif key == "include_path":
                    arr, n = _strings(key, v)
                    keep.append(arr)
                    cfg.include_path, cfg.include_path_len = arr, n
                elif key == "ffi_libraries":
                    if v is None:
                        cfg.ffi_libraries, cfg.ffi_libraries_len = None, 0
                    else:
                        arr, n = _strings(key, v)
                        keep.append(arr)
                        cfg.ffi_libraries, cfg.ffi_libraries_len = arr, n
                elif key in ("ffi_enabled", "file_io"):
                    setattr(cfg, key, _flag(key, v))
            self._write = _WRITE(self._on_write)
            cfg.write = self._write
            vm = _new_with(_c.byref(cfg))
            if not vm:
                raise MemoryError("dlam: out of memory")
            message = _last_error(vm)
            if message:
                _free(vm)
                raise ConfigError(message.decode("utf-8", "replace"))
            self._vm = vm
        finally:
            _config_free(_c.byref(cfg))

    # -- life --
    def close(self):
        """Frees the VM now (else when the VM object goes). Its Values become unusable. A VM
        that is running (from a host function, or on another thread) is not closed: ApiError."""
        if self._running:
            raise ApiError("error: the VM is running: it cannot be closed until the call returns "
                           "(interrupt it to stop it)")
        vm, self._vm = self._vm, None
        if vm:
            _free(vm)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def interrupt(self):
        """Stops the code running in this VM (thread-safe): that call raises LimitError. If
        nothing runs, the next run stops."""
        vm = self._vm
        if vm:
            _interrupt(vm)

    def _run(self, fn, *args):
        """fn(*args): a ctypes call that runs dlam code (with the GIL released), counted while
        it runs so that close() refuses meanwhile; a failure raises its exception (before the
        handles of Values that died meanwhile are released, which would clear the error)."""
        self._enter()
        try:
            st = fn(*args)
            if st != _OK:
                self._raise(st)
        finally:
            self._leave()

    # -- errors and conversion --
    def _handle(self):
        if not self._vm:
            raise ApiError("error: the VM is closed")
        return self._vm

    def _raise(self, status):
        """Raises the exception of a failed call's status, with dlam's message. A Python
        exception a host function raised and that caused this error is its __cause__; one
        that is not an Exception (KeyboardInterrupt, SystemExit) is raised itself."""
        message = (_last_error(self._vm) or b"").decode("utf-8", "replace")
        causes = [e for e in self._pending if _host_error(e) in message]
        del self._pending[:]
        if status == _EXIT:
            raise Exit(message, _exit_code(self._vm))
        err = _ERRORS.get(status, Error)(message)
        if causes:
            if not isinstance(causes[-1], Exception):
                raise causes[-1]
            raise err from causes[-1]
        raise err

    def _own(self, v):
        """The handle of v, a Value of this VM that is not released (else ApiError)."""
        self._handle()
        if v._vm is not self:
            raise ApiError("error: a value of another VM")
        h = v._h
        if h is None:
            raise ApiError("error: a released value")
        return h

    def _on_write(self, _ud, stream, data, n):
        text = _c.string_at(data, n).decode("utf-8", "replace")
        (_sys.stderr if stream == 2 else _sys.stdout).write(text)

    def _show(self, h, display):
        n = _c.c_size_t(0)
        _to_string(self._handle(), h, int(display), None, 0, _c.byref(n))
        buf = _c.create_string_buffer(n.value + 1)
        if _to_string(self._vm, h, int(display), buf, n.value + 1, None) != _OK:
            self._raise(_API)
        return buf.value.decode("utf-8", "replace")

    def _to_dlam(self, x, keep):
        """A handle to x's dlam value, appended to keep (released by the caller)."""
        vm = self._handle()
        if isinstance(x, Value):
            return self._own(x)
        if isinstance(x, bool):
            h = _boolean(vm, int(x))
        elif isinstance(x, (int, float)):
            h = _number(vm, float(x))
        elif _np is not None and isinstance(x, _np.ndarray):
            h = self._array_to_dlam(vm, x)
        elif _np is not None and isinstance(x, (_np.floating, _np.integer)):
            h = _number(vm, float(x))
        elif isinstance(x, (list, tuple)):
            if all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in x):
                arr = (_c.c_double * max(len(x), 1))(*x)
                h = _list_of_numbers(vm, arr, len(x))
            else:
                return self._list_of(x, keep)
        else:
            raise TypeError("dlam: cannot convert %s to a dlam value" % type(x).__name__)
        if not h:
            self._raise(_API)
        keep.append(h)
        return h

    def _array_to_dlam(self, vm, x):
        """A handle to a new dlam value holding a NumPy array of numbers. libdlam copies the
        numbers from the array's own memory when it is C-contiguous float64 (no copy on the
        Python side); other layouts and number types are first made so by NumPy. One
        dimension: a dlam vector; n: a dlam array of that shape."""
        if x.dtype.kind not in "fiub":
            raise TypeError("dlam: an array of %s does not convert (numbers only)" % x.dtype)
        if x.ndim == 0:
            raise TypeError("dlam: a 0-dimensional array does not convert (pass a number)")
        a = _np.ascontiguousarray(x, dtype=_np.float64)
        if a.ndim == 1:
            return _vector_of_numbers(vm, a.ctypes.data_as(_dbl_p), a.size)
        shape = (_c.c_size_t * a.ndim)(*a.shape)
        return _array_of_numbers(vm, a.ctypes.data_as(_dbl_p), a.ndim, shape)

    def _list_of(self, xs, keep):
        """A dlam list of any convertible values, built by dlam's own list."""
        items = [self._to_dlam(e, keep) for e in xs]
        lst = self._global_handle("list")
        return self._call_handles(lst, items, keep)

    def _global_handle(self, name):
        h = self._host.get(("global", name))
        if h is None:
            h = _get_global(self._handle(), name.encode())
            self._host[("global", name)] = h
        return h

    def _call_handles(self, fn, handles, keep):
        argv = (_val * max(len(handles), 1))(*handles)
        r = _val()
        self._run(_call, self._vm, fn, len(handles), argv, _c.byref(r))
        keep.append(r.value)
        return r.value

    def _from_dlam(self, h, owned):
        """The Python value of handle h (released here if owned, unless kept in a Value)."""
        vm = self._vm
        t = _type_of(vm, h)
        try:
            if t == _T_NUMBER:
                d = _c.c_double()
                _to_number(vm, h, _c.byref(d))
                return d.value
            if t == _T_BOOLEAN:
                return self._show(h, False) == "#t"
            if t == _T_VOID:
                return None
            if t == _T_NULL:
                return []
            if t == _T_STRING:
                return self._show(h, True)
            # An array of rank 2 or more: a NumPy array of its shape, copied from
            # dlam_array_data's memory (the handle, which keeps that alive, is released here).
            if t == _T_VECTOR and _np is not None:
                data, rank, shape = _dbl_p(), _c.c_size_t(0), _c.POINTER(_c.c_size_t)()
                if (_array_data(vm, h, _c.byref(data), _c.byref(rank), _c.byref(shape)) == _OK
                        and rank.value > 1):
                    dims = tuple(shape[i] for i in range(rank.value))
                    if 0 in dims:
                        return _np.zeros(dims)
                    return _np.ctypeslib.as_array(data, shape=dims).copy()
            # A vector: a new NumPy array that libdlam fills in place.
            if t in (_T_VECTOR, _T_PAIR):
                n = _c.c_size_t(0)
                _to_numbers(vm, h, None, 0, _c.byref(n))
                if t == _T_VECTOR or n.value > 0:
                    if _np is not None:
                        out = _np.empty(n.value)
                        p = out.ctypes.data_as(_dbl_p)
                    else:
                        out = (_c.c_double * max(n.value, 1))()
                        p = out
                    if _to_numbers(vm, h, p, n.value, None) == _OK:
                        if t == _T_VECTOR:
                            return out if _np is not None else list(out)[:n.value]
                        return [float(v) for v in out[:n.value]]
            if t == -1:
                self._raise(_API)
            v = Value(self, _dup(vm, h) if owned else h)
            owned = False
            return v
        finally:
            if owned:
                _release(vm, h)

    # -- running code --
    def eval(self, source, name="<eval>"):
        """Runs every form of source; returns the value of the last, converted."""
        vm = self._handle()
        if not isinstance(source, str) or not isinstance(name, str):
            raise TypeError("dlam: eval needs the source and its name as str")
        r = _val()
        self._run(_eval, vm, source.encode(), name.encode(), _c.byref(r))
        return self._from_dlam(r.value, True)

    def run_file(self, path):
        """Runs the dlam file at path; returns the value of its last form, converted."""
        vm = self._handle()
        r = _val()
        self._run(_run_file, vm, _os.fsencode(path), _c.byref(r))
        return self._from_dlam(r.value, True)

    def __getitem__(self, name):
        """The global variable name (converted), or KeyError if it is undefined."""
        vm = self._handle()
        if not isinstance(name, str):
            raise TypeError("dlam: a global's name is a str")
        h = _get_global(vm, name.encode())
        if not h:
            message = _last_error(vm)
            if message:
                raise ApiError(message.decode("utf-8", "replace"))
            raise KeyError(name)
        return self._from_dlam(h, True)

    def __setitem__(self, name, value):
        if not isinstance(name, str):
            raise TypeError("dlam: a global's name is a str")
        keep = []
        try:
            h = self._to_dlam(value, keep)
            st = _set_global(self._vm, name.encode(), h)
            if st != _OK:
                self._raise(st)
        finally:
            for k in keep:
                _release(self._vm, k)

    def call(self, fn, *args):
        """Calls the dlam procedure fn (a Value, or the name of a global) with args."""
        if isinstance(fn, str):
            fn = self[fn]
            if not isinstance(fn, Value):
                raise TypeError("dlam: %r is not a procedure" % (fn,))
        elif not isinstance(fn, Value):
            raise TypeError("dlam: cannot call %s" % type(fn).__name__)
        vm = self._handle()
        h = self._own(fn)
        if all(type(a) is float or type(a) is int for a in args):
            n = len(args)
            x = (_c.c_double * n)(*args) if n else None
            out = _c.c_double()
            r = _val()
            self._run(_call_numbers, vm, h, n, x, _c.byref(out), _c.byref(r))
            return out.value if r.value is None else self._from_dlam(r.value, True)
        keep = []
        try:
            handles = [self._to_dlam(a, keep) for a in args]
            argv = (_val * max(len(handles), 1))(*handles)
            r = _val()
            self._run(_call, vm, h, len(handles), argv, _c.byref(r))
            return self._from_dlam(r.value, True)
        finally:
            for k in keep:
                _release(vm, k)

    # -- derivatives --
    def value_and_grad(self, fn, x):
        """The value and gradient of fn, a real-valued dlam procedure, at x. x may be a number
        (fn of one number: the gradient is a float), or a NumPy float64 array or a list (fn of
        one vector: the gradient is an array)."""
        if isinstance(fn, str):
            fn = self[fn]
        if not isinstance(fn, Value):
            raise TypeError("dlam: value_and_grad needs a dlam procedure, got %s"
                            % type(fn).__name__)
        vm = self._handle()
        h = self._own(fn)
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            xs = (_c.c_double * 1)(x)
            y, g = _c.c_double(), (_c.c_double * 1)()
            self._run(_value_and_gradient, vm, h, 1, xs, _c.byref(y), g)
            return y.value, g[0]
        # fn of a vector: its gradient by (gradient fn) in dlam, taken at the vector.
        if not isinstance(x, (list, tuple)) and not (_np is not None
                                                     and isinstance(x, _np.ndarray)):
            raise TypeError("dlam: value_and_grad takes the gradient at a number, a list or a "
                            "NumPy array, got %s" % type(x).__name__)
        keep = []
        try:
            v = self._to_dlam(x if _np is None or isinstance(x, _np.ndarray)
                              else _np.asarray(x, dtype=_np.float64), keep)
            vag = self._global_handle("value-and-gradient")
            wrapped = self._call_handles(vag, [h], keep)
            r = self._call_handles(wrapped, [v], keep)
            head = self._call_handles(self._global_handle("car"), [r], keep)
            tail = self._call_handles(self._global_handle("cdr"), [r], keep)
            return self._from_dlam(_dup(vm, head), True), self._from_dlam(_dup(vm, tail), True)
        finally:
            for k in keep:
                _release(vm, k)

    # -- host functions --
    def register(self, name, fn, vjp=None):
        """Defines the global name as a dlam procedure calling the Python function fn with the
        arguments converted (numbers are floats, vectors NumPy arrays). With vjp, a function
        vjp(*args, ybar) returning the sensitivity of each argument (one value for a function
        of one argument, else a sequence), the procedure differentiates inside dlam (to first
        order). An exception fn or vjp raises becomes a dlam error at the call, and comes back
        to Python as a dlam.RuntimeError whose __cause__ is the exception."""
        if not callable(fn) or (vjp is not None and not callable(vjp)):
            raise TypeError("dlam: register needs callables")
        if not isinstance(name, str):
            raise TypeError("dlam: the name must be a str")
        self._handle()
        primal = "%" + name + "-primal"
        self._define_host(primal, fn)
        if vjp is None:
            self._define_host(name, fn)
            return
        back = "%" + name + "-vjp"
        try:
            arity = len(_inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            arity = 1
        self._define_host(back, lambda *a: _sensitivities(vjp(*a), arity))
        params = " ".join("x%d" % i for i in range(arity))
        self.eval("(define %s (custom-vjp %s (lambda (%s) (cons (%s %s) (lambda (g) (%s %s g))))))"
                  % (name, primal, params, primal, params, back, params), "register")

    def _define_host(self, name, fn):
        vm_self = self

        def trampoline(vm, argc, argv, result, _ud):
            try:
                args = [vm_self._from_dlam(_dup(vm, argv[i]), True) for i in range(argc)]
                value = fn(*args)
                if value is None:
                    return _OK  # (void)
                keep = []
                h = vm_self._to_dlam(value, keep)
                result[0] = _dup(vm, h)
                for k in keep:
                    _release(vm, k)
                return _OK
            except BaseException as e:  # noqa: B902 (everything goes back to dlam)
                vm_self._pending.append(e)
                _set_error(vm, _host_error(e).encode("utf-8", "replace"))
                return _RUNTIME

        cb = _HOST(trampoline)
        self._host[name] = cb
        st = _register(self._handle(), name.encode(), -1, cb, None)
        if st != _OK:
            self._raise(st)


def _host_error(e):
    """The message of the dlam error a Python exception raised in a host function becomes."""
    return "%s: %s" % (type(e).__name__, e)


def _sensitivities(s, arity):
    """What a vjp returned as custom-vjp's backpropagator gives it back: the sensitivity of
    a function of one argument, the list of them for several."""
    if arity == 1:
        return s
    return list(s)
