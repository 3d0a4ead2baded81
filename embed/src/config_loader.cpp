// config_loader.cpp — runs a Lua configuration file in a sandbox and checks its keys.
//
// The chunk runs with a proxy table as its environment: the proxy stays empty, so
// every global assignment goes through its __newindex, which records the line of the
// assignment and stores the value in the real globals table. After the run, every
// global that was not there before (the standard library) must be a known key.
//
// Lua reports errors with longjmp, so the C functions Lua calls here keep no C++
// objects with destructors alive across a Lua call that may raise, and everything
// done outside protected mode uses only API calls that cannot raise (they do not
// allocate).
#include "config_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <lua.hpp>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dlam/error.h"

namespace dlam {
namespace {

constexpr size_t kMemoryLimit = size_t{64} << 20;   // bytes the Lua state may use
constexpr uint64_t kInstructionLimit = 10'000'000;  // Lua VM instructions
constexpr int kHookInterval = 1000;                 // instructions between hook calls
constexpr size_t kMaxFileSize = size_t{16} << 20;
// A short chunk name, so Lua never abbreviates it, and the "config:LINE:" prefix of
// its messages can be recognised and replaced by the real path.
constexpr const char* kChunkName = "=config";
constexpr std::string_view kChunkPrefix = "config:";

constexpr uint64_t kMaxHeapMb = uint64_t{1} << 40;
constexpr uint64_t kMaxStackLimit = 0xffffffffull;
constexpr uint64_t kMaxBlasThreads = 256;
constexpr uint64_t kMaxInstructionLimit = uint64_t(std::numeric_limits<int64_t>::max());

const char* const kKnownKeys[] = {"heap_limit_mb", "stack_limit", "instruction_limit",
                                  "include_path",  "ffi",         "file_io",
                                  "blas_threads"};
const char* const kKnownFfiKeys[] = {"enabled", "libraries"};

struct LoaderState {
  size_t used = 0;
  size_t limit = kMemoryLimit;
  uint64_t hookCalls = 0;
  bool instructionLimitHit = false;
  int errorLine = 0;  // innermost config-chunk line when an error was raised
  std::unordered_map<std::string, int> lines;  // global name -> line of its last assignment
};

LoaderState* stateOf(lua_State* L) {
  void* ud = nullptr;
  lua_getallocf(L, &ud);
  return static_cast<LoaderState*>(ud);
}

// Allocator with a cap, so a config that allocates without end fails with
// "not enough memory" inside Lua instead of exhausting the process.
void* limitedAlloc(void* ud, void* ptr, size_t osize, size_t nsize) {
  auto* st = static_cast<LoaderState*>(ud);
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    std::free(ptr);
    st->used -= old;
    return nullptr;
  }
  if (nsize > old && st->used - old + nsize > st->limit) return nullptr;
  void* p = std::realloc(ptr, nsize);
  if (p) st->used = st->used - old + nsize;
  return p;
}

// The line being executed in the innermost frame of the config chunk (functions
// defined in the file included), starting at stack level `level`; 0 if none.
int chunkLine(lua_State* L, int level) {
  lua_Debug ar;
  for (; lua_getstack(L, level, &ar); ++level) {
    if (!lua_getinfo(L, "Sl", &ar)) break;
    if (ar.currentline > 0 && std::strcmp(ar.source, kChunkName) == 0) return ar.currentline;
  }
  return 0;
}

// Count hook: ends the run after kInstructionLimit instructions. Once the budget is
// spent it fires at every instruction, so a pcall loop cannot swallow the error.
void countHook(lua_State* L, lua_Debug*) {
  LoaderState* st = stateOf(L);
  if (!st->instructionLimitHit && ++st->hookCalls * kHookInterval < kInstructionLimit) return;
  if (!st->instructionLimitHit) {
    st->instructionLimitHit = true;
    lua_sethook(L, countHook, LUA_MASKCOUNT, 1);
  }
  lua_pushliteral(L, "instruction limit");
  lua_error(L);
}

// Message handler of the protected run: remembers where in the file the error was
// raised, for errors whose message carries no position.
int messageHandler(lua_State* L) {
  stateOf(L)->errorLine = chunkLine(L, 1);
  return 1;
}

// Stores value at `valIdx` under key `keyIdx` in the real globals table (upvalue 1)
// and records the line of the assignment.
int storeGlobal(lua_State* L, int keyIdx, int valIdx) {
  lua_pushvalue(L, keyIdx);
  lua_pushvalue(L, valIdx);
  lua_rawset(L, lua_upvalueindex(1));
  if (lua_type(L, keyIdx) != LUA_TSTRING) return 0;
  int line = chunkLine(L, 1);
  size_t len = 0;
  const char* key = lua_tolstring(L, keyIdx, &len);
  bool failed = false;
  try {
    stateOf(L)->lines[std::string(key, len)] = line;
  } catch (...) {
    failed = true;
  }
  if (failed) {
    lua_pushliteral(L, "not enough memory");
    return lua_error(L);
  }
  return 0;
}

// __newindex of the environment proxy: (proxy, key, value).
int proxyNewIndex(lua_State* L) { return storeGlobal(L, 2, 3); }

// rawset(t, k, v) that redirects writes to the proxy (upvalue 2) into the globals
// table, so the proxy stays empty and keeps seeing every assignment.
int safeRawset(lua_State* L) {
  if (lua_rawequal(L, 1, lua_upvalueindex(2))) {
    luaL_checkany(L, 3);
    storeGlobal(L, 2, 3);
    lua_settop(L, 1);
    return 1;
  }
  lua_pushvalue(L, lua_upvalueindex(3));  // the original rawset
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

// load(chunk [, chunkname [, mode [, env]]]) accepting text chunks only (binary
// chunks can crash the interpreter), with the proxy as the default environment.
int safeLoad(lua_State* L) {
  bool hasEnv = lua_gettop(L) >= 4;
  lua_settop(L, 4);
  lua_pushvalue(L, lua_upvalueindex(1));  // 5: the original load
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushliteral(L, "t");
  lua_pushvalue(L, hasEnv ? 4 : lua_upvalueindex(2));
  lua_call(L, 4, LUA_MULTRET);
  return lua_gettop(L) - 4;
}

// setmetatable(t, mt) refusing __gc: Lua runs finalizers with hooks off, so a
// finalizer could loop forever past the instruction limit.
int safeSetmetatable(lua_State* L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    bool hasGc = lua_rawget(L, 2) != LUA_TNIL;
    lua_pop(L, 1);
    if (hasGc) return luaL_error(L, "__gc metamethods are not allowed in a configuration file");
  }
  lua_pushvalue(L, lua_upvalueindex(1));  // the original setmetatable
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

// Runs in protected mode: opens the safe libraries, builds the proxy environment.
// Returns (globals, proxy).
int setupState(lua_State* L) {
  luaL_requiref(L, LUA_GNAME, luaopen_base, 1);
  luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 1);
  luaL_requiref(L, LUA_MATHLIBNAME, luaopen_math, 1);
  luaL_requiref(L, LUA_TABLIBNAME, luaopen_table, 1);
  lua_settop(L, 0);

  lua_pushglobaltable(L);  // 1: globals
  lua_newtable(L);         // 2: proxy
  lua_newtable(L);         // 3: its metatable
  lua_pushvalue(L, 1);
  lua_setfield(L, 3, "__index");
  lua_pushvalue(L, 1);
  lua_pushcclosure(L, proxyNewIndex, 1);
  lua_setfield(L, 3, "__newindex");
  lua_pushboolean(L, 0);
  lua_setfield(L, 3, "__metatable");  // getmetatable/setmetatable on _G are refused
  lua_setmetatable(L, 2);

  for (const char* name : {"dofile", "loadfile", "require"}) {
    lua_pushnil(L);
    lua_setfield(L, 1, name);
  }
  lua_getfield(L, 1, "load");
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, safeLoad, 2);
  lua_setfield(L, 1, "load");

  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_getfield(L, 1, "rawset");
  lua_pushcclosure(L, safeRawset, 3);
  lua_setfield(L, 1, "rawset");

