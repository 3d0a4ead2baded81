// records.h — define-record-type (R7RS 5.5, without modifiers: dlam is pure), expanded
// into definitions that call the record natives (stdlib/src/primitives_records.cpp)
// and the prelude's differentiable wrappers of them.
#pragma once
#include <string>

#include "dlam/syntax.h"

namespace dlam {

// The definitions a (define-record-type ...) form stands for, as one (begin ...) made of
// new nodes in `arena` located at the form:
//   (begin (define TYPE (%make-record-type 'TYPE '(FIELD ...)))
//          (define CTOR (%record-constructor* TYPE 'CTOR '(INDEX ...)))
//          (define PRED (%record-predicate TYPE 'PRED))
//          (define ACCESSOR (%record-accessor TYPE 'ACCESSOR INDEX)) ...)
// A malformed form is a Syntax error at the part that is wrong; a field with a modifier
// is one that says records cannot be changed.
Sx* expandRecordType(SxArena& arena, const Sx* form, const std::string& file);

}  // namespace dlam
