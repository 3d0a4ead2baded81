// reader.cpp — turns source text into located s-expressions (Sx nodes).
//
// Owns the lexical syntax of dlam: comments (`;`, nestable `#| |#`, `#;` datum
// comments), lists with ( ) and [ ], dotted tails, the quote family (' ` , ,@),
// numbers, booleans, characters, strings and symbols, plus the syntax errors for all
// of them.
// The reader is iterative: open lists and pending prefixes live on an explicit
// stack, so a million levels of nesting cost heap memory, never C++ stack.
//
// Conventions (relied on by error messages and the REPL):
//  - Lines and columns are 1-based; a column counts UTF-8 code points (a tab is 1).
//  - `incomplete` is set only when the text ended inside a list, string, block
//    comment, or after a prefix (' ` , ,@ #;) still waiting for its datum. End of
//    input delimits a token, so `1e` at the end is an invalid number, not incomplete.
//  - A token that starts like a number (a digit, or +/-/. followed by a digit, or
//    +/- then . then a digit) must be a whole valid decimal number, otherwise it is
//    an "invalid number" error: `1+`, `1/2` (no rationals), `1e`, `1.2.3`, `12abc`.
//    Other tokens such as `+`, `-`, `...`, `->x`, `.foo` are symbols; a lone `.` is
//    the dot of a dotted list.
//  - `#\\a` (any one character, a delimiter too: `#\\(`), `#\\space` and the other
//    names of lexical.h, `#\\x3bb` (a code point in hex) are characters.
//  - `#x`, `#o`, `#b`, `#d` radix prefixes; `#t #f #true #false`; a `#!` line at the
//    very start (a script's shebang) and a UTF-8 byte-order mark are skipped.
//  - Source must be valid UTF-8 in symbols and strings; control bytes other than
//    whitespace are rejected outside strings and comments.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "dlam/lexical.h"
#include "dlam/syntax.h"

namespace dlam {
namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }

int digitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return 99;
}

std::string hexByte(unsigned char c) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  s += digits[c >> 4];
  s += digits[c & 15];
  return s;
}

// Checks `t` against [sign] (digits [. digits*] | . digits) [(e|E) [sign] digits] and
// converts it. Returns false when the token is not such a number.
bool parseDecimal(std::string_view t, double& out) {
  size_t i = 0, n = t.size();
  bool negative = false;
  if (i < n && (t[i] == '+' || t[i] == '-')) negative = t[i++] == '-';
  size_t mantissaStart = i;
  size_t intDigits = 0, fracDigits = 0;
  while (i < n && isDigit(t[i])) ++i, ++intDigits;
  size_t intEnd = i;
  if (i < n && t[i] == '.') {
    ++i;
    while (i < n && isDigit(t[i])) ++i, ++fracDigits;
  }
  if (intDigits + fracDigits == 0) return false;
  long long exponent = 0;
  if (i < n && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    bool expNegative = false;
    if (i < n && (t[i] == '+' || t[i] == '-')) expNegative = t[i++] == '-';
    size_t expDigits = 0;
    while (i < n && isDigit(t[i])) {
      // Clamped: beyond this any exponent over- or underflows anyway.
      if (exponent < 1000000000) exponent = exponent * 10 + (t[i] - '0');
      ++i, ++expDigits;
    }
    if (expDigits == 0) return false;
    if (expNegative) exponent = -exponent;
  }
  if (i != n) return false;

  // from_chars: exact rounding and no dependence on the C locale (unlike strtod).
  const char* first = t.data() + (t[0] == '+' ? 1 : 0);
  double v = 0;
  auto r = std::from_chars(first, t.data() + n, v, std::chars_format::general);
  if (r.ec == std::errc::result_out_of_range) {
    // Overflow or underflow: decide which from the decimal magnitude of the first
    // non-zero digit (out-of-range values are hundreds of decades from 10^0).
    long long magnitude = 0;
    size_t k = mantissaStart;
    while (k < intEnd && t[k] == '0') ++k;
    if (k < intEnd) {
      magnitude = static_cast<long long>(intEnd - k) - 1;
    } else {
      size_t f = intEnd + 1;
      while (f < n && t[f] == '0') ++f;
      magnitude = -static_cast<long long>(f - intEnd);
    }
    magnitude += exponent;
    v = magnitude > 0 ? std::numeric_limits<double>::infinity() : 0.0;
    if (negative) v = -v;
  } else if (r.ec != std::errc() || r.ptr != t.data() + n) {
    return false;
  }
  out = v;
  return true;
}