  lua_getfield(L, 1, "setmetatable");
  lua_pushcclosure(L, safeSetmetatable, 1);
  lua_setfield(L, 1, "setmetatable");

  lua_pushvalue(L, 2);
  lua_setfield(L, 1, "_G");
  return 2;
}

std::string readFile(const std::string& path) {
  auto fail = [&](const std::string& why) -> std::string {
    throw Error(ErrorKind::Config, "cannot open configuration file: " + why, path);
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) return fail(std::strerror(errno));
  if (S_ISDIR(sb.st_mode)) return fail(std::strerror(EISDIR));
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(std::strerror(errno));
    }
    if (n == 0) break;
    text.append(buf, size_t(n));
    if (text.size() > kMaxFileSize)
      throw Error(ErrorKind::Config, "configuration file is too large (over 16 MB)", path);
  }
  return text;
}

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The source lines of the config file, to point messages at the key itself: Lua
// only tells which line an assignment ended on (the last line of a multi-line
// table constructor), not where its key is.
class SourceLines {
 public:
  explicit SourceLines(std::string_view text) {
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t end = text.find('\n', pos);
      std::string_view row =
          text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
      size_t comment = row.find("--");
      lines_.push_back(comment == std::string_view::npos ? row : row.substr(0, comment));
      if (end == std::string_view::npos) break;
      pos = end + 1;
    }
  }

  // Column (1-based) of `token` as a whole word on `line`, optionally only where it
  // is followed by `=` (an assignment, not `==`); 0 if absent.
  uint32_t column(int line, std::string_view token, bool assigned) const {
    if (line <= 0 || size_t(line) > lines_.size() || token.empty()) return 0;
    std::string_view row = lines_[size_t(line) - 1];
    for (size_t at = row.find(token); at != std::string_view::npos; at = row.find(token, at + 1)) {
      size_t after = at + token.size();
      if (at > 0 && isNameChar(row[at - 1])) continue;
      if (after < row.size() && isNameChar(row[after])) continue;
      if (assigned) {
        while (after < row.size() && (row[after] == ' ' || row[after] == '\t')) ++after;
        if (after >= row.size() || row[after] != '=' ||
            (after + 1 < row.size() && row[after + 1] == '='))
          continue;
      }
      return uint32_t(at + 1);
    }
    return 0;
  }

  // Where `key = ...` starts, searching back from `line` (where it ended), within
  // the lines not before `floor`; {line, 1} when not found.
  SrcLoc assignment(int line, std::string_view key, int floor = 0) const {
    if (line <= 0) return {};
    if (floor <= 0) floor = std::max(1, line - kSearchSpan);
    for (int l = line; l >= floor; --l)
      if (uint32_t col = column(l, key, true)) return {uint32_t(l), col};
    if (uint32_t col = column(line, key, false)) return {uint32_t(line), col};
    return {uint32_t(line), 1};
  }

  static constexpr int kSearchSpan = 200;

 private:
  std::vector<std::string_view> lines_;
};

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diag = up;
    }
  }
  return row[b.size()];
}

