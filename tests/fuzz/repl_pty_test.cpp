// repl_pty_test.cpp — drives the `dlam` REPL in a pseudo-terminal and checks that the
// session keeps working after every kind of error: a syntax
// error, a runtime error, an error inside a gradient, stack overflow, the heap limit, the
// instruction limit, an interrupt (Ctrl-C during a running loop), running out of memory
// under an address-space limit (not in sanitizer builds), each followed by a successful
// evaluation; multi-line input; and that ,quit leaves with status 0.
//
//   dlam_repl_pty_test PATH/TO/dlam PATH/TO/tests/fuzz
//
// Prints the transcript of any step that fails and exits 1.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

// GCC defines __SANITIZE_ADDRESS__ and __SANITIZE_THREAD__; clang has __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DLAM_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DLAM_TEST_SANITIZED 1
#endif
#endif

namespace {

struct Session {
  pid_t pid = -1;
  int fd = -1;
  std::string transcript;  // everything read so far
  size_t consumed = 0;     // transcript up to here was matched by earlier steps
};

constexpr const char* kPrompt = "dlam> ";

// Reads until `done(text since consumed)` or the timeout; false on timeout or EOF.
template <class Done>
bool readUntil(Session& s, double seconds, Done done) {
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(long(seconds * 1000));
  for (;;) {
    if (done(s.transcript.substr(s.consumed))) return true;
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    pollfd p{s.fd, POLLIN, 0};
    int n = poll(&p, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[4096];
    ssize_t got = read(s.fd, buf, sizeof buf);
    if (got <= 0) return done(s.transcript.substr(s.consumed));  // EIO: the child closed the pty
    s.transcript.append(buf, size_t(got));
  }
}

bool waitPrompt(Session& s, double seconds) {
  return readUntil(s, seconds, [](const std::string& t) {
    // A prompt at the end of the output (the one after the answer).
    return t.size() >= std::strlen(kPrompt) &&
           t.compare(t.size() - std::strlen(kPrompt), std::string::npos, kPrompt) == 0;
  });
}

void send(Session& s, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = write(s.fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += size_t(n);
  }
}

int failures = 0;

void report(Session& s, const std::string& step, const std::string& why) {
  ++failures;
  std::fprintf(stderr, "FAIL %s: %s\n--- output of this step ---\n%s\n---\n", step.c_str(),
               why.c_str(), s.transcript.substr(s.consumed).c_str());
}

// Sends `line` (a newline is added), waits for the next prompt, and checks the output of
// the step against `want` (ECMAScript regex, searched).
void step(Session& s, const std::string& line, const std::string& want, double seconds = 60) {
  send(s, line + "\n");
  if (!waitPrompt(s, seconds)) {
    report(s, line, "no prompt within " + std::to_string(int(seconds)) + " s");
  } else if (!std::regex_search(s.transcript.substr(s.consumed), std::regex(want))) {
    report(s, line, "output does not match /" + want + "/");
  }
  s.consumed = s.transcript.size();
}

// Starts `dlam ARGS...` in a pseudo-terminal with HOME set to `home` (and, if not 0, an
// address-space limit of `addressSpaceMb`).
Session start(const std::string& dlam, const std::vector<std::string>& args, const char* home,
              uint64_t addressSpaceMb = 0) {
  Session s;
  winsize ws{};
  ws.ws_row = 50;
  ws.ws_col = 200;
  s.pid = forkpty(&s.fd, nullptr, nullptr, &ws);
  if (s.pid < 0) {
    std::perror("forkpty");
    std::exit(2);
  }
  if (s.pid == 0) {
    setenv("HOME", home, 1);
    setenv("TERM", "dumb", 1);
    if (addressSpaceMb) {
      rlimit rl{addressSpaceMb << 20, addressSpaceMb << 20};
      setrlimit(RLIMIT_AS, &rl);
    }
    std::vector<char*> argv{const_cast<char*>(dlam.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(dlam.c_str(), argv.data());
    std::perror("exec");
    _exit(127);
  }
  if (!waitPrompt(s, 30)) report(s, "start", "no first prompt");
  s.consumed = s.transcript.size();
  return s;
}

// Sends a line that leaves a form open: the REPL answers with the continuation prompt.
void partial(Session& s, const std::string& line) {
  send(s, line + "\n");
  if (!readUntil(s, 30, [](const std::string& t) { return t.find("... ") != std::string::npos; }))
    report(s, line, "no continuation prompt");
  s.consumed = s.transcript.size();
}

// Sends `line`, which must end the REPL with exit status `want`.
void leave(Session& s, const std::string& line, int want) {
  send(s, line + "\n");
  readUntil(s, 10, [](const std::string&) { return false; });
  int status = 0;
  pid_t w = 0;
  for (int i = 0; i < 100 && (w = waitpid(s.pid, &status, WNOHANG)) == 0; ++i) usleep(100000);
  if (w == 0) {
    kill(s.pid, SIGKILL);
    waitpid(s.pid, &status, 0);
    report(s, line, "the REPL did not exit");
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != want) {
    report(s, line,
           "exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
               (WIFSIGNALED(status) ? ", signal " + std::to_string(WTERMSIG(status)) : "") +
               ", expected " + std::to_string(want));
  }
  close(s.fd);
}

// ,quit leaves with status 0.
void quit(Session& s) { leave(s, ",quit", 0); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DLAM_BINARY FUZZ_DIR\n", argv[0]);
    return 2;
  }
  std::string dlam = argv[1];
  std::string config = std::string(argv[2]) + "/repl_limits.lua";
  char home[] = "/tmp/dlam-repl-test-XXXXXX";  // history goes to $HOME/.dlam_history
  if (!mkdtemp(home)) {
    std::perror("mkdtemp");
    return 2;
  }

  // Session 1: small limits (repl_limits.lua); every error is followed by a success.
  {
    Session s = start(dlam, {"--config", config}, home);
    step(s, "(+ 1 2)", R"(\b3\b)");
    step(s, ")", R"(error)");
    step(s, "(+ 1 2 3)", R"(\b6\b)");
    step(s, "(car '())", R"(<repl>:1:\d+: error: .*car)");
    step(s, "(list 1 2)", R"(\(1 2\))");
    partial(s, "(define (sq x)");
    step(s, "  (* x x))", R"()");
    step(s, "(sq 7)", R"(\b49\b)");
    step(s, "((gradient (lambda (x) (car x))) 1)", R"(error)");
    step(s, "((gradient sq) 3)", R"(\b6\b)");
    step(s, "(define (down n) (+ 1 (down n)))", R"()");
    step(s, "(down 1)", R"(error: stack overflow)");
    step(s, "((gradient (lambda (x) (* x (down x)))) 1)", R"(error: stack overflow)");
    step(s, "((gradient sq) 4)", R"(\b8\b)");
    step(s, "(let loop ((acc '())) (loop (cons 1 acc)))", R"(error: heap limit)");
    step(s, "(length (iota 10000))", R"(\b10000\b)");
    step(s, "(let loop ((acc '())) (loop (cons 1 acc)))", R"(error: heap limit)");
    step(s, "(length (iota 100000))", R"(\b100000\b)");
    step(s, "(let loop ((i 0)) (loop (+ i 1)))", R"(error: instruction limit)");
    step(s, "(let loop ((i 0)) (if (< i 100000) (loop (+ i 1)) i))", R"(\b100000\b)");
    step(s, "(let loop ((i 0)) (loop (+ i 1)))", R"(error: instruction limit)");
    step(s, "(fold-left + 0 (iota 1000))", R"(\b499500\b)");
    step(s, "((derivative (derivative sin)) 0)", R"(\b0\b)");
    step(s, "(string-append \"a\" \"b\")", R"("ab")");
    quit(s);
  }

  // Session 2: no limits; Ctrl-C interrupts a running loop and the session goes on.
  {
    Session s = start(dlam, {}, home);
    send(s, "(let loop ((i 0)) (loop (+ i 1)))\n");
    usleep(500000);
    send(s, "\x03");
    if (!waitPrompt(s, 30))
      report(s, "Ctrl-C", "no prompt after the interrupt");
    else if (s.transcript.substr(s.consumed).find("interrupted") == std::string::npos)
      report(s, "Ctrl-C", "no 'interrupted' message");
    s.consumed = s.transcript.size();
    step(s, "(* 6 7)", R"(\b42\b)");
    quit(s);
  }

  // Session 2b: (exit status) leaves the REPL with that status, also from inside a
  // function; an exit with a bad status is an error and the session goes on.
  {
    Session s = start(dlam, {}, home);
    step(s, "(exit 1.5)", R"(error: exit: expected integer)");
    step(s, "(define (bye k) (exit k))", R"()");
    leave(s, "(bye 5)", 5);
  }

  // Session 3: 200 MB of address space. Printing a tree of 2^40 leaves (the printer's
  // string), a list that doubles (the GC heap) and showing the tree as the REPL's answer
  // each run out of memory; the session goes on.
#if !defined(DLAM_TEST_SANITIZED)
  {
    Session s = start(dlam, {}, home, 200);
    step(s, "(define t (let loop ((i 0) (x 1)) (if (= i 40) x (loop (+ i 1) (cons x x)))))", R"()");
    step(s, "(display t)", R"(error: out of memory)");
    step(s, "(+ 1 2)", R"(\b3\b)");
    step(s, "(let loop ((l (list 1))) (loop (append l l)))", R"(error: out of memory)");
    step(s, "(length (iota 1000))", R"(\b1000\b)");
    step(s, "t", R"(error: out of memory)");
    step(s, "((gradient (lambda (x) (* x x x))) 2)", R"(\b12\b)");
    quit(s);
  }
#endif

  std::string hist = std::string(home) + "/.dlam_history";
  unlink(hist.c_str());
  rmdir(home);
  if (failures) {
    std::fprintf(stderr, "%d step(s) failed\n", failures);
    return 1;
  }
  std::fprintf(stderr, "REPL sessions: all steps passed\n");
  return 0;
}
