// fuzz_common.h — what the fuzz targets share: the libFuzzer entry point's
// signature, the check that an escaping dlam::Error is well formed, and the abort
// that turns a broken invariant into a crash libFuzzer (or the replay runner) reports.
//
// The targets are built two ways from the same source (tests/fuzz/CMakeLists.txt):
// with clang's -fsanitize=fuzzer (libFuzzer supplies main), and as plain "replay"
// programs (replay_main.cpp supplies main) that run the target over files, so that the
// regression inputs in tests/fuzz/regressions/ run in CI with any compiler.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dlam/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace dlam::fuzz {

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "dlam fuzz invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline const char* kindName(ErrorKind k) {
  switch (k) {
    case ErrorKind::Syntax:
      return "syntax";
    case ErrorKind::Runtime:
      return "runtime";
    case ErrorKind::Limit:
      return "limit";
    case ErrorKind::Config:
      return "config";
    case ErrorKind::Api:
      return "api";
    case ErrorKind::Exit:
      return "exit";
  }
  return "?";
}

// The contract: any input gives an error message with a location. A syntax, runtime
// or limit error must name its chunk, carry a non-empty message and format cleanly.
// (Kinds Config and Api never come from evaluating source text.)
inline void checkError(const Error& e, const std::string& chunk, bool allowRuntime) {
  if (e.kind == ErrorKind::Exit && allowRuntime) return;  // the program called (exit): it just ends
  if (e.kind == ErrorKind::Config || e.kind == ErrorKind::Api ||
      (!allowRuntime && e.kind != ErrorKind::Syntax && e.kind != ErrorKind::Limit))
    fail(std::string("unexpected error kind ") + kindName(e.kind) + ": " + e.message);
  if (e.message.empty()) fail("error with an empty message");
  if (e.file.empty()) fail("error without a file: " + e.message);
  // Located in the chunk being run, or in the prelude for errors raised inside a library
  // function (the trace then reaches the chunk); either way with a line.
  // `chunk` is a prefix: fuzz_vm names its chunks <fuzz0>, <fuzz1>, ... and an error may
  // be raised inside a function an earlier chunk defined.
  // `read` from a string port locates its syntax errors in the string, "<string>".
  if (e.file.rfind(chunk, 0) != 0 && e.file != "<prelude>" && e.file != "<string>")
    fail("error in unexpected file '" + e.file + "': " + e.message);
  if (!e.loc.known()) fail("error without a line: " + e.format());
  std::string text = e.format();
  if (text.find("error: ") == std::string::npos) fail("malformed error text: " + text);
}

}  // namespace dlam::fuzz