// The radix a `#x` `#o` `#b` `#d` prefix names (by its letter, either case), or 0.
int radixOfPrefix(char c) {
  switch (c | 0x20) {
    case 'x':
      return 16;
    case 'o':
      return 8;
    case 'b':
      return 2;
    case 'd':
      return 10;
    default:
      return 0;
  }
}

// [sign] digits in `radix`, as a double (exact up to 2^64, correctly rounded enough beyond).
bool parseRadixInteger(std::string_view t, int radix, double& out) {
  size_t i = 0;
  bool negative = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) negative = t[i++] == '-';
  if (i == t.size()) return false;
  uint64_t exact = 0;
  double approx = 0;
  bool overflowed = false;
  for (; i < t.size(); ++i) {
    int d = digitValue(t[i]);
    if (d >= radix) return false;
    if (!overflowed) {
      if (exact > (UINT64_MAX - static_cast<uint64_t>(d)) / static_cast<uint64_t>(radix)) {
        overflowed = true;
        approx = static_cast<double>(exact);
      } else {
        exact = exact * radix + d;
        continue;
      }
    }
    approx = approx * radix + d;
  }
  double v = overflowed ? approx : static_cast<double>(exact);
  out = negative ? -v : v;
  return true;
}

class Reader {
 public:
  Reader(SxArena& arena, std::string_view source, const std::string& file, SrcLoc start = {1, 1})
      : arena_(arena),
        p_(source.data()),
        end_(source.data() + source.size()),
        file_(file),
        line_(start.line),
        col_(start.col) {}

  std::vector<Sx*> readAll() {
    skipPreamble();
    return readData(false);
  }

  // The first datum (nullptr if there is none), and the bytes read up to its end.
  Sx* readOne(size_t& used) {
    const char* begin = p_;
    std::vector<Sx*> one = readData(true);
    used = static_cast<size_t>(p_ - begin);
    return one.empty() ? nullptr : one[0];
  }

 private:
  // Every datum up to the end of the text, or (first) up to the end of the first one.
  std::vector<Sx*> readData(bool first) {
    for (;;) {
      if (first && !results_.empty()) break;
      skipAtmosphere();
      if (p_ == end_) break;
      SrcLoc here = loc();
      char c = *p_;
      switch (c) {
        case '(':
        case '[':
          beginDatum(here);
          openList(c, here);
          break;
        case ')':
        case ']':
          closeList(c, here);
          break;
        case '\'':
          beginDatum(here);
          advance();
          pushPrefix("quote", "'", here);
          break;
        case '`':
          beginDatum(here);
          advance();
          pushPrefix("quasiquote", "`", here);
          break;
        case ',':
          beginDatum(here);
          advance();
          if (p_ != end_ && *p_ == '@') {
            advance();
            pushPrefix("unquote-splicing", ",@", here);
          } else {
            pushPrefix("unquote", ",", here);
          }
          break;
        case '"':
        case '|':
          beginDatum(here);
          deliver(readQuoted(static_cast<char>(c)));
          break;
        default:
          if (c == '#' && p_ + 1 != end_ && p_[1] == '(') {
            // A vector literal: a list of numbers that becomes a constant vector.
            beginDatum(here);
            advance();
            openList('(', here);
            stack_.back().node->kind = Sx::Vector;
            break;
          }
          if (c == '#' && p_ + 1 != end_ && p_[1] == '\\') {
            beginDatum(here);
            deliver(readChar(here));
            break;
          }
          if (c == '#' && p_ + 1 != end_ && p_[1] == ';') {
            advance(), advance();
            stack_.push_back(Frame{Frame::Skip, here, nullptr, 0, Frame::NoDot, SrcLoc{}, "#;"});
            break;
          }
          readToken();
          break;
      }
    }
    if (!stack_.empty()) {
      const Frame& f = stack_.back();
      if (f.type == Frame::List) fail(f.open, "unterminated list (opened here)", true);
      fail(f.open, missingDatumMessage(f), true);
    }
    return std::move(results_);
  }

