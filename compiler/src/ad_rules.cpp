// ad_rules.cpp — the table of primitives: for each NativeId, how φ applies it and its
// reverse rule (ad_rules.h), with the reverse rules themselves. A reverse rule emits,
// into the backpropagator, the sensitivities of the call's arguments from that of its
// result (g), at the primal call's reverse level (k), on the primal values of the
// arguments (P) and of the result (y).
#include "ad_rules.h"

#include <iterator>

#include "ad_transformer.h"

namespace dlam::ad {

using namespace anf;

// A call of a primitive being reversed, and its rules (members, so that a rule reads
// as the formula it emits).
struct ReverseCall {
  Transformer& t;
  Sens& st;
  const Bind& bd;
  NativeId id;
  size_t argc;
  const Atom* a;  // the first argument (argc >= 1)
  const Atom* b;  // the second (argc >= 2)
  uint16_t k;     // the call's reverse level
  Atom g;         // the result's sensitivity as a value (not made for rules onTerms)

  // (o xs...) at the call's level
  Atom op(NativeId o, std::vector<Atom> xs) {
    xs.insert(xs.begin(), t.prim(o));
    return t.call(st.out, std::move(xs), k);
  }
  // (f xs...), f a helper of the prelude's
  Atom helper(const char* f, std::vector<Atom> xs) {
    xs.insert(xs.begin(), globalAtom(t.vm_.intern(f)));
    return t.call(st.out, std::move(xs));
  }
  Atom K(double c) { return t.constJ(Value::number(c), k); }
  Atom y() { return t.primal(st, localAtom(bd.dst)); }
  Atom P(const Atom& x) { return t.primal(st, x); }

  // ---- no sensitivity flows: comparisons, predicates, rounding, output, zero, ... ----
  void noSensitivity() {}

  // ---- structural, on terms (see Sens) ----
  void cons() {
    TermP s = st.term(bd.dst);
    if (takes(bd.args[1])) addTo(st, bd.args[1], st.head(s));
    if (takes(bd.args[2])) addTo(st, bd.args[2], st.tail(s));
  }
  void list() { spread(st, st.term(bd.dst), bd.args.begin() + 1, bd.args.end()); }
  // car and %scar
  void car() { addTo(st, bd.args[1], st.pairTerm(st.term(bd.dst), nullptr)); }
  // cdr and %scdr
  void cdr() { addTo(st, bd.args[1], st.pairTerm(nullptr, st.term(bd.dst))); }
  // caar ... cdddr
  void cxr() {
    // Innermost access last: cadr = car of cdr, so the sensitivity wraps car then cdr.
    const char* path = cxrPath(id);
    TermP s = st.term(bd.dst);
    for (const char* p = path; *p; ++p)
      s = *p == 'a' ? st.pairTerm(s, nullptr) : st.pairTerm(nullptr, s);
    addTo(st, bd.args[1], s);
  }

  // ---- lists, on values ----
  void listRef() { addTo(st, *a, helper("%sens-at", {g, P(*b)})); }
  void listTail() { addTo(st, *a, helper("%sens-after", {g, P(*b)})); }
  void reverse() { addTo(st, *a, helper("%sens-reverse", {g, t.jAtom(st.out, *a)})); }
  void append() {
    std::vector<Atom> lists;
    for (size_t i = 1; i <= argc; ++i) lists.push_back(t.jAtom(st.out, bd.args[i]));
    Atom parts = helper("%sens-append-split", {g, t.listOf(st.out, lists)});
    spread(st, termOf(parts), bd.args.begin() + 1, bd.args.end());
  }
  void apply() {
    Atom s = t.call(st.out, {localAtom(t.bp_.at(bd.dst)), g});
    if (takes(bd.args[1])) addTo(st, bd.args[1], st.head(termOf(s)));
    size_t nfixed = bd.args.size() - 3;
    Atom parts = helper("%apply-split", {st.materialize(st.tail(termOf(s))),
                                         constAtom(Value::number(double(nfixed))),
                                         t.jAtom(st.out, bd.args.back())});
    spread(st, termOf(parts), bd.args.begin() + 2, bd.args.end());
  }
  // (%check-xbar who xbar ...): the sensitivity is xbar's
  void checkXbar() { addTo(st, bd.args[2], g); }
  // the identity, as a function: %rep-result, %bp-result, %zero-if-zero
  void identity() { addTo(st, *a, g); }
  // (%observed bp w) under *j: code of that level calls the flagged copy as w (it
  // observes the result, ad.cpp), so what reaches the copy is w's sensitivity
  void observed() { addTo(st, *b, g); }
  // the identity, but for the axes of a broadcast that a sensitivity still carried
  // (ad_rules.cpp, arithmetic), which %materialize summed: g goes back over them
  void materialize() {
    addTo(st, *a,
          op(NativeId::Unreduce,
             {ownShape(t.jAtom(st.out, localAtom(bd.dst))), t.jAtom(st.out, *a)}));
  }
  // g, the sensitivity of a result that summed axes away (%materialize, plus, %sens+,
  // %sum-to), summed to the result's own shape y first: g may carry axes of its own (a
  // broadcast of the result in the code differentiated), which may be axes the
  // operands have too, and must not be taken for theirs when g is given back to them
  // (g of shape (3) for a number y summed from an operand of shape (3) is sum(g) for
  // each element, not g). g as it is where it has y's shape, every scalar use.
  Atom ownShape(const Atom& yy) { return op(NativeId::SumTo, {g, yy}); }

