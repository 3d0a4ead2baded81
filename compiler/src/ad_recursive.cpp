// ad_recursive.cpp — recursive closure groups in the reverse transform: which groups
// of a letrec are closed (their sensitivities can only be zeros) and which closures
// recurse alone on themselves (their sensitivity kept flat), and ρ of a group, whose
// members' sensitivities refer to each other: distributed together by the prelude's
// %rec-fix.
#include "ad_transformer.h"

namespace dlam::ad {

using namespace anf;

void Transformer::findClosedRecGroups(const Lambda* L) {
  auto group = [&](const Bind& bd, const Block* b, size_t i) {
    if (bd.kind != Bind::Rec) return;
    std::unordered_set<const Var*> group(bd.recVars.begin(), bd.recVars.end());
    // Closed: every member is a closure capturing only members. A member bound to
    // anything else (the value of a call, such as a custom-vjp made in a letrec whose
    // rule refers to it) has a sensitivity of its own, which reaches what it captured.
    bool closed = true;
    size_t lambdas = 0;
    for (size_t j = i + 1; j < b->binds.size(); ++j) {
      const Bind& m = b->binds[j];
      if (!m.dst || !group.count(m.dst)) continue;
      if (m.kind != Bind::MakeLambda) {
        closed = false;
        continue;
      }
      ++lambdas;
      for (Var* f : m.lambda->freeVars)
        if (!group.count(f)) closed = false;
    }
    if (closed)
      closedRec_.insert(group.begin(), group.end());
    else if (bd.recVars.size() == 1 && lambdas == 1)
      selfRec_.insert(bd.recVars[0]);
  };
  forEachBind(static_cast<const Block*>(L->body), group, true);
}

// A run of recursive closure bindings tape[start..end]: their sensitivities refer
// to each other (a closure's free variables include itself or its partners), so
// they are distributed together until nothing is left (prelude %rec-fix).
void Transformer::rhoRecGroup(const Tape& tape, size_t start, size_t end, Sens& st) {
  std::vector<const Bind*> members(tape.begin() + static_cast<std::ptrdiff_t>(start),
                                   tape.begin() + static_cast<std::ptrdiff_t>(end) + 1);
  bool any = false;
  for (const Bind* m : members)
    if (!st.isZero(m->dst) && !closedRec_.count(m->dst)) any = true;
  if (!any) return;
  if (members.size() == 1 && selfRec_.count(members[0]->dst)) {
    spreadExcept(st, st.term(members[0]->dst), members[0]->lambda->freeVars, members[0]->dst);
    return;
  }
  std::unordered_map<const Var*, int> memberIndex;
  for (size_t i = 0; i < members.size(); ++i) memberIndex[members[i]->dst] = static_cast<int>(i);
  std::vector<Var*> ext;
  std::unordered_map<const Var*, int> extIndex;
  Value spec = Value::nil();
  std::vector<Value> rows;
  for (const Bind* m : members) {
    std::vector<Value> targets;
    for (Var* fv : m->lambda->freeVars) {
      int t;
      auto mi = memberIndex.find(fv);
      if (mi != memberIndex.end()) {
        t = mi->second;
      } else {
        auto ei = extIndex.find(fv);
        if (ei == extIndex.end()) {
          ei = extIndex.emplace(fv, static_cast<int>(ext.size())).first;
          ext.push_back(fv);
        }
        t = static_cast<int>(members.size()) + ei->second;
      }
      targets.push_back(Value::number(t));
    }
    rows.push_back(vm_.list(targets.data(), targets.size()));
  }
  spec = vm_.list(rows.data(), rows.size());
  std::vector<Atom> sens;
  for (const Bind* m : members) sens.push_back(st.get(m->dst));
  Atom out = call(st.out, {globalAtom(vm_.librarySymbol("%rec-fix")), listOf(st.out, sens),
                           constAtom(spec), constAtom(Value::number(double(members.size()))),
                           constAtom(Value::number(double(ext.size())))});
  spread(st, termOf(out), ext.begin(), ext.end());
}

}  // namespace dlam::ad
