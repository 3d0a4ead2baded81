// lang_runner.cpp — runs every tests/lang/**/*.dlam script through the `dlam` binary
// and checks its output against the expectation comments in the script (Wren/Luau style).
//
// One parametrised GoogleTest; each script is one test case, named after its path
// ("forms/named-let.dlam" → "forms_named_let"). Files under a directory named `inc`
// are helpers for `include` and are not run. Expectation comments:
//
//   ; expect: TEXT             the next line of stdout is exactly TEXT
//   ; expect~: DATUM [TOL]     the next line of stdout is DATUM, numbers compared with relative
//                              tolerance TOL (default 1e-9; absolute TOL near zero); DATUM may be
//                              a number or a list/tree of numbers and symbols, e.g. ((1 2) (3 4))
//   ; expect match: REGEX      the next line of stdout matches REGEX entirely (ECMAScript)
//   ; expect length: N         the next line of stdout has exactly N characters
//   ; expect error: MESSAGE    exit status 1 (or `expect exit`); the first line of stderr is
//                              `FILE:LINE:COL: error: MESSAGE`, MESSAGE exactly as written
//                              ({dir}, {tests} and {tmp} stand for the directories, as in
//                              `args:`);
//                              the other lines of stderr are the indented trace
//   ; expect error match: REGEX  instead of `expect error:`, for a message with a part that no
//                              script can know: MESSAGE matches REGEX entirely (ECMAScript);
//                              a comment beside it says which part varies and why
//   ; expect line: N           LINE is N (required with `expect error`)
//   ; expect column: N         with `expect error`: COL is N
//   ; expect file: NAME        with `expect error`: FILE ends in NAME (default: the script's name)
//   ; expect trace: NAME       with `expect error`: a trace line `  at NAME (...)`, in order
//   ; expect exit: N           exit status N (stderr is then not checked unless `expect error`)
//   ; expect stderr: REGEX     stderr (all of it) contains a match of REGEX
//   ; args: ARG...             arguments before the script path ({dir}: the script's directory,
//                              {tests}: the tests directory, {tmp}: an empty directory made
//                              for this run and removed after it)
//   ; script-args: ARG...      arguments after the script path (seen as `command-line`)
//   ; timeout: SECONDS         instead of the default 60 s
//   ; tags: TAG...             DLAM_LANG_SKIP_TAGS="heavy other" skips scripts with those tags
//
// Without `expect error`/`expect exit` a script must exit with status 0 and an empty stderr.
// Every line of stdout must be accounted for by an expectation.
//
// Error tests. A script that expects an error is an error test, and every error test lives
// under errors/<topic>/, where <topic> is the directory of the feature whose working cases
// it complements (errors/ad/ for ad/, errors/forms/ for forms/, ...), or reader/ (text that
// does not read), trace/ (where an error is reported and what its trace shows) or config/
// (the --config file). One place rather than err_* files beside the features, because an
// error test reads differently from the others (its output is one message, not values),
// because the messages of one area are reviewed together (errors/reader/ holds every message
// the reader gives, one per script) and because some errors belong to no feature directory
// (reader, trace, config). The runner enforces it: an `expect error` script elsewhere fails,
// and so does a script under errors/ outside a topic directory or expecting no error.
// An error test pins the whole message and its line (`expect error:` + `expect line:`), and
// its column unless where the limit is reached depends on the build (the heap limit, the
// compiler's stack budget for deep nesting); a fragment or an alternation of likely words
// would pass a wrong or unhelpful message. `expect error match:` is for a part of a message
// that no script can know in advance; none needs it today.
//
// Environment: DLAM_LANG_TIMEOUT_SCALE multiplies every timeout (for sanitizer builds).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#ifndef DLAM_BIN
#error "DLAM_BIN must name the dlam binary"
#endif
#ifndef DLAM_TESTS_DIR
#error "DLAM_TESTS_DIR must name the tests directory"
#endif

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxCapture = 256u << 20;  // more output than this is a runaway script

// ---------------------------------------------------------------------------------------
// Expectations

enum class LineKind { Exact, Approx, Match, Length };

struct LineExpect {
  LineKind kind;
  std::string text;  // Exact: the text; Approx: the datum; Match: the regex
  double tol = 1e-9;
  size_t length = 0;
  int sourceLine = 0;
};

