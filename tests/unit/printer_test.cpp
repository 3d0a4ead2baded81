// printer_test.cpp — VM::show on every kind of value: the number formats of
// the printed forms, display versus write, and structures too deep for C++ recursion.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "dlam/vm.h"

namespace {

using dlam::Value;

std::string num(dlam::VM& vm, double x) { return vm.show(Value::number(x)); }

TEST(Printer, IntegersPrintWithoutPoint) {
  dlam::VM vm;
  EXPECT_EQ(num(vm, 6), "6");
  EXPECT_EQ(num(vm, -3), "-3");
  EXPECT_EQ(num(vm, 0), "0");
  EXPECT_EQ(num(vm, 123456789012), "123456789012");
  EXPECT_EQ(num(vm, 9007199254740992.0), "9007199254740992");
  EXPECT_EQ(num(vm, 1e20), "100000000000000000000");
  EXPECT_EQ(num(vm, -1e20), "-100000000000000000000");
}

TEST(Printer, NegativeZero) {
  dlam::VM vm;
  EXPECT_EQ(num(vm, -0.0), "-0");
}

TEST(Printer, LargeIntegersUseExponent) {
  dlam::VM vm;
  EXPECT_EQ(num(vm, 1e21), "1e+21");
  EXPECT_EQ(num(vm, -1e21), "-1e+21");
  EXPECT_EQ(num(vm, 1e300), "1e+300");
  EXPECT_EQ(num(vm, 1.5e22), "1.5e+22");
}

TEST(Printer, FractionsAreShortestRoundTrip) {
  dlam::VM vm;
  EXPECT_EQ(num(vm, 0.1), "0.1");
  EXPECT_EQ(num(vm, -2.5), "-2.5");
  EXPECT_EQ(num(vm, 1e-06), "1e-06");
  EXPECT_EQ(num(vm, 0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(num(vm, 1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(num(vm, 5e-324), "5e-324");
  for (double x : {M_PI, std::exp(1.0), 1.0 / 7, 1e-300, 123.456, 6.02214076e23}) {
    std::string s = num(vm, x);
    EXPECT_EQ(std::stod(s), x) << s;
  }
}

TEST(Printer, NonFinite) {
  dlam::VM vm;
  EXPECT_EQ(vm.show(Value::numberChecked(std::nan(""))), "+nan.0");
  EXPECT_EQ(num(vm, std::numeric_limits<double>::infinity()), "+inf.0");
  EXPECT_EQ(num(vm, -std::numeric_limits<double>::infinity()), "-inf.0");
}

TEST(Printer, Immediates) {
  dlam::VM vm;
  EXPECT_EQ(vm.show(Value::boolean(true)), "#t");
  EXPECT_EQ(vm.show(Value::boolean(false)), "#f");
  EXPECT_EQ(vm.show(Value::nil()), "()");
  EXPECT_EQ(vm.show(Value::voidValue()), "#<void>");
  EXPECT_EQ(vm.show(Value::undefined()), "#<undefined>");
  EXPECT_EQ(vm.show(Value::zero()), "0");
}

TEST(Printer, Lists) {
  dlam::VM vm;
  Value xs[] = {Value::number(1), Value::number(2), Value::number(3)};
  EXPECT_EQ(vm.show(vm.list(xs, 3)), "(1 2 3)");
  EXPECT_EQ(vm.show(vm.cons(Value::number(1), Value::number(2))), "(1 . 2)");
  EXPECT_EQ(vm.show(vm.cons(Value::number(1), vm.cons(Value::number(2), Value::number(3)))),
            "(1 2 . 3)");
  EXPECT_EQ(vm.show(vm.cons(Value::nil(), Value::nil())), "(())");
  Value inner = vm.list(xs + 1, 2);
  Value nested[] = {vm.list(xs, 1), inner, Value::nil()};
  EXPECT_EQ(vm.show(vm.list(nested, 3)), "((1) (2 3) ())");
  Value dottedInner = vm.cons(vm.cons(Value::number(1), Value::number(2)), Value::number(3));
  EXPECT_EQ(vm.show(dottedInner), "((1 . 2) . 3)");
}

TEST(Printer, QuoteIsNotAbbreviated) {
  dlam::VM vm;
  Value q[] = {vm.symbol("quote"), vm.symbol("x")};
  EXPECT_EQ(vm.show(vm.list(q, 2)), "(quote x)");
}

TEST(Printer, StringsDisplayAndWrite) {
  dlam::VM vm;
  Value s = vm.makeString("a \"q\" \\ b\n\tc\r");
  EXPECT_EQ(vm.show(s, false), "a \"q\" \\ b\n\tc\r");
  EXPECT_EQ(vm.show(s, true), "\"a \\\"q\\\" \\\\ b\\n\\tc\\r\"");
  Value xs[] = {s, vm.symbol("sym")};
  EXPECT_EQ(vm.show(vm.list(xs, 2), true), "(\"a \\\"q\\\" \\\\ b\\n\\tc\\r\" sym)");
  EXPECT_EQ(vm.show(vm.makeString(""), true), "\"\"");
  EXPECT_EQ(vm.show(vm.makeString(""), false), "");
}

TEST(Printer, Symbols) {
  dlam::VM vm;
  EXPECT_EQ(vm.show(vm.symbol("hello-world?"), true), "hello-world?");
  EXPECT_EQ(vm.show(vm.symbol("+"), false), "+");
}

TEST(Printer, Procedures) {
  dlam::VM vm;
  dlam::Proto* named = vm.makeProto();
  named->name = "square";
  EXPECT_EQ(vm.show(Value::object(vm.makeClosure(named, 0))), "#<procedure square>");
  dlam::Proto* anon = vm.makeProto();
  EXPECT_EQ(vm.show(Value::object(vm.makeClosure(anon, 2))), "#<procedure>");
  dlam::Native* n = vm.makeNative("car", nullptr, 1, 1);
  EXPECT_EQ(vm.show(Value::object(n)), "#<procedure car>");
  // A foreign function is a Native-shaped object with its own tag.
  dlam::Native* f = vm.makeNative("cos", nullptr, 1, 1);
  f->type = dlam::ObjType::Foreign;
  EXPECT_EQ(vm.show(Value::object(f)), "#<foreign cos>");
}

TEST(Printer, ReverseTaggedAndAttached) {
  dlam::VM vm;
  Value r = Value::object(vm.makeRev(Value::number(3)));
  EXPECT_EQ(vm.show(r), "#<rev 3>");
  EXPECT_EQ(vm.show(Value::object(vm.makeRev(r))), "#<rev #<rev 3>>");
  Value xs[] = {r, Value::number(1.5)};
  EXPECT_EQ(vm.show(vm.list(xs, 2)), "(#<rev 3> 1.5)");
  Value a =
      Value::object(vm.makeAttached(vm.cons(Value::number(1), Value::nil()), Value::number(9)));
  EXPECT_EQ(vm.show(a), "(1)");
}

TEST(Printer, Vectors) {
  dlam::VM vm;
  dlam::Vector* v = vm.makeVector(3);
  double* items = v->items;  // allocated for 3 (declared with 1: see Vector)
  items[0] = 1;
  items[1] = 2.5;
  items[2] = -0.0;
  EXPECT_EQ(vm.show(Value::object(v)), "#(1 2.5 -0)");
  EXPECT_EQ(vm.show(Value::object(vm.makeVector(0))), "#()");
}

TEST(Printer, MillionDeepNestingIsIterative) {
  dlam::VM vm;
  constexpr int kDepth = 1000000;
  Value v = Value::nil();
  for (int i = 0; i < kDepth; ++i) v = vm.cons(v, Value::nil());
  std::string s = vm.show(v);
  ASSERT_EQ(s.size(), 2u * kDepth + 2);
  EXPECT_EQ(s.substr(0, 4), "((((");
  EXPECT_EQ(s.substr(kDepth - 1, 4), "(())");
  EXPECT_EQ(s.back(), ')');
}

TEST(Printer, MillionElementList) {
  dlam::VM vm;
  constexpr int kLength = 1000000;
  Value v = Value::nil();
  for (int i = 0; i < kLength; ++i) v = vm.cons(Value::number(7), v);
  std::string s = vm.show(v);
  ASSERT_EQ(s.size(), 2u * kLength + 1);
  EXPECT_EQ(s.substr(0, 6), "(7 7 7");
}

TEST(Printer, DeepReverseTagsAndDottedTails) {
  dlam::VM vm;
  constexpr int kDepth = 200000;
  Value r = Value::number(1);
  for (int i = 0; i < kDepth; ++i) r = Value::object(vm.makeRev(r));
  std::string s = vm.show(r);
  EXPECT_EQ(s.size(), 7u * kDepth + 1);
  // A long list of dotted pairs with an improper tail.
  Value d = Value::number(0);
  for (int i = 0; i < kDepth; ++i) d = vm.cons(vm.cons(Value::number(1), Value::number(2)), d);
  s = vm.show(d);
  EXPECT_EQ(s.substr(0, 16), "((1 . 2) (1 . 2)");
  EXPECT_EQ(s.substr(s.size() - 12), "(1 . 2) . 0)");
}

}  // namespace
