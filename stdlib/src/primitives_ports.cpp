// primitives_ports.cpp — ports and files: R7RS's textual ports over files, standard
// input, output and error and strings (open-input-file, read-line, read, write-string,
// with-output-to-file...), the end-of-file object, file-exists? and delete-file, the
// conveniences read-lines and read-csv, and get-environment-variable.
//
// The file procedures work only when the VM's configuration allows file access
// (Config::fileIo: the command line unless --sandbox, an embedded VM if its config says
// file_io = true); otherwise each is the error "NAME: file access is disabled". The
// standard ports and string ports always work. Every failure (a missing file, a
// directory, a closed port, a failed write) is an error naming the procedure and the
// path, never a crash. Reading is iterative and buffered (64 KiB reads), so a file of a
// million lines reads in a loop without C++ recursion.
//
// The current output port is where display, write, newline and print write without a
// port: the VM's output (VM::output), which with-output-to-file points at its file for
// the time of its thunk (the standard output port then writes where the output went
// before, Port::sink). The current ports and the end-of-file object are kept in
// globals whose names hold a control character, which no program can write.
//
// Characters are the language's character values (charValue, charText).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dlam/compiler.h"
#include "dlam/lexical.h"
#include "dlam/port.h"
#include "dlam/syntax.h"
#include "primitives.h"

namespace dlam::prim {

namespace {

constexpr size_t kReadChunk = 64 * 1024;

// Hidden names: a \001 first (octal, at most three digits: "\x01current" is "\x1c" "urrent").
const char kCurrentInput[] = "\001current-input-port";
const char kCurrentOutput[] = "\001current-output-port";
const char kCurrentError[] = "\001current-error-port";
const char kStandardOutput[] = "\001standard-output-port";
const char kEofObject[] = "\001eof-object";

Port* hiddenPort(VM& vm, const char* name) { return asPort(vm.global(name)); }
Value eofObject(VM& vm) { return vm.global(kEofObject); }

// ---- characters ----------------------------------------------------------------------

// The character whose text (UTF-8, or one raw byte) is utf8: what nextChar read.
Value charValue(VM&, std::string_view utf8) {
  size_t len = 0;
  return Value::character(decodeChar(utf8.data(), utf8.data() + utf8.size(), len));
}

// The text of the character in a[i] as a string holds it, or a type error naming `who`.
std::string charText(VM& vm, const char* who, Value* a, int i) {
  Value v = unwrapAttached(a[i]);
  if (!v.isChar()) vm.typeError(who, i, "character", a[i]);
  std::string out;
  appendChar(out, v.asChar());
  return out;
}

// ---- arguments and errors ----------------------------------------------------------

void requireFiles(VM& vm, const char* who) {
  if (!vm.config().fileIo) vm.runtimeError(std::string(who) + ": file access is disabled");
}

std::string stringArg(VM& vm, const char* who, Value* a, int i) {
  Value v = unwrapAttached(a[i]);
  if (!isString(v)) vm.typeError(who, i, "string", a[i]);
  return std::string(asString(v)->view());
}

// A path: a string without NUL bytes.
std::string pathArg(VM& vm, const char* who, Value* a, int i) {
  std::string path = stringArg(vm, who, a, i);
  if (path.find('\0') != std::string::npos)
    vm.runtimeError(std::string(who) + ": a path may not hold a NUL character");
  return path;
}

[[noreturn]] void fileError(VM& vm, const char* who, const char* what, const std::string& path,
                            int err) {
  vm.runtimeError(std::string(who) + ": cannot " + what + " '" + path + "': " + std::strerror(err));
}

void checkOpen(VM& vm, const char* who, const Port* p) {
  if (p->closed) vm.runtimeError(std::string(who) + ": the port '" + p->name + "' is closed");
}

// The port in a[i] if the call has that argument, else the current port of that name.
Port* portArg(VM& vm, const char* who, Value* a, int n, int i, bool input) {
  if (i >= n) return hiddenPort(vm, input ? kCurrentInput : kCurrentOutput);
  Value v = unwrapAttached(a[i]);
  if (!isPort(v) || (input ? !asPort(v)->isInput() : !asPort(v)->isOutput()))
    vm.typeError(who, i, input ? "input port" : "output port", a[i]);
  Port* p = asPort(v);
  checkOpen(vm, who, p);
  return p;
}

// Counts the port's buffer as heap memory (it may raise the heap-limit error).
void countBuffer(VM& vm, Port* p) { vm.noteOwnedBytes(p->ownedBytes, heapBytesOf(p->buffer)); }

// ---- opening -------------------------------------------------------------------------

// Opens a file port. When the process has no descriptor left, the ports that are
// garbage may hold them: a full collection closes those, and the open is tried again
// (the collection may free any object not rooted: a caller keeps what it needs in Roots).
Port* openFile(VM& vm, const char* who, const std::string& path, bool output) {
  auto tryOpen = [&] {
    return output ? ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)
                  : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  };
  int fd = tryOpen();
  if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
    vm.collectGarbage(VM::GcKind::Major);
    fd = tryOpen();
  }
  if (fd < 0) fileError(vm, who, "open", path, errno);
  struct stat sb {};
  if (!output && ::fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    ::close(fd);
    fileError(vm, who, "open", path, EISDIR);
  }
  Port* p;
  try {
    p = vm.makePort(output ? PortKind::FileOut : PortKind::FileIn);
  } catch (...) {
    ::close(fd);
    throw;
  }
  p->fd = fd;
  p->name = path;
  return p;
}