struct Script {
  std::string path;  // absolute
  std::string rel;   // relative to tests/lang, for messages
  std::vector<LineExpect> lines;
  std::optional<std::string> errorMessage;  // exact, or a regex if errorIsRegex
  bool errorIsRegex = false;
  std::optional<int> errorLine;
  std::optional<int> errorColumn;
  std::optional<std::string> errorFile;
  std::vector<std::string> traceNames;
  std::optional<int> exitStatus;
  std::vector<std::string> stderrRegexes;
  std::vector<std::string> args;
  std::vector<std::string> scriptArgs;
  double timeout = 60;
  std::set<std::string> tags;
  std::vector<std::string> problems;  // malformed expectation comments
};

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> splitWords(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string replaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
  return s;
}

// Splits a datum into tokens: "(", ")", and atoms (numbers, symbols, ".", strings).
std::vector<std::string> tokenize(const std::string& s) {
  std::vector<std::string> toks;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '(' || c == ')') {
      toks.emplace_back(1, c);
      ++i;
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < s.size() && s[j] != '"') j += (s[j] == '\\') ? 2 : 1;
      j = std::min(j + 1, s.size());
      toks.push_back(s.substr(i, j - i));
      i = j;
    } else {
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j])) && s[j] != '(' &&
             s[j] != ')')
        ++j;
      toks.push_back(s.substr(i, j - i));
      i = j;
    }
  }
  return toks;
}

std::optional<double> parseNumber(const std::string& t) {
  if (t == "+nan.0" || t == "-nan.0" || t == "nan") return std::nan("");
  if (t == "+inf.0" || t == "inf") return INFINITY;
  if (t == "-inf.0" || t == "-inf") return -INFINITY;
  if (t.empty()) return std::nullopt;
  const char* b = t.c_str();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(b, &end);
  if (end != b + t.size()) return std::nullopt;
  // strtod accepts "inf"/"nan"/hex; dlam prints none of those, so reject them as numbers.
  for (char c : t)
    if (std::isalpha(static_cast<unsigned char>(c)) && c != 'e' && c != 'E') return std::nullopt;
  return v;
}

bool closeEnough(double want, double got, double tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return want == got;
  double diff = std::fabs(want - got);
  if (diff <= tol * std::max(std::fabs(want), std::fabs(got))) return true;
  return std::fabs(want) < tol && diff <= tol;  // absolute tolerance near zero
}

// Compares a printed line with an expected datum, numbers within tolerance.
bool approxEqual(const std::string& want, const std::string& got, double tol) {
  auto w = tokenize(want), g = tokenize(got);
  if (w.size() != g.size()) return false;
  for (size_t i = 0; i < w.size(); ++i) {
    auto wn = parseNumber(w[i]);
    auto gn = parseNumber(g[i]);
    if (wn && gn) {
      if (!closeEnough(*wn, *gn, tol)) return false;
    } else if (w[i] != g[i]) {
      return false;
    }
  }
  return true;
}

// "; expect~: DATUM [TOL]": the tolerance is whatever follows the first complete datum.
bool parseApprox(const std::string& body, LineExpect& e) {
  auto toks = tokenize(body);
  if (toks.empty()) return false;
  size_t n = 0;
  if (toks[0] == "(") {
    int depth = 0;
    for (; n < toks.size(); ++n) {
      if (toks[n] == "(") ++depth;
      if (toks[n] == ")" && --depth == 0) break;
    }
    if (n == toks.size()) return false;
  }
  std::string datum;
  for (size_t i = 0; i <= n; ++i) datum += (i ? " " : "") + toks[i];
  e.text = datum;
  if (n + 1 < toks.size()) {
    if (n + 2 != toks.size()) return false;
    auto tol = parseNumber(toks[n + 1]);
    if (!tol || !(*tol >= 0)) return false;
    e.tol = *tol;
  }
  return true;
}

std::string dirOf(const std::string& path) { return fs::path(path).parent_path().string(); }

std::string expandDirs(const std::string& text, const std::string& path) {
  return replaceAll(replaceAll(text, "{dir}", dirOf(path)), "{tests}", DLAM_TESTS_DIR);
}

std::vector<std::string> expandArgs(const std::string& body, const std::string& path) {
  std::vector<std::string> out;
  for (auto& w : splitWords(body)) out.push_back(expandDirs(w, path));
  return out;
}

bool parseInt(const std::string& s, int& out) {
  std::string t = trim(s);
  if (t.empty()) return false;
  char* end = nullptr;
  long v = std::strtol(t.c_str(), &end, 10);
  if (*end) return false;
  out = static_cast<int>(v);
  return true;
}

