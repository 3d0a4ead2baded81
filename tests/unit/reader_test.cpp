// reader_test.cpp — unit tests for the reader (compiler/src/reader.cpp).
//
// Covers every literal kind, nesting, dotted lists, comments, the quote family,
// source locations, each syntax error with its location and `incomplete` flag, and
// inputs big enough (10^6 deep, 10^6 wide, 10 MB) to catch recursion and quadratic time.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dlam/syntax.h"

using dlam::Error;
using dlam::ErrorKind;
using dlam::Sx;
using dlam::SxArena;

namespace {

// Reads `src` into a fresh arena kept alive by the test fixture-like holder.
struct Read {
  std::unique_ptr<SxArena> arena = std::make_unique<SxArena>();
  std::vector<Sx*> data;
};

Read readAll(std::string_view src) {
  Read r;
  r.data = dlam::readAll(*r.arena, src, "test.dlam");
  return r;
}

// Prints small data back as text (recursive: only used on small test inputs).
std::string show(const Sx* x) {
  switch (x->kind) {
    case Sx::Number: {
      if (std::isnan(x->number)) return "+nan.0";
      if (std::isinf(x->number)) return x->number > 0 ? "+inf.0" : "-inf.0";
      char buf[64];
      snprintf(buf, sizeof buf, "%.17g", x->number);
      return buf;
    }
    case Sx::Bool:
      return x->boolean ? "#t" : "#f";
    case Sx::Symbol:
      return x->text;
    case Sx::String:
      return "\"" + x->text + "\"";
    case Sx::Char:
      return "#<char " + std::to_string(x->code) + ">";
    case Sx::Vector:
    case Sx::List: {
      std::string s = x->kind == Sx::Vector ? "#(" : "(";
      for (size_t i = 0; i < x->items.size(); ++i) {
        if (i) s += " ";
        s += show(x->items[i]);
      }
      if (x->tail) s += " . " + show(x->tail);
      return s + ")";
    }
  }
  return "?";
}

std::string showAll(std::string_view src) {
  Read r = readAll(src);
  std::string s;
  for (size_t i = 0; i < r.data.size(); ++i) {
    if (i) s += " | ";
    s += show(r.data[i]);
  }
  return s;
}

double number(std::string_view src) {
  Read r = readAll(src);
  EXPECT_EQ(r.data.size(), 1u) << src;
  EXPECT_EQ(r.data[0]->kind, Sx::Number) << src;
  return r.data[0]->number;
}

// The error raised by reading `src`; fails the test if there is none.
Error readError(std::string_view src) {
  try {
    readAll(src);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for: " << src;
  return Error(ErrorKind::Api, "none");
}

#define EXPECT_SYNTAX_ERROR(src, msg, line_, col_, incomplete_)             \
  do {                                                                      \
    Error e_ = readError(src);                                              \
    EXPECT_EQ(e_.kind, ErrorKind::Syntax) << (src);                         \
    EXPECT_NE(e_.message.find(msg), std::string::npos)                      \
        << "source: " << (src) << "\nmessage: " << e_.message;              \
    EXPECT_EQ(e_.file, "test.dlam");                                        \
    EXPECT_EQ(e_.loc.line, (line_)) << (src) << ": " << e_.message;         \
    EXPECT_EQ(e_.loc.col, (col_)) << (src) << ": " << e_.message;           \
    EXPECT_EQ(e_.incomplete, (incomplete_)) << (src) << ": " << e_.message; \
  } while (0)

}  // namespace

// ---- literals -------------------------------------------------------------

TEST(Reader, Empty) {
  EXPECT_TRUE(readAll("").data.empty());
  EXPECT_TRUE(readAll("  \n\t ; only a comment\n #| block |# #;(skipped)").data.empty());
}

TEST(Reader, Integers) {
  EXPECT_EQ(number("42"), 42);
  EXPECT_EQ(number("0"), 0);
  EXPECT_EQ(number("-7"), -7);
  EXPECT_EQ(number("+3"), 3);
  EXPECT_EQ(number("007"), 7);
  EXPECT_EQ(number("9007199254740993"), 9007199254740992.0);  // rounds like a double
}

TEST(Reader, Decimals) {
  EXPECT_EQ(number("-0.5"), -0.5);
  EXPECT_EQ(number(".5"), 0.5);
  EXPECT_EQ(number("-.25"), -0.25);
  EXPECT_EQ(number("1."), 1.0);
  EXPECT_EQ(number("0.1"), 0.1);
  EXPECT_EQ(number("1e-6"), 1e-6);
  EXPECT_EQ(number("1E3"), 1000);
  EXPECT_EQ(number("2.5e+2"), 250);
  EXPECT_EQ(number("1.e2"), 100);
  EXPECT_TRUE(std::signbit(number("-0")));
  EXPECT_TRUE(std::signbit(number("-0.0")));
}

TEST(Reader, OutOfRangeNumbers) {
  EXPECT_EQ(number("1e400"), INFINITY);
  EXPECT_EQ(number("-1e400"), -INFINITY);
  EXPECT_EQ(number("1e-400"), 0.0);
  EXPECT_TRUE(std::signbit(number("-1e-400")));
  EXPECT_EQ(number("0.000001e-99999999999999999999"), 0.0);
  EXPECT_EQ(number("123456e99999999999999999999"), INFINITY);
  EXPECT_EQ(number("0e99999"), 0.0);
  EXPECT_EQ(number("4e-320"), 4e-320);  // subnormal, still representable
}

TEST(Reader, SpecialNumbers) {
  EXPECT_EQ(number("+inf.0"), INFINITY);
  EXPECT_EQ(number("-inf.0"), -INFINITY);
  EXPECT_TRUE(std::isnan(number("+nan.0")));
  EXPECT_TRUE(std::isnan(number("-nan.0")));
}

TEST(Reader, RadixNumbers) {
  EXPECT_EQ(number("#x1F"), 31);
  EXPECT_EQ(number("#xff"), 255);
  EXPECT_EQ(number("#X-10"), -16);
  EXPECT_EQ(number("#b101"), 5);
  EXPECT_EQ(number("#o17"), 15);
  EXPECT_EQ(number("#d1.5"), 1.5);
  EXPECT_EQ(number("#xFFFFFFFFFFFFFFFF"), 18446744073709551615.0);
  EXPECT_EQ(number("#x10000000000000000"), 18446744073709551616.0);
}

TEST(Reader, SymbolsThatLookNumberish) {
  for (const char* s : {"+", "-", "...", "->x", "-x", "+a", ".foo", "..", "+.", "-.x", "inf", "nan",
                        "+inf", "a1", "x->y", "<="}) {
    Read r = readAll(s);
    ASSERT_EQ(r.data.size(), 1u) << s;
    EXPECT_EQ(r.data[0]->kind, Sx::Symbol) << s;
    EXPECT_EQ(r.data[0]->text, s);
  }
}

TEST(Reader, Booleans) {
  Read r = readAll("#t #f #true #false");
  ASSERT_EQ(r.data.size(), 4u);
  for (auto* d : r.data) EXPECT_EQ(d->kind, Sx::Bool);
  EXPECT_TRUE(r.data[0]->boolean);
  EXPECT_FALSE(r.data[1]->boolean);
  EXPECT_TRUE(r.data[2]->boolean);
  EXPECT_FALSE(r.data[3]->boolean);
}

TEST(Reader, Strings) {
  Read r = readAll(R"("hello" "" "a\nb\tc\\d\"e\rf" "\x41\x7a" "multi
line")");
  ASSERT_EQ(r.data.size(), 5u);
  for (auto* d : r.data) EXPECT_EQ(d->kind, Sx::String);
  EXPECT_EQ(r.data[0]->text, "hello");
  EXPECT_EQ(r.data[1]->text, "");
  EXPECT_EQ(r.data[2]->text, "a\nb\tc\\d\"e\rf");
  EXPECT_EQ(r.data[3]->text, "Az");
  EXPECT_EQ(r.data[4]->text, "multi\nline");
}

TEST(Reader, StringNulAndHexEscapes) {
  Read r = readAll(R"("a\0b\x00\xFF")");
  ASSERT_EQ(r.data.size(), 1u);
  EXPECT_EQ(r.data[0]->text, std::string("a\0b\0\xff", 5));
}

TEST(Reader, StringLineContinuation) {
  Read r = readAll("\"abc\\   \n    def\" \"x\\\r\ny\"");
  ASSERT_EQ(r.data.size(), 2u);
  EXPECT_EQ(r.data[0]->text, "abcdef");
  EXPECT_EQ(r.data[1]->text, "xy");
}

TEST(Reader, BarSymbols) {
  // R7RS |...|: any characters, the strings' escapes and \|; `|` is a delimiter.
  Read r = readAll(R"(|a b| || |x\|y\\z| |\x41;\x3bb;| |(do)| a|b c|d)");
  ASSERT_EQ(r.data.size(), 8u);
  for (auto* d : r.data) EXPECT_EQ(d->kind, Sx::Symbol);
  EXPECT_EQ(r.data[0]->text, "a b");
  EXPECT_EQ(r.data[1]->text, "");
  EXPECT_EQ(r.data[2]->text, "x|y\\z");
  EXPECT_EQ(r.data[3]->text, "A\xce\xbb");  // λ, as UTF-8
  EXPECT_EQ(r.data[4]->text, "(do)");
  EXPECT_EQ(r.data[5]->text, "a");
  EXPECT_EQ(r.data[6]->text, "b c");
  EXPECT_EQ(r.data[7]->text, "d");
  EXPECT_EQ(showAll("'|1|"), "(quote 1)");  // the symbol named 1 (shown by name)
  EXPECT_EQ(readAll("|1|").data[0]->kind, Sx::Symbol);
  EXPECT_SYNTAX_ERROR("x |abc", "unterminated |symbol|", 1u, 3u, true);
  EXPECT_SYNTAX_ERROR("|a\\qb|", "bad escape '\\q' in |symbol|", 1u, 3u, false);
  // Control characters, raw or escaped (the expander's own names hold them).
  EXPECT_SYNTAX_ERROR("|a\\x1;b|", "a |symbol| may not hold control characters (here 0x01)", 1u, 1u,
                      false);
  EXPECT_SYNTAX_ERROR("|a\tb|", "may not hold control characters (here 0x09)", 1u, 1u, false);
}

TEST(Reader, Utf8) {
  Read r = readAll("(λ \"héllo ✓ 😀\" café)");
  ASSERT_EQ(r.data.size(), 1u);
  Sx* l = r.data[0];
  ASSERT_EQ(l->items.size(), 3u);
  EXPECT_EQ(l->items[0]->text, "λ");
  EXPECT_EQ(l->items[1]->text, "héllo ✓ 😀");
  EXPECT_EQ(l->items[2]->text, "café");
  // Columns count code points: λ is one column wide.
  EXPECT_EQ(l->items[1]->loc.col, 4u);
  EXPECT_EQ(l->items[2]->loc.col, 16u);  // the string is 11 code points wide
}

TEST(Reader, SymbolsAreCaseSensitive) {
  Read r = readAll("Foo foo FOO |a| a.b x#y");
  ASSERT_EQ(r.data.size(), 6u);
  EXPECT_EQ(r.data[0]->text, "Foo");
  EXPECT_EQ(r.data[1]->text, "foo");
  EXPECT_EQ(r.data[2]->text, "FOO");
  EXPECT_EQ(r.data[3]->text, "a");  // |a| is the symbol a
  EXPECT_EQ(r.data[4]->text, "a.b");
  EXPECT_EQ(r.data[5]->text, "x#y");
}

TEST(Reader, Delimiters) {
  EXPECT_EQ(showAll("(a(b)c)"), "(a (b) c)");
  EXPECT_EQ(showAll("a\"s\"b"), "a | \"s\" | b");
  EXPECT_EQ(showAll("a;c\nb"), "a | b");
  EXPECT_EQ(showAll("a'b"), "a | (quote b)");
  EXPECT_EQ(showAll("1(2)"), "1 | (2)");
  EXPECT_EQ(showAll("#t(1)"), "#t | (1)");
}

// ---- lists ---------------------------------------------------------------

TEST(Reader, Lists) {
  EXPECT_EQ(showAll("()"), "()");
  EXPECT_EQ(showAll("[]"), "()");
  EXPECT_EQ(showAll("(1 2 3)"), "(1 2 3)");
  EXPECT_EQ(showAll("(let ([x 1] [y 2]) (+ x y))"), "(let ((x 1) (y 2)) (+ x y))");
  EXPECT_EQ(showAll("(a (b (c (d))) e)"), "(a (b (c (d))) e)");
  EXPECT_EQ(showAll("1 2 (3)"), "1 | 2 | (3)");
}

TEST(Reader, DottedLists) {
  Read r = readAll("(a b . c)");
  ASSERT_EQ(r.data.size(), 1u);
  Sx* l = r.data[0];
  EXPECT_EQ(l->kind, Sx::List);
  ASSERT_EQ(l->items.size(), 2u);
  ASSERT_NE(l->tail, nullptr);
  EXPECT_TRUE(l->tail->isSymbol("c"));
  EXPECT_EQ(l->tail->loc.col, 8u);
  EXPECT_EQ(showAll("(a . (b c))"), "(a . (b c))");
  EXPECT_EQ(showAll("[x . 1]"), "(x . 1)");
  EXPECT_EQ(showAll("(lambda (a . rest) a)"), "(lambda (a . rest) a)");
  EXPECT_EQ(showAll("(a . 'b)"), "(a . (quote b))");
  EXPECT_EQ(showAll("(a . #;x b #;y)"), "(a . b)");
  EXPECT_EQ(showAll("(a .5)"), "(a 0.5)");
  EXPECT_EQ(showAll("(a ... b)"), "(a ... b)");
  EXPECT_EQ(readAll("(a b)").data[0]->tail, nullptr);
}

// ---- comments ------------------------------------------------------------

TEST(Reader, Comments) {
  EXPECT_EQ(showAll("; c\n(a ; inner\n b) ; end"), "(a b)");
  EXPECT_EQ(showAll("#| block |# x"), "x");
  EXPECT_EQ(showAll("#| outer #| inner |# still comment |# y"), "y");
  EXPECT_EQ(showAll("(a #| in list |# b)"), "(a b)");
  EXPECT_EQ(showAll("a#b#"), "a#b#");          // `#` inside a symbol is a plain character
  EXPECT_EQ(showAll("a#|b|c"), "a# | b | c");  // `|` is a delimiter (R7RS): `a#`, |b|, c
  EXPECT_EQ(showAll("#|\n(\n|#\nz"), "z");
  EXPECT_EQ(showAll("x ;no newline at end"), "x");
}

TEST(Reader, DatumComments) {
  EXPECT_EQ(showAll("#;(a b) c"), "c");
  EXPECT_EQ(showAll("(a #;b c)"), "(a c)");
  EXPECT_EQ(showAll("(a #; #;b c d)"), "(a d)");
  EXPECT_EQ(showAll("#;'x y"), "y");
  EXPECT_EQ(showAll("'#;x y"), "(quote y)");
  EXPECT_EQ(showAll("(#;a)"), "()");
}

TEST(Reader, ShebangAndBom) {
  EXPECT_EQ(showAll("#!/usr/bin/env dlam\n(x)"), "(x)");
  Read r = readAll("\xEF\xBB\xBF(x)");
  ASSERT_EQ(r.data.size(), 1u);
  EXPECT_EQ(r.data[0]->loc.col, 1u);
}

// ---- quote forms ---------------------------------------------------------

TEST(Reader, QuoteForms) {
  EXPECT_EQ(showAll("'x"), "(quote x)");
  EXPECT_EQ(showAll("'(1 2)"), "(quote (1 2))");
  EXPECT_EQ(showAll("''x"), "(quote (quote x))");
  EXPECT_EQ(showAll("`(a ,b ,@c)"), "(quasiquote (a (unquote b) (unquote-splicing c)))");
  EXPECT_EQ(showAll("' x"), "(quote x)");
  EXPECT_EQ(showAll("'()"), "(quote ())");
  EXPECT_EQ(showAll("(f 'a 'b)"), "(f (quote a) (quote b))");
}

TEST(Reader, QuoteLocations) {
  Read r = readAll("  '(x)\n ,@y");
  ASSERT_EQ(r.data.size(), 2u);
  Sx* q = r.data[0];
  EXPECT_EQ(q->loc.line, 1u);
  EXPECT_EQ(q->loc.col, 3u);
  EXPECT_TRUE(q->items[0]->isSymbol("quote"));
  EXPECT_EQ(q->items[0]->loc.line, 1u);
  EXPECT_EQ(q->items[0]->loc.col, 3u);
  EXPECT_EQ(q->items[1]->loc.col, 4u);
  Sx* u = r.data[1];
  EXPECT_TRUE(u->items[0]->isSymbol("unquote-splicing"));
  EXPECT_EQ(u->items[0]->loc.line, 2u);
  EXPECT_EQ(u->items[0]->loc.col, 2u);
  EXPECT_EQ(u->items[1]->loc.col, 4u);
}

// ---- locations -----------------------------------------------------------

TEST(Reader, Locations) {
  Read r = readAll("(define (f x)\n  (+ x\t\"s\" 1.5))\n#t");
  ASSERT_EQ(r.data.size(), 2u);
  Sx* def = r.data[0];
  EXPECT_EQ(def->loc.line, 1u);
  EXPECT_EQ(def->loc.col, 1u);
  EXPECT_EQ(def->items[0]->loc.col, 2u);             // define
  EXPECT_EQ(def->items[1]->loc.col, 9u);             // (f x)
  EXPECT_EQ(def->items[1]->items[1]->loc.col, 12u);  // x
  Sx* body = def->items[2];
  EXPECT_EQ(body->loc.line, 2u);
  EXPECT_EQ(body->loc.col, 3u);
  EXPECT_EQ(body->items[0]->loc.col, 4u);   // +
  EXPECT_EQ(body->items[1]->loc.col, 6u);   // x
  EXPECT_EQ(body->items[2]->loc.col, 8u);   // "s" (the tab counts as 1)
  EXPECT_EQ(body->items[3]->loc.col, 12u);  // 1.5
  EXPECT_EQ(r.data[1]->loc.line, 3u);
  EXPECT_EQ(r.data[1]->loc.col, 1u);
}

TEST(Reader, LocationsAfterMultilineTokens) {
  Read r = readAll("\"a\nbc\" x #| \n\n |# y\r\nz");
  ASSERT_EQ(r.data.size(), 4u);
  EXPECT_EQ(r.data[1]->loc.line, 2u);
  EXPECT_EQ(r.data[1]->loc.col, 5u);
  EXPECT_EQ(r.data[2]->loc.line, 4u);
  EXPECT_EQ(r.data[2]->loc.col, 5u);
  EXPECT_EQ(r.data[3]->loc.line, 5u);
  EXPECT_EQ(r.data[3]->loc.col, 1u);
}

// ---- errors --------------------------------------------------------------

TEST(Reader, ErrorUnexpectedClose) {
  EXPECT_SYNTAX_ERROR(")", "unexpected ')'", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("(a)\n  ]", "unexpected ']'", 2u, 3u, false);
}

TEST(Reader, ErrorMismatched) {
  EXPECT_SYNTAX_ERROR("(a ]", "mismatched ']' for '('", 1u, 4u, false);
  EXPECT_SYNTAX_ERROR("[a\n (b) )", "mismatched ')' for '['", 2u, 6u, false);
}

TEST(Reader, ErrorUnterminatedList) {
  EXPECT_SYNTAX_ERROR("(a b", "unterminated list (opened here)", 1u, 1u, true);
  // The innermost open list is reported.
  EXPECT_SYNTAX_ERROR("(define (f)\n  (g x", "unterminated list", 2u, 3u, true);
  EXPECT_SYNTAX_ERROR("[", "unterminated list", 1u, 1u, true);
  EXPECT_SYNTAX_ERROR("(a .", "unterminated list", 1u, 1u, true);
  EXPECT_SYNTAX_ERROR("(a . b", "unterminated list", 1u, 1u, true);
  EXPECT_SYNTAX_ERROR("(a ; comment )", "unterminated list", 1u, 1u, true);
}

TEST(Reader, ErrorUnterminatedString) {
  EXPECT_SYNTAX_ERROR("  \"abc", "unterminated string", 1u, 3u, true);
  EXPECT_SYNTAX_ERROR("(x \"abc\\", "unterminated string", 1u, 4u, true);
  EXPECT_SYNTAX_ERROR("\"\\x4", "unterminated string", 1u, 1u, true);
  EXPECT_SYNTAX_ERROR("\"a\\  ", "unterminated string", 1u, 1u, true);
}

TEST(Reader, ErrorUnterminatedBlockComment) {
  EXPECT_SYNTAX_ERROR("x\n #| abc", "unterminated block comment", 2u, 2u, true);
  EXPECT_SYNTAX_ERROR("#| a #| b |# c", "unterminated block comment", 1u, 1u, true);
}

TEST(Reader, ErrorBadEscape) {
  EXPECT_SYNTAX_ERROR("\"ab\\q\"", "bad escape '\\q' in string", 1u, 4u, false);
  EXPECT_SYNTAX_ERROR("\"\\xZZ\"", "bad escape '\\x'", 1u, 2u, false);
  EXPECT_SYNTAX_ERROR("\"\\x4\"\"", "bad escape '\\x'", 1u, 2u, false);
  EXPECT_SYNTAX_ERROR("\"\\ x\"", "bad escape '\\ '", 1u, 2u, false);
  EXPECT_SYNTAX_ERROR("\"a\nb\\é\"", "bad escape '\\é'", 2u, 2u, false);
}

TEST(Reader, ErrorInvalidNumber) {
  EXPECT_SYNTAX_ERROR("1e", "invalid number '1e'", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("(f 1+)", "invalid number '1+'", 1u, 4u, false);
  EXPECT_SYNTAX_ERROR("1/2", "invalid number '1/2'", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("1.2.3", "invalid number", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("12abc", "invalid number", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("-5x", "invalid number", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR(".5.", "invalid number", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("1e+", "invalid number", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("#x", "invalid number '#x'", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("#xG", "invalid number", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("#b102", "invalid number", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("#x1.5", "invalid number", 1u, 1u, false);
}

TEST(Reader, ErrorMisplacedDot) {
  EXPECT_SYNTAX_ERROR(".", "unexpected '.'", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("(. c)", "unexpected '.'", 1u, 2u, false);
  EXPECT_SYNTAX_ERROR("(a . . b)", "unexpected '.'", 1u, 6u, false);
  EXPECT_SYNTAX_ERROR("(a ' . b)", "unexpected '.'", 1u, 6u, false);
  EXPECT_SYNTAX_ERROR("(a .)", "expected a datum after '.'", 1u, 4u, false);
  EXPECT_SYNTAX_ERROR("(a . b c)", "expected ')' after the dotted tail", 1u, 8u, false);
  EXPECT_SYNTAX_ERROR("(a . b (c", "expected ')' after the dotted tail", 1u, 8u, false);
  EXPECT_SYNTAX_ERROR("(a . b 'c)", "expected ')' after the dotted tail", 1u, 8u, false);
}

TEST(Reader, ErrorPrefixWithoutDatum) {
  EXPECT_SYNTAX_ERROR("'", "expected a datum after '''", 1u, 1u, true);
  EXPECT_SYNTAX_ERROR("(a\n ,@", "expected a datum after ',@'", 2u, 2u, true);
  EXPECT_SYNTAX_ERROR("'  ; comment", "expected a datum after", 1u, 1u, true);
  EXPECT_SYNTAX_ERROR("#;", "expected a datum after '#;'", 1u, 1u, true);
  EXPECT_SYNTAX_ERROR("(a ')", "expected a datum after '''", 1u, 4u, false);
  EXPECT_SYNTAX_ERROR("(a `)", "expected a datum after '`'", 1u, 4u, false);
  EXPECT_SYNTAX_ERROR("(a #;)", "expected a datum after '#;'", 1u, 4u, false);
}

TEST(Reader, ErrorBadCharacters) {
  EXPECT_SYNTAX_ERROR(std::string_view("a \0 b", 5), "unexpected character 0x00", 1u, 3u, false);
  EXPECT_SYNTAX_ERROR("(a\x01)", "unexpected character 0x01", 1u, 3u, false);
  EXPECT_SYNTAX_ERROR("\n\x7f", "unexpected character 0x7f", 2u, 1u, false);
  EXPECT_SYNTAX_ERROR("ab\xff", "invalid UTF-8", 1u, 3u, false);
  EXPECT_SYNTAX_ERROR("\xc3", "invalid UTF-8", 1u, 1u, false);            // truncated
  EXPECT_SYNTAX_ERROR("\xc0\x80", "invalid UTF-8", 1u, 1u, false);        // overlong
  EXPECT_SYNTAX_ERROR("x \xed\xa0\x80", "invalid UTF-8", 1u, 3u, false);  // surrogate
  EXPECT_SYNTAX_ERROR("\"ok \xfe\"", "invalid UTF-8", 1u, 5u, false);
  // Control bytes inside strings and comments are accepted.
  EXPECT_EQ(readAll("\"a\x01\" ; \x02\n").data[0]->text, "a\x01");
}

TEST(Reader, VectorLiterals) {
  EXPECT_EQ(showAll("#(1 2.5 -3)"), "#(1 2.5 -3)");
  EXPECT_EQ(showAll("(a #() '#(4))"), "(a #() (quote #(4)))");
  EXPECT_EQ(readAll("#(1 2)").data[0]->kind, Sx::Vector);
  EXPECT_SYNTAX_ERROR("#(1 a)", "a vector literal #(...) holds numbers only", 1u, 5u, false);
  EXPECT_SYNTAX_ERROR("#(1 #(2))", "holds numbers only", 1u, 5u, false);
  EXPECT_SYNTAX_ERROR("#(1 . 2)", "unexpected '.'", 1u, 5u, false);
  EXPECT_SYNTAX_ERROR("#(1 2", "unterminated list", 1u, 1u, true);
}

TEST(Reader, Characters) {
  // One character (a delimiter or a blank too), a name, or x and hex digits.
  EXPECT_EQ(showAll("#\\a #\\( #\\) #\\; #\\  #\\\" #\\x #\\X"),
            "#<char 97> | #<char 40> | #<char 41> | #<char 59> | #<char 32> | #<char 34> | "
            "#<char 120> | #<char 88>");
  EXPECT_EQ(showAll("(#\\space #\\newline #\\tab #\\null #\\delete #\\x3bb #\\x1F600)"),
            "(#<char 32> #<char 10> #<char 9> #<char 0> #<char 127> #<char 955> #<char 128512>)");
  EXPECT_EQ(showAll("#\\\u03bb #\\\u00e9(a)"), "#<char 955> | #<char 233> | (a)");
  EXPECT_EQ(showAll("'#\\a"), "(quote #<char 97>)");
  EXPECT_EQ(readAll("#\\\n").data[0]->code, 10u);
  EXPECT_SYNTAX_ERROR("(x #\\foo)", "unknown character name '#\\foo'", 1u, 4u, false);
  EXPECT_SYNTAX_ERROR("\n  #\\Space", "unknown character name '#\\Space'", 2u, 3u, false);
  EXPECT_SYNTAX_ERROR("#\\ab", "unknown character name '#\\ab'", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("#\\xd800", "bad character '#\\xd800' (not a Unicode scalar value)", 1u, 1u,
                      false);
  EXPECT_SYNTAX_ERROR("#\\x110000", "not a Unicode scalar value", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("#\\", "expected a character after '#\\'", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("#\\\x01", "unexpected character 0x01", 1u, 3u, false);
  EXPECT_SYNTAX_ERROR("#\\\xff", "invalid UTF-8 byte 0xff", 1u, 3u, false);
}

TEST(Reader, ErrorUnknownHash) {
  EXPECT_SYNTAX_ERROR("#[1 2)", "unknown '#' syntax '#['", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("(x #&a)", "unknown '#' syntax '#&a'", 1u, 4u, false);
  EXPECT_SYNTAX_ERROR("#tru", "unknown '#' syntax", 1u, 1u, false);
  EXPECT_SYNTAX_ERROR("#", "unknown '#' syntax '#'", 1u, 1u, false);
}

TEST(Reader, ErrorsFormatWithFileAndLocation) {
  Error e = readError("(a\n  ]");
  EXPECT_EQ(e.format().rfind("test.dlam:2:3: error: mismatched ']' for '('", 0), 0u) << e.format();
}

TEST(Reader, ReaderIsReusableAfterError) {
  readError("(a");
  EXPECT_EQ(showAll("(a)"), "(a)");
}

// ---- size ----------------------------------------------------------------

TEST(Reader, MillionDeepNesting) {
  const size_t n = 1000000;
  std::string src(n, '(');
  src.append(n, ')');
  auto start = std::chrono::steady_clock::now();
  Read r = readAll(src);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.data.size(), 1u);
  size_t depth = 0;
  for (Sx* x = r.data[0];; x = x->items[0]) {
    ASSERT_EQ(x->kind, Sx::List);
    ++depth;
    if (x->items.empty()) break;
    ASSERT_EQ(x->items.size(), 1u);
  }
  EXPECT_EQ(depth, n);
  EXPECT_LT(seconds, 20.0);
}

TEST(Reader, MillionDeepUnterminated) {
  const size_t n = 1000000;
  std::string src(n, '[');
  EXPECT_SYNTAX_ERROR(src, "unterminated list", 1u, static_cast<uint32_t>(n), true);
}

TEST(Reader, MillionDeepQuotes) {
  const size_t n = 1000000;
  std::string src(n, '\'');
  src += "x";
  Read r = readAll(src);
  ASSERT_EQ(r.data.size(), 1u);
  size_t depth = 0;
  Sx* x = r.data[0];
  while (x->kind == Sx::List) {
    ASSERT_EQ(x->items.size(), 2u);
    x = x->items[1];
    ++depth;
  }
  EXPECT_EQ(depth, n);
  EXPECT_TRUE(x->isSymbol("x"));
}

TEST(Reader, MillionElementList) {
  const size_t n = 1000000;
  std::string src = "(";
  for (size_t i = 0; i < n; ++i) {
    src += std::to_string(i % 1000);
    src += ' ';
  }
  src += ")";
  auto start = std::chrono::steady_clock::now();
  Read r = readAll(src);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.data.size(), 1u);
  ASSERT_EQ(r.data[0]->items.size(), n);
  EXPECT_EQ(r.data[0]->items[999999]->number, 999);
  EXPECT_EQ(r.data[0]->items[999999]->loc.col, static_cast<uint32_t>(src.size() - 4));
  EXPECT_LT(seconds, 20.0);
}

TEST(Reader, TenMegabytes) {
  std::string unit = "(define (f x) ; comment\n  \"some string\\n\" (+ x 1.5e3 #t 'sym))\n";
  std::string src;
  while (src.size() < 10 * 1000 * 1000) src += unit;
  auto start = std::chrono::steady_clock::now();
  Read r = readAll(src);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.data.size(), src.size() / unit.size());
  EXPECT_EQ(r.data.back()->loc.line, static_cast<uint32_t>(2 * r.data.size() - 1));
  EXPECT_LT(seconds, 20.0);
  std::string big = "\"" + std::string(10 * 1000 * 1000, 'a') + "\"";
  EXPECT_EQ(readAll(big).data[0]->text.size(), 10u * 1000 * 1000);
}

// readOne (for `read`): the first datum only, the bytes up to its end, locations that
// start where the text starts in its file, nothing for blanks and comments.
TEST(Reader, ReadOneStopsAfterTheFirstDatum) {
  SxArena arena;
  size_t used = 0;
  std::string_view text = "  ; c\n (a b) 42 rest";
  Sx* d = dlam::readOne(arena, text, "data.txt", {10, 5}, used);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(show(d), "(a b)");
  EXPECT_EQ(used, text.find(')') + 1);
  EXPECT_EQ(d->loc.line, 11u);  // the second line of the text, which starts at line 10
  EXPECT_EQ(d->loc.col, 2u);
  Sx* n = dlam::readOne(arena, text.substr(used), "data.txt", {11, 7}, used);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->number, 42);
  EXPECT_EQ(n->loc.col, 8u);
  EXPECT_EQ(used, 3u);
  EXPECT_EQ(dlam::readOne(arena, " ; only a comment\n #| and a block |# ", "d", {1, 1}, used),
            nullptr);
  try {
    dlam::readOne(arena, "\n  (a", "data.txt", {3, 1}, used);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(e.incomplete);
    EXPECT_EQ(e.file, "data.txt");
    EXPECT_EQ(e.loc.line, 4u);
    EXPECT_EQ(e.loc.col, 3u);
  }
}
