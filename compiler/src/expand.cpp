// expand.cpp — the expander: s-expressions to A-normal form in one pass.
//
// It resolves names against lexical scopes (unbound names are globals), records
// each lambda's free variables in order of first occurrence, turns the derived
// forms (let*, named let, cond, and, or, when, unless, internal defines) into the
// core (bindings, calls, closures, conditionals, letrec groups), and names every
// intermediate value. Recursion here follows the nesting of the source text and is
// bounded by kMaxDepth, reported as a clean error.
#include "expand.h"

#include "stack_guard.h"

#include <fstream>
#include <unordered_map>
#include <unordered_set>

namespace dlam {

using namespace anf;

namespace {

constexpr int kMaxDepth = 2000;

struct Fn {
  Lambda* lam;
  Fn* parent;
  std::unordered_set<Var*> freeSet;
};

struct Scope {
  std::unordered_map<std::string, Var*> names;
  Scope* parent;
};

class Expander {
 public:
  Expander(VM& vm, Module& mod, SxArena& arena, const ExpandOptions& opts)
      : vm_(vm), mod_(mod), arena_(arena), opts_(opts) {}

  Lambda* toplevel(Sx* form) {
    Lambda* lam = newLambda("<toplevel>", form->loc);
    Fn fn{lam, nullptr, {}};
    Scope scope{{}, nullptr};
    enterFn(&fn, &scope, lam->body);
    Atom result;
    if (isForm(form, "define")) {
      auto [name, init, nameLoc] = parseDefine(form);
      Atom value = expr(init, name);
      Bind b;
      b.kind = Bind::DefGlobal;
      b.loc = form->loc;
      b.atom = value;
      b.sym = vm_.intern(name);
      cur_->binds.push_back(std::move(b));
      result = constAtom(Value::voidValue(), form->loc);
    } else {
      result = expr(form);
    }
    cur_->result = result;
    return lam;
  }

 private:
  [[noreturn]] void fail(SrcLoc loc, const std::string& msg) { throw Error(ErrorKind::Syntax, msg, opts_.file, loc); }

  Lambda* newLambda(const std::string& name, SrcLoc loc) {
    Lambda* lam = mod_.newLambda();
    lam->name = name;
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
    return x->kind == Sx::List && !x->items.empty() && x->items[0]->isSymbol(kw) && !lookup(kw);
  }

  Var* lookup(const std::string& name) const {
    for (Scope* s = scope_; s; s = s->parent) {
      auto it = s->names.find(name);
      if (it != s->names.end()) return it->second;
    }
    return nullptr;
  }

  Atom resolve(const std::string& name, SrcLoc loc) {
    Var* v = lookup(name);
    if (!v) return globalAtom(vm_.intern(name), loc);
    Fn* owner = owner_.at(v);
    if (owner == fn_ && uninit_.count(v)) fail(loc, "variable '" + name + "' used before its definition");
    for (Fn* f = fn_; f && f != owner; f = f->parent) {
      if (f->freeSet.insert(v).second) f->lam->freeVars.push_back(v);
    }
    return localAtom(v, loc);
  }

