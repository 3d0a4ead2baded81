/* _core.c — the part of the dlam Python package written in C: the type dlam.Value (a handle
** to a dlam value) and the base of dlam.VM (which holds the dlam_vm pointer where this code
** reads it). Calling a Value with numbers crosses into libdlam in one C call
** (dlam_call_numbers), with the GIL released while dlam runs: that is the path whose cost a
** host pays per call. Every other call goes to the Python side (dlam/__init__.py: VM.call,
** the conversions, the errors), which uses ctypes.
**
** This module links against nothing but Python: dlam/__init__.py gives it (bind) the
** addresses of the few dlam_* functions it calls, taken from the libdlam that ctypes loaded,
** so both sides always talk to one and the same copy of the library. dlam.h (the C API) is
** the only contract it relies on. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "dlam.h"

/* ---- the library's functions (bind) ----------------------------------------------------- */

typedef dlam_status (*call_numbers_fn)(dlam_vm *, dlam_val, int, const double *, double *,
                                       dlam_val *);
typedef void (*release_fn)(dlam_vm *, dlam_val);

static call_numbers_fn call_numbers;
static release_fn release;

/* ---- VMBase ----------------------------------------------------------------------------- */

/* The base of dlam.VM. `vm` is the dlam_vm (NULL once closed); `running` counts the calls
** into dlam in progress (nested ones too), so that close() can refuse meanwhile; `pending`
** holds the Python exceptions host functions raised during the current outermost call, for
** VM._raise to chain to the dlam error they caused (emptied when an outermost call starts).
** `deferred` holds the handles of Values that died while dlam was running: the garbage
** collector may free a Value on any Python thread, also while another thread runs the VM
** with the GIL released, and the VM must not be touched meanwhile; they are released when
** the outermost call ends. */
typedef struct {
  PyObject ob_base; /* (PyObject_HEAD) */
  dlam_vm *vm;
  long running;
  PyObject *pending;
  dlam_val *deferred;
  size_t ndeferred, cdeferred;
} VMBaseObject;

static PyObject *vmbase_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  (void)args;
  (void)kwds;
  VMBaseObject *self = (VMBaseObject *)type->tp_alloc(type, 0);
  if (!self) return NULL;
  self->pending = PyList_New(0);
  if (!self->pending) {
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject *)self;
}

static int vmbase_traverse(VMBaseObject *self, visitproc visit, void *arg) {
  Py_VISIT(self->pending);
  return 0;
}

static int vmbase_clear(VMBaseObject *self) {
  Py_CLEAR(self->pending);
  return 0;
}

