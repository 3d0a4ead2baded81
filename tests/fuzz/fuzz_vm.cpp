// fuzz_vm.cpp — evaluates arbitrary text in a VM with small limits; one VM, reset between
// inputs, serves thousands of them.
//
// The input is split at lines `;---` into chunks (a comment, so a whole file is still a
// valid script), and every chunk runs in the same VM, as the REPL would run them:
// after an error the VM is recovered and the next chunk runs. Each chunk gets its own
// instruction budget. The value of every chunk that succeeds is put through the
// differentiation operators (*j, *j-inverse, zero, plus) and the printer, whatever it is
// — closures, tagged values, attached values, void. At the end the VM must still work:
// it evaluates a fixed program, and calls the primitives it saved before the input ran
// (the input may have redefined their global names).
//
// Allowed: dlam::Error of kind Syntax, Runtime or Limit, with a message and a location.
// Not allowed: anything else escaping, a crash, a sanitizer report, a hang.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "dlam/compiler.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"
#include "fuzz_common.h"

namespace {

// Small limits keep each input cheap: with 32 MB and 200 000 instructions a chunk, half
// of the fuzzer's time went to a few inputs that doubled strings up to the heap limit
// (page faults of 16 MB blocks) or looped to the budget. An input meets the limit errors
// as often as before, at an eighth of the cost.
constexpr uint64_t kHeapLimitMb = 8;
constexpr uint64_t kStackLimit = 2000;
constexpr uint64_t kInstructionsPerChunk = 50000;
constexpr size_t kMaxChunks = 8;
constexpr std::string_view kSeparator = "\n;---";

std::vector<std::string_view> splitChunks(std::string_view src) {
  std::vector<std::string_view> chunks;
  for (;;) {
    size_t at = src.find(kSeparator);
    if (at == std::string_view::npos || chunks.size() + 1 == kMaxChunks) {
      chunks.push_back(src);
      return chunks;
    }
    chunks.push_back(src.substr(0, at + 1));
    src.remove_prefix(at + kSeparator.size());
  }
}

bool sameValue(dlam::Value a, dlam::Value b) {
  if (a == b) return true;
  return a.isNumber() && b.isNumber() && std::isnan(a.asNumber()) && std::isnan(b.asNumber());
}

// Errors raised by the operators called from C++ have no dlam frame, so no line: only
// their kind is checked.
void checkNativeError(const dlam::Error& e) {
  if (e.kind != dlam::ErrorKind::Runtime && e.kind != dlam::ErrorKind::Limit)
    dlam::fuzz::fail(std::string("operator raised a ") + dlam::fuzz::kindName(e.kind) +
                     " error: " + e.message);
  if (e.message.empty()) dlam::fuzz::fail("operator error with an empty message");
}

// The value of a chunk through J, J⁻¹, 0, ⊕ and the printer.
void exerciseValue(dlam::VM& vm, dlam::Value v) {
  dlam::VM::Root root(vm, v);
  try {
    std::string shown = vm.show(v, true);
    (void)vm.show(v, false);
    dlam::Value j = vm.starJ(v);
    dlam::VM::Root jr(vm, j);
    dlam::Value back = vm.starJInverse(j);
    // Estep: *j of an attached value is its rep, so J⁻¹ gives back J⁻¹ rep, not v.
    if (!dlam::isObj(v, dlam::ObjType::Attached) && !sameValue(back, v))
      dlam::fuzz::fail("(*j-inverse (*j v)) is not v for v = " + shown.substr(0, 200) + ", got " +
                       vm.show(back, true).substr(0, 200));
    // (*j v) twice gives the same object. Numbers are unboxed (no slot to memoize
    // on), and a tagged number is a number too (a new tag each time, eq? by level and
    // value): its image is a tag on it itself. Other heap objects: the same image.
    if (dlam::isObj(v, dlam::ObjType::Rev)) {
      dlam::Value again = vm.starJ(v);
      if (!dlam::isObj(again, dlam::ObjType::Rev) ||
          static_cast<dlam::Rev*>(again.asObject())->primal != v)
        dlam::fuzz::fail("(*j v) is not a tag on v for v = " + shown.substr(0, 200));
    } else if (v.isObject() && vm.starJ(v) != j) {
      dlam::fuzz::fail("(*j v) is not memoized for v = " + shown.substr(0, 200));
    }
    dlam::Value jj = vm.starJ(j);
    dlam::VM::Root jjr(vm, jj);
    (void)vm.show(jj, true);
    dlam::Value z = vm.zeroOf(v);
    dlam::VM::Root zr(vm, z);
    dlam::Value zz = vm.plus(z, z);
    (void)vm.show(zz, true);
    (void)vm.show(vm.zeroOf(j), true);
  } catch (const dlam::Error& e) {
    checkNativeError(e);
    vm.recover(dlam::VM::GcKind::Minor);
  }
}

void runChunk(dlam::VM& vm, std::string_view chunk, const std::string& name) {
  vm.mutableConfig().instructionLimit = vm.instructionsExecuted() + kInstructionsPerChunk;
  try {
    dlam::Value v = dlam::evalSource(vm, chunk, name);
    exerciseValue(vm, v);
  } catch (const dlam::Error& e) {
    dlam::fuzz::checkError(e, "<fuzz", true);
    vm.recover(dlam::VM::GcKind::Minor);
  }
}

// After everything the input did, the VM runs a fixed program (compiled once, when the
// VM was made: compiling it for every input cost a tenth of the time) and calls the
// saved primitives. Only special forms and lambdas: the input may have redefined any
// global.
constexpr const char* kCheckProgram =
    "(letrec ((f (lambda (n k) (if n (f #f (lambda () (k))) (k))))) (f #t (lambda () 'ok)))";

void checkUsable(dlam::VM& vm, dlam::Value check, dlam::Value plus, dlam::Value starJ,
                 dlam::Value starJInv) {
  vm.mutableConfig().instructionLimit = vm.instructionsExecuted() + 10 * kInstructionsPerChunk;
  try {
    dlam::Value v = vm.call(check, nullptr, 0);
    if (vm.show(v, true) != "ok")
      dlam::fuzz::fail("the check program returned " + vm.show(v, true));
    dlam::Value args[2] = {dlam::Value::number(1), dlam::Value::number(2)};
    dlam::Value three = vm.call(plus, args, 2);
    if (!three.isNumber() || three.asNumber() != 3)
      dlam::fuzz::fail("(+ 1 2) is " + vm.show(three, true));
    dlam::Value x = dlam::Value::number(5);
    dlam::Value jx = vm.call(starJ, &x, 1);
    dlam::VM::Root jr(vm, jx);
    dlam::Value back = vm.call(starJInv, &jx, 1);
    if (back != x) dlam::fuzz::fail("(*j-inverse (*j 5)) is " + vm.show(back, true));
  } catch (const dlam::Error& e) {
    dlam::fuzz::fail("the VM is not usable after the input: " + e.format());
  }
}

// A VM with the standard library, and the primitives saved before any input ran; the
// bindings of every symbol are checkpointed then (VM::saveBindings), and each input
// starts from them (reset).
struct Machine {
  explicit Machine() {
    dlam::Config cfg;
    cfg.heapLimitMb = kHeapLimitMb;
    cfg.stackLimit = kStackLimit;
    cfg.instructionLimit = kInstructionsPerChunk;
    cfg.sandbox = true;  // no include: the fuzzer must not read files
    cfg.ffiEnabled = false;
    vm = std::make_unique<dlam::VM>(cfg);
    vm->output = [](std::string_view) {};
    dlam::openStdlib(*vm);
    std::vector<dlam::Proto*> check = dlam::compileSource(*vm, kCheckProgram, "<check>");
    if (check.size() != 1) dlam::fuzz::fail("the check program did not compile to one chunk");
    dlam::Value checkFn = dlam::Value::object(vm->makeClosure(check[0], 0));
    saved = std::make_unique<dlam::VM::Root>(
        *vm, vm->list(std::vector<dlam::Value>{checkFn, vm->global("+"), vm->global("*j"),
                                               vm->global("*j-inverse")}
                          .data(),
                      4));
    vm->saveBindings();
  }
  ~Machine() {
    saved.reset();  // the root goes before its VM
    vm.reset();
  }
  // Back to the state after the library loaded: every global and macro as it was, the
  // same random numbers. (The input's last chunk ended normally or was recovered from.)
  void reset() {
    vm->restoreBindings();
    vm->random().seed(0x5eed);
  }
  // Whether what the inputs left behind fills half the heap limit after a collection:
  // the library's code decoded on first use and its transforms of the first two levels,
  // cached for the VM's life (docs/differentiation.md, "What a derivative costs"), grow
  // with the inputs (most of it the IR those transforms keep for the next level: 3.1 of
  // 4.2 MB, measured); a VM whose caches fill the limit is replaced rather than failing
  // the next input for want of room. (About every 120 inputs of a grown corpus; keeping
  // VMs longer with a limit above what they keep was slower: docs/fuzzing.md.)
  bool full() {
    uint64_t half = (kHeapLimitMb << 20) / 2;
    if (vm->gcStats().liveBytes <= half) return false;
    vm->restoreBindings();
    vm->collectGarbage();
    return vm->gcStats().liveBytes > half;
  }
  dlam::Value savedAt(int i) {
    dlam::Value l = saved->get();
    for (; i > 0; --i) l = dlam::asPair(l)->cdr;
    return dlam::asPair(l)->car;
  }
  std::unique_ptr<dlam::VM> vm;
  std::unique_ptr<dlam::VM::Root> saved;
};

// By default one VM serves kInputsPerVm inputs, reset between them (Machine::reset): no
// prelude load per input, which is what made the target slow (40-80 inputs a second
// under ASan). What a reset does not undo is the mutation of data the library holds and
// the symbols an input interned (the VM is replaced after kInputsPerVm inputs, which
// bounds them). DLAM_FUZZ_FRESH=1 makes a fresh VM for every input instead: slow, but
// nothing carries over, so it is the way to confirm that a finding stands alone.
constexpr int kInputsPerVm = 5000;

bool fresh() {
  static const bool f = [] {
    const char* v = std::getenv("DLAM_FUZZ_FRESH");
    return v && *v && *v != '0';
  }();
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view src(reinterpret_cast<const char*>(data), size);
  static std::unique_ptr<Machine> shared;
  static int uses = 0;
  std::unique_ptr<Machine> own;
  Machine* m;
  if (fresh()) {
    own = std::make_unique<Machine>();
    m = own.get();
  } else {
    if (!shared || ++uses >= kInputsPerVm || shared->full()) {
      shared.reset();
      shared = std::make_unique<Machine>();
      uses = 0;
    }
    m = shared.get();
  }
  m->reset();
  dlam::VM& vm = *m->vm;
  std::vector<std::string_view> chunks = splitChunks(src);
  for (size_t i = 0; i < chunks.size(); ++i)
    runChunk(vm, chunks[i], "<fuzz" + std::to_string(i) + ">");
  checkUsable(vm, m->savedAt(0), m->savedAt(1), m->savedAt(2), m->savedAt(3));
  return 0;
}