  Var* declare(Scope& scope, const std::string& name, SrcLoc loc, bool rec = false) {
    Var* v = mod_.newVar(name);
    v->rec = rec;
    owner_[v] = fn_;
    if (!scope.names.emplace(name, v).second) fail(loc, "duplicate binding of '" + name + "'");
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

  const std::string& symbolName(const Sx* x, const char* what) {
    if (x->kind != Sx::Symbol) fail(x->loc, std::string("expected a symbol as ") + what);
    return x->text;
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
    switch (x->kind) {
      case Sx::Number: return constAtom(Value::numberChecked(x->number), x->loc);
      case Sx::Bool: return constAtom(Value::boolean(x->boolean), x->loc);
      case Sx::String: return constAtom(vm_.makeString(x->text), x->loc);
      case Sx::Symbol: return resolve(x->text, x->loc);
      case Sx::List: break;
    }
    if (x->tail) fail(x->loc, "a dotted list is not an expression");
    if (x->items.empty()) fail(x->loc, "empty combination '()': quote it to get the empty list");
    Sx* head = x->items[0];
    if (head->kind == Sx::Symbol && !lookup(head->text)) {
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
      if (k == "cond") return condExpr(x, 1);
      if (k == "and") return andExpr(x, 1);
      if (k == "or") return orExpr(x, 1);
      if (k == "when" || k == "unless") return whenExpr(x, k == "unless");
      if (k == "define") fail(x->loc, "define: only allowed at top level or at the start of a body");
      if (k == "include") return includeExpr(x);
      if (k == "set!") fail(x->loc, "set!: dlam is a pure language; there is no assignment");
      if (k == "quasiquote" || k == "unquote" || k == "unquote-splicing")
        fail(x->loc, k + ": not supported");
    }
    std::vector<Atom> args;
    args.reserve(x->items.size());
    for (Sx* item : x->items) args.push_back(expr(item));
    return call(std::move(args), x->loc);
  }

  Atom sequence(const std::vector<Sx*>& forms, size_t start) {
    Atom last;
    for (size_t i = start; i < forms.size(); ++i) {
      if (isForm(forms[i], "define")) fail(forms[i]->loc, "define: only allowed at the start of a body");
      last = expr(forms[i]);
    }
    return last;
  }

  // Expands `(if c t e)` where the branches are given as expanders.
  template <class Then, class Else>
  Atom branch(Atom cond, SrcLoc loc, Then thenF, Else elseF) {
    DepthGuard guard(*this, loc);  // cond/and/or chains nest blocks without nesting expr()
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

  Atom ifExpr(Sx* x) {
    size_t n = x->items.size();
    if (n != 3 && n != 4) fail(x->loc, "if: expected (if test then [else])");
    Atom c = expr(x->items[1]);
    return branch(
        c, x->loc, [&] { return expr(x->items[2]); },
        [&] { return n == 4 ? expr(x->items[3]) : constAtom(Value::voidValue(), x->loc); });
  }

  Atom condExpr(Sx* x, size_t i) {
    if (i >= x->items.size()) return constAtom(Value::voidValue(), x->loc);
    Sx* clause = x->items[i];
    if (clause->kind != Sx::List || clause->items.empty() || clause->tail)
      fail(clause->loc, "cond: each clause must be a non-empty list");
    if (clause->items[0]->isSymbol("else") && !lookup("else")) {
      if (i + 1 != x->items.size()) fail(clause->loc, "cond: else must be the last clause");
      if (clause->items.size() < 2) fail(clause->loc, "cond: else clause needs a body");
      return sequence(clause->items, 1);
    }
    Atom test = expr(clause->items[0]);
    if (clause->items.size() == 1) {
      // (cond (test) ...) yields the test's value when true.
      return branch(test, clause->loc, [&] { return test; }, [&] { return condExpr(x, i + 1); });
    }
    if (clause->items[1]->isSymbol("=>") && !lookup("=>")) {
      if (clause->items.size() != 3) fail(clause->loc, "cond: expected (test => receiver)");
      return branch(
          test, clause->loc,
          [&] {
            Atom f = expr(clause->items[2]);
            return call({f, test}, clause->loc);
          },
          [&] { return condExpr(x, i + 1); });
    }
    return branch(test, clause->loc, [&] { return sequence(clause->items, 1); }, [&] { return condExpr(x, i + 1); });
  }

  Atom andExpr(Sx* x, size_t i) {
    if (x->items.size() == 1) return constAtom(Value::boolean(true), x->loc);
    Atom a = expr(x->items[i]);
    if (i + 1 == x->items.size()) return a;
    return branch(a, x->items[i]->loc, [&] { return andExpr(x, i + 1); }, [&] { return a; });
  }

  Atom orExpr(Sx* x, size_t i) {
    if (x->items.size() == 1) return constAtom(Value::boolean(false), x->loc);
    Atom a = expr(x->items[i]);
    if (i + 1 == x->items.size()) return a;
    return branch(a, x->items[i]->loc, [&] { return a; }, [&] { return orExpr(x, i + 1); });
  }

  Atom whenExpr(Sx* x, bool unless) {
    if (x->items.size() < 3) fail(x->loc, std::string(unless ? "unless" : "when") + ": expected a test and a body");
    Atom c = expr(x->items[1]);
    auto body = [&] { return sequence(x->items, 2); };
    auto nothing = [&] { return constAtom(Value::voidValue(), x->loc); };
    if (unless) return branch(c, x->loc, nothing, body);
    return branch(c, x->loc, body, nothing);
  }

  // ---- lambda and bodies -----------------------------------------------------

  Var* lambdaExpr(Sx* x, const std::string& name, Var* dst) {
    if (x->items.size() < 3) fail(x->loc, "lambda: expected (lambda params body...)");
    return makeLambda(x->items[1], x->items, 2, name, x->loc, dst);
  }

  // Builds a closure from a parameter spec and body forms[start..].
  Var* makeLambda(Sx* params, const std::vector<Sx*>& forms, size_t start, const std::string& name, SrcLoc loc,
                  Var* dst) {
    Lambda* lam = newLambda(name, loc);
    Fn fn{lam, fn_, {}};
    Scope scope{{}, scope_};
    Fn* savedFn = fn_;
    Scope* savedScope = scope_;
    Block* savedCur = cur_;
    enterFn(&fn, &scope, lam->body);
    if (params->kind == Sx::Symbol) {
      lam->rest = declare(scope, params->text, params->loc);
    } else if (params->kind == Sx::List) {
      for (Sx* p : params->items) lam->params.push_back(declare(scope, symbolName(p, "a parameter"), p->loc));
      if (params->tail) lam->rest = declare(scope, symbolName(params->tail, "a rest parameter"), params->tail->loc);
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
  // init expression (a synthesised lambda form for the second shape).
  DefineParts parseDefine(Sx* x) {
    if (x->items.size() < 2) fail(x->loc, "define: expected (define name value) or (define (name params...) body...)");
    Sx* target = x->items[1];
    if (target->kind == Sx::Symbol) {
      if (x->items.size() != 3) fail(x->loc, "define: expected (define " + target->text + " value)");
      return {target->text, x->items[2], target->loc};
    }
    if (target->kind != Sx::List || target->items.empty())
      fail(target->loc, "define: expected a name or (name params...)");
    if (x->items.size() < 3) fail(x->loc, "define: the function has no body");
    const std::string& name = symbolName(target->items[0], "the defined name");
    // Synthesise (lambda params body...).
    Sx* lam = arena_.make(Sx::List, x->loc);
    lam->items.push_back(arena_.make(Sx::Symbol, x->loc));
    lam->items[0]->text = "lambda";
    Sx* params = arena_.make(Sx::List, target->loc);
    params->items.assign(target->items.begin() + 1, target->items.end());
    params->tail = target->tail;
    lam->items.push_back(params);
    for (size_t i = 2; i < x->items.size(); ++i) lam->items.push_back(x->items[i]);
    return {name, lam, target->loc};
  }

  // A body: internal defines (letrec* semantics) followed by expressions.
  Atom body(const std::vector<Sx*>& forms, size_t start, SrcLoc loc) {
    if (start >= forms.size()) fail(loc, "empty body");
    std::vector<Sx*> expanded;  // with (include ...) and (begin ...) of defines spliced
    for (size_t i = start; i < forms.size(); ++i) spliceBodyForm(forms[i], expanded);
    std::vector<DefineParts> defs;
    for (Sx* f : expanded)
      if (isForm(f, "define")) defs.push_back(parseDefine(f));
    Scope scope{{}, scope_};
    Scope* saved = scope_;
    scope_ = &scope;
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

  void spliceBodyForm(Sx* f, std::vector<Sx*>& out) {
    if (isForm(f, "include")) {
      for (Sx* g : includedForms(f)) spliceBodyForm(g, out);
      return;
    }
    out.push_back(f);
  }

  std::vector<Sx*> includedForms(Sx* x) {
    if (!opts_.allowInclude) fail(x->loc, "include: not allowed in the sandbox");
    if (x->items.size() != 2 || x->items[1]->kind != Sx::String) fail(x->loc, "include: expected (include \"file\")");
    if (++includeDepth_ > 64) fail(x->loc, "include: nested too deeply (an include cycle?)");
    std::string path = x->items[1]->text;
    if (!path.empty() && path[0] != '/' && !opts_.baseDir.empty()) path = opts_.baseDir + "/" + path;
    std::string text = readIncludeFile(path, opts_.file, x->loc);
    return readAll(arena_, text, path);
  }

  Atom includeExpr(Sx* x) {
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
    if (list->kind != Sx::List || list->tail) fail(list->loc, std::string(who) + ": expected a list of bindings");
    std::vector<Binding> out;
    for (Sx* b : list->items) {
      if (b->kind != Sx::List || b->items.size() != 2 || b->tail)
        fail(b->loc, std::string(who) + ": each binding must be (name value)");
      out.push_back({symbolName(b->items[0], "a bound name"), b->items[1], b->items[0]->loc});
    }
    return out;
  }

  Atom letExpr(Sx* x) {
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
    Scope scope{{}, scope_};
    for (size_t i = 0; i < vars.size(); ++i) scope.names.emplace(bindings[i].name, vars[i]);
    Scope* saved = scope_;
    scope_ = &scope;
    Atom r = body(x->items, 2, x->loc);
    scope_ = saved;
    return r;
  }

  Atom letStarExpr(Sx* x) {
    if (x->items.size() < 3) fail(x->loc, "let*: expected (let* ((name value) ...) body...)");
    auto bindings = parseBindings(x->items[1], "let*");
    std::deque<Scope> scopes;
    Scope* saved = scope_;
    for (auto& b : bindings) {
      Var* v = mod_.newVar(b.name);
      owner_[v] = fn_;
      exprInto(b.init, v, b.name);
      scopes.push_back(Scope{{}, scope_});
      scopes.back().names.emplace(b.name, v);
      scope_ = &scopes.back();
    }
    Atom r = body(x->items, 2, x->loc);
    scope_ = saved;
    return r;
  }

  Atom letrecExpr(Sx* x) {
    if (x->items.size() < 3) fail(x->loc, "letrec: expected (letrec ((name value) ...) body...)");
    auto bindings = parseBindings(x->items[1], "letrec");
    Scope scope{{}, scope_};
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
    const std::string& name = x->items[1]->text;
    auto bindings = parseBindings(x->items[2], "let");
    std::vector<Atom> args;
    for (auto& b : bindings) args.push_back(expr(b.init, b.name));
    Scope scope{{}, scope_};
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
  Block* cur_ = nullptr;
  std::unordered_map<Var*, Fn*> owner_;
  std::unordered_set<Var*> uninit_;
  int depth_ = 0;
  int includeDepth_ = 0;
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
      case Sx::Number: values.push_back(Value::numberChecked(x->number)); continue;
      case Sx::Bool: values.push_back(Value::boolean(x->boolean)); continue;
      case Sx::String: values.push_back(vm.makeString(x->text)); continue;
      case Sx::Symbol: values.push_back(vm.symbol(x->text)); continue;
      case Sx::List: break;
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
    std::vector<Value> parts(values.end() - static_cast<std::ptrdiff_t>(n + (x->tail ? 1 : 0)), values.end());
    values.resize(values.size() - parts.size());
    size_t k = 0;
    if (x->tail) l = parts[k++];
    for (; k < parts.size(); ++k) l = vm.cons(parts[k], l);
    values.push_back(l);
  }
  return values.back();
}

std::string readIncludeFile(const std::string& path, const std::string& file, SrcLoc loc) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::Syntax, "include: cannot open '" + path + "'", file, loc);
  // Not `stream << in.rdbuf()`, which swallows a failed allocation (std::bad_alloc must
  // reach the driver) and would return the part of the file read so far.
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) text.append(buf, static_cast<size_t>(in.gcount()));
  if (in.bad()) throw Error(ErrorKind::Syntax, "include: cannot read '" + path + "'", file, loc);
  return text;
}

anf::Lambda* expandToplevel(VM& vm, anf::Module& mod, Sx* form, SxArena& arena, const ExpandOptions& opts) {
  Expander e(vm, mod, arena, opts);
  return e.toplevel(form);
}

}  // namespace dlam