template <size_t N>
std::string suggestion(std::string_view key, const char* const (&known)[N],
                       const char* prefix = "") {
  for (const char* k : known)
    if (size_t d = editDistance(key, k); d <= 2 && d * 3 <= key.size())
      return std::string(" (did you mean '") + prefix + k + "'?)";
  return {};
}

std::string formatNumber(lua_State* L, int idx) {
  char buf[64];
  if (lua_isinteger(L, idx))
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(lua_tointeger(L, idx)));
  else
    std::snprintf(buf, sizeof buf, "%.14g", static_cast<double>(lua_tonumber(L, idx)));
  return buf;
}

// How a value is described after "got": its type, or the number itself.
std::string describe(lua_State* L, int idx) {
  if (lua_type(L, idx) == LUA_TNUMBER) return formatNumber(L, idx);
  return lua_typename(L, lua_type(L, idx));
}

// How a non-name key is shown in a message: ffi[1], [true], ...
std::string describeKey(lua_State* L, int idx, const std::string& parent) {
  int t = lua_type(L, idx);
  std::string inner = t == LUA_TNUMBER ? formatNumber(L, idx) : std::string(lua_typename(L, t));
  return parent + "[" + inner + "]";
}

struct Issue {
  SrcLoc loc;
  std::string message;
};

