// expander.h — the expander, shared by the files that hold its parts (private to the
// compiler; expand.h is its interface). It turns s-expressions into A-normal form in one
// pass: it resolves names against lexical scopes (unbound names are globals), records
// each lambda's free variables in order of first occurrence, turns the derived forms
// into the core (bindings, calls, closures, conditionals, letrec groups), and names
// every intermediate value. Recursion follows the nesting of the source text (never the
// length of a list) and is bounded by kMaxDepth and the compiler's stack budget,
// reported as a clean error. The chains of conditionals that cond, case, and, or and
// else-if chains of `if` become (see anf::tailIf) are built by one loop, chain(),
// however long they are.
//
// expand.cpp: scopes, macro uses, expressions and the core forms (quote, if, lambda,
// let, letrec, begin, define and bodies); expand_derived.h: cond, and, or, when,
// unless, case, do, let* and named let; expand_quasiquote.h: quasiquote;
// expand_include.h: include. The parts are headers that expand.cpp alone includes:
// the expander is one translation unit, its class of internal linkage, so that the
// compiler sees its whole recursion and inlines as it did in one file. The C++ stack
// each level of nesting takes, which bounds how deeply a program may nest (StackGuard),
// stays what it was. Their member definitions are `inline` as those written in the
// class are (those marked noinline excepted).
#pragma once
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "expand.h"
#include "macros.h"
#include "stack_guard.h"

namespace dlam {
namespace {

using namespace anf;

constexpr int kMaxDepth = 2000;

// A quasiquoted list is built from (list ...) calls of at most kQqChunk elements
// joined by appends of at most kQqChunk lists; constant runs of kQqRun elements or
// more are quoted pieces of their own.
constexpr size_t kQqChunk = 64;
constexpr size_t kQqRun = 16;

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

  Lambda* toplevel(Sx* form);  // (expand.cpp)

 private:
  [[noreturn]] void fail(SrcLoc loc, const std::string& msg) {
    throw Error(ErrorKind::Syntax, msg, opts_.file, loc);
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

  bool dynamic(const Sx* x) const { return qqDynamic_.count(x) != 0; }

  // A definition's name, its init (a lambda form for a function) and the name's place.
  struct DefineParts {
    std::string name;
    Sx* init;
    SrcLoc loc;
  };

  // A (name init) of a let form.
  struct Binding {
    std::string name;
    Sx* init;
    SrcLoc loc;
  };

  // ---- scopes, macro uses, expressions and the core forms (expand.cpp) ----

  Lambda* newLambda(const std::string& name, SrcLoc loc);
  Meaning meaningFrom(Scope* start, const std::string& name) const;
  [[gnu::noinline]] Meaning meaning(const Sx* x) const;
  [[gnu::noinline]] void defineSyntax(Sx* x, bool inBody);
  std::pair<Value, Scope*> macroOf(const Sx* x) const;
  bool libraryMacro(const Sx* head, Value rules) const;
  [[gnu::noinline]] Sx* expandMacros(Sx* x);
  Var* lookup(const std::string& name) const;
  [[gnu::noinline]] Atom resolveSymbol(const Sx* x);
  Atom resolve(const std::string& name, SrcLoc loc);
  Atom resolveVar(Var* v, const std::string& name, SrcLoc loc);
  Var* declare(Scope& scope, const std::string& name, SrcLoc loc, bool rec = false);
  std::string symbolName(const Sx* x, const char* what);
  void exprInto(Sx* x, Var* dst, const std::string& name);
  Atom expr(Sx* x, const std::string& nameHint = "");
  [[gnu::noinline]] Atom bigCall(Sx* x);
  bool isFoldable(const Atom& f);
  [[gnu::noinline]] Atom sequence(const std::vector<Sx*>& forms, size_t start);
  [[gnu::noinline]] Atom ifExpr(Sx* x);
  [[gnu::noinline]] Var* lambdaExpr(Sx* x, const std::string& name, Var* dst);
  Var* makeLambda(Sx* params, const std::vector<Sx*>& forms, size_t start, const std::string& name,
                  SrcLoc loc, Var* dst);
  DefineParts parseDefine(Sx* x);
  Atom body(const std::vector<Sx*>& forms, size_t start, SrcLoc loc);
  [[gnu::noinline]] void spliceBodyForm(Sx* f, std::vector<Sx*>& out);
  std::vector<Binding> parseBindings(Sx* list, const char* who);
  [[gnu::noinline]] Atom letExpr(Sx* x);
  [[gnu::noinline]] Atom letrecExpr(Sx* x);

  // ---- derived forms (expand_derived.h) ----

  [[gnu::noinline]] Atom condExpr(Sx* x);
  [[gnu::noinline]] Atom andOrExpr(Sx* x, bool isAnd);
  [[gnu::noinline]] Atom whenExpr(Sx* x, bool unless);
  [[gnu::noinline]] Atom caseExpr(Sx* x);
  Atom caseMatch(const Atom& key, const std::vector<Sx*>& data, SrcLoc loc);
  [[gnu::noinline]] Atom doExpr(Sx* x);
  [[gnu::noinline]] Atom letStarExpr(Sx* x);
  Atom namedLet(Sx* x);

  // ---- quasiquote (expand_quasiquote.h) ----

  [[gnu::noinline]] Atom quasiquoteExpr(Sx* x);
  static bool isUnquoteSymbol(const Sx* x);
  void markDynamic(Sx* root);
  const char* qqKeyword(const Sx* x) const;
  const char* qqForm(const Sx* x) const;
  bool isSplice(const Sx* x, int level) const;
  Atom qq(Sx* x, int level);
  Atom qqCheckedSplice(Sx* form, Atom v);
  void qqAdd(std::vector<std::vector<Atom>>& levels, Atom piece, SrcLoc loc);
  Atom qqJoin(std::vector<std::vector<Atom>>& levels, SrcLoc loc);
  Atom qqList(Sx* x, int level);

  // ---- include (expand_include.h) ----

  std::vector<Sx*> includedForms(Sx* x);
  [[gnu::noinline]] Atom includeExpr(Sx* x);

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
  // Expansions of the standard library's macros (guard): their free names mean the
  // library's globals and macros (VM::librarySymbol), whatever the program defines.
  std::unordered_set<uint32_t> libraryMarks_;
  bool fromLibrary(const Sx* x) const {
    return x->mark == Sx::kLibraryMark || (x->mark && libraryMarks_.count(x->mark));
  }
  ExpansionBudget expansionBudget_;  // what macro expansions in this top-level form may still do
  std::unordered_set<const Sx*> qqDynamic_;  // lists of quasiquote templates holding an unquote
  StackGuard stack_;
};

}  // namespace
}  // namespace dlam
