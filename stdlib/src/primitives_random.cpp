// primitives_random.cpp — random numbers from the VM's generator (vm/include/dlam/random.h,
// xoshiro256**): random-seed!, random-real, random-integer, random-normal.
//
// The same seed gives the same sequence on every machine. Under a derivative the draws
// are constants: these natives have no derivative rule, so differentiated code calls
// them on primal values and their results carry no sensitivity.
#include <cmath>

#include "primitives.h"

namespace dlam::prim {

namespace {

constexpr double kTwo53 = 9007199254740992.0;  // 2^53: every integer below is a double

// The integer in args[i], in [lo, 2^53], or an error naming who.
uint64_t integerArg(VM& vm, const char* who, Value* a, int i, double lo, const char* expected) {
  double d = num(vm, who, a, i);
  if (!(d >= lo && d <= kTwo53) || d != std::trunc(d)) vm.typeError(who, i, expected, a[i]);
  return static_cast<uint64_t>(d);
}

Value randomSeed(VM& vm, Value* a, int) {
  vm.random().seed(integerArg(vm, "random-seed!", a, 0, 0, "integer in [0, 2^53]"));
  return Value::voidValue();
}

Value randomReal(VM& vm, Value*, int) { return Value::number(vm.random().real()); }

Value randomInteger(VM& vm, Value* a, int) {
  uint64_t n = integerArg(vm, "random-integer", a, 0, 1, "integer in [1, 2^53]");
  return Value::number(static_cast<double>(vm.random().below(n)));
}

Value randomNormal(VM& vm, Value*, int) { return Value::number(vm.random().normal()); }

}  // namespace

void openRandomPrimitives(Registrar& r) {
  VM& vm = r.vm;
  vm.defineNative("random-seed!", randomSeed, 1, 1);
  vm.defineNative("random-real", randomReal, 0, 0);
  vm.defineNative("random-integer", randomInteger, 1, 1);
  vm.defineNative("random-normal", randomNormal, 0, 0);
}

}  // namespace dlam::prim