  // ---- the AD operators ----
  void starJ() { addTo(st, *a, t.call(st.out, {t.prim(NativeId::StarJInverse), g})); }
  void starJInverse() { addTo(st, *a, t.call(st.out, {t.prim(NativeId::StarJ), g})); }
  // (%attached-image ṽ r̃) is (*j-inverse r̃) (and makes the attached value its inverse).
  void attachedImage() { addTo(st, *b, t.call(st.out, {t.prim(NativeId::StarJ), g})); }
  void attachStarJ() {
    // An attached value computes like its primal: its sensitivity is the
    // primal's, once. (The rep's own sensitivity, which matters only for
    // nested derivatives, flows through the *j-inverse that φ emitted.)
    addTo(st, *a, g);
  }
  // plus adds two sensitivities of one value, of different shapes where one carries a
  // broadcast's axes (summed to the shape both have, vm/src/ad.cpp): each operand gets
  // g back over the axes it had beyond that shape, as with %sens+ (a number's, or one
  // of the sum's own shape, is g as it is; the symbolic zero's, g averaged over the
  // axes it does not have: %sens-back).
  void plus() {
    if (a->kind != Atom::Local && b->kind != Atom::Local) return;
    Atom gy = ownShape(t.jAtom(st.out, localAtom(bd.dst)));
    for (const Atom* x : {a, b})
      if (x->kind == Atom::Local) {
        Atom jx = t.jAtom(st.out, *x);
        addTo(st, *x, back0({op(NativeId::Unreduce, {gy, jx}), jx, jx}));
      }
  }
  // forward mode's constructor and accessors (vm/src/forward.cpp): a bundle's
  // sensitivity is a cobundle of its tag, whose parts go to the primal and tangent
  void bundleAt() {
    Atom tag = P(*a);
    addTo(st, bd.args[2], helper("%co-primal", {tag, g}));
    addTo(st, bd.args[3], helper("%co-tangent", {tag, g}));
  }
  void primalAt() { addTo(st, *b, helper("%cobundle-primal", {P(*a), g, y()})); }
  // (the argument too: where it has no bundle of the tag, its tangent is the constant 0
  // and it gets no sensitivity from it)
  void tangentAt() { addTo(st, *b, helper("%cobundle-tangent", {P(*a), g, y(), P(*b)})); }

