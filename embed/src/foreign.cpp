// foreign.cpp — `foreign-function`: C functions of shared libraries called through libffi.
//
// A foreign function is an object of type Foreign with the layout of a Native: its fn
// is the call trampoline below and its data slot holds a dlam string whose bytes are
// the call signature (the libffi cif, the argument types, the function pointer). Heap
// objects never move, so the cif may point into those bytes, and the signature is
// freed with the procedure by the collector. The libraries opened are kept in a
// per-VM table that closes them when the VM dies.
#include "foreign.h"

#include <dlfcn.h>
#include <ffi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>

namespace dlam {

namespace {

enum class FType : uint8_t { Double, Float, Int32, Int64, Void };
constexpr int kMaxForeignArgs = 32;

struct Signature {
  ffi_cif cif;
  void* fn;
  uint32_t nargs;
  FType result;
  FType args[kMaxForeignArgs];
  ffi_type* argTypes[kMaxForeignArgs];
};
// The bytes of a String start 8 bytes into a 16-byte aligned block.
static_assert(alignof(Signature) <= 8);

// The libraries one VM has opened, by the name given to foreign-function.
struct Libraries {
  std::unordered_map<std::string, void*> handles;
  ~Libraries() {
    for (auto& entry : handles) dlclose(entry.second);
  }
};

ffi_type* ffiTypeOf(FType t) {
  switch (t) {
    case FType::Double:
      return &ffi_type_double;
    case FType::Float:
      return &ffi_type_float;
    case FType::Int32:
      return &ffi_type_sint32;
    case FType::Int64:
      return &ffi_type_sint64;
    case FType::Void:
      return &ffi_type_void;
  }
  return &ffi_type_void;
}

const char kWho[] = "foreign-function";

FType parseType(VM& vm, Value v, bool isResult, int argIndex) {
  std::string name;
  if (isSymbol(v))
    name = asSymbol(v)->name;
  else if (isString(v))
    name = std::string(asString(v)->view());
  else
    vm.typeError(kWho, argIndex, "a type symbol (double, float, int32, int64, void)", v);
  if (name == "double") return FType::Double;
  if (name == "float") return FType::Float;
  if (name == "int32") return FType::Int32;
  if (name == "int64") return FType::Int64;
  if (name == "void") {
    if (!isResult) vm.runtimeError(std::string(kWho) + ": void is only allowed as the result type");
    return FType::Void;
  }
  vm.runtimeError(std::string(kWho) + ": unknown type '" + name +
                  "' (expected double, float, int32, int64" + (isResult ? " or void)" : ")"));
}

// Calls a Foreign object: converts the arguments, calls through libffi, converts the result.
Value callForeign(VM& vm, Value* args, int nargs) {
  Native* self = vm.callingNative;
  const auto* sig = reinterpret_cast<const Signature*>(asString(self->data)->chars);
  union Arg {
    double d;
    float f;
    int32_t i32;
    int64_t i64;
  };
  Arg vals[kMaxForeignArgs];
  void* ptrs[kMaxForeignArgs];
  for (int i = 0; i < nargs; ++i) {
    double x = vm.checkNumber(self->name, args, i);
    switch (sig->args[i]) {
      case FType::Double:
        vals[i].d = x;
        break;
      case FType::Float:
        vals[i].f = static_cast<float>(x);
        break;
      case FType::Int32:
        if (!(x == std::trunc(x) && x >= -2147483648.0 && x <= 2147483647.0))
          vm.typeError(self->name, i, "an integer in the int32 range", args[i]);
        vals[i].i32 = static_cast<int32_t>(x);
        break;
      case FType::Int64:
        if (!(x == std::trunc(x) && x >= -9223372036854775808.0 && x < 9223372036854775808.0))
          vm.typeError(self->name, i, "an integer in the int64 range", args[i]);
        vals[i].i64 = static_cast<int64_t>(x);
        break;
      case FType::Void:
        break;
    }
    ptrs[i] = &vals[i];
  }
  // libffi widens integral results to ffi_arg; the buffer must be at least that big.
  union {
    double d;
    float f;
    ffi_arg u;
    ffi_sarg s;
    int64_t i64;
  } ret{};
  ffi_call(const_cast<ffi_cif*>(&sig->cif), FFI_FN(sig->fn), &ret, ptrs);
  switch (sig->result) {
    case FType::Double:
      return Value::numberChecked(ret.d);
    case FType::Float:
      return Value::numberChecked(static_cast<double>(ret.f));
    case FType::Int32:
      return Value::number(static_cast<double>(static_cast<int32_t>(ret.s)));
    case FType::Int64:
      return Value::number(static_cast<double>(ret.i64));
    case FType::Void:
      return Value::voidValue();
  }
  return Value::voidValue();
}

// (foreign-function "LIBRARY" "SYMBOL" '(ARG-TYPE ...) 'RESULT-TYPE)
Value makeForeign(VM& vm, Value* a, int) {
  const Config& cfg = vm.config();
  if (!cfg.ffiEnabled || cfg.sandbox)
    vm.runtimeError(std::string(kWho) + ": foreign calls are disabled");
  if (!isString(a[0])) vm.typeError(kWho, 0, "string", a[0]);
  if (!isString(a[1])) vm.typeError(kWho, 1, "string", a[1]);
  std::string lib(asString(a[0])->view());
  std::string sym(asString(a[1])->view());
  if (cfg.ffiLibraries &&
      std::find(cfg.ffiLibraries->begin(), cfg.ffiLibraries->end(), lib) == cfg.ffiLibraries->end())
    vm.runtimeError(std::string(kWho) + ": library " + lib + " is not in the allow-list");
  if (lib.find('\0') != std::string::npos || sym.find('\0') != std::string::npos)
    vm.runtimeError(std::string(kWho) + ": names must not contain NUL characters");

  FType argTypes[kMaxForeignArgs];
  int nargs = 0;
  Value l = a[2];
  for (; isPair(l); l = asPair(l)->cdr) {
    if (nargs == kMaxForeignArgs)
      vm.runtimeError(std::string(kWho) + ": at most " + std::to_string(kMaxForeignArgs) +
                      " arguments");
    argTypes[nargs++] = parseType(vm, asPair(l)->car, false, 2);
  }
  if (!l.isNil()) vm.typeError(kWho, 2, "list of argument types", a[2]);
  FType result = parseType(vm, a[3], true, 3);

  Native* self = vm.callingNative;
  if (!self || self->fn != makeForeign || !self->hostData)
    vm.runtimeError(std::string(kWho) + ": called without its library table");
  auto* libs = static_cast<Libraries*>(self->hostData);
  void* handle;
  auto it = libs->handles.find(lib);
  if (it != libs->handles.end()) {
    handle = it->second;
  } else {
    handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      vm.runtimeError(std::string(kWho) + ": cannot load library " + lib +
                      (why ? std::string(": ") + why : ""));
    }
    try {
      libs->handles.emplace(lib, handle);
    } catch (...) {
      dlclose(handle);
      throw;
    }
  }
  dlerror();
  void* fn = dlsym(handle, sym.c_str());
  if (!fn) vm.runtimeError(std::string(kWho) + ": symbol " + sym + " not found in " + lib);

