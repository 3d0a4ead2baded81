// macros.cpp — syntax-rules: checking a macro's rules, matching a use against them and
// transcribing the template (see macros.h for the hygiene).
//
// The rules are kept as a value, (ellipsis (literal ...) (pattern . template) ...), the
// patterns and templates as quoted data. Matching and transcription recurse along the
// nesting of a pattern or template, which makeSyntaxRules bounds (kMaxRuleDepth), and
// loop along lists; the input is walked only as deep as the pattern reaches.
#include "macros.h"

#include "expand.h"

#include <cmath>
#include <unordered_map>
#include <unordered_set>

namespace dlam {

namespace {

constexpr size_t kMaxRuleDepth = 500;

const char* const kReserved[] = {"quote",   "quasiquote", "unquote",       "unquote-splicing",
                                 "lambda",  "define",     "define-syntax", "syntax-rules",
                                 "if",      "let",        "let*",          "letrec",
                                 "letrec*", "begin",      "cond",          "case",
                                 "and",     "or",         "when",          "unless",
                                 "do",      "include",    "set!",          "else",
                                 "=>"};

Symbol* symbolOf(Value v) { return isSymbol(v) ? static_cast<Symbol*>(v.asObject()) : nullptr; }

// A list value's elements and its tail (() for a proper list).
void elements(Value l, std::vector<Value>& out, Value& tail) {
  out.clear();
  for (; isPair(l); l = asPair(l)->cdr) out.push_back(asPair(l)->car);
  tail = l;
}

// What a pattern variable matched: a form (depth 0), or one match per repetition of the
// ellipsis it is under (depth > 0).
struct Match {
  const Sx* form = nullptr;
  std::vector<Match> seq;
  int depth = 0;
};
using Bindings = std::unordered_map<Symbol*, Match>;
// What transcription reads: for each variable, its match at the current repetition.
using View = std::unordered_map<Symbol*, const Match*>;

class Rules {
 public:
  Rules(VM& vm, Value rules, const std::string& file) : vm_(vm), file_(file) {
    ellipsis_ = symbolOf(asPair(rules)->car);
    for (Value l = asPair(asPair(rules)->cdr)->car; isPair(l); l = asPair(l)->cdr)
      literals_.insert(symbolOf(asPair(l)->car));
    rules_ = asPair(asPair(rules)->cdr)->cdr;
    underscore_ = vm.intern("_");
  }

  Sx* expand(SxArena& arena, const Sx* use, ExpansionBudget& budget, uint32_t* markOut) {
    arena_ = &arena;
    budget_ = &budget;
    loc_ = use->loc;
    if (budget.expansions == 0)
      fail(use->loc, "macro expansion does not end (more than " + std::to_string(kMaxExpansions) +
                         " expansions in one top-level form)");
    --budget.expansions;
    for (Value r = rules_; isPair(r); r = asPair(r)->cdr) {
      Value rule = asPair(r)->car;
      Bindings b;
      // The pattern's head (the keyword's place) matches anything.
      if (!matchList(asPair(asPair(rule)->car)->cdr, use, 1, b)) continue;
      mark_ = vm_.nextMacroMark();
      if (markOut) *markOut = mark_;
      View view;
      for (auto& [v, m] : b) view[v] = &m;
      return transcribe(asPair(rule)->cdr, view, true);
    }
    fail(use->loc, "no rule of the macro '" + use->items[0]->text + "' matches this use");
  }

 private:
  [[noreturn]] void fail(SrcLoc loc, const std::string& msg) const {
    throw Error(ErrorKind::Syntax, msg, file_, loc);
  }

  bool isEllipsis(Value v) const { return ellipsis_ && symbolOf(v) == ellipsis_; }

  // ---- matching ------------------------------------------------------------------

  // Pattern p against form x.
  bool match(Value p, const Sx* x, Bindings& b) {
    if (Symbol* s = symbolOf(p)) {
      if (s == underscore_) return true;
      if (literals_.count(s)) return x->kind == Sx::Symbol && x->text == s->name;
      b[s] = Match{x, {}, 0};
      return true;
    }
    if (isPair(p)) return x->kind == Sx::List && matchList(p, x, 0, b);
    if (p.isNil()) return x->kind == Sx::List && x->items.empty() && !x->tail;
    if (p.isNumber())
      return x->kind == Sx::Number &&
             (x->number == p.asNumber() || (std::isnan(x->number) && std::isnan(p.asNumber())));
    if (p.isBool()) return x->kind == Sx::Bool && x->boolean == p.isTruthy();
    if (p.isChar()) return x->kind == Sx::Char && x->code == p.asChar();
    if (isString(p))
      return x->kind == Sx::String && x->text == static_cast<String*>(p.asObject())->view();
    return false;  // a vector pattern (never matched: vectors hold numbers only)
  }