  // ---- arithmetic (binary chains after Transformer::expand) ----
  // On arrays these broadcast (NumPy's rules), and the part of g an operand gets keeps
  // the result's shape: a sensitivity may carry the axes its value was broadcast along.
  // Sensitivities are linear, so those axes are summed where a value's shape is needed
  // and known, not here (which would make every scalar rule capture its operands):
  // plus adds with broadcasting, %materialize sums to the value's shape (the gradient,
  // a custom rule's ybar), %vector-onehot to the element's (vm/src/ad.cpp).
  void add() {
    addTo(st, *a, g);
    if (argc == 2) addTo(st, *b, g);
  }
  void sub() {
    if (argc == 1) {
      addTo(st, *a, op(NativeId::Sub, {g}));
    } else if (argc == 2) {
      addTo(st, *a, g);
      if (b->kind == Atom::Local) addTo(st, *b, op(NativeId::Sub, {g}));
    }
  }
  void mul() {
    if (argc == 1) addTo(st, *a, g);
    if (argc == 2 && a->kind == Atom::Local && b->kind == Atom::Local && a->var == b->var) {
      // d(a a) = 2 a da: one product, not two summed
      addTo(st, *a, op(NativeId::Mul, {op(NativeId::Mul, {g, P(*a)}), K(2)}));
      return;
    }
    if (argc == 2) {
      if (a->kind == Atom::Local) addTo(st, *a, op(NativeId::Mul, {g, P(*b)}));
      if (b->kind == Atom::Local) addTo(st, *b, op(NativeId::Mul, {g, P(*a)}));
    }
  }
  void div() {
    if (argc == 1) {
      // d(1/a) = -1/a² = -y²
      Atom yy = y();
      addTo(st, *a, op(NativeId::Sub, {op(NativeId::Mul, {g, op(NativeId::Mul, {yy, yy})})}));
    } else if (argc == 2) {
      Atom bb = P(*b);
      if (a->kind == Atom::Local) addTo(st, *a, op(NativeId::Div, {g, bb}));
      if (b->kind == Atom::Local)
        addTo(st, *b, op(NativeId::Sub, {op(NativeId::Div, {op(NativeId::Mul, {g, y()}), bb})}));
    }
  }
  void expt() {
    Atom aa = P(*a), bb = P(*b);
    // A constant exponent's b - 1 is a constant too: computed here, it stays one
    // when this code is transformed again, and the rule for a variable exponent
    // (a^b log a, NaN for a < 0) never applies to it at the next level.
    // Likewise a^0 has derivative 0 and a^1 derivative 1, with no power left to
    // differentiate again (0 a^-1 would be NaN at a = 0).
    Value bv = b->kind == Atom::Const ? b->value : Value::undefined();
    int tags = 0;
    for (; isObj(bv, ObjType::Rev); ++tags) bv = static_cast<Rev*>(bv.asObject())->primal;
    if (bv.isNumber()) {
      double e = bv.asNumber();
      if (a->kind == Atom::Local && e != 0) {
        Atom da =
            e == 1
                ? g
                : op(NativeId::Mul,
                     {g, op(NativeId::Mul,
                            {bb, op(NativeId::Expt, {aa, t.constJ(Value::number(e - 1), tags)})})});
        addTo(st, *a, da);
      }
      return;
    }
    // A variable exponent: d/da = b a^(b-1) and d/db = a^b log a. Factors that are 0
    // where the product must be are made the symbolic zero there (%zero-if-zero), so
    // the product is exactly 0: d/da at b = 0 is 0 also at a = 0 (not 0 * 0^-1); d/db
    // is 0 at a = 0 for every b (sign(a); not a^b * log 0), as in JAX (PyTorch: for
    // b >= 0), and where a^b underflows to 0 (not -0). The factors keep their
    // derivatives, so mixed second derivatives are right (1/a at b = 0). d/db is NaN
    // for a < 0, where the power is not differentiable in b.
    if (a->kind == Atom::Local)
      addTo(st, *a,
            op(NativeId::Mul,
               {g, op(NativeId::Mul, {op(NativeId::ZeroIfZero, {bb}),
                                      op(NativeId::Expt, {aa, op(NativeId::Sub, {bb, K(1)})})})}));
    if (b->kind == Atom::Local) {
      Atom mask = op(NativeId::Mul, {op(NativeId::ZeroIfZero, {op(NativeId::Sign, {aa})}),
                                     op(NativeId::ZeroIfZero, {y()})});
      addTo(st, *b, op(NativeId::Mul, {g, op(NativeId::Mul, {mask, op(NativeId::Log, {aa})})}));
    }
  }
  void sqrt() { addTo(st, *a, op(NativeId::Div, {g, op(NativeId::Mul, {K(2), y()})})); }
  void exp() { addTo(st, *a, op(NativeId::Mul, {g, y()})); }
  void log() {
    if (argc == 1) {
      addTo(st, *a, op(NativeId::Div, {g, P(*a)}));
    } else {
      Atom aa = P(*a), bb = P(*b);
      Atom lb = op(NativeId::Log, {bb});
      if (a->kind == Atom::Local)
        addTo(st, *a, op(NativeId::Div, {g, op(NativeId::Mul, {aa, lb})}));
      if (b->kind == Atom::Local)
        addTo(st, *b,
              op(NativeId::Sub,
                 {op(NativeId::Div, {op(NativeId::Mul, {g, y()}), op(NativeId::Mul, {bb, lb})})}));
    }
  }
  void log1p() { addTo(st, *a, op(NativeId::Div, {g, op(NativeId::Add, {K(1), P(*a)})})); }
  void expm1() { addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Add, {y(), K(1)})})); }
  void sin() { addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Cos, {P(*a)})})); }
  void cos() {
    addTo(st, *a, op(NativeId::Sub, {op(NativeId::Mul, {g, op(NativeId::Sin, {P(*a)})})}));
  }
  void tan() {
    Atom yy = y();
    addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Add, {K(1), op(NativeId::Mul, {yy, yy})})}));
  }
  // asin and acos
  void asinAcos() {
    Atom aa = P(*a);
    Atom d = op(NativeId::Div,
                {g, op(NativeId::Sqrt, {op(NativeId::Sub, {K(1), op(NativeId::Mul, {aa, aa})})})});
    addTo(st, *a, id == NativeId::Asin ? d : op(NativeId::Sub, {d}));
  }
  void atan() {
    if (argc == 1) {
      Atom aa = P(*a);
      addTo(st, *a, op(NativeId::Div, {g, op(NativeId::Add, {K(1), op(NativeId::Mul, {aa, aa})})}));
    } else {
      // atan2(a, b): d/da = b/(a²+b²), d/db = -a/(a²+b²)
      Atom aa = P(*a), bb = P(*b);
      Atom r2 = op(NativeId::Add, {op(NativeId::Mul, {aa, aa}), op(NativeId::Mul, {bb, bb})});
      if (a->kind == Atom::Local)
        addTo(st, *a, op(NativeId::Div, {op(NativeId::Mul, {g, bb}), r2}));
      if (b->kind == Atom::Local)
        addTo(st, *b, op(NativeId::Sub, {op(NativeId::Div, {op(NativeId::Mul, {g, aa}), r2})}));
    }
  }
  void sinh() { addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Cosh, {P(*a)})})); }
  void cosh() { addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Sinh, {P(*a)})})); }
  void tanh() {
    Atom yy = y();
    addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Sub, {K(1), op(NativeId::Mul, {yy, yy})})}));
  }
  void abs() { addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Sign, {P(*a)})})); }
  // min and max
  void minMax() {
    if (argc == 1) addTo(st, *a, g);
    if (argc != 2) return;
    // The sensitivity goes to the argument that was selected (the first on ties).
    Atom sel = id == NativeId::Max ? op(NativeId::Step, {P(*a), P(*b)})
                                   : op(NativeId::Step, {P(*b), P(*a)});
    addTo(st, *a, op(NativeId::Mul, {g, sel}));
    addTo(st, *b, op(NativeId::Mul, {g, op(NativeId::Sub, {K(1), sel})}));
  }

  // ---- vectors: element i, and the sensitivity of a vector from that of element i
  // (sparse: object.h), whose own sensitivity is element i of its sensitivity ----
  void vectorRef() {
    if (a->kind != Atom::Local) return;
    // The node goes in front of the sensitivity v has so far (%vector-onehot's
    // fourth argument), rather than being made and then copied by plus.
    TermP so = st.term(a->var);
    if (!so || so->pair || a->var == t.flatSelf_) {
      addTo(st, *a, op(NativeId::VectorOnehot, {P(*a), P(*b), g}));
      return;
    }
    st.replace(a->var, op(NativeId::VectorOnehot, {P(*a), P(*b), g, so->atom}));
  }
  // ---- arrays: a broadcast's reverse sums, a sum's reverse broadcasts ----
  // (g summed to the result's own shape first: ownShape)
  void sumTo() {
    if (a->kind == Atom::Local) addTo(st, *a, op(NativeId::BroadcastTo, {ownShape(y()), P(*a)}));
  }
  void broadcastTo() {
    if (a->kind == Atom::Local) addTo(st, *a, op(NativeId::SumTo, {g, P(*a)}));
  }
  // Two sensitivities of one value, summed to the shape they have in common (Sens::merge,
  // %sens+): each operand gets g put back over the axes it had beyond that shape
  // (%unreduce; a number's, or one of the sum's own shape, is g as it is). An operand
  // that is the symbolic zero had no shape to be summed to, so the sum kept the other's
  // axes: it gets g averaged over the axes beyond its own shape (%sens-back), once and
  // not once per element of them. The shape is read from the primals of the values the
  // operand was computed from by elementwise arithmetic (shapeAtoms), which that
  // arithmetic's own rules read anyway, rather than from the operand's, which nothing
  // else may need kept.
  void sensAdd() {
    if (a->kind != Atom::Local && b->kind != Atom::Local) return;
    Atom gy = ownShape(y());
    if (a->kind == Atom::Local) addTo(st, *a, unreduced(*a, gy));
    if (b->kind == Atom::Local) {
      Atom gb = unreduced(*b, gy);
      addTo(st, *b, id == NativeId::SensSub ? op(NativeId::Sub, {gb}) : gb);
    }
  }
  // (%sens-back xs...), at level 0 whatever the call's: it reads its values through
  // their reverse tags, so it needs no lifting
  Atom back0(std::vector<Atom> xs) {
    xs.insert(xs.begin(), t.prim(NativeId::SensBack));
    return t.call(st.out, std::move(xs));
  }
  // gy given back to the operand x: over the axes of the values x was computed from
  // (%unreduce), then through %sens-back, which needs to know whether x is the symbolic
  // zero: where x is one of the values or their product (a product with the symbolic
  // zero is the symbolic zero, and a sum with it is not), the values say; else x's
  // primal is kept to say.
  Atom unreduced(const Atom& x, const Atom& gy) {
    std::vector<Atom> from;
    bool product = shapeAtoms(x, from);
    Atom r = gy;
    std::vector<Atom> back{Atom(), product ? constAtom(Value::boolean(true)) : P(x)};
    for (const Atom& f : from) {
      r = op(NativeId::Unreduce, {r, P(f)});
      back.push_back(P(f));
    }
    back[0] = r;
    return back0(std::move(back));
  }
  // Values whose shapes broadcast together to x's: x, or where x is the result of
  // elementwise arithmetic in the code being transformed (which broadcasts its operands
  // and keeps their shape), its operands', recursively (number constants have none).
  // A few at most; past that, x itself. Whether x is x itself or their product (the
  // arithmetic on the way only *, *j and *j-inverse).
  bool shapeAtoms(const Atom& x, std::vector<Atom>& out) {
    bool product = true;
    constexpr size_t kMax = 4;
    std::vector<Atom> work{x};
    std::vector<Atom> found;
    size_t steps = 0;
    while (!work.empty()) {
      Atom v = work.back();
      work.pop_back();
      if (v.kind == Atom::Const && v.value.isNumber()) continue;
      auto it = v.kind == Atom::Local ? t.def_.find(v.var) : t.def_.end();
      const Bind* d = it == t.def_.end() ? nullptr : it->second;
      NativeId did = d && d->kind == Bind::Call ? builtinOf(t.vm_, d->args[0]) : NativeId::None;
      bool elementwise = did == NativeId::Add || did == NativeId::Sub || did == NativeId::Mul ||
                         did == NativeId::Div || did == NativeId::StarJ ||
                         did == NativeId::StarJInverse;
      if (d && d->kind == Bind::Copy) {
        work.push_back(d->atom);
      } else if (elementwise && ++steps <= 16) {
        product = product &&
                  (did == NativeId::Mul || did == NativeId::StarJ || did == NativeId::StarJInverse);
        for (size_t i = 1; i < d->args.size(); ++i) work.push_back(d->args[i]);
      } else if (std::none_of(found.begin(), found.end(), [&](const Atom& f) {
                   return f.kind == v.kind && f.var == v.var && f.kind == Atom::Local;
                 })) {
        found.push_back(v);
      }
      if (found.size() > kMax || steps > 16) {
        out = {x};
        return true;
      }
    }
    out = std::move(found);
    return product;
  }
  // The element's sensitivity y may carry the axes it was broadcast along, which
  // %vector-onehot summed: its own sensitivity goes back over them (%unreduce; a
  // number's, every one in scalar code, is the element of g as it is).
  void vectorOnehot() {
    if (argc >= 3 && bd.args[3].kind == Atom::Local)
      addTo(st, bd.args[3],
            op(NativeId::Unreduce, {op(NativeId::VectorRef, {g, P(*b)}), P(bd.args[3])}));
    // The sensitivity the node went in front of: the onehot adds it as plus does, so it
    // gets g back over the axes it had beyond the result's shape, as plus's operands do
    // (a matrix's, from a vector broadcast against it: given g as it was, its rule
    // summed a vector where a matrix was summed, half of it, or failed on the shape).
    if (argc == 4) addTo(st, bd.args[4], op(NativeId::Unreduce, {ownShape(y()), P(bd.args[4])}));
  }
};

