// config_test.cpp — the Lua configuration loader (embed/src/config_loader.cpp).
#include "dlam/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include "config_loader.h"
#include "dlam/error.h"

namespace {

using dlam::Config;
using dlam::Error;
using dlam::ErrorKind;

// A temporary directory holding the config files of one test.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dlam_config_test_XXXXXX";
    const char* d = mkdtemp(tmpl);
    if (!d) throw std::runtime_error("mkdtemp failed");
    dir_ = d;
  }
  ~TempDir() {
    for (const auto& f : files_) unlink(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string write(const std::string& text, const std::string& name = "config.lua") {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    files_.push_back(path);
    return path;
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::string> files_;
};

Config load(const std::string& text) {
  TempDir tmp;
  Config cfg;
  dlam::loadConfigFile(tmp.write(text), cfg);
  return cfg;
}

// Loads `text`, expecting a configuration error; returns it.
Error loadError(const std::string& text, std::string* pathOut = nullptr) {
  TempDir tmp;
  std::string path = tmp.write(text);
  if (pathOut) *pathOut = path;
  Config cfg;
  try {
    dlam::loadConfigFile(path, cfg);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind, ErrorKind::Config);
    EXPECT_EQ(e.file, path);
    return e;
  }
  ADD_FAILURE() << "no error for config:\n" << text;
  return Error(ErrorKind::Api, "no error");
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Config, ValidFullConfig) {
  Config cfg = load(R"(-- a full configuration
heap_limit_mb     = 256
stack_limit       = 5000
instruction_limit = 1e6     -- an integral float is an integer
include_path      = { ".", "lib", "/usr/share/dlam" }
ffi = { enabled = true, libraries = { "libm.so.6", "libc.so.6" } }
)");
  EXPECT_EQ(cfg.heapLimitMb, 256u);
  EXPECT_EQ(cfg.stackLimit, 5000u);
  EXPECT_EQ(cfg.instructionLimit, 1000000u);
  EXPECT_EQ(cfg.includePath, (std::vector<std::string>{".", "lib", "/usr/share/dlam"}));
  EXPECT_TRUE(cfg.ffiEnabled);
  ASSERT_TRUE(cfg.ffiLibraries.has_value());
  EXPECT_EQ(*cfg.ffiLibraries, (std::vector<std::string>{"libm.so.6", "libc.so.6"}));
  EXPECT_FALSE(cfg.sandbox);
}

TEST(Config, EmptyFileKeepsValues) {
  TempDir tmp;
  Config cfg;
  cfg.ffiEnabled = true;
  cfg.heapLimitMb = 77;
  dlam::loadConfigFile(tmp.write("-- nothing\n"), cfg);
  EXPECT_TRUE(cfg.ffiEnabled);
  EXPECT_EQ(cfg.heapLimitMb, 77u);
  EXPECT_EQ(cfg.stackLimit, Config{}.stackLimit);
  EXPECT_FALSE(cfg.ffiLibraries.has_value());
}

TEST(Config, FfiCanBeTurnedOffAndLibrariesNilMeansAny) {
  TempDir tmp;
  Config cfg;
  cfg.ffiEnabled = true;
  dlam::loadConfigFile(tmp.write("ffi = { enabled = false }\n"), cfg);
  EXPECT_FALSE(cfg.ffiEnabled);
  EXPECT_FALSE(cfg.ffiLibraries.has_value());
  dlam::loadConfigFile(tmp.write("ffi = { libraries = {} }\n", "b.lua"), cfg);
  ASSERT_TRUE(cfg.ffiLibraries.has_value());
  EXPECT_TRUE(cfg.ffiLibraries->empty());
}

TEST(Config, LuaCodeLocalsAndTemporariesAreAllowed) {
  Config cfg = load(R"(
local base = 2
local function mb(x) return x * 64 end
heap_limit_mb = mb(base)                        -- 128
stack_limit = math.floor(10.5) * 100            -- 1000
tmp = { "a", "b" }
include_path = {}
for _, p in ipairs(tmp) do table.insert(include_path, string.upper(p)) end
tmp = nil                                        -- a global set back to nil is gone
load("instruction_limit = 42")()
)");
  EXPECT_EQ(cfg.heapLimitMb, 128u);
  EXPECT_EQ(cfg.stackLimit, 1000u);
  EXPECT_EQ(cfg.includePath, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(cfg.instructionLimit, 42u);
}

TEST(Config, InstructionLimitZeroIsAllowed) {
  Config cfg = load("instruction_limit = 0\n");
  EXPECT_EQ(cfg.instructionLimit, 0u);
}

TEST(Config, HeapLimitWrongType) {
  Error e = loadError("\nheap_limit_mb = \"1024\"\n");
  EXPECT_EQ(e.message, "'heap_limit_mb' must be a positive integer, got string");
  EXPECT_EQ(e.loc.line, 2u);
  EXPECT_EQ(e.loc.col, 1u);
}

TEST(Config, HeapLimitNotPositive) {
  EXPECT_EQ(loadError("heap_limit_mb = 0").message,
            "'heap_limit_mb' must be a positive integer, got 0");
  EXPECT_EQ(loadError("heap_limit_mb = -5").message,
            "'heap_limit_mb' must be a positive integer, got -5");
  EXPECT_EQ(loadError("heap_limit_mb = 1.5").message,
            "'heap_limit_mb' must be a positive integer, got 1.5");
  EXPECT_EQ(loadError("heap_limit_mb = 1/0").message,
            "'heap_limit_mb' must be a positive integer, got inf");
  EXPECT_TRUE(
      contains(loadError("heap_limit_mb = 1 << 62").message, "'heap_limit_mb' is too large"));
}

TEST(Config, StackLimitWrongType) {
  Error e = loadError("stack_limit = true");
  EXPECT_EQ(e.message, "'stack_limit' must be a positive integer, got boolean");
  EXPECT_EQ(e.loc.line, 1u);
  EXPECT_EQ(loadError("stack_limit = {}").message,
            "'stack_limit' must be a positive integer, got table");
}

TEST(Config, InstructionLimitWrongType) {
  EXPECT_EQ(loadError("instruction_limit = -1").message,
            "'instruction_limit' must be a non-negative integer, got -1");
  EXPECT_EQ(loadError("instruction_limit = print").message,
            "'instruction_limit' must be a non-negative integer, got function");
}

TEST(Config, IncludePathWrongType) {
  EXPECT_EQ(loadError("include_path = \".\"").message,
            "'include_path' must be an array of strings, got string");
  Error e = loadError("\n\ninclude_path = { \".\", 3 }");
  EXPECT_EQ(e.message, "'include_path[2]' must be a string, got 3");
  EXPECT_EQ(e.loc.line, 3u);
  EXPECT_TRUE(contains(loadError("include_path = { dir = \".\" }").message, "has the key 'dir'"));
  EXPECT_TRUE(
      contains(loadError("include_path = { [1] = \"a\", [3] = \"c\" }").message, "without holes"));
}

TEST(Config, FfiWrongTypes) {
  EXPECT_EQ(loadError("ffi = true").message, "'ffi' must be a table, got boolean");
  Error e = loadError("ffi = {\n  enabled = 1,\n}\n");
  EXPECT_EQ(e.message, "'ffi.enabled' must be a boolean, got 1");
  EXPECT_EQ(e.loc.line, 2u);
  EXPECT_EQ(e.loc.col, 3u);
  EXPECT_EQ(loadError("ffi = { libraries = \"libm.so.6\" }").message,
            "'ffi.libraries' must be an array of strings, got string");
  EXPECT_EQ(loadError("ffi = { libraries = { false } }").message,
            "'ffi.libraries[1]' must be a string, got boolean");
}

// file_io turns the file procedures on or off; anything but a boolean is an error.
TEST(Config, FileIo) {
  EXPECT_FALSE(Config{}.fileIo);
  EXPECT_TRUE(load("file_io = true\n").fileIo);
  TempDir tmp;
  Config cfg;
  cfg.fileIo = true;  // (as the command line sets it before loading)
  dlam::loadConfigFile(tmp.write("file_io = false\n"), cfg);
  EXPECT_FALSE(cfg.fileIo);
  Error e = loadError("stack_limit = 10\n  file_io = \"yes\"\n");
  EXPECT_EQ(e.message, "'file_io' must be a boolean, got string");
  EXPECT_EQ(e.loc.line, 2u);
  EXPECT_EQ(e.loc.col, 3u);
  EXPECT_EQ(loadError("file_oi = true").message,
            "unknown configuration key 'file_oi' (did you mean 'file_io'?)");
}

TEST(Config, UnknownKeyWithLine) {
  std::string path;
  Error e = loadError("stack_limit = 100\n-- comment\n  heap_limt_mb = 1024\n", &path);
  EXPECT_TRUE(contains(e.message, "unknown configuration key 'heap_limt_mb'")) << e.message;
  EXPECT_TRUE(contains(e.message, "did you mean 'heap_limit_mb'")) << e.message;
  EXPECT_EQ(e.loc.line, 3u);
  EXPECT_EQ(e.loc.col, 3u);
  EXPECT_EQ(e.format().rfind(path + ":3:3: error: unknown configuration key 'heap_limt_mb'", 0), 0u)
      << e.format();
}

TEST(Config, FirstProblemInTheFileIsReported) {
  Error e = loadError("alpha = 1\nstack_limit = 'x'\nbeta = 2\n");
  EXPECT_EQ(e.message, "unknown configuration key 'alpha'");
  EXPECT_EQ(e.loc.line, 1u);
}

TEST(Config, LineIsThatOfTheLastAssignment) {
  Error e = loadError("stack_limit = 10\n\nstack_limit = 'ten'\n");
  EXPECT_EQ(e.loc.line, 3u);
}

TEST(Config, GlobalFunctionIsUnknownKey) {
  Error e = loadError("\nfunction helper() return 1 end\n");
  EXPECT_EQ(e.message, "unknown configuration key 'helper'");
  EXPECT_EQ(e.loc.line, 2u);
}

TEST(Config, AssignmentsThroughGlobalTableAreSeen) {
  Error e = loadError("_G.foo = 1\n");
  EXPECT_EQ(e.message, "unknown configuration key 'foo'");
  EXPECT_EQ(e.loc.line, 1u);
  e = loadError("\nrawset(_G, 'bar', 2)\n");
  EXPECT_EQ(e.message, "unknown configuration key 'bar'");
  EXPECT_EQ(e.loc.line, 2u);
  e = loadError("local function f()\n  baz = 3\nend\nf()\n");
  EXPECT_EQ(e.message, "unknown configuration key 'baz'");
  EXPECT_EQ(e.loc.line, 2u);
}

TEST(Config, NestedUnknownKey) {
  Error e = loadError("heap_limit_mb = 64\nffi = {\n  enabld = true,\n  libraries = nil,\n}\n");
  EXPECT_TRUE(contains(e.message, "unknown configuration key 'ffi.enabld'")) << e.message;
  EXPECT_TRUE(contains(e.message, "did you mean 'ffi.enabled'")) << e.message;
  EXPECT_EQ(e.loc.line, 3u);
  EXPECT_EQ(e.loc.col, 3u);
}

TEST(Config, LuaSyntaxError) {
  Error e = loadError("heap_limit_mb = 64\nstack_limit = = 3\n");
  EXPECT_EQ(e.loc.line, 2u);
  EXPECT_TRUE(contains(e.message, "unexpected symbol")) << e.message;
  EXPECT_FALSE(contains(e.message, "config:")) << e.message;
  Error eof = loadError("ffi = {\n");
  EXPECT_TRUE(contains(eof.message, "<eof>")) << eof.message;
}

TEST(Config, LuaRuntimeError) {
  Error e = loadError("local t = nil\n\nstack_limit = t.depth\n");
  EXPECT_EQ(e.loc.line, 3u);
  EXPECT_TRUE(contains(e.message, "attempt to index a nil value")) << e.message;
  Error boom = loadError("\nerror('boom')\n");
  EXPECT_EQ(boom.message, "boom");
  EXPECT_EQ(boom.loc.line, 2u);
  Error obj = loadError("\n\nerror({})\n");
  EXPECT_TRUE(contains(obj.message, "table")) << obj.message;
  EXPECT_EQ(obj.loc.line, 3u);
}

TEST(Config, InfiniteLoop) {
  auto start = std::chrono::steady_clock::now();
  Error e = loadError("heap_limit_mb = 1\nwhile true do end\n");
  EXPECT_TRUE(contains(e.message, "did not finish")) << e.message;
  EXPECT_EQ(e.loc.line, 2u);
  // pcall cannot swallow the limit
  Error p = loadError("while true do pcall(function() while true do end end) end\n");
  EXPECT_TRUE(contains(p.message, "did not finish")) << p.message;
  Error r = loadError("local function f() return f() end\nf()\n");  // proper tail calls loop too
  EXPECT_TRUE(contains(r.message, "did not finish")) << r.message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(Config, FinalizersAreRefused) {
  // Lua runs __gc with hooks off, where the instruction limit cannot stop it.
  Error e = loadError("setmetatable({}, { __gc = function() while true do end end })\n");
  EXPECT_TRUE(contains(e.message, "__gc")) << e.message;
}

TEST(Config, MemoryHog) {
  Error e = loadError("local s = string.rep('x', 1 << 30)\n");
  EXPECT_TRUE(contains(e.message, "memory")) << e.message;
  Error t = loadError("local t = {}\nfor i = 1, 1e8 do t[i] = i end\n");
  EXPECT_TRUE(contains(t.message, "memory") || contains(t.message, "did not finish")) << t.message;
}

TEST(Config, OnlySafeLibraries) {
  Config cfg = load(R"(
assert(io == nil and os == nil and debug == nil and package == nil and utf8 == nil)
assert(dofile == nil and loadfile == nil and require == nil)
assert(string and math and table and print and pairs)
assert(load(string.dump(function() end)) == nil)   -- no binary chunks
assert(not pcall(setmetatable, _G, nil))
stack_limit = 9
)");
  EXPECT_EQ(cfg.stackLimit, 9u);
  Error e = loadError("dofile('/etc/passwd')");
  EXPECT_TRUE(contains(e.message, "dofile")) << e.message;
}

TEST(Config, MissingFile) {
  Config cfg;
  std::string path = "/nonexistent/dir/dlam.lua";
  try {
    dlam::loadConfigFile(path, cfg);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind, ErrorKind::Config);
    EXPECT_EQ(e.file, path);
    EXPECT_TRUE(contains(e.message, "cannot open")) << e.message;
    EXPECT_TRUE(contains(e.message, "No such file")) << e.message;
  }
  TempDir tmp;
  EXPECT_THROW(dlam::loadConfigFile(tmp.dir(), cfg), Error);  // a directory
}

TEST(Config, ConfigUnchangedOnError) {
  TempDir tmp;
  Config cfg;
  cfg.heapLimitMb = 5;
  EXPECT_THROW(dlam::loadConfigFile(tmp.write("heap_limit_mb = 10\nstack_limit = 'x'\n"), cfg),
               Error);
  EXPECT_EQ(cfg.heapLimitMb, 5u);
}

}  // namespace