class Validator {
 public:
  Validator(lua_State* L, const SourceLines& source, const LoaderState& st)
      : L(L), source_(source), st_(st) {}

  std::vector<Issue> issues;

  int lineOf(const std::string& key) const {
    auto it = st_.lines.find(key);
    return it == st_.lines.end() ? 0 : it->second;
  }
  void report(SrcLoc loc, std::string message) { issues.push_back({loc, std::move(message)}); }

  // An integer in [minimum, maximum] at stack index idx.
  std::optional<uint64_t> integer(int idx, const std::string& key, SrcLoc loc, uint64_t minimum,
                                  uint64_t maximum, const char* what) {
    if (lua_type(L, idx) == LUA_TNUMBER) {
      bool integral = true, negative = false, tooLarge = false;
      uint64_t value = 0;
      if (lua_isinteger(L, idx)) {
        lua_Integer i = lua_tointeger(L, idx);
        negative = i < 0;
        if (!negative) value = uint64_t(i), tooLarge = value > maximum;
      } else {
        double d = lua_tonumber(L, idx);
        integral = std::isfinite(d) && std::floor(d) == d;
        negative = d < 0;
        if (integral && !negative) {
          tooLarge = !(d < 18446744073709551616.0) || uint64_t(d) > maximum;
          if (!tooLarge) value = uint64_t(d);
        }
      }
      if (integral && !negative && tooLarge) {
        report(loc, "'" + key + "' is too large (at most " + std::to_string(maximum) + "), got " +
                        describe(L, idx));
        return std::nullopt;
      }
      if (integral && !negative && value >= minimum) return value;
    }
    report(loc, "'" + key + "' must be " + what + ", got " + describe(L, idx));
    return std::nullopt;
  }

