// expand_quasiquote.h — quasiquote: a template's constant parts quoted, its unquotes
// evaluated, its lists built by list and append calls of bounded size. Part of the
// expander: included by expand.cpp alone (expander.h says why).
#pragma once
#include <cstring>

#include "expander.h"

namespace dlam {
namespace {

// ---- quasiquote ------------------------------------------------------------
//
// `tmpl is the datum tmpl except where ,expr puts a value and ,@expr splices a
// list. A nested ` raises the level and , or ,@ lowers it; only level-1 unquotes
// are evaluated, the others stay in the data. Parts that contain no unquote at
// all are quoted constants (converted iteratively, whatever their size). A list
// is built left to right from pieces (a long constant run, a (list e...), a
// spliced list) joined by append, so the expander loops along a list and recurses
// only into nested lists that contain unquotes (under the depth guard).

Atom Expander::quasiquoteExpr(Sx* x) {
  if (x->items.size() != 2) fail(x->loc, "quasiquote: expected exactly one template");
  markDynamic(x->items[1]);
  return qq(x->items[1], 1);
}

inline bool Expander::isUnquoteSymbol(const Sx* x) {
  return x->isSymbol("unquote") || x->isSymbol("unquote-splicing");
}

// Records every list under `root` that contains an unquote symbol at any depth
// (post-order over an explicit stack). The others are constants.
inline void Expander::markDynamic(Sx* root) {
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

// The keyword of a (quasiquote e), (unquote e) or (unquote-splicing e), else null.
inline const char* Expander::qqKeyword(const Sx* x) const {
  if (x->kind != Sx::Symbol || lookupSymbol(x)) return nullptr;
  for (const char* kw : {"quasiquote", "unquote", "unquote-splicing"})
    if (x->text == kw) return kw;
  return nullptr;
}

inline const char* Expander::qqForm(const Sx* x) const {
  if (x->kind != Sx::List || x->tail || x->items.size() != 2) return nullptr;
  return qqKeyword(x->items[0]);
}

inline bool Expander::isSplice(const Sx* x, int level) const {
  const char* kw = qqForm(x);
  return level == 1 && kw && std::strcmp(kw, "unquote-splicing") == 0;
}

inline Atom Expander::qq(Sx* x, int level) {
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
    return call(
        {builtinAtom(NativeId::Cons, "cons", x->loc), constAtom(vm_.symbol(kw), x->loc), restAtom},
        x->loc);
  }
  if (level == 1 && !x->items.empty() && isUnquoteSymbol(x->items[0]) && qqKeyword(x->items[0]))
    fail(x->loc, x->items[0]->text + ": expected exactly one expression");
  return qqList(x, level);
}

// Checks a spliced value that other elements follow (append would otherwise
// report the failure under its own name).
inline Atom Expander::qqCheckedSplice(Sx* form, Atom v) {
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
inline void Expander::qqAdd(std::vector<std::vector<Atom>>& levels, Atom piece, SrcLoc loc) {
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
inline Atom Expander::qqJoin(std::vector<std::vector<Atom>>& levels, SrcLoc loc) {
  std::vector<Atom> args{builtinAtom(NativeId::Append, "append", loc)};
  for (size_t k = levels.size(); k-- > 0;)
    args.insert(args.end(), levels[k].begin(), levels[k].end());
  if (args.size() == 1) return constAtom(Value::nil(), loc);
  if (args.size() == 2) return args[1];
  return call(std::move(args), loc);
}

inline Atom Expander::qqList(Sx* x, int level) {
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

}  // namespace
}  // namespace dlam
