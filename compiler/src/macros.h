// macros.h — syntax-rules macros (R7RS 4.3.2): the rules define-syntax makes, kept on
// the macro's symbol (Symbol::macro) at top level or in the body's scope (expand.cpp),
// and the expansion of a use: the first rule whose pattern matches gives the template,
// filled in with what the pattern variables matched.
//
// Hygiene is by renaming: every symbol a template puts into the program carries the mark
// of that expansion (Sx::mark). Bound by a form of the expansion, it binds under its own
// key (bindingKey), apart from the program's names; free, it means what the name means
// where the macro was defined (the expander keeps, for each expansion of a macro defined
// in a body, that body's scope; else the top level: a global or a keyword), whatever the
// use site binds. So a macro's temporaries cannot capture the program's variables, and
// the program's locals cannot capture the macro's references (R7RS's two hygiene
// conditions). Quoted, a marked symbol is the plain symbol.
#pragma once
#include <string>

#include "dlam/syntax.h"
#include "dlam/vm.h"

namespace dlam {

// The rules of (syntax-rules [ellipsis] (literal ...) (pattern template) ...), checked,
// as a value to keep on the macro's symbol. A malformed spec is a Syntax error at its part.
Value makeSyntaxRules(VM& vm, const Sx* spec, const std::string& name, const std::string& file);

// What the expansions of one top-level form may still do: expand (a macro that expands
// into itself stops here) and make forms (one whose expansions grow without end).
constexpr size_t kMaxExpansions = 100000;
constexpr size_t kMaxExpansionForms = 1000000;
struct ExpansionBudget {
  size_t expansions = kMaxExpansions;
  size_t forms = kMaxExpansionForms;
};

// The expansion of `use`, a list whose head names the macro with rules `rules`, made of
// new nodes in `arena` located at the use, taken from `budget`. No rule matching, or the
// budget running out, is a Syntax error at the use. *mark (if given) receives the
// expansion's mark.
Sx* expandMacro(VM& vm, SxArena& arena, Value rules, const Sx* use, const std::string& file,
                ExpansionBudget& budget, uint32_t* mark = nullptr);

// The key under which a symbol node binds and is looked up: its name, or for one a macro
// expansion introduced, its name and the expansion's mark.
std::string bindingKey(const Sx* sym);
// The name a key was made from (for messages and variable names).
std::string keyName(const std::string& key);

// Special forms and auxiliary keywords, which define-syntax may not redefine.
bool isReservedKeyword(const std::string& name);

}  // namespace dlam
