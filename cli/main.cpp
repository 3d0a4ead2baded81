// main.cpp — the `dlam` command (docs/language.md, "The dlam command"): runs a script,
// a -e expression or standard input, starts the REPL on a terminal, or prints bytecode
// (--disasm).
//
// Exit status: 0 success, 1 an error in the script (syntax, runtime, limit),
// 2 a usage or configuration error.
//
// Standard output is line-buffered on a terminal and fully buffered otherwise (-u:
// unbuffered). It is flushed before anything goes to standard error (cli::reportMessage,
// the current error port) and at every exit: the end of the run, an error, a limit,
// (exit) (finish and reportException below).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "config_loader.h"
#include "dlam/compiler.h"
#include "dlam/config.h"
#include "dlam/error.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"
#include "foreign.h"
#include "repl.h"

#ifndef DLAM_VERSION
#define DLAM_VERSION "unknown"
#endif

namespace {

constexpr int kExitOk = 0;
constexpr int kExitScriptError = 1;
constexpr int kExitUsage = 2;

const char kUsage[] =
    "usage: dlam [OPTION...] FILE [ARG...]     run the script FILE\n"
    "       dlam [OPTION...] - [ARG...]        run a script read from standard input\n"
    "       dlam [OPTION...] -e CODE [ARG...]  run CODE, printing the value of each top-level\n"
    "                                          expression that is not void, one per line\n"
    "       dlam [OPTION...] --disasm FILE     print the bytecode of FILE's functions instead\n"
    "                                          of running it (FILE may be -)\n"
    "       dlam [OPTION...]                   start the REPL on a terminal; otherwise run\n"
    "                                          standard input as a script\n"
    "\n"
    "Options (before the script; the first FILE, - or -e CODE ends them):\n"
    "  -e, --eval CODE     run CODE (the arguments after it are script arguments)\n"
    "  --config FILE.lua   load a configuration file; may be repeated, later files win\n"
    "  --sandbox           turn off foreign calls, file inclusion and file access\n"
    "  --full-trace        error traces also show the standard library's frames\n"
    "  -u                  unbuffered standard output (otherwise line-buffered on a\n"
    "                      terminal, fully buffered elsewhere)\n"
    "  --disasm FILE       print bytecode instead of running\n"
    "  --version           print the version and exit\n"
    "  -h, --help          print this help and exit\n"
    "  --                  end of options: the next argument is the script\n"
    "\n"
    "The global `command-line` is the list (SCRIPT ARG...), also returned by\n"
    "(command-line): SCRIPT is the file name, \"-\" for standard input, \"-e\" for -e,\n"
    "\"\" in the REPL.\n"
    "\n"
    "Configuration file (Lua 5.4; every key optional):\n"
    "  heap_limit_mb     = 1024      -- the heap may not grow past this many MB\n"
    "  stack_limit       = 1000000   -- depth of recursion allowed (a 64th more, at\n"
    "                                -- most 1024 frames, is kept for the callers)\n"
    "  instruction_limit = 0         -- stop after this many instructions; 0: no limit\n"
    "  include_path      = { \".\" }   -- directories searched by include\n"
    "  ffi = { enabled = true, libraries = { \"libm.so.6\" } }\n"
    "                                -- foreign calls; libraries: an allow-list, nil: any\n"
    "  file_io           = true      -- the file procedures (open-input-file, ...)\n"
    "  blas_threads      = 1         -- dot's BLAS threads (more than 1: threaded OpenBLAS)\n"
    "On the command line foreign calls and file access are enabled unless the\n"
    "configuration turns them off or --sandbox is given.\n"
    "\n"
    "REPL: a form may span several lines; ,help and ,quit; Ctrl-D leaves;\n"
    "history in ~/.dlam_history.\n"
    "\n"
    "Exit status: 0 success; 1 an error in the script (syntax, runtime, limit);\n"
    "2 a usage or configuration error (unknown option, unreadable script or config).\n";

// A usage or input problem: exit status 2. `hint` adds the pointer to --help.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message, bool hint = true)
      : std::runtime_error(message), hint(hint) {}
  bool hint;
};

UsageError cannotOpen(const std::string& path, const std::string& why) {
  return UsageError("cannot open " + path + ": " + why, false);
}

enum class Mode { Default, Script, Stdin, Eval, Disasm };

