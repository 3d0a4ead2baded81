// stdlib.h — installs the primitives (C++) and the prelude (dlam source compiled
// into the binary) into a VM.
#pragma once
#include "dlam/vm.h"

namespace dlam {

// Registers every primitive of the language as a global.
void openPrimitives(VM& vm);
// openPrimitives, then compiles and runs the prelude (map, fold-left, gradient, ...).
void openStdlib(VM& vm);

// dot's OpenBLAS (stdlib/src/blas.cpp) is loaded at the first product that needs it:
// the serial build for a VM with blas_threads 1, the threaded one for more. For tests:
// the paths it loads them from (nullptr: unchanged; a library loaded already stays),
// and whether one is loaded.
void setBlasLibraryPaths(const char* serial, const char* threaded);
bool blasLoaded(bool threaded);

}  // namespace dlam
