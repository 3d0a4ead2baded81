// fuzz_compiler.cpp — read, expand, A-normalise and generate code (dlam::compileSource,
// which does not run anything) for arbitrary text, in a fresh VM with the standard
// library. The disassembler then prints every compiled proto, which walks the code.
//
// Only dlam::Error of kind Syntax (or Limit, for the heap) may come out.
#include <string_view>

#include "dlam/compiler.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view src(reinterpret_cast<const char*>(data), size);
  const std::string chunk = "<fuzz>";
  dlam::Config cfg;
  cfg.heapLimitMb = 64;
  cfg.stackLimit = 2000;
  cfg.instructionLimit = 0;
  cfg.sandbox = true;  // no include: the fuzzer must not read files
  cfg.ffiEnabled = false;
  dlam::VM vm(cfg);
  vm.output = [](std::string_view) {};
  dlam::openStdlib(vm);
  try {
    std::vector<dlam::Proto*> protos = dlam::compileSource(vm, src, chunk);
    for (dlam::Proto* p : protos) (void)vm.disassemble(p);
  } catch (const dlam::Error& e) {
    dlam::fuzz::checkError(e, chunk, false);
  }
  return 0;
}