// A numeric primitive applied to bundles (VM::fwdApply, forward mode): p the primals of
// its arguments, t their tangents (the symbolic zero where an argument has none), y the
// primal of the result. A tangent rule sets out, the result's tangent, computed with
// the primitives themselves (VM::arith, VM::callPrimitive), so it is differentiated
// again at lower tags; out left undefined: the result has no tangent.
struct TangentCall {
  VM& vm;
  NativeId id;
  const Value* p;
  const Value* t;
  int n;
  Value y;
  Value out = Value::undefined();

  Value add(Value a, Value b) { return vm.arith(NativeId::Add, a, b); }
  Value sub(Value a, Value b) { return vm.arith(NativeId::Sub, a, b); }
  Value mul(Value a, Value b) { return vm.arith(NativeId::Mul, a, b); }
  Value div(Value a, Value b) { return vm.arith(NativeId::Div, a, b); }
  Value f(NativeId o, Value a) { return vm.callPrimitive(vm.builtin(o), &a, 1); }
  Value neg(Value a) { return f(NativeId::Sub, a); }
  static Value K(double c) { return Value::number(c); }

  // a boolean, a rounding or a step: no tangent
  void none() {}
  // never called: a bundle of a pair is a pair of bundles, so the data primitives and
  // the AD operators work on bundles as they are (vm/src/forward.cpp)
  void structural() {}
  void identity() {
    out = t[0];
  }  // %zero-if-zero: the value masked, its tangent kept (as the reverse rule)

