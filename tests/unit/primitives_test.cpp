// primitives_test.cpp — the C++ primitives of the language, called directly through
// their Native entries (no compiler involved): results, registration (ids and
// arities) and the wording of their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "dlam/builtins.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

using dlam::NativeId;
using dlam::Value;

class Primitives : public ::testing::Test {
 protected:
  Primitives() {
    dlam::openPrimitives(vm);
    vm.output = [this](std::string_view s) { out += s; };
  }

  dlam::Native* native(const char* name) {
    Value g = vm.global(name);
    EXPECT_TRUE(dlam::isNative(g)) << name << " is not registered";
    return dlam::isNative(g) ? dlam::asNative(g) : nullptr;
  }

  Value call(const char* name, std::initializer_list<Value> args) {
    std::vector<Value> a(args);
    dlam::Native* n = native(name);
    if (!n) return Value::undefined();
    return n->fn(vm, a.data(), static_cast<int>(a.size()));
  }

  // The written form of a call's result.
  std::string show(const char* name, std::initializer_list<Value> args) {
    return vm.show(call(name, args));
  }

  // The message of the error a call raises ("" if it raises none).
  std::string errorOf(const char* name, std::initializer_list<Value> args) {
    try {
      call(name, args);
    } catch (const dlam::Error& e) {
      return e.message;
    }
    return "";
  }

  double number(const char* name, std::initializer_list<Value> args) {
    Value v = call(name, args);
    EXPECT_TRUE(v.isNumber()) << name << " returned " << vm.show(v);
    return v.asNumber();
  }

  bool truth(const char* name, std::initializer_list<Value> args) {
    return call(name, args).isTruthy();
  }

  static Value n(double x) { return Value::number(x); }
  Value s(const char* text) { return vm.makeString(text); }
  Value sym(const char* name) { return vm.symbol(name); }
  Value list(std::initializer_list<Value> xs) { return vm.list(xs.begin(), xs.size()); }
  Value rev(Value v) { return Value::object(vm.makeRev(v)); }

