// library.cpp — the standard library's own bindings, immune to user redefinitions.
//
// While the prelude loads (beginLibrary .. sealLibrary), the compiler binds every global
// the prelude's code names — what it calls and what it defines — to a twin of that
// symbol: an uninterned symbol of the same name, which no program can name. sealLibrary
// then gives each public symbol the value its twin holds. A program that later defines
// its own `map` or `reverse` rebinds only the public symbol; the library's code, and
// the code *j derives from it (the IR keeps the twins), go on calling the library's.
#include "dlam/vm.h"

namespace dlam {

Symbol* VM::libraryTwin(Symbol* s) {
  auto it = libraryTwins_.find(s);
  if (it != libraryTwins_.end()) return it->second;
  // s is a twin already (a library macro's expansion names the library's globals by
  // their twins: librarySymbol).
  if (Symbol* pub = findSymbol(s->name); pub && pub != s)
    if (auto t = libraryTwins_.find(pub); t != libraryTwins_.end() && t->second == s) return s;
  auto* twin = static_cast<Symbol*>(allocate(ObjType::Symbol, sizeof(Symbol)));
  new (&twin->name) std::string();  // owns nothing until tracked (each step may fail)
  twin->global = Value::undefined();
  twin->macro = Value::undefined();
  track(twin);
  twin->name = s->name;
  libraryTwins_.emplace(s, twin);
  // A primitive defined before the prelude: the twin starts with its value.
  setGlobal(twin, s->global);
  return twin;
}

Symbol* VM::librarySymbol(std::string_view name) {
  Symbol* s = intern(name);
  auto it = libraryTwins_.find(s);
  return it != libraryTwins_.end() ? it->second : s;
}

// The library's globals that code outside the prelude calls by name: what the compiler
// puts into programs (records.cpp's expansion, the reverse transform's helpers) and what
// the VM and the natives call (ad.cpp, forward.cpp, primitives_vectors.cpp). Each gets its
// twin when the library begins to load, the prelude naming it or not (a primitive it never
// names would otherwise have none), so librarySymbol finds the library's value whatever
// a program defines under the name later.
constexpr const char* kCalledByName[] = {
    "%make-record-type", "%record-constructor*",
    "%record-predicate", "%record-accessor",
    "%rec-fix",          "%xbar-rest",
    "%call-vjp",         "%j-boundary",
    "%j-boundary-at",    "%j-boundary-up",
    "%attached-forward", "%list->array",
    "%nary-+",           "%nary--",
    "%nary-*",           "%nary-/",
    "%nary-min",         "%nary-max",
    "%nary-list",        "%nary-append",
};

// A second load (after a failed one, or again) starts from fresh twins: its code must
// see the primitives openPrimitives has just defined, not those of the first load. The
// names above get their twins first (here, not in sealLibrary, which must not allocate:
// it runs when a failed load unwinds).
void VM::beginLibrary() {
  libraryTwins_.clear();
  loadingLibrary_ = true;
  for (const char* name : kCalledByName) libraryTwin(intern(name));
}

void VM::reserveTables(size_t symbols, size_t twins, size_t finalizable) {
  symbols_.reserve(symbols);
  libraryTwins_.reserve(twins);
  finalizable_.reserve(finalizable);
}

void VM::sealLibrary() {
  loadingLibrary_ = false;
  for (auto& [pub, twin] : libraryTwins_)
    if (!twin->global.isUndefined()) setGlobal(pub, twin->global);
}

}  // namespace dlam
