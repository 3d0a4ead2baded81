// stdlib.h — installs the primitives (C++) and the prelude (dlam source compiled
// into the binary) into a VM.
#pragma once
#include <string>
#include <string_view>

#include "dlam/vm.h"

namespace dlam {

// Registers every primitive of the language as a global.
void openPrimitives(VM& vm);
// openPrimitives, then the prelude (map, fold-left, gradient, ...): its start-up image
// made at build time, or, if that does not match this build, compiled from source.
void openStdlib(VM& vm);
// openStdlib from the given image: true if it was used, false if it was refused (made
// from another prelude text or by another build) and the source compiled instead.
bool openStdlibFrom(VM& vm, std::string_view image);
// openPrimitives, then the prelude from source, returning its image (dlam_mkimage).
std::string writeStdlibImage(VM& vm);
// The image embedded in this binary (empty in dlam_mkimage), and the prelude's text.
std::string_view embeddedStdlibImage();
std::string_view preludeSource();

// dot's OpenBLAS (stdlib/src/blas.cpp) is loaded at the first product that needs it:
// the serial build for a VM with blas_threads 1, the threaded one for more. For tests:
// the paths it loads them from (nullptr: unchanged; a library loaded already stays),
// and whether one is loaded.
void setBlasLibraryPaths(const char* serial, const char* threaded);
bool blasLoaded(bool threaded);

}  // namespace dlam
