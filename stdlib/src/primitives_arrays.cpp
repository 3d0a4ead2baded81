// primitives_arrays.cpp — n-dimensional arrays of doubles (docs/arrays.md):
// the elementwise kernels with NumPy broadcasting that + - * / expt min max and the
// unary numeric primitives use when given arrays, and the natives that compute
// the array procedures (dot through CBLAS, transpose, outer, reductions, slicing,
// gather/scatter, concat, stack, reshape, making and reading arrays). Large products
// go to OpenBLAS's dgemm (loaded when first needed: blas.cpp), small ones stay a loop.
//
// Every native here computes a primal value with one loop over contiguous memory and
// allocates its result and nothing per element. Derivatives: the elementwise
// primitives are differentiated by their rules in the compiler's table (ad_rules.cpp),
// which sum a sensitivity back to an operand's shape with %sum-to (a broadcast's
// reverse) and whose reverse is %broadcast-to; the other procedures are wrapped in the
// prelude with custom-vjp, their pullbacks written with the same wrapped procedures so
// that they differentiate again. A vector is the rank-1 array; a number plays the part
// of a rank-0 array (a full reduction gives a number).
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "primitives.h"

namespace dlam::prim {

bool isArray(Value v) { return isObj(v, ObjType::Vector); }

namespace {

using Shape = std::vector<uint32_t>;

Vector* asArray(Value v) { return static_cast<Vector*>(v.asObject()); }

// The array argument i (any rank), dense: a sparse vector sensitivity becomes dense.
Vector* arrayArg(VM& vm, const char* who, Value* a, int i) {
  Value v = unwrapAttached(a[i]);
  if (!isArray(v)) vm.typeError(who, i, "array", a[i]);
  Vector* x = asArray(v);
  if (isSparse(x)) [[unlikely]] {
    x = vm.dense(x);
    a[i] = Value::object(x);
  }
  return x;
}

// A number argument where an array is taken: a number plays the rank-0 array (its one
// element), so that what holds of arrays of any rank holds of it too.
bool rank0Arg(Value* a, int i) { return unwrapAttached(a[i]).isNumber(); }
double rank0Value(Value* a, int i) { return unwrapAttached(a[i]).asNumber(); }

Shape shapeOf(const Vector* v) {
  // (A sparse vector sensitivity, met before it is made dense, has its length's shape.)
  if (isSparse(v)) return Shape{vectorLength(v)};
  const uint32_t* s = arrayShape(v);
  return Shape(s, s + v->rank);
}

std::string shapeString(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(s[i]);
  }
  return out + ")";
}

// The shape of an operand of an elementwise operation: () for a number.
Shape operandShape(Value v) { return isArray(v) ? shapeOf(asArray(v)) : Shape{}; }

Vector* makeArray(VM& vm, const Shape& s) {
  if (s.empty()) vm.runtimeError("internal error: an array of rank 0");
  return vm.makeArray(static_cast<uint32_t>(s.size()), s.data());
}

// A number or an array result: an array of rank 0 is its one element.
Value arrayOrNumber(VM& vm, const Shape& s, const double* items) {
  if (s.empty()) return numberResult(items[0]);
  Vector* r = makeArray(vm, s);
  std::copy(items, items + r->aux, r->items);
  return Value::object(r);
}

// A non-negative integer argument below `limit`, or an error naming who and what.
uint32_t integerArg(VM& vm, const char* who, Value* a, int i, uint64_t limit, const char* what) {
  double d = num(vm, who, a, i);
  if (!(d >= 0 && d < double(limit) && d == std::floor(d)))
    vm.runtimeError(std::string(who) + ": " + what + " " + vm.show(a[i], true) +
                    " is out of range (0 to " + std::to_string(limit == 0 ? 0 : limit - 1) + ")");
  return static_cast<uint32_t>(d);
}

// A shape given as a list of sizes (a number n: the list (n)).
Shape shapeArg(VM& vm, const char* who, Value* a, int i) {
  Shape s;
  Value l = untagged(unwrapAttached(a[i]));
  if (l.isNumber()) l = vm.cons(l, Value::nil());
  uint64_t n = 1;
  for (; isPair(l); l = asPair(l)->cdr) {
    Value x = untagged(asPair(l)->car);
    double d = x.isNumber() ? x.asNumber() : -1;
    if (!(d >= 0 && d <= double(VM::kMaxArrayElements) && d == std::floor(d)))
      vm.runtimeError(std::string(who) + ": expected a shape (a list of sizes), got " +
                      vm.show(a[i], true));
    s.push_back(static_cast<uint32_t>(d));
    n *= s.back();
    if (n > VM::kMaxArrayElements)
      vm.runtimeError(std::string(who) + ": the shape " + vm.show(a[i], true) +
                      " has more than 2^30 elements");
  }
  if (!l.isNil() || s.empty())
    vm.runtimeError(std::string(who) + ": expected a shape (a non-empty list of sizes), got " +
                    vm.show(a[i], true));
  return s;
}

// An axis argument (optional: position i past nargs gives `dflt`) of an array of rank r.
uint32_t axisArg(VM& vm, const char* who, Value* a, int nargs, int i, uint32_t rank,
                 uint32_t dflt = 0) {
  if (i >= nargs) return dflt;
  if (rank == 0)
    vm.runtimeError(std::string(who) + ": a number (an array of rank 0) has no axis, got " +
                    vm.show(a[i], true));
  return integerArg(vm, who, a, i, rank, "axis");
}

// ---- elementwise, with broadcasting --------------------------------------------------

enum class Bin { Add, Sub, Mul, Div, Pow, Min, Max, Atan2, LogBase, Step };

const char* binName(Bin op) {
  switch (op) {
    case Bin::Add:
      return "+";
    case Bin::Sub:
      return "-";
    case Bin::Mul:
      return "*";
    case Bin::Div:
      return "/";
    case Bin::Pow:
      return "expt";
    case Bin::Min:
      return "min";
    case Bin::Max:
      return "max";
    case Bin::Atan2:
      return "atan";
    case Bin::LogBase:
      return "log";
    case Bin::Step:
      return "%step";
  }
  return "?";
}

// The loop of one operation over the result's elements, given each operand's stride
// along each axis of the result (0 where it is broadcast). The innermost axis runs as a
// plain loop (the contiguous and the scalar cases are separate loops the compiler
// vectorises); the outer axes advance an odometer.
template <class F>
void broadcastLoop(double* out, const double* x, const double* y, const Shape& shape,
                   const std::vector<uint64_t>& sx, const std::vector<uint64_t>& sy, F f) {
  size_t rank = shape.size();
  uint64_t total = 1;
  for (uint32_t d : shape) total *= d;
  if (total == 0) return;
  if (rank == 0) {
    out[0] = f(x[0], y[0]);
    return;
  }
  uint32_t inner = shape[rank - 1];
  uint64_t ix = sx[rank - 1], iy = sy[rank - 1];
  std::vector<uint32_t> idx(rank, 0);
  uint64_t ox = 0, oy = 0;
  for (uint64_t done = 0; done < total; done += inner, out += inner) {
    const double *px = x + ox, *py = y + oy;
    if (ix == 1 && iy == 1) {
      for (uint32_t i = 0; i < inner; ++i) out[i] = f(px[i], py[i]);
    } else if (ix == 0 && iy == 1) {
      double c = px[0];
      for (uint32_t i = 0; i < inner; ++i) out[i] = f(c, py[i]);
    } else if (ix == 1 && iy == 0) {
      double c = py[0];
      for (uint32_t i = 0; i < inner; ++i) out[i] = f(px[i], c);
    } else {
      for (uint32_t i = 0; i < inner; ++i) out[i] = f(px[i * ix], py[i * iy]);
    }
    for (size_t k = rank - 1; k-- > 0;) {
      ox += sx[k];
      oy += sy[k];
      if (++idx[k] < shape[k]) break;
      ox -= sx[k] * shape[k];
      oy -= sy[k] * shape[k];
      idx[k] = 0;
    }
  }
}

// The strides of an operand of shape s within a result of shape r (s aligned to the
// right; a size-1 or missing axis is broadcast: stride 0).
std::vector<uint64_t> broadcastStrides(const Shape& s, const Shape& r) {
  std::vector<uint64_t> st(r.size(), 0);
  uint64_t step = 1;
  for (size_t k = 0; k < s.size(); ++k) {
    size_t ks = s.size() - 1 - k, kr = r.size() - 1 - k;
    st[kr] = s[ks] == 1 ? 0 : step;
    step *= s[ks];
  }
  return st;
}

// The shape two operands broadcast to, or an error naming both shapes and the operation.
Shape broadcastShape(VM& vm, const char* who, const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape r(rank);
  for (size_t k = 0; k < rank; ++k) {
    uint32_t da = k < a.size() ? a[a.size() - 1 - k] : 1;
    uint32_t db = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (da != db && da != 1 && db != 1)
      vm.runtimeError(std::string(who) + ": shapes " + shapeString(a) + " and " + shapeString(b) +
                      " do not broadcast");
    r[rank - 1 - k] = da == 1 ? db : da;
  }
  return r;
}

double minOf(double x, double y) { return std::isnan(y) || y < x ? y : x; }
double maxOf(double x, double y) { return std::isnan(y) || y > x ? y : x; }

void runBinary(Bin op, double* out, const double* x, const double* y, const Shape& shape,
               const std::vector<uint64_t>& sx, const std::vector<uint64_t>& sy) {
  switch (op) {
    case Bin::Add:
      return broadcastLoop(out, x, y, shape, sx, sy, [](double a, double b) { return a + b; });
    case Bin::Sub:
      return broadcastLoop(out, x, y, shape, sx, sy, [](double a, double b) { return a - b; });
    case Bin::Mul:
      return broadcastLoop(out, x, y, shape, sx, sy, [](double a, double b) { return a * b; });
    case Bin::Div:
      return broadcastLoop(out, x, y, shape, sx, sy, [](double a, double b) { return a / b; });
    case Bin::Pow:
      return broadcastLoop(out, x, y, shape, sx, sy,
                           [](double a, double b) { return std::pow(a, b); });
    case Bin::Min:
      return broadcastLoop(out, x, y, shape, sx, sy, minOf);
    case Bin::Max:
      return broadcastLoop(out, x, y, shape, sx, sy, maxOf);
    case Bin::Atan2:
      return broadcastLoop(out, x, y, shape, sx, sy,
                           [](double a, double b) { return std::atan2(a, b); });
    case Bin::LogBase:
      return broadcastLoop(out, x, y, shape, sx, sy,
                           [](double a, double b) { return std::log(a) / std::log(b); });
    case Bin::Step:
      return broadcastLoop(out, x, y, shape, sx, sy,
                           [](double a, double b) { return a >= b ? 1.0 : 0.0; });
  }
}

// A number operand's one element; the symbolic zero is 0.
double scalarOf(Value v) { return v.isZero() ? 0.0 : v.asNumber(); }

// x OP y for numbers, arrays and the symbolic zero (0), at least one of them an array.
Value binary(VM& vm, Bin op, Value x, Value y) {
  x = unwrapAttached(x);
  y = unwrapAttached(y);
  const char* who = binName(op);
  for (Value v : {x, y})
    if (!v.isNumber() && !v.isZero() && !isArray(v)) {
      Value args[1] = {v};
      num(vm, who, args, 0);  // the type error (or the tagged value's message)
    }
  if (isArray(x) && isSparse(asArray(x))) x = Value::object(vm.dense(asArray(x)));
  if (isArray(y) && isSparse(asArray(y))) y = Value::object(vm.dense(asArray(y)));
  Shape sx = operandShape(x), sy = operandShape(y);
  Shape sr = broadcastShape(vm, who, sx, sy);
  double cx = isArray(x) ? 0 : scalarOf(x), cy = isArray(y) ? 0 : scalarOf(y);
  const double* px = isArray(x) ? asArray(x)->items : &cx;
  const double* py = isArray(y) ? asArray(y)->items : &cy;
  if (sr.empty()) {
    double r;
    runBinary(op, &r, px, py, sr, {}, {});
    return numberResult(r);
  }
  Vector* r = makeArray(vm, sr);
  runBinary(op, r->items, px, py, sr, broadcastStrides(sx, sr), broadcastStrides(sy, sr));
  return Value::object(r);
}

Bin binOf(NativeId id) {
  switch (id) {
    case NativeId::Add:
      return Bin::Add;
    case NativeId::Sub:
      return Bin::Sub;
    case NativeId::Mul:
      return Bin::Mul;
    case NativeId::Div:
      return Bin::Div;
    case NativeId::Expt:
      return Bin::Pow;
    case NativeId::Min:
      return Bin::Min;
    case NativeId::Max:
      return Bin::Max;
    case NativeId::Atan:
      return Bin::Atan2;
    case NativeId::Log:
      return Bin::LogBase;
    case NativeId::Step:
      return Bin::Step;
    default:
      return Bin::Add;
  }
}

// The sum of the elements of x along the axes where `to` broadcasts to x's shape:
// the reverse of broadcasting x's operand of shape `to`.
Value sumToShape(VM& vm, Vector* x, const Shape& to) {
  Shape sx = shapeOf(x);
  if (to == sx) return Value::object(x);
  // x not larger than `to` along every axis (a sensitivity that had been summed to a
  // shape of its value's, given back to a value that carries broadcast axes itself,
  // differentiated again): summed to the shape the two have in common, the axes both
  // have, each of the size both give it, else 1 (as plus adds two sensitivities of one
  // value, vm/src/ad.cpp); what takes it next repeats it to the shape it needs.
  bool fits = to.size() <= sx.size();
  for (size_t k = 1; fits && k <= to.size(); ++k) {
    uint32_t t = to[to.size() - k], d = sx[sx.size() - k];
    fits = t == d || t == 1;
  }
  if (!fits) {
    size_t r = std::min(to.size(), sx.size());
    Shape common(r);
    for (size_t k = 1; k <= r; ++k) {
      uint32_t t = to[to.size() - k], d = sx[sx.size() - k];
      common[r - k] = t == d ? t : 1;
    }
    return sumToShape(vm, x, common);
  }
  std::vector<double> acc(1, 0.0);
  uint64_t n = 1;
  for (uint32_t d : to) n *= d;
  acc.assign(std::max<uint64_t>(n, 1), 0.0);
  // Each element of x adds into the element of `to` it came from: the strides of `to`
  // within x's shape (0 along broadcast axes), walked with the same odometer.
  Shape tr(sx.size() - to.size(), 1);
  tr.insert(tr.end(), to.begin(), to.end());
  for (size_t k = 0; k < sx.size(); ++k)
    if (tr[k] != sx[k] && tr[k] != 1)
      vm.runtimeError("%sum-to: shapes " + shapeString(sx) + " and " + shapeString(to) +
                      " do not broadcast");
  // The common cases in contiguous runs: the leading axes summed (a bias's sensitivity
  // over a batch: rows added into one), or the trailing ones (each row to a number).
  size_t lead = 0, rank = sx.size();
  while (lead < rank && tr[lead] == 1) ++lead;
  uint64_t total = x->aux;
  if (total > 0 && std::equal(tr.begin() + lead, tr.end(), sx.begin() + lead)) {
    uint64_t inner = std::max<uint64_t>(n, 1);
    for (uint64_t b = 0; b < total; b += inner)
      for (uint64_t j = 0; j < inner; ++j) acc[j] += x->items[b + j];
    return arrayOrNumber(vm, to, acc.data());
  }
  size_t keep = 0;
  while (keep < rank && tr[keep] == sx[keep]) ++keep;
  if (total > 0 && std::all_of(tr.begin() + keep, tr.end(), [](uint32_t d) { return d == 1; })) {
    uint64_t run = total / std::max<uint64_t>(n, 1);
    for (uint64_t i = 0; i < n; ++i) {
      double s = 0;
      for (uint64_t j = 0; j < run; ++j) s += x->items[i * run + j];
      acc[i] = s;
    }
    return arrayOrNumber(vm, to, acc.data());
  }
  std::vector<uint64_t> st = broadcastStrides(to, sx);
  if (total > 0) {
    std::vector<uint32_t> idx(rank, 0);
    uint64_t off = 0;
    for (uint64_t e = 0; e < total; ++e) {
      acc[off] += x->items[e];
      for (size_t k = rank; k-- > 0;) {
        off += st[k];
        if (++idx[k] < sx[k]) break;
        off -= st[k] * sx[k];
        idx[k] = 0;
      }
    }
  }
  return arrayOrNumber(vm, to, acc.data());
}

// x (a number or an array) repeated to the shape s (x's shape broadcasts to it).
Value broadcastToShape(VM& vm, Value x, const Shape& s) {
  Shape sx = operandShape(x);
  if (sx == s) return x;
  Shape sr = broadcastShape(vm, "%broadcast-to", sx, s);
  if (sr != s)
    vm.runtimeError("%broadcast-to: the shape " + shapeString(sx) + " does not broadcast to " +
                    shapeString(s));
  double c = isArray(x) ? 0 : scalarOf(x);
  const double* px = isArray(x) ? asArray(x)->items : &c;
  if (s.empty()) return numberResult(px[0]);
  Vector* r = makeArray(vm, s);
  std::vector<uint64_t> zero(s.size(), 0);
  broadcastLoop(r->items, px, px, s, broadcastStrides(sx, s), zero,
                [](double a, double) { return a; });
  return Value::object(r);
}

// The shape of a value as a sum-to/broadcast-to target: a number's is ().
Shape targetShape(VM& vm, const char* who, Value* a, int i) {
  // Under bundles and cobundles of any tags, and reverse tags between them (reverse
  // over reverse over forward): the innermost part, the primal or, where that is the
  // symbolic zero, the tangent.
  Value v = leafPart(unwrapAttached(a[i]));
  if (v.isNumber() || v.isZero()) return {};
  if (isArray(v)) return shapeOf(vm.dense(asArray(v)));
  vm.typeError(who, i, "number or array", a[i]);
}

// (%sum-to x like): x summed over the axes along which like's shape broadcasts to
// x's; x itself when it has like's shape (or is a number or the symbolic zero: a
// sensitivity of a number-shaped result).
// f of x's primal under the reverse tags x carries (a gradient's sensitivity in code
// differentiated again), its result tagged as many times: how %sum-to and %unreduce
// apply to a tagged array.
template <class F>
Value underTags(VM& vm, Value x, F f) {
  int tags = 0;
  for (; isObj(x, ObjType::Rev); ++tags) x = static_cast<Rev*>(x.asObject())->primal;
  Value r = f(x);
  for (int i = 0; i < tags; ++i) r = Value::object(vm.makeRev(r));
  return r;
}

// The primitive id applied again to a part (a leaf of a list's sensitivity, or what is
// under reverse tags): through the primitive's call, so that a bundle or cobundle there
// goes to forward mode's rule (vm/src/forward.cpp: part by part), as it would have had
// the primitive been called on it.
Value again(VM& vm, NativeId id, Value* args, int n) {
  return vm.callPrimitive(vm.builtin(id), args, n);
}

// f applied to the leaves of g and like walked together along their pairs (the
// sensitivity of a list and the list): g rebuilt from f's results, its pairs kept
// where nothing in them changed; f(g, like) itself unless both are pairs. Iterative.
template <class F>
Value alongPairs(VM& vm, Value g, Value like, F f) {
  if (!isPair(g) || !isPair(like)) return f(g, like);
  // The usual sensitivity of a list in scalar code, numbers (or zeros) for numbers, has
  // nothing for f to do: it is g, found without a stack along the spines.
  auto scalar = [](Value x) {
    x = untagged(unwrapAttached(x));
    return x.isNumber() || x.isZero();
  };
  Value v = g, l = like;
  for (; isPair(v) && isPair(l); v = asPair(v)->cdr, l = asPair(l)->cdr)
    if (!scalar(asPair(v)->car) || !scalar(asPair(l)->car)) break;
  if (v.isZero() || ((v.isNil() || scalar(v)) && (l.isNil() || scalar(l)))) return g;
  struct Item {
    Value g, like;
    bool build;
  };
  std::vector<Item> work{{g, like, false}};
  std::vector<Value> results;
  while (!work.empty()) {
    Item it = work.back();
    work.pop_back();
    if (it.build) {
      Value cdr = results.back();
      results.pop_back();
      Value car = results.back();
      results.pop_back();
      Pair* p = asPair(it.g);
      results.push_back(car == p->car && cdr == p->cdr ? it.g : vm.cons(car, cdr));
    } else if (isPair(it.g) && isPair(it.like)) {
      work.push_back({it.g, it.like, true});
      work.push_back({asPair(it.g)->cdr, asPair(it.like)->cdr, false});
      work.push_back({asPair(it.g)->car, asPair(it.like)->car, false});
    } else {
      results.push_back(f(it.g, it.like));
    }
  }
  return results.back();
}

Value sumTo(VM& vm, Value* a, int) {
  Value x = unwrapAttached(a[0]);
  if (isPair(x))  // the sensitivity of a list, element by element
    return alongPairs(vm, x, unwrapAttached(a[1]), [&](Value g, Value like) {
      Value args[2] = {g, like};
      Value leaf = untagged(unwrapAttached(g));
      bool sums = (isArray(leaf) || isFwd(leaf)) && !unwrapAttached(like).isZero();
      return sums ? again(vm, NativeId::SumTo, args, 2) : g;
    });
  // A tagged bundle (the sensitivity of a scalar broadcast against an array, forward over
  // reverse over reverse): summed under its tags, part by part (the bundle's rule).
  if (isObj(x, ObjType::Rev) && isFwd(untagged(x)))
    return underTags(vm, x, [&](Value p) {
      Value args[2] = {p, a[1]};
      return again(vm, NativeId::SumTo, args, 2);
    });
  if (!isArray(untagged(x))) return a[0];
  return underTags(vm, x, [&](Value p) {
    return sumToShape(vm, vm.dense(asArray(p)), targetShape(vm, "%sum-to", a, 1));
  });
}

// (%broadcast-to x like): x repeated to like's shape (the reverse of %sum-to).
Value broadcastTo(VM& vm, Value* a, int) {
  Value x = unwrapAttached(a[0]);
  if (x.isZero()) return x;
  // (as %sum-to: a tagged sensitivity, differentiated again, under its tags: again)
  if (isObj(x, ObjType::Rev))
    return underTags(vm, x, [&](Value p) {
      Value args[2] = {p, a[1]};
      return again(vm, NativeId::BroadcastTo, args, 2);
    });
  if (isPair(x))  // (as %sum-to: the sensitivity of a list, element by element)
    return alongPairs(vm, x, unwrapAttached(a[1]), [&](Value g, Value like) {
      Value args[2] = {g, like};
      bool leaf = !isPair(g) && !unwrapAttached(like).isZero();
      return leaf ? again(vm, NativeId::BroadcastTo, args, 2) : g;
    });
  if (!x.isNumber() && !isArray(x)) vm.typeError("%broadcast-to", 0, "number or array", a[0]);
  if (isArray(x)) x = Value::object(vm.dense(asArray(x)));
  return broadcastToShape(vm, x, targetShape(vm, "%broadcast-to", a, 1));
}

// (%unreduce g like): g, the sensitivity of a sum of sensitivities (%sens+), given
// back to an operand (like) that had axes the sum does not: g repeated over them, so
// that it has a shape like's broadcasts to (what a sensitivity of like may have).
// g as it is when like's shape already broadcasts to g's (a number's, or the sum's
// own shape: every scalar use). Where the two do not broadcast together, g is first
// summed to the shape they have in common.
Value unreduce(VM& vm, Value* a, int) {
  Value g = unwrapAttached(a[0]);
  if (g.isZero()) return a[0];
  if (isPair(g))  // the sensitivity of a list (%materialize's, plus's): element by element
    return alongPairs(vm, g, unwrapAttached(a[1]), [&](Value x, Value like) {
      Value args[2] = {x, like};
      return isPair(x) ? x : again(vm, NativeId::Unreduce, args, 2);
    });
  if (isObj(g, ObjType::Rev))
    return underTags(vm, g, [&](Value x) {
      Value args[2] = {x, a[1]};
      return again(vm, NativeId::Unreduce, args, 2);
    });
  // A sensitivity of forward over reverse (a cobundle), or of any other structure:
  // given back as it is.
  if (isFwd(g)) return a[0];
  // (like's shape through bundles and cobundles as targetShape reads it: a cobundle with
  // the symbolic zero as its primal part has its tangent part's, reverse over reverse
  // over forward; by its primal alone g went back without the axes, a third of a
  // second derivative through (* w (+ x #(1 1 1))).)
  Value like = leafPart(unwrapAttached(a[1]));
  if (!like.isNumber() && !isArray(like)) return a[0];  // (or the zero: of any shape)
  Shape sl = targetShape(vm, "%unreduce", a, 1);
  if (!isArray(g)) {
    if (!g.isNumber()) vm.typeError("%unreduce", 0, "number or array", a[0]);
    return sl.empty() ? g : broadcastToShape(vm, g, sl);
  }
  Vector* v = vm.dense(asArray(g));
  Shape sg = shapeOf(v);
  size_t rank = std::max(sg.size(), sl.size()), both = std::min(sg.size(), sl.size());
  bool fits = true;
  Shape common(both), all(rank);
  for (size_t k = 0; k < rank; ++k) {
    uint32_t dg = k < sg.size() ? sg[sg.size() - 1 - k] : 1;
    uint32_t dl = k < sl.size() ? sl[sl.size() - 1 - k] : 1;
    if (dg != dl && dg != 1 && dl != 1) fits = false;
    all[rank - 1 - k] = dg == 1 ? dl : dg;
    if (k < both) common[both - 1 - k] = dg == dl ? dg : 1;
  }
  if (fits) return all == sg ? Value::object(v) : broadcastToShape(vm, Value::object(v), all);
  return broadcastToShape(vm, sumToShape(vm, v, common), sl);
}

// (%sens-back g x like...): g, the sensitivity given back to an operand x of %sens+ or
// plus (%unreduce put it back over the axes of the values x was computed from, the
// likes), as it is, unless x is the symbolic zero (x is #t where it is the likes'
// product, which is zero where one of them is). A sum of sensitivities of one value
// that carry a broadcast's axes, where one operand is the symbolic zero, keeps the
// other's axes (a zero has no shape to sum them to), so g has them too; but x stands
// for a sensitivity of the value's own shape, which the likes' shapes broadcast to
// (the primals it would have been computed from; a number where there are none), and g
// is the same along the axes beyond it (what takes the sum reads it summed over them).
// So x gets g averaged down to that shape: g once, not once per element of those axes.
// (The zero is not always a constant: %zero-if-zero makes a factor of a derivative rule
// the symbolic zero where it is 0, and its own derivative goes on through it.)
Value sensBack(VM& vm, Value* a, int n) {
  // x: the operand's primal, or #t where x is the product of the likes; under reverse
  // tags and the primal parts of bundles (forward mode over this gives the dual rule
  // bundles of the tag it applies, vm/src/forward.cpp; these are of lower tags)
  auto isZero = [](Value v) {
    for (v = untagged(unwrapAttached(v)); isFwd(v) && !asFwd(v)->co(); v = untagged(v))
      v = asFwd(v)->primal;
    return v.isZero();
  };
  bool zero = isZero(a[1]);
  if (a[1].isBool())
    for (int i = 2; i < n && !zero; ++i) zero = isZero(a[i]);
  if (!zero) return a[0];
  Value g = unwrapAttached(a[0]);
  if (isObj(g, ObjType::Rev))
    return underTags(vm, g, [&](Value p) {
      std::vector<Value> args(a, a + n);
      args[0] = p;
      return again(vm, NativeId::SensBack, args.data(), n);
    });
  if (!isArray(g)) return a[0];  // a number, the symbolic zero, a list, a cobundle
  Shape to;                      // (the likes broadcast together where x was computed from them)
  for (int i = 2; i < n; ++i) {
    Value like = leafPart(unwrapAttached(a[i]));
    if (!like.isNumber() && !isArray(like)) continue;  // (the zero: of any shape)
    to = broadcastShape(vm, "%sens-back", to, targetShape(vm, "%sens-back", a, i));
  }
  Vector* v = vm.dense(asArray(g));
  Value r = sumToShape(vm, v, to);
  uint64_t from = vectorLength(v), into = isArray(r) ? vectorLength(asArray(r)) : 1;
  if (from == into) return r;
  Value scale[2] = {r, Value::number(double(into) / double(from))};
  return vm.callPrimitive(vm.builtin(NativeId::Mul), scale, 2);
}

// ---- making and reading ----------------------------------------------------------------

// The shape predicates and queries see through bundles (forward mode) to their primals.
Value arrayP(VM&, Value* a, int) {
  return Value::boolean(isArray(fwdPrimal(unwrapAttached(a[0]))));
}

Value shapeList(VM& vm, const Shape& s) {
  Value l = Value::nil();
  for (size_t i = s.size(); i-- > 0;) l = vm.cons(Value::number(s[i]), l);
  return l;
}

// A number is an array of rank 0 to these three.
Value arrayShapeOf(VM& vm, Value* a, int) {
  Value v = fwdPrimal(untagged(unwrapAttached(a[0])));
  if (v.isNumber()) return Value::nil();
  return shapeList(vm, shapeOf(arrayArg(vm, "array-shape", &v, 0)));
}
Value arrayRank(VM& vm, Value* a, int) {
  Value v = fwdPrimal(untagged(unwrapAttached(a[0])));
  if (v.isNumber()) return Value::number(0);
  return Value::number(arrayArg(vm, "array-rank", &v, 0)->rank);
}
Value arraySize(VM& vm, Value* a, int) {
  Value v = fwdPrimal(untagged(unwrapAttached(a[0])));
  if (v.isNumber()) return Value::number(1);
  if (isArray(v)) return Value::number(vectorLength(asArray(v)));
  vm.typeError("array-size", 0, "array", a[0]);
}

Value makeArrayOf(VM& vm, Value* a, int) {
  Shape s = shapeArg(vm, "make-array", a, 0);
  double fill = num(vm, "make-array", a, 1);
  Vector* r = makeArray(vm, s);
  std::fill(r->items, r->items + r->aux, fill);
  return Value::object(r);
}

// (%list->array l): nested lists of numbers, as deep as the rank, every row the same
// length. The shape comes from the first elements; the walk is iterative.
Value listToArray(VM& vm, Value* a, int) {
  const char* who = "list->array";
  Value l = unwrapAttached(a[0]);
  Shape s;
  for (Value x = l;;) {
    uint32_t n = 0;
    Value first = Value::nil();
    Value y = x;
    for (; isPair(y); y = asPair(y)->cdr) {
      if (n == 0) first = unwrapAttached(asPair(y)->car);
      if (++n > VM::kMaxArrayElements) vm.runtimeError("list->array: the list is too long");
    }
    if (!y.isNil()) vm.typeError(who, 0, "list", a[0]);
    s.push_back(n);
    if (n == 0 || !(isPair(first) || first.isNil())) break;
    x = first;
  }
  uint64_t total = 1;
  for (uint32_t d : s) total *= d;
  if (total > VM::kMaxArrayElements) vm.runtimeError("list->array: more than 2^30 elements");
  Vector* r = makeArray(vm, s);
  uint64_t k = 0;
  // Walk the nesting with a stack of (list, depth).
  std::vector<std::pair<Value, size_t>> work{{l, 0}};
  auto ragged = [&]() {
    vm.runtimeError(std::string(who) + ": the nested lists are not of the shape " + shapeString(s) +
                    " (a ragged list, or a number where a list is expected)");
  };
  while (!work.empty()) {
    auto [x, depth] = work.back();
    work.pop_back();
    uint32_t n = 0;
    for (Value y = x; isPair(y); y = asPair(y)->cdr) ++n;
    if (n != s[depth]) ragged();
    if (depth + 1 == s.size()) {
      for (Value y = x; isPair(y); y = asPair(y)->cdr) {
        Value e = unwrapAttached(asPair(y)->car);
        if (e.isZero()) {
          r->items[k++] = 0;
        } else if (e.isNumber()) {
          r->items[k++] = e.asNumber();
        } else {
          if (isPair(e) || e.isNil()) ragged();
          Value args[1] = {asPair(y)->car};
          r->items[k++] = num(vm, who, args, 0);
        }
      }
    } else {
      size_t at = work.size();
      for (Value y = x; isPair(y); y = asPair(y)->cdr) {
        Value e = unwrapAttached(asPair(y)->car);
        if (!isPair(e) && !e.isNil()) ragged();
        work.push_back({e, depth + 1});
      }
      std::reverse(work.begin() + static_cast<std::ptrdiff_t>(at), work.end());
    }
  }
  return Value::object(r);
}

// (%array->list a): nested lists, one level per axis. Built from the last element back.
Value arrayToList(VM& vm, Value* a, int) {
  if (rank0Arg(a, 0)) return numberResult(rank0Value(a, 0));  // no axis: no list
  Vector* v = arrayArg(vm, "array->list", a, 0);
  Shape s = shapeOf(v);
  size_t rank = s.size();
  // rows[k]: the lists of depth k being built (innermost: rank - 1).
  std::vector<Value> rows(rank, Value::nil());
  std::vector<uint32_t> count(rank, 0);
  if (v->aux == 0) {
    // Some axis is 0: the empty rows down to it.
    Value l = Value::nil();
    size_t k = 0;
    while (k < rank && s[k] != 0) ++k;
    for (size_t d = k; d-- > 0;) {
      Value row = Value::nil();
      for (uint32_t i = 0; i < s[d]; ++i) row = vm.cons(l, row);
      l = row;
    }
    return l;
  }
  for (uint64_t e = v->aux; e-- > 0;) {
    rows[rank - 1] = vm.cons(numberResult(v->items[e]), rows[rank - 1]);
    size_t k = rank - 1;
    while (++count[k] == s[k] && k > 0) {
      count[k] = 0;
      rows[k - 1] = vm.cons(rows[k], rows[k - 1]);
      rows[k] = Value::nil();
      --k;
    }
  }
  return rows[0];
}

// The flat index of indices args[from ..] in v.
uint64_t flatIndex(VM& vm, const char* who, Value* a, int nargs, int from, const Vector* v) {
  const uint32_t* s = arrayShape(v);
  if (uint32_t(nargs - from) != v->rank)
    vm.runtimeError(std::string(who) + ": an array of rank " + std::to_string(v->rank) + " takes " +
                    std::to_string(v->rank) + " indices, got " + std::to_string(nargs - from));
  uint64_t k = 0;
  for (uint32_t d = 0; d < v->rank; ++d)
    k = k * s[d] + integerArg(vm, who, a, from + d, s[d], "index");
  return k;
}

Value arrayRef(VM& vm, Value* a, int n) {
  if (rank0Arg(a, 0)) {
    if (n != 1)
      vm.runtimeError("array-ref: an array of rank 0 takes 0 indices, got " +
                      std::to_string(n - 1));
    return numberResult(rank0Value(a, 0));
  }
  Vector* v = arrayArg(vm, "array-ref", a, 0);
  return numberResult(v->items[flatIndex(vm, "array-ref", a, n, 1, v)]);
}

// (%array-onehot like y i ...): the array of like's shape that is y at (i ...), 0 elsewhere
// (the sensitivity of an array from that of one element).
Value arrayOnehot(VM& vm, Value* a, int n) {
  double y = a[1].isZero() ? 0.0 : num(vm, "%array-onehot", a, 1);
  if (rank0Arg(a, 0)) {
    if (n != 2)
      vm.runtimeError("array-ref: an array of rank 0 takes 0 indices, got " +
                      std::to_string(n - 2));
    return Value::number(y);
  }
  Vector* like = arrayArg(vm, "%array-onehot", a, 0);
  uint64_t k = flatIndex(vm, "%array-onehot", a, n, 2, like);
  Vector* r = vm.makeArray(like->rank, arrayShape(like));
  std::fill(r->items, r->items + r->aux, 0.0);
  r->items[k] = y;
  return Value::object(r);
}

// A number is the rank-0 array of its one element, and the shape () makes one.
Value reshape(VM& vm, Value* a, int) {
  double one = 0;
  const double* items = &one;
  Shape from;
  if (rank0Arg(a, 0)) {
    one = rank0Value(a, 0);
  } else {
    Vector* v = arrayArg(vm, "reshape", a, 0);
    items = v->items;
    from = shapeOf(v);
  }
  uint64_t size = 1;
  for (uint32_t d : from) size *= d;
  Shape s;
  if (!untagged(unwrapAttached(a[1])).isNil()) s = shapeArg(vm, "reshape", a, 1);
  uint64_t n = 1;
  for (uint32_t d : s) n *= d;
  if (n != size)
    vm.runtimeError("reshape: cannot reshape an array of shape " + shapeString(from) + " to " +
                    shapeString(s));
  return arrayOrNumber(vm, s, items);
}

// ---- linear algebra ----------------------------------------------------------------------

// r (n x m) = x (n x k) times y (k x m), row-major: by dgemm, or below a few thousand
// multiplications (where a call costs more than it saves), for each row of x the rows
// of y scaled and added (the inner loop runs along contiguous rows, and vectorises).
// OpenBLAS reserves a work buffer of 128 MB on its first product, and where the address
// space is limited below that (ulimit -v) it retries forever: under a limit of less
// than 2 GB the products stay loops.
bool blasFits() {
  struct rlimit rl;
  return getrlimit(RLIMIT_AS, &rl) == 0 &&
         (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t{2} << 30));
}

