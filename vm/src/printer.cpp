// printer.cpp — the textual form of every value (VM::show), for display, write,
// the REPL and error messages.
//
// Printing never recurses in C++: nested lists, records, dicts and reverse-tagged values are
// walked with an explicit stack, so a list nested a million levels deep prints
// like a flat one. Cycles cannot occur (pairs are immutable; closures, the only
// objects that could close a loop, print opaquely), so there is no cycle check.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "dlam/dict.h"
#include "dlam/lexical.h"
#include "dlam/vm.h"

namespace dlam {

namespace {
constexpr size_t kMaxPrintedBytes = size_t(256) << 20;
}  // namespace

namespace {

// Numbers: integer-valued doubles print without a point, everything else as the
// shortest text that reads back to the same double.
void appendNumber(std::string& out, double x) {
  if (std::isnan(x)) {
    out += "+nan.0";
    return;
  }
  if (std::isinf(x)) {
    out += x > 0 ? "+inf.0" : "-inf.0";
    return;
  }
  if (x == 0) {
    out += std::signbit(x) ? "-0" : "0";
    return;
  }
  char buf[64];
  std::to_chars_result r;
  if (std::fabs(x) < 1e21 && x == std::trunc(x)) {
    // Shortest round-trip in fixed notation: plain digits, never an exponent.
    r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
  } else {
    // No format argument: the shortest round-trip text (GCC picks fixed or scientific).
    r = std::to_chars(buf, buf + sizeof buf, x);
  }
  out.append(buf, r.ptr);
}

// An array of rank 2 or more: #Na( ... ) with one level of parentheses per axis, as
// Common Lisp writes it (#2a((1 2) (3 4))). Its elements in order, with an open
// parenthesis where an index other than the last starts over and a close where one ends.
void appendArray(std::string& out, const Vector* a) {
  const uint32_t* shape = arrayShape(a);
  uint32_t rank = a->rank;
  out += '#';
  out += std::to_string(rank);
  out += 'a';
  if (a->aux == 0) {
    // An empty array: () per row of the first axis (none if that is the empty one).
    out += '(';
    for (uint32_t i = 0; i < shape[0]; ++i) out += i ? " ()" : "()";
    out += ')';
    return;
  }
  std::vector<uint32_t> index(rank, 0);
  out.append(rank, '(');
  for (uint32_t e = 0; e < a->aux; ++e) {
    if (e) {
      // Advance the index: the axes that wrapped close and open again.
      uint32_t k = rank - 1, wrapped = 0;
      while (++index[k] == shape[k]) {
        index[k] = 0;
        ++wrapped;
        --k;
      }
      out.append(wrapped, ')');
      out += ' ';
      out.append(wrapped, '(');
    }
    appendNumber(out, a->items[e]);
  }
  out.append(rank, ')');
}

bool isHexDigit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// \xHH for byte u; with the semicolon, R7RS's \x<hex>; (a code point), else C's byte.
void appendHexEscape(std::string& out, unsigned char u, bool semicolon) {
  static const char* hex = "0123456789abcdef";
  out += "\\x";
  out += hex[u >> 4];
  out += hex[u & 0xf];
  if (semicolon) out += ';';
}

// A string's characters between its quotes (quote: '"'), or a |symbol|'s (quote: '|').
// A byte that is not part of well-formed UTF-8 (a string made with C's \xHH can hold
// one) is written \xHH, and a hex digit right after it as \x<hex>;, so that the
// reader does not take the two for one code point. Other control characters than
// \n \t \r are written \x<hex>; (the reader takes no raw ones).
void appendEscaped(std::string& out, std::string_view s, char quote) {
  out += quote;
  bool afterByte = false;  // the last thing written was a lone byte's \xHH
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      size_t len = utf8SequenceLength(s.data() + i, s.data() + s.size());
      if (len) {
        out.append(s.data() + i, len);
        i += len - 1;
      } else {
        appendHexEscape(out, u, false);
      }
      afterByte = len == 0;
      continue;
    }
    bool wasAfterByte = afterByte;
    afterByte = false;
    if (wasAfterByte && isHexDigit(c)) {
      appendHexEscape(out, u, true);
      continue;
    }
    switch (c) {
      case '"':
      case '|':
        if (c == quote) out += '\\';
        out += c;
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f)
          appendHexEscape(out, u, true);
        else
          out += c;
    }
  }
  out += quote;
}

void appendWrittenString(std::string& out, std::string_view s) { appendEscaped(out, s, '"'); }

