// embedded.cpp — provides the start-up image (compiler/src/image.cpp) that dlam_mkimage
// wrote at build time: its bytes are assembled into read-only data as they are.
#include <cstddef>

#include "prelude_image.h"

extern "C" const char dlamPreludeImageStart[];
extern "C" const char dlamPreludeImageEnd[];
asm(".section .rodata\n"
    ".balign 16\n"
    ".globl dlamPreludeImageStart\n"
    ".hidden dlamPreludeImageStart\n"
    "dlamPreludeImageStart:\n"
    ".incbin \"" DLAM_PRELUDE_IMAGE_FILE
    "\"\n"
    ".globl dlamPreludeImageEnd\n"
    ".hidden dlamPreludeImageEnd\n"
    "dlamPreludeImageEnd:\n"
    ".previous\n");

namespace dlam {
std::string_view preludeImage() {
  return {dlamPreludeImageStart, static_cast<size_t>(dlamPreludeImageEnd - dlamPreludeImageStart)};
}
}  // namespace dlam
