// image.h — the start-up image: the prelude compiled once, at build time, into bytes
// that a VM decodes and runs instead of reading, expanding and compiling the source.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "dlam/vm.h"

namespace dlam {

// What an image must carry in its header to be loaded with this prelude text by this
// build: a hash of the text, the image format's version, the opcode and primitive
// tables and the sizes of what the encoding lays out.
uint64_t imageKey(std::string_view prelude);

// Loads `prelude` from source into vm (which is loading its library) as evalSource
// does, and returns the image of what that made: each top-level form's compiled code
// with the IR it keeps, the macros it defined.
std::string writeImage(VM& vm, std::string_view prelude, const std::string& file);

// Loads an image made by writeImage from `prelude`: false, the VM untouched, when its
// header does not match (another prelude text, another build); else it makes the forms'
// code and runs it in order, as loading the source would. Errors as evalSource's. The
// IR the protos keep is decoded later, when first needed (ensureIr): the image's bytes
// must outlive the VM (the embedded image is static).
bool loadImage(VM& vm, std::string_view image, std::string_view prelude, const std::string& file);

// Gives a proto loaded from an image its IR, if it has not got it yet (the transform
// asks before it reads the IR of a proto tree). Decodes the IR of the proto's form once.
void ensureIr(VM& vm, Proto* p);

}  // namespace dlam
