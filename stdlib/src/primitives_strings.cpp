// primitives_strings.cpp — the string procedures over characters: string-ref,
// substring, string-copy, string, make-string, string->list, list->string,
// string-split, string-join, string-index (of a character), string-contains, string-prefix?,
// string-suffix?, string-upcase, string-downcase, string-trim (and -left, -right),
// string-length. (string-append, the comparisons and the conversions to numbers and
// symbols are primitives_lists.cpp's; string-for-each and string-map the prelude's.)
//
// A string holds UTF-8, and an index counts characters (lexical.h's decodeChar, by
// which a byte of ill-formed UTF-8 is one character too). A string that is all ASCII
// is flagged so once found out (kAscii, object.h): its indices are byte offsets, O(1);
// in another string, finding index k walks the characters before it from the last
// index looked up in that string, or from its start (VM::charCursor).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dlam/lexical.h"
#include "primitives.h"

namespace dlam::prim {

namespace {

String* stringObj(VM& vm, const char* who, const Value* a, int i) {
  Value s = unwrapAttached(a[i]);
  if (!isString(s)) vm.typeError(who, i, "string", a[i]);
  return asString(s);
}

// Whether every byte of s is ASCII (found once, then kept in its flags).
bool isAscii(String* s) {
  if (s->flags & kAsciiKnown) return s->flags & kAscii;
  bool ascii = true;
  std::string_view v = s->view();
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, v.data() + i, 8);
    if (w & 0x8080808080808080ull) {
      ascii = false;
      break;
    }
  }
  for (; ascii && i < v.size(); ++i) ascii = static_cast<unsigned char>(v[i]) < 0x80;
  s->flags |= static_cast<uint16_t>(kAsciiKnown | (ascii ? kAscii : 0));
  return ascii;
}

// The number of characters of v.
size_t countChars(std::string_view v) {
  size_t n = 0;
  for (size_t i = 0, len; i < v.size(); i += len, ++n)
    decodeChar(v.data() + i, v.data() + v.size(), len);
  return n;
}

// The VM's cursor into s (vm.h): kept if it is at s, else moved to its start.
VM::CharCursor& cursorAt(VM& vm, String* s) {
  if (vm.charCursor.string != s) vm.charCursor = VM::CharCursor{s, 0, 0, SIZE_MAX};
  return vm.charCursor;
}

size_t charLength(VM& vm, String* s) {
  if (isAscii(s)) return s->length();
  VM::CharCursor& cur = cursorAt(vm, s);
  if (cur.length == SIZE_MAX) cur.length = cur.index + countChars(s->view().substr(cur.offset));
  return cur.length;
}

// A character index argument: a non-negative integer (untagged in differentiated code).
size_t indexArg(VM& vm, const char* who, const Value* a, int i) {
  Value v = untagged(fwdPrimal(unwrapAttached(a[i])));
  double k = v.isNumber() ? v.asNumber() : -1;
  if (!(k >= 0) || k != std::trunc(k) || k > 9007199254740992.0)
    vm.typeError(who, i, "non-negative integer", a[i]);
  return static_cast<size_t>(k);
}

[[noreturn]] void rangeError(VM& vm, const char* who, size_t k, String* s) {
  vm.runtimeError(std::string(who) + ": index " + std::to_string(k) +
                  " out of range for a string of length " + std::to_string(charLength(vm, s)));
}

// The byte offset of character k of s (k may be the length: the end), or an error. In a
// string that is not all ASCII, the walk starts at the VM's cursor when that is at or
// before k, and leaves the cursor at k.
size_t byteOffset(VM& vm, const char* who, String* s, size_t k) {
  std::string_view v = s->view();
  if (isAscii(s)) {
    if (k > v.size()) rangeError(vm, who, k, s);
    return k;
  }
  VM::CharCursor& cur = cursorAt(vm, s);
  size_t n = 0, i = 0, len;
  if (cur.index <= k) n = cur.index, i = cur.offset;
  for (; n < k; ++n) {
    if (i == v.size()) rangeError(vm, who, k, s);
    decodeChar(v.data() + i, v.data() + v.size(), len);
    i += len;
  }
  cur.index = k;
  cur.offset = i;
  return i;
}