  // The list pattern p against the items of list x from `from` on (and its tail).
  bool matchList(Value p, const Sx* x, size_t from, Bindings& b) {
    std::vector<Value> ps;
    Value ptail;
    elements(p, ps, ptail);
    // ps = before..., [p ellipsis], after...: the repeated p takes what the others leave.
    size_t n = x->items.size() - from;
    size_t e = ps.size();  // the index of the pattern followed by the ellipsis, if any
    for (size_t i = 0; i + 1 < ps.size(); ++i)
      if (isEllipsis(ps[i + 1])) e = i;
    bool repeats = e < ps.size();
    size_t after = repeats ? ps.size() - e - 2 : 0;
    if (n < e + after || (ptail.isNil() && x->tail) || (!repeats && ptail.isNil() && n != e))
      return false;
    for (size_t i = 0; i < e; ++i)
      if (!match(ps[i], x->items[from + i], b)) return false;
    size_t reps = repeats ? n - e - after : 0;
    // Every variable of the repeated pattern gets a sequence, empty if it repeats 0 times.
    std::vector<Symbol*> vars;
    if (repeats) variables(ps[e], vars);
    for (Symbol* v : vars) b[v] = Match{nullptr, {}, 1};
    for (size_t k = 0; k < reps; ++k) {
      Bindings one;
      if (!match(ps[e], x->items[from + e + k], one)) return false;
      for (Symbol* v : vars) {
        Match& m = b[v];
        Match& got = one[v];
        m.depth = got.depth + 1;
        m.seq.push_back(std::move(got));
      }
    }
    for (size_t i = 0; i < after; ++i)
      if (!match(ps[e + 2 + i], x->items[from + e + reps + i], b)) return false;
    return ptail.isNil() || match(ptail, rest(x, from + e + reps + after), b);
  }

  // The rest of list x from item i on, as a form: a new list, x's dotted tail, or ().
  const Sx* rest(const Sx* x, size_t i) {
    if (i == x->items.size() && x->tail) return x->tail;
    Sx* r = arena_->make(Sx::List, x->loc);
    r->items.assign(x->items.begin() + static_cast<std::ptrdiff_t>(i), x->items.end());
    r->tail = x->tail;
    return r;
  }

  // The pattern variables of p, in order.
  void variables(Value p, std::vector<Symbol*>& out) const {
    if (Symbol* s = symbolOf(p)) {
      if (s != underscore_ && !literals_.count(s) && s != ellipsis_) out.push_back(s);
      return;
    }
    for (; isPair(p); p = asPair(p)->cdr) variables(asPair(p)->car, out);
    if (symbolOf(p)) variables(p, out);
  }

  // ---- transcription -------------------------------------------------------------

  // Takes n forms from the budget: every node made, and every element put in a list
  // (a pattern variable's form is shared, not copied, but each place counts).
  void charge(size_t n) {
    if (budget_->forms < n)
      fail(loc_, "macro expansion too large (more than " + std::to_string(kMaxExpansionForms) +
                     " forms made in one top-level form)");
    budget_->forms -= n;
  }

  Sx* make(Sx::Kind kind) {
    charge(1);
    return arena_->make(kind, loc_);
  }