static void vmbase_dealloc(VMBaseObject *self) {
  PyObject_GC_UnTrack(self);
  Py_CLEAR(self->pending);
  PyMem_Free(self->deferred);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Releases handle h of this VM: now if no call into dlam is in progress, else when the
** outermost one ends (see `deferred`). */
static void vmbase_release(VMBaseObject *self, dlam_val h) {
  if (!self->vm || !release) return;
  if (self->running == 0) {
    release(self->vm, h);
    return;
  }
  if (self->ndeferred == self->cdeferred) {
    size_t cap = self->cdeferred ? 2 * self->cdeferred : 16;
    dlam_val *p = PyMem_Realloc(self->deferred, cap * sizeof *p);
    if (!p) return; /* out of memory: the value then lives as long as the VM */
    self->deferred = p;
    self->cdeferred = cap;
  }
  self->deferred[self->ndeferred++] = h;
}

/* A call into dlam starts: count it; an outermost one forgets the exceptions of earlier calls. */
static int vmbase_start(VMBaseObject *self) {
  if (self->running++ == 0 && self->pending && PyList_GET_SIZE(self->pending) > 0)
    return PyList_SetSlice(self->pending, 0, PyList_GET_SIZE(self->pending), NULL);
  return 0;
}

/* A call into dlam ended (the GIL held again): the outermost one releases the handles of
** the Values that died meanwhile. */
static void vmbase_finish(VMBaseObject *self) {
  if (--self->running > 0 || self->ndeferred == 0) return;
  size_t n = self->ndeferred;
  self->ndeferred = 0;
  for (size_t i = 0; i < n; ++i) vmbase_release(self, self->deferred[i]);
}

static PyObject *vmbase_get_vm(VMBaseObject *self, void *closure) {
  (void)closure;
  if (!self->vm) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(self->vm);
}

static int vmbase_set_vm(VMBaseObject *self, PyObject *value, void *closure) {
  (void)closure;
  if (!value || value == Py_None) {
    self->vm = NULL;
    self->ndeferred = 0; /* (their values went with the VM) */
    return 0;
  }
  void *p = PyLong_AsVoidPtr(value);
  if (!p && PyErr_Occurred()) return -1;
  self->vm = (dlam_vm *)p;
  return 0;
}

static PyObject *vmbase_get_running(VMBaseObject *self, void *closure) {
  (void)closure;
  return PyLong_FromLong(self->running);
}

static PyObject *vmbase_get_deferred(VMBaseObject *self, void *closure) {
  (void)closure;
  return PyLong_FromSize_t(self->ndeferred);
}

static PyGetSetDef vmbase_getset[] = {
    {"_vm", (getter)vmbase_get_vm, (setter)vmbase_set_vm,
     "the dlam_vm pointer (an int), or None once closed", NULL},
    {"_running", (getter)vmbase_get_running, NULL, "calls into dlam in progress", NULL},
    {"_deferred", (getter)vmbase_get_deferred, NULL,
     "handles of dead Values waiting for the running call to end", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyObject *vmbase_enter(VMBaseObject *self, PyObject *unused) {
  (void)unused;
  if (vmbase_start(self) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *vmbase_leave(VMBaseObject *self, PyObject *unused) {
  (void)unused;
  vmbase_finish(self);
  Py_RETURN_NONE;
}

static PyMethodDef vmbase_methods[] = {
    {"_enter", (PyCFunction)vmbase_enter, METH_NOARGS, "a call into dlam starts"},
    {"_leave", (PyCFunction)vmbase_leave, METH_NOARGS, "a call into dlam ended"},
    {NULL, NULL, 0, NULL}};

static PyMemberDef vmbase_members[] = {
    {"_pending", T_OBJECT, offsetof(VMBaseObject, pending), READONLY,
     "the exceptions host functions raised during the current call"},
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject VMBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dlam._core.VMBase",
    .tp_basicsize = sizeof(VMBaseObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C part of dlam.VM: the dlam_vm pointer.",
    .tp_getset = vmbase_getset,
    .tp_methods = vmbase_methods,
    .tp_members = vmbase_members,
    .tp_new = vmbase_new,
    .tp_dealloc = (destructor)vmbase_dealloc,
    .tp_traverse = (traverseproc)vmbase_traverse,
    .tp_clear = (inquiry)vmbase_clear,
};

/* ---- Value ------------------------------------------------------------------------------- */

/* At most this many numbers go through the direct path; more go through VM.call. */
#define FAST_ARGS 8

typedef struct {
  PyObject ob_base; /* (PyObject_HEAD) */
  PyObject *vm;     /* the dlam.VM (a VMBase) */
  dlam_val h;       /* NULL once released */
  vectorcallfunc vectorcall;
  PyObject *weakrefs;
} ValueObject;

static PyTypeObject ValueType;

/* The dlam_vm of a Value: NULL once its VM is closed (or after tp_clear). */
static dlam_vm *vm_of(ValueObject *v) { return v->vm ? ((VMBaseObject *)v->vm)->vm : NULL; }

static PyObject *value_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  PyObject *vm, *handle;
  static char *keywords[] = {"vm", "handle", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O:Value", keywords, &VMBaseType, &vm, &handle))
    return NULL;
  void *h = PyLong_AsVoidPtr(handle);
  if (!h) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "dlam.Value: the handle is NULL");
    return NULL;
  }
  ValueObject *self = (ValueObject *)type->tp_alloc(type, 0);
  if (!self) return NULL;
  Py_INCREF(vm);
  self->vm = vm;
  self->h = (dlam_val)h;
  return (PyObject *)self;
}

static void value_release_handle(ValueObject *self) {
  dlam_val h = self->h;
  self->h = NULL;
  if (h && self->vm) vmbase_release((VMBaseObject *)self->vm, h);
}

static void value_dealloc(ValueObject *self) {
  PyObject_GC_UnTrack(self);
  if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
  value_release_handle(self);
  Py_CLEAR(self->vm);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int value_traverse(ValueObject *self, visitproc visit, void *arg) {
  Py_VISIT(self->vm);
  return 0;
}

static int value_clear(ValueObject *self) {
  value_release_handle(self);
  Py_CLEAR(self->vm);
  return 0;
}

/* The general path: vm.call(self, *args, **kwargs). */
static PyObject *value_call_slow(ValueObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
  if (!self->vm) {
    PyErr_SetString(PyExc_RuntimeError, "dlam.Value: no VM");
    return NULL;
  }
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  PyObject *stack[2 + FAST_ARGS];
  PyObject **all = stack;
  if (n + nk + 2 > 2 + FAST_ARGS) {
    all = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n + nk + 2));
    if (!all) return PyErr_NoMemory();
  }
  PyObject *name = PyUnicode_FromString("call");
  PyObject *r = NULL;
  if (name) {
    all[0] = self->vm;
    all[1] = (PyObject *)self;
    for (Py_ssize_t i = 0; i < n + nk; ++i) all[2 + i] = args[i];
    r = PyObject_VectorcallMethod(name, all, (size_t)(n + 2), kwnames);
    Py_DECREF(name);
  }
  if (all != stack) PyMem_Free(all);
  return r;
}

/* vm._raise(status): raises the exception of the status (and returns NULL). */
static PyObject *raise_status(PyObject *vm, int status) {
  PyObject *r = PyObject_CallMethod(vm, "_raise", "i", status);
  Py_XDECREF(r);
  if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "dlam: _raise did not raise");
  return NULL;
}

/* Calling a Value: numbers in, a number out, in one call into libdlam with the GIL released
** (a host function it calls takes the GIL back). Anything else: VM.call. */
static PyObject *value_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
  ValueObject *self = (ValueObject *)callable;
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (kwnames || n > FAST_ARGS || !self->h || !self->vm || !vm_of(self) || !call_numbers)
    return value_call_slow(self, args, nargsf, kwnames);
  double x[FAST_ARGS];
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *a = args[i];
    if (PyFloat_Check(a)) { /* a float, or a subclass such as numpy.float64 */
      x[i] = PyFloat_AS_DOUBLE(a);
    } else if (PyLong_CheckExact(a)) { /* an int (a bool is dlam's #t or #f) */
      x[i] = PyLong_AsDouble(a);
      if (x[i] == -1.0 && PyErr_Occurred()) { /* too big for a double: VM.call says so */
        PyErr_Clear();
        return value_call_slow(self, args, nargsf, kwnames);
      }
    } else {
      return value_call_slow(self, args, nargsf, kwnames);
    }
  }
  VMBaseObject *vm = (VMBaseObject *)self->vm;
  double out = 0;
  dlam_val r = NULL;
  dlam_status st;
  /* The Value and its VM stay alive: the caller holds references to both. */
  Py_INCREF(self);
  if (vmbase_start(vm) < 0) {
    vmbase_finish(vm);
    Py_DECREF(self);
    return NULL;
  }
  PyThreadState *ts = PyEval_SaveThread();
  st = call_numbers(vm->vm, self->h, (int)n, x, &out, &r);
  PyEval_RestoreThread(ts);
  /* The result (or the error's message) first: releasing deferred handles clears the error. */
  PyObject *result;
  if (st != DLAM_OK)
    result = raise_status(self->vm, (int)st);
  else if (!r)
    result = PyFloat_FromDouble(out);
  else
    result = PyObject_CallMethod(self->vm, "_from_dlam", "NO", PyLong_FromVoidPtr(r), Py_True);
  vmbase_finish(vm);
  Py_DECREF(self);
  return result;
}

