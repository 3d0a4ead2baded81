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

// One frame of a trace, or a run of frames that are all the same call (a recursion):
// `repeat` of them. `skipped` frames were left out between this entry and the one
// before it (a trace keeps the innermost calls and the outermost few).
struct TraceEntry {
  std::string function;  // "<toplevel>" or the procedure name
  std::string file;
  SrcLoc loc;
  uint64_t repeat = 1;
  uint64_t skipped = 0;
};

class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string message, std::string file = {}, SrcLoc loc = {})
      : kind(kind), message(std::move(message)), file(std::move(file)), loc(loc) {}
  const char* what() const noexcept override { return message.c_str(); }

  // "FILE:LINE:COL: error: MESSAGE" followed by "  at NAME (FILE:LINE:COL)" lines, a
  // run of the same call shown once with how many more times it repeats.
  std::string format() const {
    std::string s;
    if (!file.empty()) {
      s += file;
      if (loc.known()) s += ":" + std::to_string(loc.line) + ":" + std::to_string(loc.col);
      s += ": ";
    }
    s += "error: " + message;
    for (const auto& t : trace) {
      if (t.skipped)
        s += "\n  ... " + std::to_string(t.skipped) + (t.skipped == 1 ? " frame" : " frames");
      s += "\n  at " + t.function + " (" + t.file;
      if (t.loc.known()) s += ":" + std::to_string(t.loc.line) + ":" + std::to_string(t.loc.col);
      s += ")";
      if (t.repeat > 1)
        s += "\n  ... repeated " + std::to_string(t.repeat - 1) +
             (t.repeat == 2 ? " more time" : " more times");
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
  // Runtime errors and raises, caught (vm/src/handlers.cpp): raised, the object is the
  // VM's (VM::raiseValue); decided, the handlers were asked, and handlerFrame is the
  // frame of the one that takes it (-1: none, the error is uncaught).
  bool raised = false;
  bool decided = false;
  int64_t handlerFrame = -1;
};

}  // namespace dlam