  // One open construct still waiting for input: a list, a quote-like prefix that
  // wraps the next datum, or a `#;` that discards it.
  struct Frame {
    enum Type : uint8_t { List, Prefix, Skip };
    enum Dot : uint8_t { NoDot, AfterDot, HaveTail };
    Type type;
    SrcLoc open;
    Sx* node = nullptr;  // List: the list being filled; Prefix: (quote) awaiting its datum
    char opener = 0;
    Dot dot = NoDot;
    SrcLoc dotLoc;
    const char* prefixText = nullptr;
  };

  SrcLoc loc() const { return SrcLoc{line_, col_}; }

  [[noreturn]] void fail(SrcLoc at, std::string message, bool incomplete = false) const {
    Error e(ErrorKind::Syntax, std::move(message), file_, at);
    e.incomplete = incomplete;
    throw e;
  }

  // Steps over one byte, keeping line/column; continuation bytes of a UTF-8
  // sequence share the column of their lead byte.
  void advance() {
    unsigned char c = static_cast<unsigned char>(*p_++);
    if (c == '\n') {
      ++line_;
      col_ = 1;
    } else if (p_ == end_ || (static_cast<unsigned char>(*p_) & 0xC0) != 0x80) {
      ++col_;
    }
  }

  void advanceBy(size_t n) {
    while (n--) advance();
  }

  void skipPreamble() {
    if (end_ - p_ >= 3 && static_cast<unsigned char>(p_[0]) == 0xEF &&
        static_cast<unsigned char>(p_[1]) == 0xBB && static_cast<unsigned char>(p_[2]) == 0xBF) {
      p_ += 3;  // the mark is invisible: it takes no column
    }
    if (end_ - p_ >= 2 && p_[0] == '#' && p_[1] == '!') {
      while (p_ != end_ && *p_ != '\n') advance();
    }
  }

  // Whitespace, line comments and (nested) block comments.
  void skipAtmosphere() {
    while (p_ != end_) {
      unsigned char c = static_cast<unsigned char>(*p_);
      if (isWhitespace(c)) {
        advance();
      } else if (c == ';') {
        while (p_ != end_ && *p_ != '\n') advance();
      } else if (c == '#' && p_ + 1 != end_ && p_[1] == '|') {
        skipBlockComment();
      } else if (c < 0x20 || c == 0x7F) {
        fail(loc(), "unexpected character " + hexByte(c));
      } else {
        return;
      }
    }
  }

  void skipBlockComment() {
    SrcLoc open = loc();
    advance(), advance();
    size_t depth = 1;
    while (p_ != end_) {
      if (*p_ == '|' && p_ + 1 != end_ && p_[1] == '#') {
        advance(), advance();
        if (--depth == 0) return;
      } else if (*p_ == '#' && p_ + 1 != end_ && p_[1] == '|') {
        advance(), advance();
        ++depth;
      } else {
        advance();
      }
    }
    fail(open, "unterminated block comment", true);
  }

  // Called where a datum starts (at `at`): after a dotted tail only ')' may follow.
  // Checked before the datum is read, so `(a . b (c` is an error, not incomplete.
  void beginDatum(SrcLoc at) {
    if (!stack_.empty()) {
      const Frame& f = stack_.back();
      if (f.type == Frame::List && f.dot == Frame::HaveTail)
        fail(at, "expected ')' after the dotted tail");
    }
  }

  static std::string missingDatumMessage(const Frame& f) {
    if (f.type == Frame::Skip) return "expected a datum after '#;'";
    return std::string("expected a datum after '") + f.prefixText + "'";
  }

  void openList(char opener, SrcLoc here) {
    advance();
    Frame f{Frame::List, here, nullptr, 0, Frame::NoDot, SrcLoc{}, nullptr};
    f.node = arena_.make(Sx::List, here);
    f.opener = opener;
    stack_.push_back(f);
  }

