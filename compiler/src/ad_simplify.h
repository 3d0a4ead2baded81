// ad_simplify.h — algebra on the backpropagators the reverse transform makes.
#pragma once
#include "anf.h"

namespace dlam {

// Folds the negations in a backpropagator's straight-line body into the products and
// sums that use them, and *j of a *j-inverse into its operand (see ad_simplify.cpp).
void simplifyBackpropagator(const VM& vm, anf::Block* body);

}  // namespace dlam