  Value blob = vm.makeString(std::string(sizeof(Signature), '\0'));
  auto* sig = reinterpret_cast<Signature*>(asString(blob)->chars);
  sig->fn = fn;
  sig->nargs = static_cast<uint32_t>(nargs);
  sig->result = result;
  for (int i = 0; i < nargs; ++i) {
    sig->args[i] = argTypes[i];
    sig->argTypes[i] = ffiTypeOf(argTypes[i]);
  }
  if (ffi_prep_cif(&sig->cif, FFI_DEFAULT_ABI, static_cast<unsigned>(nargs), ffiTypeOf(result),
                   sig->argTypes) != FFI_OK)
    vm.runtimeError(std::string(kWho) + ": libffi cannot describe the call of " + sym);

  // Allocation never collects (collection happens at safe points only), so blob needs no root here.
  void* mem = vm.allocate(ObjType::Foreign, sizeof(Native));
  Obj header = *static_cast<Obj*>(mem);
  auto* n = new (mem) Native();
  static_cast<Obj&>(*n) = header;
  n->fn = callForeign;
  n->ownedName = sym;
  n->name = n->ownedName.c_str();
  n->minArgs = static_cast<int16_t>(nargs);
  n->maxArgs = static_cast<int16_t>(nargs);
  n->id = 0;
  n->data = blob;
  n->memo = Value::nil();
  return Value::object(n);
}

}  // namespace

void openForeign(VM& vm) {
  auto libs = std::make_shared<Libraries>();
  Native* n = vm.defineNative(kWho, makeForeign, 4, 4);
  n->hostData = libs.get();
  // The library table must live exactly as long as the VM. The root providers are the
  // VM-owned objects that do; this one marks nothing and only keeps the table alive.
  vm.rootProviders.push_back([libs](std::vector<Obj*>&) {});
}

}  // namespace dlam