// Closes a port, raising the error of a write that failed on the way.
void closePort(VM& vm, const char* who, Port* p) {
  if (p->kind == PortKind::StdIn || p->kind == PortKind::StdOut || p->kind == PortKind::StdErr)
    return;  // the standard ports stay open
  int err = p->close();
  countBuffer(vm, p);
  if (err) fileError(vm, who, "write", p->name, err);
}

// ---- reading -------------------------------------------------------------------------

// Reads more of the port's input into its buffer (at least `atLeast` bytes asked for);
// false at the end of the input.
bool fill(VM& vm, const char* who, Port* p, size_t atLeast = kReadChunk) {
  if (p->atEof || p->fd < 0) {
    p->atEof = true;
    return false;
  }
  if (p->pos > 0 && p->pos >= p->buffer.size() / 2) {
    p->buffer.erase(0, p->pos);
    p->pos = 0;
  }
  size_t old = p->buffer.size();
  p->buffer.resize(old + atLeast);
  ssize_t n;
  do {
    n = ::read(p->fd, p->buffer.data() + old, atLeast);
  } while (n < 0 && errno == EINTR);
  int err = errno;
  p->buffer.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
  countBuffer(vm, p);
  if (n < 0) fileError(vm, who, "read", p->name, err);
  if (n == 0) p->atEof = true;
  return n > 0;
}

size_t available(const Port* p) { return p->buffer.size() - p->pos; }
const char* cursor(const Port* p) { return p->buffer.data() + p->pos; }

// Consumes n buffered bytes, keeping the line and column of the position.
void consume(Port* p, size_t n) {
  const char* s = cursor(p);
  const char* e = s + n;
  for (const void* nl; (nl = std::memchr(s, '\n', static_cast<size_t>(e - s)));) {
    s = static_cast<const char*>(nl) + 1;
    ++p->line;
    p->col = 1;
  }
  for (; s < e; ++s)
    if ((static_cast<unsigned char>(*s) & 0xC0) != 0x80) ++p->col;
  p->pos += n;
}

// The bytes of the next character (buffered; 0 at the end of the input). An ill-formed
// UTF-8 byte is a character of its own.
size_t nextChar(VM& vm, const char* who, Port* p) {
  if (available(p) == 0 && !fill(vm, who, p)) return 0;
  auto lead = static_cast<unsigned char>(*cursor(p));
  size_t want = lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  while (available(p) < want && fill(vm, who, p)) {
  }
  if (want == 1) return 1;
  size_t len = utf8SequenceLength(cursor(p), cursor(p) + available(p));
  return len ? len : 1;
}

