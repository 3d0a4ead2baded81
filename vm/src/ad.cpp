// ad.cpp — *j, *j-inverse, zero and plus on runtime values (Estep appendix A).
//
// *j of a number is a reverse-tagged number (Rev), of a vector a Rev of the whole
// vector (its sensitivity is a vector of its length); of a pair, the pair of the *j of
// its parts (memoised on the pair, so sharing is kept and *j-inverse is O(1)); of a
// closure, a closure of the transformed proto whose environment is mapped through
// *j lazily, on first call; of a primitive, a Rep native that follows the
// rep-function convention by calling the transform of the primitive's eta
// expansion; of a record or a dict, the record (dict) of the *j of its fields
// (values), memoised both ways as for pairs. *j-inverse undoes each of these. zero is
// the zero shaped like its argument, made eagerly (zeroOf); the transformed code and
// the library use the symbolic zero instead (a conformant zero of any shape, O(1)),
// which %materialize shapes where a sensitivity leaves them. plus adds sensitivities
// structurally (records of one type field by field, dicts of the same keys value by
// value, two equal discrete values being that value) and returns the other side in
// O(1) when one is the symbolic zero. Nothing here recurses in C++ along the data:
// structures are walked with explicit stacks.
#include <string>
#include <unordered_map>
#include <vector>

#include "dlam/aggregate.h"
#include "dlam/dict.h"
#include "dlam/opcodes.h"
#include "dlam/scratch.h"
#include "dlam/vm.h"

