// foreign.h — foreign functions through libffi (docs/language.md, "Foreign functions").
//
// openForeign defines the global `foreign-function`:
//
//   (foreign-function "LIBRARY" "SYMBOL" '(ARG-TYPE ...) 'RESULT-TYPE)
//
// returns a procedure (an object of type Foreign) that calls SYMBOL of the shared
// library LIBRARY through libffi. Types: double, float, int32, int64, and void (result
// only). It is an error unless the VM's configuration enables foreign calls
// (Config::ffiEnabled and not Config::sandbox); Config::ffiLibraries, when set, is an
// allow-list of library names, compared exactly as written in the call. Libraries
// stay loaded until the VM is destroyed.
#pragma once
#include "dlam/vm.h"

namespace dlam {

void openForeign(VM& vm);

}  // namespace dlam
