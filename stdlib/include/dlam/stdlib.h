// stdlib.h — installs the primitives (C++) and the prelude (dlam source compiled
// into the binary) into a VM.
#pragma once
#include "dlam/vm.h"

namespace dlam {

// Registers every primitive of the language as a global.
void openPrimitives(VM& vm);
// openPrimitives, then compiles and runs the prelude (map, fold-left, gradient, ...).
void openStdlib(VM& vm);

}  // namespace dlam
