// mkimage.cpp — dlam_mkimage OUT: loads the prelude from source into a fresh VM and
// writes its start-up image (compiler/src/image.cpp) to OUT, at build time.
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

#include "dlam/stdlib.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dlam_mkimage OUT\n");
    return 2;
  }
  try {
    dlam::VM vm;
    std::string image = dlam::writeStdlibImage(vm);
    std::ofstream out(argv[1], std::ios::binary | std::ios::trunc);
    out.write(image.data(), static_cast<std::streamsize>(image.size()));
    out.close();
    if (!out) {
      std::fprintf(stderr, "dlam_mkimage: cannot write %s\n", argv[1]);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlam_mkimage: %s\n", e.what());
    return 1;
  }
  return 0;
}
