// config.h — the settings of one VM, filled from a Lua file by embed/.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dlam {

struct Config {
  uint64_t heapLimitMb = 1024;    // heap_limit_mb
  uint64_t stackLimit = 1000000;  // stack_limit: dlam frames
  uint64_t instructionLimit = 0;  // instruction_limit: 0 = none
  std::vector<std::string> includePath{"."};
  bool ffiEnabled = false;                               // ffi.enabled
  std::optional<std::vector<std::string>> ffiLibraries;  // ffi.libraries: nullopt = any
  bool sandbox = false;                                  // --sandbox: no foreign calls, no include
  // --full-trace: error traces show the standard library's frames too (by default a run
  // of them is folded into the user's call that reached it).
  bool fullTrace = false;
  bool fileIo = false;  // file_io: the file procedures (open-input-file, read-lines...) work
  // blas_threads: the threads for the matrix products of arrays (dot): 1, OpenBLAS's
  // serial build; more, its threaded build (stdlib/src/blas.cpp).
  uint32_t blasThreads = 1;
};

}  // namespace dlam
