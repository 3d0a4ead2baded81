// lexical.h — the lexical rules of dlam's text, shared by the reader (which applies them)
// and the printer (whose `write` output must read back): UTF-8, as strings and symbols
// hold it (encoding a code point, checking a sequence: the reader rejects ill-formed
// text, the printer escapes the bytes a string made with C's \xHH may hold), the bytes
// that end a token, the tokens that are numbers rather than symbols, the names of
// characters (#\space), and how a string's bytes are taken as characters.
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

// The names of characters in `#\name` syntax (R7RS's), as the reader takes them and
// `write` writes them.
struct CharName {
  const char* name;
  uint32_t code;
};
inline constexpr CharName kCharNames[] = {
    {"alarm", 0x07}, {"backspace", 0x08}, {"delete", 0x7f}, {"escape", 0x1b}, {"newline", 0x0a},
    {"null", 0x00},  {"return", 0x0d},    {"space", 0x20},  {"tab", 0x09},
};

// A string's byte that is not part of well-formed UTF-8 (C's \xHH can put one in) is
// taken as the character kRawByteBase + byte, U+DC80 to U+DCFF: a lone surrogate, which
// no well-formed text holds, so that taking a string apart into characters and putting
// them back together gives back its bytes (Python's "surrogateescape").
constexpr uint32_t kRawByteBase = 0xDC00;
inline bool isRawByteChar(uint32_t c) {
  return c >= kRawByteBase + 0x80 && c <= kRawByteBase + 0xFF;
}

// Whether c is a Unicode scalar value (what #\x... and integer->char take).
inline bool isScalarValue(uint32_t c) { return c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF); }

// The character that starts at p (p < end), and its length in bytes in `len`.
inline uint32_t decodeChar(const char* p, const char* end, size_t& len) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(p[i])); };
  uint32_t c = b(0);
  if (c < 0x80) {
    len = 1;
    return c;
  }
  len = utf8SequenceLength(p, end);
  switch (len) {
    case 2:
      return (c & 0x1F) << 6 | (b(1) & 0x3F);
    case 3:
      return (c & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
    case 4:
      return (c & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
    default:
      len = 1;
      return kRawByteBase + c;
  }
}

// Appends character c as a string holds it: UTF-8, or the byte a raw-byte character
// stands for.
inline void appendChar(std::string& out, uint32_t c) {
  if (isRawByteChar(c))
    out += static_cast<char>(c - kRawByteBase);
  else
    appendUtf8(out, c);
}

}  // namespace dlam
