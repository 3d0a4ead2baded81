// expand_include.h — include: the forms of a source file (read by readSourceFile,
// expand.cpp) where the form stands, spliced into a body or as a body of their own.
// Part of the expander: included by expand.cpp alone (expander.h says why).
#pragma once
#include "expander.h"

namespace dlam {

namespace {

inline std::vector<Sx*> Expander::includedForms(Sx* x) {
  if (!opts_.allowInclude) fail(x->loc, "include: not allowed in the sandbox");
  if (x->items.size() != 2 || x->items[1]->kind != Sx::String)
    fail(x->loc, "include: expected (include \"file\")");
  if (++includeDepth_ > 64) fail(x->loc, "include: nested too deeply (an include cycle?)");
  std::string path = x->items[1]->text;
  if (!path.empty() && path[0] != '/' && !opts_.baseDir.empty()) path = opts_.baseDir + "/" + path;
  std::string text = readSourceFile(path, "include: ", opts_.file, x->loc);
  return readAll(arena_, text, path);
}

Atom Expander::includeExpr(Sx* x) {
  std::vector<Sx*> forms = includedForms(x);
  if (forms.empty()) return constAtom(Value::voidValue(), x->loc);
  return body(forms, 0, x->loc);
}

}  // namespace

}  // namespace dlam