// A character as `write` writes it, as the reader reads it back: #\space and the other
// names of kCharNames, #\x<hex> for the other control characters (and the raw-byte
// characters of ill-formed strings, lexical.h), else #\ and the character itself.
void appendWrittenChar(std::string& out, uint32_t c) {
  out += "#\\";
  for (const CharName& n : kCharNames) {
    if (n.code == c) {
      out += n.name;
      return;
    }
  }
  if (c < 0x20 || (c >= 0x7f && c < 0xa0) || !isScalarValue(c)) {
    char buf[16];
    auto r = std::to_chars(buf, buf + sizeof buf, c, 16);
    out += 'x';
    out.append(buf, r.ptr);
    return;
  }
  appendUtf8(out, c);
}

// Whether the reader would take the name, written plainly, for something else than
// this symbol (lexical.h): empty, a delimiter or a control character in it, `#` syntax,
// `.`, or a number — or would not read it: a byte that is not part of well-formed
// UTF-8 (from |\xHH| or string->symbol), which appendEscaped writes as \xHH.
bool needsBars(std::string_view name) {
  if (name.empty() || name == "." || name[0] == '#' || readsAsNumber(name)) return true;
  const char* end = name.data() + name.size();
  for (const char* p = name.data(); p != end; ++p) {
    auto c = static_cast<unsigned char>(*p);
    if (c < 0x20 || c == 0x7f || isDelimiter(c)) return true;
    if (c >= 0x80) {
      size_t len = utf8SequenceLength(p, end);
      if (len == 0) return true;
      p += len - 1;
    }
  }
  return false;
}

void appendProcedure(std::string& out, std::string_view name) {
  out += "#<procedure";
  if (!name.empty()) {
    out += ' ';
    out += name;
  }
  out += '>';
}

std::string_view nativeName(const Native* n) { return n->name ? n->name : ""; }

// One pending step of the walk: print a value, continue a list after its first
// element, or close a bracket opened earlier.
struct Task {
  // Label: " NAME: " before a record's field (v its name) or a dict's value (v its key).
  enum Kind : uint8_t { Show, ListRest, CloseParen, CloseAngle, Label, Space } kind;
  Value v;
};

}  // namespace