static PyObject *value_release(ValueObject *self, PyObject *unused) {
  (void)unused;
  value_release_handle(self);
  Py_RETURN_NONE;
}

static PyObject *value_show(ValueObject *self, int display) {
  if (!self->h) return PyUnicode_FromString("<dlam.Value released>");
  if (!vm_of(self)) return PyUnicode_FromString("<dlam.Value of a closed VM>");
  PyObject *s = PyObject_CallMethod(self->vm, "_show", "NO", PyLong_FromVoidPtr(self->h),
                                    display ? Py_True : Py_False);
  if (!s || display) return s;
  PyObject *r = PyUnicode_FromFormat("<dlam.Value %U>", s);
  Py_DECREF(s);
  return r;
}

static PyObject *value_repr(ValueObject *self) { return value_show(self, 0); }
static PyObject *value_str(ValueObject *self) { return value_show(self, 1); }

static PyObject *value_get_h(ValueObject *self, void *closure) {
  (void)closure;
  if (!self->h) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(self->h);
}

static PyObject *value_get_vm(ValueObject *self, void *closure) {
  (void)closure;
  if (!self->vm) Py_RETURN_NONE;
  Py_INCREF(self->vm);
  return self->vm;
}

static PyGetSetDef value_getset[] = {
    {"_h", (getter)value_get_h, NULL, "the dlam_val handle (an int), or None once released", NULL},
    {"_vm", (getter)value_get_vm, NULL, "the dlam.VM this value belongs to", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef value_methods[] = {
    {"release", (PyCFunction)value_release, METH_NOARGS,
     "Lets the VM collect the value now; the Value must not be used again."},
    {NULL, NULL, 0, NULL}};

static PyObject *value_alloc(PyTypeObject *type, Py_ssize_t n) {
  PyObject *o = PyType_GenericAlloc(type, n);
  if (o) ((ValueObject *)o)->vectorcall = value_vectorcall;
  return o;
}

static PyTypeObject ValueType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dlam.Value",
    .tp_basicsize = sizeof(ValueObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc =
        "A dlam value the package does not convert (a procedure, a symbol...), kept\n"
        "alive by the VM until this object goes. Calling it calls the dlam procedure.",
    .tp_new = value_new,
    .tp_alloc = value_alloc,
    .tp_dealloc = (destructor)value_dealloc,
    .tp_traverse = (traverseproc)value_traverse,
    .tp_clear = (inquiry)value_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(ValueObject, vectorcall),
    .tp_weaklistoffset = offsetof(ValueObject, weakrefs),
    .tp_repr = (reprfunc)value_repr,
    .tp_str = (reprfunc)value_str,
    .tp_getset = value_getset,
    .tp_methods = value_methods,
};

/* ---- the module ---------------------------------------------------------------------------- */

static PyObject *core_bind(PyObject *module, PyObject *args) {
  (void)module;
  PyObject *a, *b;
  if (!PyArg_ParseTuple(args, "OO:bind", &a, &b)) return NULL;
  void *pa = PyLong_AsVoidPtr(a), *pb = PyLong_AsVoidPtr(b);
  if (PyErr_Occurred()) return NULL;
  if (!pa || !pb) {
    PyErr_SetString(PyExc_ValueError, "dlam._core.bind: a NULL function");
    return NULL;
  }
  /* Function pointers from data pointers: POSIX guarantees the conversion (dlsym). */
  call_numbers = (call_numbers_fn)(uintptr_t)pa;
  release = (release_fn)(uintptr_t)pb;
  Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
    {"bind", core_bind, METH_VARARGS,
     "bind(dlam_call_numbers, dlam_release): the addresses of the library's functions"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef core_module = {PyModuleDef_HEAD_INIT,
                                         "dlam._core",
                                         "The C part of the dlam package (see dlam/_core.c).",
                                         -1,
                                         core_methods,
                                         NULL,
                                         NULL,
                                         NULL,
                                         NULL};

PyMODINIT_FUNC PyInit__core(void) {
  if (PyType_Ready(&VMBaseType) < 0 || PyType_Ready(&ValueType) < 0) return NULL;
  PyObject *m = PyModule_Create(&core_module);
  if (!m) return NULL;
  Py_INCREF(&VMBaseType);
  Py_INCREF(&ValueType);
  if (PyModule_AddObject(m, "VMBase", (PyObject *)&VMBaseType) < 0 ||
      PyModule_AddObject(m, "Value", (PyObject *)&ValueType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