  dlam::VM vm;
  std::string out;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- registration --------------------------------------------------------------

TEST_F(Primitives, RegisteredWithIdsAndArities) {
  struct Expect {
    const char* name;
    NativeId id;
    int min, max;
  };
  const Expect table[] = {
      {"+", NativeId::Add, 0, -1},
      {"-", NativeId::Sub, 1, -1},
      {"*", NativeId::Mul, 0, -1},
      {"/", NativeId::Div, 1, -1},
      {"expt", NativeId::Expt, 2, 2},
      {"sqrt", NativeId::Sqrt, 1, 1},
      {"log", NativeId::Log, 1, 2},
      {"atan", NativeId::Atan, 1, 2},
      {"min", NativeId::Min, 1, -1},
      {"round", NativeId::Round, 1, 1},
      {"=", NativeId::NumEq, 1, -1},
      {">=", NativeId::Ge, 1, -1},
      {"nan?", NativeId::NanP, 1, 1},
      {"cons", NativeId::Cons, 2, 2},
      {"cdddr", NativeId::Cdddr, 1, 1},
      {"list", NativeId::List, 0, -1},
      {"append", NativeId::Append, 0, -1},
      {"list-tail", NativeId::ListTail, 2, 2},
      {"equal?", NativeId::EqualP, 2, 2},
      {"iota", NativeId::Iota, 1, 3},
      {"display", NativeId::Display, 1, 2},
      {"newline", NativeId::Newline, 0, 1},
      {"error", NativeId::Error, 1, -1},
      {"assert", NativeId::Assert, 1, 2},
      {"number->string", NativeId::NumberToString, 1, 2},
      {"string-append", NativeId::StringAppend, 0, -1},
      {"eqv?", NativeId::EqvP, 2, 2},
      {"list?", NativeId::ListP, 1, 1},
  };
  for (const Expect& e : table) {
    dlam::Native* nat = native(e.name);
    ASSERT_NE(nat, nullptr);
    EXPECT_EQ(nat->id, static_cast<uint16_t>(e.id)) << e.name;
    EXPECT_EQ(nat->minArgs, e.min) << e.name;
    EXPECT_EQ(nat->maxArgs, e.max) << e.name;
  }
  for (const char* name :
       {"exp",   "log1p", "expm1",   "sin",      "cos",        "tan",       "asin",    "acos",
        "sinh",  "cosh",  "tanh",    "abs",      "max",        "floor",     "ceiling", "truncate",
        "<",     ">",     "<=",      "zero?",    "positive?",  "negative?", "car",     "cdr",
        "caar",  "cadr",  "cdar",    "cddr",     "caddr",      "length",    "reverse", "list-ref",
        "null?", "pair?", "number?", "boolean?", "procedure?", "string?",   "symbol?", "not",
        "eq?",   "write", "print",   "disasm",   "gc-stats"})
    EXPECT_NE(native(name), nullptr) << name;
  // Written in the prelude or registered by the interpreter, not here.
  for (const char* name : {"map", "for-each", "fold-left", "fold-right", "filter", "memv", "assoc",
                           "reduce", "remainder", "exact?"})
    EXPECT_TRUE(vm.global(name).isUndefined()) << name;
}

// Every entry of builtins.h's table is the global of its name, with the table's arity, and
// is the VM's builtin of its id (openPrimitives also checks that each was registered once).
TEST_F(Primitives, EveryTableEntryIsRegisteredUnderItsName) {
  for (size_t i = 1; i < static_cast<size_t>(NativeId::Count); ++i) {
    auto id = static_cast<NativeId>(i);
    const dlam::PrimitiveInfo& p = dlam::primitive(id);
    dlam::Native* nat = native(p.name);
    ASSERT_NE(nat, nullptr) << p.name;
    EXPECT_EQ(nat, vm.builtin(id)) << p.name;
    EXPECT_EQ(nat->id, i) << p.name;
    EXPECT_STREQ(nat->name, p.name);
    EXPECT_EQ(nat->minArgs, p.minArgs) << p.name;
    EXPECT_EQ(nat->maxArgs, p.maxArgs) << p.name;
  }
}

TEST_F(Primitives, KindsComeFromTheTable) {
  using dlam::isArithmetic;
  using dlam::isComparison;
  for (NativeId id :
       {NativeId::Add, NativeId::Div, NativeId::Sin, NativeId::Atan, NativeId::Truncate})
    EXPECT_TRUE(isArithmetic(id) && !isComparison(id)) << dlam::primitive(id).name;
  for (NativeId id : {NativeId::NumEq, NativeId::Ge, NativeId::ZeroP, NativeId::NanP})
    EXPECT_TRUE(isComparison(id) && !isArithmetic(id)) << dlam::primitive(id).name;
  for (NativeId id : {NativeId::None, NativeId::Cons, NativeId::Apply, NativeId::Plus,
                      NativeId::Sign, NativeId::VectorRef})
    EXPECT_FALSE(isArithmetic(id) || isComparison(id)) << static_cast<int>(id);
  EXPECT_EQ(dlam::kindOf(NativeId::StarJ), dlam::PrimKind::Ad);
  EXPECT_EQ(dlam::kindOf(NativeId::CheckXbar), dlam::PrimKind::Internal);
  EXPECT_EQ(dlam::kindOf(NativeId::Print), dlam::PrimKind::Io);
}

// ---- arithmetic ----------------------------------------------------------------

TEST_F(Primitives, Arithmetic) {
  EXPECT_EQ(number("+", {}), 0);
  EXPECT_EQ(number("+", {n(1), n(2), n(3.5)}), 6.5);
  EXPECT_EQ(number("*", {}), 1);
  EXPECT_EQ(number("*", {n(2), n(3), n(4)}), 24);
  EXPECT_EQ(number("-", {n(5)}), -5);
  EXPECT_EQ(number("-", {n(10), n(1), n(2)}), 7);
  EXPECT_EQ(show("-", {n(0)}), "-0");
  EXPECT_EQ(number("/", {n(4)}), 0.25);
  EXPECT_EQ(number("/", {n(12), n(2), n(3)}), 2);
  EXPECT_EQ(number("/", {n(1), n(0)}), kInf);
  EXPECT_EQ(number("/", {n(-1), n(0)}), -kInf);
  EXPECT_EQ(show("/", {n(0), n(0)}), "+nan.0");
  EXPECT_EQ(number("expt", {n(2), n(10)}), 1024);
  EXPECT_EQ(number("expt", {n(4), n(0.5)}), 2);
}

TEST_F(Primitives, MathFunctions) {
  EXPECT_EQ(number("sqrt", {n(9)}), 3);
  EXPECT_EQ(show("sqrt", {n(-1)}), "+nan.0");
  EXPECT_DOUBLE_EQ(number("exp", {n(1)}), std::exp(1.0));
  EXPECT_DOUBLE_EQ(number("log", {n(std::exp(2.0))}), 2);
  EXPECT_DOUBLE_EQ(number("log", {n(8), n(2)}), 3);
  EXPECT_EQ(number("log", {n(0)}), -kInf);
  EXPECT_DOUBLE_EQ(number("log1p", {n(1e-20)}), 1e-20);
  EXPECT_DOUBLE_EQ(number("expm1", {n(1e-20)}), 1e-20);
  EXPECT_DOUBLE_EQ(number("sin", {n(1)}), std::sin(1.0));
  EXPECT_DOUBLE_EQ(number("cos", {n(1)}), std::cos(1.0));
  EXPECT_DOUBLE_EQ(number("tan", {n(1)}), std::tan(1.0));
  EXPECT_DOUBLE_EQ(number("asin", {n(0.5)}), std::asin(0.5));
  EXPECT_DOUBLE_EQ(number("acos", {n(0.5)}), std::acos(0.5));
  EXPECT_DOUBLE_EQ(number("atan", {n(1)}), std::atan(1.0));
  EXPECT_DOUBLE_EQ(number("atan", {n(1), n(-1)}), std::atan2(1.0, -1.0));
  EXPECT_DOUBLE_EQ(number("sinh", {n(1)}), std::sinh(1.0));
  EXPECT_DOUBLE_EQ(number("cosh", {n(1)}), std::cosh(1.0));
  EXPECT_DOUBLE_EQ(number("tanh", {n(1)}), std::tanh(1.0));
  EXPECT_EQ(number("abs", {n(-3)}), 3);
  EXPECT_EQ(show("asin", {n(2)}), "+nan.0");
}

TEST_F(Primitives, Rounding) {
  EXPECT_EQ(number("floor", {n(-1.5)}), -2);
  EXPECT_EQ(number("ceiling", {n(-1.5)}), -1);
  EXPECT_EQ(number("truncate", {n(-1.7)}), -1);
  EXPECT_EQ(number("round", {n(2.5)}), 2);  // half to even
  EXPECT_EQ(number("round", {n(3.5)}), 4);
  EXPECT_EQ(number("round", {n(-2.5)}), -2);
  EXPECT_EQ(number("round", {n(2.6)}), 3);
}

TEST_F(Primitives, MinMax) {
  EXPECT_EQ(number("min", {n(3), n(1), n(2)}), 1);
  EXPECT_EQ(number("max", {n(3), n(1), n(7)}), 7);
  EXPECT_EQ(number("max", {n(4)}), 4);
  EXPECT_EQ(show("max", {n(1), Value::numberChecked(NAN), n(2)}), "+nan.0");
  EXPECT_EQ(show("min", {Value::numberChecked(NAN), n(2)}), "+nan.0");
  EXPECT_EQ(errorOf("max", {n(1), Value::numberChecked(NAN), s("x")}),
            "max: expected number as argument 3, got \"x\"");
}

TEST_F(Primitives, Comparisons) {
  EXPECT_TRUE(truth("<", {n(1), n(2), n(3)}));
  EXPECT_FALSE(truth("<", {n(1), n(3), n(2)}));
  EXPECT_TRUE(truth("<=", {n(1), n(1), n(2)}));
  EXPECT_TRUE(truth(">", {n(3), n(2)}));
  EXPECT_TRUE(truth(">=", {n(3), n(3)}));
  EXPECT_TRUE(truth("=", {n(2), n(2), n(2)}));
  EXPECT_FALSE(truth("=", {n(2), n(2), n(3)}));
  EXPECT_TRUE(truth("=", {n(0), n(-0.0)}));
  EXPECT_TRUE(truth("<", {n(1)}));
  EXPECT_FALSE(truth("=", {Value::numberChecked(NAN), Value::numberChecked(NAN)}));
  // Every argument is type-checked, even after the answer is known.
  EXPECT_EQ(errorOf("<", {n(2), n(1), sym("a")}), "<: expected number as argument 3, got a");
}

TEST_F(Primitives, NumericPredicates) {
  EXPECT_TRUE(truth("zero?", {n(-0.0)}));
  EXPECT_FALSE(truth("zero?", {n(1e-300)}));
  EXPECT_TRUE(truth("positive?", {n(2)}));
  EXPECT_FALSE(truth("positive?", {n(0)}));
  EXPECT_TRUE(truth("negative?", {n(-2)}));
  EXPECT_TRUE(truth("nan?", {Value::numberChecked(NAN)}));
  EXPECT_FALSE(truth("nan?", {n(kInf)}));
}

TEST_F(Primitives, NumericTypeErrors) {
  EXPECT_EQ(errorOf("+", {n(1), s("a")}), "+: expected number as argument 2, got \"a\"");
  EXPECT_EQ(errorOf("sin", {Value::nil()}), "sin: expected number as argument 1, got ()");
  EXPECT_EQ(errorOf("log", {n(1), Value::boolean(true)}),
            "log: expected number as argument 2, got #t");
  EXPECT_EQ(errorOf("zero?", {sym("x")}), "zero?: expected number as argument 1, got x");
}

TEST_F(Primitives, ReverseTaggedValuesAreALevelMixUp) {
  const std::string tail = ": got a reverse-tagged value (a derivative level was mixed up)";
  EXPECT_EQ(errorOf("sin", {rev(n(1))}), "sin" + tail);
  EXPECT_EQ(errorOf("+", {n(1), rev(n(1))}), "+" + tail);
  EXPECT_EQ(errorOf("<", {rev(n(1)), n(2)}), "<" + tail);
  EXPECT_EQ(errorOf("atan", {n(1), rev(n(2))}), "atan" + tail);
  EXPECT_EQ(errorOf("round", {rev(rev(n(2)))}), "round" + tail);
  EXPECT_EQ(errorOf("iota", {rev(n(2))}), "iota" + tail);
}

TEST_F(Primitives, AttachedValuesAndSymbolicZeroActAsTheirNumbers) {
  Value a = Value::object(vm.makeAttached(n(2), Value::nil()));
  EXPECT_EQ(number("*", {a, n(3)}), 6);
  EXPECT_EQ(number("+", {Value::zero(), n(3)}), 3);
  EXPECT_TRUE(truth("number?", {a}));
}

// ---- pairs and lists -------------------------------------------------------------

TEST_F(Primitives, PairsAndAccessors) {
  EXPECT_EQ(show("cons", {n(1), n(2)}), "(1 . 2)");
  Value l = list({list({n(1), n(2)}), n(3), n(4), n(5)});
  EXPECT_EQ(show("car", {l}), "(1 2)");
  EXPECT_EQ(show("cdr", {l}), "(3 4 5)");
  EXPECT_EQ(show("caar", {l}), "1");
  EXPECT_EQ(show("cadr", {l}), "3");
  EXPECT_EQ(show("cdar", {l}), "(2)");
  EXPECT_EQ(show("cddr", {l}), "(4 5)");
  EXPECT_EQ(show("caddr", {l}), "4");
  EXPECT_EQ(show("cdddr", {l}), "(5)");
}

TEST_F(Primitives, AccessorErrorsNameTheFunction) {
  EXPECT_EQ(errorOf("car", {n(5)}), "car: expected pair as argument 1, got 5");
  EXPECT_EQ(errorOf("cdr", {Value::nil()}), "cdr: expected pair as argument 1, got ()");
  EXPECT_EQ(errorOf("cadr", {list({n(1)})}),
            "cadr: expected list of at least 2 elements as argument 1, got (1)");
  EXPECT_EQ(errorOf("caar", {list({n(1)})}),
            "caar: expected pair whose car is a pair as argument 1, got (1)");
  EXPECT_EQ(errorOf("caddr", {list({n(1), n(2)})}),
            "caddr: expected list of at least 3 elements as argument 1, got (1 2)");
}

TEST_F(Primitives, ListAndLength) {
  EXPECT_EQ(show("list", {}), "()");
  EXPECT_EQ(show("list", {n(1), s("a"), sym("b")}), "(1 \"a\" b)");
  EXPECT_EQ(number("length", {Value::nil()}), 0);
  EXPECT_EQ(number("length", {list({n(1), n(2), n(3)})}), 3);
  EXPECT_EQ(errorOf("length", {vm.cons(n(1), n(2))}),
            "length: expected list as argument 1, got (1 . 2)");
  EXPECT_EQ(errorOf("length", {n(3)}), "length: expected list as argument 1, got 3");
}

TEST_F(Primitives, Append) {
  EXPECT_EQ(show("append", {}), "()");
  EXPECT_EQ(show("append", {n(7)}), "7");
  Value tail = list({n(3), n(4)});
  Value r = call("append", {list({n(1)}), Value::nil(), list({n(2)}), tail});
  EXPECT_EQ(vm.show(r), "(1 2 3 4)");
  EXPECT_EQ(dlam::asPair(dlam::asPair(r)->cdr)->cdr, tail);  // the last list is shared
  EXPECT_EQ(show("append", {list({n(1)}), n(2)}), "(1 . 2)");
  EXPECT_EQ(errorOf("append", {n(1), list({n(2)})}), "append: expected list as argument 1, got 1");
  EXPECT_EQ(errorOf("append", {list({n(1)}), vm.cons(n(1), n(2)), Value::nil()}),
            "append: expected list as argument 2, got (1 . 2)");
}

TEST_F(Primitives, Reverse) {
  EXPECT_EQ(show("reverse", {Value::nil()}), "()");
  EXPECT_EQ(show("reverse", {list({n(1), n(2), n(3)})}), "(3 2 1)");
  EXPECT_EQ(errorOf("reverse", {vm.cons(n(1), n(2))}),
            "reverse: expected list as argument 1, got (1 . 2)");
}

TEST_F(Primitives, ListRefAndListTail) {
  Value l = list({n(10), n(11), n(12)});
  EXPECT_EQ(show("list-ref", {l, n(0)}), "10");
  EXPECT_EQ(show("list-ref", {l, n(2)}), "12");
  EXPECT_EQ(show("list-tail", {l, n(1)}), "(11 12)");
  EXPECT_EQ(show("list-tail", {l, n(3)}), "()");
  EXPECT_EQ(show("list-tail", {n(5), n(0)}), "5");
  EXPECT_EQ(errorOf("list-ref", {l, n(3)}),
            "list-ref: index 3 out of range for a list of length 3");
  EXPECT_EQ(errorOf("list-tail", {l, n(4)}),
            "list-tail: index 4 out of range for a list of length 3");
  EXPECT_EQ(errorOf("list-ref", {l, n(-1)}),
            "list-ref: expected non-negative integer as argument 2, got -1");
  EXPECT_EQ(errorOf("list-ref", {l, n(1.5)}),
            "list-ref: expected non-negative integer as argument 2, got 1.5");
  EXPECT_EQ(errorOf("list-ref", {l, s("x")}), "list-ref: expected number as argument 2, got \"x\"");
  EXPECT_EQ(errorOf("list-ref", {vm.cons(n(1), n(2)), n(1)}),
            "list-ref: expected list as argument 1, got (1 . 2)");
}

TEST_F(Primitives, MillionElementListsAreIterative) {
  constexpr int kLength = 1000000;
  Value l = call("iota", {n(kLength)});
  EXPECT_EQ(number("length", {l}), kLength);
  Value r = call("reverse", {l});
  EXPECT_EQ(number("car", {r}), kLength - 1);
  Value both = call("append", {l, r});
  EXPECT_EQ(number("length", {both}), 2 * kLength);
  EXPECT_EQ(number("list-ref", {both, n(kLength)}), kLength - 1);
  EXPECT_TRUE(truth("equal?", {l, call("reverse", {r})}));
  // A million-deep nesting compares without recursion too.
  Value a = Value::nil(), b = Value::nil();
  for (int i = 0; i < kLength; ++i) {
    a = vm.cons(a, Value::nil());
    b = vm.cons(b, Value::nil());
  }
  EXPECT_TRUE(truth("equal?", {a, b}));
}

// ---- predicates ----------------------------------------------------------------

TEST_F(Primitives, TypePredicates) {
  dlam::Proto* proto = vm.makeProto();
  Value closure = Value::object(vm.makeClosure(proto, 0));
  Value pair = vm.cons(n(1), Value::nil());
  EXPECT_TRUE(truth("null?", {Value::nil()}));
  EXPECT_FALSE(truth("null?", {pair}));
  EXPECT_TRUE(truth("pair?", {pair}));
  EXPECT_FALSE(truth("pair?", {Value::nil()}));
  EXPECT_TRUE(truth("number?", {n(1)}));
  EXPECT_FALSE(truth("number?", {s("1")}));
  // A reverse-tagged number is the image of a number under *j: still a number.
  EXPECT_TRUE(truth("number?", {rev(n(1))}));
  EXPECT_TRUE(truth("boolean?", {Value::boolean(false)}));
  EXPECT_FALSE(truth("boolean?", {Value::nil()}));
  EXPECT_TRUE(truth("procedure?", {closure}));
  EXPECT_TRUE(truth("procedure?", {vm.global("car")}));
  EXPECT_TRUE(truth("procedure?", {Value::object(vm.makeAttached(closure, Value::nil()))}));
  EXPECT_FALSE(truth("procedure?", {Value::object(vm.makeAttached(n(1), Value::nil()))}));
  EXPECT_FALSE(truth("procedure?", {sym("car")}));
  EXPECT_TRUE(truth("string?", {s("")}));
  EXPECT_FALSE(truth("string?", {sym("a")}));
  EXPECT_TRUE(truth("symbol?", {sym("a")}));
  EXPECT_FALSE(truth("symbol?", {s("a")}));
  EXPECT_TRUE(truth("not", {Value::boolean(false)}));
  EXPECT_FALSE(truth("not", {Value::nil()}));
  EXPECT_FALSE(truth("not", {n(0)}));
  EXPECT_TRUE(truth("list?", {Value::nil()}));
  EXPECT_TRUE(truth("list?", {list({n(1), rev(n(2))})}));
  EXPECT_FALSE(truth("list?", {vm.cons(n(1), n(2))}));
  EXPECT_FALSE(truth("list?", {n(1)}));
}

TEST_F(Primitives, EqAndEqual) {
  Value p = list({n(1), n(2)});
  EXPECT_TRUE(truth("eq?", {p, p}));
  EXPECT_FALSE(truth("eq?", {p, list({n(1), n(2)})}));
  EXPECT_TRUE(truth("eq?", {sym("a"), sym("a")}));
  EXPECT_TRUE(truth("eq?", {n(2.5), n(2.5)}));
  EXPECT_TRUE(truth("eq?", {n(0), n(-0.0)}));
  EXPECT_TRUE(truth("eq?", {Value::nil(), Value::nil()}));
  EXPECT_FALSE(truth("eq?", {s("a"), s("a")}));
  EXPECT_TRUE(truth("eq?", {rev(rev(n(3))), rev(rev(n(3)))}));
  EXPECT_FALSE(truth("eq?", {rev(n(3)), rev(n(4))}));
  EXPECT_FALSE(truth("eq?", {rev(n(3)), n(3)}));
  // As the EQP opcode: a NaN is eq? to any NaN (though = to nothing), and to no number.
  EXPECT_TRUE(truth("eq?", {Value::numberChecked(NAN), Value::numberChecked(NAN)}));
  EXPECT_FALSE(truth("eq?", {Value::numberChecked(NAN), n(0)}));
  EXPECT_TRUE(truth("eq?", {rev(Value::numberChecked(NAN)), rev(Value::numberChecked(NAN))}));

  // eqv? is eq? (numbers are doubles compared by value).
  for (Value a : {p, sym("a"), n(2.5), n(0), Value::nil(), s("a"), rev(n(3))})
    for (Value b : {p, sym("a"), n(2.5), n(-0.0), Value::nil(), s("a"), rev(n(3)), n(3)})
      EXPECT_EQ(truth("eqv?", {a, b}), truth("eq?", {a, b})) << vm.show(a) << " " << vm.show(b);
  EXPECT_TRUE(truth("eqv?", {Value::numberChecked(NAN), Value::numberChecked(NAN)}));

  EXPECT_TRUE(truth("equal?", {p, list({n(1), n(2)})}));
  EXPECT_FALSE(truth("equal?", {p, list({n(1), n(2), n(3)})}));
  EXPECT_TRUE(truth("equal?", {list({s("ab"), list({sym("x")}), vm.cons(n(1), n(2))}),
                               list({s("ab"), list({sym("x")}), vm.cons(n(1), n(2))})}));
  EXPECT_FALSE(truth("equal?", {s("ab"), s("ac")}));
  EXPECT_FALSE(truth("equal?", {n(1), s("1")}));
  EXPECT_TRUE(truth("equal?", {list({rev(n(1))}), list({rev(n(1))})}));
  dlam::Vector* v1 = vm.makeVector(2);
  dlam::Vector* v2 = vm.makeVector(2);
  // Through a pointer: items is declared with one element (the object is allocated
  // for its length), which clang's -Warray-bounds would flag for items[1].
  double* e1 = v1->items;
  double* e2 = v2->items;
  e1[0] = e2[0] = 1;
  e1[1] = e2[1] = 2;
  EXPECT_TRUE(truth("equal?", {Value::object(v1), Value::object(v2)}));
  e2[1] = 3;
  EXPECT_FALSE(truth("equal?", {Value::object(v1), Value::object(v2)}));
}

// ---- strings and iota ---------------------------------------------------------------

TEST_F(Primitives, NumberToString) {
  EXPECT_EQ(vm.show(call("number->string", {n(6)}), false), "6");
  EXPECT_EQ(vm.show(call("number->string", {n(0.1)}), false), "0.1");
  EXPECT_EQ(vm.show(call("number->string", {n(-kInf)}), false), "-inf.0");
  EXPECT_EQ(vm.show(call("number->string", {n(255), n(16)}), false), "ff");
  EXPECT_EQ(vm.show(call("number->string", {n(-5), n(2)}), false), "-101");
  EXPECT_EQ(vm.show(call("number->string", {n(1.5), n(10)}), false), "1.5");
  EXPECT_TRUE(dlam::isString(call("number->string", {n(1)})));
  EXPECT_EQ(errorOf("number->string", {s("1")}),
            "number->string: expected number as argument 1, got \"1\"");
  EXPECT_EQ(errorOf("number->string", {n(1), n(37)}),
            "number->string: expected radix between 2 and 36 as argument 2, got 37");
  EXPECT_EQ(errorOf("number->string", {n(1.5), n(2)}),
            "number->string: only integers can be written in radix 2, got 1.5");
}

TEST_F(Primitives, StringAppend) {
  EXPECT_EQ(vm.show(call("string-append", {}), true), "\"\"");
  EXPECT_EQ(vm.show(call("string-append", {s("ab"), s(""), s("c")}), false), "abc");
  EXPECT_EQ(errorOf("string-append", {s("a"), n(1)}),
            "string-append: expected string as argument 2, got 1");
}

TEST_F(Primitives, Iota) {
  EXPECT_EQ(show("iota", {n(0)}), "()");
  EXPECT_EQ(show("iota", {n(4)}), "(0 1 2 3)");
  EXPECT_EQ(show("iota", {n(3), n(1)}), "(1 2 3)");
  EXPECT_EQ(show("iota", {n(3), n(0), n(0.1)}), "(0 0.1 0.2)");
  EXPECT_EQ(show("iota", {n(3), n(5), n(-2)}), "(5 3 1)");
  EXPECT_EQ(errorOf("iota", {n(-1)}), "iota: expected non-negative integer as argument 1, got -1");
  EXPECT_EQ(errorOf("iota", {n(2.5)}),
            "iota: expected non-negative integer as argument 1, got 2.5");
}

// ---- output and errors ----------------------------------------------------------------

TEST_F(Primitives, Output) {
  Value l = list({s("a\nb"), n(1)});
  EXPECT_TRUE(call("display", {l}).isVoid());
  EXPECT_TRUE(call("newline", {}).isVoid());
  EXPECT_TRUE(call("write", {l}).isVoid());
  EXPECT_TRUE(call("print", {s("x")}).isVoid());
  EXPECT_TRUE(call("display", {s("")}).isVoid());
  EXPECT_EQ(out, "(a\nb 1)\n(\"a\\nb\" 1)x\n");
}

TEST_F(Primitives, Error) {
  EXPECT_EQ(errorOf("error", {s("bad thing")}), "bad thing");
  EXPECT_EQ(errorOf("error", {s("bad:"), n(1), s("two"), list({sym("x")})}), "bad: 1 \"two\" (x)");
  EXPECT_EQ(errorOf("error", {sym("oops"), n(2)}), "oops 2");
  try {
    call("error", {s("m")});
    FAIL() << "error returned";
  } catch (const dlam::Error& e) {
    EXPECT_EQ(e.kind, dlam::ErrorKind::Runtime);
  }
}

TEST_F(Primitives, Assert) {
  EXPECT_TRUE(call("assert", {n(0)}).isVoid());
  EXPECT_TRUE(call("assert", {Value::nil(), s("never")}).isVoid());
  EXPECT_EQ(errorOf("assert", {Value::boolean(false)}), "assertion failed");
  EXPECT_EQ(errorOf("assert", {Value::boolean(false), s("x must be positive")}),
            "assertion failed: x must be positive");
}

TEST_F(Primitives, DisasmAndGcStats) {
  EXPECT_EQ(errorOf("disasm", {vm.global("car")}),
            "disasm: expected compiled procedure as argument 1, got #<procedure car>");
  dlam::Proto* proto = vm.makeProto();
  proto->name = "f";
  EXPECT_TRUE(call("disasm", {Value::object(vm.makeClosure(proto, 0))}).isVoid());
  Value stats = call("gc-stats", {});
  EXPECT_EQ(number("length", {stats}), 5);
  EXPECT_GT(number("car", {stats}), 0);
  EXPECT_GT(number("cadr", {stats}), 0);
  // The bytes allocated in all grow by what is allocated, whatever is collected.
  double total = number("list-ref", {stats, Value::number(4)});
  EXPECT_GE(total, number("cadr", {stats}));
  for (int i = 0; i < 10000; ++i) call("cons", {Value::number(i), Value::nil()});
  vm.collectGarbage();
  Value after = call("gc-stats", {});
  double grown = number("list-ref", {after, Value::number(4)}) - total;
  EXPECT_GE(grown, 10000 * 32) << "10000 pairs of 32 bytes";
  EXPECT_LT(number("cadr", {after}), total + grown - 10000 * 32) << "the pairs were collected";
}

}  // namespace

namespace {

// The standard ports live in globals whose names start with \001, which no symbol a
// program reads begins with by accident. (They were once written "\x01current-...",
// which C++ reads as the hex escape \x1c followed by "urrent-...".)
TEST(HiddenPortNames, StartWithTheControlCharacterOneAndTheWholeName) {
  dlam::VM vm;
  dlam::openStdlib(vm);
  for (const char* name : {"current-input-port", "current-output-port", "current-error-port",
                           "standard-output-port", "eof-object"}) {
    std::string hidden = std::string(1, '\001') + name;
    dlam::Symbol* s = vm.findSymbol(hidden);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_FALSE(s->global.isUndefined()) << name;
  }
}

}  // namespace
