// ad_simplify.h — algebra on the backpropagators the reverse transform makes.
#pragma once
#include "anf.h"

namespace dlam {

// Folds the negations in a backpropagator's straight-line body into the products and
// sums that use them, *j of a *j-inverse into its operand, and sums a tagged number
// with a number under one tag (see ad_simplify.cpp); new variables come from `module`.
void simplifyBackpropagator(const VM& vm, anf::Module& module, anf::Block* body);

}  // namespace dlam
