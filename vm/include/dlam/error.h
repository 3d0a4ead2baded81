// error.h — the errors dlam raises inside the runtime and how they are reported.
//
// Inside the VM, compiler and natives, errors are C++ exceptions of one type,
// dlam::Error, carrying a kind, a message, a source location and a trace of dlam
// frames. Every extern "C" entry point catches them; nothing unwinds into host code.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace dlam {

// Exit is not an error: (exit [code]) ends the run that way, carrying exitCode, so that
// it unwinds like one (to the CLI, the REPL or the C API, which each end the run).
enum class ErrorKind { Syntax, Runtime, Limit, Config, Api, Exit };

struct SrcLoc {
  uint32_t line = 0;
  uint32_t col = 0;
  bool known() const { return line != 0; }
};

struct TraceEntry {
  std::string function;  // "<toplevel>" or the procedure name
  std::string file;
  SrcLoc loc;
};

class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string message, std::string file = {}, SrcLoc loc = {})
      : kind(kind), message(std::move(message)), file(std::move(file)), loc(loc) {}
  const char* what() const noexcept override { return message.c_str(); }

  // "FILE:LINE:COL: error: MESSAGE" followed by "  at NAME (FILE:LINE:COL)" lines.
  std::string format() const {
    std::string s;
    if (!file.empty()) {
      s += file;
      if (loc.known()) s += ":" + std::to_string(loc.line) + ":" + std::to_string(loc.col);
      s += ": ";
    }
    s += "error: " + message;
    for (const auto& t : trace) {
      s += "\n  at " + t.function + " (" + t.file;
      if (t.loc.known()) s += ":" + std::to_string(t.loc.line) + ":" + std::to_string(t.loc.col);
      s += ")";
    }
    return s;
  }

  ErrorKind kind;
  std::string message;
  std::string file;
  SrcLoc loc;
  std::vector<TraceEntry> trace;
  bool incomplete = false;  // syntax error only: the input ended inside a form (REPL continues)
  int exitCode = 0;         // ErrorKind::Exit only: the status given to exit
};

}  // namespace dlam