  void closeList(char closer, SrcLoc here) {
    std::string closeText(1, closer);
    if (stack_.empty()) fail(here, "unexpected '" + closeText + "'");
    Frame& f = stack_.back();
    if (f.type != Frame::List) fail(f.open, missingDatumMessage(f));
    char expected = f.opener == '(' ? ')' : ']';
    if (closer != expected) {
      fail(here, "mismatched '" + closeText + "' for '" + std::string(1, f.opener) +
                     "' (opened at line " + std::to_string(f.open.line) + ", column " +
                     std::to_string(f.open.col) + ")");
    }
    if (f.dot == Frame::AfterDot) fail(f.dotLoc, "expected a datum after '.'");
    if (f.node->kind == Sx::Vector)
      for (const Sx* item : f.node->items)
        if (item->kind != Sx::Number) fail(item->loc, "a vector literal #(...) holds numbers only");
    advance();
    Sx* done = f.node;
    stack_.pop_back();
    deliver(done);
  }

  void pushPrefix(const char* symbol, const char* text, SrcLoc here) {
    Frame f{Frame::Prefix, here, nullptr, 0, Frame::NoDot, SrcLoc{}, nullptr};
    f.node = arena_.make(Sx::List, here);
    Sx* head = arena_.make(Sx::Symbol, here);
    head->text = symbol;
    f.node->items.reserve(2);
    f.node->items.push_back(head);
    f.prefixText = text;
    stack_.push_back(f);
  }

