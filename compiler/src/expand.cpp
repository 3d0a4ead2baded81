// expand.cpp — the expander: s-expressions to A-normal form in one pass.
//
// It resolves names against lexical scopes (unbound names are globals), records
// each lambda's free variables in order of first occurrence, turns the derived
// forms (let*, named let, cond, case, do, and, or, when, unless, quasiquote,
// internal defines) into the core (bindings, calls, closures, conditionals, letrec
// groups), and names every intermediate value. Recursion here follows the nesting
// of the source text (never the length of a list) and is bounded by kMaxDepth and
// the compiler's stack budget, reported as a clean error. The chains of
// conditionals that cond, case, and, or and else-if chains of `if` become (see
// anf::tailIf) are built by one loop, chain(), however long they are.
#include "expand.h"

#include "macros.h"
#include "stack_guard.h"

#include <cstring>
#include <fstream>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <variant>

namespace dlam {

using namespace anf;

namespace {

// The constant vector of a `#(...)` literal (the reader has checked its elements are numbers).
Value vectorLiteral(VM& vm, const Sx* x) {
  Vector* v = vm.makeVector(static_cast<uint32_t>(x->items.size()));
  for (size_t i = 0; i < x->items.size(); ++i) v->items[i] = x->items[i]->number;
  return Value::object(v);
}

constexpr int kMaxDepth = 2000;

// The scope name of a `do` loop's procedure: not a symbol any program can write (a
// |symbol| holds no control characters).
constexpr const char* kDoLoop = "\x01(do)";

// A quasiquoted list is built from (list ...) calls of at most kQqChunk elements
// joined by appends of at most kQqChunk lists; constant runs of kQqRun elements or
// more are quoted pieces of their own.
constexpr size_t kQqChunk = 64;
constexpr size_t kQqRun = 16;
// A call of more arguments than this is (apply f list), the list built the way a
// quasiquote builds one (bigCall): a call window, and the code the reverse transform
// makes for it, stay small however many arguments the source writes.
constexpr size_t kMaxCallArgs = 1000;

struct Fn {
  Lambda* lam;
  Fn* parent;
  std::unordered_set<Var*> freeSet;
};

// A lexical scope: the names it binds, and its parent. Every name bound in a live scope
// is also counted in the expander's `declared` map, so that looking up a name that no
// scope binds (a global, a keyword) is one hash lookup, not a walk up the whole chain of
// scopes (quadratic in deeply nested code).
struct Scope {
  Scope(std::unordered_map<std::string, uint32_t>& declared, Scope* parent)
      : declared(declared), parent(parent) {}
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  ~Scope() {
    for (const auto& entry : names)
      if (auto it = declared.find(entry.first); --it->second == 0) declared.erase(it);
    for (const auto& entry : macros)
      if (auto it = declared.find(entry.first); --it->second == 0) declared.erase(it);
  }
  // Binds `name` to v; false if this scope binds it already, unless `replace` (let*, whose
  // later bindings shadow the earlier ones of the same name).
  bool bind(const std::string& name, Var* v, bool replace = false) {
    if (macros.count(name)) return false;
    if (auto it = names.find(name); it != names.end()) {
      if (replace) it->second = v;
      return replace;
    }
    counted(name, [&] { names.emplace(name, v); });
    return true;
  }

  // Binds `name` to the rules of a macro defined in this body; false if the scope binds
  // the name already.
  bool bindMacro(const std::string& name, Value rules) {
    if (names.count(name) || macros.count(name)) return false;
    counted(name, [&] { macros.emplace(name, rules); });
    return true;
  }

  // Counts `name` in `declared`, then stores it (insert): if that cannot be done
  // (std::bad_alloc), the scope does not hold the name and the count is as it was.
  template <class Insert>
  void counted(const std::string& name, Insert insert) {
    uint32_t& count = declared[name];
    ++count;
    try {
      insert();
    } catch (...) {
      if (--count == 0) declared.erase(name);
      throw;
    }
  }

  std::unordered_map<std::string, Var*> names;
  // The macros defined in this body (define-syntax in a body). No collection runs while a
  // form is compiled, so the rules need no root.
  std::unordered_map<std::string, Value> macros;
  std::unordered_map<std::string, uint32_t>& declared;
  Scope* parent;
};

class Expander {
 public:
  Expander(VM& vm, Module& mod, SxArena& arena, const ExpandOptions& opts)
      : vm_(vm), mod_(mod), arena_(arena), opts_(opts) {}