// The bytes of s from character a[first] (default 0) to character a[first + 1] (default
// the end), as substring, string-copy and string->list take them.
std::string_view charRange(VM& vm, const char* who, String* s, const Value* a, int n, int first) {
  size_t from = n > first ? indexArg(vm, who, a, first) : 0;
  size_t begin = byteOffset(vm, who, s, from);
  if (n <= first + 1) return s->view().substr(begin);
  size_t to = indexArg(vm, who, a, first + 1);
  if (to < from)
    vm.runtimeError(std::string(who) + ": end index " + std::to_string(to) +
                    " is before start index " + std::to_string(from));
  // The end counted on from the start (so the string is walked once).
  std::string_view v = s->view();
  if (isAscii(s)) return v.substr(begin, byteOffset(vm, who, s, to) - begin);
  size_t end = begin;
  for (size_t k = from, len; k < to; ++k) {
    if (end == v.size()) rangeError(vm, who, to, s);
    decodeChar(v.data() + end, v.data() + v.size(), len);
    end += len;
  }
  return v.substr(begin, end - begin);
}

// Calls f(code point) for each character of v.
template <class F>
void forEachChar(std::string_view v, F f) {
  for (size_t i = 0, len; i < v.size(); i += len)
    f(decodeChar(v.data() + i, v.data() + v.size(), len));
}

// A list of values made back to front from `items`.
Value listOf(VM& vm, const std::vector<Value>& items) {
  return vm.list(items.data(), items.size());
}

// ---- the primitives -----------------------------------------------------------

// (string-length s): the number of characters.
Value stringLength(VM& vm, Value* a, int) {
  return Value::number(static_cast<double>(charLength(vm, stringObj(vm, "string-length", a, 0))));
}

// (string-ref s k)
Value stringRef(VM& vm, Value* a, int) {
  String* s = stringObj(vm, "string-ref", a, 0);
  size_t k = indexArg(vm, "string-ref", a, 1);
  size_t i = byteOffset(vm, "string-ref", s, k);
  if (i == s->length()) rangeError(vm, "string-ref", k, s);
  size_t len;
  return Value::character(decodeChar(s->chars + i, s->chars + s->length(), len));
}

// (substring s start [end]), (string-copy s [start [end]])
template <const char* kName>
Value copyRange(VM& vm, Value* a, int n) {
  return vm.makeString(charRange(vm, kName, stringObj(vm, kName, a, 0), a, n, 1));
}

// (string c ...): the string of the characters.
Value string(VM& vm, Value* a, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) appendChar(out, charArg(vm, "string", a, i));
  return vm.makeString(out);
}

// (make-string k [c]): k copies of c (default: a space).
Value makeString(VM& vm, Value* a, int n) {
  size_t k = indexArg(vm, "make-string", a, 0);
  std::string one;
  appendChar(one, n == 2 ? charArg(vm, "make-string", a, 1) : ' ');
  if (k > (size_t(1) << 32) / one.size()) vm.runtimeError("make-string: string too long");
  // The text is built before the string is allocated: past the heap limit, it is not built.
  uint64_t limit = vm.config().heapLimitMb << 20;
  if (limit && k * one.size() > limit)
    vm.limitError("heap limit exceeded (" + std::to_string(vm.config().heapLimitMb) + " MB)");
  std::string out;
  out.reserve(k * one.size());
  for (size_t i = 0; i < k; ++i) out += one;
  return vm.makeString(out);
}

// (string->list s [start [end]])
Value stringToList(VM& vm, Value* a, int n) {
  String* s = stringObj(vm, "string->list", a, 0);
  std::vector<Value> chars;
  forEachChar(charRange(vm, "string->list", s, a, n, 1),
              [&](uint32_t c) { chars.push_back(Value::character(c)); });
  return listOf(vm, chars);
}

