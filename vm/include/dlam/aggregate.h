// aggregate.h — records and dicts as the AD runtime and the library see them: values
// made of parts (a record's fields in order, a dict's values in key order) that *j,
// *j-inverse, zero, plus and %materialize take apart and rebuild like pairs, keeping
// the rest of their shape (a record's type, a dict's keys); and the discrete values,
// which are their own sensitivity.
#pragma once
#include <vector>

#include "dlam/object.h"

namespace dlam {

class VM;

// A record (not a record type) or a dict.
bool isAggregate(Value v);
// The parts of an aggregate, appended to `out` in order.
void partsOf(Value v, std::vector<Value>& out);
// How many parts an aggregate has.
inline uint32_t partCount(Value v) { return v.asObject()->aux; }
// An aggregate like `like` (its record type, or its keys) with the given parts (as many
// as like has). No collection runs while it is built.
Value rebuild(VM& vm, Value like, const Value* parts);
// Whether two aggregates have the same shape at their top: records of one type, or
// dicts of the same keys.
bool sameAggregateShape(Value a, Value b);

// A discrete value: (), a boolean, a character, void, a string, a symbol, an error
// object, a port or the end-of-file object, a record type. It is its own sensitivity
// (and zero), so the sensitivity of a structure keeps its keys.
bool isDiscrete(Value v);
// Whether two discrete values are the same one (strings: the same characters); plus
// of them is that value.
bool sameDiscrete(Value a, Value b);

}  // namespace dlam
