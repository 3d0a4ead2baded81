// compiler.h — the entry points from source text to running code.
//
// source → reader (Sx) → expander (core) → ANF → codegen (Proto) → vm.
// Each top-level form is compiled and run before the next is read, so a
// `define` is visible to the forms after it.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dlam/vm.h"

namespace dlam {

// Compiles and runs every top-level form of `source`. `onValue` (optional) gets the
// value of each top-level expression whose value is not void. Returns the value of
// the last form (void if none). Throws dlam::Error.
Value evalSource(VM& vm, std::string_view source, const std::string& file,
                 const std::function<void(Value)>& onValue = {});
// evalSource that also hands each top-level form's compiled proto to onCompiled before
// running it (the start-up image's writer, compiler/src/image.cpp).
Value evalSourceRecording(VM& vm, std::string_view source, const std::string& file,
                          const std::function<void(Proto*)>& onCompiled);
// Reads and evaluates a file (its directory becomes the base of relative includes).
Value evalFile(VM& vm, const std::string& path, const std::function<void(Value)>& onValue = {});
// Reads the first datum of `text` and converts it to a value as `quote` does (for
// `read`). `file` and `start` (the line and column where text starts in it) locate a
// syntax error. False if text holds no datum (only blanks and comments); otherwise the
// value is in `out` and `used` is the number of bytes read up to the datum's end.
// Throws the reader's dlam::Error (`incomplete` set when text ends inside the datum).
bool readDatum(VM& vm, std::string_view text, const std::string& file, SrcLoc start, Value& out,
               size_t& used);
// Compiles every top-level form without running it (for --disasm).
std::vector<Proto*> compileSource(VM& vm, std::string_view source, const std::string& file);
// Installs the reverse-mode transform into the VM (the hooks *j needs).
void installTransform(VM& vm);

}  // namespace dlam
