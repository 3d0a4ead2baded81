// api.cpp — the C API of dlam.h on top of dlam::VM.
//
// A dlam_vm owns a VM (a subclass that points back at its dlam_vm, so host-function
// trampolines can find it) and a handle table. A handle is not a pointer: it encodes
// a slot index, the slot's generation and a per-VM tag, so a released handle or one
// of another VM is recognised without dereferencing anything. The table is a root of
// the VM's collector (VM::rootProviders).
//
// Every extern "C" function runs its body inside `guarded`, which turns dlam::Error,
// std::bad_alloc and anything else into a dlam_status and dlam_last_error, and resets
// the VM after an error in an outermost call. Nothing throws across the boundary.
//
// A dlam_vm is bound to no thread: the host may call it from any thread, one at a time.
// dlam_interrupt alone may run concurrently with another call: it only sets the VM's
// atomic interrupt flag.
#include "dlam.h"

#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "config_loader.h"
#include "dlam/compiler.h"
#include "dlam/error.h"
#include "dlam/scratch.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"
#include "foreign.h"

static_assert(sizeof(void*) == 8, "dlam handles need 64-bit pointers");

using dlam::ErrorKind;
using dlam::Native;
using dlam::Obj;
using dlam::Value;

namespace {

constexpr uint64_t kIndexBits = 24;
constexpr uint64_t kGenBits = 24;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
constexpr uint64_t kGenMask = (uint64_t{1} << kGenBits) - 1;
constexpr size_t kMaxHandles = kIndexMask;  // index + 1 must fit in kIndexBits
constexpr int kMaxArity = 255;
constexpr size_t kMaxGradientArgs = size_t{1} << 24;
constexpr uint64_t kMinApiGc = 8u << 20;

struct HandleSlot {
  Value v;
  uint32_t gen = 0;
  bool live = false;
  std::vector<size_t> shape;  // an array's sizes as dlam_array_data gave them (while live)
};

struct VmImpl : dlam::VM {
  VmImpl(const dlam::Config& cfg, dlam_vm* owner) : dlam::VM(cfg), owner(owner) {}
  dlam_vm* owner;
};

}  // namespace

struct dlam_vm {
  std::unique_ptr<VmImpl> vm;  // null if the VM could not be built (config error)
  dlam_status brokenStatus = DLAM_OK;
  std::string brokenMessage;

  std::string lastError;
  bool lastErrorLost = false;  // the message could not be stored (out of memory)
  // The most recent failure, for a host function that fails after a nested call failed.
  uint64_t errorSerial = 0;
  ErrorKind lastKind = ErrorKind::Runtime;
  std::string lastMessage;
  // dlam_set_error, for the host function running now.
  std::string hostError;
  bool hostErrorSet = false;

  int exitCode = 0;               // the status of the last (exit [status]) (dlam_exit_code)
  int depth = 0;                  // runs in progress (>0: inside a host function)
  bool ranCode = false;           // an outermost run started since the last recovery
  uint64_t instructionLimit = 0;  // per outermost run; 0: none
  uint64_t apiGcAt = kMinApiGc;

  std::vector<HandleSlot> slots;
  std::vector<uint32_t> freeSlots;
  uint64_t tag = 0;
  // First generation of new slots, different from VM to VM, so that a handle of a
  // freed VM is unlikely to look valid to a new VM that got the same address (tag).
  uint32_t genBase = 0;

  // ---- handles ----
  dlam_val encode(uint32_t idx, uint32_t gen) const {
    uint64_t bits =
        (tag << (kIndexBits + kGenBits)) | (uint64_t(gen & kGenMask) << kIndexBits) | (idx + 1);
    return reinterpret_cast<dlam_val>(static_cast<uintptr_t>(bits));
  }

  dlam_val newHandle(Value v) {
    uint32_t idx;
    if (!freeSlots.empty()) {
      idx = freeSlots.back();
      freeSlots.pop_back();
    } else {
      if (slots.size() >= kMaxHandles)
        throw dlam::Error(ErrorKind::Limit,
                          "too many live handles (" + std::to_string(kMaxHandles) + ")");
      slots.emplace_back();
      slots.back().gen = genBase;
      idx = static_cast<uint32_t>(slots.size() - 1);
    }
    HandleSlot& s = slots[idx];
    s.v = v;
    s.live = true;
    return encode(idx, s.gen);
  }

  // The slot of a valid handle, or nullptr; `why` says what is wrong.
  HandleSlot* lookup(dlam_val h, const char** why) {
    if (!h) {
      *why = "is NULL";
      return nullptr;
    }
    auto bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h));
    if ((bits >> (kIndexBits + kGenBits)) != tag) {
      *why = "is not a handle of this VM (a handle of another VM?)";
      return nullptr;
    }
    uint64_t idx1 = bits & kIndexMask;
    auto gen = static_cast<uint32_t>((bits >> kIndexBits) & kGenMask);
    if (idx1 == 0 || idx1 > slots.size() || !slots[idx1 - 1].live || slots[idx1 - 1].gen != gen) {
      *why = "is a released handle";
      return nullptr;
    }
    return &slots[idx1 - 1];
  }

  Value resolve(dlam_val h, const char* who, const char* what) {
    const char* why = "";
    HandleSlot* s = lookup(h, &why);
    if (!s) throw dlam::Error(ErrorKind::Api, std::string(who) + ": " + what + " " + why);
    return s->v;
  }

  void releaseSlot(HandleSlot* s) {
    s->live = false;
    s->v = Value::nil();
    s->shape = {};
    s->gen = (s->gen + 1) & kGenMask;
    auto idx = static_cast<uint32_t>(s - slots.data());
    freeSlots.push_back(idx);  // may throw bad_alloc: the slot is then just not reused
  }

  // Releases h if it is still valid; true if it was.
  bool tryRelease(dlam_val h) {
    const char* why;
    HandleSlot* s = lookup(h, &why);
    if (!s) return false;
    releaseSlot(s);
    return true;
  }

  void markHandles(std::vector<Obj*>& out) const {
    for (const HandleSlot& s : slots)
      if (s.live && s.v.isObject()) out.push_back(s.v.asObject());
  }

  // ---- errors ----
  dlam_status fail(ErrorKind kind, const dlam::Error* e, const std::string* message) noexcept;
};

