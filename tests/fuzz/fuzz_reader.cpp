// fuzz_reader.cpp — the reader (dlam::readAll) on arbitrary bytes.
//
// Only a syntax error (dlam::Error of kind Syntax, with file and line) may come out;
// anything else — another exception, a crash, a sanitizer report, a hang, deep C++
// recursion on deep nesting — is a bug.
#include <string_view>

#include "dlam/syntax.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view src(reinterpret_cast<const char*>(data), size);
  const std::string chunk = "<fuzz>";
  dlam::SxArena arena;
  try {
    std::vector<dlam::Sx*> forms = dlam::readAll(arena, src, chunk);
    for (const dlam::Sx* f : forms)
      if (!f) dlam::fuzz::fail("readAll returned a null form");
  } catch (const dlam::Error& e) {
    if (e.kind != dlam::ErrorKind::Syntax)
      dlam::fuzz::fail(std::string("reader raised a ") + dlam::fuzz::kindName(e.kind) +
                       " error: " + e.message);
    dlam::fuzz::checkError(e, chunk, false);
  }
  return 0;
}
