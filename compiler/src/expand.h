// expand.h — from s-expressions to A-normal form: special forms, derived forms,
// scopes, free variables (first-occurrence order), quoted data.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "anf.h"
#include "dlam/syntax.h"
#include "dlam/vm.h"

namespace dlam {

struct ExpandOptions {
  std::string file;     // chunk name used in locations
  std::string baseDir;  // directory of the file, for relative includes
  bool allowInclude = true;
};

// Expands one top-level form into a parameterless Lambda (the chunk) in `mod`.
// Top-level `begin` and `include` are spliced by the caller (compileToplevel).
anf::Lambda* expandToplevel(VM& vm, anf::Module& mod, Sx* form, SxArena& arena,
                            const ExpandOptions& opts);

// Converts a quoted datum to a runtime value (iterative).
Value quoteDatum(VM& vm, const Sx* datum);

// Reads a whole source file (a script, or one named by `include`); an unreadable file is a
// Syntax error "WHO cannot open/read 'PATH'" located at file:loc. A failed allocation
// throws std::bad_alloc rather than returning the part read.
std::string readSourceFile(const std::string& path, const std::string& who, const std::string& file,
                           SrcLoc loc);

}  // namespace dlam