  // An array of strings at stack index idx (a table with keys 1..n, no holes).
  std::optional<std::vector<std::string>> strings(int idx, const std::string& key, SrcLoc loc) {
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) != LUA_TTABLE) {
      report(loc, "'" + key + "' must be an array of strings, got " + describe(L, idx));
      return std::nullopt;
    }
    lua_Integer count = 0, maxKey = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      if (!lua_isinteger(L, -2) || lua_tointeger(L, -2) < 1) {
        std::string k = lua_type(L, -2) == LUA_TSTRING
                            ? "'" + std::string(lua_tostring(L, -2)) + "'"
                            : describeKey(L, -2, "");
        lua_pop(L, 2);
        report(loc, "'" + key + "' must be an array of strings, but has the key " + k);
        return std::nullopt;
      }
      ++count;
      maxKey = std::max(maxKey, lua_tointeger(L, -2));
      lua_pop(L, 1);
    }
    if (maxKey != count) {
      report(loc, "'" + key + "' must be an array of strings without holes");
      return std::nullopt;
    }
    std::vector<std::string> out;
    for (lua_Integer i = 1; i <= count; ++i) {
      lua_rawgeti(L, idx, i);
      if (lua_type(L, -1) != LUA_TSTRING) {
        report(loc,
               "'" + key + "[" + std::to_string(i) + "]' must be a string, got " + describe(L, -1));
        lua_pop(L, 1);
        return std::nullopt;
      }
      size_t len = 0;
      const char* s = lua_tolstring(L, -1, &len);
      out.emplace_back(s, len);
      lua_pop(L, 1);
      if (out.back().find('\0') != std::string::npos) {
        report(loc, "'" + key + "[" + std::to_string(i) + "]' must not contain a NUL character");
        return std::nullopt;
      }
    }
    return out;
  }

  void ffi(int idx, Config& cfg) {
    idx = lua_absindex(L, idx);
    int endLine = lineOf("ffi");
    SrcLoc loc = source_.assignment(endLine, "ffi");
    if (lua_type(L, idx) != LUA_TTABLE) {
      report(loc, "'ffi' must be a table, got " + describe(L, idx));
      return;
    }
    // Nested keys are located between the start and the end of `ffi = {...}`.
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      if (lua_type(L, -2) != LUA_TSTRING) {
        report(loc, "unknown configuration key " + describeKey(L, -2, "ffi"));
      } else {
        std::string name = lua_tostring(L, -2);
        SrcLoc at = endLine > 0 ? source_.assignment(endLine, name, int(loc.line)) : SrcLoc{};
        if (name == "enabled") {
          if (lua_type(L, -1) == LUA_TBOOLEAN)
            cfg.ffiEnabled = lua_toboolean(L, -1);
          else
            report(at, "'ffi.enabled' must be a boolean, got " + describe(L, -1));
        } else if (name == "libraries") {
          if (auto libs = strings(-1, "ffi.libraries", at)) cfg.ffiLibraries = std::move(*libs);
        } else {
          report(at, "unknown configuration key 'ffi." + name + "'" +
                         suggestion(name, kKnownFfiKeys, "ffi."));
        }
      }
      lua_pop(L, 1);
    }
  }

  // Checks every global of the table at globalsIdx that is not a standard one.
  void run(int globalsIdx, const std::unordered_set<std::string>& standard, Config& cfg) {
    lua_pushnil(L);
    while (lua_next(L, globalsIdx)) {
      if (lua_type(L, -2) != LUA_TSTRING) {
        report({}, "unknown configuration key " + describeKey(L, -2, ""));
        lua_pop(L, 1);
        continue;
      }
      std::string name = lua_tostring(L, -2);
      if (standard.count(name)) {
        lua_pop(L, 1);
        continue;
      }
      SrcLoc loc = source_.assignment(lineOf(name), name);
      if (name == "heap_limit_mb") {
        if (auto v = integer(-1, name, loc, 1, kMaxHeapMb, "a positive integer"))
          cfg.heapLimitMb = *v;
      } else if (name == "stack_limit") {
        if (auto v = integer(-1, name, loc, 1, kMaxStackLimit, "a positive integer"))
          cfg.stackLimit = *v;
      } else if (name == "instruction_limit") {
        if (auto v = integer(-1, name, loc, 0, kMaxInstructionLimit, "a non-negative integer"))
          cfg.instructionLimit = *v;
      } else if (name == "include_path") {
        if (auto v = strings(-1, name, loc)) cfg.includePath = std::move(*v);
      } else if (name == "ffi") {
        ffi(-1, cfg);
      } else if (name == "blas_threads") {
        if (auto v = integer(-1, name, loc, 1, kMaxBlasThreads, "an integer from 1 to 256"))
          cfg.blasThreads = static_cast<uint32_t>(*v);
      } else if (name == "file_io") {
        if (lua_type(L, -1) == LUA_TBOOLEAN)
          cfg.fileIo = lua_toboolean(L, -1);
        else
          report(loc, "'file_io' must be a boolean, got " + describe(L, -1));
      } else {
        report(loc, "unknown configuration key '" + name + "'" + suggestion(name, kKnownKeys));
      }
      lua_pop(L, 1);
    }
  }

 private:
  lua_State* L;
  const SourceLines& source_;
  const LoaderState& st_;
};

// The text of the error object on top of the stack, without raising.
std::string errorText(lua_State* L) {
  switch (lua_type(L, -1)) {
    case LUA_TSTRING: {
      size_t len = 0;
      const char* s = lua_tolstring(L, -1, &len);
      return std::string(s, len);
    }
    case LUA_TNUMBER:
      return formatNumber(L, -1);
    default:
      return std::string("(error object is a ") + lua_typename(L, lua_type(L, -1)) + " value)";
  }
}