namespace {

dlam_status statusOf(ErrorKind k) {
  switch (k) {
    case ErrorKind::Syntax:
      return DLAM_ERR_SYNTAX;
    case ErrorKind::Runtime:
      return DLAM_ERR_RUNTIME;
    case ErrorKind::Limit:
      return DLAM_ERR_LIMIT;
    case ErrorKind::Config:
      return DLAM_ERR_CONFIG;
    case ErrorKind::Api:
      return DLAM_ERR_API;
    case ErrorKind::Exit:
      return DLAM_EXIT;
  }
  return DLAM_ERR_RUNTIME;
}

[[noreturn]] void apiError(const std::string& message) {
  throw dlam::Error(ErrorKind::Api, message);
}

// A tag that differs between VMs alive at the same time (distinct addresses) and is
// never 0, so that no handle is NULL.
uint64_t tagFor(const dlam_vm* D) {
  auto a = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(D));
  uint64_t t = ((a >> 4) ^ (a >> 20) ^ (a >> 36)) & 0xffff;
  return t ? t : 1;
}

}  // namespace

dlam_status dlam_vm::fail(ErrorKind kind, const dlam::Error* e,
                          const std::string* message) noexcept {
  ++errorSerial;
  lastKind = kind;
  if (kind == ErrorKind::Exit && e) exitCode = e->exitCode;
  try {
    if (e && kind == ErrorKind::Exit) {
      lastError = e->message;  // "exit STATUS": not an error, no location
      lastMessage = e->message;
    } else if (e) {
      lastError = e->format();
      lastMessage = e->message;
    } else {
      lastError = dlam::Error(kind, *message).format();
      lastMessage = *message;
    }
    lastErrorLost = false;
  } catch (...) {
    lastError.clear();
    lastMessage.clear();
    lastErrorLost = true;
  }
  // After an error in an outermost call, reset the stack; inside a host function the
  // failed vm.call has already restored it, and the outer run is still going.
  // (recover also collects the garbage a heap-limit error may have left.) Errors of the
  // API itself, outside any run, leave the VM as it was.
  if (depth == 0 && vm && ranCode) {
    ranCode = false;
    try {
      vm->recover();
    } catch (...) {
    }
  }
  return statusOf(kind);
}

namespace {

// Runs body (returning dlam_status) with the API's error handling.
template <class F>
dlam_status guarded(dlam_vm* D, const char* who, F&& body) noexcept {
  if (!D) return DLAM_ERR_API;
  D->lastError.clear();
  D->lastErrorLost = false;
  if (!D->vm) {
    try {
      D->lastError = D->brokenMessage;
    } catch (...) {
      D->lastErrorLost = true;
    }
    return D->brokenStatus;
  }
  try {
    return body();
  } catch (const dlam::Error& e) {
    return D->fail(e.kind, &e, nullptr);
  } catch (const std::bad_alloc&) {
    std::string m = "out of memory";
    return D->fail(ErrorKind::Limit, nullptr, &m);
  } catch (const std::exception& e) {
    std::string m = "internal error";  // (short strings need no allocation)
    try {
      m += std::string(": ") + e.what();
    } catch (...) {
    }
    return D->fail(ErrorKind::Runtime, nullptr, &m);
  } catch (...) {
    std::string m = "internal error";
    return D->fail(ErrorKind::Runtime, nullptr, &m);
  }
}

// A run of dlam code started by the host (or by a host function, nested). The
// instruction limit of the configuration applies to each outermost run.
class RunScope {
 public:
  explicit RunScope(dlam_vm* D) : D_(D) {
    if (D_->depth == 0) {
      D_->ranCode = true;
      dlam::VM& vm = *D_->vm;
      vm.mutableConfig().instructionLimit = D_->instructionLimit;
      vm.startRun();
    }
    ++D_->depth;
  }
  ~RunScope() {
    // A run that ends normally needs no recovery; one that throws is recovered by fail().
    if (--D_->depth == 0 && std::uncaught_exceptions() == exceptions_) D_->ranCode = false;
  }
  RunScope(const RunScope&) = delete;
  RunScope& operator=(const RunScope&) = delete;