// With tx, x is stored transposed (k x n), and with ty, y (m x k): dgemm's own flags,
// so that the reverse of dot (%dot-tn, %dot-nt) makes no transposed copy.
void matmul(VM& vm, const double* x, const double* y, double* r, uint64_t n, uint64_t k, uint64_t m,
            bool tx = false, bool ty = false) {
  if (n * k * m >= 2048 && n < (1u << 31) && k < (1u << 31) && m < (1u << 31) && blasFits()) {
    blasDgemm(vm, tx, ty, int(n), int(m), int(k), x, int(tx ? n : k), y, int(ty ? k : m), r,
              int(m));
    return;
  }
  std::fill(r, r + n * m, 0.0);
  if (ty) {
    // r[i][j] = x(i, .) . y[j][.]: dot products along y's rows
    for (uint64_t i = 0; i < n; ++i)
      for (uint64_t j = 0; j < m; ++j) {
        double s = 0;
        for (uint64_t p = 0; p < k; ++p) s += (tx ? x[p * n + i] : x[i * k + p]) * y[j * k + p];
        r[i * m + j] = s;
      }
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {
    double* out = r + i * m;
    for (uint64_t p = 0; p < k; ++p) {
      double c = tx ? x[p * n + i] : x[i * k + p];
      const double* row = y + p * m;
      for (uint64_t j = 0; j < m; ++j) out[j] += c * row[j];
    }
  }
}

Value dot(VM& vm, Value* a, int) {
  Vector* x = arrayArg(vm, "dot", a, 0);
  Vector* y = arrayArg(vm, "dot", a, 1);
  auto mismatch = [&]() {
    vm.runtimeError("dot: shapes " + shapeString(shapeOf(x)) + " and " + shapeString(shapeOf(y)) +
                    " do not match");
  };
  if (x->rank > 2 || y->rank > 2)
    vm.runtimeError("dot: expected vectors or matrices, got shapes " + shapeString(shapeOf(x)) +
                    " and " + shapeString(shapeOf(y)));
  const uint32_t *sx = arrayShape(x), *sy = arrayShape(y);
  if (x->rank == 1 && y->rank == 1) {
    if (sx[0] != sy[0]) mismatch();
    double s = 0;
    for (uint32_t i = 0; i < sx[0]; ++i) s += x->items[i] * y->items[i];
    return numberResult(s);
  }
  if (x->rank == 2 && y->rank == 1) {
    if (sx[1] != sy[0]) mismatch();
    Vector* r = vm.makeVector(sx[0]);
    if (sx[0] == 0) return Value::object(r);
    if (sx[1] == 0) {
      std::fill(r->items, r->items + r->aux, 0.0);
      return Value::object(r);
    }
    matmul(vm, x->items, y->items, r->items, sx[0], sx[1], 1);
    return Value::object(r);
  }
  if (x->rank == 1 && y->rank == 2) {
    if (sx[0] != sy[0]) mismatch();
    Vector* r = vm.makeVector(sy[1]);
    if (sy[1] == 0) return Value::object(r);
    if (sy[0] == 0) {
      std::fill(r->items, r->items + r->aux, 0.0);
      return Value::object(r);
    }
    matmul(vm, x->items, y->items, r->items, 1, sy[0], sy[1]);
    return Value::object(r);
  }
  if (sx[1] != sy[0]) mismatch();
  uint32_t shape[2] = {sx[0], sy[1]};
  Vector* r = vm.makeArray(2, shape);
  if (r->aux == 0) return Value::object(r);
  if (sx[1] == 0) {
    std::fill(r->items, r->items + r->aux, 0.0);
    return Value::object(r);
  }
  matmul(vm, x->items, y->items, r->items, sx[0], sx[1], sy[1]);
  return Value::object(r);
}

// (%dot-tn a b) = (dot (transpose a) b) and (%dot-nt a b) = (dot a (transpose b)), of
// two matrices: the products of dot's reverse (prelude.dlam), the transposed operand
// read in place.
template <bool TA, bool TB>
Value dotTransposed(VM& vm, Value* a, int) {
  const char* who = TA ? "%dot-tn" : "%dot-nt";
  Vector* x = arrayArg(vm, who, a, 0);
  Vector* y = arrayArg(vm, who, a, 1);
  if (x->rank != 2 || y->rank != 2)
    vm.runtimeError(std::string(who) + ": expected two matrices, got shapes " +
                    shapeString(shapeOf(x)) + " and " + shapeString(shapeOf(y)));
  const uint32_t *sx = arrayShape(x), *sy = arrayShape(y);
  uint32_t n = TA ? sx[1] : sx[0], k = TA ? sx[0] : sx[1];
  uint32_t ky = TB ? sy[1] : sy[0], m = TB ? sy[0] : sy[1];
  if (k != ky)
    vm.runtimeError(std::string(who) + ": shapes " + shapeString(shapeOf(x)) + " and " +
                    shapeString(shapeOf(y)) + " do not match");
  uint32_t shape[2] = {n, m};
  Vector* r = vm.makeArray(2, shape);
  if (r->aux == 0) return Value::object(r);
  if (k == 0) {
    std::fill(r->items, r->items + r->aux, 0.0);
    return Value::object(r);
  }
  matmul(vm, x->items, y->items, r->items, n, k, m, TA, TB);
  return Value::object(r);
}

Value transpose(VM& vm, Value* a, int) {
  if (rank0Arg(a, 0)) return numberResult(rank0Value(a, 0));
  Vector* m = arrayArg(vm, "transpose", a, 0);
  if (m->rank == 1) return Value::object(m);
  if (m->rank != 2)
    vm.runtimeError("transpose: expected a vector or a matrix, got shape " +
                    shapeString(shapeOf(m)));
  uint32_t rows = arrayShape(m)[0], cols = arrayShape(m)[1];
  uint32_t shape[2] = {cols, rows};
  Vector* r = vm.makeArray(2, shape);
  // In blocks, so that both sides stay in the cache.
  constexpr uint32_t kB = 32;
  for (uint32_t i0 = 0; i0 < rows; i0 += kB)
    for (uint32_t j0 = 0; j0 < cols; j0 += kB)
      for (uint32_t i = i0; i < std::min(rows, i0 + kB); ++i)
        for (uint32_t j = j0; j < std::min(cols, j0 + kB); ++j)
          r->items[uint64_t(j) * rows + i] = m->items[uint64_t(i) * cols + j];
  return Value::object(r);
}

Value outer(VM& vm, Value* a, int) {
  Vector* u = arrayArg(vm, "outer", a, 0);
  Vector* v = arrayArg(vm, "outer", a, 1);
  if (u->rank != 1 || v->rank != 1)
    vm.runtimeError("outer: expected two vectors, got shapes " + shapeString(shapeOf(u)) + " and " +
                    shapeString(shapeOf(v)));
  uint32_t shape[2] = {u->aux, v->aux};
  Vector* r = vm.makeArray(2, shape);
  for (uint32_t i = 0; i < u->aux; ++i)
    for (uint32_t j = 0; j < v->aux; ++j)
      r->items[uint64_t(i) * v->aux + j] = u->items[i] * v->items[j];
  return Value::object(r);
}

// ---- reductions --------------------------------------------------------------------------

// The sizes before, along and after an axis: the array is [outer][n][inner].
struct AxisSplit {
  uint64_t outer = 1, n = 1, inner = 1;
};
AxisSplit splitAt(const Shape& s, uint32_t axis) {
  AxisSplit r;
  for (uint32_t k = 0; k < s.size(); ++k) (k < axis ? r.outer : k == axis ? r.n : r.inner) *= s[k];
  return r;
}

enum class Reduce { Sum, Max, LogSumExp };

double reduceRun(Reduce how, const double* x, uint64_t n, uint64_t stride) {
  switch (how) {
    case Reduce::Sum: {
      double s = 0;
      for (uint64_t i = 0; i < n; ++i) s += x[i * stride];
      return s;
    }
    case Reduce::Max: {
      double m = -std::numeric_limits<double>::infinity();
      for (uint64_t i = 0; i < n; ++i) m = maxOf(m, x[i * stride]);
      return m;
    }
    case Reduce::LogSumExp: {
      double m = -std::numeric_limits<double>::infinity();
      for (uint64_t i = 0; i < n; ++i) m = maxOf(m, x[i * stride]);
      if (std::isinf(m) || std::isnan(m)) return n == 0 ? m : m + 0.0 * x[0];
      double s = 0;
      for (uint64_t i = 0; i < n; ++i) s += std::exp(x[i * stride] - m);
      return m + std::log(s);
    }
  }
  return 0;
}

// A reduction of the whole array (to a number) or along one axis (to an array of one rank
// less; a vector reduced along axis 0 gives a number).
Value reduce(VM& vm, const char* who, Reduce how, Value* a, int n) {
  if (rank0Arg(a, 0)) {
    // The sum, maximum and logsumexp of one element are that element; a rank-0 array
    // has no axis.
    if (n >= 2) axisArg(vm, who, a, n, 1, 0);
    return numberResult(rank0Value(a, 0));
  }
  Vector* v = arrayArg(vm, who, a, 0);
  if (how == Reduce::Max && v->aux == 0) vm.runtimeError(std::string(who) + ": the array is empty");
  if (n < 2) return numberResult(reduceRun(how, v->items, v->aux, 1));
  Shape s = shapeOf(v);
  uint32_t axis = axisArg(vm, who, a, n, 1, v->rank);
  if (how == Reduce::Max && s[axis] == 0) vm.runtimeError(std::string(who) + ": the axis is empty");
  AxisSplit sp = splitAt(s, axis);
  Shape rs = s;
  rs.erase(rs.begin() + axis);
  std::vector<double> out(std::max<uint64_t>(sp.outer * sp.inner, 1));
  if (how == Reduce::Sum) {
    std::fill(out.begin(), out.end(), 0.0);
    for (uint64_t o = 0; o < sp.outer; ++o)
      for (uint64_t i = 0; i < sp.n; ++i) {
        const double* row = v->items + (o * sp.n + i) * sp.inner;
        double* dst = out.data() + o * sp.inner;
        for (uint64_t j = 0; j < sp.inner; ++j) dst[j] += row[j];
      }
  } else {
    for (uint64_t o = 0; o < sp.outer; ++o)
      for (uint64_t j = 0; j < sp.inner; ++j)
        out[o * sp.inner + j] = reduceRun(how, v->items + o * sp.n * sp.inner + j, sp.n, sp.inner);
  }
  return arrayOrNumber(vm, rs, out.data());
}

Value sum(VM& vm, Value* a, int n) { return reduce(vm, "sum", Reduce::Sum, a, n); }
Value arrayMax(VM& vm, Value* a, int n) { return reduce(vm, "array-max", Reduce::Max, a, n); }
Value logsumexp(VM& vm, Value* a, int n) {
  return reduce(vm, "logsumexp", Reduce::LogSumExp, a, n);
}

// (%argmax-mask a [axis]): 1 where a holds its maximum (the first, along the axis), 0
// elsewhere: where array-max's sensitivity goes.
Value argmaxMask(VM& vm, Value* a, int n) {
  if (rank0Arg(a, 0)) {
    if (n >= 2) axisArg(vm, "array-max", a, n, 1, 0);
    return Value::number(1);
  }
  Vector* v = arrayArg(vm, "array-max", a, 0);
  Vector* r = vm.makeArray(v->rank, arrayShape(v));
  std::fill(r->items, r->items + r->aux, 0.0);
  Shape s = shapeOf(v);
  AxisSplit sp;
  if (n < 2) {
    sp.n = v->aux;
  } else {
    sp = splitAt(s, axisArg(vm, "array-max", a, n, 1, v->rank));
  }
  for (uint64_t o = 0; o < sp.outer; ++o)
    for (uint64_t j = 0; j < sp.inner; ++j) {
      const double* x = v->items + o * sp.n * sp.inner + j;
      uint64_t best = 0;
      for (uint64_t i = 1; i < sp.n; ++i)
        if (x[i * sp.inner] > x[best * sp.inner] || std::isnan(x[i * sp.inner])) {
          best = i;
          if (std::isnan(x[i * sp.inner])) break;
        }
      if (sp.n) r->items[o * sp.n * sp.inner + best * sp.inner + j] = 1;
    }
  return Value::object(r);
}

// ---- indexing and structure ------------------------------------------------------------

// (slice a start end [axis]): the elements with index in [start, end) along the axis.
Value slice(VM& vm, Value* a, int n) {
  Vector* v = arrayArg(vm, "slice", a, 0);
  Shape s = shapeOf(v);
  uint32_t axis = axisArg(vm, "slice", a, n, 3, v->rank);
  uint32_t start = integerArg(vm, "slice", a, 1, uint64_t(s[axis]) + 1, "start");
  uint32_t end = integerArg(vm, "slice", a, 2, uint64_t(s[axis]) + 1, "end");
  if (end < start)
    vm.runtimeError("slice: end " + std::to_string(end) + " is before start " +
                    std::to_string(start));
  AxisSplit sp = splitAt(s, axis);
  Shape rs = s;
  rs[axis] = end - start;
  Vector* r = makeArray(vm, rs);
  uint64_t m = uint64_t(end - start) * sp.inner;
  for (uint64_t o = 0; o < sp.outer; ++o)
    std::copy(v->items + (o * sp.n + start) * sp.inner,
              v->items + (o * sp.n + start) * sp.inner + m, r->items + o * m);
  return Value::object(r);
}

// (%unslice g like start end [axis]): zeros of like's shape with g in [start, end) along
// the axis (slice's reverse).
Value unslice(VM& vm, Value* a, int n) {
  Vector* like = arrayArg(vm, "%unslice", a, 1);
  Shape s = shapeOf(like);
  uint32_t axis = axisArg(vm, "%unslice", a, n, 4, like->rank);
  uint32_t start = integerArg(vm, "%unslice", a, 2, uint64_t(s[axis]) + 1, "start");
  AxisSplit sp = splitAt(s, axis);
  Vector* r = makeArray(vm, s);
  std::fill(r->items, r->items + r->aux, 0.0);
  if (a[0].isZero()) return Value::object(r);
  Vector* g = arrayArg(vm, "%unslice", a, 0);
  Shape gs = shapeOf(g);
  uint64_t m = g->aux / std::max<uint64_t>(sp.outer, 1);
  if (gs.size() != s.size() || start + gs[axis] > s[axis])
    vm.runtimeError("%unslice: the shape " + shapeString(gs) + " does not fit in " +
                    shapeString(s));
  for (uint64_t o = 0; o < sp.outer; ++o)
    std::copy(g->items + o * m, g->items + (o + 1) * m, r->items + (o * sp.n + start) * sp.inner);
  return Value::object(r);
}

// The indices of gather and scatter-add: a vector (or a list) of integers below `limit`.
std::vector<uint32_t> indicesArg(VM& vm, const char* who, Value* a, int i, uint32_t limit) {
  std::vector<uint32_t> idx;
  Value v = untagged(unwrapAttached(a[i]));
  auto check = [&](double d) {
    if (!(d >= 0 && d < limit && d == std::floor(d)))
      vm.runtimeError(std::string(who) + ": index " + vm.show(Value::numberChecked(d), true) +
                      " is out of range for an axis of size " + std::to_string(limit));
    idx.push_back(static_cast<uint32_t>(d));
  };
  if (isArray(v)) {
    Vector* x = vm.dense(asArray(v));
    if (x->rank != 1) vm.typeError(who, i, "vector or list of indices", a[i]);
    for (uint32_t k = 0; k < x->aux; ++k) check(x->items[k]);
    return idx;
  }
  for (; isPair(v); v = asPair(v)->cdr) {
    Value e = untagged(asPair(v)->car);
    if (!e.isNumber()) vm.typeError(who, i, "vector or list of indices", a[i]);
    check(e.asNumber());
  }
  if (!v.isNil()) vm.typeError(who, i, "vector or list of indices", a[i]);
  return idx;
}

// (gather a indices [axis]): the slabs of a at the indices along the axis, in order.
Value gather(VM& vm, Value* a, int n) {
  Vector* v = arrayArg(vm, "gather", a, 0);
  Shape s = shapeOf(v);
  uint32_t axis = axisArg(vm, "gather", a, n, 2, v->rank);
  std::vector<uint32_t> idx = indicesArg(vm, "gather", a, 1, s[axis]);
  AxisSplit sp = splitAt(s, axis);
  Shape rs = s;
  rs[axis] = static_cast<uint32_t>(idx.size());
  Vector* r = makeArray(vm, rs);
  double* out = r->items;
  for (uint64_t o = 0; o < sp.outer; ++o)
    for (uint32_t k : idx) {
      const double* src = v->items + (o * sp.n + k) * sp.inner;
      out = std::copy(src, src + sp.inner, out);
    }
  return Value::object(r);
}

// (scatter-add shape indices values [axis]): zeros of the shape, with slab j of values
// added at index indices[j] along the axis (gather's reverse; repeated indices add up).
Value scatterAdd(VM& vm, Value* a, int n) {
  Shape s = shapeArg(vm, "scatter-add", a, 0);
  uint32_t axis = axisArg(vm, "scatter-add", a, n, 3, static_cast<uint32_t>(s.size()));
  std::vector<uint32_t> idx = indicesArg(vm, "scatter-add", a, 1, s[axis]);
  AxisSplit sp = splitAt(s, axis);
  Vector* r = makeArray(vm, s);
  std::fill(r->items, r->items + r->aux, 0.0);
  if (a[2].isZero()) return Value::object(r);
  Vector* v = arrayArg(vm, "scatter-add", a, 2);
  Shape want = s;
  want[axis] = static_cast<uint32_t>(idx.size());
  if (shapeOf(v) != want)
    vm.runtimeError("scatter-add: values of shape " + shapeString(shapeOf(v)) +
                    " do not match indices into shape " + shapeString(s) + " (expected " +
                    shapeString(want) + ")");
  const double* src = v->items;
  for (uint64_t o = 0; o < sp.outer; ++o)
    for (uint32_t k : idx) {
      double* dst = r->items + (o * sp.n + k) * sp.inner;
      for (uint64_t j = 0; j < sp.inner; ++j) dst[j] += src[j];
      src += sp.inner;
    }
  return Value::object(r);
}

// (concat a b [axis]): a then b along the axis (the other sizes equal).
Value concat(VM& vm, Value* a, int n) {
  Vector* x = arrayArg(vm, "concat", a, 0);
  Vector* y = arrayArg(vm, "concat", a, 1);
  Shape sx = shapeOf(x), sy = shapeOf(y);
  uint32_t axis = axisArg(vm, "concat", a, n, 2, x->rank);
  bool fits = sx.size() == sy.size();
  for (size_t k = 0; fits && k < sx.size(); ++k) fits = k == axis || sx[k] == sy[k];
  if (!fits)
    vm.runtimeError("concat: shapes " + shapeString(sx) + " and " + shapeString(sy) +
                    " do not join along axis " + std::to_string(axis));
  Shape rs = sx;
  rs[axis] = sx[axis] + sy[axis];
  if (uint64_t(x->aux) + y->aux > VM::kMaxArrayElements)
    vm.runtimeError("concat: more than 2^30 elements");
  Vector* r = makeArray(vm, rs);
  AxisSplit px = splitAt(sx, axis), py = splitAt(sy, axis);
  double* out = r->items;
  for (uint64_t o = 0; o < px.outer; ++o) {
    out = std::copy(x->items + o * px.n * px.inner, x->items + (o + 1) * px.n * px.inner, out);
    out = std::copy(y->items + o * py.n * py.inner, y->items + (o + 1) * py.n * py.inner, out);
  }
  return Value::object(r);
}

// (%stack list): arrays of one shape (or numbers) as the rows of an array one rank up.
Value stack(VM& vm, Value* a, int) {
  std::vector<Value> items;
  Value l = unwrapAttached(a[0]);
  for (; isPair(l); l = asPair(l)->cdr) items.push_back(unwrapAttached(asPair(l)->car));
  if (!l.isNil() || items.empty()) vm.typeError("stack", 0, "non-empty list of arrays", a[0]);
  Shape s = operandShape(items[0]);
  for (Value& v : items) {
    if (!v.isNumber() && !isArray(v)) {
      Value args[1] = {v};
      num(vm, "stack", args, 0);
    }
    if (isArray(v)) v = Value::object(vm.dense(asArray(v)));
    if (operandShape(v) != s)
      vm.runtimeError("stack: shapes " + shapeString(s) + " and " + shapeString(operandShape(v)) +
                      " differ");
  }
  Shape rs{static_cast<uint32_t>(items.size())};
  rs.insert(rs.end(), s.begin(), s.end());
  uint64_t total = 1;
  for (uint32_t d : rs) total *= d;
  if (total > VM::kMaxArrayElements) vm.runtimeError("stack: more than 2^30 elements");
  Vector* r = makeArray(vm, rs);
  double* out = r->items;
  for (Value v : items) {
    if (v.isNumber()) {
      *out++ = v.asNumber();
    } else {
      out = std::copy(asArray(v)->items, asArray(v)->items + asArray(v)->aux, out);
    }
  }
  return Value::object(r);
}

Value randomArray(VM& vm, Value* a, int) {
  Vector* r = makeArray(vm, shapeArg(vm, "random-array", a, 0));
  for (uint32_t i = 0; i < r->aux; ++i) r->items[i] = vm.random().real();
  return Value::object(r);
}

Value randomNormalArray(VM& vm, Value* a, int) {
  Vector* r = makeArray(vm, shapeArg(vm, "random-normal-array", a, 0));
  for (uint32_t i = 0; i < r->aux; ++i) r->items[i] = vm.random().normal();
  return Value::object(r);
}

// ---- forward rules (VM::fwdRuleApply) ----------------------------------------------
//
// The tangent of each procedure's result from its arguments' primals p and tangents t
// (the symbolic zero for an argument without one), computed with the natives
// themselves through callPrimitive, so that tangents carrying lower tags (nested
// forward derivatives) are taken apart in turn. Most of these procedures are linear in
// their array arguments (the others give shapes, indices and axes): the tangent is the
// procedure applied to the tangents. dot and outer are bilinear: the product rule.
// array-max and logsumexp have rules of their own; argmax-mask is piecewise constant.

Value callNative(VM& vm, const char* name, Value* a, int n) {
  Value f = vm.global(name);
  return vm.callPrimitive(static_cast<Native*>(f.asObject()), a, n);
}

// Linear jointly in the arguments of `linear` (a bit mask): zero tangents among them
// are made zeros shaped like their primals; none at all, no tangent.
template <unsigned Linear>
Value linearRule(VM& vm, Native* self, const Value* p, const Value* t, int n, Value) {
  Value a[8];
  bool any = false;
  for (int i = 0; i < n; ++i) {
    bool lin = (Linear >> i) & 1u;
    any = any || (lin && !t[i].isZero());
    a[i] = !lin ? p[i] : t[i].isZero() ? vm.zeroOf(p[i]) : t[i];
  }
  return any ? vm.callPrimitive(self, a, n) : Value::undefined();
}

// dot and outer: f(a', b) + f(a, b').
Value bilinearRule(VM& vm, Native* self, const Value* p, const Value* t, int, Value) {
  Value r = Value::undefined();
  if (!t[0].isZero()) {
    Value a[2] = {t[0], p[1]};
    r = vm.callPrimitive(self, a, 2);
  }
  if (!t[1].isZero()) {
    Value a[2] = {p[0], t[1]};
    Value s = vm.callPrimitive(self, a, 2);
    r = r.isUndefined() ? s : vm.arith(NativeId::Add, r, s);
  }
  return r;
}

Value noTangent(VM&, Native*, const Value*, const Value*, int, Value) { return Value::undefined(); }

// (sum (* a' w) axis...) with the weights w that the reduction gives each element.
Value weightedSum(VM& vm, const Value* p, const Value* t, int n, Value w) {
  Value a[2] = {vm.arith(NativeId::Mul, t[0], w), n > 1 ? p[1] : Value::nil()};
  return callNative(vm, "%sum", a, n);
}

// array-max: the tangent of the element that is the maximum (the first, as the reverse).
Value arrayMaxRule(VM& vm, Native*, const Value* p, const Value* t, int n, Value) {
  if (t[0].isZero()) return Value::undefined();
  Value a[2] = {p[0], n > 1 ? p[1] : Value::nil()};
  return weightedSum(vm, p, t, n, callNative(vm, "%argmax-mask", a, n));
}

// logsumexp: the softmax-weighted sum of the tangents, exp(a - y) with y put back along
// the reduced axis.
Value logsumexpRule(VM& vm, Native*, const Value* p, const Value* t, int n, Value y) {
  if (t[0].isZero()) return Value::undefined();
  Value yb = y;
  if (n > 1) {
    Value a0 = untagged(fwdPrimal(untagged(unwrapAttached(p[0]))));
    Shape s = shapeOf(arrayArg(vm, "logsumexp", &a0, 0));
    Value ax[2] = {p[0], p[1]};
    s[axisArg(vm, "logsumexp", ax, n, 1, static_cast<uint32_t>(s.size()))] = 1;
    Value r[2] = {y, shapeList(vm, s)};
    yb = callNative(vm, "%reshape", r, 2);
  }
  Value d = vm.arith(NativeId::Sub, p[0], yb);
  Value w = vm.callPrimitive(vm.builtin(NativeId::Exp), &d, 1);
  return weightedSum(vm, p, t, n, w);
}

void define(VM& vm, const char* name, NativeFn fn, int minArgs, int maxArgs, FwdRule rule,
            bool deep = false) {
  Native* n = vm.defineNative(name, fn, minArgs, maxArgs);
  n->fwdRule = rule;
  n->fwdDeep = deep;
  n->flags |= kDualRule;
}

}  // namespace

