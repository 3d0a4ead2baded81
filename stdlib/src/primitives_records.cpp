// primitives_records.cpp — records (define-record-type) and dicts: the natives that
// compute them.
//
// define-record-type (compiler/src/records.cpp) expands into calls of the %record-
// natives here, which make a record type (object.h: Record) and, for it, a constructor,
// a predicate and accessors as natives named after them (their data: the type and the
// field). The prelude wraps constructors and accessors with custom-vjp, through the
// generic %record-get and %record-onehot, so that they differentiate: a record's
// sensitivity is a record of its type. Dicts (object.h: Dict; dlam/dict.h: the tree) are
// made and read by the natives here; the prelude wraps dict, dict-ref, dict-set,
// dict-remove and dict->alist, through %dict-onehot, so that a dict's sensitivity is a
// dict with the same keys.
#include <string>
#include <vector>

#include "dlam/dict.h"
#include "primitives.h"

namespace dlam::prim {

namespace {

// ---- records -------------------------------------------------------------------

Record* recordType(VM& vm, const char* who, Value v) {
  if (!isObj(v, ObjType::Record) || !isRecordType(static_cast<Record*>(v.asObject())))
    vm.typeError(who, 0, "record type", v);
  return static_cast<Record*>(v.asObject());
}

std::string typeName(const Record* type) { return asSymbol(type->fields[0])->name; }

Native* namedNative(VM& vm, Value name, NativeFn fn, int minArgs, int maxArgs, Value data) {
  Native* n = vm.makeNative("", fn, minArgs, maxArgs);
  n->ownedName = isSymbol(name) ? asSymbol(name)->name : vm.show(name, false);
  n->name = n->ownedName.c_str();
  n->data = data;
  return n;
}

// (%make-record-type name (field ...)): a new record type.
Value makeRecordType(VM& vm, Value* a, int) {
  if (!isSymbol(a[0])) vm.typeError("%make-record-type", 0, "symbol", a[0]);
  std::vector<Value> names{a[0]};
  for (Value l = a[1]; isPair(l); l = asPair(l)->cdr) names.push_back(asPair(l)->car);
  Record* t = vm.makeRecord(Value::voidValue(), static_cast<uint32_t>(names.size()));
  for (size_t i = 0; i < names.size(); ++i) t->fields[i] = names[i];
  return Value::object(t);
}

// The record argument i of the native `self` of record type `type`, or its error.
Record* recordOf(VM& vm, const Native* self, Value type, Value* a, int i) {
  Value v = unwrapAttached(a[i]);
  if (!isObj(v, ObjType::Record) || static_cast<Record*>(v.asObject())->type != type) {
    std::string expected = "a " + typeName(static_cast<Record*>(type.asObject()));
    vm.typeError(self->name, i, expected.c_str(), v);
  }
  return static_cast<Record*>(v.asObject());
}

// A record of `type` whose fields at `indices` (a list of numbers) are args[0 .. n); a
// field no argument sets is #f.
Value makeFrom(VM& vm, Value type, Value indices, const Value* args, int n) {
  Record* r = vm.makeRecord(type, static_cast<Record*>(type.asObject())->count() - 1);
  for (uint32_t i = 0; i < r->count(); ++i) r->fields[i] = Value::boolean(false);
  Value l = indices;
  for (int i = 0; i < n; ++i, l = asPair(l)->cdr)
    r->fields[static_cast<uint32_t>(untagged(asPair(l)->car).asNumber())] = args[i];
  return Value::object(r);
}

// A constructor: data (type . (field index of each argument ...)).
Value construct(VM& vm, Value* a, int n) {
  Value data = vm.callingNative->data;
  return makeFrom(vm, asPair(data)->car, asPair(data)->cdr, a, n);
}

// (%record-from type indices xs): what the constructor of type whose arguments set the
// fields at indices makes of the list xs.
Value recordFrom(VM& vm, Value* a, int) {
  recordType(vm, "%record-from", a[0]);
  std::vector<Value> xs;
  for (Value l = a[2]; isPair(l); l = asPair(l)->cdr) xs.push_back(asPair(l)->car);
  return makeFrom(vm, a[0], a[1], xs.data(), static_cast<int>(xs.size()));
}

// (%record-constructor type name (field-index ...)).
Value recordConstructor(VM& vm, Value* a, int) {
  recordType(vm, "%record-constructor", a[0]);
  int n = 0;
  for (Value l = a[2]; isPair(l); l = asPair(l)->cdr) ++n;
  return Value::object(namedNative(vm, a[1], construct, n, n, vm.cons(a[0], a[2])));
}

Value isInstance(VM& vm, Value* a, int) {
  Value v = unwrapAttached(a[0]);
  return Value::boolean(isObj(v, ObjType::Record) &&
                        static_cast<Record*>(v.asObject())->type == vm.callingNative->data);
}

// (%record-predicate type name).
Value recordPredicate(VM& vm, Value* a, int) {
  recordType(vm, "%record-predicate", a[0]);
  return Value::object(namedNative(vm, a[1], isInstance, 1, 1, a[0]));
}

// An accessor: data (type . field index).
Value access(VM& vm, Value* a, int) {
  const Native* self = vm.callingNative;
  Record* r = recordOf(vm, self, asPair(self->data)->car, a, 0);
  return r->fields[static_cast<uint32_t>(asPair(self->data)->cdr.asNumber())];
}

// (%record-accessor-native type name field-index).
Value recordAccessor(VM& vm, Value* a, int) {
  recordType(vm, "%record-accessor-native", a[0]);
  return Value::object(namedNative(vm, a[1], access, 1, 1, vm.cons(a[0], a[2])));
}

// The record argument 0 and the field index argument 1 of %record-get / %record-onehot.
Record* recordAt(VM& vm, const char* who, Value* a, uint32_t& index) {
  Value v = unwrapAttached(a[0]);
  if (!isObj(v, ObjType::Record) || isRecordType(static_cast<Record*>(v.asObject())))
    vm.typeError(who, 0, "record", v);
  auto* r = static_cast<Record*>(v.asObject());
  double i = num(vm, who, a, 1);
  if (!(i >= 0 && i < r->count())) vm.runtimeError(std::string(who) + ": no such field");
  index = static_cast<uint32_t>(i);
  return r;
}

// (%record-get r i): field i of record r (of the symbolic zero, a zero sensitivity:
// the symbolic zero).
Value recordGet(VM& vm, Value* a, int) {
  if (a[0].isZero()) return a[0];
  uint32_t i;
  Record* r = recordAt(vm, "%record-get", a, i);
  return r->fields[i];
}

// (%record-onehot r i g): a record of r's type whose field i is g and whose other fields
// are the symbolic zero: the sensitivity of r from that of its field i.
Value recordOnehot(VM& vm, Value* a, int) {
  uint32_t i;
  Record* r = recordAt(vm, "%record-onehot", a, i);
  Record* s = vm.makeRecord(r->type, r->count());
  for (uint32_t k = 0; k < s->count(); ++k) s->fields[k] = Value::zero();
  s->fields[i] = a[2];
  return Value::object(s);
}

// ---- dicts ---------------------------------------------------------------------

Dict* dictArg(VM& vm, const char* who, Value* a, int i) {
  Value v = unwrapAttached(a[i]);
  if (!isObj(v, ObjType::Dict)) vm.typeError(who, i, "dict", v);
  return static_cast<Dict*>(v.asObject());
}

// A key argument, without its reverse tags (a key is not differentiated).
Value keyArg(VM& vm, const char* who, Value* a, int i) {
  Value k = untagged(unwrapAttached(a[i]));
  if (keyRank(k) < 0) {
    std::string shown = vm.show(k, true);
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    vm.runtimeError(std::string(who) +
                    ": a key must be a number (not NaN), a string or a symbol, got " + shown);
  }
  return k;
}

// (dict k v ...)
Value dict(VM& vm, Value* a, int n) {
  if (n % 2)
    vm.runtimeError("dict: expected keys and values in pairs, got an odd number of arguments (" +
                    std::to_string(n) + ")");
  Dict* d = makeDict(vm);
  for (int i = 0; i < n; i += 2) d = dictSet(vm, d, keyArg(vm, "dict", a, i), a[i + 1]);
  return Value::object(d);
}

Value isDict(VM&, Value* a, int) {
  return Value::boolean(isObj(unwrapAttached(a[0]), ObjType::Dict));
}

// (dict-ref d k [default])
Value dictRef(VM& vm, Value* a, int n) {
  Dict* d = dictArg(vm, "dict-ref", a, 0);
  Value v = dictLookup(d, keyArg(vm, "dict-ref", a, 1));
  if (!v.isUndefined()) return v;
  if (n == 3) return a[2];
  std::string shown = vm.show(untagged(a[1]), true);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  vm.runtimeError("dict-ref: no key " + shown + " in the dict");
}

// (%dict-get d k): dict-ref without a default (of the symbolic zero, a zero
// sensitivity: the symbolic zero).
Value dictGet(VM& vm, Value* a, int) {
  if (a[0].isZero()) return a[0];
  return dictRef(vm, a, 2);
}

// (%dict-has? d k)
Value dictHas(VM& vm, Value* a, int) {
  Dict* d = dictArg(vm, "dict-ref", a, 0);
  return Value::boolean(!dictLookup(d, keyArg(vm, "dict-ref", a, 1)).isUndefined());
}

Value dictSetNative(VM& vm, Value* a, int) {
  Dict* d = dictArg(vm, "dict-set", a, 0);
  return Value::object(dictSet(vm, d, keyArg(vm, "dict-set", a, 1), a[2]));
}

Value dictRemoveNative(VM& vm, Value* a, int) {
  Dict* d = dictArg(vm, "dict-remove", a, 0);
  return Value::object(dictRemove(vm, d, keyArg(vm, "dict-remove", a, 1)));
}

Value dictSize(VM& vm, Value* a, int) {
  return Value::number(dictArg(vm, "dict-size", a, 0)->size());
}

Value dictKeys(VM& vm, Value* a, int) {
  std::vector<Value> keys;
  forEachEntry(dictArg(vm, "dict-keys", a, 0), [&](Value k, Value) { keys.push_back(k); });
  return vm.list(keys.data(), keys.size());
}

Value dictToAlist(VM& vm, Value* a, int) {
  std::vector<std::pair<Value, Value>> entries;
  forEachEntry(dictArg(vm, "dict->alist", a, 0),
               [&](Value k, Value v) { entries.emplace_back(k, v); });
  // Built back to front: no collection runs inside a native.
  Value l = Value::nil();
  for (size_t i = entries.size(); i-- > 0;)
    l = vm.cons(vm.cons(entries[i].first, entries[i].second), l);
  return l;
}

// (%dict-onehot d k g): d's keys with g at key k and the symbolic zero at the others:
// the sensitivity of d from that of its entry k, in O(log n) (the dict of zeros is made
// once per dict and kept on it: Dict::zero).
Value dictOnehot(VM& vm, Value* a, int) {
  Dict* d = dictArg(vm, "%dict-onehot", a, 0);
  if (!d->zero.isObject()) {
    Value z = Value::object(dictZeroSkeleton(vm, d));
    d->zero = z;
    vm.writeBarrier(d, z);
  }
  auto* z = static_cast<Dict*>(d->zero.asObject());
  return Value::object(dictSet(vm, z, keyArg(vm, "%dict-onehot", a, 1), a[2]));
}

// (%dict-with-values d vals): a dict of d's keys whose values are the list vals, in key
// order (the sensitivity of d from that of (dict->alist d)); of the symbolic zero, it.
Value dictWithValuesNative(VM& vm, Value* a, int) {
  if (a[1].isZero()) return a[1];
  Dict* d = dictArg(vm, "%dict-with-values", a, 0);
  std::vector<Value> vals;
  Value l = a[1];
  for (uint32_t i = 0; i < d->size(); ++i) {
    if (isPair(l)) {
      vals.push_back(asPair(l)->car);
      l = asPair(l)->cdr;
    } else {
      vals.push_back(Value::zero());  // a list sensitivity that ends in the symbolic zero
    }
  }
  return Value::object(dictWithValues(vm, d, vals.data()));
}

}  // namespace

void openRecordPrimitives(Registrar& r) {
  VM& vm = r.vm;
  vm.defineNative("%make-record-type", makeRecordType, 2, 2);
  vm.defineNative("%record-constructor", recordConstructor, 3, 3);
  vm.defineNative("%record-predicate", recordPredicate, 2, 2);
  vm.defineNative("%record-accessor-native", recordAccessor, 3, 3);
  vm.defineNative("%record-from", recordFrom, 3, 3);
  vm.defineNative("%record-get", recordGet, 2, 2);
  vm.defineNative("%record-onehot", recordOnehot, 3, 3);
  // The prelude keeps these four as %dict-plain ... and wraps them with custom-vjp.
  vm.defineNative("dict", dict, 0, -1);
  vm.defineNative("dict-ref", dictRef, 2, 3);
  vm.defineNative("dict-set", dictSetNative, 3, 3);
  vm.defineNative("dict-remove", dictRemoveNative, 2, 2);
  vm.defineNative("dict?", isDict, 1, 1);
  vm.defineNative("%dict-has?", dictHas, 2, 2);
  vm.defineNative("%dict-get", dictGet, 2, 2);
  vm.defineNative("dict-size", dictSize, 1, 1);
  vm.defineNative("dict-keys", dictKeys, 1, 1);
  vm.defineNative("dict->alist", dictToAlist, 1, 1);
  vm.defineNative("%dict-onehot", dictOnehot, 3, 3);
  vm.defineNative("%dict-with-values", dictWithValuesNative, 2, 2);
}

}  // namespace dlam::prim