  // Template t with the bindings b; `escapes`: the ellipsis is special (not inside (... ...)).
  Sx* transcribe(Value t, const View& b, bool escapes) {
    if (Symbol* s = symbolOf(t)) {
      if (auto it = b.find(s); it != b.end()) {
        if (it->second->depth > 0)
          fail(loc_, "macro template: the pattern variable '" + s->name +
                         "' is used with too few ellipses");
        return const_cast<Sx*>(it->second->form);
      }
      Sx* n = make(Sx::Symbol);
      n->text = s->name;
      n->mark = mark_;
      return n;
    }
    if (t.isNumber()) {
      Sx* n = make(Sx::Number);
      n->number = t.asNumber();
      return n;
    }
    if (t.isBool()) {
      Sx* n = make(Sx::Bool);
      n->boolean = t.isTruthy();
      return n;
    }
    if (t.isChar()) {
      Sx* n = make(Sx::Char);
      n->code = t.asChar();
      return n;
    }
    if (isString(t)) {
      Sx* n = make(Sx::String);
      n->text = std::string(static_cast<String*>(t.asObject())->view());
      return n;
    }
    if (isObj(t, ObjType::Vector)) {
      auto* v = static_cast<Vector*>(t.asObject());
      Sx* n = make(Sx::Vector);
      for (uint32_t i = 0; i < vectorLength(v); ++i) {
        Sx* e = make(Sx::Number);
        e->number = v->items[i];
        n->items.push_back(e);
      }
      return n;
    }
    Sx* n = make(Sx::List);
    if (!isPair(t)) return n;  // ()
    std::vector<Value> ts;
    Value ttail;
    elements(t, ts, ttail);
    // (... template): the template with the ellipsis as an ordinary symbol.
    if (escapes && ts.size() == 2 && ttail.isNil() && isEllipsis(ts[0]))
      return transcribe(ts[1], b, false);
    for (size_t i = 0; i < ts.size(); ++i) {
      size_t dots = 0;
      while (escapes && i + 1 + dots < ts.size() && isEllipsis(ts[i + 1 + dots])) ++dots;
      if (dots == 0) {
        charge(1);
        n->items.push_back(transcribe(ts[i], b, escapes));
        continue;
      }
      repeat(ts[i], b, dots, n->items);
      i += dots;
    }
    if (!ttail.isNil()) {
      // A list in the tail continues the list: (a . (b c)) is (a b c), as the reader reads it.
      Sx* t = transcribe(ttail, b, escapes);
      if (t->kind == Sx::List) {
        charge(t->items.size());
        n->items.insert(n->items.end(), t->items.begin(), t->items.end());
        n->tail = t->tail;
      } else {
        n->tail = t;
      }
    }
    return n;
  }

  // Element t followed by `dots` ellipses: once per repetition of its variables.
  void repeat(Value t, const View& b, size_t dots, std::vector<Sx*>& out) {
    std::vector<Symbol*> vars;
    variables(t, vars);
    std::vector<Symbol*> driving;  // the variables under an ellipsis, which set the count
    size_t count = 0;
    for (Symbol* v : vars) {
      auto it = b.find(v);
      if (it == b.end() || it->second->depth == 0) continue;
      if (!driving.empty() && it->second->seq.size() != count)
        fail(loc_,
             "macro template: the pattern variables under one ellipsis matched different numbers "
             "of forms");
      count = it->second->seq.size();
      driving.push_back(v);
    }
    if (driving.empty())
      fail(loc_,
           "macro template: an ellipsis follows a template with no pattern variable to repeat");
    for (size_t k = 0; k < count; ++k) {
      View inner = b;
      for (Symbol* v : driving) inner[v] = &b.at(v)->seq[k];
      if (dots > 1) {
        repeat(t, inner, dots - 1, out);
      } else {
        charge(1);
        out.push_back(transcribe(t, inner, true));
      }
    }
  }