  // Hands a finished datum to whatever is waiting for it. Prefixes wrap it and pass
  // the wrapper further down; this loop replaces the recursion a `'''x` would need.
  void deliver(Sx* d) {
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      switch (f.type) {
        case Frame::Prefix:
          f.node->items.push_back(d);
          d = f.node;
          stack_.pop_back();
          continue;
        case Frame::Skip:
          stack_.pop_back();
          return;
        case Frame::List:
          if (f.dot == Frame::NoDot) {
            f.node->items.push_back(d);
          } else {
            // beginDatum() already rejected a datum after the tail.
            f.node->tail = d;
            f.dot = Frame::HaveTail;
          }
          return;
      }
    }
    results_.push_back(d);
  }

  // A symbol, number, boolean, `.` or other `#` syntax: the run of bytes up to a
  // delimiter. Validates the bytes on the way (control bytes, UTF-8).
  void readToken() {
    SrcLoc here = loc();
    const char* start = p_;
    while (p_ != end_ && !isDelimiter(static_cast<unsigned char>(*p_))) skipTokenChar();
    std::string_view t(start, static_cast<size_t>(p_ - start));

    if (t == ".") {
      if (stack_.empty() || stack_.back().type != Frame::List ||
          stack_.back().node->kind == Sx::Vector || stack_.back().dot != Frame::NoDot ||
          stack_.back().node->items.empty()) {
        fail(here, "unexpected '.'");
      }
      stack_.back().dot = Frame::AfterDot;
      stack_.back().dotLoc = here;
      return;
    }

    beginDatum(here);
    if (t[0] == '#') {
      deliver(readHashToken(t, here));
      return;
    }
    Sx* d;
    double value;
    if (looksNumeric(t, here, value)) {
      d = arena_.make(Sx::Number, here);
      d->number = value;
    } else {
      d = arena_.make(Sx::Symbol, here);
      d->text.assign(t);
    }
    deliver(d);
  }

  // Steps over one character of a token, rejecting control bytes and ill-formed UTF-8.
  void skipTokenChar() {
    unsigned char c = static_cast<unsigned char>(*p_);
    if (c < 0x20 || c == 0x7F) fail(loc(), "unexpected character " + hexByte(c));
    if (c >= 0x80) {
      size_t len = utf8SequenceLength(p_, end_);
      if (len == 0) fail(loc(), "invalid UTF-8 byte " + hexByte(c));
      advanceBy(len);
    } else {
      advance();
    }
  }

  // A character, at `#\\`: the one character after it (whitespace and delimiters
  // included: `#\\ `, `#\\(`), or, when more follow up to a delimiter, a name
  // (kCharNames) or x and a code point in hex.
  Sx* readChar(SrcLoc here) {
    advance(), advance();
    if (p_ == end_) fail(here, "expected a character after '#\\'");
    const char* start = p_;
    auto first = static_cast<unsigned char>(*p_);
    if (isWhitespace(first))
      advance();
    else
      skipTokenChar();
    if (!isDelimiter(first))
      while (p_ != end_ && !isDelimiter(static_cast<unsigned char>(*p_))) skipTokenChar();
    std::string_view t(start, static_cast<size_t>(p_ - start));
    Sx* d = arena_.make(Sx::Char, here);
    size_t len = 0;
    d->code = decodeChar(t.data(), t.data() + t.size(), len);
    if (len == t.size()) return d;
    for (const CharName& n : kCharNames) {
      if (t == n.name) {
        d->code = n.code;
        return d;
      }
    }
    if (t[0] == 'x' && t.size() <= 9) {
      uint32_t code = 0;
      size_t i = 1;
      while (i < t.size() && digitValue(t[i]) < 16)
        code = code * 16 + static_cast<uint32_t>(digitValue(t[i++]));
      if (i == t.size()) {
        if (!isScalarValue(code))
          fail(here, "bad character '#\\" + std::string(t) + "' (not a Unicode scalar value)");
        d->code = code;
        return d;
      }
    }
    fail(here, "unknown character name '#\\" + std::string(t) + "'");
  }

  // True when `t` is a number (value stored); false when it is a symbol. Throws
  // when it starts like a number but is not one.
  bool looksNumeric(std::string_view t, SrcLoc here, double& value) const {
    if (t == "+inf.0" || t == "-inf.0") {
      value = t[0] == '-' ? -std::numeric_limits<double>::infinity()
                          : std::numeric_limits<double>::infinity();
      return true;
    }
    if (t == "+nan.0" || t == "-nan.0") {
      value = std::numeric_limits<double>::quiet_NaN();
      return true;
    }
    if (!readsAsNumber(t)) return false;
    if (!parseDecimal(t, value)) fail(here, "invalid number '" + std::string(t) + "'");
    return true;
  }

  Sx* readHashToken(std::string_view t, SrcLoc here) {
    if (t == "#t" || t == "#true" || t == "#f" || t == "#false") {
      Sx* d = arena_.make(Sx::Bool, here);
      d->boolean = t[1] == 't';
      return d;
    }
    if (t.size() >= 2) {
      int radix = radixOfPrefix(t[1]);
      if (radix != 0) {
        std::string_view digits = t.substr(2);
        double value = 0;
        bool ok =
            radix == 10 ? parseDecimal(digits, value) : parseRadixInteger(digits, radix, value);
        if (!ok) fail(here, "invalid number '" + std::string(t) + "'");
        Sx* d = arena_.make(Sx::Number, here);
        d->number = value;
        return d;
      }
    }
    std::string shown(t);
    // A lone `#` stopped at a delimiter, as in `#(`: show what followed it.
    if (t.size() == 1 && p_ != end_ && !isWhitespace(static_cast<unsigned char>(*p_))) shown += *p_;
    fail(here, "unknown '#' syntax '" + shown + "'");
  }

  // A string "..." or a symbol |...| (R7RS: any characters, with the strings'
  // escapes, \| among them), from its opening quote.
  Sx* readQuoted(char quote) {
    SrcLoc open = loc();
    advance();
    const char* what = quote == '"' ? "string" : "|symbol|";
    Sx* d = arena_.make(quote == '"' ? Sx::String : Sx::Symbol, open);
    std::string& out = d->text;
    for (;;) {
      if (p_ == end_) fail(open, std::string("unterminated ") + what, true);
      unsigned char c = static_cast<unsigned char>(*p_);
      if (c == static_cast<unsigned char>(quote)) {
        advance();
        // (The expander's own names hold control characters: none can be written.)
        if (quote == '|')
          for (char k : out)
            if (static_cast<unsigned char>(k) < 0x20 || k == 0x7f)
              fail(open, "a |symbol| may not hold control characters (here " +
                             hexByte(static_cast<unsigned char>(k)) + ")");
        return d;
      }
      if (c == '\\') {
        readEscape(open, out, what);
      } else if (c >= 0x80) {
        size_t len = utf8SequenceLength(p_, end_);
        if (len == 0) fail(loc(), "invalid UTF-8 byte " + hexByte(c) + " in " + what);
        out.append(p_, len);
        advanceBy(len);
      } else {
        // Raw newlines and other bytes are kept as written.
        out += static_cast<char>(c);
        advance();
      }
    }
  }

  // At a backslash inside a string or |symbol| (what); appends the decoded character(s).
  void readEscape(SrcLoc open, std::string& out, const char* what) {
    // (The messages are made only when one is needed.)
    auto in = [what] { return std::string(" in ") + what; };
    auto unterminated = [what] { return std::string("unterminated ") + what; };
    SrcLoc at = loc();
    advance();
    if (p_ == end_) fail(open, unterminated(), true);
    char e = *p_;
    switch (e) {
      case 'n':
        out += '\n';
        advance();
        return;
      case 't':
        out += '\t';
        advance();
        return;
      case 'r':
        out += '\r';
        advance();
        return;
      case '0':
        out += '\0';
        advance();
        return;
      case '\\':
        out += '\\';
        advance();
        return;
      case '"':
      case '|':
        out += e;
        advance();
        return;
      case 'x': {
        advance();
        // R7RS's \x<hex digits>; is a code point, stored as UTF-8; without the `;`,
        // \xHH (exactly two digits) is one byte, as in C.
        size_t n = 0;
        uint32_t cp = 0;
        while (n < 8 && p_ + n != end_ && digitValue(p_[n]) < 16)
          cp = cp * 16 + static_cast<uint32_t>(digitValue(p_[n++]));
        if (n >= 1 && p_ + n != end_ && p_[n] == ';') {
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            fail(at, "bad escape '\\x...;'" + in() + " (not a Unicode scalar value)");
          appendUtf8(out, cp);
          for (size_t k = 0; k <= n; ++k) advance();
          return;
        }
        int value = 0;
        for (int k = 0; k < 2; ++k) {
          if (p_ == end_) fail(open, unterminated(), true);
          int d = digitValue(*p_);
          if (d >= 16)
            fail(at, "bad escape '\\x'" + in() + " (expected \\xHH or \\x<hex digits>;)");
          value = value * 16 + d;
          advance();
        }
        out += static_cast<char>(value);
        return;
      }
      default:
        break;
    }
    if (e == ' ' || e == '\t' || e == '\r' || e == '\n') {
      // Line continuation: `\`, blanks, newline, blanks — all dropped.
      const char* q = p_;
      while (q != end_ && (*q == ' ' || *q == '\t')) ++q;
      if (q != end_ && *q == '\r' && q + 1 != end_ && q[1] == '\n') ++q;
      if (q == end_) fail(open, unterminated(), true);
      if (*q == '\n') {
        while (p_ != q) advance();
        advance();
        while (p_ != end_ && (*p_ == ' ' || *p_ == '\t')) advance();
        return;
      }
    }
    std::string shown;
    unsigned char u = static_cast<unsigned char>(e);
    if (u >= 0x80) {
      size_t len = utf8SequenceLength(p_, end_);
      shown.assign(p_, len ? len : 1);
      if (!len) shown = hexByte(u);
    } else if (u < 0x20 || u == 0x7F) {
      shown = hexByte(u);
    } else {
      shown = std::string(1, e);
    }
    fail(at, "bad escape '\\" + shown + "'" + in());
  }

  SxArena& arena_;
  const char* p_;
  const char* end_;
  const std::string& file_;
  uint32_t line_;
  uint32_t col_;
  std::vector<Frame> stack_;
  std::vector<Sx*> results_;
};

}  // namespace

