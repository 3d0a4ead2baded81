// ad_rules.h — what the transforms know of each primitive: one row per NativeId.
//
// A row says how the forward sweep φ of the reverse transform applies the primitive
// (Forward), its reverse rule (what ρ gives its arguments from the sensitivity of its
// result), and its tangent rule, the slot forward mode fills. The table in
// ad_rules.cpp has a row for every NativeId, in the enum's order, checked at compile
// time: a primitive added to builtins.h without its row does not build, and a
// primitive without a rule says so in its row (noSensitivity, or an empty tangent).
#pragma once
#include "dlam/builtins.h"
#include "dlam/vm.h"

namespace dlam::anf {
struct Bind;
}

namespace dlam::ad {

class Transformer;
struct Sens;

// How φ applies a primitive.
enum class Forward : uint8_t {
  Lifted,     // to the images one reverse level deeper (the call's level + 1)
  OnPrimals,  // a numeric primitive: to primal values at the call's level (Transformer::Uses)
  OnImages,   // as it is, at level 0, to the images: *j commutes with it structurally (a
              // pair's image is a pair of images, () and booleans are their own images, a
              // tagged number is still a number), or it is an AD operator of the images
  Own,        // a case of its own in Transformer::phiCall (attach-*j, apply)
};

// A call being reversed, with the reverse rules as its members (ad_rules.cpp).
struct ReverseCall;
using ReverseRule = void (ReverseCall::*)();

// A call being differentiated in forward mode: forward mode defines it, with the
// tangent rules as its members.
struct TangentCall;
using TangentRule = void (TangentCall::*)();

struct PrimitiveRules {
  NativeId id;
  Forward forward;
  // ρ: gives the arguments of a call their sensitivities, from that of its result.
  ReverseRule reverse;
  // The rule reads the result's sensitivity as a term (pairs kept unmade: Sens), not
  // as a value: the structural accessors and constructors.
  bool onTerms = false;
  // Forward mode: the tangent of the result from the arguments' primals and tangents,
  // applied at run time to bundles (VM::fwdApply through tangentOf).
  TangentRule tangent = nullptr;
};

// The tangent of a numeric primitive's result (VM::tangentRule): its row's rule.
Value tangentOf(VM& vm, NativeId id, const Value* p, const Value* t, int n, Value y);

// The row of a primitive (NativeId::None: a native of the host's).
const PrimitiveRules& rulesOf(NativeId id);

// ρ of a call of a primitive whose result has a sensitivity: applies its reverse rule.
void reverseCall(Transformer& t, const anf::Bind& bd, Sens& st, const PrimitiveRules& rules);

}  // namespace dlam::ad