Value arrayBinary(VM& vm, NativeId id, Value x, Value y) { return binary(vm, binOf(id), x, y); }

Value arrayNary(VM& vm, NativeId id, Value* a, int n) {
  if (n == 1) {
    switch (id) {
      case NativeId::Sub:
        return binary(vm, Bin::Sub, Value::number(0), a[0]);
      case NativeId::Div:
        return binary(vm, Bin::Div, Value::number(1), a[0]);
      default:
        return unwrapAttached(a[0]);
    }
  }
  Value acc = binary(vm, binOf(id), a[0], a[1]);
  for (int i = 2; i < n; ++i) acc = binary(vm, binOf(id), acc, a[i]);
  return acc;
}

Value arrayUnary(VM& vm, double (*f)(double), Value x) {
  Vector* v = vm.dense(asArray(unwrapAttached(x)));
  Vector* r = vm.makeArray(v->rank, arrayShape(v));
  for (uint32_t i = 0; i < v->aux; ++i) r->items[i] = f(v->items[i]);
  return Value::object(r);
}

void openArrayPrimitives(Registrar& r) {
  VM& vm = r.vm;
  r.define(NativeId::SumTo, sumTo);
  r.define(NativeId::BroadcastTo, broadcastTo);
  r.define(NativeId::Unreduce, unreduce);
  r.define(NativeId::SensBack, sensBack);
  vm.defineNative("array?", arrayP, 1, 1);
  vm.defineNative("array-shape", arrayShapeOf, 1, 1);
  vm.defineNative("array-rank", arrayRank, 1, 1);
  vm.defineNative("array-size", arraySize, 1, 1);
  // With their forward rules (above); the reverse ones are the prelude's.
  define(vm, "%make-array", makeArrayOf, 2, 2, linearRule<0b10>);
  define(vm, "%list->array", listToArray, 1, 1, linearRule<0b1>, true);
  define(vm, "%array->list", arrayToList, 1, 1, linearRule<0b1>);
  define(vm, "%array-ref", arrayRef, 1, -1, linearRule<0b1>);
  define(vm, "%array-onehot", arrayOnehot, 2, -1, linearRule<0b10>);
  define(vm, "%reshape", reshape, 2, 2, linearRule<0b1>);
  define(vm, "%dot", dot, 2, 2, bilinearRule);
  define(vm, "%dot-tn", dotTransposed<true, false>, 2, 2, bilinearRule);
  define(vm, "%dot-nt", dotTransposed<false, true>, 2, 2, bilinearRule);
  define(vm, "%transpose", transpose, 1, 1, linearRule<0b1>);
  define(vm, "%outer", outer, 2, 2, bilinearRule);
  define(vm, "%sum", sum, 1, 2, linearRule<0b1>);
  define(vm, "%array-max", arrayMax, 1, 2, arrayMaxRule);
  define(vm, "%argmax-mask", argmaxMask, 1, 2, noTangent);
  define(vm, "%logsumexp", logsumexp, 1, 2, logsumexpRule);
  define(vm, "%slice", slice, 3, 4, linearRule<0b1>);
  define(vm, "%unslice", unslice, 4, 5, linearRule<0b1>);
  define(vm, "%gather", gather, 2, 3, linearRule<0b1>);
  define(vm, "%scatter-add", scatterAdd, 3, 4, linearRule<0b100>);
  define(vm, "%concat", concat, 2, 3, linearRule<0b11>);
  define(vm, "%stack", stack, 1, 1, linearRule<0b1>, true);
  vm.defineNative("random-array", randomArray, 1, 1);
  vm.defineNative("random-normal-array", randomNormalArray, 1, 1);
}

}  // namespace dlam::prim