void SxArena::exhausted(SrcLoc loc) const {
  throw Error(ErrorKind::Limit, "heap limit exceeded (" + std::to_string(limitMb_) + " MB)", "",
              loc);
}

std::vector<Sx*> readAll(SxArena& arena, std::string_view source, const std::string& file) {
  try {
    return Reader(arena, source, file).readAll();
  } catch (Error& e) {
    if (e.file.empty()) e.file = file;  // the heap limit, from the arena
    throw;
  }
}

Sx* readOne(SxArena& arena, std::string_view source, const std::string& file, SrcLoc start,
            size_t& used) {
  try {
    return Reader(arena, source, file, start).readOne(used);
  } catch (Error& e) {
    if (e.file.empty()) e.file = file;
    throw;
  }
}

bool parseNumber(std::string_view t, int radix, double& out) {
  if (t == "+inf.0" || t == "-inf.0") {
    out = t[0] == '-' ? -std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::infinity();
    return true;
  }
  if (t == "+nan.0" || t == "-nan.0") {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (t.size() >= 2 && t[0] == '#') {
    radix = radixOfPrefix(t[1]);
    if (radix == 0) return false;
    t.remove_prefix(2);
  }
  if (t.empty()) return false;
  return radix == 10 ? parseDecimal(t, out) : parseRadixInteger(t, radix, out);
}

}  // namespace dlam
