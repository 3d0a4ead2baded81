// fuzz_data.cpp — the data surfaces of the library: `format` control strings and the
// string ports with `read`, `read-char`, `peek-char`, `read-line` and `read-string`.
//
// The first byte of the input picks the mode, the rest is the text:
//   even: the text is a format control string, applied to the first 0 to 7 of a fixed
//         list of arguments (a number, a string, a symbol, a list, a character, a vector,
//         a boolean) — picked by the second byte;
//   odd:  the text is read from a string port. Mode bits choose the procedure of each
//         step (read a datum, a character, peek, a line, a string of k characters) until
//         the end of the text. Every datum `read` returns is written (write) and read
//         back: the two written forms must be the same (what write prints, read reads).
// One VM with the standard library serves many inputs, reset between them
// (VM::restoreBindings), as in fuzz_vm.cpp.
//
// Allowed: dlam::Error of kind Syntax (from read: located in "<string>"), Runtime or
// Limit with a message. Not allowed: anything else, a crash, a sanitizer report, a hang.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dlam/compiler.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"
#include "fuzz_common.h"

namespace {

using dlam::fuzz::fail;

constexpr int kInputsPerVm = 5000;
constexpr int kMaxSteps = 2000;

const char* const kProcs[] = {"format",    "open-input-string", "read",        "read-char",
                              "peek-char", "read-line",         "read-string", "eof-object?"};
enum Proc { kFormat, kOpen, kRead, kReadChar, kPeekChar, kReadLine, kReadString, kEofP, kNProcs };

struct Machine {
  Machine() {
    dlam::Config cfg;
    cfg.heapLimitMb = 32;
    cfg.stackLimit = 2000;
    cfg.instructionLimit = 1000000;
    cfg.sandbox = true;
    vm = std::make_unique<dlam::VM>(cfg);
    vm->output = [](std::string_view) {};
    dlam::openStdlib(*vm);
    std::vector<dlam::Value> keep;
    for (const char* p : kProcs) keep.push_back(vm->global(p));
    dlam::Value args = dlam::evalSource(
        *vm, "(list 42.5 \"a \\\"str\\\"\" 'sym '(1 (2 . 3)) #\\x (vector 1 2) #t)", "<args>");
    keep.push_back(args);
    saved = std::make_unique<dlam::VM::Root>(*vm, vm->list(keep.data(), keep.size()));
    vm->saveBindings();
  }
  ~Machine() {
    saved.reset();
    vm.reset();
  }
  dlam::Value at(int i) {
    dlam::Value l = saved->get();
    for (; i > 0; --i) l = dlam::asPair(l)->cdr;
    return dlam::asPair(l)->car;
  }
  std::unique_ptr<dlam::VM> vm;
  std::unique_ptr<dlam::VM::Root> saved;
};

void checkError(const dlam::Error& e) {
  if (e.kind == dlam::ErrorKind::Syntax) {
    if (e.file != "<string>") fail("a syntax error located in '" + e.file + "': " + e.message);
    if (!e.loc.known()) fail("a syntax error without a line: " + e.message);
  } else if (e.kind != dlam::ErrorKind::Runtime && e.kind != dlam::ErrorKind::Limit) {
    fail(std::string("a ") + dlam::fuzz::kindName(e.kind) + " error: " + e.message);
  }
  if (e.message.empty()) fail("an error without a message");
}

void runFormat(Machine& m, uint8_t count, std::string_view text) {
  dlam::VM& vm = *m.vm;
  std::vector<dlam::Value> args{vm.makeString(text)};
  dlam::VM::Root r(vm, args[0]);
  dlam::Value l = m.at(kNProcs);
  for (int i = 0; i < count % 8 && l.isObject(); ++i, l = dlam::asPair(l)->cdr)
    args.push_back(dlam::asPair(l)->car);
  dlam::Value out = vm.call(m.at(kFormat), args.data(), static_cast<int>(args.size()));
  if (!dlam::isObj(out, dlam::ObjType::String))
    fail("format returned " + vm.show(out, true).substr(0, 200));
}

dlam::Value openString(Machine& m, std::string_view text) {
  dlam::VM& vm = *m.vm;
  dlam::Value s = vm.makeString(text);
  return vm.call(m.at(kOpen), &s, 1);
}

void runRead(Machine& m, uint8_t modes, std::string_view text) {
  dlam::VM& vm = *m.vm;
  dlam::VM::Root port(vm, openString(m, text));
  for (int step = 0; step < kMaxSteps; ++step) {
    uint8_t pick = (modes >> (2 * (step % 4))) & 3;
    dlam::Value p = port.get();
    dlam::Value v;
    if (pick == 0 || step % 5 == 4) {
      v = vm.call(m.at(kRead), &p, 1);
      dlam::VM::Root vr(vm, v);
      if (vm.call(m.at(kEofP), &v, 1).isFalse()) {
        // what write prints, read reads: written again, it prints the same
        std::string shown = vm.show(v, true);
        dlam::VM::Root again(vm, openString(m, shown));
        dlam::Value q = again.get();
        dlam::Value back;
        try {
          back = vm.call(m.at(kRead), &q, 1);
        } catch (const dlam::Error& e) {
          fail("write printed what read cannot read: " + shown.substr(0, 200) + ": " + e.message);
        }
        if (vm.show(back, true) != shown)
          fail("read of the written " + shown.substr(0, 200) + " writes as " +
               vm.show(back, true).substr(0, 200));
      }
    } else if (pick == 1) {
      v = vm.call(m.at(kReadChar), &p, 1);
    } else if (pick == 2) {
      v = vm.call(m.at(kPeekChar), &p, 1);
      (void)vm.call(m.at(kReadChar), &p, 1);
    } else {
      dlam::Value a[2] = {dlam::Value::number(step % 7), p};
      v = step & 1 ? vm.call(m.at(kReadLine), &p, 1) : vm.call(m.at(kReadString), a, 2);
    }
    if (!vm.call(m.at(kEofP), &v, 1).isFalse()) return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<Machine> shared;
  static int uses = 0;
  if (!shared || ++uses >= kInputsPerVm) {
    shared.reset();
    shared = std::make_unique<Machine>();
    uses = 0;
  }
  Machine& m = *shared;
  m.vm->restoreBindings();
  m.vm->mutableConfig().instructionLimit = m.vm->instructionsExecuted() + 1000000;
  if (size < 2) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  try {
    if (data[0] & 1)
      runRead(m, data[1], text);
    else
      runFormat(m, data[1], text);
  } catch (const dlam::Error& e) {
    checkError(e);
    m.vm->recover(dlam::VM::GcKind::Minor);
  }
  return 0;
}