  // The tangent of a + or - that broadcasts: where one operand has no tangent (the
  // symbolic zero), the other's has that operand's shape, which may be smaller than the
  // result's; it is repeated to the result's shape (a sum of it must count each copy).
  // (Only a tangent that broadcasts to it and is smaller: one that carries more axes,
  // a sensitivity's under forward over reverse, is left as it is.)
  Value fitted(Value d) {
    if (!(t[0].isZero() || t[1].isZero()) || d.isZero()) return d;
    Value yp = fwdPrimal(y), dp = fwdPrimal(d);
    if (!isObj(yp, ObjType::Vector) || !(dp.isNumber() || isObj(dp, ObjType::Vector))) return d;
    if (dp.isNumber()
            ? false
            : !grows(static_cast<Vector*>(dp.asObject()), static_cast<Vector*>(yp.asObject())))
      return d;
    Value args[2] = {d, y};
    return vm.callPrimitive(vm.builtin(NativeId::BroadcastTo), args, 2);
  }
  // whether dense array a broadcasts to b's shape and is not of that shape
  static bool grows(const Vector* a, const Vector* b) {
    if (isSparse(a) || isSparse(b) || a->rank > b->rank) return false;
    const uint32_t *sa = arrayShape(a), *sb = arrayShape(b);
    bool same = a->rank == b->rank;
    for (uint32_t i = 1; i <= a->rank; ++i) {
      uint32_t x = sa[a->rank - i], z = sb[b->rank - i];
      if (x != z && x != 1) return false;
      same = same && x == z;
    }
    return !same;
  }
  void add() { out = n == 1 ? t[0] : fitted(add(t[0], t[1])); }
  // %sens+ and %sens-: %sens+ sums an operand that carries the axes of a broadcast to
  // the shape the other has, so where only one operand has a tangent, that tangent (of
  // its operand's shape) is summed to the result's shape as its primal was: the
  // sensitivity of a number added to one broadcast to #(1 2 3), forward over reverse.
  void sensAdd() {
    out = vm.arith(id, t[0], t[1]);
    if (t[0].isZero() == t[1].isZero()) return;  // both: summed to their common shape
    Value yp = untagged(fwdPrimal(y)), dp = untagged(fwdPrimal(out));
    if (!isObj(dp, ObjType::Vector) || !(yp.isNumber() || isObj(yp, ObjType::Vector))) return;
    if (isObj(yp, ObjType::Vector) &&
        sameShape(static_cast<Vector*>(yp.asObject()), static_cast<Vector*>(dp.asObject())))
      return;
    Value args[2] = {out, y};
    out = vm.callPrimitive(vm.builtin(NativeId::SumTo), args, 2);
  }
  void sub() { out = n == 1 ? neg(t[0]) : fitted(sub(t[0], t[1])); }
  void mul() { out = n == 1 ? t[0] : add(mul(t[0], p[1]), mul(p[0], t[1])); }
  void div() {
    // d(1/a) = -a'/a² = -a' y², d(a/b) = (a' - y b')/b
    out = n == 1 ? neg(mul(t[0], mul(y, y))) : div(sub(t[0], mul(y, t[1])), p[1]);
  }
  void expt() {
    // d(a^b) = b a^(b-1) a' + a^b log(a) b' (each term only where its tangent is), with
    // the reverse rule's care at the edges: a number exponent 0 gives no tangent and 1
    // the tangent a', with no power left to differentiate again (0 a^-1 would be NaN
    // at a = 0); %zero-if-zero makes the factor b an exact zero where b is 0, and the
    // b' term is 0 where a^b is 0 or a <= 0 (log a is -inf or NaN there).
    Value da = Value::zero(), db = Value::zero();
    if (!t[0].isZero()) {
      Value b = p[1];
      if (b.isNumber() && b.asNumber() == 1) {
        da = t[0];
      } else if (!b.isNumber() || b.asNumber() != 0) {
        Value args[2] = {p[0], sub(b, K(1))};
        da = mul(t[0], mul(f(NativeId::ZeroIfZero, b),
                           vm.callPrimitive(vm.builtin(NativeId::Expt), args, 2)));
      }
    }
    if (!t[1].isZero()) {
      Value mask =
          mul(f(NativeId::ZeroIfZero, f(NativeId::Sign, p[0])), f(NativeId::ZeroIfZero, y));
      db = mul(t[1], mul(mask, f(NativeId::Log, p[0])));
    }
    out = add(da, db);
  }
  void sqrt() { out = div(t[0], mul(K(2), y)); }
  void exp() { out = mul(t[0], y); }
  void log() {
    if (n == 1) {
      out = div(t[0], p[0]);
      return;
    }
    // log_b a = log a / log b: (a'/a - y b'/b) / log b
    Value lb = f(NativeId::Log, p[1]);
    out = div(sub(div(t[0], p[0]), mul(y, div(t[1], p[1]))), lb);
  }
  void log1p() { out = div(t[0], add(K(1), p[0])); }
  void expm1() { out = mul(t[0], add(y, K(1))); }
  void sin() { out = mul(t[0], f(NativeId::Cos, p[0])); }
  void cos() { out = neg(mul(t[0], f(NativeId::Sin, p[0]))); }
  void tan() { out = mul(t[0], add(K(1), mul(y, y))); }
  void asinAcos() {
    Value d = div(t[0], f(NativeId::Sqrt, sub(K(1), mul(p[0], p[0]))));
    out = id == NativeId::Asin ? d : neg(d);
  }
  void atan() {
    if (n == 1) {
      out = div(t[0], add(K(1), mul(p[0], p[0])));
      return;
    }
    // atan2(a, b): (b a' - a b') / (a² + b²)
    out = div(sub(mul(p[1], t[0]), mul(p[0], t[1])), add(mul(p[0], p[0]), mul(p[1], p[1])));
  }
  void sinh() { out = mul(t[0], f(NativeId::Cosh, p[0])); }
  void cosh() { out = mul(t[0], f(NativeId::Sinh, p[0])); }
  void tanh() { out = mul(t[0], sub(K(1), mul(y, y))); }
  void abs() { out = mul(t[0], f(NativeId::Sign, p[0])); }
  // a bundle of a vector (tagged as a whole): element i of its tangent
  void vectorRef() {
    if (t[0].isZero()) return;
    Value args[2] = {t[0], p[1]};
    out = vm.callPrimitive(vm.builtin(NativeId::VectorRef), args, 2);
  }
  // linear in the first argument, the second giving a shape (%sum-to, %broadcast-to):
  // the same primitive applied to the tangent
  void linear() {
    if (t[0].isZero()) return;
    std::vector<Value> args(p, p + n);
    args[0] = t[0];
    out = vm.callPrimitive(vm.builtin(id), args.data(), n);
  }
  // min and max: the tangent of the argument selected (the first on ties), as the
  // reverse rule sends the sensitivity; on arrays, elementwise by the same step mask
  void minMax() {
    if (n == 2 && (isObj(p[0], ObjType::Vector) || isObj(p[1], ObjType::Vector))) {
      Value ab[2] = {p[0], p[1]}, ba[2] = {p[1], p[0]};
      Value sel = vm.callPrimitive(vm.builtin(NativeId::Step), id == NativeId::Max ? ab : ba, 2);
      out = add(mul(t[0], sel), mul(t[1], sub(K(1), sel)));
      return;
    }
    for (int i = 0; i < n; ++i) {
      Value args[2] = {p[i], y};
      if (vm.callPrimitive(vm.builtin(NativeId::NumEq), args, 2).isTruthy()) {
        out = t[i];
        return;
      }
    }
  }
};