std::string VM::show(Value root, bool write) {
  std::string out;
  std::vector<Task> todo;
  todo.push_back({Task::Show, root});
  while (!todo.empty()) {
    // A shared structure can unfold into text exponentially larger than itself.
    if (out.size() > kMaxPrintedBytes) [[unlikely]]
      limitError("printed text too large (more than " + std::to_string(kMaxPrintedBytes >> 20) +
                 " MB)");
    Task t = todo.back();
    todo.pop_back();
    switch (t.kind) {
      case Task::CloseParen:
        out += ')';
        continue;
      case Task::CloseAngle:
        out += '>';
        continue;
      case Task::Space:
        out += ' ';
        continue;
      case Task::Label:
        out += ' ';
        if (isSymbol(t.v) && !needsBars(asSymbol(t.v)->name))
          out += asSymbol(t.v)->name;
        else
          out += show(t.v, true);  // a key: a number, a string or a symbol, no deeper
        out += ": ";
        continue;
      case Task::ListRest:
        if (t.v.isNil()) {
          out += ')';
        } else if (isPair(t.v)) {
          out += ' ';
          todo.push_back({Task::ListRest, asPair(t.v)->cdr});
          todo.push_back({Task::Show, asPair(t.v)->car});
        } else {
          out += " . ";
          todo.push_back({Task::CloseParen, Value()});
          todo.push_back({Task::Show, t.v});
        }
        continue;
      case Task::Show:
        break;
    }

    Value v = t.v;
    if (v.isNumber()) {
      appendNumber(out, v.asNumber());
      continue;
    }
    if (!v.isObject()) {
      if (v.isNil())
        out += "()";
      else if (v.isBool())
        out += v.isTruthy() ? "#t" : "#f";
      else if (v.isVoid())
        out += "#<void>";
      else if (v.isUndefined())
        out += "#<undefined>";
      else if (v.isZero())
        out += '0';  // the symbolic zero sensitivity
      else if (v.isChar() && write)
        appendWrittenChar(out, v.asChar());
      else if (v.isChar())
        appendChar(out, v.asChar());
      else
        out += "#<unknown>";
      continue;
    }
    Obj* o = v.asObject();
    switch (o->type) {
      case ObjType::String:
        if (write)
          appendWrittenString(out, static_cast<String*>(o)->view());
        else
          out += static_cast<String*>(o)->view();
        break;
      case ObjType::Symbol: {
        const std::string& name = static_cast<Symbol*>(o)->name;
        if (write && needsBars(name))
          appendEscaped(out, name, '|');
        else
          out += name;
        break;
      }
      case ObjType::Pair:
        out += '(';
        todo.push_back({Task::ListRest, static_cast<Pair*>(o)->cdr});
        todo.push_back({Task::Show, static_cast<Pair*>(o)->car});
        break;
      case ObjType::Closure:
        appendProcedure(out, static_cast<Closure*>(o)->proto->name);
        break;
      case ObjType::Native:
        appendProcedure(out, nativeName(static_cast<Native*>(o)));
        break;
      case ObjType::Proto:
        out += "#<proto ";
        out += static_cast<Proto*>(o)->name;
        out += '>';
        break;
      case ObjType::Rev:
        out += "#<rev ";
        todo.push_back({Task::CloseAngle, Value()});
        todo.push_back({Task::Show, static_cast<Rev*>(o)->primal});
        break;
      case ObjType::Attached:
        // An attached derivative is invisible except under *j.
        todo.push_back({Task::Show, static_cast<Attached*>(o)->primal});
        break;
      case ObjType::Foreign:
        out += "#<foreign ";
        out += nativeName(static_cast<Native*>(o));
        out += '>';
        break;
      case ObjType::ErrorObject: {
        // #<error "MESSAGE"> or #<error "MESSAGE" (IRRITANT ...)>
        auto* e = static_cast<ErrorObject*>(o);
        out += "#<error ";
        if (isString(e->message)) appendWrittenString(out, asString(e->message)->view());
        todo.push_back({Task::CloseAngle, Value()});
        if (!e->irritants.isNil()) {
          out += ' ';
          todo.push_back({Task::Show, e->irritants});
        }
        break;
      }
      case ObjType::Vector: {
        auto* vec = static_cast<Vector*>(o);
        std::vector<double> buffer;
        const double* items = elementsOf(vec, buffer);
        if (!isSparse(vec) && vec->rank > 1) {
          appendArray(out, vec);
          break;
        }
        out += "#(";
        for (uint32_t i = 0, n = vectorLength(vec); i < n; ++i) {
          if (i) out += ' ';
          appendNumber(out, items[i]);
        }
        out += ')';
        break;
      }
      case ObjType::Record: {
        auto* r = static_cast<Record*>(o);
        if (isRecordType(r)) {
          out += "#<record-type ";
          out += show(r->fields[0], write);
          out += '>';
          break;
        }
        auto* type = static_cast<Record*>(r->type.asObject());
        out += "#<";
        out += asSymbol(type->fields[0])->name;
        todo.push_back({Task::CloseAngle, Value()});
        for (uint32_t i = r->count(); i-- > 0;) {
          todo.push_back({Task::Show, r->fields[i]});
          todo.push_back({Task::Label, type->fields[i + 1]});
        }
        break;
      }
      case ObjType::Dict: {
        out += "#<dict";
        todo.push_back({Task::CloseAngle, Value()});
        size_t first = todo.size();
        forEachEntry(static_cast<Dict*>(o), [&](Value k, Value x) {
          todo.push_back({Task::Label, k});
          todo.push_back({Task::Show, x});
        });
        std::reverse(todo.begin() + static_cast<std::ptrdiff_t>(first), todo.end());
        break;
      }
      case ObjType::DictNode:
        out += "#<dict-node>";
        break;
      case ObjType::Fwd: {
        // #<bundle PRIMAL TANGENT>, or #<cobundle ...> for the sensitivity of one.
        auto* f = static_cast<Fwd*>(o);
        out += f->co() ? "#<cobundle " : "#<bundle ";
        todo.push_back({Task::CloseAngle, Value()});
        todo.push_back({Task::Show, f->tangent});
        todo.push_back({Task::Space, Value()});
        todo.push_back({Task::Show, f->primal});
        break;
      }
      case ObjType::Port: {
        auto* port = static_cast<Port*>(o);
        if (port->kind == PortKind::Eof) {
          out += "#<eof>";
          break;
        }
        out += port->isInput() ? "#<input-port " : "#<output-port ";
        out += port->name;
        if (port->closed) out += " (closed)";
        out += '>';
        break;
      }
    }
  }
  return out;
}

}  // namespace dlam
