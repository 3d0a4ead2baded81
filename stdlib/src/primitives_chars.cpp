// primitives_chars.cpp — characters: char?, char->integer, integer->char, the
// comparisons char=? char<? char>? char<=? char>=?, the classes char-alphabetic?
// char-numeric? char-whitespace? char-upper-case? char-lower-case?, digit-value, and
// the case maps char-upcase and char-downcase (also used by string-upcase and
// string-downcase).
//
// A character is an immediate Value (value.h): a code point. The classes and case maps
// follow Unicode's simple (one character to one) mappings for the scripts in the
// tables below (Latin and its extensions, Greek, Cyrillic, Armenian, full-width Latin;
// letters also of Hebrew, Arabic, Devanagari, Thai, Georgian, Hangul, kana and CJK), not
// the whole Unicode database: a character outside them is no letter and its own case.
// Whitespace is Unicode's White_Space property, in full.
#include <string>

#include "dlam/lexical.h"
#include "primitives.h"

namespace dlam::prim {

namespace {

// Upper-case letters [lo, hi], every `step`-th from lo, whose lower case is c + delta.
struct CaseRange {
  uint32_t lo, hi;
  int32_t delta;
  uint32_t step;
};

constexpr CaseRange kCaseRanges[] = {
    {0x41, 0x5A, 32, 1},     {0xC0, 0xD6, 32, 1},     {0xD8, 0xDE, 32, 1},
    {0x100, 0x12E, 1, 2},    {0x132, 0x136, 1, 2},    {0x139, 0x147, 1, 2},
    {0x14A, 0x176, 1, 2},    {0x178, 0x178, -121, 1}, {0x179, 0x17D, 1, 2},
    {0x1CD, 0x1DB, 1, 2},    {0x1DE, 0x1EE, 1, 2},    {0x1F8, 0x21E, 1, 2},
    {0x222, 0x232, 1, 2},    {0x386, 0x386, 38, 1},   {0x388, 0x38A, 37, 1},
    {0x38C, 0x38C, 64, 1},   {0x38E, 0x38F, 63, 1},   {0x391, 0x3A1, 32, 1},
    {0x3A3, 0x3AB, 32, 1},   {0x3D8, 0x3EE, 1, 2},    {0x400, 0x40F, 80, 1},
    {0x410, 0x42F, 32, 1},   {0x460, 0x480, 1, 2},    {0x48A, 0x4BE, 1, 2},
    {0x4C0, 0x4C0, 15, 1},   {0x4C1, 0x4CD, 1, 2},    {0x4D0, 0x52E, 1, 2},
    {0x531, 0x556, 48, 1},   {0x1E00, 0x1E94, 1, 2},  {0x1EA0, 0x1EFE, 1, 2},
    {0xFF21, 0xFF3A, 32, 1},
};

// The mappings that go one way only (their inverse is another character's).
struct OneWay {
  uint32_t from, to;
};
constexpr OneWay kUpcaseOnly[] = {
    {0xB5, 0x39C},   // micro sign -> capital mu
    {0x131, 0x49},   // dotless i -> I
    {0x17F, 0x53},   // long s -> S
    {0x3C2, 0x3A3},  // final sigma -> capital sigma
};
constexpr OneWay kDowncaseOnly[] = {
    {0x130, 0x69},   // I with dot above -> i
    {0x1E9E, 0xDF},  // capital sharp s -> sharp s
};

bool inRange(const CaseRange& r, uint32_t upper) {
  return upper >= r.lo && upper <= r.hi && (upper - r.lo) % r.step == 0;
}

// Letters beyond the case tables, as [lo, hi] ranges in order.
struct Span {
  uint32_t lo, hi;
};
constexpr Span kLetters[] = {
    {0x41, 0x5A},     {0x61, 0x7A},     {0xAA, 0xAA},     {0xB5, 0xB5},     {0xBA, 0xBA},
    {0xC0, 0xD6},     {0xD8, 0xF6},     {0xF8, 0x2C1},    {0x2C6, 0x2D1},   {0x2E0, 0x2E4},
    {0x370, 0x374},   {0x376, 0x377},   {0x37A, 0x37D},   {0x37F, 0x37F},   {0x386, 0x386},
    {0x388, 0x38A},   {0x38C, 0x38C},   {0x38E, 0x3A1},   {0x3A3, 0x3F5},   {0x3F7, 0x481},
    {0x48A, 0x52F},   {0x531, 0x556},   {0x560, 0x588},   {0x5D0, 0x5EA},   {0x620, 0x64A},
    {0x671, 0x6D3},   {0x904, 0x939},   {0xE01, 0xE30},   {0x10A0, 0x10FF}, {0x1100, 0x11FF},
    {0x1E00, 0x1FBC}, {0x3041, 0x3096}, {0x30A1, 0x30FA}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF},
    {0xAC00, 0xD7A3}, {0xF900, 0xFAFF}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x20000, 0x2A6DF},
};

// Decimal digits (Unicode's Nd) of the scripts above: each span is 0 to 9.
constexpr Span kDigits[] = {{0x30, 0x39},   {0x660, 0x669}, {0x6F0, 0x6F9},
                            {0x966, 0x96F}, {0xE50, 0xE59}, {0xFF10, 0xFF19}};

