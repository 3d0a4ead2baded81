// lexical.h — the lexical rules of dlam's text, shared by the reader (which applies them)
// and the printer (whose `write` output must read back): UTF-8, as strings and symbols
// hold it (encoding a code point, checking a sequence: the reader rejects ill-formed
// text, the printer escapes the bytes a string made with C's \xHH may hold), the bytes
// that end a token, and the tokens that are numbers rather than symbols.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dlam {

inline bool isWhitespace(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Characters that end a symbol or number token.
inline bool isDelimiter(unsigned char c) {
  return isWhitespace(c) || c == '(' || c == ')' || c == '[' || c == ']' || c == '"' || c == ';' ||
         c == '\'' || c == '`' || c == ',' || c == '|';
}

// A token (a run of bytes up to a delimiter) the reader takes for a number: +inf.0,
// -inf.0, +nan.0, -nan.0, or a digit, or a point and a digit, after an optional sign.
// (Such a token that is not a well-formed number is an error, never a symbol.)
inline bool readsAsNumber(std::string_view t) {
  if (t == "+inf.0" || t == "-inf.0" || t == "+nan.0" || t == "-nan.0") return true;
  auto digit = [&](size_t k) { return k < t.size() && t[k] >= '0' && t[k] <= '9'; };
  size_t i = !t.empty() && (t[0] == '+' || t[0] == '-') ? 1 : 0;
  return digit(i) || (i < t.size() && t[i] == '.' && digit(i + 1));
}

// Appends code point cp (a Unicode scalar value) as UTF-8.
inline void appendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Length of the valid UTF-8 sequence starting at p (lead byte >= 0x80), or 0 when the
// bytes are not well-formed (overlong forms, surrogates and > U+10FFFF included).
inline size_t utf8SequenceLength(const char* p, const char* end) {
  auto b = [&](size_t i) { return static_cast<unsigned char>(p[i]); };
  auto cont = [&](size_t i, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return p + i < end && b(i) >= lo && b(i) <= hi;
  };
  unsigned char c = b(0);
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

}  // namespace dlam
