// ad_transform.h — the reverse-mode transform (φ/ρ of Lambda the Ultimate
// Backpropagator) and the eta expansion of primitives, installed as VM hooks.
#pragma once
#include "dlam/vm.h"

namespace dlam {

// Compiles the reverse-mode version of `primal` (which must keep its ANF).
Proto* transformProto(VM& vm, Proto* primal);
// (lambda (x1 .. xn) (base x1 .. xn)): what *j of a primitive transforms.
Proto* etaProto(VM& vm, Native* base, int nargs);

}  // namespace dlam