 private:
  dlam_vm* D_;
  int exceptions_ = std::uncaught_exceptions();
};

std::string shortShow(dlam::VM& vm, Value v) {
  std::string s = vm.show(v, true);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Collects garbage left by host-side allocations (lists made by the API) when no dlam
// code runs: the interpreter only collects at its own safe points.
void collectForApi(dlam_vm* D, uint64_t needBytes) {
  if (D->depth != 0) return;
  dlam::VM& vm = *D->vm;
  uint64_t live = vm.gcStats().liveBytes;
  uint64_t limit = vm.config().heapLimitMb << 20;
  if (live + needBytes >= D->apiGcAt || (limit && live + needBytes > limit - limit / 8)) {
    vm.collectGarbage();
    D->apiGcAt = std::max<uint64_t>(2 * vm.gcStats().liveBytes, kMinApiGc);
  }
}

// ---- host functions ---------------------------------------------------------------------

dlam_vm* ownerOf(dlam::VM& vm) { return static_cast<VmImpl&>(vm).owner; }

// The argument handles of one host call, released when it ends (unless the host
// released or returned them).
class ArgHandles {
 public:
  explicit ArgHandles(dlam_vm* D) : D_(D) {}
  ~ArgHandles() { releaseAll(); }
  ArgHandles(const ArgHandles&) = delete;
  ArgHandles& operator=(const ArgHandles&) = delete;
  void add(Value v) { handles_.push_back(D_->newHandle(v)); }
  const dlam_val* data() const { return handles_.data(); }
  void releaseAll() noexcept {
    for (dlam_val h : handles_) {
      try {
        D_->tryRelease(h);
      } catch (...) {
      }
    }
    handles_.clear();
  }

 private:
  dlam_vm* D_;
  std::vector<dlam_val> handles_;
};

const char* statusName(dlam_status s) {
  switch (s) {
    case DLAM_OK:
      return "DLAM_OK";
    case DLAM_ERR_SYNTAX:
      return "DLAM_ERR_SYNTAX";
    case DLAM_ERR_RUNTIME:
      return "DLAM_ERR_RUNTIME";
    case DLAM_ERR_LIMIT:
      return "DLAM_ERR_LIMIT";
    case DLAM_ERR_CONFIG:
      return "DLAM_ERR_CONFIG";
    case DLAM_ERR_API:
      return "DLAM_ERR_API";
    case DLAM_EXIT:
      return "DLAM_EXIT";
  }
  return "an unknown status";
}

// Runs a host callback (a C function, which may be C++ that throws): an exception it lets out
// becomes a runtime error naming the host function, raised at the script's call site like any
// other failure, instead of unwinding through the VM as an internal error. (A thread's forced
// unwinding, pthread_cancel, goes on.)
template <class F>
auto callHost(dlam::VM& vm, const char* name, F&& f) -> decltype(f()) {
  std::string what;
  try {
    return f();
  } catch (const abi::__forced_unwind&) {
    throw;
  } catch (const std::exception& e) {
    what = std::string(": ") + e.what();
  } catch (...) {
  }
  vm.runtimeError(std::string(name) + ": the host function threw an exception" + what);
}

// NativeFn of functions registered with dlam_register.
Value hostTrampoline(dlam::VM& vm, Value* args, int nargs) {
  Native* self = vm.callingNative;
  if (!self || !self->hostFn) vm.runtimeError("host function called without its callback");
  dlam_vm* D = ownerOf(vm);
  // Copy the arguments into handles first: a nested call may grow (move) the stack
  // that `args` points into.
  ArgHandles argv(D);
  for (int i = 0; i < nargs; ++i) argv.add(args[i]);
  auto fn = reinterpret_cast<dlam_host_fn>(self->hostFn);
  D->hostErrorSet = false;
  uint64_t serial = D->errorSerial;
  dlam_val result = nullptr;
  // The callee stays on the dlam stack during the call, so `self` stays alive.
  dlam_status st = callHost(vm, self->name, [&] {
    try {
      return fn(D, nargs, argv.data(), &result, self->hostData);
    } catch (...) {
      if (result) D->tryRelease(result);  // a result stored before the throw
      throw;
    }
  });
  if (st == DLAM_OK) {
    Value r = Value::voidValue();
    if (result) {
      const char* why = "";
      auto* s = D->lookup(result, &why);
      if (!s)
        vm.runtimeError(std::string(self->name) + ": the host function returned a handle that " +
                        why);
      r = s->v;
      D->releaseSlot(s);
    }
    return r;
  }
  if (result) D->tryRelease(result);
  argv.releaseAll();
  // A nested run that exited: the exit goes on outwards, unless the host function
  // carried on (returned DLAM_OK).
  if (D->errorSerial != serial && D->lastKind == ErrorKind::Exit) {
    dlam::Error exit(ErrorKind::Exit, "exit " + std::to_string(D->exitCode));
    exit.exitCode = D->exitCode;
    D->hostErrorSet = false;
    throw exit;
  }
  ErrorKind kind = st == DLAM_ERR_LIMIT ? ErrorKind::Limit : ErrorKind::Runtime;
  std::string message;
  if (D->hostErrorSet) {
    message = D->hostError;
  } else if (D->errorSerial != serial) {
    message = D->lastMessage;
    if (D->lastKind == ErrorKind::Limit) kind = ErrorKind::Limit;
  } else {
    message = std::string("host function failed (") + statusName(st) + ")";
  }
  D->hostErrorSet = false;
  message = std::string(self->name) + ": " + message;
  if (kind == ErrorKind::Limit) vm.limitError(message);
  vm.runtimeError(message);
}

// NativeFn of functions registered with dlam_register_numeric.
Value numericTrampoline(dlam::VM& vm, Value* args, int nargs) {
  Native* self = vm.callingNative;
  if (!self || !self->hostFn) vm.runtimeError("host function called without its callback");
  dlam::Scratch<double> xs(static_cast<size_t>(nargs));
  for (int i = 0; i < nargs; ++i) xs[i] = vm.checkNumber(self->name, args, i);
  auto fn = reinterpret_cast<dlam_numeric_fn>(self->hostFn);
  double y = callHost(vm, self->name, [&] { return fn(xs.data(), self->hostData); });
  return Value::numberChecked(y);
}

// Native::vjp of numeric host functions: (x1 .. xn ybar) → the list (x1bar .. xnbar).
Value vjpTrampoline(dlam::VM& vm, Value* args, int nargs) {
  Native* self = vm.callingNative;
  if (!self || self->vjp != vjpTrampoline) {
    // Called by %call-vjp, which is the callingNative and receives (h x1 .. xn ybar):
    // the host function precedes the arguments.
    Value h = args[-1];
    if (!dlam::isNative(h) || dlam::asNative(h)->vjp != vjpTrampoline)
      vm.runtimeError("vjp of a host function called without the function");
    self = dlam::asNative(h);
  }
  int n = nargs - 1;
  // The host's vjp writes `arity` sensitivities: never call it with another count.
  if (n != self->minArgs)
    vm.runtimeError(std::string(self->name) + ": its vjp takes " + std::to_string(self->minArgs) +
                    " arguments and the sensitivity, got " + std::to_string(nargs) + " values");
  Value ybar = args[n];
  if (ybar.isZero()) {
    Value l = Value::nil();
    for (int i = 0; i < n; ++i) l = vm.cons(Value::zero(), l);
    return l;
  }
  if (!ybar.isNumber())
    vm.runtimeError(std::string(self->name) +
                    ": the sensitivity given to its vjp is not a number: " + shortShow(vm, ybar));
  std::vector<double> xs(static_cast<size_t>(n) + 1), xbar(static_cast<size_t>(n) + 1, 0.0);
  for (int i = 0; i < n; ++i) xs[i] = vm.checkNumber(self->name, args, i);
  auto vjp = reinterpret_cast<dlam_numeric_vjp>(self->hostVjp);
  callHost(vm, self->name, [&] { vjp(xs.data(), ybar.asNumber(), xbar.data(), self->hostData); });
  Value l = Value::nil();
  for (int i = n; i > 0; --i) l = vm.cons(Value::numberChecked(xbar[i - 1]), l);
  return l;
}

// Forward mode through a numeric host function with a vjp: its vjp transposed. The
// function is real-valued, so its tangent is ⟨vjp(x, 1), ẋ⟩. First order only, as in
// reverse mode: arguments or tangents that carry a lower tag are an error saying so.
Value vjpForwardRule(dlam::VM& vm, Native* self, const Value* p, const Value* t, int n, Value) {
  bool any = false;
  for (int i = 0; i < n; ++i) {
    if (dlam::isFwd(p[i]) || dlam::isFwd(t[i]) || dlam::isObj(t[i], dlam::ObjType::Rev) ||
        dlam::isObj(p[i], dlam::ObjType::Rev))
      vm.runtimeError(std::string(self->name) +
                      ": nested derivatives through this host function are not supported (its "
                      "vjp is first order)");
    any = any || !t[i].isZero();
  }
  if (!any) return Value::undefined();
  dlam::Scratch<Value> args(static_cast<size_t>(n) + 1);
  for (int i = 0; i < n; ++i) args[i] = p[i];
  args[n] = Value::number(1);
  vm.callingNative = self;
  Value xbar = self->vjp(vm, args.data(), n + 1);
  double ydot = 0;
  for (int i = 0; i < n && dlam::isPair(xbar); ++i, xbar = dlam::asPair(xbar)->cdr) {
    Value s = dlam::asPair(xbar)->car;
    if (!t[i].isZero() && s.isNumber())
      ydot += s.asNumber() * vm.checkNumber(self->name, const_cast<Value*>(t), i);
  }
  return Value::numberChecked(ydot);
}

// Forward mode through a numeric host function without a derivative: the error that
// reverse mode gives.
Value noDerivativeRule(dlam::VM& vm, Native* self, const Value*, const Value*, int, Value) {
  vm.runtimeError(std::string(self->name) +
                  ": has no derivative, so it cannot be used in differentiated code (register "
                  "the host function with a vjp, or attach one with custom-vjp)");
}

Native* makeHostNative(dlam::VM& vm, const char* name, dlam::NativeFn fn, int arity) {
  Native* n = vm.makeNative("", fn, arity < 0 ? 0 : arity, arity);
  n->ownedName = name;
  n->name = n->ownedName.c_str();
  return n;
}

double sensitivity(dlam::VM& vm, Value v, size_t i) {
  if (v.isNumber()) return v.asNumber();
  if (v.isZero()) return 0.0;
  throw dlam::Error(ErrorKind::Runtime, "dlam_value_and_gradient: the sensitivity of argument " +
                                            std::to_string(i + 1) +
                                            " is not a number: " + shortShow(vm, v));
}

// ---- dlam_config ------------------------------------------------------------------------

const char* const kDefaultIncludePath[] = {"."};
const char* const kNoLibraries[] = {nullptr};  // an empty allow-list (not NULL: any)

// What dlam_config_load_lua read: its strings, and the error of the last load that failed.
struct LoadedConfig {
  std::vector<std::string> includePath, ffiLibraries;
  std::vector<const char*> includePtrs, ffiPtrs;
  std::string error;
};

[[noreturn]] void configError(const std::string& message) {
  throw dlam::Error(ErrorKind::Config, "dlam_config: " + message);
}

std::vector<std::string> configStrings(const char* field, const char* const* xs, size_t n) {
  if (n > 0 && !xs)
    configError(std::string(field) + " is NULL and " + field + "_len is " + std::to_string(n));
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    if (!xs[i]) configError(std::string(field) + "[" + std::to_string(i) + "] is NULL");
    out.emplace_back(xs[i]);
  }
  return out;
}

void configFlag(const char* field, int v) {
  if (v != 0 && v != 1)
    configError(std::string(field) + " must be 0 or 1, got " + std::to_string(v));
}

// The settings of a dlam_config, checked (DLAM_ERR_CONFIG naming the field).
dlam::Config configFromStruct(const dlam_config& c) {
  dlam::Config cfg;
  if (c.heap_limit_mb < 1 || c.heap_limit_mb > (size_t{1} << 40))
    configError("heap_limit_mb must be from 1 to 2^40, got " + std::to_string(c.heap_limit_mb));
  if (c.stack_limit < 1 || c.stack_limit > 0xffffffffull)
    configError("stack_limit must be from 1 to 2^32 - 1, got " + std::to_string(c.stack_limit));
  if (c.instruction_limit > uint64_t(INT64_MAX))
    configError("instruction_limit must be at most 2^63 - 1, got " +
                std::to_string(c.instruction_limit));
  configFlag("ffi_enabled", c.ffi_enabled);
  configFlag("file_io", c.file_io);
  if (c.blas_threads < 0 || c.blas_threads > 256)
    configError("blas_threads must be from 1 to 256 (0: 1), got " + std::to_string(c.blas_threads));
  if (!c.write && c.write_ud) configError("write_ud is set but write is NULL");
  cfg.heapLimitMb = c.heap_limit_mb;
  cfg.stackLimit = c.stack_limit;
  cfg.instructionLimit = c.instruction_limit;
  cfg.includePath = configStrings("include_path", c.include_path, c.include_path_len);
  cfg.ffiEnabled = c.ffi_enabled != 0;
  cfg.fileIo = c.file_io != 0;
  cfg.blasThreads = c.blas_threads ? static_cast<uint32_t>(c.blas_threads) : 1;
  if (c.ffi_libraries)
    cfg.ffiLibraries = configStrings("ffi_libraries", c.ffi_libraries, c.ffi_libraries_len);
  else if (c.ffi_libraries_len)
    configError("ffi_libraries is NULL (any library) and ffi_libraries_len is " +
                std::to_string(c.ffi_libraries_len));
  return cfg;
}

// Stores a checked configuration back into a dlam_config, its strings owned by `into`.
void configToStruct(const dlam::Config& cfg, dlam_config& c, LoadedConfig& into) {
  into.includePath = cfg.includePath;
  into.includePtrs.clear();
  for (const auto& p : into.includePath) into.includePtrs.push_back(p.c_str());
  into.ffiPtrs.clear();
  if (cfg.ffiLibraries) {
    into.ffiLibraries = *cfg.ffiLibraries;
    for (const auto& p : into.ffiLibraries) into.ffiPtrs.push_back(p.c_str());
  }
  c.heap_limit_mb = cfg.heapLimitMb;
  c.stack_limit = cfg.stackLimit;
  c.instruction_limit = cfg.instructionLimit;
  c.include_path = into.includePtrs.data();
  c.include_path_len = into.includePtrs.size();
  c.ffi_enabled = cfg.ffiEnabled ? 1 : 0;
  c.file_io = cfg.fileIo ? 1 : 0;
  c.blas_threads = static_cast<int>(cfg.blasThreads);
  c.ffi_libraries =
      cfg.ffiLibraries ? (into.ffiPtrs.empty() ? kNoLibraries : into.ffiPtrs.data()) : nullptr;
  c.ffi_libraries_len = into.ffiPtrs.size();
}

}  // namespace

