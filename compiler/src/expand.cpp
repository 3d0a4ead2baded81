// expand.cpp — the expander's scopes, macro uses, expressions and core forms (quote,
// if, lambda, let, letrec, begin, define and bodies), quoted data, and expand.h's entry
// points. The derived forms, quasiquote and include are parts of their own, included
// here (expander.h says why).
#include <cstring>
#include <fstream>
#include <string_view>

#include "expand_derived.h"
#include "expand_include.h"
#include "expand_quasiquote.h"
#include "expander.h"
#include "records.h"

namespace dlam {

namespace {

// The constant vector of a `#(...)` literal (the reader has checked its elements are numbers).
Value vectorLiteral(VM& vm, const Sx* x) {
  Vector* v = vm.makeVector(static_cast<uint32_t>(x->items.size()));
  for (size_t i = 0; i < x->items.size(); ++i) v->items[i] = x->items[i]->number;
  return Value::object(v);
}

// Whether `name` is one of the names Expander::expr treats as a form (when no local
// binding shadows it): a scan of lengths and first letters spares the calls of
// everything else (car, +, user procedures) the comparisons with each form's name.
// (A constant table: nothing allocated, so nothing outlives a VM.)
bool isSpecialFormName(const std::string& name) {
  static constexpr std::string_view kNames[] = {"quote",      "if",
                                                "lambda",     "let",
                                                "let*",       "letrec",
                                                "letrec*",    "begin",
                                                "cond",       "and",
                                                "or",         "when",
                                                "unless",     "case",
                                                "do",         "define",
                                                "quasiquote", "include",
                                                "set!",       "define-syntax",
                                                "unquote",    "unquote-splicing"};
  for (std::string_view k : kNames)
    if (k.size() == name.size() && k[0] == name[0] && k == name) return true;
  return false;
}

}  // namespace

namespace {

// A call of more arguments than this is (apply f list), the list built the way a
// quasiquote builds one (bigCall): a call window, and the code the reverse transform
// makes for it, stay small however many arguments the source writes.
constexpr size_t kMaxCallArgs = 1000;

inline Lambda* Expander::toplevel(Sx* form) {
  Lambda* lam = newLambda("<toplevel>", form->loc);
  Fn fn{lam, nullptr, {}};
  Scope scope(declared_, nullptr);
  enterFn(&fn, &scope, lam->body);
  Atom result;
  if (isForm(form, "define-syntax")) {
    defineSyntax(form, false);
    result = constAtom(Value::voidValue(), form->loc);
  } else if (isForm(form, "define")) {
    auto [name, init, nameLoc] = parseDefine(form);
    // A top-level name a macro introduces defines the plain name.
    Symbol* sym = vm_.intern(keyName(name));
    // The name is a variable from now on, no longer a macro.
    if (!sym->macro.isUndefined()) vm_.setMacro(sym, Value::undefined());
    Atom value = expr(init, name);
    Bind b;
    b.kind = Bind::DefGlobal;
    b.loc = form->loc;
    b.atom = value;
    b.sym = sym;
    cur_->binds.push_back(std::move(b));
    result = constAtom(Value::voidValue(), form->loc);
  } else {
    result = expr(form);
  }
  cur_->result = result;
  return lam;
}

inline Lambda* Expander::newLambda(const std::string& name, SrcLoc loc) {
  Lambda* lam = mod_.newLambda();
  lam->name = keyName(name);
  lam->file = opts_.file;
  lam->loc = loc;
  lam->body = mod_.newBlock();
  return lam;
}

inline Expander::Meaning Expander::meaningFrom(Scope* start, const std::string& name) const {
  if (!declared_.count(name)) return {};
  for (Scope* s = start; s; s = s->parent) {
    if (auto it = s->names.find(name); it != s->names.end()) return {it->second, nullptr, s};
    if (auto it = s->macros.find(name); it != s->macros.end()) return {nullptr, &it->second, s};
  }
  return {};
}

// A name a macro's template put in means what its expansion bound it to, else what the
// name means where the macro was defined: in the body of a define-syntax (markScope_),
// or at top level.
Expander::Meaning Expander::meaning(const Sx* x) const {
  if (!x->mark) return meaningFrom(scope_, x->text);
  Meaning m = meaningFrom(scope_, bindingKey(x));
  if (m.var || m.macro) return m;
  auto it = markScope_.find(x->mark);
  if (it == markScope_.end()) return {};
  return meaningFrom(it->second, x->text);
}

// ---- macros (macros.h) -----------------------------------------------------

// (define-syntax name (syntax-rules ...)): the macro of the top level (on the symbol)
// or, in a body, of the body's scope.
void Expander::defineSyntax(Sx* x, bool inBody) {
  if (x->items.size() != 3 || x->tail || x->items[1]->kind != Sx::Symbol)
    fail(x->loc,
         "define-syntax: expected (define-syntax name (syntax-rules (literal ...) (pattern "
         "template) ...))");
  const std::string& name = x->items[1]->text;
  if (isReservedKeyword(name))
    fail(x->items[1]->loc,
         "define-syntax: '" + name + "' is a special form and cannot be redefined");
  Value rules = makeSyntaxRules(vm_, x->items[2], name, opts_.file);
  if (!inBody) {
    vm_.setMacro(vm_.intern(name), rules);
    // The library's macros are its twins' too (VM::librarySymbol): what its macros'
    // expansions name stays the library's whatever the program defines.
    if (vm_.loadingLibrary()) vm_.setMacro(vm_.libraryTwin(vm_.intern(name)), rules);
  } else if (!scope_->bindMacro(bindingKey(x->items[1]), rules)) {
    fail(x->items[1]->loc, "duplicate binding of '" + name + "'");
  }
}

// The rules of the macro x names (and the body that defined it, or null: top level),
// if x is a symbol that names a macro where it is.
inline std::pair<Value, Scope*> Expander::macroOf(const Sx* x) const {
  if (x->kind != Sx::Symbol) return {Value::undefined(), nullptr};
  Meaning m = meaning(x);
  if (m.var) return {Value::undefined(), nullptr};
  if (m.macro) return {*m.macro, m.scope};
  if (fromLibrary(x)) {
    Symbol* t = vm_.librarySymbol(x->text);
    if (!t->macro.isUndefined()) return {t->macro, nullptr};
  }
  Symbol* s = vm_.findSymbol(x->text);
  return {s ? s->macro : Value::undefined(), nullptr};
}

// Whether rules are those of one of the standard library's macros (defined while it
// loaded: its twin holds them too).
inline bool Expander::libraryMacro(const Sx* head, Value rules) const {
  Symbol* t = vm_.librarySymbol(head->text);
  return t != vm_.findSymbol(head->text) && t->macro == rules;
}

// x with the macro use at its head expanded, again while the result is one. Not
// inlined: expr, which recurses along the nesting, keeps a small frame (StackGuard).
Sx* Expander::expandMacros(Sx* x) {
  while (x->kind == Sx::List && !x->items.empty()) {
    if (isKeyword(x->items[0], "define-record-type")) {
      x = expandRecordType(arena_, x, opts_.file);
      break;
    }
    auto [rules, where] = macroOf(x->items[0]);
    if (rules.isUndefined()) break;
    uint32_t mark = 0;
    bool library = !where && libraryMacro(x->items[0], rules);
    x = expandMacro(vm_, arena_, rules, x, opts_.file, expansionBudget_, &mark);
    if (where) markScope_[mark] = where;
    if (library) libraryMarks_.insert(mark);
  }
  return x;
}

inline Var* Expander::lookup(const std::string& name) const {
  if (!declared_.count(name)) return nullptr;
  for (Scope* s = scope_; s; s = s->parent) {
    auto it = s->names.find(name);
    if (it != s->names.end()) return it->second;
  }
  return nullptr;
}

// A symbol as an expression: its variable (local or global). A macro is not a value.
Atom Expander::resolveSymbol(const Sx* x) {
  Meaning m = meaning(x);
  if (m.macro) fail(x->loc, "the macro '" + x->text + "' is used as a variable");
  if (!m.var)
    return globalAtom(fromLibrary(x) ? vm_.librarySymbol(x->text) : vm_.intern(x->text), x->loc);
  return resolveVar(m.var, x->text, x->loc);
}

// A name the expander made (a do loop's procedure) as an expression.
inline Atom Expander::resolve(const std::string& name, SrcLoc loc) {
  Var* v = lookup(name);
  if (!v) return globalAtom(vm_.intern(name), loc);
  return resolveVar(v, name, loc);
}

inline Atom Expander::resolveVar(Var* v, const std::string& name, SrcLoc loc) {
  Fn* owner = owner_.at(v);
  if (owner == fn_ && uninit_.count(v))
    fail(loc, "variable '" + name + "' used before its definition");
  for (Fn* f = fn_; f && f != owner; f = f->parent) {
    if (f->freeSet.insert(v).second) f->lam->freeVars.push_back(v);
  }
  return localAtom(v, loc);
}

inline Var* Expander::declare(Scope& scope, const std::string& name, SrcLoc loc, bool rec) {
  Var* v = mod_.newVar(keyName(name));
  v->rec = rec;
  owner_[v] = fn_;
  if (!scope.bind(name, v)) fail(loc, "duplicate binding of '" + keyName(name) + "'");
  return v;
}

// The binding key of a symbol in a binding position (bindingKey: a name a macro put
// in binds apart from the program's own).
inline std::string Expander::symbolName(const Sx* x, const char* what) {
  if (x->kind != Sx::Symbol) fail(x->loc, std::string("expected a symbol as ") + what);
  return bindingKey(x);
}

// Expands `x` so that its value lands in variable `dst` (closures get dst as their
// own binding, so letrec patching and naming work directly).
inline void Expander::exprInto(Sx* x, Var* dst, const std::string& name) {
  if (isForm(x, "lambda")) {
    lambdaExpr(x, name, dst);
    return;
  }
  Atom a = expr(x, name);
  Bind b;
  b.kind = Bind::Copy;
  b.dst = dst;
  b.loc = x->loc;
  b.atom = a;
  cur_->binds.push_back(std::move(b));
}

inline Atom Expander::expr(Sx* x, const std::string& nameHint) {
  DepthGuard guard(*this, x->loc);
  x = expandMacros(x);
  switch (x->kind) {
    case Sx::Number:
      return constAtom(Value::numberChecked(x->number), x->loc);
    case Sx::Bool:
      return constAtom(Value::boolean(x->boolean), x->loc);
    case Sx::String:
      return constAtom(vm_.makeString(x->text), x->loc);
    case Sx::Char:
      return constAtom(Value::character(x->code), x->loc);
    case Sx::Symbol:
      return resolveSymbol(x);
    case Sx::Vector:
      return constAtom(vectorLiteral(vm_, x), x->loc);
    case Sx::List:
      break;
  }
  if (x->tail) fail(x->loc, "a dotted list is not an expression");
  if (x->items.empty()) fail(x->loc, "empty combination '()': quote it to get the empty list");
  Sx* head = x->items[0];
  if (head->kind == Sx::Symbol && isSpecialFormName(head->text) && !lookupSymbol(head)) {
    const std::string& k = head->text;
    if (k == "quote") {
      if (x->items.size() != 2) fail(x->loc, "quote: expected exactly one datum");
      return constAtom(quoteDatum(vm_, x->items[1]), x->loc);
    }
    if (k == "if") return ifExpr(x);
    if (k == "lambda") return localAtom(lambdaExpr(x, nameHint, nullptr), x->loc);
    if (k == "let") return letExpr(x);
    if (k == "let*") return letStarExpr(x);
    if (k == "letrec" || k == "letrec*") return letrecExpr(x);
    if (k == "begin") {
      if (x->items.size() == 1) return constAtom(Value::voidValue(), x->loc);
      return sequence(x->items, 1);
    }
    if (k == "cond") return condExpr(x);
    if (k == "and" || k == "or") return andOrExpr(x, k == "and");
    if (k == "when" || k == "unless") return whenExpr(x, k == "unless");
    if (k == "case") return caseExpr(x);
    if (k == "do") return doExpr(x);
    if (k == "quasiquote") return quasiquoteExpr(x);
    if (k == "define") fail(x->loc, "define: only allowed at top level or at the start of a body");
    if (k == "define-syntax")
      fail(x->loc, "define-syntax: only allowed at top level or at the start of a body");
    if (k == "include") return includeExpr(x);
    if (k == "set!") fail(x->loc, "set!: dlam is a pure language; there is no assignment");
    if (k == "unquote" || k == "unquote-splicing")
      fail(x->loc, k + ": only allowed inside a quasiquote (one level of unquote per level of "
                       "quasiquote)");
  }
  if (x->items.size() - 1 > kMaxCallArgs) return bigCall(x);
  std::vector<Atom> args;
  args.reserve(x->items.size() + 1);
  for (Sx* item : x->items) args.push_back(expr(item));
  // (assert e) of the builtin gets e's text as its message: "assertion failed: e".
  if (args.size() == 2 && builtinOf(vm_, args[0]) == NativeId::Assert)
    args.push_back(constAtom(quoteDatum(vm_, x->items[1]), x->loc));
  return call(std::move(args), x->loc);
}

// (f a1 ... an) for n > kMaxCallArgs: (apply f (list a1 ... an)), the arguments
// evaluated in order into (list ...) pieces of kQqChunk joined by qqAdd/qqJoin, so
// few values are pending at once (data written as (list ...)). For + - * / (the
// builtins) it is a left fold of calls of kMaxCallArgs arguments instead,
// (+ (+ a1 ... ak) ak+1 ...): the same operations in the same order, and under a
// derivative the terms stay numbers (no list of reverse-tagged values).
Atom Expander::bigCall(Sx* x) {
  Atom f = expr(x->items[0]);
  const size_t n = x->items.size();
  if (isFoldable(f)) {
    std::vector<Atom> args{f};
    for (size_t i = 1; i < n; ++i) {
      args.push_back(expr(x->items[i]));
      if (args.size() == kMaxCallArgs + 1 && i + 1 < n) args = {f, call(std::move(args), x->loc)};
    }
    return call(std::move(args), x->loc);
  }
  std::vector<std::vector<Atom>> levels;
  std::vector<Atom> group{builtinAtom(NativeId::List, "list", x->loc)};
  for (size_t i = 1; i < n; ++i) {
    group.push_back(expr(x->items[i]));
    if (group.size() == kQqChunk + 1 || i + 1 == n) {
      qqAdd(levels, call(std::move(group), x->loc), x->loc);
      group = {builtinAtom(NativeId::List, "list", x->loc)};
    }
  }
  return call({builtinAtom(NativeId::Apply, "apply", x->loc), f, qqJoin(levels, x->loc)}, x->loc);
}

// f is the builtin + - * or / (a global still bound to it): (f a b c ...) is ((a f b) f c) ...
inline bool Expander::isFoldable(const Atom& f) {
  NativeId id = builtinOf(vm_, f);
  return id == NativeId::Add || id == NativeId::Sub || id == NativeId::Mul || id == NativeId::Div;
}

Atom Expander::sequence(const std::vector<Sx*>& forms, size_t start) {
  Atom last;
  for (size_t i = start; i < forms.size(); ++i) {
    if (isForm(forms[i], "define"))
      fail(forms[i]->loc, "define: only allowed at the start of a body");
    last = expr(forms[i]);
  }
  return last;
}

// (if c t e), and an else-if chain (if c1 t1 (if c2 t2 ...)) as one chain.
Atom Expander::ifExpr(Sx* x) {
  Sx* form = x;
  bool done = false;
  return chain([&](size_t) -> Step {
    size_t n = form->items.size();
    if (done) return n == 4 ? expr(form->items[3]) : constAtom(Value::voidValue(), form->loc);
    if (n != 3 && n != 4) fail(form->loc, "if: expected (if test then [else])");
    Atom c = expr(form->items[1]);
    Link link{c, form->loc, false, [this, t = form->items[2]] { return expr(t); }};
    if (n == 4 && isForm(form->items[3], "if") && !form->items[3]->tail)
      form = form->items[3];
    else
      done = true;
    return link;
  });
}

// ---- lambda and bodies -----------------------------------------------------

Var* Expander::lambdaExpr(Sx* x, const std::string& name, Var* dst) {
  if (x->items.size() < 3) fail(x->loc, "lambda: expected (lambda params body...)");
  return makeLambda(x->items[1], x->items, 2, name, x->loc, dst);
}

// Builds a closure from a parameter spec and body forms[start..].
inline Var* Expander::makeLambda(Sx* params, const std::vector<Sx*>& forms, size_t start,
                                 const std::string& name, SrcLoc loc, Var* dst) {
  Lambda* lam = newLambda(name, loc);
  Fn fn{lam, fn_, {}};
  Scope scope(declared_, scope_);
  Fn* savedFn = fn_;
  Scope* savedScope = scope_;
  Block* savedCur = cur_;
  enterFn(&fn, &scope, lam->body);
  if (params->kind == Sx::Symbol) {
    lam->rest = declare(scope, bindingKey(params), params->loc);
  } else if (params->kind == Sx::List) {
    for (Sx* p : params->items)
      lam->params.push_back(declare(scope, symbolName(p, "a parameter"), p->loc));
    if (params->tail)
      lam->rest = declare(scope, symbolName(params->tail, "a rest parameter"), params->tail->loc);
  } else {
    fail(params->loc, "lambda: parameters must be a symbol or a list of symbols");
  }
  lam->body->result = body(forms, start, loc);
  enterFn(savedFn, savedScope, savedCur);
  Bind b;
  b.kind = Bind::MakeLambda;
  b.loc = loc;
  b.lambda = lam;
  b.dst = dst;
  return emit(std::move(b));
}

// (define name expr) or (define (name . params) body...): returns the name and an
// init expression (a synthesised lambda form for the second shape). A curried head,
// (define ((name a) b) body...), is (define (name a) (lambda (b) body...)), to any
// depth (unwrapped by a loop, outermost parameter list last).
inline Expander::DefineParts Expander::parseDefine(Sx* x) {
  if (x->items.size() < 2)
    fail(x->loc, "define: expected (define name value) or (define (name params...) body...)");
  Sx* target = x->items[1];
  if (target->kind == Sx::Symbol) {
    if (x->items.size() != 3) fail(x->loc, "define: expected (define " + target->text + " value)");
    return {bindingKey(target), x->items[2], target->loc};
  }
  if (target->kind != Sx::List || target->items.empty())
    fail(target->loc, "define: expected a name or (name params...)");
  if (x->items.size() < 3) fail(x->loc, "define: the function has no body");
  std::vector<Sx*> forms(x->items.begin() + 2, x->items.end());
  for (;;) {
    // Synthesise (lambda params body...).
    Sx* lam = arena_.make(Sx::List, x->loc);
    lam->items.push_back(arena_.make(Sx::Symbol, x->loc));
    lam->items[0]->text = "lambda";
    Sx* params = arena_.make(Sx::List, target->loc);
    params->items.assign(target->items.begin() + 1, target->items.end());
    params->tail = target->tail;
    lam->items.push_back(params);
    lam->items.insert(lam->items.end(), forms.begin(), forms.end());
    Sx* head = target->items[0];
    if (head->kind != Sx::List) return {symbolName(head, "the defined name"), lam, target->loc};
    if (head->items.empty())
      fail(head->loc, "define: expected a name or (name params...) in a curried definition");
    forms.assign(1, lam);
    target = head;
  }
}

// A body: internal defines (letrec* semantics) followed by expressions.
inline Atom Expander::body(const std::vector<Sx*>& forms, size_t start, SrcLoc loc) {
  if (start >= forms.size()) fail(loc, "empty body");
  // The body's scope holds its macros (define-syntax) while the forms are spliced, and
  // then its definitions.
  Scope scope(declared_, scope_);
  Scope* saved = scope_;
  scope_ = &scope;
  std::vector<Sx*> expanded;  // with (include ...) and (begin ...) of defines spliced
  for (size_t i = start; i < forms.size(); ++i) spliceBodyForm(forms[i], expanded);
  if (expanded.empty()) fail(loc, "empty body (it holds only macro definitions)");
  std::vector<DefineParts> defs;
  for (Sx* f : expanded)
    if (isForm(f, "define")) defs.push_back(parseDefine(f));
  std::vector<Var*> recVars;
  for (auto& d : defs) recVars.push_back(declare(scope, d.name, d.loc, true));
  if (!recVars.empty()) {
    for (Var* v : recVars) uninit_.insert(v);
    Bind b;
    b.kind = Bind::Rec;
    b.loc = loc;
    b.recVars = recVars;
    cur_->binds.push_back(std::move(b));
  }
  Atom result = constAtom(Value::voidValue(), loc);
  size_t d = 0;
  for (Sx* f : expanded) {
    if (isForm(f, "define")) {
      Var* v = recVars[d];
      exprInto(defs[d].init, v, defs[d].name);
      uninit_.erase(v);
      ++d;
      result = constAtom(Value::voidValue(), f->loc);
    } else {
      result = expr(f);
    }
  }
  scope_ = saved;
  return result;
}

// Appends the forms f stands for in a body: f itself, or (R7RS) the forms of an
// include or of a begin, spliced, after expanding a macro use at the head (it may
// expand into definitions). An explicit stack: nested begins cost no C++ stack.
void Expander::spliceBodyForm(Sx* f, std::vector<Sx*>& out) {
  std::vector<Sx*> work{f};
  while (!work.empty()) {
    Sx* g = expandMacros(work.back());
    work.pop_back();
    if (isForm(g, "define-syntax")) {
      defineSyntax(g, true);
    } else if (isForm(g, "include")) {
      std::vector<Sx*> forms = includedForms(g);
      work.insert(work.end(), forms.rbegin(), forms.rend());
    } else if (isForm(g, "begin") && g->items.size() > 1 && !g->tail) {
      work.insert(work.end(), g->items.rbegin(), g->items.rend() - 1);
    } else {
      out.push_back(g);
    }
  }
}

inline std::vector<Expander::Binding> Expander::parseBindings(Sx* list, const char* who) {
  if (list->kind != Sx::List || list->tail)
    fail(list->loc, std::string(who) + ": expected a list of bindings");
  std::vector<Binding> out;
  for (Sx* b : list->items) {
    if (b->kind != Sx::List || b->items.size() != 2 || b->tail)
      fail(b->loc, std::string(who) + ": each binding must be (name value)");
    out.push_back({symbolName(b->items[0], "a bound name"), b->items[1], b->items[0]->loc});
  }
  return out;
}

Atom Expander::letExpr(Sx* x) {
  if (x->items.size() >= 2 && x->items[1]->kind == Sx::Symbol) return namedLet(x);
  if (x->items.size() < 3) fail(x->loc, "let: expected (let ((name value) ...) body...)");
  auto bindings = parseBindings(x->items[1], "let");
  // Inits are evaluated in the outer scope, before any of the names is bound.
  std::vector<Var*> vars;
  std::unordered_set<std::string> seen;
  for (auto& b : bindings) {
    if (!seen.insert(b.name).second) fail(b.loc, "let: duplicate binding of '" + b.name + "'");
    Var* v = mod_.newVar(b.name);
    owner_[v] = fn_;
    exprInto(b.init, v, b.name);
    vars.push_back(v);
  }
  Scope scope(declared_, scope_);
  for (size_t i = 0; i < vars.size(); ++i) scope.bind(bindings[i].name, vars[i]);
  Scope* saved = scope_;
  scope_ = &scope;
  Atom r = body(x->items, 2, x->loc);
  scope_ = saved;
  return r;
}

Atom Expander::letrecExpr(Sx* x) {
  if (x->items.size() < 3) fail(x->loc, "letrec: expected (letrec ((name value) ...) body...)");
  auto bindings = parseBindings(x->items[1], "letrec");
  Scope scope(declared_, scope_);
  Scope* saved = scope_;
  scope_ = &scope;
  std::vector<Var*> vars;
  for (auto& b : bindings) vars.push_back(declare(scope, b.name, b.loc, true));
  if (!vars.empty()) {
    for (Var* v : vars) uninit_.insert(v);
    Bind rb;
    rb.kind = Bind::Rec;
    rb.loc = x->loc;
    rb.recVars = vars;
    cur_->binds.push_back(std::move(rb));
  }
  for (size_t i = 0; i < bindings.size(); ++i) {
    exprInto(bindings[i].init, vars[i], bindings[i].name);
    uninit_.erase(vars[i]);
  }
  Atom r = body(x->items, 2, x->loc);
  scope_ = saved;
  return r;
}

}  // namespace

Value quoteDatum(VM& vm, const Sx* datum) {
  // Post-order over the datum with an explicit stack; results on a value stack.
  struct Item {
    const Sx* x;
    bool expanded;
  };
  std::vector<Item> work{{datum, false}};
  std::vector<Value> values;
  while (!work.empty()) {
    Item it = work.back();
    work.pop_back();
    const Sx* x = it.x;
    switch (x->kind) {
      case Sx::Number:
        values.push_back(Value::numberChecked(x->number));
        continue;
      case Sx::Bool:
        values.push_back(Value::boolean(x->boolean));
        continue;
      case Sx::String:
        values.push_back(vm.makeString(x->text));
        continue;
      case Sx::Char:
        values.push_back(Value::character(x->code));
        continue;
      case Sx::Symbol:
        values.push_back(vm.symbol(x->text));
        continue;
      case Sx::Vector:
        values.push_back(vectorLiteral(vm, x));
        continue;
      case Sx::List:
        break;
    }
    if (!it.expanded) {
      work.push_back({x, true});
      for (const Sx* item : x->items) work.push_back({item, false});
      if (x->tail) work.push_back({x->tail, false});
      continue;
    }
    // Children were pushed left to right (tail last) and so were converted in reverse:
    // their values sit on the stack as [tail?, item_{n-1}, ..., item_0].
    Value l = Value::nil();
    size_t n = x->items.size();
    std::vector<Value> parts(values.end() - static_cast<std::ptrdiff_t>(n + (x->tail ? 1 : 0)),
                             values.end());
    values.resize(values.size() - parts.size());
    size_t k = 0;
    if (x->tail) l = parts[k++];
    for (; k < parts.size(); ++k) l = vm.cons(parts[k], l);
    values.push_back(l);
  }
  return values.back();
}

std::string readSourceFile(const std::string& path, const std::string& who, const std::string& file,
                           SrcLoc loc) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::Syntax, who + "cannot open '" + path + "'", file, loc);
  // Not `stream << in.rdbuf()`, which swallows a failed allocation (std::bad_alloc must
  // reach the driver) and would return the part of the file read so far.
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0)
    text.append(buf, static_cast<size_t>(in.gcount()));
  if (in.bad()) throw Error(ErrorKind::Syntax, who + "cannot read '" + path + "'", file, loc);
  return text;
}

anf::Lambda* expandToplevel(VM& vm, anf::Module& mod, Sx* form, SxArena& arena,
                            const ExpandOptions& opts) {
  Expander e(vm, mod, arena, opts);
  return e.toplevel(form);
}

}  // namespace dlam
