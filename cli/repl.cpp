// repl.cpp — the interactive loop: libedit line editing and history, multi-line
// forms (the reader says when input ended inside a form), Ctrl-C to cancel a line
// or interrupt a running evaluation, errors (running out of memory included) that
// leave the session going.
#include "repl.h"

#include <editline/readline.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "dlam/compiler.h"
#include "dlam/syntax.h"

#ifndef DLAM_VERSION
#define DLAM_VERSION "unknown"
#endif

namespace dlam::cli {

void printLine(VM& vm, std::string_view text) {
  std::string line;
  line.reserve(text.size() + 1);
  line.append(text);
  line.push_back('\n');
  if (vm.output)
    vm.output(line);
  else
    std::fwrite(line.data(), 1, line.size(), stdout);
}

void reportMessage(std::string_view message) {
  std::fflush(stdout);
  std::fwrite(message.data(), 1, message.size(), stderr);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

void reportError(const Error& e) { reportMessage(e.format()); }

namespace {

constexpr const char* kPrompt = "dlam> ";
constexpr const char* kContinuationPrompt = "  ... ";
constexpr const char* kChunk = "<repl>";
constexpr int kHistorySize = 1000;

const char kReplHelp[] =
    "Enter expressions; a form may span several lines and is evaluated when it is complete.\n"
    "The value of each expression that is not void is printed.\n"
    "  ,help        this text\n"
    "  ,quit        leave (as do Ctrl-D and (exit [status]))\n"
    "  Ctrl-C       discard the line being typed, or interrupt a running evaluation\n"
    "History is kept in ~/.dlam_history.";

// SIGINT: at the prompt it makes readline return, so the typed input is dropped; while
// code runs it asks the VM to stop at its next safe point, and a second Ctrl-C during
// the same evaluation ends the process (for code that does not reach one).
volatile sig_atomic_t gSigint = 0;
std::atomic<VM*> gEvaluating{nullptr};

extern "C" void onSigint(int) {
  gSigint = gSigint + 1;
  if (VM* vm = gEvaluating.load(std::memory_order_relaxed)) {
    if (gSigint > 1) {
      signal(SIGINT, SIG_DFL);
      raise(SIGINT);
      return;
    }
    vm->interrupt();
  }
}

class SigintGuard {
 public:
  SigintGuard() {
    struct sigaction sa {};
    sa.sa_handler = onSigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: readline must return on Ctrl-C
    sigaction(SIGINT, &sa, &old_);
  }
  ~SigintGuard() { sigaction(SIGINT, &old_, nullptr); }

 private:
  struct sigaction old_ {};
};

std::string historyPath() {
  const char* home = std::getenv("HOME");
  if (!home || !*home) return {};
  return std::string(home) + "/.dlam_history";
}

bool isBlank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n\f\v");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n\f\v");
  return s.substr(b, e - b + 1);
}

// `,word` alone on a line at the primary prompt is a REPL command.
bool isCommand(std::string_view line) {
  if (line.size() < 2 || line[0] != ',') return false;
  for (char c : line.substr(1))
    if (!(c >= 'a' && c <= 'z')) return false;
  return true;
}

enum class Entry { Complete, Incomplete, Empty, Invalid };

// Whether the accumulated text holds complete forms (a throwaway parse).
Entry classify(const std::string& text) {
  try {
    SxArena arena;
    return readAll(arena, text, kChunk).empty() ? Entry::Empty : Entry::Complete;
  } catch (const Error& e) {
    if (e.incomplete) return Entry::Incomplete;
    reportError(e);
    return Entry::Invalid;
  }
}

}  // namespace

int runRepl(VM& vm) {
  rl_readline_name = "dlam";
  using_history();
  stifle_history(kHistorySize);
  const std::string history = historyPath();
  if (!history.empty()) read_history(history.c_str());

  // Display output is routed through a wrapper that remembers whether the last
  // character written was a newline, so the next prompt starts on its own line.
  bool atLineStart = true;
  auto previousOutput = vm.output;
  vm.output = [&atLineStart, previousOutput](std::string_view s) {
    if (s.empty()) return;
    if (previousOutput)
      previousOutput(s);
    else
      std::fwrite(s.data(), 1, s.size(), stdout);
    atLineStart = s.back() == '\n';
  };
  struct RestoreOutput {
    VM& vm;
    std::function<void(std::string_view)> saved;
    ~RestoreOutput() { vm.output = std::move(saved); }
  } restore{vm, previousOutput};

  SigintGuard sigint;
  std::printf("dlam %s — ,help for help, Ctrl-D to leave\n", DLAM_VERSION);

  std::string buffer;
  int status = 0;
  for (;;) {
    try {
      if (!atLineStart) {
        std::fputc('\n', stdout);
        atLineStart = true;
      }
      std::fflush(stdout);
      gSigint = 0;
      char* raw = readline(buffer.empty() ? kPrompt : kContinuationPrompt);
      if (!raw) {
        if (gSigint) {  // Ctrl-C: drop what was typed
          std::fputc('\n', stdout);
          buffer.clear();
          continue;
        }
        std::fputc('\n', stdout);
        break;  // end of input
      }
      std::unique_ptr<char, void (*)(void*)> owned(raw, std::free);
      std::string line(raw);
      owned.reset();

      if (buffer.empty()) {
        std::string_view word = trim(line);
        if (word.empty()) continue;
        if (isCommand(word)) {
          add_history(line.c_str());
          if (word == ",quit" || word == ",q" || word == ",exit") break;
          if (word == ",help" || word == ",h" || word == ",?")
            std::puts(kReplHelp);
          else
            reportMessage("unknown command " + std::string(word) + " (,help lists them)");
          continue;
        }
      }
      if (!isBlank(line)) add_history(line.c_str());
      buffer += line;
      buffer += '\n';

      Entry entry = classify(buffer);
      if (entry == Entry::Incomplete) continue;
      if (entry == Entry::Complete) {
        gSigint = 0;
        gEvaluating.store(&vm);
        auto failed = [&](auto&& report) {
          gEvaluating.store(nullptr);
          if (!atLineStart || gSigint) {  // after output without a newline, or the tty's "^C"
            std::fputc('\n', stdout);
            atLineStart = true;
          }
          report();
          try {
            vm.recover();
          } catch (const std::bad_alloc&) {
            // The collection could not run: the stack is reset all the same, and a failed
            // collection leaves the heap as it was (the next one retries).
          }
        };
        try {
          evalSource(vm, buffer, kChunk, [&](Value v) { printLine(vm, vm.show(v, true)); });
          gEvaluating.store(nullptr);
        } catch (const Error& e) {
          if (e.kind == ErrorKind::Exit) {  // (exit status) leaves the REPL with that status
            gEvaluating.store(nullptr);
            status = e.exitCode;
            break;
          }
          failed([&] { reportError(e); });
        } catch (const std::bad_alloc&) {
          failed([] { reportMessage("error: out of memory"); });
        } catch (const std::exception& e) {
          failed([&] { reportMessage(std::string("error: internal error: ") + e.what()); });
        } catch (...) {
          failed([] { reportMessage("error: internal error"); });
        }
      }
      buffer.clear();
      if (!history.empty()) write_history(history.c_str());
    } catch (const std::bad_alloc&) {
      // Out of memory outside an evaluation (the line, the check for a complete form,
      // the history): the input is dropped and the session goes on.
      gEvaluating.store(nullptr);
      buffer.clear();
      reportMessage("error: out of memory");
    }
  }
  if (!history.empty()) write_history(history.c_str());
  std::fflush(stdout);
  return status;
}

}  // namespace dlam::cli