  Lambda* toplevel(Sx* form) {
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

 private:
  [[noreturn]] void fail(SrcLoc loc, const std::string& msg) {
    throw Error(ErrorKind::Syntax, msg, opts_.file, loc);
  }

  Lambda* newLambda(const std::string& name, SrcLoc loc) {
    Lambda* lam = mod_.newLambda();
    lam->name = keyName(name);
    lam->file = opts_.file;
    lam->loc = loc;
    lam->body = mod_.newBlock();
    return lam;
  }

  void enterFn(Fn* fn, Scope* scope, Block* block) {
    fn_ = fn;
    scope_ = scope;
    cur_ = block;
  }

  // Is `x` a list whose head is the (unshadowed) keyword `kw`?
  bool isForm(const Sx* x, const char* kw) const {
    return x->kind == Sx::List && !x->items.empty() && isKeyword(x->items[0], kw);
  }

  // Is `x` the symbol `kw`, not bound by a scope (a keyword, also when a macro put it in)?
  bool isKeyword(const Sx* x, const char* kw) const {
    if (!x->isSymbol(kw)) return false;
    Meaning m = meaning(x);
    return !m.var && !m.macro;
  }

  // The local variable a symbol refers to, if it refers to one.
  Var* lookupSymbol(const Sx* x) const { return meaning(x).var; }

  // What a symbol means where it is: a local variable, a macro defined in a body (and
  // that body's scope), or neither (a global or a keyword: the top level).
  struct Meaning {
    Var* var = nullptr;
    const Value* macro = nullptr;
    Scope* scope = nullptr;
  };
  Meaning meaningFrom(Scope* start, const std::string& name) const {
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
  [[gnu::noinline]] Meaning meaning(const Sx* x) const {
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
  [[gnu::noinline]] void defineSyntax(Sx* x, bool inBody) {
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
    } else if (!scope_->bindMacro(bindingKey(x->items[1]), rules)) {
      fail(x->items[1]->loc, "duplicate binding of '" + name + "'");
    }
  }

  // The rules of the macro x names (and the body that defined it, or null: top level),
  // if x is a symbol that names a macro where it is.
  std::pair<Value, Scope*> macroOf(const Sx* x) const {
    if (x->kind != Sx::Symbol) return {Value::undefined(), nullptr};
    Meaning m = meaning(x);
    if (m.var) return {Value::undefined(), nullptr};
    if (m.macro) return {*m.macro, m.scope};
    Symbol* s = vm_.findSymbol(x->text);
    return {s ? s->macro : Value::undefined(), nullptr};
  }

  // x with the macro use at its head expanded, again while the result is one. Not
  // inlined: expr, which recurses along the nesting, keeps a small frame (StackGuard).
  [[gnu::noinline]] Sx* expandMacros(Sx* x) {
    while (x->kind == Sx::List && !x->items.empty()) {
      auto [rules, where] = macroOf(x->items[0]);
      if (rules.isUndefined()) break;
      uint32_t mark = 0;
      x = expandMacro(vm_, arena_, rules, x, opts_.file, expansionBudget_, &mark);
      if (where) markScope_[mark] = where;
    }
    return x;
  }

  Var* lookup(const std::string& name) const {
    if (!declared_.count(name)) return nullptr;
    for (Scope* s = scope_; s; s = s->parent) {
      auto it = s->names.find(name);
      if (it != s->names.end()) return it->second;
    }
    return nullptr;
  }

  // A symbol as an expression: its variable (local or global). A macro is not a value.
  [[gnu::noinline]] Atom resolveSymbol(const Sx* x) {
    Meaning m = meaning(x);
    if (m.macro) fail(x->loc, "the macro '" + x->text + "' is used as a variable");
    if (!m.var) return globalAtom(vm_.intern(x->text), x->loc);
    return resolveVar(m.var, x->text, x->loc);
  }

  // A name the expander made (a do loop's procedure) as an expression.
  Atom resolve(const std::string& name, SrcLoc loc) {
    Var* v = lookup(name);
    if (!v) return globalAtom(vm_.intern(name), loc);
    return resolveVar(v, name, loc);
  }

  Atom resolveVar(Var* v, const std::string& name, SrcLoc loc) {
    Fn* owner = owner_.at(v);
    if (owner == fn_ && uninit_.count(v))
      fail(loc, "variable '" + name + "' used before its definition");
    for (Fn* f = fn_; f && f != owner; f = f->parent) {
      if (f->freeSet.insert(v).second) f->lam->freeVars.push_back(v);
    }
    return localAtom(v, loc);
  }

  Var* declare(Scope& scope, const std::string& name, SrcLoc loc, bool rec = false) {
    Var* v = mod_.newVar(keyName(name));
    v->rec = rec;
    owner_[v] = fn_;
    if (!scope.bind(name, v)) fail(loc, "duplicate binding of '" + keyName(name) + "'");
    return v;
  }

  Var* emit(Bind b) {
    if (!b.dst) b.dst = mod_.newVar("");
    Var* d = b.dst;
    cur_->binds.push_back(std::move(b));
    return d;
  }

  Atom call(std::vector<Atom> args, SrcLoc loc, Var* dst = nullptr) {
    Bind b;
    b.kind = Bind::Call;
    b.loc = loc;
    b.args = std::move(args);
    b.dst = dst;
    return localAtom(emit(std::move(b)), loc);
  }

  // The binding key of a symbol in a binding position (bindingKey: a name a macro put
  // in binds apart from the program's own).
  std::string symbolName(const Sx* x, const char* what) {
    if (x->kind != Sx::Symbol) fail(x->loc, std::string("expected a symbol as ") + what);
    return bindingKey(x);
  }

  // A primitive as a constant callee, so that derived forms mean the builtin even
  // where the program rebinds its name (a global, in a VM without primitives).
  Atom builtinAtom(NativeId id, const char* name, SrcLoc loc) {
    if (Native* n = vm_.builtin(id)) return constAtom(Value::object(n), loc);
    return globalAtom(vm_.intern(name), loc);
  }

  // ---- expressions -----------------------------------------------------------

  struct DepthGuard {
    Expander& e;
    DepthGuard(Expander& ex, SrcLoc loc) : e(ex) {
      if (++e.depth_ > kMaxDepth || e.stack_.exceeded())
        e.fail(loc, "expression nested too deeply (more than " + std::to_string(kMaxDepth) +
                        " levels, or the compiler's stack budget)");
    }
    ~DepthGuard() { --e.depth_; }
  };

  // Expands `x` so that its value lands in variable `dst` (closures get dst as their
  // own binding, so letrec patching and naming work directly).
  void exprInto(Sx* x, Var* dst, const std::string& name) {
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

  Atom expr(Sx* x, const std::string& nameHint = "") {
    DepthGuard guard(*this, x->loc);
    x = expandMacros(x);
    switch (x->kind) {
      case Sx::Number:
        return constAtom(Value::numberChecked(x->number), x->loc);
      case Sx::Bool:
        return constAtom(Value::boolean(x->boolean), x->loc);
      case Sx::String:
        return constAtom(vm_.makeString(x->text), x->loc);
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
    if (head->kind == Sx::Symbol && !lookupSymbol(head)) {
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
      if (k == "define")
        fail(x->loc, "define: only allowed at top level or at the start of a body");
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
  [[gnu::noinline]] Atom bigCall(Sx* x) {
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
  bool isFoldable(const Atom& f) {
    NativeId id = builtinOf(vm_, f);
    return id == NativeId::Add || id == NativeId::Sub || id == NativeId::Mul || id == NativeId::Div;
  }

  [[gnu::noinline]] Atom sequence(const std::vector<Sx*>& forms, size_t start) {
    Atom last;
    for (size_t i = start; i < forms.size(); ++i) {
      if (isForm(forms[i], "define"))
        fail(forms[i]->loc, "define: only allowed at the start of a body");
      last = expr(forms[i]);
    }
    return last;
  }

  // Expands `(if c t e)` where the branches are given as expanders.
  template <class Then, class Else>
  Atom branch(Atom cond, SrcLoc loc, Then thenF, Else elseF) {
    DepthGuard guard(*this, loc);
    Bind b;
    b.kind = Bind::If;
    b.loc = loc;
    b.atom = cond;
    b.thenB = mod_.newBlock();
    b.elseB = mod_.newBlock();
    Block* saved = cur_;
    cur_ = b.thenB;
    b.thenB->result = thenF();
    cur_ = b.elseB;
    b.elseB->result = elseF();
    cur_ = saved;
    return localAtom(emit(std::move(b)), loc);
  }

  // One link of a chain of conditionals: its test, and the branch where the chain
  // stops, as an expander; the chain goes on in the other branch.
  struct Link {
    Atom test;
    SrcLoc loc;
    bool onInThen;  // the chain goes on in the then branch (and), else in the else branch
    std::function<Atom()> stop;  // expands the branch where it stops
  };
  using Step = std::variant<Link, Atom>;

  // Expands a chain of conditionals with a loop: step(i) expands part i of the form
  // into the current block and gives its link, or, for the last part, the value of
  // the innermost branch. Each link's `if` ends the block of the branch before it and
  // gives its value (anf::tailIf). Only the chain's own nesting is looped over: what
  // each part holds is expanded by expr() as usual, under the depth guard.
  template <class StepF>
  Atom chain(StepF step) {
    Block* saved = cur_;
    Atom value;
    for (size_t i = 0;; ++i) {
      Step part = step(i);
      Atom* last = std::get_if<Atom>(&part);
      Atom r = last ? *last : Atom();
      Block* stop = nullptr;
      Block* next = nullptr;
      Link* link = std::get_if<Link>(&part);
      if (link) {
        Bind b;
        b.kind = Bind::If;
        b.loc = link->loc;
        b.atom = link->test;
        b.thenB = mod_.newBlock();
        b.elseB = mod_.newBlock();
        stop = link->onInThen ? b.elseB : b.thenB;
        next = link->onInThen ? b.thenB : b.elseB;
        r = localAtom(emit(std::move(b)), link->loc);
      }
      if (i == 0)
        value = r;
      else
        cur_->result = r;
      if (!link) break;
      cur_ = stop;
      stop->result = link->stop();
      cur_ = next;
    }
    cur_ = saved;
    return value;
  }

  // (if c t e), and an else-if chain (if c1 t1 (if c2 t2 ...)) as one chain.
  [[gnu::noinline]] Atom ifExpr(Sx* x) {
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

  [[gnu::noinline]] Atom condExpr(Sx* x) {
    return chain([&](size_t k) -> Step {
      size_t i = k + 1;
      if (i >= x->items.size()) return constAtom(Value::voidValue(), x->loc);
      Sx* clause = x->items[i];
      if (clause->kind != Sx::List || clause->items.empty() || clause->tail)
        fail(clause->loc, "cond: each clause must be a non-empty list");
      if (isKeyword(clause->items[0], "else")) {
        if (i + 1 != x->items.size()) fail(clause->loc, "cond: else must be the last clause");
        if (clause->items.size() < 2) fail(clause->loc, "cond: else clause needs a body");
        return sequence(clause->items, 1);
      }
      Atom test = expr(clause->items[0]);
      // (cond (test) ...) yields the test's value when true.
      if (clause->items.size() == 1) return Link{test, clause->loc, false, [test] { return test; }};
      if (isKeyword(clause->items[1], "=>")) {
        if (clause->items.size() != 3) fail(clause->loc, "cond: expected (test => receiver)");
        return Link{test, clause->loc, false, [this, clause, test] {
                      Atom f = expr(clause->items[2]);
                      return call({f, test}, clause->loc);
                    }};
      }
      return Link{test, clause->loc, false, [this, clause] { return sequence(clause->items, 1); }};
    });
  }

  // (and a b ...) goes on in the then branches, (or a b ...) in the else branches;
  // where it stops, the value is the operand's: #f for and (the only false value),
  // so that an operand used only as the test (a comparison) is a compare-and-jump.
  [[gnu::noinline]] Atom andOrExpr(Sx* x, bool isAnd) {
    if (x->items.size() == 1) return constAtom(Value::boolean(isAnd), x->loc);
    return chain([&](size_t k) -> Step {
      size_t i = k + 1;
      Atom a = expr(x->items[i]);
      if (i + 1 == x->items.size()) return a;
      Atom stop = isAnd ? constAtom(Value::boolean(false), x->items[i]->loc) : a;
      return Link{a, x->items[i]->loc, isAnd, [stop] { return stop; }};
    });
  }

  [[gnu::noinline]] Atom whenExpr(Sx* x, bool unless) {
    if (x->items.size() < 3)
      fail(x->loc, std::string(unless ? "unless" : "when") + ": expected a test and a body");
    Atom c = expr(x->items[1]);
    auto body = [&] { return sequence(x->items, 2); };
    auto nothing = [&] { return constAtom(Value::voidValue(), x->loc); };
    if (unless) return branch(c, x->loc, nothing, body);
    return branch(c, x->loc, body, nothing);
  }

  // (case key ((datum...) expr...) ... [(else expr...)]), each clause also as
  // (... => receiver). The key is evaluated once and compared with eqv? (numbers by
  // value, symbols, booleans and '() by identity); clauses chain like cond's.
  [[gnu::noinline]] Atom caseExpr(Sx* x) {
    if (x->items.size() < 2) fail(x->loc, "case: expected (case key clause...)");
    Atom key = expr(x->items[1]);
    if (key.kind == Atom::Global) {
      Bind b;
      b.kind = Bind::Copy;
      b.loc = x->items[1]->loc;
      b.atom = key;
      key = localAtom(emit(std::move(b)), key.loc);
    }
    return chain([&](size_t k) -> Step {
      size_t i = k + 2;
      if (i >= x->items.size()) return constAtom(Value::voidValue(), x->loc);
      Sx* clause = x->items[i];
      if (clause->kind != Sx::List || clause->tail || clause->items.empty())
        fail(clause->loc, "case: each clause must be ((datum...) expr...) or (else expr...)");
      Sx* data = clause->items[0];
      bool isElse = isKeyword(data, "else");
      if (isElse && i + 1 != x->items.size())
        fail(clause->loc, "case: else must be the last clause");
      if (!isElse && (data->kind != Sx::List || data->tail))
        fail(data->loc,
             "case: a clause must start with a list of data, as in ((1 2) expr), or else");
      if (clause->items.size() < 2)
        fail(clause->loc, isElse ? "case: else clause needs a body" : "case: clause needs a body");
      auto consequent = [this, clause, key] {
        if (isKeyword(clause->items[1], "=>")) {
          if (clause->items.size() != 3) fail(clause->loc, "case: expected (data => receiver)");
          Atom f = expr(clause->items[2]);
          return call({f, key}, clause->loc);
        }
        return sequence(clause->items, 1);
      };
      if (isElse) return consequent();
      return Link{caseMatch(key, data->items, data->loc), clause->loc, false, consequent};
    });
  }

  // Whether key is eqv? to one of the data: a flat run of conditionals (each takes
  // the previous result if true, else tests the next datum), nested by none.
  Atom caseMatch(const Atom& key, const std::vector<Sx*>& data, SrcLoc loc) {
    auto test = [&](Sx* d) {
      return call(
          {builtinAtom(NativeId::EqvP, "eqv?", d->loc), key, constAtom(quoteDatum(vm_, d), d->loc)},
          d->loc);
    };
    if (data.empty()) return constAtom(Value::boolean(false), loc);
    Atom found = test(data[0]);
    for (size_t j = 1; j < data.size(); ++j) {
      Atom prev = found;
      found = branch(
          prev, loc, [&] { return prev; }, [&] { return test(data[j]); });
    }
    return found;
  }

  // (do ((var init [step]) ...) (test expr...) command...): a loop procedure under a
  // name no program can spell, called in tail position:
  //   (let <loop> ((var init) ...)
  //     (if test (begin expr...) (begin command... (<loop> step-or-var ...))))
  // The value is that of the last expr, void without one. The parts are expanded in
  // the order of the text (init and step of each variable, the test, the exprs, the
  // commands), so that free variables are found in order of first occurrence; the
  // steps are expanded into a block of their own, moved after the commands.
  [[gnu::noinline]] Atom doExpr(Sx* x) {
    if (x->items.size() < 3)
      fail(x->loc, "do: expected (do ((var init [step]) ...) (test expr...) command...)");
    Sx* specs = x->items[1];
    if (specs->kind != Sx::List || specs->tail)
      fail(specs->loc, "do: expected a list of (var init [step]) bindings");
    struct DoVar {
      Sx* name;
      Sx* init;
      Sx* step;
    };
    std::vector<DoVar> vars;
    std::unordered_set<std::string> seen;
    for (Sx* b : specs->items) {
      if (b->kind != Sx::List || b->tail || b->items.size() < 2 || b->items.size() > 3)
        fail(b->loc, "do: each binding must be (var init) or (var init step)");
      const std::string& name = symbolName(b->items[0], "a do variable");
      if (!seen.insert(name).second)
        fail(b->items[0]->loc, "do: duplicate variable '" + name + "'");
      vars.push_back({b->items[0], b->items[1], b->items.size() == 3 ? b->items[2] : nullptr});
    }
    Sx* term = x->items[2];
    if (term->kind != Sx::List || term->tail || term->items.empty())
      fail(term->loc, "do: expected a termination clause (test expr...) after the bindings");

    Fn* outerFn = fn_;
    Scope* outerScope = scope_;
    Block* outerCur = cur_;
    Scope loopScope(declared_, outerScope);
    Var* loop = declare(loopScope, kDoLoop, x->loc, true);
    Lambda* lam = newLambda("do", x->loc);
    Fn fn{lam, outerFn, {}};
    Scope params(declared_, &loopScope);
    enterFn(&fn, &params, lam->body);
    for (auto& v : vars) lam->params.push_back(declare(params, bindingKey(v.name), v.name->loc));
    // Inits in the outer function (where neither the loop nor its variables are
    // bound), steps in the loop procedure.
    Block* steps = mod_.newBlock();
    std::vector<Atom> args{localAtom(loop, x->loc)};
    std::vector<Atom> next;
    for (auto& v : vars) {
      enterFn(outerFn, outerScope, outerCur);
      args.push_back(expr(v.init, v.name->text));
      enterFn(&fn, &params, steps);
      next.push_back(v.step ? expr(v.step) : resolveSymbol(v.name));
    }
    enterFn(&fn, &params, lam->body);
    Atom test = expr(term->items[0]);
    auto done = [&] {
      if (term->items.size() == 1) return constAtom(Value::voidValue(), term->loc);
      return sequence(term->items, 1);
    };
    auto again = [&] {
      for (size_t i = 3; i < x->items.size(); ++i) {
        if (isForm(x->items[i], "define"))
          fail(x->items[i]->loc, "define: not allowed in the body of do");
        expr(x->items[i]);
      }
      for (Bind& b : steps->binds) cur_->binds.push_back(std::move(b));
      steps->binds.clear();
      next.insert(next.begin(), resolve(kDoLoop, x->loc));
      return call(std::move(next), x->loc);
    };
    lam->body->result = branch(test, term->loc, done, again);
    enterFn(outerFn, outerScope, outerCur);

    Bind rb;
    rb.kind = Bind::Rec;
    rb.loc = x->loc;
    rb.recVars = {loop};
    cur_->binds.push_back(std::move(rb));
    Bind mb;
    mb.kind = Bind::MakeLambda;
    mb.loc = x->loc;
    mb.lambda = lam;
    mb.dst = loop;
    emit(std::move(mb));
    return call(std::move(args), x->loc);
  }

  // ---- quasiquote ------------------------------------------------------------
  //
  // `tmpl is the datum tmpl except where ,expr puts a value and ,@expr splices a
  // list. A nested ` raises the level and , or ,@ lowers it; only level-1 unquotes
  // are evaluated, the others stay in the data. Parts that contain no unquote at
  // all are quoted constants (converted iteratively, whatever their size). A list
  // is built left to right from pieces (a long constant run, a (list e...), a
  // spliced list) joined by append, so the expander loops along a list and recurses
  // only into nested lists that contain unquotes (under the depth guard).

  [[gnu::noinline]] Atom quasiquoteExpr(Sx* x) {
    if (x->items.size() != 2) fail(x->loc, "quasiquote: expected exactly one template");
    markDynamic(x->items[1]);
    return qq(x->items[1], 1);
  }

  static bool isUnquoteSymbol(const Sx* x) {
    return x->isSymbol("unquote") || x->isSymbol("unquote-splicing");
  }

  // Records every list under `root` that contains an unquote symbol at any depth
  // (post-order over an explicit stack). The others are constants.
  void markDynamic(Sx* root) {
    struct Item {
      Sx* x;
      bool expanded;
    };
    std::vector<Item> work{{root, false}};
    while (!work.empty()) {
      Item it = work.back();
      work.pop_back();
      Sx* x = it.x;
      if (x->kind != Sx::List) continue;
      if (!it.expanded) {
        work.push_back({x, true});
        for (Sx* c : x->items) work.push_back({c, false});
        if (x->tail) work.push_back({x->tail, false});
        continue;
      }
      bool dynamic = x->tail && qqDynamic_.count(x->tail);
      for (size_t i = 0; i < x->items.size() && !dynamic; ++i)
        dynamic = isUnquoteSymbol(x->items[i]) || qqDynamic_.count(x->items[i]);
      if (dynamic) qqDynamic_.insert(x);
    }
  }

  bool dynamic(const Sx* x) const { return qqDynamic_.count(x) != 0; }

  // The keyword of a (quasiquote e), (unquote e) or (unquote-splicing e), else null.
  const char* qqKeyword(const Sx* x) const {
    if (x->kind != Sx::Symbol || lookupSymbol(x)) return nullptr;
    for (const char* kw : {"quasiquote", "unquote", "unquote-splicing"})
      if (x->text == kw) return kw;
    return nullptr;
  }
  const char* qqForm(const Sx* x) const {
    if (x->kind != Sx::List || x->tail || x->items.size() != 2) return nullptr;
    return qqKeyword(x->items[0]);
  }
  bool isSplice(const Sx* x, int level) const {
    const char* kw = qqForm(x);
    return level == 1 && kw && std::strcmp(kw, "unquote-splicing") == 0;
  }

  Atom qq(Sx* x, int level) {
    DepthGuard guard(*this, x->loc);
    if (!dynamic(x)) return constAtom(quoteDatum(vm_, x), x->loc);
    if (const char* kw = qqForm(x)) {
      Sx* e = x->items[1];
      int inner = std::strcmp(kw, "quasiquote") == 0 ? level + 1 : level - 1;
      if (inner == 0) {
        if (std::strcmp(kw, "unquote") == 0) return expr(e);
        fail(x->loc,
             "unquote-splicing: ,@ must be an element of a list, not a whole template or a dotted "
             "tail");
      }
      // Kept as data: (kw . (e)) with (e) a list at the inner level, where ,@ may splice.
      Sx* rest = arena_.make(Sx::List, e->loc);
      rest->items = {e};
      if (dynamic(e)) qqDynamic_.insert(rest);
      Atom restAtom = qq(rest, inner);
      return call({builtinAtom(NativeId::Cons, "cons", x->loc), constAtom(vm_.symbol(kw), x->loc),
                   restAtom},
                  x->loc);
    }
    if (level == 1 && !x->items.empty() && isUnquoteSymbol(x->items[0]) && qqKeyword(x->items[0]))
      fail(x->loc, x->items[0]->text + ": expected exactly one expression");
    return qqList(x, level);
  }

  // Checks a spliced value that other elements follow (append would otherwise
  // report the failure under its own name).
  Atom qqCheckedSplice(Sx* form, Atom v) {
    Atom ok = call({builtinAtom(NativeId::ListP, "list?", form->loc), v}, form->loc);
    return branch(
        ok, form->loc, [&] { return v; },
        [&] {
          Atom msg = constAtom(vm_.makeString("unquote-splicing: expected a list, got"), form->loc);
          return call({builtinAtom(NativeId::Error, "error", form->loc), msg, v}, form->loc);
        });
  }

  // Adds a piece of a quasiquoted list to those joined by append. Full groups of
  // kQqChunk are joined as they fill (a group of groups at the next level), so no
  // call gets more arguments and few values are pending at once.
  void qqAdd(std::vector<std::vector<Atom>>& levels, Atom piece, SrcLoc loc) {
    for (size_t k = 0;; ++k) {
      if (levels.size() == k) levels.emplace_back();
      levels[k].push_back(piece);
      if (levels[k].size() < kQqChunk) return;
      std::vector<Atom> args{builtinAtom(NativeId::Append, "append", loc)};
      args.insert(args.end(), levels[k].begin(), levels[k].end());
      levels[k].clear();
      piece = call(std::move(args), loc);
    }
  }

  // Appends the pending pieces in order: the higher levels hold the earlier ones.
  Atom qqJoin(std::vector<std::vector<Atom>>& levels, SrcLoc loc) {
    std::vector<Atom> args{builtinAtom(NativeId::Append, "append", loc)};
    for (size_t k = levels.size(); k-- > 0;)
      args.insert(args.end(), levels[k].begin(), levels[k].end());
    if (args.size() == 1) return constAtom(Value::nil(), loc);
    if (args.size() == 2) return args[1];
    return call(std::move(args), loc);
  }

  Atom qqList(Sx* x, int level) {
    size_t n = x->items.size();
    Sx* tail = x->tail;
    // (a unquote b) is the same datum as (a . ,b).
    if (!tail && n >= 3 && qqKeyword(x->items[n - 2])) {
      Sx* t = arena_.make(Sx::List, x->items[n - 2]->loc);
      t->items = {x->items[n - 2], x->items[n - 1]};
      if (isUnquoteSymbol(x->items[n - 2]) || dynamic(x->items[n - 1])) qqDynamic_.insert(t);
      tail = t;
      n -= 2;
    }
    std::vector<std::vector<Atom>> levels;  // pieces for append; the last one is shared
    std::vector<Atom> group;                // the elements of the next (list ...) piece
    auto flush = [&](SrcLoc loc) {
      if (group.empty()) return;
      group.insert(group.begin(), builtinAtom(NativeId::List, "list", loc));
      qqAdd(levels, call(std::move(group), loc), loc);
      group.clear();
    };
    auto element = [&](Atom a, SrcLoc loc) {
      group.push_back(a);
      if (group.size() == kQqChunk) flush(loc);
    };
    bool tailDone = false;
    size_t i = 0;
    while (i < n) {
      Sx* item = x->items[i];
      if (isSplice(item, level)) {
        flush(item->loc);
        Atom v = expr(item->items[1]);
        qqAdd(levels, i + 1 == n && !tail ? v : qqCheckedSplice(item, v), item->loc);
        ++i;
      } else if (dynamic(item)) {
        element(qq(item, level), item->loc);
        ++i;
      } else {
        // A constant run: its own quoted piece when long or when it ends the list
        // with a constant dotted tail, else elements of the (list ...).
        size_t j = i;
        while (j < n && !dynamic(x->items[j])) ++j;
        bool toEnd = j == n && (!tail || !dynamic(tail));
        if (j - i >= kQqRun || (toEnd && tail)) {
          flush(item->loc);
          Sx* run = arena_.make(Sx::List, item->loc);
          run->items.assign(x->items.begin() + static_cast<std::ptrdiff_t>(i),
                            x->items.begin() + static_cast<std::ptrdiff_t>(j));
          if (toEnd) {
            run->tail = tail;
            tailDone = true;
          }
          qqAdd(levels, constAtom(quoteDatum(vm_, run), item->loc), item->loc);
          i = j;
        } else {
          for (; i < j; ++i)
            element(constAtom(quoteDatum(vm_, x->items[i]), x->items[i]->loc), x->items[i]->loc);
        }
      }
    }
    flush(x->loc);
    if (tail && !tailDone) qqAdd(levels, qq(tail, level), tail->loc);
    return qqJoin(levels, x->loc);
  }

  // ---- lambda and bodies -----------------------------------------------------

  [[gnu::noinline]] Var* lambdaExpr(Sx* x, const std::string& name, Var* dst) {
    if (x->items.size() < 3) fail(x->loc, "lambda: expected (lambda params body...)");
    return makeLambda(x->items[1], x->items, 2, name, x->loc, dst);
  }

  // Builds a closure from a parameter spec and body forms[start..].
  Var* makeLambda(Sx* params, const std::vector<Sx*>& forms, size_t start, const std::string& name,
                  SrcLoc loc, Var* dst) {
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

  struct DefineParts {
    std::string name;
    Sx* init;
    SrcLoc loc;
  };

  // (define name expr) or (define (name . params) body...): returns the name and an
  // init expression (a synthesised lambda form for the second shape). A curried head,
  // (define ((name a) b) body...), is (define (name a) (lambda (b) body...)), to any
  // depth (unwrapped by a loop, outermost parameter list last).
  DefineParts parseDefine(Sx* x) {
    if (x->items.size() < 2)
      fail(x->loc, "define: expected (define name value) or (define (name params...) body...)");
    Sx* target = x->items[1];
    if (target->kind == Sx::Symbol) {
      if (x->items.size() != 3)
        fail(x->loc, "define: expected (define " + target->text + " value)");
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
  Atom body(const std::vector<Sx*>& forms, size_t start, SrcLoc loc) {
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
  [[gnu::noinline]] void spliceBodyForm(Sx* f, std::vector<Sx*>& out) {
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

  std::vector<Sx*> includedForms(Sx* x) {
    if (!opts_.allowInclude) fail(x->loc, "include: not allowed in the sandbox");
    if (x->items.size() != 2 || x->items[1]->kind != Sx::String)
      fail(x->loc, "include: expected (include \"file\")");
    if (++includeDepth_ > 64) fail(x->loc, "include: nested too deeply (an include cycle?)");
    std::string path = x->items[1]->text;
    if (!path.empty() && path[0] != '/' && !opts_.baseDir.empty())
      path = opts_.baseDir + "/" + path;
    std::string text = readSourceFile(path, "include: ", opts_.file, x->loc);
    return readAll(arena_, text, path);
  }

  [[gnu::noinline]] Atom includeExpr(Sx* x) {
    std::vector<Sx*> forms = includedForms(x);
    if (forms.empty()) return constAtom(Value::voidValue(), x->loc);
    return body(forms, 0, x->loc);
  }

  // ---- let forms -------------------------------------------------------------

  struct Binding {
    std::string name;
    Sx* init;
    SrcLoc loc;
  };

  std::vector<Binding> parseBindings(Sx* list, const char* who) {
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

  [[gnu::noinline]] Atom letExpr(Sx* x) {
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

  [[gnu::noinline]] Atom letStarExpr(Sx* x) {
    if (x->items.size() < 3) fail(x->loc, "let*: expected (let* ((name value) ...) body...)");
    auto bindings = parseBindings(x->items[1], "let*");
    // One scope for all the bindings, each init expanded before its name is bound (so
    // it sees the bindings before it, and a name bound again shadows the earlier one).
    Scope scope(declared_, scope_);
    Scope* saved = scope_;
    scope_ = &scope;
    for (auto& b : bindings) {
      Var* v = mod_.newVar(b.name);
      owner_[v] = fn_;
      exprInto(b.init, v, b.name);
      scope.bind(b.name, v, /*replace=*/true);
    }
    Atom r = body(x->items, 2, x->loc);
    scope_ = saved;
    return r;
  }

  [[gnu::noinline]] Atom letrecExpr(Sx* x) {
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

  Atom namedLet(Sx* x) {
    if (x->items.size() < 4) fail(x->loc, "let: expected (let name ((var value) ...) body...)");
    std::string name = bindingKey(x->items[1]);
    auto bindings = parseBindings(x->items[2], "let");
    std::vector<Atom> args;
    for (auto& b : bindings) args.push_back(expr(b.init, b.name));
    Scope scope(declared_, scope_);
    Scope* saved = scope_;
    scope_ = &scope;
    Var* loop = declare(scope, name, x->items[1]->loc, true);
    Bind rb;
    rb.kind = Bind::Rec;
    rb.loc = x->loc;
    rb.recVars = {loop};
    cur_->binds.push_back(std::move(rb));
    Sx* params = arena_.make(Sx::List, x->items[2]->loc);
    for (Sx* b : x->items[2]->items) params->items.push_back(b->items[0]);
    makeLambda(params, x->items, 3, name, x->loc, loop);
    args.insert(args.begin(), localAtom(loop, x->loc));
    Atom r = call(std::move(args), x->loc);
    scope_ = saved;
    return r;
  }

  VM& vm_;
  Module& mod_;
  SxArena& arena_;
  const ExpandOptions& opts_;
  Fn* fn_ = nullptr;
  Scope* scope_ = nullptr;
  std::unordered_map<std::string, uint32_t>
      declared_;  // the names live scopes bind: how many bind each
  Block* cur_ = nullptr;
  std::unordered_map<Var*, Fn*> owner_;
  std::unordered_set<Var*> uninit_;
  int depth_ = 0;
  int includeDepth_ = 0;
  std::unordered_map<uint32_t, Scope*> markScope_;  // expansions of body macros: the body
  ExpansionBudget expansionBudget_;  // what macro expansions in this top-level form may still do
  std::unordered_set<const Sx*> qqDynamic_;  // lists of quasiquote templates holding an unquote
  StackGuard stack_;
};

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