struct Options {
  Mode mode = Mode::Default;
  std::string target;                // script path, -e code or --disasm path
  std::vector<std::string> args;     // script arguments
  std::vector<std::string> configs;  // --config files, in order
  bool sandbox = false;
  bool fullTrace = false;
  bool unbuffered = false;  // -u
};

// "--name VALUE" or "--name=VALUE"; advances i past what it consumed.
bool takeValue(int argc, char** argv, int& i, const char* name, std::string& out) {
  std::string_view a = argv[i];
  size_t n = std::strlen(name);
  if (a.substr(0, n) != name) return false;
  if (a.size() == n) {
    if (i + 1 >= argc) throw UsageError(std::string("option '") + name + "' needs an argument");
    out = argv[++i];
    return true;
  }
  if (a[n] != '=' || name[1] != '-') return false;  // only long options take "=VALUE"
  out = std::string(a.substr(n + 1));
  return true;
}

// Parses the command line. --help and --version print and exit at once.
Options parseArgs(int argc, char** argv) {
  Options o;
  auto rest = [&](int from) {
    for (int j = from; j < argc; ++j) o.args.emplace_back(argv[j]);
  };
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    std::string value;
    if (a == "--") {
      if (i + 1 < argc) {
        o.mode = Mode::Script;
        o.target = argv[i + 1];
        rest(i + 2);
      }
      return o;
    }
    if (a == "-") {
      o.mode = Mode::Stdin;
      o.target = "-";
      rest(i + 1);
      return o;
    }
    if (a.empty() || a[0] != '-') {
      o.mode = Mode::Script;
      o.target = argv[i];
      rest(i + 1);
      return o;
    }
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(std::fflush(stdout) == 0 ? kExitOk : kExitScriptError);
    }
    if (a == "--version") {
      std::printf("dlam %s\n", DLAM_VERSION);
      std::exit(std::fflush(stdout) == 0 ? kExitOk : kExitScriptError);
    }
    if (a == "--sandbox") {
      o.sandbox = true;
    } else if (a == "--full-trace") {
      o.fullTrace = true;
    } else if (a == "-u") {
      o.unbuffered = true;
    } else if (takeValue(argc, argv, i, "--config", value)) {
      o.configs.push_back(std::move(value));
    } else if (takeValue(argc, argv, i, "-e", value) || takeValue(argc, argv, i, "--eval", value)) {
      o.mode = Mode::Eval;
      o.target = std::move(value);
      rest(i + 1);
      return o;
    } else if (takeValue(argc, argv, i, "--disasm", value)) {
      o.mode = Mode::Disasm;
      o.target = std::move(value);
      if (i + 1 < argc)
        throw UsageError("--disasm takes one file; unexpected '" + std::string(argv[i + 1]) + "'");
      return o;
    } else {
      throw UsageError("unknown option '" + std::string(a) + "'");
    }
  }
  return o;
}

// Whether `path` can be opened as a file to read; otherwise the reason.
std::string unreadableReason(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::strerror(errno);
  struct stat sb {};
  std::string reason;
  if (::fstat(fd, &sb) != 0)
    reason = std::strerror(errno);
  else if (S_ISDIR(sb.st_mode))
    reason = std::strerror(EISDIR);
  ::close(fd);
  return reason;
}

// Reads all of a file descriptor; false on a read error (errno set).
bool readAllFd(int fd, std::string& out) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) return true;
    out.append(buf, size_t(n));
  }
}

std::string readStdin() {
  std::string text;
  if (!readAllFd(STDIN_FILENO, text))
    throw UsageError(std::string("cannot read standard input: ") + std::strerror(errno), false);
  return text;
}

std::string readFileOrUsage(const std::string& path) {
  if (path == "-") return readStdin();
  if (std::string why = unreadableReason(path); !why.empty()) throw cannotOpen(path, why);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw cannotOpen(path, std::strerror(errno));
  std::string text;
  bool ok = readAllFd(fd, text);
  int err = errno;
  ::close(fd);
  if (!ok) throw UsageError("cannot read " + path + ": " + std::strerror(err), false);
  return text;
}