[[noreturn]] void throwLuaError(lua_State* L, int status, const LoaderState& st,
                                const std::string& path, std::string_view text) {
  std::string message = errorText(L);
  int line = 0;
  // "config:LINE: message" -> LINE, "message".
  if (message.compare(0, kChunkPrefix.size(), kChunkPrefix) == 0) {
    size_t i = kChunkPrefix.size(), j = i;
    while (j < message.size() && message[j] >= '0' && message[j] <= '9') ++j;
    if (j > i && j + 1 < message.size() && message[j] == ':' && message[j + 1] == ' ') {
      line = std::atoi(message.c_str() + i);
      message.erase(0, j + 2);
    }
  }
  if (st.instructionLimitHit) {
    message = "configuration did not finish within " + std::to_string(kInstructionLimit) +
              " Lua instructions (infinite loop?)";
    line = 0;
  } else if (status == LUA_ERRMEM) {
    message =
        "configuration uses more than " + std::to_string(kMemoryLimit >> 20) + " MB of memory";
  }
  if (line == 0) line = st.errorLine;
  SrcLoc loc = line > 0 ? SrcLoc{uint32_t(line), 1} : SrcLoc{};
  // Syntax errors say "near 'TOKEN'": point at the token when it is on that line.
  size_t near = message.rfind("near '");
  if (line > 0 && near != std::string::npos && message.back() == '\'') {
    std::string token = message.substr(near + 6, message.size() - near - 7);
    if (!token.empty() && isNameChar(token[0]) && isNameChar(token.back()))
      if (uint32_t col = SourceLines(text).column(line, token, false)) loc.col = col;
  }
  throw Error(ErrorKind::Config, message, path, loc);
}

}  // namespace

void loadConfigFile(const std::string& path, Config& cfg) {
  std::string text = readFile(path);

  LoaderState st;
  struct StateCloser {
    lua_State* L;
    ~StateCloser() {
      if (L) lua_close(L);
    }
  } closer{lua_newstate(limitedAlloc, &st)};
  lua_State* L = closer.L;
  if (!L) throw Error(ErrorKind::Config, "not enough memory to read the configuration", path);

  lua_pushcfunction(L, setupState);
  if (int status = lua_pcall(L, 0, 2, 0); status != LUA_OK)
    throwLuaError(L, status, st, path, text);
  const int globalsIdx = 1, proxyIdx = 2;

  std::unordered_set<std::string> standard;
  lua_pushnil(L);
  while (lua_next(L, globalsIdx)) {
    if (lua_type(L, -2) == LUA_TSTRING) standard.insert(lua_tostring(L, -2));
    lua_pop(L, 1);
  }

  lua_pushcfunction(L, messageHandler);
  const int handlerIdx = lua_gettop(L);
  if (int status = luaL_loadbufferx(L, text.data(), text.size(), kChunkName, "t"); status != LUA_OK)
    throwLuaError(L, status, st, path, text);
  lua_pushvalue(L, proxyIdx);
  lua_setupvalue(L, -2, 1);  // the chunk's _ENV
  // The hook stays set until lua_close, so finalizers (__gc) are bounded too.
  lua_sethook(L, countHook, LUA_MASKCOUNT, kHookInterval);
  if (int status = lua_pcall(L, 0, 0, handlerIdx); status != LUA_OK)
    throwLuaError(L, status, st, path, text);
  lua_settop(L, proxyIdx);

  Config result = cfg;
  SourceLines source(text);
  Validator validator(L, source, st);
  validator.run(globalsIdx, standard, result);
  if (!validator.issues.empty()) {
    // Report the first problem in the file; those without a line come last.
    auto key = [](const Issue& i) {
      return std::pair(i.loc.line == 0 ? UINT32_MAX : i.loc.line, i.loc.col);
    };
    auto first = std::min_element(validator.issues.begin(), validator.issues.end(),
                                  [&](const Issue& a, const Issue& b) { return key(a) < key(b); });
    throw Error(ErrorKind::Config, first->message, path, first->loc);
  }
  cfg = std::move(result);
}

}  // namespace dlam
