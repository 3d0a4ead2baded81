// fuzz_compiler.cpp — read, expand, A-normalise and generate code (dlam::compileSource,
// which does not run anything) for arbitrary text, in a VM with the standard
// library. The disassembler then prints every compiled proto, which walks the code.
// One VM serves many inputs (see sharedVm).
//
// Only dlam::Error of kind Syntax (or Limit, for the heap) may come out.
#include <memory>
#include <string_view>

#include "dlam/compiler.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"
#include "fuzz_common.h"

namespace {

// Loading the prelude costs far more than compiling a small input, so one VM serves many
// inputs: compileSource runs nothing and defines nothing but macros (the bindings go back
// to the library's after each input: VM::restoreBindings), so what an input leaves behind
// is interned symbols and garbage protos (collected when due). The VM is replaced every
// kInputsPerVm inputs to bound the symbol table.
constexpr int kInputsPerVm = 5000;

dlam::VM& sharedVm() {
  static std::unique_ptr<dlam::VM> vm;
  static int uses = 0;
  if (!vm || ++uses >= kInputsPerVm) {
    vm.reset();
    dlam::Config cfg;
    cfg.heapLimitMb = 64;
    cfg.stackLimit = 2000;
    cfg.instructionLimit = 0;
    cfg.sandbox = true;  // no include: the fuzzer must not read files
    cfg.ffiEnabled = false;
    vm = std::make_unique<dlam::VM>(cfg);
    vm->output = [](std::string_view) {};
    dlam::openStdlib(*vm);
    vm->saveBindings();
    vm->collectGarbage();
    uses = 0;
  }
  return *vm;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view src(reinterpret_cast<const char*>(data), size);
  const std::string chunk = "<fuzz>";
  dlam::VM& vm = sharedVm();
  try {
    std::vector<dlam::Proto*> protos = dlam::compileSource(vm, src, chunk);
    for (dlam::Proto* p : protos) (void)vm.disassemble(p);
  } catch (const dlam::Error& e) {
    dlam::fuzz::checkError(e, chunk, false);
    vm.recover(dlam::VM::GcKind::Minor);
  }
  // compileSource runs nothing, but define-syntax defines macros as it compiles: the
  // bindings go back to the library's, so that every input meets the same VM. The
  // garbage (the protos compiled) is collected when a collection is due, as between
  // top-level forms: a full collection after every input took most of the time.
  vm.restoreBindings();
  vm.safePoint();
  return 0;
}