Script parseScript(const std::string& path, const std::string& rel) {
  Script s;
  s.path = path;
  s.rel = rel;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  int lineNo = 0;
  // The directive is `;`, optional spaces, a keyword, `:`. Checked in order: longest first.
  static const std::regex directive(
      R"(;+\s*(expect~|expect error match|expect error|expect line|expect column|expect file|expect trace|expect exit|expect stderr|expect match|expect length|expect|args|script-args|timeout|tags):(.*)$)");
  while (std::getline(in, line)) {
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find(';') == std::string::npos) continue;
    std::smatch m;
    if (!std::regex_search(line, m, directive)) continue;
    const std::string key = m[1];
    std::string body = m[2];
    // Exact text: drop the one space after the colon, keep the rest verbatim.
    std::string exact = (!body.empty() && body[0] == ' ') ? body.substr(1) : body;
    std::string bodyT = trim(body);
    auto bad = [&](const std::string& why) {
      s.problems.push_back(rel + ":" + std::to_string(lineNo) + ": " + why);
    };
    if (key == "expect") {
      s.lines.push_back({LineKind::Exact, exact, 0, 0, lineNo});
    } else if (key == "expect~") {
      LineExpect e{LineKind::Approx, "", 1e-9, 0, lineNo};
      if (!parseApprox(bodyT, e)) bad("malformed `expect~:` (want DATUM [TOL])");
      s.lines.push_back(e);
    } else if (key == "expect match") {
      s.lines.push_back({LineKind::Match, bodyT, 0, 0, lineNo});
    } else if (key == "expect length") {
      int n = 0;
      if (!parseInt(bodyT, n) || n < 0) bad("malformed `expect length:`");
      s.lines.push_back({LineKind::Length, "", 0, static_cast<size_t>(n), lineNo});
    } else if (key == "expect error" || key == "expect error match") {
      if (s.errorMessage) bad("more than one `expect error:`");
      s.errorIsRegex = key == "expect error match";
      s.errorMessage = s.errorIsRegex ? bodyT : expandDirs(exact, path);
    } else if (key == "expect line" || key == "expect column") {
      int n = 0;
      if (!parseInt(bodyT, n) || n <= 0) bad("malformed `" + key + ":`");
      (key == "expect line" ? s.errorLine : s.errorColumn) = n;
    } else if (key == "expect file") {
      s.errorFile = bodyT;
    } else if (key == "expect trace") {
      s.traceNames.push_back(bodyT);
    } else if (key == "expect exit") {
      int n = 0;
      if (!parseInt(bodyT, n)) bad("malformed `expect exit:`");
      s.exitStatus = n;
    } else if (key == "expect stderr") {
      s.stderrRegexes.push_back(bodyT);
    } else if (key == "args") {
      for (auto& a : expandArgs(bodyT, path)) s.args.push_back(a);
    } else if (key == "script-args") {
      for (auto& a : expandArgs(bodyT, path)) s.scriptArgs.push_back(a);
    } else if (key == "timeout") {
      int n = 0;
      if (!parseInt(bodyT, n) || n <= 0) bad("malformed `timeout:`");
      s.timeout = n;
    } else if (key == "tags") {
      for (auto& t : splitWords(bodyT)) s.tags.insert(t);
    }
  }
  if ((s.errorLine || s.errorColumn || s.errorFile || !s.traceNames.empty()) && !s.errorMessage)
    s.problems.push_back(rel + ": `expect line/column/file/trace:` without `expect error:`");
  if (s.errorMessage && !s.errorLine)
    s.problems.push_back(rel + ": `expect error:` without `expect line:`");
  bool underErrors = rel.rfind("errors/", 0) == 0;
  if (s.errorMessage && !underErrors)
    s.problems.push_back(rel + ": an error test belongs under errors/<topic>/");
  if (underErrors && rel.find('/', 7) == std::string::npos)
    s.problems.push_back(rel + ": a script under errors/ belongs in a topic directory");
  if (underErrors && !s.errorMessage)
    s.problems.push_back(rel + ": a script under errors/ must expect an error");
  return s;
}

// ---------------------------------------------------------------------------------------
// Running the binary

struct RunResult {
  std::string out, err;
  int status = -1;  // exit status, or -1 if killed by a signal
  int signal = 0;
  bool timedOut = false;
  bool overflow = false;
  std::string spawnError;
  double seconds = 0;
};

