// primitives.h — private helpers shared by the primitive families
// (primitives_math.cpp, primitives_lists.cpp, primitives_io.cpp, primitives_hof.cpp,
// primitives_vectors.cpp, primitives_errors.cpp, primitives_records.cpp,
// primitives_ports.cpp, primitives_chars.cpp, primitives_strings.cpp,
// primitives_format.cpp).
//
// Argument indices passed to VM::typeError are 0-based positions in `args`;
// typeError prints them 1-based ("car: expected pair as argument 1, got 5").
#pragma once
#include "dlam/builtins.h"
#include "dlam/vm.h"

namespace dlam::prim {

// The slow path of num(): attached values, the symbolic zero, and the errors.
double numSlow(VM& vm, const char* who, const Value* args, int i);

// The number in args[i], or an error naming `who`. A reverse-tagged value gets its
// own message: reaching an untransformed primitive means a derivative level was mixed up.
inline double num(VM& vm, const char* who, const Value* args, int i) {
  if (args[i].isNumber()) [[likely]]
    return args[i].asNumber();
  return numSlow(vm, who, args, i);
}

// libm may hand back any NaN; only canonical ones may enter a Value.
inline Value numberResult(double d) { return Value::numberChecked(d); }

inline uint16_t idOf(NativeId id) { return static_cast<uint16_t>(id); }

// Registers the primitives of builtins.h's table, each under the name and with the arity
// the table gives it, and counts them: openPrimitives ends with checkEachOnce, so a table
// entry left out or registered twice stops every start-up (and so every test).
class Registrar {
 public:
  explicit Registrar(VM& vm) : vm(vm) {}
  Native* define(NativeId id, NativeFn fn) {
    const PrimitiveInfo& p = primitive(id);
    ++counts_[idOf(id)];
    Native* n = vm.defineNative(p.name, fn, p.minArgs, p.maxArgs, idOf(id));
    // Numeric primitives follow the dual-number rule on bundles (VM::fwdApply).
    if (p.kind == PrimKind::Arithmetic || p.kind == PrimKind::Comparison || id == NativeId::Sign ||
        id == NativeId::Step || id == NativeId::ZeroIfZero || id == NativeId::VectorRef ||
        id == NativeId::VectorLength || id == NativeId::SumTo || id == NativeId::BroadcastTo ||
        id == NativeId::Unreduce || id == NativeId::SensBack)
      n->flags |= kDualRule;
    return n;
  }
  // A native that the prelude wraps (with a derivative, say) and binds to `name`: its
  // global is the internal `global` (%make-vector), but it is named `name`, so that its
  // errors ("make-vector: wrong number of arguments (1)") and `write` show the name the
  // program called.
  Native* wrapped(const char* global, const char* name, NativeFn fn, int minArgs, int maxArgs) {
    Native* n = vm.defineNative(global, fn, minArgs, maxArgs);
    n->name = name;
    return n;
  }
  // Throws std::logic_error naming the first entry not registered exactly once.
  void checkEachOnce() const;

  VM& vm;  // for the natives without an id, registered by name (vm.defineNative)

 private:
  uint8_t counts_[static_cast<size_t>(NativeId::Count)] = {};
};

// (f x ...) called from C++: a primitive directly, anything else through VM::call
// (which may collect: the caller roots what it holds). primitives_hof.cpp.
Value applyProcedure(VM& vm, Value f, Value* args, int nargs);

// Natives that call procedures (map, fold-left, vector-map...) nest in C++. Past this
// depth they hand their call to a dlam definition (handOver: a tail call of the global
// `name`), so deep user recursion through them never recurses in C++. A level costs
// about 1.7 KB of C++ stack in a Release build (the native, applyProcedure, VM::call,
// run, execute), so 128 levels some 220 KB, well inside VM::call's own bound of 2000
// levels. The dlam definitions are slower than the natives: bench/dlam/deriv.dlam,
// whose size walks a tree some 40 deep by (map size (cdr e)), took 1.3 times the
// instructions with a bound of 32.
constexpr int kMaxNativeNesting = 128;
inline bool nestedTooDeep(VM& vm) { return vm.callDepth() > kMaxNativeNesting; }
inline Value handOver(VM& vm, const char* name, Value* a, int n) {
  return vm.tailCall(vm.globalOfLiteral(name), a, n);
}

// r = op(x) op(y), row-major (op: transposed with tx, ty), by OpenBLAS's dgemm, loaded
// at the first call with the VM's blas_threads (blas.cpp); a runtime error if it does
// not load.
void blasDgemm(VM& vm, bool tx, bool ty, int n, int m, int k, const double* x, int ldx,
               const double* y, int ldy, double* r, int ldr);

// The character in args[i], or a type error naming `who` (primitives_chars.cpp).
uint32_t charArg(VM& vm, const char* who, const Value* args, int i);
// Simple (one character to one) case maps and the whitespace class of Unicode, for the
// scripts primitives_chars.cpp lists; other characters map to themselves.
uint32_t upcaseChar(uint32_t c);
uint32_t downcaseChar(uint32_t c);
bool isWhitespaceChar(uint32_t c);

// The text of the string in args[i], or a type error naming `who` (primitives_strings.cpp).
std::string_view stringArg(VM& vm, const char* who, const Value* args, int i);

void openMathPrimitives(Registrar& r);
void openListPrimitives(Registrar& r);
void openIoPrimitives(Registrar& r);
void openAdPrimitives(Registrar& r);
void openHofPrimitives(Registrar& r);
void openVectorPrimitives(Registrar& r);
void openArrayPrimitives(Registrar& r);

// Arrays (primitives_arrays.cpp): whether v is an array (a vector included); x OP y
// elementwise with NumPy broadcasting for numbers, arrays and the symbolic zero (one of
// them an array); the n-ary + - * / min max (one argument: negation, reciprocal, itself)
// folded from the left; f on each element of the array x.
bool isArray(Value v);
Value arrayBinary(VM& vm, NativeId id, Value x, Value y);
Value arrayNary(VM& vm, NativeId id, Value* a, int n);
Value arrayUnary(VM& vm, double (*f)(double), Value x);
// Whether any of a[0 .. n) is an array (after attachments): the array path of a primitive.
inline bool anyArray(const Value* a, int n) {
  for (int i = 0; i < n; ++i)
    if (!a[i].isNumber() && isArray(unwrapAttached(a[i]))) return true;
  return false;
}
void openRandomPrimitives(Registrar& r);
void openErrorPrimitives(Registrar& r);
void openRecordPrimitives(Registrar& r);
void openPortPrimitives(Registrar& r);

// Output (primitives_ports.cpp): `text` written to the output port args[i] if the call
// has that argument (checked: an open output port), else to the current output port.
void writeOutput(VM& vm, const char* who, Value* args, int nargs, int i, std::string_view text);
// `text` written to port p (an open output port); a failed write is an error naming `who`.
void writeToPort(VM& vm, const char* who, Port* p, std::string_view text);
void openCharPrimitives(Registrar& r);
void openStringPrimitives(Registrar& r);
void openFormatPrimitives(Registrar& r);

}  // namespace dlam::prim