constexpr Span kWhitespaceChars[] = {
    {0x09, 0x0D},     {0x20, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};

template <size_t N>
const Span* spanOf(const Span (&spans)[N], uint32_t c) {
  for (const Span& s : spans)
    if (c >= s.lo && c <= s.hi) return &s;
  return nullptr;
}

bool isLetter(uint32_t c) {
  return spanOf(kLetters, c) || upcaseChar(c) != c || downcaseChar(c) != c;
}

// ---- the primitives -----------------------------------------------------------

Value charP(VM&, Value* a, int) { return Value::boolean(unwrapAttached(a[0]).isChar()); }

Value charToInteger(VM& vm, Value* a, int) {
  return Value::number(charArg(vm, "char->integer", a, 0));
}

// (integer->char n): n a Unicode scalar value (0 to #x10FFFF, not a surrogate).
Value integerToChar(VM& vm, Value* a, int) {
  Value v = untagged(unwrapAttached(a[0]));  // (tagged in differentiated code)
  double n = v.isNumber() ? v.asNumber() : -1;
  if (!(n >= 0 && n <= 0x10FFFF && n == static_cast<uint32_t>(n)) ||
      !isScalarValue(static_cast<uint32_t>(n)))
    vm.typeError("integer->char", 0, "Unicode scalar value (0 to #x10FFFF, not #xD800 to #xDFFF)",
                 a[0]);
  return Value::character(static_cast<uint32_t>(n));
}

// (char=? c1 c2 ...) and the others: whether every neighbouring pair is in that order
// (by code point).
template <int kWhich>
Value charCompare(VM& vm, Value* a, int n) {
  static constexpr const char* kNames[] = {"char=?", "char<?", "char>?", "char<=?", "char>=?"};
  bool holds = true;
  uint32_t prev = charArg(vm, kNames[kWhich], a, 0);
  for (int i = 1; i < n; ++i) {
    uint32_t c = charArg(vm, kNames[kWhich], a, i);  // every argument checked
    holds = holds && (kWhich == 0   ? prev == c
                      : kWhich == 1 ? prev < c
                      : kWhich == 2 ? prev > c
                      : kWhich == 3 ? prev <= c
                                    : prev >= c);
    prev = c;
  }
  return Value::boolean(holds);
}

template <const char* kName, bool (*kTest)(uint32_t)>
Value charClass(VM& vm, Value* a, int) {
  return Value::boolean(kTest(charArg(vm, kName, a, 0)));
}

bool isNumeric(uint32_t c) { return spanOf(kDigits, c) != nullptr; }
bool isUpper(uint32_t c) { return downcaseChar(c) != c; }
bool isLower(uint32_t c) { return upcaseChar(c) != c; }

template <const char* kName, uint32_t (*kMap)(uint32_t)>
Value charMap(VM& vm, Value* a, int) {
  return Value::character(kMap(charArg(vm, kName, a, 0)));
}

// (digit-value c): the value of a decimal digit, else #f.
Value digitValue(VM& vm, Value* a, int) {
  uint32_t c = charArg(vm, "digit-value", a, 0);
  const Span* s = spanOf(kDigits, c);
  return s ? Value::number(c - s->lo) : Value::boolean(false);
}

constexpr char kAlphabetic[] = "char-alphabetic?";
constexpr char kNumeric[] = "char-numeric?";
constexpr char kWhitespace[] = "char-whitespace?";
constexpr char kUpperCase[] = "char-upper-case?";
constexpr char kLowerCase[] = "char-lower-case?";
constexpr char kUpcase[] = "char-upcase";
constexpr char kDowncase[] = "char-downcase";

}  // namespace

uint32_t charArg(VM& vm, const char* who, const Value* args, int i) {
  Value v = unwrapAttached(args[i]);
  if (!v.isChar()) vm.typeError(who, i, "character", args[i]);
  return v.asChar();
}

uint32_t upcaseChar(uint32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  for (const OneWay& m : kUpcaseOnly)
    if (m.from == c) return m.to;
  for (const CaseRange& r : kCaseRanges) {
    uint32_t upper = static_cast<uint32_t>(static_cast<int64_t>(c) - r.delta);
    if (inRange(r, upper)) return upper;
  }
  return c;
}

uint32_t downcaseChar(uint32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  for (const OneWay& m : kDowncaseOnly)
    if (m.from == c) return m.to;
  for (const CaseRange& r : kCaseRanges)
    if (inRange(r, c)) return static_cast<uint32_t>(static_cast<int64_t>(c) + r.delta);
  return c;
}

bool isWhitespaceChar(uint32_t c) { return spanOf(kWhitespaceChars, c) != nullptr; }

void openCharPrimitives(Registrar& r) {
  VM& vm = r.vm;
  vm.defineNative("char?", charP, 1, 1);
  vm.defineNative("char->integer", charToInteger, 1, 1);
  vm.defineNative("integer->char", integerToChar, 1, 1);
  vm.defineNative("char=?", charCompare<0>, 1, -1);
  vm.defineNative("char<?", charCompare<1>, 1, -1);
  vm.defineNative("char>?", charCompare<2>, 1, -1);
  vm.defineNative("char<=?", charCompare<3>, 1, -1);
  vm.defineNative("char>=?", charCompare<4>, 1, -1);
  vm.defineNative("char-alphabetic?", charClass<kAlphabetic, isLetter>, 1, 1);
  vm.defineNative("char-numeric?", charClass<kNumeric, isNumeric>, 1, 1);
  vm.defineNative("char-whitespace?", charClass<kWhitespace, isWhitespaceChar>, 1, 1);
  vm.defineNative("char-upper-case?", charClass<kUpperCase, isUpper>, 1, 1);
  vm.defineNative("char-lower-case?", charClass<kLowerCase, isLower>, 1, 1);
  vm.defineNative("char-upcase", charMap<kUpcase, upcaseChar>, 1, 1);
  vm.defineNative("char-downcase", charMap<kDowncase, downcaseChar>, 1, 1);
  vm.defineNative("digit-value", digitValue, 1, 1);
}

}  // namespace dlam::prim