RunResult runProcess(const std::vector<std::string>& argv, double timeoutSeconds,
                     const std::string& cwd) {
  RunResult r;
  int outPipe[2], errPipe[2];
  if (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0) {
    r.spawnError = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid < 0) {
    r.spawnError = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  if (pid == 0) {
    setpgid(0, 0);  // own process group, so a timeout kills everything it started
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(outPipe[1], 1) < 0 || dup2(errPipe[1], 2) < 0)
      _exit(127);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(127);
    execv(cargv[0], cargv.data());
    const char* msg = "lang_runner: exec failed\n";
    ssize_t ignored = write(2, msg, std::strlen(msg));
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);
  close(outPipe[1]);
  close(errPipe[1]);
  pollfd fds[2] = {{outPipe[0], POLLIN, 0}, {errPipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  bool open[2] = {true, true};
  auto deadline = start + std::chrono::milliseconds(static_cast<long>(timeoutSeconds * 1000));
  char buf[65536];
  while (open[0] || open[1]) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      r.timedOut = true;
      break;
    }
    int ms = static_cast<int>(
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) +
             1;
    for (int i = 0; i < 2; ++i) fds[i].fd = open[i] ? (i ? errPipe[0] : outPipe[0]) : -1;
    int n = poll(fds, 2, std::min(ms, 1000));
    if (n < 0) {
      if (errno == EINTR) continue;
      r.spawnError = std::string("poll: ") + std::strerror(errno);
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (!open[i] || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
        if (sinks[i]->size() > kMaxCapture) r.overflow = true;
      } else if (got == 0 || errno != EINTR) {
        open[i] = false;
      }
    }
    if (r.overflow) break;
  }
  if (r.timedOut || r.overflow || !r.spawnError.empty()) kill(-pid, SIGKILL);
  close(outPipe[0]);
  close(errPipe[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(wstatus)) {
    r.status = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    r.signal = WTERMSIG(wstatus);
  }
  return r;
}

std::vector<std::string> splitLines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < s.size()) {
    size_t nl = s.find('\n', start);
    if (nl == std::string::npos) {
      lines.push_back(s.substr(start));
      break;
    }
    lines.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

std::string excerpt(const std::string& s, size_t limit = 4000) {
  if (s.size() <= limit) return s;
  return s.substr(0, limit / 2) + "\n... [" + std::to_string(s.size() - limit) +
         " bytes omitted] ...\n" + s.substr(s.size() - limit / 2);
}

std::string showLine(const std::string& s) {
  std::string out(1, '`');
  out += excerpt(s, 400);
  out += '`';
  return out;
}

std::string formatDouble(double d) {
  std::ostringstream o;
  o << d;
  return o.str();
}

bool regexSearch(const std::string& re, const std::string& text, std::string& error) {
  try {
    return std::regex_search(text, std::regex(re, std::regex::ECMAScript | std::regex::icase));
  } catch (const std::regex_error& e) {
    error = "bad regex /" + re + "/: " + e.what();
    return false;
  }
}

bool regexFull(const std::string& re, const std::string& text, std::string& error) {
  try {
    return std::regex_match(text, std::regex(re, std::regex::ECMAScript));
  } catch (const std::regex_error& e) {
    error = "bad regex /" + re + "/: " + e.what();
    return false;
  }
}

// Returns the list of failures (empty: the script passed).
std::vector<std::string> check(const Script& s, const RunResult& r) {
  std::vector<std::string> fails;
  if (!r.spawnError.empty()) fails.push_back("could not run dlam: " + r.spawnError);
  if (r.timedOut) fails.push_back("timed out (killed)");
  if (r.overflow) fails.push_back("produced more than 256 MiB of output (killed)");
  if (r.signal && !r.timedOut && !r.overflow)
    fails.push_back("killed by signal " + std::to_string(r.signal) + " (" + strsignal(r.signal) +
                    ")");
  if (!fails.empty()) return fails;

  // stdout, line by line
  auto out = splitLines(r.out);
  size_t i = 0;
  for (; i < s.lines.size(); ++i) {
    const auto& e = s.lines[i];
    std::string where = "script line " + std::to_string(e.sourceLine) + ", stdout line " +
                        std::to_string(i + 1) + ": ";
    if (i >= out.size()) {
      std::string want = e.kind == LineKind::Length ? "a line of length " + std::to_string(e.length)
                                                    : showLine(e.text);
      fails.push_back(where + "expected " + want + " but stdout ended");
      break;
    }
    const std::string& got = out[i];
    std::string reErr;
    switch (e.kind) {
      case LineKind::Exact:
        if (got != e.text)
          fails.push_back(where + "expected " + showLine(e.text) + "\n  actual   " + showLine(got));
        break;
      case LineKind::Approx:
        if (!approxEqual(e.text, got, e.tol))
          fails.push_back(where + "expected ~" + showLine(e.text) + " (tol " + formatDouble(e.tol) +
                          ")\n  actual    " + showLine(got));
        break;
      case LineKind::Match:
        if (!regexFull(e.text, got, reErr))
          fails.push_back(where + (reErr.empty() ? "expected a match of /" + e.text +
                                                       "/\n  actual " + showLine(got)
                                                 : reErr));
        break;
      case LineKind::Length:
        if (got.size() != e.length)
          fails.push_back(where + "expected a line of " + std::to_string(e.length) +
                          " characters, got " + std::to_string(got.size()) + ": " + showLine(got));
        break;
    }
  }
  if (i == s.lines.size() && out.size() > s.lines.size())
    fails.push_back("unexpected stdout line " + std::to_string(s.lines.size() + 1) + ": " +
                    showLine(out[s.lines.size()]) + " (" +
                    std::to_string(out.size() - s.lines.size()) + " extra line(s))");

  // exit status and stderr
  int wantStatus = s.exitStatus.value_or(s.errorMessage ? 1 : 0);
  if (r.status != wantStatus)
    fails.push_back("exit status " + std::to_string(r.status) + ", expected " +
                    std::to_string(wantStatus));
  if (s.errorMessage) {
    auto errLines = splitLines(r.err);
    static const std::regex head(R"(^(.+):(\d+):(\d+): error: (.*)$)");
    std::smatch m;
    if (errLines.empty()) {
      fails.push_back("expected an error on stderr, but stderr is empty");
    } else if (!std::regex_match(errLines[0], m, head)) {
      fails.push_back("first stderr line is not `FILE:LINE:COL: error: MESSAGE`: " +
                      showLine(errLines[0]));
    } else {
      std::string file = m[1], message = m[4];
      int line = std::stoi(m[2]), column = std::stoi(m[3]);
      std::string reErr;
      if (s.errorIsRegex) {
        if (!regexFull(*s.errorMessage, message, reErr))
          fails.push_back(reErr.empty() ? "error message " + showLine(message) +
                                              " does not match /" + *s.errorMessage + "/"
                                        : reErr);
      } else if (message != *s.errorMessage) {
        fails.push_back("error message " + showLine(message) + "\n  expected      " +
                        showLine(*s.errorMessage));
      }
      if (s.errorLine && line != *s.errorLine)
        fails.push_back("error at line " + std::to_string(line) + ", expected line " +
                        std::to_string(*s.errorLine));
      if (s.errorColumn && column != *s.errorColumn)
        fails.push_back("error at column " + std::to_string(column) + ", expected column " +
                        std::to_string(*s.errorColumn));
      std::string wantFile = s.errorFile.value_or(fs::path(s.path).filename().string());
      if (file.size() < wantFile.size() ||
          file.compare(file.size() - wantFile.size(), wantFile.size(), wantFile) != 0)
        fails.push_back("error in file `" + file + "`, expected a file ending in `" + wantFile +
                        "`");
      // The rest is the trace: indented, and short even after a million frames.
      for (size_t k = 1; k < errLines.size(); ++k) {
        if (errLines[k].empty() || !std::isspace(static_cast<unsigned char>(errLines[k][0]))) {
          fails.push_back(
              "stderr line " + std::to_string(k + 1) +
              " is neither the error nor an indented trace line: " + showLine(errLines[k]));
          break;
        }
      }
      if (errLines.size() > 100)
        fails.push_back("the trace has " + std::to_string(errLines.size() - 1) +
                        " lines; it should be short");
      size_t from = 1;
      for (const auto& name : s.traceNames) {
        std::string needle = "at " + name + " (";
        bool found = false;
        for (; from < errLines.size() && !found; ++from)
          found = errLines[from].find(needle) != std::string::npos;
        if (!found) {
          fails.push_back("no trace line `at " + name + " (...)` (in order)");
          break;
        }
      }
    }
  } else if (!s.exitStatus && !r.err.empty()) {
    fails.push_back("stderr is not empty");
  }
  for (const auto& re : s.stderrRegexes) {
    std::string reErr;
    if (!regexSearch(re, r.err, reErr))
      fails.push_back(reErr.empty() ? "stderr does not match /" + re + "/" : reErr);
  }
  return fails;
}

// ---------------------------------------------------------------------------------------
// Discovery and the test

struct Case {
  std::string path, rel, name;
};

std::string sanitize(const std::string& rel) {
  std::string stem = rel.substr(0, rel.size() - std::string(".dlam").size());
  std::string out;
  for (char c : stem) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

std::vector<Case> findScripts() {
  std::vector<Case> cases;
  fs::path root = fs::path(DLAM_TESTS_DIR) / "lang";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return cases;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->is_directory() && it->path().filename() == "inc") {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file() || it->path().extension() != ".dlam") continue;
    std::string rel = fs::relative(it->path(), root).generic_string();
    cases.push_back({fs::absolute(it->path()).lexically_normal().string(), rel, sanitize(rel)});
  }
  std::sort(cases.begin(), cases.end(), [](const Case& a, const Case& b) { return a.rel < b.rel; });
  std::set<std::string> seen;
  for (auto& c : cases) {
    std::string base = c.name;
    for (int k = 2; !seen.insert(c.name).second; ++k) c.name = base + "_" + std::to_string(k);
  }
  return cases;
}