Value readLineFrom(VM& vm, const char* who, Port* p) {
  size_t scanned = 0;  // bytes after pos known to hold no newline
  for (;;) {
    const void* nl = std::memchr(cursor(p) + scanned, '\n', available(p) - scanned);
    if (nl) {
      size_t len = static_cast<size_t>(static_cast<const char*>(nl) - cursor(p));
      size_t keep = len > 0 && cursor(p)[len - 1] == '\r' ? len - 1 : len;
      Value line = vm.makeString(std::string_view(cursor(p), keep));
      consume(p, len + 1);
      return line;
    }
    scanned = available(p);
    if (!fill(vm, who, p)) break;
  }
  if (available(p) == 0) return eofObject(vm);
  Value line = vm.makeString(std::string_view(cursor(p), available(p)));
  consume(p, available(p));
  return line;
}

Value readLine(VM& vm, Value* a, int n) {
  return readLineFrom(vm, "read-line", portArg(vm, "read-line", a, n, 0, true));
}

Value readChar(VM& vm, Value* a, int n) {
  Port* p = portArg(vm, "read-char", a, n, 0, true);
  size_t len = nextChar(vm, "read-char", p);
  if (!len) return eofObject(vm);
  Value c = charValue(vm, std::string_view(cursor(p), len));
  consume(p, len);
  return c;
}

Value peekChar(VM& vm, Value* a, int n) {
  Port* p = portArg(vm, "peek-char", a, n, 0, true);
  size_t len = nextChar(vm, "peek-char", p);
  return len ? charValue(vm, std::string_view(cursor(p), len)) : eofObject(vm);
}

// (read-string k [port]): the next k characters, fewer at the end of the input, or the
// end-of-file object if there are none.
Value readString(VM& vm, Value* a, int n) {
  double k = num(vm, "read-string", a, 0);
  if (!(k >= 0) || k != static_cast<double>(static_cast<uint64_t>(k)))
    vm.typeError("read-string", 0, "non-negative integer", a[0]);
  Port* p = portArg(vm, "read-string", a, n, 1, true);
  std::string out;
  for (double i = 0; i < k; ++i) {
    size_t len = nextChar(vm, "read-string", p);
    if (!len) {
      if (out.empty() && k > 0) return eofObject(vm);
      break;
    }
    out.append(cursor(p), len);
    consume(p, len);
  }
  return vm.makeString(out);
}

// Whether the buffered input may end in the middle of a token (more input could
// continue it): it does not end with a delimiter.
bool mayBeCut(const Port* p) {
  return !p->atEof &&
         (available(p) == 0 || !isDelimiter(static_cast<unsigned char>(p->buffer.back())));
}

// (read [port]): one datum, read with the language's reader and converted as quote
// converts it. A syntax error is located in the port's text (FILE:LINE:COL).
Value read(VM& vm, Value* a, int n) {
  Port* p = portArg(vm, "read", a, n, 0, true);
  for (;;) {
    std::string_view rest(cursor(p), available(p));
    Value datum;
    size_t used = 0;
    bool found;
    try {
      found = readDatum(vm, rest, p->name, SrcLoc{p->line, p->col}, datum, used);
    } catch (Error& e) {
      // Text cut by the end of the buffer: read more (as much again, so that a large
      // datum is read over in O(its size)) and start again.
      if ((e.incomplete || mayBeCut(p)) && fill(vm, "read", p, std::max(kReadChunk, rest.size())))
        continue;
      if (e.kind == ErrorKind::Limit) throw;
      e.kind = ErrorKind::Runtime;
      e.message = "read: " + e.message;
      e.incomplete = false;
      vm.raiseError(std::move(e));
    }
    if ((!found || used == rest.size()) && mayBeCut(p) &&
        fill(vm, "read", p, std::max(kReadChunk, rest.size())))
      continue;
    if (!found) {
      consume(p, available(p));
      return eofObject(vm);
    }
    consume(p, used);
    return datum;
  }
}

// ---- writing -------------------------------------------------------------------------

}  // namespace

void writeToPort(VM& vm, const char* who, Port* p, std::string_view text) {
  checkOpen(vm, who, p);  // (the current output may be a file the thunk closed)
  switch (p->kind) {
    case PortKind::StdOut:
      if (p->sink)
        p->sink(text);
      else
        vm.output(text);
      return;
    case PortKind::StdErr:
      vm.errorOutput(text);
      return;
    case PortKind::StringOut:
      p->buffer.append(text);
      countBuffer(vm, p);
      return;
    case PortKind::FileOut:
      p->buffer.append(text);
      if (p->buffer.size() >= Port::kFlushAt)
        if (int err = p->flushFile()) fileError(vm, who, "write", p->name, err);
      countBuffer(vm, p);
      return;
    default:
      return;
  }
}

