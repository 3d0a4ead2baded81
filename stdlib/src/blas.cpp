// blas.cpp — OpenBLAS for dot's matrix products, loaded (dlopen) at the first product
// that needs it, not linked: a process that never multiplies large matrices does not
// map it (it cost `dlam -e 1` some 3 MB of RSS and its relocations at start-up).
//
// A VM's blas_threads (Config::blasThreads) picks the build: 1, the serial one
// (Debian's libopenblas0-serial, what dlam used to link), shared by every VM and
// called without a lock, since VMs on several threads must not oversubscribe the
// cores; more, the build with a thread pool (libopenblas0-pthread), whose thread
// count is the process's: each call sets it to the calling VM's count, under a lock
// held through the product, so VMs asking for different counts take turns. Both are
// found by their Debian paths (CMake passes them: DLAM_OPENBLAS_SERIAL_LIB,
// DLAM_OPENBLAS_PTHREAD_LIB) and loaded RTLD_LOCAL, so they do not clash with each
// other nor with whichever libopenblas.so.0 the system's alternatives point at. A
// library that does not load is a runtime error naming it and dlerror's reason; the
// VM goes on, and the next product tries again.
#include <cblas.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "dlam/stdlib.h"
#include "primitives.h"

#ifndef DLAM_OPENBLAS_SERIAL_LIB
#define DLAM_OPENBLAS_SERIAL_LIB "libopenblas.so.0"
#endif
#ifndef DLAM_OPENBLAS_PTHREAD_LIB
#define DLAM_OPENBLAS_PTHREAD_LIB "libopenblas.so.0"
#endif

namespace dlam::prim {

namespace {

using Dgemm = decltype(&cblas_dgemm);
using SetThreads = void (*)(int);

struct Blas {
  Blas(const char* package, const char* path) : package(package), path(path) {}
  const char* package;
  std::string path;
  std::mutex loading;  // guards the fields below while the library is being loaded
  void* handle = nullptr;
  Dgemm dgemm = nullptr;
  SetThreads setThreads = nullptr;
  std::mutex calling;  // the threaded build: its thread count is set per call
};

Blas& library(bool threaded) {
  static Blas serial{"libopenblas0-serial", DLAM_OPENBLAS_SERIAL_LIB};
  static Blas pthread{"libopenblas0-pthread", DLAM_OPENBLAS_PTHREAD_LIB};
  return threaded ? pthread : serial;
}

// The library's dgemm, loading it the first time; nullptr if it does not load, and
// `error` says why.
Dgemm load(Blas& b, bool threaded, std::string& error) {
  std::lock_guard<std::mutex> lock(b.loading);
  if (b.dgemm) return b.dgemm;
  void* h = dlopen(b.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    error = "cannot load OpenBLAS " + b.path + " (Debian package " + b.package +
            "): " + (why ? why : "dlopen failed");
    return nullptr;
  }
  auto dgemm = reinterpret_cast<Dgemm>(dlsym(h, "cblas_dgemm"));
  auto setThreads = reinterpret_cast<SetThreads>(dlsym(h, "openblas_set_num_threads"));
  if (!dgemm || (threaded && !setThreads)) {
    dlclose(h);
    error = "cannot load OpenBLAS " + b.path + ": it has no cblas_dgemm or " +
            "openblas_set_num_threads";
    return nullptr;
  }
  b.handle = h;
  b.setThreads = setThreads;
  b.dgemm = dgemm;
  return dgemm;
}

}  // namespace

void blasDgemm(VM& vm, bool tx, bool ty, int n, int m, int k, const double* x, int ldx,
               const double* y, int ldy, double* r, int ldr) {
  uint32_t threads = vm.config().blasThreads;
  bool threaded = threads > 1;
  Blas& b = library(threaded);
  std::string error;
  Dgemm dgemm = load(b, threaded, error);
  if (!dgemm) vm.runtimeError("dot: " + error);
  CBLAS_TRANSPOSE ta = tx ? CblasTrans : CblasNoTrans, tb = ty ? CblasTrans : CblasNoTrans;
  if (!threaded) {
    dgemm(CblasRowMajor, ta, tb, n, m, k, 1.0, x, ldx, y, ldy, 0.0, r, ldr);
    return;
  }
  std::lock_guard<std::mutex> lock(b.calling);
  b.setThreads(static_cast<int>(threads));
  dgemm(CblasRowMajor, ta, tb, n, m, k, 1.0, x, ldx, y, ldy, 0.0, r, ldr);
}

}  // namespace dlam::prim

namespace dlam {

using prim::Blas;
using prim::library;

void setBlasLibraryPaths(const char* serial, const char* threaded) {
  for (bool t : {false, true}) {
    Blas& b = library(t);
    std::lock_guard<std::mutex> lock(b.loading);
    const char* path = t ? threaded : serial;
    if (path && !b.dgemm) b.path = path;
  }
}

bool blasLoaded(bool threaded) {
  Blas& b = library(threaded);
  std::lock_guard<std::mutex> lock(b.loading);
  return b.dgemm != nullptr;
}

}  // namespace dlam