namespace dlam {

namespace {

Value* memoSlot(Obj* o) {
  switch (o->type) {
    case ObjType::Pair:
      return &static_cast<Pair*>(o)->memo;
    case ObjType::Closure:
      return &static_cast<Closure*>(o)->memo;
    case ObjType::Native:
      return &static_cast<Native*>(o)->memo;
    case ObjType::Vector:
      return &static_cast<Vector*>(o)->memo;
    case ObjType::Record:
      return &static_cast<Record*>(o)->memo;
    case ObjType::Dict:
      return &static_cast<Dict*>(o)->memo;
    default:
      return nullptr;
  }
}

Value getMemo(Obj* o, bool inverse) {
  Value* slot = memoSlot(o);
  if (!slot) return Value::undefined();
  uint16_t want = inverse ? kMemoInv : kMemoFwd;
  if (o->flags & want) return *slot;
  if (o->flags & kMemoBoth) return inverse ? asPair(*slot)->cdr : asPair(*slot)->car;
  return Value::undefined();
}

}  // namespace

// The memoised value usually is new and `o` may be old: each store has its write barrier.
static void setMemo(VM& vm, Obj* o, bool inverse, Value v) {
  Value* slot = memoSlot(o);
  if (!slot) return;
  uint16_t want = inverse ? kMemoInv : kMemoFwd;
  uint16_t other = inverse ? kMemoFwd : kMemoInv;
  if (o->flags & kMemoBoth) {
    Pair* record = asPair(*slot);
    (inverse ? record->cdr : record->car) = v;
    vm.writeBarrier(record, v);
  } else if (o->flags & other) {
    Value record = inverse ? vm.cons(*slot, v) : vm.cons(v, *slot);
    *slot = record;
    vm.writeBarrier(o, record);
    o->flags = static_cast<uint16_t>((o->flags & ~other) | kMemoBoth);
  } else {
    *slot = v;
    vm.writeBarrier(o, v);
    o->flags |= want;
  }
}

// (*j-inverse (*j a)) should give back a: *j of an attached value is its rep, so
// the rep remembers the attached value as its inverse (unless it has one already,
// e.g. a rep that is itself (*j g)).
void VM::noteAttached(Attached* a) {
  Value rep = a->rep;
  if (!rep.isObject()) return;
  Obj* o = rep.asObject();
  if (o->type != ObjType::Closure && o->type != ObjType::Native && o->type != ObjType::Pair) return;
  if (getMemo(o, true).isUndefined()) setMemo(*this, o, true, Value::object(a));
}

Proto* VM::transformed(Proto* p) {
  if (p->transformed) return p->transformed;
  if (!transformProto) runtimeError("*j: no reverse transform is installed in this VM");
  // No fixed cap on nesting: each level transforms code larger than the last, so
  // runaway nesting (a function taking its own gradient) ends at the heap limit. The
  // one bound is the bytecode's: an instruction holds its reverse level in 7 bits.
  if (p->adLevel >= instr::kMaxLevel)
    limitError("*j: derivatives nested more than " + std::to_string(instr::kMaxLevel) +
               " reverse levels deep (the bytecode's limit)");
  Proto* t = transformProto(*this, p);
  p->transformed = t;
  writeBarrier(p, Value::object(t));
  t->primal = p;
  writeBarrier(t, Value::object(p));
  return t;
}

void VM::forceClosureSlow(Closure* c) {
  auto lazy = static_cast<uint16_t>(c->flags & (kLazyJ | kLazyJInv));
  bool inverse = lazy & kLazyJInv;
  c->flags &= static_cast<uint16_t>(~(kLazyJ | kLazyJInv));
  // The whole environment is mapped before any of it is stored: if mapping fails part
  // way (out of memory, a limit), the closure stays lazy as it was, not half mapped.
  std::vector<Value> mapped;
  try {
    mapped.reserve(c->aux);
    for (uint32_t i = 0; i < c->aux; ++i)
      mapped.push_back(inverse ? starJInverse(c->upvals[i]) : starJ(c->upvals[i]));
  } catch (...) {
    c->flags |= lazy;
    throw;
  }
  // The closure may be old (made long before its first call), the mapped values new.
  for (uint32_t i = 0; i < c->aux; ++i) {
    c->upvals[i] = mapped[i];
    writeBarrier(c, mapped[i]);
  }
}

bool VM::hasInverse(Value v) const {
  if (!v.isObject()) return false;
  Obj* o = v.asObject();
  if (o->type == ObjType::Closure && static_cast<Closure*>(o)->proto->primal) return true;
  return !getMemo(o, true).isUndefined();
}

void VM::patchCaptured(Closure* c, uint32_t i, Value v) {
  c->upvals[i] = v;
  writeBarrier(c, v);
  if (!(c->flags & (kMemoFwd | kMemoInv | kMemoBoth))) return;
  // Along each direction, the memo chain c -> (*j c) -> (*j (*j c)) ... (and the same for
  // *j-inverse): a closure still lazy holds its source's values, mapped when first called
  // (and has made nothing from itself yet: *j and *j-inverse force it first); one already
  // mapped gets the value mapped as forceClosureSlow would have.
  for (bool inverse : {false, true}) {
    Closure* from = c;
    Value value = v;
    for (;;) {
      Value m = getMemo(from, inverse);
      if (!isClosure(m)) break;
      Closure* to = asClosure(m);
      if (i >= to->aux) break;
      bool lazy = to->flags & (inverse ? kLazyJInv : kLazyJ);
      if (!lazy) value = inverse ? starJInverse(value) : starJ(value);
      to->upvals[i] = value;
      writeBarrier(to, value);
      if (lazy) break;
      from = to;
    }
  }
}

Native* VM::liftedNative(Native* base, uint16_t level) {
  uint64_t key = reinterpret_cast<uint64_t>(base) ^ (static_cast<uint64_t>(level) << 56);
  auto it = liftedCache_.find(key);
  if (it != liftedCache_.end()) return it->second;
  Native* n = makeNative(base->name, base->fn, base->minArgs, base->maxArgs, 0);
  n->kind = static_cast<uint16_t>(NativeKind::Lifted);
  n->level = level;
  n->data = Value::object(base);
  liftedCache_.emplace(key, n);
  return n;
}

Native* VM::repNative(Native* base, uint16_t level) {
  Native* n = makeNative(base->name, nullptr, base->minArgs, base->maxArgs, 0);
  n->kind = static_cast<uint16_t>(NativeKind::Rep);
  n->level = level;
  n->data = Value::object(base);
  return n;
}

Closure* VM::repClosure(Native* rep, int nargs) {
  Native* base = asNative(rep->data);
  if (!base->takes(nargs))
    runtimeError(std::string(base->name) + ": wrong number of arguments (" + std::to_string(nargs) +
                 ")");
  if (nargs > 32 && base->maxArgs < 0) {
    // Many arguments: differentiate a fold written in the prelude (%nary-NAME)
    // rather than an eta expansion with one parameter per argument.
    // (The library's own, whatever a program defines under that name.)
    Value folded = libraryValue(std::string("%nary-") + base->name);
    if (!isClosure(folded))
      runtimeError(std::string(base->name) + ": cannot differentiate a call with " +
                   std::to_string(nargs) + " arguments");
    Value v = folded;
    for (uint16_t i = 0; i < rep->level; ++i) v = starJ(v);
    return asClosure(v);
  }
  uint64_t key = reinterpret_cast<uint64_t>(base) ^ (static_cast<uint64_t>(nargs) << 48);
  Closure* eta;
  auto it = etaCache_.find(key);
  if (it != etaCache_.end()) {
    eta = it->second;
  } else {
    if (!etaProto) runtimeError("*j: no reverse transform is installed in this VM");
    eta = makeClosure(etaProto(*this, base, nargs), 0);
    etaCache_.emplace(key, eta);
  }
  Value v = Value::object(eta);
  for (uint16_t i = 0; i < rep->level; ++i) v = starJ(v);
  return asClosure(v);
}

Value VM::liftedCall(Native* lifted, Value* args, int nargs) {
  Native* base = asNative(lifted->data);
  if (base->flags & kNoDerivative) {
    // %call-vjp itself being differentiated: the host function's vjp is first order only.
    if (nargs > 0 && isNative(args[0]) && (asNative(args[0])->flags & kHasVjp))
      runtimeError(std::string(asNative(args[0])->name) +
                   ": nested derivatives through this host function are not supported (its vjp is "
                   "first order)");
    runtimeError(std::string(base->name) +
                 ": has no derivative, so it cannot be used in differentiated code (attach one "
                 "with custom-vjp, "
                 "or register the host function with a vjp)");
  }
  if ((base->flags & kHasVjp) && lifted->level > 1)
    runtimeError(std::string(base->name) +
                 ": nested derivatives through this host function are not supported (its vjp is "
                 "first order)");
  Scratch<Value> stripped(static_cast<size_t>(nargs));
  for (int i = 0; i < nargs; ++i) stripped[i] = args[i];
  for (int i = 0; i < nargs; ++i) {
    Value& a = stripped[i];
    if (lifted->level == 1 && isObj(a, ObjType::Rev)) {
      a = static_cast<Rev*>(a.asObject())->primal;
      continue;
    }
    for (uint16_t i = 0; i < lifted->level; ++i) {
      if (a.isNumber())
        runtimeError(
            std::string(base->name) + ": got the plain number " + show(a, true) +
            " where a reverse-tagged value was expected (a derivative level was mixed up)");
      a = starJInverse(a);
    }
  }
  callingNative = base;
  Value r = callPrimitive(base, stripped.data(), nargs);
  for (uint16_t i = 0; i < lifted->level; ++i) r = starJ(r);
  return r;
}

Value VM::liftedBinary(NativeId id, uint32_t level, Value* args) {
  if (level == 1 && isObj(args[0], ObjType::Rev) && isObj(args[1], ObjType::Rev)) {
    // First-order derivatives: both operands tag numbers.
    Value x = static_cast<Rev*>(args[0].asObject())->primal,
          y = static_cast<Rev*>(args[1].asObject())->primal;
    if (x.isNumber() && y.isNumber()) {
      double a = x.asNumber(), b = y.asNumber();
      switch (id) {
        case NativeId::Add:
        case NativeId::SensAdd:
          return Value::object(makeRev(Value::number(a + b)));
        case NativeId::Sub:
        case NativeId::SensSub:
          return Value::object(makeRev(Value::number(a - b)));
        case NativeId::Mul:
          return Value::object(makeRev(Value::number(a * b)));
        case NativeId::Div:
          return Value::object(makeRev(Value::number(a / b)));
        case NativeId::Lt:
          return Value::boolean(a < b);
        case NativeId::Le:
          return Value::boolean(a <= b);
        case NativeId::Gt:
          return Value::boolean(a > b);
        case NativeId::Ge:
          return Value::boolean(a >= b);
        case NativeId::NumEq:
          return Value::boolean(a == b);
        default:
          break;
      }
    }
  }
  Native* base = builtin(id);
  if (level == 0) return callPrimitive(base, args, 2);
  Value stripped[2] = {args[0], args[1]};
  for (Value& a : stripped) {
    for (uint32_t i = 0; i < level; ++i) {
      if (isObj(a, ObjType::Rev)) {
        a = static_cast<Rev*>(a.asObject())->primal;
      } else if (a.isNumber()) {
        runtimeError(
            std::string(base->name) + ": got the plain number " + show(a, true) +
            " where a reverse-tagged value was expected (a derivative level was mixed up)");
      } else if (!a.isZero()) {
        break;  // not a number at all: the primitive reports the type error
      }
    }
  }
  Value r = callPrimitive(base, stripped, 2);
  if (r.isNumber() || isFwd(r) || isObj(r, ObjType::Vector))
    for (uint32_t i = 0; i < level; ++i) r = Value::object(makeRev(r));
  return r;
}

Value VM::jLeaf(Value v) {
  if (v.isNumber()) return Value::object(makeRev(v));
  if (!v.isObject()) return v;  // (), booleans, void, the symbolic zero
  Obj* o = v.asObject();
  switch (o->type) {
    case ObjType::String:
    case ObjType::Symbol:
    case ObjType::ErrorObject:
    case ObjType::Port:
      return v;
    case ObjType::Rev:
      return Value::object(makeRev(v));
    case ObjType::Closure: {
      Value m = getMemo(o, false);
      if (!m.isUndefined()) return m;
      auto* c = static_cast<Closure*>(o);
      forceClosure(c);
      Proto* t = transformed(c->proto);
      Closure* jc = makeClosure(t, c->aux);
      for (uint32_t i = 0; i < c->aux; ++i) jc->upvals[i] = c->upvals[i];
      if (c->aux) jc->flags |= kLazyJ;
      setMemo(*this, o, false, Value::object(jc));
      setMemo(*this, jc, true, v);
      return Value::object(jc);
    }
    case ObjType::Native: {
      Value m = getMemo(o, false);
      if (!m.isUndefined()) return m;
      auto* n = static_cast<Native*>(o);
      Native* r;
      switch (static_cast<NativeKind>(n->kind)) {
        case NativeKind::Plain:
          r = repNative(n, 1);
          break;
        case NativeKind::Rep:
          r = repNative(asNative(n->data), static_cast<uint16_t>(n->level + 1));
          break;
        default:
          runtimeError("*j: cannot differentiate the internal procedure " + std::string(n->name));
      }
      setMemo(*this, o, false, Value::object(r));
      setMemo(*this, r, true, v);
      return Value::object(r);
    }
    case ObjType::Attached:
      // attach-j*'s rep is for j*: under *j the value is its primal.
      if (o->flags & kForwardRep) return starJ(static_cast<Attached*>(o)->primal);
      return static_cast<Attached*>(o)->rep;
    case ObjType::Fwd:
      // A bundle is tagged as a whole, like a number (its parts carry lower tags).
      return Value::object(makeRev(v));
    case ObjType::Foreign:
      runtimeError("*j: the foreign function " + std::string(static_cast<Native*>(o)->name) +
                   " has no derivative; attach one with custom-vjp");
    case ObjType::Vector: {
      // A sparse sensitivity (object.h), a value of a derivative being differentiated
      // again, is tagged as its dense form: nothing but first-order AD meets sparse nodes.
      if (isSparse(static_cast<Vector*>(o))) {
        o = dense(static_cast<Vector*>(o));
        v = Value::object(o);
      }
      // Tagged as a whole, once: (*j v) twice is the same value, as for pairs.
      Value m = getMemo(o, false);
      if (!m.isUndefined()) return m;
      Value r = Value::object(makeRev(v));
      setMemo(*this, o, false, r);
      return r;
    }
    case ObjType::Record:
      if (isRecordType(static_cast<Record*>(o))) return v;  // like a symbol: its own image
      return adMap(v, false);
    case ObjType::Dict:
      return adMap(v, false);
    case ObjType::Proto:
    case ObjType::Pair:
    case ObjType::DictNode:
      break;
  }
  runtimeError("*j: unexpected value " + show(v, true));
}

Value VM::jInvLeaf(Value v) {
  if (v.isNumber())
    runtimeError("*j-inverse: got the plain number " + show(v, true) +
                 " where a reverse-tagged value was expected (a derivative level was mixed up)");
  if (!v.isObject()) return v;
  Obj* o = v.asObject();
  switch (o->type) {
    case ObjType::String:
    case ObjType::Symbol:
    case ObjType::ErrorObject:
    case ObjType::Port:
      return v;
    case ObjType::Record:
      if (isRecordType(static_cast<Record*>(o))) return v;
      return adMap(v, true);
    case ObjType::Dict:
      return adMap(v, true);
    case ObjType::Rev:
      return static_cast<Rev*>(o)->primal;
    case ObjType::Fwd:
      runtimeError("*j-inverse: got the bundle " + show(v, true) +
                   " where a reverse-tagged value was expected (a derivative level was mixed up)");
    case ObjType::Closure: {
      Value m = getMemo(o, true);
      if (!m.isUndefined()) return m;
      auto* c = static_cast<Closure*>(o);
      if (!c->proto->primal)
        runtimeError("*j-inverse: " + show(v, true) + " is not a reverse-transformed procedure");
      forceClosure(c);
      Closure* pc = makeClosure(c->proto->primal, c->aux);
      for (uint32_t i = 0; i < c->aux; ++i) pc->upvals[i] = c->upvals[i];
      if (c->aux) pc->flags |= kLazyJInv;
      setMemo(*this, o, true, Value::object(pc));
      setMemo(*this, pc, false, v);
      return Value::object(pc);
    }
    case ObjType::Native: {
      Value m = getMemo(o, true);
      if (!m.isUndefined()) return m;
      auto* n = static_cast<Native*>(o);
      if (static_cast<NativeKind>(n->kind) == NativeKind::Rep) {
        Native* base = asNative(n->data);
        Value r = n->level > 1 ? Value::object(repNative(base, static_cast<uint16_t>(n->level - 1)))
                               : Value::object(base);
        setMemo(*this, o, true, r);
        return r;
      }
      runtimeError("*j-inverse: " + show(v, true) + " is not a reverse-transformed procedure");
    }
    case ObjType::Attached: {
      // Estep: J⁻¹(v1 ←J v2) = (J⁻¹ v1) ←J (v1 ←J v2)
      auto* a = static_cast<Attached*>(o);
      Value p = starJInverse(a->primal);
      if (a->flags & kForwardRep) {
        // (attach-j* v̀ rèp) made by transformed code: the attachment of the inverses.
        Value rep = starJInverse(a->rep);
        Attached* r = makeAttached(p, Value::boolean(false));
        r->rep = rep;
        r->flags |= kForwardRep;
        return Value::object(r);
      }
      return Value::object(makeAttached(p, v));
    }
    default:
      break;
  }
  runtimeError("*j-inverse: " + show(v, true) + " is not a reverse-tagged value");
}

// Maps *j (or *j-inverse) over a structure: pairs are rebuilt part by part (with
// memos both ways), everything else goes to the leaf rules. Iterative. A list with
// no pair for an element (a list of numbers, of their sensitivities) is mapped along
// its spine, back to front, without the general walk's stacks.
Value VM::adMap(Value root, bool inverse) {
  if (isPair(root)) {
    std::vector<Pair*> spine;
    Value p = root;
    for (; isPair(p) && getMemo(p.asObject(), inverse).isUndefined(); p = asPair(p)->cdr) {
      if (isPair(asPair(p)->car)) break;
      spine.push_back(asPair(p));
    }
    if (!isPair(p) || !getMemo(p.asObject(), inverse).isUndefined()) {
      Value tail = isPair(p) ? getMemo(p.asObject(), inverse) : inverse ? jInvLeaf(p) : jLeaf(p);
      for (size_t i = spine.size(); i-- > 0;) {
        Pair* from = spine[i];
        Value to = cons(inverse ? jInvLeaf(from->car) : jLeaf(from->car), tail);
        setMemo(*this, from, inverse, to);
        setMemo(*this, to.asObject(), !inverse, Value::object(from));
        tail = to;
      }
      return tail;
    }
  }
  struct Item {
    Value v;
    bool expanded;
  };
  std::vector<Item> work{{root, false}};
  std::vector<Value> results;
  std::vector<Value> parts;
  while (!work.empty()) {
    Item it = work.back();
    work.pop_back();
    if (!it.expanded) {
      bool pair = isPair(it.v);
      if (pair || isAggregate(it.v)) {
        Value m = getMemo(it.v.asObject(), inverse);
        if (!m.isUndefined()) {
          results.push_back(m);
          continue;
        }
        work.push_back({it.v, true});
        if (pair) {
          work.push_back({asPair(it.v)->cdr, false});
          work.push_back({asPair(it.v)->car, false});
        } else {
          parts.clear();
          partsOf(it.v, parts);
          for (size_t i = parts.size(); i-- > 0;) work.push_back({parts[i], false});
        }
        continue;
      }
      results.push_back(inverse ? jInvLeaf(it.v) : jLeaf(it.v));
      continue;
    }
    Value p;
    if (isPair(it.v)) {
      Value cdr = results.back();
      results.pop_back();
      Value car = results.back();
      results.pop_back();
      p = cons(car, cdr);
    } else {
      size_t n = partCount(it.v);
      p = rebuild(*this, it.v, results.data() + results.size() - n);
      results.resize(results.size() - n);
    }
    setMemo(*this, it.v.asObject(), inverse, p);
    setMemo(*this, p.asObject(), !inverse, it.v);
    results.push_back(p);
  }
  return results.back();
}

Value VM::starJ(Value v) { return isPair(v) ? adMap(v, false) : jLeaf(v); }

// ---- the symbolic zero where code observes a backpropagator's result --------------
//
// The backward pass passes the symbolic zero around for sensitivities nothing reached
// (O(1) whatever the shape). Code that observes what a backpropagator returns must see
// the zero of the right shape instead, as gradient and vjp give it (%materialize). Only
// backpropagator calls pay for telling the two apart: a reverse-transformed function
// starts with ADENTRY, which finds whether its caller is code made by fewer transforms
// (it observes the result) or transformed code of the same level (the backward pass's
// own business); an observed call goes through the prelude's %j-boundary (at the
// caller's level), which calls it from there and hands out its backpropagator flagged
// (observedCopy). A flagged closure is an ordinary copy of the backpropagator (same
// code, same captured values: *j, *j-inverse, zero and plus see the backpropagator
// itself) whose hidden slot holds a procedure that runs it and materializes its result
// against the primal values the call was given. Its flag is among those a CALL tests
// already on its way to the common case, so a flagged closure's calls take the general
// path, where a caller observing the result is sent to the hidden procedure.

uint16_t VM::callerAdLevel() {
  for (size_t i = frames_.size() - 1; i-- > 0;)
    if (frames_[i].closure) return frames_[i].closure->proto->adLevel;
  return 0;
}

// Code of every level is sent through %j-boundary (plain code directly, code of level 1
// by way of %j-boundary-at and of level 2 or more by way of %j-boundary-up, which give
// the boundary's backpropagator the caller's convention; docs/internals.md).
bool VM::observedRep() {
  const Proto* p = frames_.back().closure->proto;
  uint16_t c = callerAdLevel();
  for (uint16_t i = 0; i <= c; ++i)
    if (!(p = p->primal)) return false;
  return true;
}

Value VM::jBoundary(uint16_t level) {
  Value b = libraryValue("%j-boundary");
  if (!isClosure(b)) runtimeError("*j: the library's %j-boundary is missing");
  for (uint16_t i = 0; i < level; ++i) b = starJ(b);
  return b;
}

int VM::adEntry() {
  if (!observedCall(frames_.size() - 2, frames_.back().closure->proto->adLevel) || !observedRep())
    return 0;
  return toJBoundary();
}

int VM::toJBoundary() {
  CallFrame* frame = &frames_.back();
  Closure* closure = frame->closure;
  Proto* p = closure->proto;
  uint32_t base = frame->base;
  // Arguments passed untagged are tagged, as the caller's *j would have.
  for (uint32_t raw = frame->raw; raw; raw &= raw - 1) {
    auto i = static_cast<uint32_t>(__builtin_ctz(raw));
    Value x = starJValue(stack_[base + i]);
    stack_[base + i] = x;
  }
  frames_.back().raw = 0;
  // The arguments as one list: the fixed ones before the rest list, or the one
  // argument taken in parts (Proto::paramSplit) put back together. (No collection runs
  // while this allocates.)
  Value args = Value::nil();
  if (p->paramSplit) {
    Value whole = stack_[base + p->paramSplit - 1];
    for (uint32_t j = p->paramSplit - 1; j-- > 0;) whole = cons(stack_[base + j], whole);
    args = cons(whole, Value::nil());
  } else {
    if (p->hasRest) args = stack_[base + p->nparams];
    for (uint32_t j = p->nparams; j-- > 0;) args = cons(stack_[base + j], args);
  }
  uint16_t level = callerAdLevel();
  Value b = jBoundary(level);
  ensureStack(base + 4);
  if (level == 0) {
    stack_[base - 1] = b;
    stack_[base] = Value::object(closure);
    stack_[base + 1] = args;
    frames_.back().closure = asClosure(b);
    return 2;
  }
  // Called by code of level 1: through %j-boundary-at, which hands on a backpropagator
  // of the caller's convention (prelude.dlam); of level 2 or more, through
  // %j-boundary-up, which does so at each level, given the level first.
  const char* name = level == 1 ? "%j-boundary-at" : "%j-boundary-up";
  Value at = libraryValue(name);
  if (!isClosure(at)) runtimeError(std::string("*j: the library's ") + name + " is missing");
  uint32_t k = 0;
  stack_[base - 1] = at;
  if (level > 1) stack_[base + k++] = Value::number(level);
  stack_[base + k++] = b;
  stack_[base + k++] = Value::object(closure);
  stack_[base + k++] = args;
  frames_.back().closure = asClosure(at);
  return static_cast<int>(k);
}

Value VM::observedCopy(Value bp, Value w) {
  if (!isClosure(bp) || asClosure(bp)->proto->adLevel == 0) return bp;
  Closure* c = asClosure(bp);
  uint32_t n = c->aux;
  auto* o = static_cast<Closure*>(allocate(ObjType::Closure, closureSize(n + 1)));
  o->proto = c->proto;
  o->aux = n;
  // The memo is shared: *j and *j-inverse of the copy are those of the backpropagator.
  o->memo = c->memo;
  o->flags = static_cast<uint16_t>(
      (c->flags & (kMemoFwd | kMemoInv | kMemoBoth | kLazyJ | kLazyJInv)) | kObservedBp);
  for (uint32_t i = 0; i < n; ++i) o->upvals[i] = c->upvals[i];
  o->upvals[n] = w;
  return Value::object(o);
}

// Not memoized as jLeaf's tag of an array is: that one is the image of the array
// wherever it is differentiated, this one only where it is a constant. (eq? and eqv?
// compare tagged values by their primals, so the two are the same to a program.)
Value VM::starJConstant(Value v) {
  if (v.isNumber() || isObj(v, ObjType::Rev) ||
      (isObj(v, ObjType::Vector) && !isSparse(static_cast<Vector*>(v.asObject())))) {
    Rev* r = makeRev(v);
    r->aux = kConstantImage;
    return Value::object(r);
  }
  return starJ(v);
}
Value VM::starJInverse(Value v) { return isPair(v) ? adMap(v, true) : jInvLeaf(v); }

// The values a closure captured, as a list: what its sensitivity has the shape of.
Value VM::capturedValues(Closure* c) {
  forceClosure(c);
  return list(c->upvals, c->count());
}

// The zero sensitivity shaped like v, built eagerly (docs/language.md says why): a
// number's is 0 (under v's reverse tags), a vector's a vector of zeros of its length,
// a pair's the pair of its parts' zeros, a record's a record of its type, a dict's a
// dict of its keys, a closure's the list of its captured values' zeros, a primitive's
// (); a discrete value is its own zero. Walked with a stack; a list along its spine.
// Shared parts are made once (a DAG stays a DAG), and a closure met again inside its
// own zero (a recursive closure captures itself) gets (), so the walk ends.
Value VM::zeroOf(Value v) {
  v = unwrapAttached(v);
  // A forward bundle's sensitivity is that of its primal (as forward.cpp keeps it): of a
  // number, 0; of an array, the zero array of its shape.
  while (isFwd(v)) v = asFwd(v)->primal;
  if (v.isNumber()) return Value::number(0);
  if (isDiscrete(v) || v.isZero()) return v;
  enum Kind : uint8_t { kVisit, kList, kAggregate, kClosure };
  struct Item {
    Value v;
    Kind kind;
    uint32_t n;  // kList: the number of elements (the results: n cars, then the end)
  };
  std::vector<Item> work{{v, kVisit, 0}};
  std::vector<Value> results, parts;
  std::unordered_map<Obj*, Value> made;  // compound values' zeros (undefined: being made)
  auto tagged = [&](Value z, int tags) {
    for (int i = 0; i < tags; ++i) z = Value::object(makeRev(z));
    return z;
  };
  while (!work.empty()) {
    Item it = work.back();
    work.pop_back();
    Value x = it.v;
    if (it.kind == kList) {
      // n elements' zeros then the end's: the list, back to front.
      Value l = results.back();
      results.pop_back();
      for (uint32_t i = 0; i < it.n; ++i) {
        l = cons(results.back(), l);
        results.pop_back();
      }
      made[x.asObject()] = l;
      results.push_back(l);
      continue;
    }
    if (it.kind == kAggregate) {
      size_t n = partCount(x);
      Value z = rebuild(*this, x, results.data() + results.size() - n);
      results.resize(results.size() - n);
      made[x.asObject()] = z;
      results.push_back(z);
      continue;
    }
    if (it.kind == kClosure) {
      made[x.asObject()] = results.back();
      continue;
    }
    x = unwrapAttached(x);
    int tags = 0;
    for (;;) {
      if (isObj(x, ObjType::Rev)) {
        x = static_cast<Rev*>(x.asObject())->primal;
        ++tags;
      } else if (isFwd(x)) {
        x = asFwd(x)->primal;
      } else {
        break;
      }
    }
    if (x.isNumber()) {
      results.push_back(tagged(Value::number(0), tags));
      continue;
    }
    if (isDiscrete(x) || x.isZero()) {
      results.push_back(x);
      continue;
    }
    Obj* o = x.asObject();
    if (auto m = made.find(o); m != made.end()) {
      // Undefined: a closure inside its own zero.
      results.push_back(m->second.isUndefined() ? Value::nil() : m->second);
      continue;
    }
    switch (o->type) {
      case ObjType::Vector: {
        // An array of any rank: zeros of its shape.
        auto* a = static_cast<Vector*>(o);
        uint32_t n = vectorLength(a);
        Vector* z = a->rank > 1 ? makeArray(a->rank, arrayShape(a)) : makeVector(n);
        for (uint32_t i = 0; i < n; ++i) z->items[i] = 0;
        results.push_back(tagged(Value::object(z), tags));
        break;
      }
      case ObjType::Pair: {
        // The spine up to a part already made (shared) or the end: its cars are
        // visited in order, then the end, then the list is built.
        uint32_t n = 0;
        Value p = x;
        std::vector<Value> cars;
        do {
          cars.push_back(asPair(p)->car);
          p = asPair(p)->cdr;
          ++n;
        } while (isPair(p) && !made.count(p.asObject()));
        work.push_back({x, kList, n});
        work.push_back({p, kVisit, 0});
        for (size_t i = cars.size(); i-- > 0;) work.push_back({cars[i], kVisit, 0});
        break;
      }
      case ObjType::Record:
      case ObjType::Dict:
        work.push_back({x, kAggregate, 0});
        parts.clear();
        partsOf(x, parts);
        for (size_t i = parts.size(); i-- > 0;) work.push_back({parts[i], kVisit, 0});
        break;
      case ObjType::Closure:
        made[o] = Value::undefined();
        work.push_back({x, kClosure, 0});
        work.push_back({capturedValues(static_cast<Closure*>(o)), kVisit, 0});
        break;
      default:  // primitives, foreign functions: no free variables
        results.push_back(Value::nil());
        break;
    }
  }
  return results.back();
}

Vector* VM::dense(Vector* v) {
  if (!isSparse(v)) return v;
  if (denseOf_[0] == Value::object(v)) return static_cast<Vector*>(denseOf_[1].asObject());
  Vector* r = makeVector(vectorLength(v));
  denseInto(v, r->items);
  denseOf_[0] = Value::object(v);
  denseOf_[1] = Value::object(r);
  return r;
}

namespace {
// plus without descending: numbers and zeros; undefined if structure must be walked.
inline Value plusShallow(Value a, Value b) {
  if (a.isZero()) return b;
  if (b.isZero()) return a;
  if (a.isNumber() && b.isNumber()) return Value::number(a.asNumber() + b.asNumber());
  return Value::undefined();
}

// Sensitivities that carry the axes of a broadcast (ad_rules.cpp). The sensitivity of
// a value may have more axes than the value, or sizes where the value has 1: it
// stands for its sum over those axes. Two such sensitivities of one value of different
// shapes are added by first summing each to the shape they have in common (the value's
// shape broadcasts to it): the axes both have (aligned at the last), each of the size
// both give it, else 1. Where the two sizes differ the value's size is 1 (it broadcasts
// to both), whether or not they broadcast together: the sensitivities of a number
// broadcast against #(1 2) and against #(1 2 3) are of shapes (2) and (3).

// The size of axis i (of v->rank) of a dense array or a sparse vector sensitivity.
uint32_t axisSize(const Vector* v, uint32_t i) {
  return v->rank == 1 ? vectorLength(v) : arrayShape(v)[i];
}

// x (an array) summed to the shape `to` (rank 0: a number), by %sum-to.
Value sumToShape(VM& vm, Value x, const std::vector<uint32_t>& to) {
  Value like = to.empty()
                   ? Value::number(0)
                   : Value::object(vm.makeArray(static_cast<uint32_t>(to.size()), to.data()));
  if (!to.empty())
    for (uint32_t i = 0, n = vectorLength(static_cast<Vector*>(like.asObject())); i < n; ++i)
      static_cast<Vector*>(like.asObject())->items[i] = 0;
  Value args[2] = {x, like};
  return vm.callPrimitive(vm.builtin(NativeId::SumTo), args, 2);
}

Value plusBroadcast(VM& vm, Vector* u, Vector* v) {
  uint32_t r = std::min(u->rank, v->rank);
  std::vector<uint32_t> to(r);
  for (uint32_t i = 1; i <= r; ++i) {
    uint32_t x = axisSize(u, u->rank - i), y = axisSize(v, v->rank - i);
    to[r - i] = x == y ? x : 1;
  }
  return vm.arith(NativeId::Add, sumToShape(vm, Value::object(u), to),
                  sumToShape(vm, Value::object(v), to));
}

// A number's sensitivity added to one that carries broadcast axes: the number plus
// the sum of the array; undefined for other kinds.
Value plusNumberArray(VM& vm, Value a, Value b) {
  if (a.isNumber() && isObj(b, ObjType::Vector)) std::swap(a, b);
  if (!isObj(a, ObjType::Vector) || !b.isNumber()) return Value::undefined();
  return vm.arith(NativeId::Add, sumToShape(vm, a, {}), b);
}

// The sum of two vector sensitivities; undefined unless both are vectors. A chain of
// nodes that ends in () (object.h) shorter than the vector goes in front of the other
// side, node by node: the shorter of two such chains, or such a chain in front of a
// dense vector or a chain ending in one, while the result fits (sparseChainFits).
// Otherwise the sum is a new dense vector (O(n + the nodes)), which also takes in the
// nodes, so a long accumulation is walked once.
Value plusVectors(VM& vm, Value a, Value b) {
  if (!isObj(a, ObjType::Vector) || !isObj(b, ObjType::Vector)) return Value::undefined();
  auto *u = static_cast<Vector*>(a.asObject()), *v = static_cast<Vector*>(b.asObject());
  uint32_t n = vectorLength(u);
  if (!sameShape(u, v)) return plusBroadcast(vm, u, v);
  if (u->rank > 1) {
    Vector* r = vm.makeArray(u->rank, arrayShape(u));
    for (uint32_t i = 0; i < n; ++i) r->items[i] = u->items[i] + v->items[i];
    return Value::object(r);
  }
  // v is to go in front of u: the purely sparse one, the shorter if both are.
  if (!isPurelySparse(v) || (isPurelySparse(u) && sparseCount(u) < sparseCount(v))) std::swap(u, v);
  // No collection runs inside plus: the chains stay put while nodes are made.
  if (isPurelySparse(v) && sparseCount(v) < n &&
      sparseChainFits(uint64_t(sparseCount(u)) + sparseCount(v), n)) {
    Value head = Value::object(u);
    forEachSparse(
        v, [&](uint32_t i, double x) { head = Value::object(vm.makeSparse(n, i, x, head)); });
    return head;
  }
  Vector* r = vm.makeVector(n);
  denseInto(u, r->items);
  addInto(v, r->items);
  return Value::object(r);
}

// The general case of plus: any shapes, walked with explicit stacks.
Value plusTree(VM& vm, Value a, Value b) {
  struct Item {
    Value a, b;
    bool expanded;
  };
  std::vector<Item> work{{a, b, false}};
  std::vector<Value> results, xs, ys;
  while (!work.empty()) {
    Item it = work.back();
    work.pop_back();
    Value x = unwrapAttached(it.a), y = unwrapAttached(it.b);
    if (it.expanded) {
      if (isPair(x)) {
        Value cdr = results.back();
        results.pop_back();
        Value car = results.back();
        results.pop_back();
        results.push_back(vm.cons(car, cdr));
      } else {
        size_t n = partCount(x);
        Value r = rebuild(vm, x, results.data() + results.size() - n);
        results.resize(results.size() - n);
        results.push_back(r);
      }
      continue;
    }
    if (Value r = plusShallow(x, y); !r.isUndefined()) {
      results.push_back(r);
      continue;
    }
    if (isFwd(x) || isFwd(y)) {  // bundles (and their sensitivities) add as numbers
      results.push_back(vm.arith(NativeId::SensAdd, x, y));
      continue;
    }
    if (isPair(x) && isPair(y)) {
      work.push_back({x, y, true});
      work.push_back({asPair(x)->cdr, asPair(y)->cdr, false});
      work.push_back({asPair(x)->car, asPair(y)->car, false});
      continue;
    }
    if (isAggregate(x) && isAggregate(y) && sameAggregateShape(x, y)) {
      work.push_back({x, y, true});
      xs.clear();
      ys.clear();
      partsOf(x, xs);
      partsOf(y, ys);
      for (size_t i = xs.size(); i-- > 0;) work.push_back({xs[i], ys[i], false});
      continue;
    }
    if (isObj(x, ObjType::Rev) && isObj(y, ObjType::Rev)) {
      // Rev nesting is bounded by the number of nested derivatives.
      results.push_back(Value::object(vm.makeRev(vm.plus(
          static_cast<Rev*>(x.asObject())->primal, static_cast<Rev*>(y.asObject())->primal))));
      continue;
    }
    if (isDiscrete(x) && isDiscrete(y) && sameDiscrete(x, y)) {
      results.push_back(x);  // its own sensitivity: (plus "s" "s") is "s"
      continue;
    }
    if (Value r = plusVectors(vm, x, y); !r.isUndefined()) {
      results.push_back(r);
      continue;
    }
    if (Value r = plusNumberArray(vm, x, y); !r.isUndefined()) {
      results.push_back(r);
      continue;
    }
    std::string sx = vm.show(x, true), sy = vm.show(y, true);
    if (sx.size() > 60) sx = sx.substr(0, 57) + "...";
    if (sy.size() > 60) sy = sy.substr(0, 57) + "...";
    vm.runtimeError("plus: sensitivities of different shapes: " + sx + " and " + sy);
  }
  return results.back();
}

// plus of two values that are not both pairs and not both numbers or zeros: two
// reverse-tagged values, two ends of lists (no walk), two vectors, or the general
// case (shapes that do not match: its error).
Value plusEnd(VM& vm, Value a, Value b) {
  if (isObj(a, ObjType::Rev) &&
      isObj(b, ObjType::Rev))  // (nested derivatives: bounded by the level)
    return Value::object(vm.makeRev(
        vm.plus(static_cast<Rev*>(a.asObject())->primal, static_cast<Rev*>(b.asObject())->primal)));
  if (a.isNil() && b.isNil()) return a;
  if (Value r = plusVectors(vm, a, b); !r.isUndefined()) return r;  // without plusTree's stacks
  if (Value r = plusNumberArray(vm, a, b); !r.isUndefined()) return r;
  if (isObj(a, ObjType::Dict) && isObj(b, ObjType::Dict))  // entries' sensitivities: O(log n)
    if (Value r =
            dictPlusShared(vm, static_cast<Dict*>(a.asObject()), static_cast<Dict*>(b.asObject()));
        !r.isUndefined())
      return r;
  return plusTree(vm, a, b);
}
}  // namespace

void VM::splitResult(Value r, uint8_t mode, Value callee, Value* parts) {
  if (splitInto(r, mode, parts)) return;
  if (mode >= kSplitRepOf) {
    // The outer check's error, or else the inner one's (both name the callee).
    if (splitsAs(r, 1)) {
      uint8_t inner = static_cast<uint8_t>(mode - kSplitRepOf);
      Value bp = asPair(r)->cdr;
      splitResult(asPair(r)->car, inner, callee, parts);
      parts[splitCount(inner)] = bp;
      return;
    }
    mode = 1;
  }
  if (splitsAs(r, mode)) {
    // The list of argument sensitivities ends (or is not a list) before the
    // elements taken: the error of taking the first missing one.
    Value xs = r.isZero() ? r : asPair(r)->cdr;
    while (isPair(xs)) xs = asPair(xs)->cdr;
    sensitivityPartError(xs);
  }
  // The checks of %rep-result and %bp-result give the error.
  Value args[2] = {r, callee};
  builtin(mode == 1 ? NativeId::RepResult : NativeId::BpResult)->fn(*this, args, 2);
  runtimeError("internal error: a split call result passed its check");
}

void VM::sensitivityPartError(Value got) {
  std::string shown = show(got, true);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  runtimeError("backpropagator: expected a pair sensitivity (one per argument, or a pair's), got " +
               shown);
}

void VM::regroupParts(Value* args, uint32_t m, uint32_t n) {
  if (n < m) {
    uint32_t keep = n ? n - 1 : 0;
    Value rest = args[m - 1];
    for (uint32_t i = m - 1; i-- > keep;) rest = cons(args[i], rest);
    args[keep] = rest;
    return;
  }
  Value v = args[m - 1];
  for (uint32_t i = m - 1; i + 1 < n; ++i) {
    if (isPair(v)) {
      args[i] = asPair(v)->car;
      v = asPair(v)->cdr;
    } else if (v.isZero()) {
      args[i] = v;
    } else {
      sensitivityPartError(v);
    }
  }
  args[n - 1] = v;
}

Value VM::plusChecked(Value a, Value b) {
  if (isObj(a, ObjType::Vector) && isObj(b, ObjType::Vector) && runningAdLevel() == 0 &&
      !runningLibrary()) {
    auto *u = static_cast<Vector*>(a.asObject()), *v = static_cast<Vector*>(b.asObject());
    for (uint32_t i = 1; i <= std::min(u->rank, v->rank); ++i) {
      uint32_t x = axisSize(u, u->rank - i), y = axisSize(v, v->rank - i);
      if (x == y || x == 1 || y == 1) continue;
      if (u->rank == 1 && v->rank == 1)
        runtimeError("plus: sensitivities of vectors of different lengths (" +
                     std::to_string(vectorLength(u)) + " and " + std::to_string(vectorLength(v)) +
                     ")");
      runtimeError("plus: sensitivities of arrays of different shapes " + shapeText(u) + " and " +
                   shapeText(v));
    }
  }
  return plus(a, b);
}

Value VM::plus(Value a, Value b) {
  // Estep: (v1 ←J v2) ⊕ v ≡ v1 ⊕ v.
  a = unwrapAttached(a);
  b = unwrapAttached(b);
  Value r = plusShallow(a, b);
  if (!r.isUndefined()) return r;
  // Bundles and cobundles (sensitivities with a perturbation, forward over reverse, and
  // of one, reverse over forward) add as sensitivities, by %sens+, which sums one that
  // carries the axes of a broadcast to the shape the other has, part by part (+ would
  // broadcast the other along those axes, counting it once per element).
  if (isFwd(a) || isFwd(b)) return arith(NativeId::SensAdd, a, b);
  if (!isPair(a) || !isPair(b)) return plusEnd(*this, a, b);
  Pair *pa = asPair(a), *pb = asPair(b);
  // One element added to a list ((cons g 0), the sensitivity of a car): one new pair.
  if (pa->cdr.isZero() || pb->cdr.isZero()) {
    Value car = plusShallow(pa->car, pb->car);
    if (!car.isUndefined())
      return Value::object(newPair(car, pa->cdr.isZero() ? pb->cdr : pa->cdr));
  }
  // Two lists (the sensitivities of a list of weights, of a pair of a mostly zero
  // (cons g 0) and a rest): one loop along the spines, building the sum front to
  // back. The usual element, two numbers, is added in line; any other element goes
  // through plusShallow, then plusTree or plus (which never come back here for this
  // list, so nothing recurses along the data); the end, where either spine stops
  // being a pair, through plusEnd. The pairs are new, so filling their cdrs needs no
  // write barrier, and no collection runs inside plus.
  Value head;
  Value* tail = &head;  // the cdr the next pair goes into
  for (;;) {
    Value x = pa->car, y = pb->car, car;
    if (x.isNumber() && y.isNumber()) [[likely]] {
      car = Value::number(x.asNumber() + y.asNumber());
    } else {
      car = plusShallow(x, y);
      if (car.isUndefined()) car = isPair(x) ? plusTree(*this, x, y) : plus(x, y);
    }
    Pair* cell = newPair(car, Value::nil());
    *tail = Value::object(cell);
    tail = &cell->cdr;
    a = pa->cdr;
    b = pb->cdr;
    if (!bothPairs(a, b)) [[unlikely]]
      break;
    pa = asPair(a);
    pb = asPair(b);
  }
  r = plusShallow(a, b);
  *tail = r.isUndefined() ? plusEnd(*this, a, b) : r;
  return head;
}

}  // namespace dlam