  VM& vm_;
  const std::string& file_;
  Symbol* ellipsis_ = nullptr;
  Symbol* underscore_ = nullptr;
  std::unordered_set<Symbol*> literals_;
  Value rules_;
  SxArena* arena_ = nullptr;
  ExpansionBudget* budget_ = nullptr;
  SrcLoc loc_;
  uint32_t mark_ = 0;
};

// The deepest nesting of lists in a datum (iteratively), to bound the recursion above.
size_t nestingOf(const Sx* x) {
  std::vector<std::pair<const Sx*, size_t>> work{{x, 1}};
  size_t deepest = 0;
  while (!work.empty()) {
    auto [y, d] = work.back();
    work.pop_back();
    deepest = std::max(deepest, d);
    if (y->kind != Sx::List) continue;
    for (const Sx* i : y->items) work.push_back({i, d + 1});
    if (y->tail) work.push_back({y->tail, d + 1});
  }
  return deepest;
}

}  // namespace

std::string bindingKey(const Sx* sym) {
  if (sym->mark == 0) return sym->text;
  return sym->text + '\x01' + std::to_string(sym->mark);
}

std::string keyName(const std::string& key) { return key.substr(0, key.find('\x01')); }

bool isReservedKeyword(const std::string& name) {
  for (const char* k : kReserved)
    if (name == k) return true;
  return false;
}

Value makeSyntaxRules(VM& vm, const Sx* spec, const std::string& name, const std::string& file) {
  auto fail = [&](const Sx* at, const std::string& msg) -> void {
    throw Error(ErrorKind::Syntax, "define-syntax " + name + ": " + msg, file, at->loc);
  };
  if (spec->kind != Sx::List || spec->tail || spec->items.empty() ||
      !spec->items[0]->isSymbol("syntax-rules"))
    fail(spec, "expected (syntax-rules (literal ...) (pattern template) ...)");
  size_t i = 1;
  std::string ellipsis = "...";
  if (i < spec->items.size() && spec->items[i]->kind == Sx::Symbol)
    ellipsis = spec->items[i++]->text;
  if (i >= spec->items.size()) fail(spec, "expected a list of literals after syntax-rules");
  const Sx* lits = spec->items[i++];
  if (lits->kind != Sx::List || lits->tail) fail(lits, "the literals must be a list of symbols");
  for (const Sx* l : lits->items)
    if (l->kind != Sx::Symbol) fail(l, "the literals must be a list of symbols");
  const size_t firstRule = i;
  for (; i < spec->items.size(); ++i) {
    const Sx* rule = spec->items[i];
    if (rule->kind != Sx::List || rule->tail || rule->items.size() != 2)
      fail(rule, "each rule must be (pattern template)");
    const Sx* pat = rule->items[0];
    if (pat->kind != Sx::List || pat->items.empty())
      fail(pat, "a pattern must be a list whose first element stands for the macro's name");
    if (nestingOf(pat) > kMaxRuleDepth || nestingOf(rule->items[1]) > kMaxRuleDepth)
      fail(rule, "the rule is nested too deeply (more than " + std::to_string(kMaxRuleDepth) +
                     " levels)");
    // Pattern variables appear once each, and a list has at most one ellipsis, not first.
    std::unordered_set<std::string> seen;
    std::vector<const Sx*> work{pat};
    while (!work.empty()) {
      const Sx* p = work.back();
      work.pop_back();
      if (p->kind == Sx::Symbol) {
        bool literal = false;
        for (const Sx* l : lits->items) literal |= l->text == p->text;
        if (!literal && p->text != "_" && p->text != ellipsis && !seen.insert(p->text).second)
          fail(p, "the pattern variable '" + p->text + "' appears twice in one pattern");
        continue;
      }
      if (p->kind != Sx::List) continue;
      size_t dots = 0;
      for (size_t k = 0; k < p->items.size(); ++k) {
        if (!p->items[k]->isSymbol(ellipsis)) continue;
        if (k == 0 || (p == pat && k == 1) || ++dots > 1)
          fail(p->items[k], "misplaced ellipsis in a pattern (one per list, after an element)");
      }
      if (p->tail && p->tail->isSymbol(ellipsis)) fail(p->tail, "misplaced ellipsis in a pattern");
      for (size_t k = (p == pat ? 1 : 0); k < p->items.size(); ++k) work.push_back(p->items[k]);
      if (p->tail) work.push_back(p->tail);
    }
  }
  // (ellipsis (literal ...) (pattern . template) ...). No collection runs while a form
  // is compiled (collections happen at safe points of the interpreter and between
  // top-level forms), so the values made here need no roots until the symbol holds them.
  Value rules = Value::nil();
  for (size_t k = spec->items.size(); k-- > firstRule;) {
    const Sx* rule = spec->items[k];
    rules = vm.cons(vm.cons(quoteDatum(vm, rule->items[0]), quoteDatum(vm, rule->items[1])), rules);
  }
  return vm.cons(vm.symbol(ellipsis), vm.cons(quoteDatum(vm, lits), rules));
}

Sx* expandMacro(VM& vm, SxArena& arena, Value rules, const Sx* use, const std::string& file,
                ExpansionBudget& budget, uint32_t* mark) {
  Rules r(vm, rules, file);
  try {
    return r.expand(arena, use, budget, mark);
  } catch (Error& e) {
    if (e.file.empty()) e.file = file;  // the heap limit, from the arena (SxArena)
    throw;
  }
}

}  // namespace dlam
