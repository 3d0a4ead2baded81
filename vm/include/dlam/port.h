// port.h — the port object: a textual source or sink of bytes (a file, standard input,
// output or error, a string), and the end-of-file object, which is a port of kind Eof.
//
// A port owns its file descriptor and its buffer (C++ members: it is tracked, and its
// destructor, run by the collector when the port dies or by the VM's destructor, writes
// what is still buffered and closes the file, so no descriptor leaks). The procedures on
// ports (stdlib/src/primitives_ports.cpp) do the reading, writing and error reporting;
// the VM only allocates, counts, prints and finalises them.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "dlam/object.h"

namespace dlam {

enum class PortKind : uint8_t {
  Eof,        // the end-of-file object (not a port to read or write)
  FileIn,     // a file opened for reading (fd)
  FileOut,    // a file opened for writing (fd)
  StringIn,   // reads the text it was made with (all in buffer)
  StringOut,  // collects what is written (buffer), get-output-string gives it
  StdIn,      // standard input (fd 0, not closed by the port)
  StdOut,     // the VM's output (VM::output), where display writes by default
  StdErr,     // standard error: VM::errorOutput (by default stdout flushed, then stderr)
};

struct Port : Obj {
  PortKind kind = PortKind::Eof;
  bool closed = false;
  bool atEof = false;  // input: the descriptor has no more bytes (buffer may still hold some)
  int fd = -1;
  // What messages call it: the path as given to open-input-file / open-output-file,
  // or "<string>", "<stdin>", "<stdout>", "<stderr>".
  std::string name;
  // Input: bytes read but not yet consumed, from `pos`. Output: bytes not yet written
  // (a file port writes them when they reach kFlushAt, at flush-output-port, close-port
  // and collection), or all the text written (a string port).
  std::string buffer;
  size_t pos = 0;
  // Input: the line and column (in characters) of buffer[pos], for read's errors.
  uint32_t line = 1;
  uint32_t col = 1;
  // StdOut while the current output is redirected (with-output-to-file): where the
  // standard output goes meanwhile (the VM's output as it was), else empty.
  std::function<void(std::string_view)> sink;
  // The C++ memory the port owns (its buffer), counted as heap bytes (VM::noteOwnedBytes).
  uint64_t ownedBytes = 0;

  static constexpr size_t kFlushAt = 64 * 1024;

  bool isInput() const {
    return kind == PortKind::FileIn || kind == PortKind::StringIn || kind == PortKind::StdIn;
  }
  bool isOutput() const {
    return kind == PortKind::FileOut || kind == PortKind::StringOut || kind == PortKind::StdOut ||
           kind == PortKind::StdErr;
  }
  // Writes the buffered output of a file port to its descriptor: 0, or the errno of
  // the write that failed (the bytes not written stay buffered).
  int flushFile();
  // Closes the descriptor it owns (after flushFile for an output port); returns the
  // first errno met (0: none). A closed port stays closed.
  int close();
  // Best effort: the output is written and the descriptor closed, errors ignored.
  ~Port();
};

inline bool isPort(Value v) { return isObj(v, ObjType::Port); }
inline Port* asPort(Value v) { return static_cast<Port*>(v.asObject()); }
inline bool isEofObject(Value v) { return isPort(v) && asPort(v)->kind == PortKind::Eof; }

}  // namespace dlam