void defineCommandLine(dlam::VM& vm, const std::string& script,
                       const std::vector<std::string>& args) {
  // Collection happens only at safe points of the interpreter loop, so the strings
  // are safe in this vector until the list holds them.
  std::vector<dlam::Value> items;
  items.reserve(args.size() + 1);
  items.push_back(vm.makeString(script));
  for (const auto& a : args) items.push_back(vm.makeString(a));
  vm.defineCommandLine(vm.list(items.data(), items.size()));
}

int finish(int status) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "dlam: error writing standard output: %s\n", std::strerror(errno));
    return status == kExitOk ? kExitScriptError : status;
  }
  return status;
}

int run(int argc, char** argv) {
  Options o = parseArgs(argc, argv);

  if (o.unbuffered)
    std::setvbuf(stdout, nullptr, _IONBF, 0);
  else
    std::setvbuf(stdout, nullptr, isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF, BUFSIZ);

  dlam::Config cfg;
  cfg.ffiEnabled = true;  // the CLI allows foreign calls and files unless told otherwise
  cfg.fileIo = true;
  for (const auto& file : o.configs) dlam::loadConfigFile(file, cfg);
  cfg.fullTrace = o.fullTrace;
  if (o.sandbox) {
    cfg.sandbox = true;
    cfg.ffiEnabled = false;
    cfg.fileIo = false;
  }

  if (o.mode == Mode::Default) o.mode = isatty(STDIN_FILENO) ? Mode::Default : Mode::Stdin;

  // Input that must exist is checked before the VM is built: a missing script is a
  // usage error (2), not a script error.
  std::string source;
  switch (o.mode) {
    case Mode::Script:
      if (std::string why = unreadableReason(o.target); !why.empty())
        throw cannotOpen(o.target, why);
      break;
    case Mode::Stdin:
      source = readStdin();
      break;
    case Mode::Disasm:
      source = readFileOrUsage(o.target);
      break;
    case Mode::Eval:
    case Mode::Default:
      break;
  }

  dlam::VM vm(cfg);
  dlam::openStdlib(vm);
  dlam::openForeign(vm);
  auto printValue = [&vm](dlam::Value v) { dlam::cli::printLine(vm, vm.show(v, true)); };

  switch (o.mode) {
    case Mode::Script:
      defineCommandLine(vm, o.target, o.args);
      dlam::evalFile(vm, o.target);
      break;
    case Mode::Stdin:
      defineCommandLine(vm, "-", o.args);
      dlam::evalSource(vm, source, "<stdin>");
      break;
    case Mode::Eval:
      defineCommandLine(vm, "-e", o.args);
      dlam::evalSource(vm, o.target, "-e", printValue);
      break;
    case Mode::Disasm: {
      defineCommandLine(vm, o.target, {});
      const std::string chunk = o.target == "-" ? "<stdin>" : o.target;
      for (dlam::Proto* proto : dlam::compileSource(vm, source, chunk)) {
        std::string text = vm.disassemble(proto);
        if (text.empty() || text.back() != '\n') text.push_back('\n');
        std::fwrite(text.data(), 1, text.size(), stdout);
      }
      break;
    }
    case Mode::Default:
      defineCommandLine(vm, "", {});
      return finish(dlam::cli::runRepl(vm));
  }
  return finish(kExitOk);
}

// Reports the exception being handled; returns the exit status.
int reportException() {
  try {
    throw;
  } catch (const UsageError& e) {
    std::string message = std::string("dlam: ") + e.what();
    if (e.hint) message += "\nTry 'dlam --help' for more information.";
    dlam::cli::reportMessage(message);
    return kExitUsage;
  } catch (const dlam::Error& e) {
    if (e.kind == dlam::ErrorKind::Exit) return finish(e.exitCode);  // (exit status): no message
    dlam::cli::reportError(e);
    return e.kind == dlam::ErrorKind::Config ? kExitUsage : kExitScriptError;
  } catch (const std::bad_alloc&) {
    dlam::cli::reportMessage("error: out of memory");
    return kExitScriptError;
  } catch (const std::exception& e) {
    dlam::cli::reportMessage(std::string("dlam: internal error: ") + e.what());
    return kExitScriptError;
  } catch (...) {
    dlam::cli::reportMessage("dlam: internal error");
    return kExitScriptError;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (...) {
    try {
      return reportException();
    } catch (...) {
      // Not even the message could be made (it is built in memory that ran out).
      dlam::cli::reportMessage("error: out of memory");
      return kExitScriptError;
    }
  }
}