void writeOutput(VM& vm, const char* who, Value* a, int n, int i, std::string_view text) {
  if (i >= n) {
    if (!text.empty()) vm.output(text);
    return;
  }
  writeToPort(vm, who, portArg(vm, who, a, n, i, false), text);
}

namespace {

Value writeString(VM& vm, Value* a, int n) {
  Value s = unwrapAttached(a[0]);
  if (!isString(s)) vm.typeError("write-string", 0, "string", a[0]);
  writeOutput(vm, "write-string", a, n, 1, asString(s)->view());
  return Value::voidValue();
}

Value writeChar(VM& vm, Value* a, int n) {
  writeOutput(vm, "write-char", a, n, 1, charText(vm, "write-char", a, 0));
  return Value::voidValue();
}

Value flushOutputPort(VM& vm, Value* a, int n) {
  Port* p = portArg(vm, "flush-output-port", a, n, 0, false);
  switch (p->kind) {
    case PortKind::StdOut:
      std::fflush(stdout);
      break;
    case PortKind::StdErr:
      std::fflush(stderr);
      break;
    case PortKind::FileOut:
      if (int err = p->flushFile()) fileError(vm, "flush-output-port", "write", p->name, err);
      break;
    default:
      break;
  }
  return Value::voidValue();
}

// ---- ports as values -----------------------------------------------------------------

Value openInputFile(VM& vm, Value* a, int) {
  requireFiles(vm, "open-input-file");
  return Value::object(
      openFile(vm, "open-input-file", pathArg(vm, "open-input-file", a, 0), false));
}

Value openOutputFile(VM& vm, Value* a, int) {
  requireFiles(vm, "open-output-file");
  return Value::object(
      openFile(vm, "open-output-file", pathArg(vm, "open-output-file", a, 0), true));
}

Value openInputString(VM& vm, Value* a, int) {
  std::string text = stringArg(vm, "open-input-string", a, 0);
  Port* p = vm.makePort(PortKind::StringIn);
  p->name = "<string>";
  p->buffer = std::move(text);
  p->atEof = true;
  countBuffer(vm, p);
  return Value::object(p);
}

Value openOutputString(VM& vm, Value*, int) {
  Port* p = vm.makePort(PortKind::StringOut);
  p->name = "<string>";
  return Value::object(p);
}

Value getOutputString(VM& vm, Value* a, int) {
  Value v = unwrapAttached(a[0]);
  if (!isPort(v) || asPort(v)->kind != PortKind::StringOut)
    vm.typeError("get-output-string", 0, "string output port", a[0]);
  return vm.makeString(asPort(v)->buffer);
}

Port* anyPort(VM& vm, const char* who, Value* a, int i) {
  Value v = unwrapAttached(a[i]);
  if (!isPort(v) || asPort(v)->kind == PortKind::Eof) vm.typeError(who, i, "port", a[i]);
  return asPort(v);
}

Value closePortNative(VM& vm, Value* a, int) {
  closePort(vm, "close-port", anyPort(vm, "close-port", a, 0));
  return Value::voidValue();
}

Value closeInputPort(VM& vm, Value* a, int) {
  Port* p = anyPort(vm, "close-input-port", a, 0);
  if (!p->isInput()) vm.typeError("close-input-port", 0, "input port", a[0]);
  closePort(vm, "close-input-port", p);
  return Value::voidValue();
}

Value closeOutputPort(VM& vm, Value* a, int) {
  Port* p = anyPort(vm, "close-output-port", a, 0);
  if (!p->isOutput()) vm.typeError("close-output-port", 0, "output port", a[0]);
  closePort(vm, "close-output-port", p);
  return Value::voidValue();
}

bool isRealPort(Value v) { return isPort(v) && asPort(v)->kind != PortKind::Eof; }

Value portP(VM&, Value* a, int) { return Value::boolean(isRealPort(unwrapAttached(a[0]))); }
Value inputPortP(VM&, Value* a, int) {
  Value v = unwrapAttached(a[0]);
  return Value::boolean(isRealPort(v) && asPort(v)->isInput());
}
Value outputPortP(VM&, Value* a, int) {
  Value v = unwrapAttached(a[0]);
  return Value::boolean(isRealPort(v) && asPort(v)->isOutput());
}
Value inputPortOpenP(VM& vm, Value* a, int) {
  Port* p = anyPort(vm, "input-port-open?", a, 0);
  return Value::boolean(p->isInput() && !p->closed);
}
Value outputPortOpenP(VM& vm, Value* a, int) {
  Port* p = anyPort(vm, "output-port-open?", a, 0);
  return Value::boolean(p->isOutput() && !p->closed);
}

Value eofObjectNative(VM& vm, Value*, int) { return eofObject(vm); }
Value eofObjectP(VM&, Value* a, int) { return Value::boolean(isEofObject(unwrapAttached(a[0]))); }

Value currentInputPort(VM& vm, Value*, int) { return vm.global(kCurrentInput); }
Value currentOutputPort(VM& vm, Value*, int) { return vm.global(kCurrentOutput); }
Value currentErrorPort(VM& vm, Value*, int) { return vm.global(kCurrentError); }

// ---- procedures around a port: call-with-*-file, with-output-to-file -------------------

// Calls f with the arguments; if it fails (an error, an exit), the port is closed
// before the failure goes on.
Value callClosing(VM& vm, Port* p, Value f, Value* args, int nargs) {
  VM::Root keep(vm, Value::object(p));
  try {
    return vm.call(f, args, nargs);
  } catch (...) {
    p->close();
    throw;
  }
}

Value callWithFile(VM& vm, Value* a, const char* who, bool output) {
  requireFiles(vm, who);
  VM::Root proc(vm, a[1]);
  Port* p = openFile(vm, who, pathArg(vm, who, a, 0), output);
  Value port = Value::object(p);
  Value r = callClosing(vm, p, proc.get(), &port, 1);
  VM::Root keep(vm, r);
  closePort(vm, who, p);
  return r;
}

Value callWithInputFile(VM& vm, Value* a, int) {
  return callWithFile(vm, a, "call-with-input-file", false);
}
Value callWithOutputFile(VM& vm, Value* a, int) {
  return callWithFile(vm, a, "call-with-output-file", true);
}

// (with-output-to-file path thunk): the thunk runs with the file as the current output
// port; the output before is restored however the thunk ends.
Value withOutputToFile(VM& vm, Value* a, int) {
  const char* who = "with-output-to-file";
  requireFiles(vm, who);
  VM::Root thunk(vm, a[1]);
  Port* file = openFile(vm, who, pathArg(vm, who, a, 0), true);
  VM::Root before(vm, vm.global(kCurrentOutput));
  Port* standard = hiddenPort(vm, kStandardOutput);
  std::function<void(std::string_view)> savedOutput = vm.output;
  bool outermost = !standard->sink;
  if (outermost) standard->sink = savedOutput;
  auto restore = [&] {
    vm.output = savedOutput;
    if (outermost) standard->sink = nullptr;
    vm.defineGlobal(kCurrentOutput, before.get());
  };
  vm.defineGlobal(kCurrentOutput, Value::object(file));
  // Errors name the procedure writing (display, print...): the native being called.
  vm.output = [&vm, file](std::string_view s) {
    writeToPort(vm, vm.callingNative ? vm.callingNative->name : "with-output-to-file", file, s);
  };
  Value r;
  try {
    r = callClosing(vm, file, thunk.get(), nullptr, 0);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  VM::Root keep(vm, r);
  closePort(vm, who, file);
  return r;
}

// ---- files ---------------------------------------------------------------------------

Value fileExistsP(VM& vm, Value* a, int) {
  requireFiles(vm, "file-exists?");
  std::string path = pathArg(vm, "file-exists?", a, 0);
  struct stat sb {};
  return Value::boolean(::stat(path.c_str(), &sb) == 0);
}

Value deleteFile(VM& vm, Value* a, int) {
  requireFiles(vm, "delete-file");
  std::string path = pathArg(vm, "delete-file", a, 0);
  if (::unlink(path.c_str()) != 0) fileError(vm, "delete-file", "delete", path, errno);
  return Value::voidValue();
}

// The whole text of the file at a[0], for read-lines and read-csv.
std::string slurp(VM& vm, const char* who, Value* a) {
  requireFiles(vm, who);
  Port* p = openFile(vm, who, pathArg(vm, who, a, 0), false);
  while (fill(vm, who, p, std::max(kReadChunk, p->buffer.size()))) {
  }
  std::string text = std::move(p->buffer);
  p->close();
  countBuffer(vm, p);
  return text;
}

// (read-lines path): the lines of the file, without their line ends ("\n" or "\r\n");
// a last line without one counts too.
Value readLines(VM& vm, Value* a, int) {
  std::string text = slurp(vm, "read-lines", a);
  std::vector<Value> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    size_t end = nl == std::string::npos ? text.size() : nl;
    size_t keep = end > start && text[end - 1] == '\r' ? end - 1 : end;
    lines.push_back(vm.makeString(std::string_view(text).substr(start, keep - start)));
    start = end + 1;
  }
  return vm.list(lines.data(), lines.size());
}

// A CSV field: a number if it is not quoted and reads as one without the blanks
// around it, else the string.
Value csvField(VM& vm, const std::string& text, bool quoted) {
  if (!quoted) {
    size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t");
    double x;
    if (b != std::string::npos && parseNumber(std::string_view(text).substr(b, e - b + 1), 10, x))
      return Value::numberChecked(x);
  }
  return vm.makeString(text);
}

// (read-csv path [separator]): the rows of a CSV file (RFC 4180: fields in double
// quotes may hold separators, line ends and "" for a quote), each a list of fields.
// Blank lines are skipped.
Value readCsv(VM& vm, Value* a, int n) {
  const char* who = "read-csv";
  char sep = ',';
  if (n > 1) {
    std::string s = charText(vm, who, a, 1);
    if (s.size() != 1 || s[0] == '"' || s[0] == '\n' || s[0] == '\r')
      vm.runtimeError(
          "read-csv: the separator must be a one-byte character other than a quote "
          "or a line end");
    sep = s[0];
  }
  std::string path = pathArg(vm, who, a, 0);
  std::string text = slurp(vm, who, a);
  std::vector<Value> rows, row;
  std::string field;
  uint32_t line = 1;
  size_t lineStart = 0, i = 0;
  bool quoted = false;
  auto endField = [&] {
    row.push_back(csvField(vm, field, quoted));
    field.clear();
    quoted = false;
  };
  auto endRow = [&] {
    endField();
    bool blank = row.size() == 1 && isString(row[0]) && asString(row[0])->length() == 0;
    if (!blank) rows.push_back(vm.list(row.data(), row.size()));
    row.clear();
  };
  auto fail = [&](size_t at, const std::string& message) {
    uint32_t col = 1;
    for (size_t k = lineStart; k < at; ++k)
      if ((static_cast<unsigned char>(text[k]) & 0xC0) != 0x80) ++col;
    vm.raiseError(Error(ErrorKind::Runtime, "read-csv: " + message, path, SrcLoc{line, col}));
  };
  while (i < text.size()) {
    char c = text[i];
    if (c == '"' && field.empty() && !quoted) {
      size_t open = i;
      uint32_t openLine = line;
      size_t openLineStart = lineStart;
      quoted = true;
      for (++i;; ++i) {
        if (i >= text.size()) {
          line = openLine;
          lineStart = openLineStart;
          fail(open, "unterminated quoted field");
        }
        if (text[i] == '"') {
          if (i + 1 < text.size() && text[i + 1] == '"') {
            field += '"';
            ++i;
            continue;
          }
          ++i;
          break;
        }
        if (text[i] == '\n') {
          ++line;
          lineStart = i + 1;
        }
        field += text[i];
      }
      if (i < text.size() && text[i] != sep && text[i] != '\n' &&
          !(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n'))
        fail(i, "a quoted field must end at a separator or a line end");
      continue;
    }
    if (c == sep) {
      endField();
    } else if (c == '\n' || (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      if (c == '\r') ++i;
      endRow();
      ++line;
      lineStart = i + 1;
    } else {
      if (quoted) fail(i, "a quoted field must end at a separator or a line end");
      field += c;
    }
    ++i;
  }
  if (!field.empty() || quoted || !row.empty()) endRow();
  return vm.list(rows.data(), rows.size());
}

// ---- environment ---------------------------------------------------------------------

Value getEnvironmentVariable(VM& vm, Value* a, int) {
  std::string name = stringArg(vm, "get-environment-variable", a, 0);
  const char* value = name.find('\0') == std::string::npos ? std::getenv(name.c_str()) : nullptr;
  return value ? vm.makeString(value) : Value::boolean(false);
}

Port* standardPort(VM& vm, PortKind kind, const char* name, int fd) {
  Port* p = vm.makePort(kind);
  p->name = name;
  p->fd = fd;
  return p;
}

}  // namespace

void openPortPrimitives(Registrar& r) {
  VM& vm = r.vm;
  Port* eof = vm.makePort(PortKind::Eof);
  eof->name = "<eof>";
  vm.defineGlobal(kEofObject, Value::object(eof));
  vm.defineGlobal(kCurrentInput, Value::object(standardPort(vm, PortKind::StdIn, "<stdin>", 0)));
  Value out = Value::object(standardPort(vm, PortKind::StdOut, "<stdout>", -1));
  vm.defineGlobal(kCurrentOutput, out);
  vm.defineGlobal(kStandardOutput, out);
  vm.defineGlobal(kCurrentError, Value::object(standardPort(vm, PortKind::StdErr, "<stderr>", 2)));

  vm.defineNative("open-input-file", openInputFile, 1, 1);
  vm.defineNative("open-output-file", openOutputFile, 1, 1);
  vm.defineNative("open-input-string", openInputString, 1, 1);
  vm.defineNative("open-output-string", openOutputString, 0, 0);
  vm.defineNative("get-output-string", getOutputString, 1, 1);
  vm.defineNative("close-port", closePortNative, 1, 1);
  vm.defineNative("close-input-port", closeInputPort, 1, 1);
  vm.defineNative("close-output-port", closeOutputPort, 1, 1);
  vm.defineNative("port?", portP, 1, 1);
  vm.defineNative("input-port?", inputPortP, 1, 1);
  vm.defineNative("output-port?", outputPortP, 1, 1);
  vm.defineNative("textual-port?", portP, 1, 1);
  vm.defineNative("input-port-open?", inputPortOpenP, 1, 1);
  vm.defineNative("output-port-open?", outputPortOpenP, 1, 1);
  vm.defineNative("read-line", readLine, 0, 1);
  vm.defineNative("read-char", readChar, 0, 1);
  vm.defineNative("peek-char", peekChar, 0, 1);
  vm.defineNative("read-string", readString, 1, 2);
  vm.defineNative("read", read, 0, 1);
  vm.defineNative("eof-object", eofObjectNative, 0, 0);
  vm.defineNative("eof-object?", eofObjectP, 1, 1);
  vm.defineNative("write-string", writeString, 1, 2);
  vm.defineNative("write-char", writeChar, 1, 2);
  vm.defineNative("flush-output-port", flushOutputPort, 0, 1);
  vm.defineNative("current-input-port", currentInputPort, 0, 0);
  vm.defineNative("current-output-port", currentOutputPort, 0, 0);
  vm.defineNative("current-error-port", currentErrorPort, 0, 0);
  vm.defineNative("call-with-input-file", callWithInputFile, 2, 2);
  vm.defineNative("call-with-output-file", callWithOutputFile, 2, 2);
  vm.defineNative("with-output-to-file", withOutputToFile, 2, 2);
  vm.defineNative("file-exists?", fileExistsP, 1, 1);
  vm.defineNative("delete-file", deleteFile, 1, 1);
  vm.defineNative("read-lines", readLines, 1, 1);
  vm.defineNative("read-csv", readCsv, 1, 2);
  vm.defineNative("get-environment-variable", getEnvironmentVariable, 1, 1);
}

}  // namespace dlam::prim