// (list->string l): l a list of characters.
Value listToString(VM& vm, Value* a, int) {
  std::string out;
  Value l = unwrapAttached(a[0]);
  for (; isPair(l); l = unwrapAttached(asPair(l)->cdr)) {
    Value c = unwrapAttached(asPair(l)->car);
    if (!c.isChar()) vm.typeError("list->string", 0, "list of characters", a[0]);
    appendChar(out, c.asChar());
  }
  if (!l.isNil()) vm.typeError("list->string", 0, "list of characters", a[0]);
  return vm.makeString(out);
}

// A separator argument: a character or a non-empty string, as its bytes.
std::string separatorArg(VM& vm, const char* who, const Value* a, int i) {
  Value v = unwrapAttached(a[i]);
  std::string sep;
  if (v.isChar())
    appendChar(sep, v.asChar());
  else if (isString(v) && asString(v)->length() > 0)
    sep = asString(v)->view();
  else
    vm.typeError(who, i, "character or non-empty string", a[i]);
  return sep;
}

// (string-split s sep): the fields of s between the separators (a character or a
// string): n separators give n + 1 fields, empty ones included.
Value stringSplit(VM& vm, Value* a, int) {
  std::string_view s = stringArg(vm, "string-split", a, 0);
  std::string sep = separatorArg(vm, "string-split", a, 1);
  std::vector<Value> fields;
  size_t from = 0;
  for (;;) {
    size_t at = s.find(sep, from);
    fields.push_back(vm.makeString(s.substr(from, at == std::string_view::npos ? at : at - from)));
    if (at == std::string_view::npos) break;
    from = at + sep.size();
  }
  return listOf(vm, fields);
}

// (string-join strings [sep]): the strings with sep (a string, default " ") between them.
Value stringJoin(VM& vm, Value* a, int n) {
  std::string_view sep = n == 2 ? stringArg(vm, "string-join", a, 1) : std::string_view(" ");
  std::string out;
  Value l = unwrapAttached(a[0]);
  for (bool first = true; isPair(l); l = unwrapAttached(asPair(l)->cdr), first = false) {
    Value s = unwrapAttached(asPair(l)->car);
    if (!isString(s)) vm.typeError("string-join", 0, "list of strings", a[0]);
    if (!first) out += sep;
    out += asString(s)->view();
    if (out.size() > 0xffffffffu) vm.runtimeError("string-join: string too long");
  }
  if (!l.isNil()) vm.typeError("string-join", 0, "list of strings", a[0]);
  return vm.makeString(out);
}

// The character index of byte offset `at` of s (at a character's start), or #f for npos.
Value indexOfByte(String* s, size_t at) {
  if (at == std::string_view::npos) return Value::boolean(false);
  return Value::number(static_cast<double>(isAscii(s) ? at : countChars(s->view().substr(0, at))));
}

// (%string-index-char s c): the index of the first c in s, or #f (the prelude's
// string-index calls this for a character; it takes a predicate itself).
Value stringIndexChar(VM& vm, Value* a, int) {
  String* s = stringObj(vm, "string-index", a, 0);
  Value c = unwrapAttached(a[1]);
  if (!c.isChar()) vm.typeError("string-index", 1, "character or procedure", a[1]);
  std::string bytes;
  appendChar(bytes, c.asChar());
  return indexOfByte(s, s->view().find(bytes));
}

// (string-contains s sub): the index where sub first occurs in s, or #f.
Value stringContains(VM& vm, Value* a, int) {
  String* s = stringObj(vm, "string-contains", a, 0);
  return indexOfByte(s, s->view().find(stringArg(vm, "string-contains", a, 1)));
}

