// syntax.h — s-expressions as the reader produces them, each with its source location.
//
// Nodes live in an arena (SxArena) and are freed together, so deeply nested input
// is never destroyed recursively.
#pragma once
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "dlam/error.h"

namespace dlam {

struct Sx {
  enum Kind : uint8_t { List, Symbol, Number, String, Bool, Vector, Char };
  Kind kind;
  bool boolean = false;  // Bool
  SrcLoc loc;
  uint32_t mark = 0;  // Symbol: put in by the macro expansion of this number (0: by the source)
  // The mark of a symbol the compiler puts into a program to name the standard library's
  // own global of that name (records.cpp's expansion): no binding of the program's
  // captures it, and it means the library's procedure whatever the program defines.
  static constexpr uint32_t kLibraryMark = 0xffffffffu;
  double number = 0;       // Number
  uint32_t code = 0;       // Char: the code point
  std::string text;        // Symbol name, or String contents (escapes decoded)
  std::vector<Sx*> items;  // List elements; Vector: its elements (numbers), `#(1 2 3)`
  Sx* tail = nullptr;      // List: the cdr after the last item for dotted lists `(a b . c)`

  bool isSymbol(std::string_view s) const { return kind == Symbol && text == s; }
};

// The nodes count against the heap limit while they exist (allowMore): the reader of a
// large source would otherwise use memory that no limit bounds (some hundred bytes per
// token, more than the values it denotes). A node past the limit is the heap-limit
// error, at the node's place, with the file left to readAll and expandMacro, which know it.
class SxArena {
 public:
  // What a node takes: itself and its place in the items of the list holding it.
  static constexpr uint64_t kNodeBytes = sizeof(Sx) + sizeof(Sx*);

  Sx* make(Sx::Kind kind, SrcLoc loc) {
    bytes_ += kNodeBytes;
    if (bytes_ > limit_) [[unlikely]]
      exhausted(loc);
    nodes_.emplace_back();
    Sx* n = &nodes_.back();
    n->kind = kind;
    n->loc = loc;
    return n;
  }

  // From now on the nodes may take `room` bytes more than they do (the heap's room
  // under its limit of `limitMb` MB, named in the error); UINT64_MAX: no limit.
  void allowMore(uint64_t room, uint64_t limitMb) {
    limit_ = room > UINT64_MAX - bytes_ ? UINT64_MAX : bytes_ + room;
    limitMb_ = limitMb;
  }
  // The bytes the nodes take, as charged.
  uint64_t bytes() const { return bytes_; }

 private:
  [[noreturn]] void exhausted(SrcLoc loc) const;

  std::deque<Sx> nodes_;
  uint64_t bytes_ = 0;
  uint64_t limit_ = UINT64_MAX;
  uint64_t limitMb_ = 0;
};

// Reads every datum of `source`. `'x` reads as (quote x). Throws dlam::Error of kind
// Syntax with the file, line and column (or of kind Limit, the heap limit: SxArena);
// `incomplete` is set when the text ended inside a list, string or block comment (the
// REPL then asks for more lines).
// Iterative: nesting depth is limited only by memory.
std::vector<Sx*> readAll(SxArena& arena, std::string_view source, const std::string& file);

// Reads the first datum of `source` (nullptr if it holds none: blanks and comments only),
// for `read`: `start` is the line and column where the text starts in `file`, and `used`
// receives the bytes read up to the end of the datum (or of the text). Errors as readAll.
Sx* readOne(SxArena& arena, std::string_view source, const std::string& file, SrcLoc start,
            size_t& used);

// The number `text` denotes as the reader reads it (decimal, +inf.0, -inf.0, +nan.0,
// #x #o #b #d prefixes), digits in `radix` (2, 8, 10 or 16) when it has no prefix.
// False when it is not a number (string->number's #f).
bool parseNumber(std::string_view text, int radix, double& out);

}  // namespace dlam