// ---- the C API --------------------------------------------------------------------------

namespace {

// dlam_new and dlam_new_with: the configuration comes from the file at `path`, or from
// `c` (which also gives the write callback), or is the default.
dlam_vm* newVm(const char* config_lua_path, const dlam_config* c) {
  try {
    auto D = std::make_unique<dlam_vm>();
    D->tag = tagFor(D.get());
    D->genBase = static_cast<uint32_t>(
        (static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) *
             2654435761u >>
         16) &
        kGenMask);
    dlam::Config cfg;  // an embedded VM: foreign calls off unless the config turns them on
    try {
      if (c)
        cfg = configFromStruct(*c);
      else if (config_lua_path)
        dlam::loadConfigFile(config_lua_path, cfg);
      // The instruction limit is per run (RunScope); the standard library loads without it.
      D->instructionLimit = cfg.instructionLimit;
      cfg.instructionLimit = 0;
      D->vm = std::make_unique<VmImpl>(cfg, D.get());
      if (c && c->write) {
        auto write = c->write;
        void* ud = c->write_ud;
        D->vm->output = [write, ud](std::string_view s) { write(ud, 1, s.data(), s.size()); };
        D->vm->errorOutput = [write, ud](std::string_view s) { write(ud, 2, s.data(), s.size()); };
      }
      dlam_vm* raw = D.get();
      D->vm->rootProviders.push_back([raw](std::vector<Obj*>& out) { raw->markHandles(out); });
      dlam::openStdlib(*D->vm);
      dlam::openForeign(*D->vm);
    } catch (const dlam::Error& e) {
      // Out of memory (loading the standard library): NULL, like any failed allocation here.
      if (e.kind == ErrorKind::Limit && e.message == "out of memory") return nullptr;
      // Unusable VM: every call reports this error (see dlam_new in dlam.h).
      D->vm.reset();
      D->brokenStatus = statusOf(e.kind);
      D->brokenMessage = e.format();
      D->lastError = D->brokenMessage;
    }
    return D.release();
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

extern "C" {

dlam_vm* dlam_new(const char* config_lua_path) { return newVm(config_lua_path, nullptr); }

dlam_vm* dlam_new_with(const dlam_config* cfg) {
  if (cfg) return newVm(nullptr, cfg);
  dlam_config defaults;
  dlam_config_init(&defaults);
  return newVm(nullptr, &defaults);
}

void dlam_config_init(dlam_config* cfg) {
  if (!cfg) return;
  dlam::Config d;
  std::memset(static_cast<void*>(cfg), 0, sizeof *cfg);
  cfg->heap_limit_mb = d.heapLimitMb;
  cfg->stack_limit = d.stackLimit;
  cfg->instruction_limit = d.instructionLimit;
  cfg->include_path = kDefaultIncludePath;
  cfg->include_path_len = 1;
  cfg->ffi_enabled = d.ffiEnabled ? 1 : 0;
  cfg->blas_threads = static_cast<int>(d.blasThreads);
}

dlam_status dlam_config_load_lua(dlam_config* cfg, const char* path) {
  if (!cfg) return DLAM_ERR_API;
  auto* loaded = static_cast<LoadedConfig*>(cfg->loaded_);
  try {
    if (!loaded) {
      loaded = new LoadedConfig;
      cfg->loaded_ = loaded;
    }
    loaded->error.clear();
    if (!path) {
      loaded->error = "error: dlam_config_load_lua: path is NULL";
      return DLAM_ERR_API;
    }
    dlam::Config c;
    try {
      c = configFromStruct(*cfg);
    } catch (const dlam::Error& e) {
      loaded->error = e.format();
      return DLAM_ERR_API;
    }
    try {
      dlam::loadConfigFile(path, c);
    } catch (const dlam::Error& e) {
      loaded->error = e.format();
      return statusOf(e.kind);
    }
    // The strings go into a new store first: cfg may point into the old one.
    auto fresh = std::make_unique<LoadedConfig>();
    configToStruct(c, *cfg, *fresh);
    delete loaded;
    cfg->loaded_ = fresh.release();
    return DLAM_OK;
  } catch (...) {
    if (loaded) loaded->error.clear();
    return DLAM_ERR_LIMIT;  // out of memory
  }
}

const char* dlam_config_error(const dlam_config* cfg) {
  if (!cfg) return "error: dlam_config_error: the config is NULL";
  auto* loaded = static_cast<const LoadedConfig*>(cfg->loaded_);
  return loaded ? loaded->error.c_str() : "";
}

void dlam_config_free(dlam_config* cfg) {
  if (!cfg || !cfg->loaded_) return;
  auto* loaded = static_cast<LoadedConfig*>(cfg->loaded_);
  // Pointers into the strings it holds go back to the defaults; the host's own stay.
  if (cfg->include_path == loaded->includePtrs.data()) {
    cfg->include_path = kDefaultIncludePath;
    cfg->include_path_len = 1;
  }
  if (cfg->ffi_libraries == loaded->ffiPtrs.data() || cfg->ffi_libraries == kNoLibraries) {
    cfg->ffi_libraries = nullptr;
    cfg->ffi_libraries_len = 0;
  }
  delete loaded;
  cfg->loaded_ = nullptr;
}

void dlam_free(dlam_vm* vm) {
  if (!vm) return;
  // Any thread may free a VM (its arena is bound to no thread).
  vm->vm.reset();
  delete vm;
}

int dlam_exit_code(dlam_vm* vm) { return vm ? vm->exitCode : 0; }

const char* dlam_last_error(dlam_vm* vm) {
  if (!vm) return "error: dlam_last_error: the VM is NULL";
  if (vm->lastErrorLost) return "error: out of memory";
  return vm->lastError.c_str();
}

void dlam_interrupt(dlam_vm* vm) {
  if (vm && vm->vm) vm->vm->interrupt();
}

dlam_status dlam_eval(dlam_vm* vm, const char* source, const char* chunk_name, dlam_val* result) {
  if (result) *result = nullptr;
  return guarded(vm, "dlam_eval", [&] {
    if (!source) apiError("dlam_eval: source is NULL");
    RunScope run(vm);
    Value v = dlam::evalSource(*vm->vm, source, chunk_name ? chunk_name : "<eval>");
    if (result) *result = vm->newHandle(v);
    return DLAM_OK;
  });
}

dlam_status dlam_run_file(dlam_vm* vm, const char* path, dlam_val* result) {
  if (result) *result = nullptr;
  return guarded(vm, "dlam_run_file", [&] {
    if (!path) apiError("dlam_run_file: path is NULL");
    RunScope run(vm);
    Value v = dlam::evalFile(*vm->vm, path);
    if (result) *result = vm->newHandle(v);
    return DLAM_OK;
  });
}

dlam_val dlam_get_global(dlam_vm* vm, const char* name) {
  dlam_val out = nullptr;
  guarded(vm, "dlam_get_global", [&] {
    if (!name) apiError("dlam_get_global: name is NULL");
    Value v = vm->vm->global(name);
    if (!v.isUndefined()) out = vm->newHandle(v);
    return DLAM_OK;
  });
  return out;
}

dlam_status dlam_set_global(dlam_vm* vm, const char* name, dlam_val value) {
  return guarded(vm, "dlam_set_global", [&] {
    if (!name) apiError("dlam_set_global: name is NULL");
    Value v = vm->resolve(value, "dlam_set_global", "the value");
    vm->vm->defineGlobal(name, v);
    return DLAM_OK;
  });
}

dlam_status dlam_call(dlam_vm* vm, dlam_val fn, int argc, const dlam_val* argv, dlam_val* result) {
  if (result) *result = nullptr;
  return guarded(vm, "dlam_call", [&] {
    if (argc < 0) apiError("dlam_call: argc is negative");
    if (argc > 0 && !argv) apiError("dlam_call: argv is NULL");
    Value f = vm->resolve(fn, "dlam_call", "the procedure");
    dlam::Scratch<Value> args(static_cast<size_t>(argc));
    for (int i = 0; i < argc; ++i) {
      const char* why = "";
      HandleSlot* s = vm->lookup(argv[i], &why);
      if (!s) apiError("dlam_call: argument " + std::to_string(i + 1) + " " + why);
      args[i] = s->v;
    }
    RunScope run(vm);
    // The arguments are in handles (rooted) and vm.call copies them to the stack.
    Value r = vm->vm->call(f, args.data(), argc);
    if (result) *result = vm->newHandle(r);
    return DLAM_OK;
  });
}

dlam_status dlam_call_numbers(dlam_vm* vm, dlam_val fn, int argc, const double* x, double* out,
                              dlam_val* result) {
  if (result) *result = nullptr;
  return guarded(vm, "dlam_call_numbers", [&] {
    if (argc < 0) apiError("dlam_call_numbers: argc is negative");
    if (argc > 0 && !x) apiError("dlam_call_numbers: x is NULL");
    if (!out) apiError("dlam_call_numbers: out is NULL");
    Value f = vm->resolve(fn, "dlam_call_numbers", "the procedure");
    dlam::Scratch<Value> args(static_cast<size_t>(argc));
    for (int i = 0; i < argc; ++i) args[i] = Value::numberChecked(x[i]);
    RunScope run(vm);
    Value r = vm->vm->call(f, args.data(), argc);
    if (result) *result = nullptr;  // (again: a nested call may have used the same variable)
    if (r.isNumber()) {
      *out = r.asNumber();
    } else if (r.isZero()) {
      *out = 0.0;
    } else {
      if (!result) apiError("dlam_call_numbers: the result is not a number and result is NULL");
      *result = vm->newHandle(r);
    }
    return DLAM_OK;
  });
}

dlam_val dlam_number(dlam_vm* vm, double x) {
  dlam_val out = nullptr;
  guarded(vm, "dlam_number", [&] {
    out = vm->newHandle(Value::numberChecked(x));
    return DLAM_OK;
  });
  return out;
}

dlam_val dlam_list_of_numbers(dlam_vm* vm, const double* xs, size_t n) {
  dlam_val out = nullptr;
  guarded(vm, "dlam_list_of_numbers", [&] {
    if (n > 0 && !xs) apiError("dlam_list_of_numbers: xs is NULL");
    collectForApi(vm, n * sizeof(dlam::Pair));
    dlam::VM& v = *vm->vm;
    // Allocation never collects, so the partial list needs no root.
    Value l = Value::nil();
    for (size_t i = n; i > 0; --i) l = v.cons(Value::numberChecked(xs[i - 1]), l);
    out = vm->newHandle(l);
    return DLAM_OK;
  });
  return out;
}

dlam_val dlam_vector_of_numbers(dlam_vm* vm, const double* xs, size_t n) {
  dlam_val out = nullptr;
  guarded(vm, "dlam_vector_of_numbers", [&] {
    if (n > 0 && !xs) apiError("dlam_vector_of_numbers: xs is NULL");
    if (n > (size_t{1} << 30)) apiError("dlam_vector_of_numbers: n is more than 2^30");
    collectForApi(vm, sizeof(dlam::Vector) + n * sizeof(double));
    dlam::Vector* v = vm->vm->makeVector(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) v->items[i] = Value::numberChecked(xs[i]).asNumber();
    out = vm->newHandle(Value::object(v));
    return DLAM_OK;
  });
  return out;
}

namespace {
// The sizes of an array for the C API, checked: rank >= 1, each product within 2^30.
// (Given back through s: a function in the extern "C" block returns no C++ type.)
void apiShape(const char* who, size_t rank, const size_t* shape, std::vector<uint32_t>& s) {
  if (rank == 0) apiError(std::string(who) + ": rank must be at least 1");
  if (!shape) apiError(std::string(who) + ": shape is NULL");
  if (rank > 64) apiError(std::string(who) + ": rank " + std::to_string(rank) + " is more than 64");
  s.assign(rank, 0);
  uint64_t n = 1;
  for (size_t i = 0; i < rank; ++i) {
    if (shape[i] > dlam::VM::kMaxArrayElements || (n *= shape[i]) > dlam::VM::kMaxArrayElements)
      apiError(std::string(who) + ": the array has more than 2^30 elements");
    s[i] = static_cast<uint32_t>(shape[i]);
  }
}

uint64_t elementCount(const std::vector<uint32_t>& s) {
  uint64_t n = 1;
  for (uint32_t d : s) n *= d;
  return n;
}

dlam::Vector* newArray(dlam_vm* vm, const std::vector<uint32_t>& s, const double* data) {
  uint64_t n = elementCount(s);
  collectForApi(vm, sizeof(dlam::Vector) + n * sizeof(double));
  dlam::Vector* a = vm->vm->makeArray(static_cast<uint32_t>(s.size()), s.data());
  for (uint64_t i = 0; i < n; ++i) a->items[i] = Value::numberChecked(data[i]).asNumber();
  return a;
}
}  // namespace

dlam_val dlam_array_of_numbers(dlam_vm* vm, const double* data, size_t rank, const size_t* shape) {
  dlam_val out = nullptr;
  guarded(vm, "dlam_array_of_numbers", [&] {
    std::vector<uint32_t> s;
    apiShape("dlam_array_of_numbers", rank, shape, s);
    if (elementCount(s) > 0 && !data) apiError("dlam_array_of_numbers: data is NULL");
    out = vm->newHandle(Value::object(newArray(vm, s, data)));
    return DLAM_OK;
  });
  return out;
}

dlam_status dlam_array_data(dlam_vm* vm, dlam_val a, const double** data, size_t* rank,
                            const size_t** shape) {
  return guarded(vm, "dlam_array_data", [&] {
    const char* why = "";
    HandleSlot* s = vm->lookup(a, &why);
    if (!s) apiError(std::string("dlam_array_data: the array ") + why);
    if (!data || !rank || !shape) apiError("dlam_array_data: data, rank or shape is NULL");
    Value x = dlam::unwrapAttached(s->v);
    if (!dlam::isObj(x, dlam::ObjType::Vector))
      throw dlam::Error(ErrorKind::Runtime,
                        "dlam_array_data: expected an array, got " + shortShow(*vm->vm, x));
    auto* v = static_cast<dlam::Vector*>(x.asObject());
    if (dlam::isSparse(v)) {
      // A sparse sensitivity (a gradient): the handle keeps its dense form from now on.
      v = vm->vm->dense(v);
      s->v = Value::object(v);
    }
    const uint32_t* sz = dlam::arrayShape(v);
    s->shape.assign(sz, sz + v->rank);
    *data = v->items;
    *rank = v->rank;
    *shape = s->shape.data();
    return DLAM_OK;
  });
}

dlam_status dlam_to_number(dlam_vm* vm, dlam_val v, double* out) {
  return guarded(vm, "dlam_to_number", [&] {
    Value x = vm->resolve(v, "dlam_to_number", "the value");
    if (!out) apiError("dlam_to_number: out is NULL");
    if (x.isNumber()) {
      *out = x.asNumber();
    } else if (x.isZero()) {
      *out = 0.0;
    } else {
      throw dlam::Error(ErrorKind::Runtime,
                        "dlam_to_number: expected a number, got " + shortShow(*vm->vm, x));
    }
    return DLAM_OK;
  });
}

dlam_status dlam_to_numbers(dlam_vm* vm, dlam_val list, double* out, size_t capacity,
                            size_t* count) {
  if (count) *count = 0;
  return guarded(vm, "dlam_to_numbers", [&] {
    Value l = vm->resolve(list, "dlam_to_numbers", "the list");
    if (capacity > 0 && !out) apiError("dlam_to_numbers: out is NULL");
    if (dlam::isObj(l, dlam::ObjType::Vector)) {
      auto* v = static_cast<dlam::Vector*>(l.asObject());
      uint32_t n = dlam::vectorLength(v);
      if (count) *count = n;
      if (n > capacity)
        apiError("dlam_to_numbers: the vector has " + std::to_string(n) +
                 " elements, more than the capacity " + std::to_string(capacity));
      dlam::denseInto(v, out);
      return DLAM_OK;
    }
    size_t n = 0;
    Value p = l;
    for (; dlam::isPair(p); p = dlam::asPair(p)->cdr) {
      Value x = dlam::asPair(p)->car;
      if (!x.isNumber() && !x.isZero())
        throw dlam::Error(ErrorKind::Runtime, "dlam_to_numbers: element " + std::to_string(n + 1) +
                                                  " is not a number: " + shortShow(*vm->vm, x));
      ++n;
    }
    if (!p.isNil())
      throw dlam::Error(
          ErrorKind::Runtime,
          "dlam_to_numbers: expected a list of numbers or a vector, got " + shortShow(*vm->vm, l));
    if (count) *count = n;
    if (n > capacity)
      apiError("dlam_to_numbers: the list has " + std::to_string(n) +
               " elements, more than the capacity " + std::to_string(capacity));
    size_t i = 0;
    for (p = l; dlam::isPair(p); p = dlam::asPair(p)->cdr) {
      Value x = dlam::asPair(p)->car;
      out[i++] = x.isNumber() ? x.asNumber() : 0.0;
    }
    return DLAM_OK;
  });
}

dlam_val dlam_boolean(dlam_vm* vm, int b) {
  dlam_val out = nullptr;
  guarded(vm, "dlam_boolean", [&] {
    out = vm->newHandle(Value::boolean(b != 0));
    return DLAM_OK;
  });
  return out;
}

int dlam_type_of(dlam_vm* vm, dlam_val v) {
  int type = -1;
  guarded(vm, "dlam_type_of", [&] {
    Value x = vm->resolve(v, "dlam_type_of", "the value");
    if (x.isNumber() || x.isZero())
      type = DLAM_TYPE_NUMBER;
    else if (x.isBool())
      type = DLAM_TYPE_BOOLEAN;
    else if (x.isNil())
      type = DLAM_TYPE_NULL;
    else if (x.isVoid())
      type = DLAM_TYPE_VOID;
    else if (dlam::isPair(x))
      type = DLAM_TYPE_PAIR;
    else if (dlam::isObj(x, dlam::ObjType::Vector))
      type = DLAM_TYPE_VECTOR;
    else if (dlam::isObj(x, dlam::ObjType::String))
      type = DLAM_TYPE_STRING;
    else if (dlam::isObj(x, dlam::ObjType::Symbol))
      type = DLAM_TYPE_SYMBOL;
    else if (dlam::isProcedure(x))
      type = DLAM_TYPE_PROCEDURE;
    else
      type = DLAM_TYPE_OTHER;
    return DLAM_OK;
  });
  return type;
}

dlam_status dlam_to_string(dlam_vm* vm, dlam_val v, int display, char* buf, size_t capacity,
                           size_t* length) {
  if (length) *length = 0;
  return guarded(vm, "dlam_to_string", [&] {
    Value x = vm->resolve(v, "dlam_to_string", "the value");
    if (capacity > 0 && !buf) apiError("dlam_to_string: buf is NULL");
    std::string s = vm->vm->show(x, display == 0);
    if (length) *length = s.size();
    if (s.size() >= capacity)
      apiError("dlam_to_string: the text has " + std::to_string(s.size()) +
               " bytes, more than the capacity " + std::to_string(capacity) + " less its NUL");
    std::memcpy(buf, s.data(), s.size());
    buf[s.size()] = '\0';
    return DLAM_OK;
  });
}

void dlam_release(dlam_vm* vm, dlam_val v) {
  if (!v) return;
  guarded(vm, "dlam_release", [&] {
    const char* why = "";
    auto* s = vm->lookup(v, &why);
    if (!s) apiError(std::string("dlam_release: the handle ") + why);
    vm->releaseSlot(s);
    return DLAM_OK;
  });
}

dlam_val dlam_dup(dlam_vm* vm, dlam_val v) {
  dlam_val out = nullptr;
  guarded(vm, "dlam_dup", [&] {
    Value x = vm->resolve(v, "dlam_dup", "the value");
    out = vm->newHandle(x);
    return DLAM_OK;
  });
  return out;
}

dlam_status dlam_value_and_gradient(dlam_vm* vm, dlam_val fn, size_t n, const double* x,
                                    double* value, double* gradient) {
  return guarded(vm, "dlam_value_and_gradient", [&] {
    const char* who = "dlam_value_and_gradient";
    Value f = vm->resolve(fn, who, "the function");
    if (n > 0 && !x) apiError("dlam_value_and_gradient: x is NULL");
    if (n > 0 && !gradient) apiError("dlam_value_and_gradient: gradient is NULL");
    if (n > kMaxGradientArgs)
      apiError("dlam_value_and_gradient: too many arguments (" + std::to_string(n) + ")");
    dlam::VM& v = *vm->vm;
    if (!dlam::isProcedure(f))
      throw dlam::Error(ErrorKind::Runtime,
                        std::string(who) + ": expected a procedure, got " + shortShow(v, f));
    RunScope run(vm);
    v.gradientBoundary(false);
    // ((*j f) (*j x1) .. (*j xn)) → ((*j y) . backpropagator); (backpropagator 1) → (fbar . xbar).
    dlam::VM::Root jf(v, v.starJ(f));
    std::vector<Value> args(n);
    for (size_t i = 0; i < n; ++i) args[i] = Value::object(v.makeRev(Value::numberChecked(x[i])));
    Value r = v.call(jf.get(), args.data(), static_cast<int>(n));
    if (!dlam::isPair(r))
      throw dlam::Error(ErrorKind::Runtime,
                        std::string(who) + ": the transformed function returned " +
                            shortShow(v, r) + " instead of (value . backpropagator)");
    dlam::VM::Root rr(v, r);
    Value y = v.starJInverse(dlam::asPair(r)->car);
    if (!y.isNumber())
      throw dlam::Error(ErrorKind::Runtime, std::string(who) + ": the function returned " +
                                                shortShow(v, y) + ", not a number");
    Value one = Value::number(1);
    Value s = v.call(dlam::asPair(rr.get())->cdr, &one, 1);
    if (!dlam::isPair(s))
      throw dlam::Error(ErrorKind::Runtime, std::string(who) + ": the backpropagator returned " +
                                                shortShow(v, s) + " instead of (fbar . xbar)");
    Value xbar = dlam::asPair(s)->cdr;
    std::vector<double> g(n, 0.0);
    if (n == 1) {
      g[0] = sensitivity(v, xbar, 0);
    } else if (n >= 2 && !xbar.isZero()) {
      Value p = xbar;
      for (size_t i = 0; i < n; ++i) {
        if (p.isZero()) break;  // a lazily zero tail
        if (!dlam::isPair(p))
          throw dlam::Error(ErrorKind::Runtime, std::string(who) + ": the argument sensitivity " +
                                                    shortShow(v, xbar) + " is not a list of " +
                                                    std::to_string(n));
        g[i] = sensitivity(v, dlam::asPair(p)->car, i);
        p = dlam::asPair(p)->cdr;
      }
    }
    if (value) *value = y.asNumber();
    if (gradient) std::copy(g.begin(), g.end(), gradient);
    v.gradientBoundary(true);
    return DLAM_OK;
  });
}

dlam_status dlam_value_and_gradient_array(dlam_vm* vm, dlam_val fn, const double* x, size_t rank,
                                          const size_t* shape, double* value, double* gradient) {
  return guarded(vm, "dlam_value_and_gradient_array", [&] {
    const char* who = "dlam_value_and_gradient_array";
    Value f = vm->resolve(fn, who, "the function");
    std::vector<uint32_t> s;
    apiShape(who, rank, shape, s);
    uint64_t n = elementCount(s);
    if (n > 0 && !x) apiError("dlam_value_and_gradient_array: x is NULL");
    if (n > 0 && !gradient) apiError("dlam_value_and_gradient_array: gradient is NULL");
    dlam::VM& v = *vm->vm;
    if (!dlam::isProcedure(f))
      throw dlam::Error(ErrorKind::Runtime,
                        std::string(who) + ": expected a procedure, got " + shortShow(v, f));
    RunScope run(vm);
    v.gradientBoundary(false);
    // ((*j f) (*j x)) → ((*j y) . backpropagator); (backpropagator 1) → (fbar . xbar).
    dlam::VM::Root jf(v, v.starJ(f));
    dlam::VM::Root arg(v, Value::object(newArray(vm, s, x)));
    Value jx = v.starJ(arg.get());
    Value r = v.call(jf.get(), &jx, 1);
    if (!dlam::isPair(r))
      throw dlam::Error(ErrorKind::Runtime,
                        std::string(who) + ": the transformed function returned " +
                            shortShow(v, r) + " instead of (value . backpropagator)");
    dlam::VM::Root rr(v, r);
    Value y = v.starJInverse(dlam::asPair(r)->car);
    if (!y.isNumber())
      throw dlam::Error(ErrorKind::Runtime, std::string(who) + ": the function returned " +
                                                shortShow(v, y) + ", not a number");
    Value one = Value::number(1);
    Value sens = v.call(dlam::asPair(rr.get())->cdr, &one, 1);
    if (!dlam::isPair(sens))
      throw dlam::Error(ErrorKind::Runtime, std::string(who) + ": the backpropagator returned " +
                                                shortShow(v, sens) + " instead of (fbar . xbar)");
    Value xbar = dlam::asPair(sens)->cdr;
    if (xbar.isZero()) {
      std::fill(gradient, gradient + n, 0.0);
    } else {
      auto* a = static_cast<dlam::Vector*>(arg.get().asObject());
      if (!dlam::isObj(xbar, dlam::ObjType::Vector) ||
          !dlam::sameShape(static_cast<dlam::Vector*>(xbar.asObject()), a))
        throw dlam::Error(ErrorKind::Runtime, std::string(who) + ": the argument sensitivity " +
                                                  shortShow(v, xbar) +
                                                  " is not an array of the argument's shape");
      dlam::denseInto(static_cast<dlam::Vector*>(xbar.asObject()), gradient);
    }
    if (value) *value = y.asNumber();
    v.gradientBoundary(true);
    return DLAM_OK;
  });
}

dlam_status dlam_register(dlam_vm* vm, const char* name, int arity, dlam_host_fn fn, void* ud) {
  return guarded(vm, "dlam_register", [&] {
    if (!name) apiError("dlam_register: name is NULL");
    if (!fn) apiError("dlam_register: fn is NULL");
    if (arity < -1 || arity > kMaxArity)
      apiError("dlam_register: arity must be -1 (any) or 0.." + std::to_string(kMaxArity) +
               ", got " + std::to_string(arity));
    Native* n = makeHostNative(*vm->vm, name, hostTrampoline, arity);
    n->hostFn = reinterpret_cast<void*>(fn);
    n->hostData = ud;
    // No derivative: lifting it through *j would give silently wrong (zero) gradients.
    n->flags |= dlam::kNoDerivative;
    vm->vm->defineGlobal(name, Value::object(n));
    return DLAM_OK;
  });
}

dlam_status dlam_register_numeric(dlam_vm* vm, const char* name, int arity, dlam_numeric_fn fn,
                                  dlam_numeric_vjp vjp, void* ud) {
  return guarded(vm, "dlam_register_numeric", [&] {
    if (!name) apiError("dlam_register_numeric: name is NULL");
    if (!fn) apiError("dlam_register_numeric: fn is NULL");
    if (arity < 0 || arity > kMaxArity)
      apiError("dlam_register_numeric: arity must be 0.." + std::to_string(kMaxArity) + ", got " +
               std::to_string(arity));
    Native* n = makeHostNative(*vm->vm, name, numericTrampoline, arity);
    n->hostFn = reinterpret_cast<void*>(fn);
    n->hostData = ud;
    if (vjp) {
      n->hostVjp = reinterpret_cast<void*>(vjp);
      n->vjp = vjpTrampoline;
      n->flags |= dlam::kHasVjp;
      n->fwdRule = vjpForwardRule;
    } else {
      n->flags |= dlam::kNoDerivative;
      n->fwdRule = noDerivativeRule;
    }
    n->flags |= dlam::kDualRule;  // bundles among its arguments go to its forward rule
    vm->vm->defineGlobal(name, Value::object(n));
    return DLAM_OK;
  });
}

void dlam_set_error(dlam_vm* vm, const char* message) {
  guarded(vm, "dlam_set_error", [&] {
    vm->hostError = message ? message : "";
    vm->hostErrorSet = true;
    return DLAM_OK;
  });
}

}  // extern "C"