// (string-prefix? p s), (string-suffix? p s): whether p begins (ends) s (SRFI-13's order).
Value stringPrefixP(VM& vm, Value* a, int) {
  std::string_view p = stringArg(vm, "string-prefix?", a, 0);
  return Value::boolean(stringArg(vm, "string-prefix?", a, 1).starts_with(p));
}

Value stringSuffixP(VM& vm, Value* a, int) {
  std::string_view p = stringArg(vm, "string-suffix?", a, 0);
  return Value::boolean(stringArg(vm, "string-suffix?", a, 1).ends_with(p));
}

template <const char* kName, uint32_t (*kMap)(uint32_t)>
Value stringMapCase(VM& vm, Value* a, int) {
  std::string_view s = stringArg(vm, kName, a, 0);
  std::string out;
  out.reserve(s.size());
  forEachChar(s, [&](uint32_t c) { appendChar(out, kMap(c)); });
  return vm.makeString(out);
}

// (string-trim s), -left, -right: s without the whitespace (char-whitespace?) at both
// ends, at its start, at its end.
template <const char* kName, bool kLeft, bool kRight>
Value stringTrim(VM& vm, Value* a, int) {
  std::string_view s = stringArg(vm, kName, a, 0);
  size_t begin = 0, end = s.size(), len;
  if (kLeft)
    while (begin < end && isWhitespaceChar(decodeChar(s.data() + begin, s.data() + end, len)))
      begin += len;
  if (kRight)
    while (end > begin) {
      size_t start = end - 1;  // back to the start of the last character
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 &&
             end - start < 4)
        --start;
      uint32_t c = decodeChar(s.data() + start, s.data() + end, len);
      if (start + len != end) {  // not one well-formed character: its last byte alone
        start = end - 1;
        c = decodeChar(s.data() + start, s.data() + end, len);
      }
      if (!isWhitespaceChar(c)) break;
      end = start;
    }
  return vm.makeString(s.substr(begin, end - begin));
}

constexpr char kSubstring[] = "substring";
constexpr char kStringCopy[] = "string-copy";
constexpr char kUpcase[] = "string-upcase";
constexpr char kDowncase[] = "string-downcase";
constexpr char kTrim[] = "string-trim";
constexpr char kTrimLeft[] = "string-trim-left";
constexpr char kTrimRight[] = "string-trim-right";

}  // namespace

std::string_view stringArg(VM& vm, const char* who, const Value* a, int i) {
  return stringObj(vm, who, a, i)->view();
}

void openStringPrimitives(Registrar& r) {
  VM& vm = r.vm;
  vm.defineNative("string-length", stringLength, 1, 1);
  vm.defineNative("string-ref", stringRef, 2, 2);
  vm.defineNative("substring", copyRange<kSubstring>, 2, 3);
  vm.defineNative("string-copy", copyRange<kStringCopy>, 1, 3);
  vm.defineNative("string", string, 0, -1);
  vm.defineNative("make-string", makeString, 1, 2);
  vm.defineNative("string->list", stringToList, 1, 3);
  vm.defineNative("list->string", listToString, 1, 1);
  vm.defineNative("string-split", stringSplit, 2, 2);
  vm.defineNative("string-join", stringJoin, 1, 2);
  vm.defineNative("%string-index-char", stringIndexChar, 2, 2);
  vm.defineNative("string-contains", stringContains, 2, 2);
  vm.defineNative("string-prefix?", stringPrefixP, 2, 2);
  vm.defineNative("string-suffix?", stringSuffixP, 2, 2);
  vm.defineNative("string-upcase", stringMapCase<kUpcase, upcaseChar>, 1, 1);
  vm.defineNative("string-downcase", stringMapCase<kDowncase, downcaseChar>, 1, 1);
  vm.defineNative("string-trim", stringTrim<kTrim, true, true>, 1, 1);
  vm.defineNative("string-trim-left", stringTrim<kTrimLeft, true, false>, 1, 1);
  vm.defineNative("string-trim-right", stringTrim<kTrimRight, false, true>, 1, 1);
}

}  // namespace dlam::prim
