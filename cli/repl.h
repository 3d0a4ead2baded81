// repl.h — the interactive loop of the `dlam` command, and output helpers it shares
// with main.cpp.
#pragma once
#include <string_view>

#include "dlam/error.h"
#include "dlam/vm.h"

namespace dlam::cli {

// Reads forms from the terminal with line editing and history (~/.dlam_history),
// continuing a form over several lines until it is complete, and evaluates each
// entry, printing its non-void values. Errors are reported and the session goes
// on. Returns the exit status: 0 at end of input or `,quit`, the status given to
// (exit [status]) when an entry calls it.
int runRepl(VM& vm);

// Writes `text` and a newline where the VM's display output goes.
void printLine(VM& vm, std::string_view text);

// Reports an error on stderr as "FILE:LINE:COL: error: MESSAGE" plus its trace,
// after flushing stdout so the two streams appear in order.
void reportError(const Error& e);
void reportMessage(std::string_view message);

}  // namespace dlam::cli
