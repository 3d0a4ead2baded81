// expand_derived.h — the derived forms, expanded into the core: cond, and, or, when,
// unless and case (chains of conditionals), do (a loop procedure called in tail
// position), let* (bindings in one scope, each seeing those before it) and named let
// (a letrec-bound procedure called with the inits). Part of the expander: included by
// expand.cpp alone (expander.h says why).
#pragma once
#include "expander.h"

namespace dlam {
namespace {

// The scope name of a `do` loop's procedure: not a symbol any program can write (a
// |symbol| holds no control characters).
constexpr const char* kDoLoop = "\x01(do)";

Atom Expander::condExpr(Sx* x) {
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
Atom Expander::andOrExpr(Sx* x, bool isAnd) {
  if (x->items.size() == 1) return constAtom(Value::boolean(isAnd), x->loc);
  return chain([&](size_t k) -> Step {
    size_t i = k + 1;
    Atom a = expr(x->items[i]);
    if (i + 1 == x->items.size()) return a;
    Atom stop = isAnd ? constAtom(Value::boolean(false), x->items[i]->loc) : a;
    return Link{a, x->items[i]->loc, isAnd, [stop] { return stop; }};
  });
}

Atom Expander::whenExpr(Sx* x, bool unless) {
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
Atom Expander::caseExpr(Sx* x) {
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
    if (isElse && i + 1 != x->items.size()) fail(clause->loc, "case: else must be the last clause");
    if (!isElse && (data->kind != Sx::List || data->tail))
      fail(data->loc, "case: a clause must start with a list of data, as in ((1 2) expr), or else");
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
inline Atom Expander::caseMatch(const Atom& key, const std::vector<Sx*>& data, SrcLoc loc) {
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
Atom Expander::doExpr(Sx* x) {
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
    if (!seen.insert(name).second) fail(b->items[0]->loc, "do: duplicate variable '" + name + "'");
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

Atom Expander::letStarExpr(Sx* x) {
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

inline Atom Expander::namedLet(Sx* x) {
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

}  // namespace
}  // namespace dlam
