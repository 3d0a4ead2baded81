// aggregate.cpp — records and dicts taken apart into their parts and rebuilt
// (dlam/aggregate.h), and the discrete values, their own sensitivities.
#include "dlam/aggregate.h"

#include "dlam/dict.h"
#include "dlam/vm.h"

namespace dlam {

// A record (not a record type) or a dict: what *j, *j-inverse, zero and plus take apart
// and rebuild like pairs, part by part (a record's fields, a dict's values in key order).
bool isAggregate(Value v) {
  if (!v.isObject()) return false;
  Obj* o = v.asObject();
  return o->type == ObjType::Dict ||
         (o->type == ObjType::Record && !isRecordType(static_cast<Record*>(o)));
}

// The parts of an aggregate, appended to `out` in order.
void partsOf(Value v, std::vector<Value>& out) {
  Obj* o = v.asObject();
  if (o->type == ObjType::Record) {
    auto* r = static_cast<Record*>(o);
    out.insert(out.end(), r->fields, r->fields + r->count());
  } else {
    forEachEntry(static_cast<Dict*>(o), [&](Value, Value x) { out.push_back(x); });
  }
}

// An aggregate like `like` (its record type, or its keys) with the given parts.
Value rebuild(VM& vm, Value like, const Value* parts) {
  Obj* o = like.asObject();
  if (o->type == ObjType::Record) {
    auto* r = static_cast<Record*>(o);
    Record* n = vm.makeRecord(r->type, r->count());
    for (uint32_t i = 0; i < r->count(); ++i) n->fields[i] = parts[i];
    return Value::object(n);
  }
  return Value::object(dictWithValues(vm, static_cast<Dict*>(o), parts));
}

// Whether a and b, two aggregates, have the same shape at their top: records of one
// type, or dicts of the same keys.
bool sameAggregateShape(Value a, Value b) {
  Obj *x = a.asObject(), *y = b.asObject();
  if (x->type != y->type) return false;
  if (x->type == ObjType::Record)
    return static_cast<Record*>(x)->type == static_cast<Record*>(y)->type;
  return sameKeys(static_cast<Dict*>(x), static_cast<Dict*>(y), [](Value, Value) {});
}

bool isDiscrete(Value v) {
  if (v.isNumber() || v.isZero() || v.isUndefined()) return false;
  if (!v.isObject()) return true;  // (), booleans, characters, void
  Obj* o = v.asObject();
  switch (o->type) {
    case ObjType::String:
    case ObjType::Symbol:
    case ObjType::ErrorObject:
    case ObjType::Port:
      return true;
    case ObjType::Record:
      return isRecordType(static_cast<Record*>(o));
    default:
      return false;
  }
}

bool sameDiscrete(Value a, Value b) {
  if (a == b) return true;
  return isObj(a, ObjType::String) && isObj(b, ObjType::String) &&
         static_cast<String*>(a.asObject())->view() == static_cast<String*>(b.asObject())->view();
}

}  // namespace dlam