namespace {

using R = ReverseCall;
using T = TangentCall;
constexpr Forward kLifted = Forward::Lifted, kPrimals = Forward::OnPrimals,
                  kImages = Forward::OnImages, kOwn = Forward::Own;

// The rows, in the order of NativeId.
constexpr PrimitiveRules kRules[] = {
    {NativeId::None, kLifted, &R::noSensitivity, false,
     &T::structural},  // a host's native (with a vjp: rhoCall)
    // arithmetic
    {NativeId::Add, kPrimals, &R::add, false, &T::add},
    {NativeId::Sub, kPrimals, &R::sub, false, &T::sub},
    {NativeId::Mul, kPrimals, &R::mul, false, &T::mul},
    {NativeId::Div, kPrimals, &R::div, false, &T::div},
    {NativeId::Expt, kPrimals, &R::expt, false, &T::expt},
    {NativeId::Sqrt, kPrimals, &R::sqrt, false, &T::sqrt},
    {NativeId::Exp, kPrimals, &R::exp, false, &T::exp},
    {NativeId::Log, kPrimals, &R::log, false, &T::log},
    {NativeId::Log1p, kPrimals, &R::log1p, false, &T::log1p},
    {NativeId::Expm1, kPrimals, &R::expm1, false, &T::expm1},
    {NativeId::Sin, kPrimals, &R::sin, false, &T::sin},
    {NativeId::Cos, kPrimals, &R::cos, false, &T::cos},
    {NativeId::Tan, kPrimals, &R::tan, false, &T::tan},
    {NativeId::Asin, kPrimals, &R::asinAcos, false, &T::asinAcos},
    {NativeId::Acos, kPrimals, &R::asinAcos, false, &T::asinAcos},
    {NativeId::Atan, kPrimals, &R::atan, false, &T::atan},
    {NativeId::Sinh, kPrimals, &R::sinh, false, &T::sinh},
    {NativeId::Cosh, kPrimals, &R::cosh, false, &T::cosh},
    {NativeId::Tanh, kPrimals, &R::tanh, false, &T::tanh},
    {NativeId::Abs, kPrimals, &R::abs, false, &T::abs},
    {NativeId::Min, kPrimals, &R::minMax, false, &T::minMax},
    {NativeId::Max, kPrimals, &R::minMax, false, &T::minMax},
    {NativeId::Floor, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::Ceiling, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::Round, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::Truncate, kPrimals, &R::noSensitivity, false, &T::none},
    // comparisons and numeric predicates
    {NativeId::NumEq, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::Lt, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::Gt, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::Le, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::Ge, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::ZeroP, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::PositiveP, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::NegativeP, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::NanP, kPrimals, &R::noSensitivity, false, &T::none},
    // data
    {NativeId::Cons, kImages, &R::cons, true, &T::structural},
    {NativeId::Car, kImages, &R::car, true, &T::structural},
    {NativeId::Cdr, kImages, &R::cdr, true, &T::structural},
    {NativeId::Caar, kImages, &R::cxr, true, &T::structural},
    {NativeId::Cadr, kImages, &R::cxr, true, &T::structural},
    {NativeId::Cdar, kImages, &R::cxr, true, &T::structural},
    {NativeId::Cddr, kImages, &R::cxr, true, &T::structural},
    {NativeId::Caddr, kImages, &R::cxr, true, &T::structural},
    {NativeId::Cdddr, kImages, &R::cxr, true, &T::structural},
    {NativeId::List, kImages, &R::list, true, &T::structural},
    {NativeId::Length, kLifted, &R::noSensitivity, false, &T::structural},
    {NativeId::Append, kImages, &R::append, false, &T::structural},
    {NativeId::Reverse, kImages, &R::reverse, false, &T::structural},
    {NativeId::ListRef, kImages, &R::listRef, false, &T::structural},
    {NativeId::ListTail, kImages, &R::listTail, false, &T::structural},
    {NativeId::NullP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::PairP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::NumberP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::BooleanP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::ProcedureP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::StringP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::SymbolP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::Not, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::EqP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::EqualP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::EqvP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::ListP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::NumberToString, kLifted, &R::noSensitivity, false, &T::structural},
    {NativeId::StringAppend, kLifted, &R::noSensitivity, false, &T::structural},
    {NativeId::Iota, kLifted, &R::noSensitivity, false, &T::structural},
    // vectors
    {NativeId::VectorRef, kPrimals, &R::vectorRef, false, &T::vectorRef},
    {NativeId::VectorLength, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::VectorOnehot, kPrimals, &R::vectorOnehot, false, &T::structural},
    // control
    {NativeId::Apply, kOwn, &R::apply, false, &T::structural},
    // output and errors
    {NativeId::Display, kLifted, &R::noSensitivity, false, &T::structural},
    {NativeId::Write, kLifted, &R::noSensitivity, false, &T::structural},
    {NativeId::Newline, kLifted, &R::noSensitivity, false, &T::structural},
    {NativeId::Print, kLifted, &R::noSensitivity, false, &T::structural},
    {NativeId::Error, kLifted, &R::noSensitivity, false, &T::structural},
    {NativeId::Assert, kLifted, &R::noSensitivity, false, &T::structural},
    // AD
    {NativeId::StarJ, kImages, &R::starJ, false, &T::structural},
    {NativeId::StarJInverse, kImages, &R::starJInverse, false, &T::structural},
    {NativeId::Zero, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::Plus, kImages, &R::plus, false, &T::structural},
    {NativeId::AttachStarJ, kOwn, &R::attachStarJ, false, &T::structural},
    // (attach-j* v̀ rèp) on images: under *j the value computes as v̀, and its sensitivity is v's
    {NativeId::AttachJStar, kImages, &R::attachStarJ, false, &T::structural},
    {NativeId::BundleAt, kPrimals, &R::bundleAt, false, &T::structural},
    {NativeId::PrimalAt, kPrimals, &R::primalAt, false, &T::structural},
    {NativeId::TangentAt, kPrimals, &R::tangentAt, false, &T::structural},
    // internal helpers of transformed code
    {NativeId::SZeroP, kImages, &R::noSensitivity, false, &T::structural},
    {NativeId::SCar, kImages, &R::car, true, &T::structural},
    {NativeId::SCdr, kImages, &R::cdr, true, &T::structural},
    {NativeId::Sign, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::Step, kPrimals, &R::noSensitivity, false, &T::none},
    {NativeId::ZeroIfZero, kPrimals, &R::identity, false, &T::identity},
    {NativeId::Materialize, kImages, &R::materialize, false, &T::structural},
    {NativeId::Observed, kImages, &R::observed, false, &T::structural},
    {NativeId::RepResult, kImages, &R::identity, false, &T::structural},
    {NativeId::BpResult, kImages, &R::identity, false, &T::structural},
    {NativeId::CheckXbar, kImages, &R::checkXbar, false, &T::structural},
    {NativeId::SumTo, kPrimals, &R::sumTo, false, &T::linear},
    {NativeId::BroadcastTo, kPrimals, &R::broadcastTo, false, &T::linear},
    {NativeId::SensAdd, kPrimals, &R::sensAdd, false, &T::sensAdd},
    {NativeId::SensSub, kPrimals, &R::sensAdd, false, &T::sensAdd},
    {NativeId::AttachedImage, kImages, &R::attachedImage, false, &T::structural},
    {NativeId::Unreduce, kPrimals, &R::identity, false, &T::linear},
    // tag-transparent (it reads its values through their reverse tags): on the images
    {NativeId::SensBack, kImages, &R::identity, false, &T::linear},
    // its argument is a global or a constant, which takes no sensitivity
    {NativeId::StarJConstant, kImages, &R::noSensitivity, false, &T::structural},
    // custom-vjp*'s mark on its attached value (a program's rule, which forward mode
    // transposes); on images the value as it is
    {NativeId::UserRep, kImages, &R::identity, false, &T::structural},
};

constexpr bool everyRowInPlace() {
  for (size_t i = 0; i < std::size(kRules); ++i)
    if (kRules[i].id != static_cast<NativeId>(i) || !kRules[i].reverse || !kRules[i].tangent)
      return false;
  return true;
}
static_assert(std::size(kRules) == static_cast<size_t>(NativeId::Count),
              "ad_rules.cpp: every NativeId needs its row in kRules");
// Under the sanitizers GCC does not evaluate the comparison of a member-function pointer
// with null as a constant; every other build checks it.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
static_assert(everyRowInPlace(),
              "ad_rules.cpp: kRules must list the NativeIds in the enum's order, each with a "
              "reverse rule (noSensitivity where none flows) and a tangent rule (none where "
              "the result has no tangent, structural where bundles pass through)");
#endif

}  // namespace

const PrimitiveRules& rulesOf(NativeId id) {
  auto i = static_cast<size_t>(id);
  return kRules[i < std::size(kRules) ? i : 0];
}

Value tangentOf(VM& vm, NativeId id, const Value* p, const Value* t, int n, Value y) {
  const PrimitiveRules& rules = rulesOf(id);
  if (id == NativeId::None || !rules.tangent)
    vm.runtimeError("forward mode: no tangent rule for this primitive");
  TangentCall c{vm, id, p, t, n, y};
  (c.*rules.tangent)();
  return c.out;
}

void reverseCall(Transformer& t, const Bind& bd, Sens& st, const PrimitiveRules& rules) {
  size_t argc = bd.args.size() - 1;
  ReverseCall c{t,
                st,
                bd,
                rules.id,
                argc,
                argc >= 1 ? &bd.args[1] : nullptr,
                argc >= 2 ? &bd.args[2] : nullptr,
                bd.level,
                rules.onTerms ? Atom{} : st.get(bd.dst)};
  (c.*rules.reverse)();
}

}  // namespace dlam::ad
