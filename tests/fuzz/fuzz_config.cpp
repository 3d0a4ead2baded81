// fuzz_config.cpp — the Lua configuration loader (embed/src/config_loader.cpp) on
// arbitrary files: the input is written to a file and read with dlam::loadConfigFile.
//
// Allowed: success, with every setting in its documented range; or a dlam::Error of
// kind Config naming the file, with a message and a line, and the Config left exactly
// as it was. Not allowed: anything else escaping, a crash, a sanitizer report, a hang
// (the loader's Lua instruction budget and memory cap must stop every chunk).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "config_loader.h"
#include "dlam/config.h"
#include "fuzz_common.h"

namespace {

using dlam::fuzz::fail;

// One file per process, rewritten for every input.
const std::string& scratchPath() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string p = std::string(dir && *dir ? dir : "/tmp") + "/dlam-fuzz-config-XXXXXX";
    int fd = mkstemp(p.data());
    if (fd < 0) fail("cannot make a scratch file");
    close(fd);
    std::atexit([] { std::remove(scratchPath().c_str()); });
    return p;
  }();
  return path;
}

bool same(const dlam::Config& a, const dlam::Config& b) {
  return a.heapLimitMb == b.heapLimitMb && a.stackLimit == b.stackLimit &&
         a.instructionLimit == b.instructionLimit && a.includePath == b.includePath &&
         a.ffiEnabled == b.ffiEnabled && a.ffiLibraries == b.ffiLibraries && a.fileIo == b.fileIo;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratchPath();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail("cannot write the scratch file");
  if (size && std::fwrite(data, 1, size, f) != size) fail("cannot write the scratch file");
  std::fclose(f);
  dlam::Config cfg;
  cfg.heapLimitMb = 77;  // not the defaults: a failed load must leave these
  cfg.includePath = {"a", "b"};
  const dlam::Config before = cfg;
  try {
    dlam::loadConfigFile(path, cfg);
  } catch (const dlam::Error& e) {
    if (e.kind != dlam::ErrorKind::Config)
      fail(std::string("a ") + dlam::fuzz::kindName(e.kind) + " error: " + e.message);
    if (e.message.empty()) fail("a config error without a message");
    if (e.file != path) fail("a config error naming '" + e.file + "': " + e.message);
    if (!same(cfg, before)) fail("a failed load changed the config: " + e.message);
    return 0;
  }
  if (cfg.heapLimitMb < 1 || cfg.heapLimitMb > (uint64_t{1} << 40))
    fail("heap_limit_mb out of range: " + std::to_string(cfg.heapLimitMb));
  if (cfg.stackLimit < 1 || cfg.stackLimit > 0xffffffffull)
    fail("stack_limit out of range: " + std::to_string(cfg.stackLimit));
  if (cfg.instructionLimit > uint64_t(INT64_MAX)) fail("instruction_limit out of range");
  return 0;
}