double envDouble(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  return (*end || !(d > 0)) ? fallback : d;
}

// gtest prints the parameter of a failing case with this.
void PrintTo(const Case& c, std::ostream* os) { *os << c.rel; }

class Lang : public ::testing::TestWithParam<Case> {};

TEST_P(Lang, Script) {
  const Case& c = GetParam();
  Script s = parseScript(c.path, c.rel);
  for (const auto& p : s.problems) ADD_FAILURE() << "malformed expectation: " << p;
  if (!s.problems.empty()) return;

  if (const char* skip = std::getenv("DLAM_LANG_SKIP_TAGS")) {
    for (const auto& tag : splitWords(skip))
      if (s.tags.count(tag)) GTEST_SKIP() << "tagged `" << tag << "` (DLAM_LANG_SKIP_TAGS)";
  }

  // {tmp}: a directory of this run's own, for scripts that write files.
  struct TempDir {
    std::string path;
    ~TempDir() {
      std::error_code ec;
      if (!path.empty()) fs::remove_all(path, ec);
    }
  } tmp;
  auto withTmp = [&](std::string a) {
    if (a.find("{tmp}") == std::string::npos) return a;
    if (tmp.path.empty()) {
      std::string pattern = (fs::temp_directory_path() / "dlam-lang-XXXXXX").string();
      if (!mkdtemp(pattern.data())) ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
      tmp.path = pattern;
    }
    return replaceAll(a, "{tmp}", tmp.path);
  };
  std::vector<std::string> argv{DLAM_BIN};
  for (const auto& a : s.args) argv.push_back(withTmp(a));
  argv.push_back(s.path);
  for (const auto& a : s.scriptArgs) argv.push_back(withTmp(a));
  if (s.errorMessage && !s.errorIsRegex) s.errorMessage = withTmp(*s.errorMessage);
  double timeout = s.timeout * envDouble("DLAM_LANG_TIMEOUT_SCALE", 1.0);
  // Run from the tests directory, not the script's: includes must resolve relative to the
  // including file, not to the working directory.
  RunResult r = runProcess(argv, timeout, DLAM_TESTS_DIR);

  auto fails = check(s, r);
  if (fails.empty()) return;
  std::ostringstream msg;
  msg << c.rel << ": " << fails.size() << " problem(s)\n";
  for (const auto& f : fails) msg << "  - " << f << "\n";
  msg << "command:";
  for (const auto& a : argv) msg << " " << a;
  msg << "\nexit status: ";
  if (r.signal)
    msg << "signal " << r.signal;
  else
    msg << r.status;
  msg << " (" << r.seconds << " s)\n";
  msg << "---- stdout (" << r.out.size() << " bytes) ----\n" << excerpt(r.out) << "\n";
  msg << "---- stderr (" << r.err.size() << " bytes) ----\n" << excerpt(r.err) << "\n";
  msg << "----";
  ADD_FAILURE() << msg.str();
}

INSTANTIATE_TEST_SUITE_P(Scripts, Lang, ::testing::ValuesIn(findScripts()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
